//! The status page's HTML (maud: every value escaped), drawn from the [`Board`]'s last reads:
//! the index of every campaign, one campaign, and the error pages.
//!
//! Invariant: no page shows personal data. A recipient's address or data never reaches a
//! [`Status`] (the page leaves out even the campaign's own sender); free text someone typed —
//! a pause reason, who paused, a name asked for in a URL — goes through
//! [`crate::import::csv::shown`], which shows no value that may be an address; URLs carry
//! campaign ids only.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use maud::{html, Markup, DOCTYPE};

use super::board::{Board, View};
use super::{chart, grouped};
use crate::status::state::State;
use crate::status::{budget, duration, Status};

/// What a path segment may hold as it is; everything else is percent-encoded (RFC 3986's
/// unreserved characters stay).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `/campaigns/{id}` (or `/api/…` with `prefix`), the id percent-encoded: a campaign made
/// before ids had one alphabet may hold a space, `/` or `?`.
pub fn campaign_path(prefix: &str, id: &str) -> String {
    format!(
        "{prefix}/campaigns/{}",
        percent_encoding::utf8_percent_encode(id, SEGMENT)
    )
}

/// `2026-12-07 02:00:00 JST`: a time in the page's zone (`WEB_TIME_ZONE`), with its
/// abbreviation, so nobody has to know which zone the page is in.
pub fn local(t: DateTime<Utc>, zone: Tz) -> String {
    t.with_timezone(&zone)
        .format("%Y-%m-%d %H:%M:%S %Z")
        .to_string()
}

/// `in 4h12m` / `4h12m ago`.
fn relative(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (t - now).num_seconds();
    if s >= 0 {
        format!("in {}", duration(s as f64))
    } else {
        format!("{} ago", duration(-s as f64))
    }
}

/// `just now` / `12s ago`.
fn ago(t: DateTime<Utc>, now: DateTime<Utc>) -> String {
    match (now - t).num_seconds() {
        ..=0 => "just now".into(),
        s => format!("{} ago", duration(s as f64)),
    }
}

/// Free text someone typed (who paused, a name asked for), as a page may show it
/// ([`crate::import::csv::shown`]).
pub fn typed(text: &str, max: usize) -> String {
    crate::shown::shown(text, max).unwrap_or_else(|| "(not shown: it may be an address)".into())
}

fn percent(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// Every page's frame: the head (one stylesheet, one script, both ours), the header, `main`.
fn frame(title: &str, refresh_s: u64, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · campaign-sender" }
                link rel="stylesheet" href="/static/web.css";
                link rel="icon" href="/static/icon.svg" type="image/svg+xml";
                script src="/static/live.js" defer {}
            }
            body data-refresh-s=(refresh_s) {
                a.skip href="#main" { "Skip to the figures" }
                header {
                    nav aria-label="Site" {
                        a.home href="/" { "campaign-sender" }
                        span.muted { " · status" }
                    }
                }
                main #main tabindex="-1" { (body) }
            }
        }
    }
}

fn badge(st: &State) -> Markup {
    html! { span class=(format!("badge {}", st.word().replace(' ', "-"))) { (st.word()) } }
}

/// `812 034 / 1 200 000 settled (67.7 %)` with a bar.
fn progress(s: &Status) -> Markup {
    let total = s.progress.counts.total;
    let done = s.progress.counts.settled();
    let label = format!(
        "{} / {} settled ({:.1} %)",
        grouped(done),
        grouped(total),
        percent(done, total)
    );
    html! {
        div.progress {
            progress max=(total.max(1)) value=(done) aria-label=(format!("{}: {label}", s.campaign_id)) {}
            span.figure data-settled=(done) { (label) }
        }
    }
}

/// `498/s of 500/s` (the key's limit in force); `—` for a campaign that is not sending.
fn rate(s: &Status) -> String {
    if s.waits_for.is_some() {
        return "—".into();
    }
    let limit = s.limits.iter().find_map(|k| k.limit_per_s);
    match limit {
        Some(l) => format!("{:.0}/s of {l:.0}/s", s.rate_per_s),
        None => format!("{:.0}/s", s.rate_per_s),
    }
}

