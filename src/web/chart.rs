//! The status page's charts, drawn on the server as SVG (no script, no chart library): the
//! deliveries over the campaign's life and the fleet's rate shares. Every chart carries its
//! numbers as text too (`<title>` and a caption), so it reads without the picture.

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use maud::{html, Markup};

use crate::store::account::Member;
use crate::store::history::Minute;

/// The most bars a chart draws: minutes are merged into wider buckets beyond that.
pub const MAX_BARS: i64 = 180;
/// Bucket widths a chart may use, in minutes.
const WIDTHS: [i64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440];

const W: f64 = 720.0;
/// The shares chart is narrower: its text stays readable when it fills half a page.
const SHARES_W: f64 = 480.0;
const H: f64 = 180.0;
/// Room for the y axis' labels (left) and the x axis' (bottom).
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 22.0;
/// Room above the plot for the top label.
const TOP: f64 = 10.0;

/// Deliveries over time in buckets of `width` minutes: each bucket's start and its average
/// per minute.
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    pub width_min: i64,
    pub bars: Vec<(DateTime<Utc>, f64)>,
}

/// Merges `minutes` (oldest first) into at most [`MAX_BARS`] buckets of one of [`WIDTHS`],
/// empty ones included so that a pause shows as a gap.
pub fn buckets(minutes: &[Minute]) -> Option<Buckets> {
    let (first, last) = (minutes.first()?.minute, minutes.last()?.minute);
    let span = (last - first).num_minutes() + 1;
    let width = WIDTHS
        .into_iter()
        .find(|w| ceil_div(span, *w) <= MAX_BARS)
        .unwrap_or(ceil_div(span, MAX_BARS));
    let n = ceil_div(span, width) as usize;
    let mut sums = vec![0i64; n];
    for m in minutes {
        sums[((m.minute - first).num_minutes() / width) as usize] += m.sent;
    }
    let bars = sums
        .into_iter()
        .enumerate()
        .map(|(i, sum)| {
            (
                first + Duration::minutes(i as i64 * width),
                sum as f64 / width as f64,
            )
        })
        .collect();
    Some(Buckets {
        width_min: width,
        bars,
    })
}

/// `a / b` rounded up, for positive `a` and `b`.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// A round top for an axis: 1, 2 or 5 times a power of ten, at least `max`.
pub fn nice_top(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|f| f * p)
        .find(|t| *t >= max)
        .unwrap_or(10.0 * p)
}

/// The zone's abbreviation at `t` (`JST`; `CET` or `CEST` by the date).
fn abbr(t: DateTime<Utc>, zone: Tz) -> String {
    t.with_timezone(&zone).format("%Z").to_string()
}

fn label_time(t: DateTime<Utc>, zone: Tz, span_days: bool) -> String {
    let t = t.with_timezone(&zone);
    if span_days {
        t.format("%b %-d %H:%M").to_string()
    } else {
        t.format("%H:%M").to_string()
    }
}

/// Deliveries per minute over the campaign's life, as read at `read_at`, its times in `zone`
/// (`WEB_TIME_ZONE`; the abbreviation is the last bar's).
pub fn sent(minutes: &[Minute], read_at: DateTime<Utc>, zone: Tz) -> Markup {
    let Some(b) = buckets(minutes) else {
        return html! { p.empty { "Nothing delivered yet." } };
    };
    let peak = b.bars.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let top = nice_top(peak);
    let plot_w = W - LEFT;
    let plot_h = H - BOTTOM - TOP;
    let bar_w = plot_w / b.bars.len() as f64;
    let first = b.bars[0].0;
    let end = b.bars[b.bars.len() - 1].0 + Duration::minutes(b.width_min);
    let days = (end - first).num_hours() >= 24;
    let unit = match b.width_min {
        1 => "each minute".to_string(),
        w => format!("per minute, averaged over {w} minutes"),
    };
    let total: i64 = minutes.iter().map(|m| m.sent).sum();
    let last = abbr(end, zone);
    let caption = format!(
        "Mails delivered {unit}, {} to {} {last}: {} in all, at most {:.0} a minute (read at {}).",
        label_time(first, zone, true),
        label_time(end, zone, true),
        super::grouped(total),
        peak,
        read_at.with_timezone(&zone).format("%H:%M:%S %Z")
    );
    html! {
        figure {
            svg.chart viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(caption) {
                title { (caption) }
                @for i in 0..=2 {
                    @let y = TOP + plot_h - plot_h * i as f64 / 2.0;
                    line.grid x1=(LEFT) x2=(W) y1=(y) y2=(y) {}
                    text.axis x=(LEFT - 6.0) y=(y + 4.0) text-anchor="end" {
                        (super::grouped((top * i as f64 / 2.0).round() as i64))
                    }
                }
                @for (i, (at, v)) in b.bars.iter().enumerate() {
                    @let h = plot_h * v / top;
                    rect.bar x=(LEFT + i as f64 * bar_w) y=(TOP + plot_h - h)
                        width=(f64::max(bar_w - 1.0, 0.5)) height=(h) {
                        title { (format!("{} {}: {:.0} a minute", label_time(*at, zone, days), abbr(*at, zone), v)) }
                    }
                }
                text.axis x=(LEFT) y=(H - 4.0) { (label_time(first, zone, days)) }
                text.axis x=(W) y=(H - 4.0) text-anchor="end" { (label_time(end, zone, days)) " " (last) }
            }
            figcaption { (caption) }
        }
    }
}

