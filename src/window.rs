//! A campaign's send window: a span of local wall-clock time in a time zone (`22:00-06:00` in
//! `Asia/Tokyo`), every day; it may wrap midnight. Outside it no pod claims a row or starts a
//! request. Pure: the caller passes the time, so every rule here is unit-tested, DST changes
//! included.
//!
//! Local times that do not exist (the hour skipped when clocks go forward) resolve to the first
//! instant after the gap; local times that happen twice (the hour repeated when clocks go back)
//! resolve to the first of the two. So a window is never empty and never ends before it starts,
//! and on those two nights it is an hour shorter or longer — the wall clock's hours, which is
//! what "send between 22:00 and 06:00 local time" means.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;

/// A daily span of local time in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWindow {
    pub start: NaiveTime,
    pub end: NaiveTime,
    pub tz: Tz,
}

/// Whether a window is open at a given instant, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowState {
    Open { closes_at: DateTime<Utc> },
    Closed { opens_at: DateTime<Utc> },
}

/// The two local times of a window, as an operator writes them: `HH:MM-HH:MM` (seconds allowed:
/// `HH:MM:SS-HH:MM:SS`).
pub fn parse_span(v: &str) -> Result<(NaiveTime, NaiveTime), String> {
    let bad = || format!("'{v}' is not a window: expected HH:MM-HH:MM, e.g. 22:00-06:00");
    let (a, b) = v.split_once('-').ok_or_else(bad)?;
    let time = |s: &str| {
        NaiveTime::parse_from_str(s.trim(), "%H:%M")
            .or_else(|_| NaiveTime::parse_from_str(s.trim(), "%H:%M:%S"))
            .map_err(|_| bad())
    };
    let (start, end) = (time(a)?, time(b)?);
    if start == end {
        return Err(format!(
            "'{v}' starts where it ends: a window of no time (use `--window none` to send at any time)"
        ));
    }
    Ok((start, end))
}

/// `configure --window`: a span of local time, or `none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowArg {
    None,
    Span(NaiveTime, NaiveTime),
}

/// What `configure --window` / `--timezone` make of a campaign's window `before`: `None` keeps
/// it, `Some(None)` removes it, `Some(Some(w))` sets `w`. A span without a zone keeps the old
/// window's zone; a zone alone moves the old span to it. An error says what cannot be honoured
/// (then nothing changes).
pub fn change(
    window: Option<WindowArg>,
    tz: Option<Tz>,
    before: Option<SendWindow>,
) -> Result<Option<Option<SendWindow>>, &'static str> {
    Ok(match (window, tz, before) {
        (Some(WindowArg::None), _, _) => Some(None),
        (Some(WindowArg::Span(start, end)), Some(tz), _) => {
            Some(Some(SendWindow::new(start, end, tz)))
        }
        (Some(WindowArg::Span(start, end)), None, Some(old)) => {
            Some(Some(SendWindow::new(start, end, old.tz)))
        }
        (Some(WindowArg::Span(..)), None, None) => {
            return Err("--window needs --timezone (an IANA name such as Asia/Tokyo)")
        }
        (None, Some(tz), Some(old)) => Some(Some(SendWindow::new(old.start, old.end, tz))),
        (None, Some(_), None) => return Err("--timezone is the send window's: give --window too"),
        (None, None, _) => None,
    })
}

/// A time zone by its IANA name (`Asia/Tokyo`, `Europe/Berlin`, `UTC`).
pub fn parse_tz(v: &str) -> Result<Tz, String> {
    Tz::from_str(v).map_err(|_| {
        format!(
            "'{v}' is not a time zone: expected an IANA name such as Asia/Tokyo or Europe/Berlin"
        )
    })
}

impl SendWindow {
    pub fn new(start: NaiveTime, end: NaiveTime, tz: Tz) -> Self {
        Self { start, end, tz }
    }

    /// The instant a local time on a local date resolves to (see the module docs for gaps and
    /// repeats).
    fn instant(&self, date: NaiveDate, time: NaiveTime) -> DateTime<Utc> {
        let mut local = date.and_time(time);
        // A gap is at most a few hours; step through it a minute at a time.
        for _ in 0..(24 * 60) {
            match self.tz.from_local_datetime(&local) {
                LocalResult::Single(t) => return t.with_timezone(&Utc),
                LocalResult::Ambiguous(first, _) => return first.with_timezone(&Utc),
                LocalResult::None => local += Duration::minutes(1),
            }
        }
        unreachable!("no time zone skips a whole day")
    }

    /// The window that opens on local date `date`: [start, end).
    fn on(&self, date: NaiveDate) -> (DateTime<Utc>, DateTime<Utc>) {
        let end_date = if self.end > self.start {
            date
        } else {
            date.succ_opt().expect("a date after")
        };
        (
            self.instant(date, self.start),
            self.instant(end_date, self.end),
        )
    }