/// The ETA as the index and the campaign page show it: whole send windows when there is one.
fn eta(s: &Status) -> String {
    if s.done {
        return "done".into();
    }
    if let Some(w) = &s.window {
        return match &w.finish {
            Some(f) => format!(
                "about {} ({} window{})",
                f.at.with_timezone(&w.send_window.tz)
                    .format("%a %b %-d %H:%M %Z"),
                f.windows,
                if f.windows == 1 { "" } else { "s" }
            ),
            None => "unknown: nothing delivered yet".into(),
        };
    }
    if let Some(w) = &s.waits_for {
        return format!("none: not sending, waits for {w}");
    }
    match s.eta_s {
        Some(e) => format!("{} at this rate", duration(e)),
        None => "unknown: nothing delivered in the last minute".into(),
    }
}

/// The index: every campaign, those stopped by something first.
pub fn index(board: &Board, views: &[View], now: DateTime<Utc>) -> Markup {
    frame(
        "Campaigns",
        board.refresh.as_secs(),
        html! {
            h1 { "Campaigns" }
            (read_at(views.iter().map(|v| v.status.at).min(), now, board.zone))
            @if views.is_empty() {
                p.empty { "No campaign yet: `campaign-sender import --campaign NAME FILE` makes one." }
            } @else {
                table #campaigns {
                    caption.visually-hidden { "Every campaign: state, progress, rate and ETA" }
                    thead { tr {
                        th scope="col" { "Campaign" } th scope="col" { "State" }
                        th scope="col" { "Progress" } th scope="col" { "Rate now" } th scope="col" { "ETA" }
                    } }
                    tbody {
                        @for v in views {
                            @let s = &v.status;
                            @let st = State::of(s);
                            tr {
                                th scope="row" { a href=(campaign_path("", &s.campaign_id)) { (s.campaign_id) } }
                                td { (badge(&st)) (state_detail(&st, now, board.zone)) }
                                td { (progress(s)) }
                                td.num { (rate(s)) }
                                td { (eta(s)) }
                            }
                        }
                    }
                }
            }
        },
    )
}

fn read_at(at: Option<DateTime<Utc>>, now: DateTime<Utc>, zone: Tz) -> Markup {
    html! {
        p.muted #read-at {
            @if let Some(at) = at { "Figures read " (ago(at, now)) " (" (local(at, zone)) "); this page refreshes itself." }
        }
    }
}

/// The state's detail in a few words, for the index.
fn state_detail(st: &State, now: DateTime<Utc>, zone: Tz) -> Markup {
    let text = match st {
        State::Paused { by, .. } => format!(" by {}", typed(by, 40)),
        State::OutsideWindow { opens_at } => format!(" until {}", relative(*opens_at, now)),
        State::AtQuota { until: Some(u) } => format!(" until {}", relative(*u, now)),
        State::Archived { at: Some(a) } => {
            format!(" {}", a.with_timezone(&zone).format("%Y-%m-%d"))
        }
        _ => String::new(),
    };
    html! { span.detail { (text) } }
}

/// The banner of a campaign that something stops, with the command that lifts it.
fn banner(s: &Status, st: &State, now: DateTime<Utc>, zone: Tz) -> Markup {
    let id = &s.campaign_id;
    match st {
        State::Paused { by, at, reason } => html! {
            div.banner.paused #banner {
                strong { "Paused" } " by " (typed(by, 40)) " since " (local(*at, zone))
                @if let Some(r) = reason { ": " (crate::shown::quoted(r)) }
                ". " code { "campaign-sender resume --campaign " (id) } " lifts it."
            }
        },
        State::Refused { advice } => html! {
            div.banner.refused #banner { strong { "Refused by the provider" } ": " (advice) }
        },
        State::AtQuota { until } => html! {
            div.banner.quota #banner {
                strong { "A sending quota is used up" }
                @match until {
                    Some(u) => { ": it frees " (relative(*u, now)) " (" (local(*u, zone)) "), by itself." }
                    None => { ": it frees as the last 24 hours' sends age out." }
                }
            }
        },
        _ => html! {},
    }
}