/// The rate limit's shares: one bar per live pod of the key, this campaign's pods marked.
pub fn shares(members: &[Member], campaign_id: &str, limit_per_s: Option<f64>) -> Markup {
    if members.is_empty() {
        return html! { p.empty { "No pod is sending under this limit now." } };
    }
    let top = limit_per_s
        .unwrap_or(0.0)
        .max(members.iter().map(|m| m.share_per_s).fold(0.0, f64::max))
        .max(1.0);
    let (w, row_h, name_w) = (SHARES_W, 22.0, 150.0);
    let h = row_h * members.len() as f64 + 4.0;
    let bar_room = w - name_w - 70.0;
    let caption = format!(
        "Each live pod's share of the limit{}: {}.",
        limit_per_s
            .map(|l| format!(" of {l:.0}/s"))
            .unwrap_or_default(),
        members
            .iter()
            .map(|m| format!("{} {:.1}/s", m.worker, m.share_per_s))
            .collect::<Vec<_>>()
            .join(", ")
    );
    html! {
        figure {
            svg.chart viewBox=(format!("0 0 {w} {h}")) role="img" aria-label=(caption) {
                title { (caption) }
                @for (i, m) in members.iter().enumerate() {
                    @let y = i as f64 * row_h + 2.0;
                    @let bar = bar_room * m.share_per_s / top;
                    @let ours = m.campaign_id == campaign_id;
                    text.axis x=(name_w - 8.0) y=(y + 15.0) text-anchor="end" {
                        (crate::shown::escaped_cut(&m.worker, 20))
                    }
                    rect class=(if ours { "bar" } else { "bar other" }) x=(name_w) y=(y + 3.0)
                        width=(f64::max(bar, 0.5)) height=(row_h - 6.0) {
                        title { (format!("{}: {:.1}/s ({})", m.worker, m.share_per_s,
                            if ours { "this campaign" } else { m.campaign_id.as_str() })) }
                    }
                    text.axis x=(name_w + bar + 6.0) y=(y + 15.0) { (format!("{:.1}/s", m.share_per_s)) }
                }
            }
            figcaption { (caption) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(min: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_780_000_000 - 1_780_000_000 % 60, 0).unwrap()
            + Duration::minutes(min)
    }

    #[test]
    fn a_long_campaign_is_drawn_in_wider_buckets_with_its_gaps_kept() {
        let short: Vec<Minute> = (0..30)
            .map(|i| Minute {
                minute: at(i),
                sent: 100,
            })
            .collect();
        let b = buckets(&short).unwrap();
        assert_eq!((b.width_min, b.bars.len()), (1, 30));
        // Two windows a day apart: 2 days of minutes merge into 30-minute buckets; the night
        // between them stays empty.
        let mut days: Vec<Minute> = (0..60)
            .map(|i| Minute {
                minute: at(i),
                sent: 30_000,
            })
            .collect();
        days.extend((0..60).map(|i| Minute {
            minute: at(2 * 1440 + i),
            sent: 30_000,
        }));
        let b = buckets(&days).unwrap();
        assert!(b.bars.len() as i64 <= MAX_BARS, "{}", b.bars.len());
        assert_eq!(b.width_min, 30);
        assert_eq!(b.bars[0], (at(0), 30_000.0));
        assert_eq!(b.bars[5].1, 0.0);
        let sum: f64 = b.bars.iter().map(|(_, v)| v * b.width_min as f64).sum();
        assert_eq!(sum, 120.0 * 30_000.0, "every delivery is in a bucket");
        assert!(buckets(&[]).is_none());
    }

    /// 17:00–17:10 UTC on 6 December is 02:00–02:10 on the 7th in Tokyo: the axis, the
    /// caption and every bar read in the page's zone and say which it is.
    #[test]
    fn the_chart_reads_in_the_pages_time_zone() {
        let start = DateTime::parse_from_rfc3339("2026-12-06T17:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let minutes: Vec<Minute> = (0..10)
            .map(|i| Minute {
                minute: start + Duration::minutes(i),
                sent: 100,
            })
            .collect();
        let svg = sent(&minutes, start + Duration::minutes(11), Tz::Asia__Tokyo).into_string();
        assert!(svg.contains("Dec 7 02:00 to Dec 7 02:10 JST"), "{svg}");
        assert!(svg.contains("read at 02:11:00 JST"), "{svg}");
        assert!(svg.contains(">02:10 JST<"), "{svg}");
        assert!(svg.contains("02:03 JST: 100 a minute"), "{svg}");
        assert!(!svg.contains("UTC"), "{svg}");
        let svg = sent(&minutes, start, Tz::UTC).into_string();
        assert!(svg.contains("Dec 6 17:00 to Dec 6 17:10 UTC"), "{svg}");
    }

    #[test]
    fn an_axis_ends_on_a_round_number_at_or_above_the_peak() {
        assert_eq!(nice_top(30_000.0), 50_000.0);
        assert_eq!(nice_top(29_940.0), 50_000.0);
        assert_eq!(nice_top(100.0), 100.0);
        assert_eq!(nice_top(101.0), 200.0);
        assert_eq!(nice_top(0.0), 1.0);
    }
}