    /// Whether the window is open at `now`, and when it closes or next opens.
    pub fn state_at(&self, now: DateTime<Utc>) -> WindowState {
        let today = now.with_timezone(&self.tz).date_naive();
        let mut next_open = None;
        // Yesterday's window may still be open (it wraps midnight); one of the next two opens.
        for days in -1..=2 {
            let date = today + Duration::days(days);
            let (open, close) = self.on(date);
            if open <= now && now < close {
                return WindowState::Open { closes_at: close };
            }
            if open > now && next_open.is_none() {
                next_open = Some(open);
            }
        }
        WindowState::Closed {
            opens_at: next_open.expect("a daily window opens within two days"),
        }
    }

    /// The windows from `now` on (the rest of the current one first, if open): (from, to) each.
    pub fn upcoming(
        &self,
        now: DateTime<Utc>,
    ) -> impl Iterator<Item = (DateTime<Utc>, DateTime<Utc>)> + '_ {
        let today = now.with_timezone(&self.tz).date_naive();
        (-1..)
            .map(move |days| self.on(today + Duration::days(days)))
            .filter(move |(_, close)| *close > now)
            .map(move |(open, close)| (open.max(now), close))
    }

    /// When `remaining` rows are sent at `rate` per second, sending only inside the window: the
    /// finishing instant and how many windows (the current one counted) it takes. `None` when
    /// nothing moves.
    pub fn finish(
        &self,
        now: DateTime<Utc>,
        remaining: i64,
        rate: f64,
    ) -> Option<(DateTime<Utc>, u32)> {
        if remaining <= 0 {
            return Some((now, 0));
        }
        if rate <= 0.0 {
            return None;
        }
        let mut left = remaining as f64 / rate; // seconds of sending still needed
        for (n, (from, to)) in self.upcoming(now).enumerate().take(10_000) {
            let span = (to - from).num_milliseconds() as f64 / 1000.0;
            if left <= span {
                let done = from + Duration::milliseconds((left * 1000.0) as i64);
                return Some((done, n as u32 + 1));
            }
            left -= span;
        }
        None
    }
}