/// One campaign: state, progress, counts, charts, funnel, reasons, what waits for an operator.
pub fn campaign(board: &Board, v: &View, now: DateTime<Utc>) -> Markup {
    let s = &v.status;
    let st = State::of(s);
    let c = &s.progress.counts;
    frame(
        &s.campaign_id,
        board.refresh.as_secs(),
        html! {
            p.crumbs { a href="/" { "All campaigns" } }
            h1 { (s.campaign_id) " " (badge(&st)) }
            div #live {
                (banner(s, &st, now, board.zone))
                (read_at(Some(s.at), now, board.zone))
                (progress(s))
                dl.facts {
                    dt { "Rate now" } dd { (rate(s)) " over the last minute (" (grouped(s.progress.sent_last_minute)) " delivered)" }
                    dt { "ETA" } dd { (eta(s)) }
                    @if let Some(w) = &s.window {
                        dt { "Send window" } dd {
                            (w.window) ": " @if w.open { "open, closes " } @else { "closed, opens " }
                            (relative(w.next_change, now))
                        }
                    }
                    dt { "Template" } dd { (typed(&s.template, 80)) }
                    dt { "Weight" } dd { (s.weight) " (its share of the rate limit next to the other campaigns with work)" }
                    dt { "Failure budget" } dd { (budget(s)) }
                }
                h2.visually-hidden { "Rows by state" }
                dl.tiles {
                    @for (label, n, note) in [
                        ("sent", c.sent, None),
                        ("failed", c.failed, None),
                        ("pending", c.pending, Some(format!("{} to retry, {} scheduled",
                            grouped(s.progress.retry_waiting), grouped(s.progress.scheduled)))),
                        ("sending", c.sending, None),
                        ("opted out", c.opted_out, None),
                        ("unconfirmed", c.unconfirmed, None),
                        ("suppressed", c.suppressed, None),
                        ("total", c.total, None),
                    ] {
                        div.tile { dt { (label) } dd { (grouped(n)) @if let Some(n) = note { small { (n) } } } }
                    }
                }
                (unsendable(s, board.zone))
                div.pair {
                    section {
                        h2 { "Delivered over time" }
                        (chart::sent(&v.history, v.history_at, board.zone))
                    }
                    section {
                        h2 { "The rate limit's shares" }
                        @for k in &s.limits {
                            p { (k.limit_line()) }
                            (chart::shares(&k.members, &s.campaign_id, k.limit_per_s))
                        }
                        @if s.limits.is_empty() { p.empty { "No pod has sent for this campaign yet." } }
                    }
                }
                div.trio {
                    (funnel(s))
                    (providers(s))
                    (reputation(s))
                    (reasons("Top failure reasons", &s.failures))
                    (reasons("Waiting to retry, by last answer", &s.retrying))
                    (suppressed(s))
                }
            }
            p.muted { "As JSON (what " code { "status --json" } " prints): "
                a href=(campaign_path("/api", &s.campaign_id)) { (campaign_path("/api", &s.campaign_id)) } }
        },
    )
}

/// `unconfirmed` with since-when and the command that settles them.
fn unsendable(s: &Status, zone: Tz) -> Markup {
    let c = &s.progress.counts;
    html! {
        @if c.unconfirmed > 0 {
            div.banner.unconfirmed #unconfirmed {
                strong { (grouped(c.unconfirmed)) " unconfirmed" }
                @if let Some(t) = s.unconfirmed_since { " since " (local(t, zone)) }
                ": maybe delivered, past the provider's idempotency window. Settle them with "
                code { "campaign-sender resolve --campaign " (s.campaign_id) " --assume-sent" }
                " or " code { "--resend" } " (docs/OPERATIONS.md)."
            }
        }
    }
}

/// `suppressed` rows by the reason their address is listed for.
fn suppressed(s: &Status) -> Markup {
    if s.progress.counts.suppressed == 0 {
        return html! {};
    }
    html! {
        section {
            h2 { "Suppressed, by reason" }
            table.counts { tbody {
                @for b in &s.suppressed { tr { th scope="row" { (b.label.replace('_', " ")) } td.num { (grouped(b.count)) } } }
            } }
        }
    }
}

/// The vendor's events, once any came: each column with its share of the rows sent.
fn funnel(s: &Status) -> Markup {
    if s.funnel.iter().all(|(_, n)| *n == 0) {
        return html! {};
    }
    let sent = s.progress.counts.sent;
    html! { section {
        h2 { "What the provider reported" }
        table.counts.funnel {
            caption.visually-hidden { "The provider's events, by kind" }
            tbody {
                @for (col, n) in &s.funnel {
                    tr {
                        th scope="row" { (col.replace('_', " ")) }
                        td.num { (grouped(*n)) }
                        td.num.muted { (format!("{:.1} % of sent", percent(*n, sent))) }
                    }
                }
            }
        }
    } }
}