impl fmt::Display for SendWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = |t: NaiveTime| {
            if t.format("%S").to_string() == "00" {
                t.format("%H:%M").to_string()
            } else {
                t.format("%H:%M:%S").to_string()
            }
        };
        write!(f, "{}-{} {}", t(self.start), t(self.end), self.tz)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tz: Tz, s: &str) -> DateTime<Utc> {
        tz.from_local_datetime(&chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap())
            .earliest()
            .unwrap()
            .with_timezone(&Utc)
    }

    fn window(span: &str, tz: &str) -> SendWindow {
        let (start, end) = parse_span(span).unwrap();
        SendWindow::new(start, end, parse_tz(tz).unwrap())
    }

    #[test]
    fn a_night_window_wraps_midnight_and_says_when_it_closes_or_opens() {
        let w = window("22:00-06:00", "Asia/Tokyo");
        let tz = w.tz;
        assert_eq!(
            w.state_at(at(tz, "2026-12-05 23:30")),
            WindowState::Open {
                closes_at: at(tz, "2026-12-06 06:00")
            }
        );
        // After midnight it is yesterday's window, still open.
        assert_eq!(
            w.state_at(at(tz, "2026-12-06 05:59")),
            WindowState::Open {
                closes_at: at(tz, "2026-12-06 06:00")
            }
        );
        // The end is not in the window; the start is.
        assert_eq!(
            w.state_at(at(tz, "2026-12-06 06:00")),
            WindowState::Closed {
                opens_at: at(tz, "2026-12-06 22:00")
            }
        );
        assert_eq!(
            w.state_at(at(tz, "2026-12-06 22:00")),
            WindowState::Open {
                closes_at: at(tz, "2026-12-07 06:00")
            }
        );
        assert_eq!(
            w.state_at(at(tz, "2026-12-06 12:00")),
            WindowState::Closed {
                opens_at: at(tz, "2026-12-06 22:00")
            }
        );
    }

    #[test]
    fn a_day_window_opens_today_or_tomorrow() {
        let w = window("09:00-17:30", "UTC");
        let tz = w.tz;
        assert_eq!(
            w.state_at(at(tz, "2026-12-05 08:00")),
            WindowState::Closed {
                opens_at: at(tz, "2026-12-05 09:00")
            }
        );
        assert_eq!(
            w.state_at(at(tz, "2026-12-05 18:00")),
            WindowState::Closed {
                opens_at: at(tz, "2026-12-06 09:00")
            }
        );
    }

    #[test]
    fn across_dst_the_window_keeps_its_wall_clock_hours() {
        // Europe/Berlin: 2026-03-29 02:00 → 03:00 (spring forward); 2026-10-25 03:00 → 02:00.
        let w = window("22:00-06:00", "Europe/Berlin");
        let tz = w.tz;
        let (open, close) = w.upcoming(at(tz, "2026-03-28 12:00")).next().unwrap();
        assert_eq!(
            (open, close),
            (at(tz, "2026-03-28 22:00"), at(tz, "2026-03-29 06:00"))
        );
        assert_eq!(
            (close - open).num_hours(),
            7,
            "the night clocks go forward is an hour shorter"
        );
        let (open, close) = w.upcoming(at(tz, "2026-10-24 12:00")).next().unwrap();
        assert_eq!(
            (close - open).num_hours(),
            9,
            "the night clocks go back is an hour longer"
        );
        // A bound inside the skipped hour resolves to its end; one inside the repeated hour to
        // its first occurrence.
        let gap = window("02:30-04:00", "Europe/Berlin");
        let (open, _) = gap.upcoming(at(tz, "2026-03-29 00:00")).next().unwrap();
        assert_eq!(open, at(tz, "2026-03-29 03:00"));
        let twice = window("02:30-04:00", "Europe/Berlin");
        let (open, close) = twice.upcoming(at(tz, "2026-10-25 00:00")).next().unwrap();
        assert_eq!(open, Utc.with_ymd_and_hms(2026, 10, 25, 0, 30, 0).unwrap());
        assert_eq!((close - open).num_minutes(), 150);
    }

    #[test]
    fn the_finish_counts_whole_windows() {
        // 100/s, a 4-h night: 1 440 000 rows a night. 4 000 000 rows from 03:00 (3 h left
        // tonight = 1 080 000): 2 920 000 more = 2 full nights and 40 000 rows of a third, i.e.
        // 400 s after its 02:00.
        let w = window("02:00-06:00", "Asia/Tokyo");
        let tz = w.tz;
        let now = at(tz, "2026-12-05 03:00");
        let (done, windows) = w.finish(now, 4_000_000, 100.0).unwrap();
        assert_eq!(windows, 4);
        assert_eq!(done, at(tz, "2026-12-08 02:00") + Duration::seconds(400));
        // Closed now: the next window is the first.
        let (done, windows) = w
            .finish(at(tz, "2026-12-05 12:00"), 360_000, 100.0)
            .unwrap();
        assert_eq!((done, windows), (at(tz, "2026-12-06 03:00"), 1));
        assert_eq!(w.finish(now, 10, 0.0), None);
        assert_eq!(w.finish(now, 0, 0.0), Some((now, 0)));
    }

    #[test]
    fn a_bad_window_or_zone_names_the_value() {
        for bad in ["25:00-06:00", "22:00", "22-6", "nonsense"] {
            let e = parse_span(bad).unwrap_err();
            assert!(
                e.contains(&format!("'{bad}'")) && e.contains("HH:MM-HH:MM"),
                "{e}"
            );
        }
        assert!(parse_span("06:00-06:00").unwrap_err().contains("no time"));
        let e = parse_tz("Mars/Olympus").unwrap_err();
        assert!(e.contains("'Mars/Olympus'"), "{e}");
        assert_eq!(
            window("22:00-06:00", "Asia/Tokyo").to_string(),
            "22:00-06:00 Asia/Tokyo"
        );
        assert_eq!(
            window("10:00:05-10:00:25", "UTC").to_string(),
            "10:00:05-10:00:25 UTC"
        );
    }

    #[test]
    fn configure_keeps_sets_moves_or_removes_the_window_and_refuses_a_span_without_a_zone() {
        let (tokyo, berlin) = (
            parse_tz("Asia/Tokyo").unwrap(),
            parse_tz("Europe/Berlin").unwrap(),
        );
        let old = window("09:00-17:00", "Asia/Tokyo");
        let (s, e) = parse_span("22:00-06:00").unwrap();
        let span = Some(WindowArg::Span(s, e));
        assert_eq!(
            change(None, None, Some(old)),
            Ok(None),
            "nothing asked: kept"
        );
        assert_eq!(
            change(Some(WindowArg::None), None, Some(old)),
            Ok(Some(None))
        );
        assert_eq!(
            change(span, Some(berlin), Some(old)),
            Ok(Some(Some(SendWindow::new(s, e, berlin))))
        );
        assert_eq!(
            change(span, None, Some(old)),
            Ok(Some(Some(SendWindow::new(s, e, tokyo)))),
            "a new span keeps the old zone"
        );
        assert_eq!(
            change(None, Some(berlin), Some(old)),
            Ok(Some(Some(SendWindow::new(old.start, old.end, berlin)))),
            "a zone alone moves the old span"
        );
        assert!(change(span, None, None).unwrap_err().contains("--timezone"));
        assert!(change(None, Some(berlin), None)
            .unwrap_err()
            .contains("--window"));
    }
}