/// The campaign by mailbox provider: sent, delivered, bounced, refused for our domain's fault
/// (by cause), complaints — Gmail's shown as "Postmaster Tools", never 0 %.
fn providers(s: &Status) -> Markup {
    use crate::store::event::Family;
    if s.providers.is_empty() {
        return html! {};
    }
    let name = |f: &str| match f.parse::<Family>() {
        Ok(Family::Other) | Err(_) => "Others",
        Ok(f) => f.provider_name(),
    };
    html! { section {
        h2 { "By mailbox provider" }
        table.counts {
            caption.visually-hidden { "Mails sent and what each mailbox provider answered" }
            thead { tr {
                th scope="col" { "provider" } th scope="col" { "sent" } th scope="col" { "delivered" }
                th scope="col" { "bounced" } th scope="col" { "refused (our fault)" } th scope="col" { "complaints" }
            } }
            tbody {
                @for p in &s.providers {
                    tr {
                        th scope="row" { (name(&p.family)) }
                        td.num { (grouped(p.sent)) }
                        td.num { (grouped(p.delivered)) }
                        td.num { (grouped(p.bounced)) }
                        td.num {
                            (grouped(p.refused.iter().map(|(_, n)| n).sum()))
                            @for (cause, n) in &p.refused { br; span.muted { (cause.replace('_', " ")) " " (grouped(*n)) } }
                        }
                        td.num {
                            @match p.complaint_rate {
                                Some(_) => (grouped(p.complaints)),
                                None => span.muted { "Postmaster Tools" },
                            }
                        }
                    }
                }
            }
        }
    } }
}

/// The complaint and hard-bounce rates against the lines the brake holds the campaign to.
fn reputation(s: &Status) -> Markup {
    use crate::store::brake::percent;
    let Some(r) = &s.reputation else {
        return html! {};
    };
    let rows = [
        (
            "complaints",
            r.complaints,
            r.complaint_rate,
            r.complaint_line,
        ),
        ("hard bounces", r.hard_bounces, r.bounce_rate, r.bounce_line),
    ];
    html! { section #lines {
        h2 { "Against the mailbox providers' lines" }
        table.counts {
            caption.visually-hidden { "Complaint and hard-bounce rates, and the lines that pause the campaign" }
            thead { tr { th { "" } td.num { "count" } td.num { "rate" } td.num { "line" } } }
            tbody {
                @for (what, n, rate, line) in rows {
                    tr.over[rate > line && r.sent >= r.min_sent] {
                        th scope="row" { (what) }
                        td.num { (grouped(n)) }
                        td.num { (percent(rate)) }
                        td.num.muted { (percent(line)) }
                    }
                }
            }
        }
        p.muted {
            "of " (grouped(r.sent)) " sent"
            @if r.sent < r.min_sent { "; the brake waits for " (grouped(r.min_sent)) " sent" }
            ". Over a line, the campaign is paused (docs/OPERATIONS.md, “The brake”)."
        }
    } }
}

fn reasons(title: &str, rs: &[crate::store::Reason]) -> Markup {
    if rs.is_empty() {
        return html! {};
    }
    html! { section {
        h2 { (title) }
        table.counts { tbody {
            @for r in rs {
                tr {
                    th scope="row" { @if let Some(st) = r.status { (st) " " } (r.class.replace('_', " ")) }
                    td.num { (grouped(r.count)) }
                }
            }
        } }
    } }
}

/// An error page: what happened and what to do, never a stack trace.
pub fn error(board: &Board, title: &str, what: Markup) -> Markup {
    frame(
        title,
        board.refresh.as_secs(),
        html! {
            p.crumbs { a href="/" { "All campaigns" } }
            h1 { (title) }
            div #live { (what) }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_campaign_shows_no_rate_and_no_eta_at_one() {
        let mut s = Status {
            remaining: 900,
            rate_per_s: 43.0,
            eta_s: Some(21.0),
            ..Status::empty("spring")
        };
        assert_eq!(rate(&s.clone().halted()), "43/s");
        s.paused = Some(crate::store::campaigns::Pause {
            at: Utc::now(),
            by: "ops".into(),
            reason: None,
        });
        let s = s.halted();
        assert_eq!(rate(&s), "—");
        assert_eq!(eta(&s), "none: not sending, waits for `resume`");
    }

    #[test]
    fn typed_text_that_may_be_an_address_is_never_shown() {
        assert_eq!(typed("ops-lead", 40), "ops-lead");
        assert_eq!(
            typed("ann@example.com", 40),
            "(not shown: it may be an address)"
        );
        assert_eq!(typed("a\nb", 40), "a\\nb");
    }

    #[test]
    fn big_numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(1_200_000), "1\u{2009}200\u{2009}000");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(-1000), "-1\u{2009}000");
        assert_eq!(grouped(0), "0");
    }
}
