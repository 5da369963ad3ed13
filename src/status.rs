//! `campaign-sender status`: where a campaign is, for a person at 2 a.m. or a script.
//!
//! One [`Status`] gathers: counts by state (opted out apart), the send rate over the last
//! minute and the ETA at that rate, the kill switch (who paused and why), the live pods with
//! their share of the fleet's rate limit, and the most common failure and retry reasons (the
//! last provider status and error class stored per row). [`render`] draws it for a terminal,
//! [`one_line`] for a log or a pipe; the struct itself serialises for `--json`.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use crate::store::campaigns::{self, Pause};
use crate::store::rate::{self as rate_sql, KeyState};
use crate::store::{Progress, Reason, RowState, Store};

/// Reasons listed per kind.
pub const TOP_REASONS: i64 = 5;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub campaign_id: String,
    pub at: DateTime<Utc>,
    /// Whether the campaign exists at all (targets or a settings row).
    pub known: bool,
    #[serde(flatten)]
    pub progress: Progress,
    /// Rows still to settle: `pending` + `sending` (opted out excluded).
    pub remaining: i64,
    /// Deliveries per second over the last minute (or since the first delivery in it).
    pub rate_per_s: f64,
    /// Seconds to finish at that rate; `None` when nothing is being delivered.
    pub eta_s: Option<f64>,
    pub done: bool,
    pub paused: Option<Pause>,
    pub template: String,
    /// `failed` rows allowed before a run stops with exit 2 (and pauses the campaign).
    pub failure_budget: i64,
    /// The share of the campaign the budget is (the settings row's, else the default).
    pub failure_ratio: f64,
    pub limits: Vec<KeyState>,
    /// Top (status, class) among `failed` rows.
    pub failures: Vec<Reason>,
    /// Top (status, class) among rows waiting to retry.
    pub retrying: Vec<Reason>,
}

/// The delivery rate a status shows: recent deliveries over the window they span, at least one
/// second and at most the minute they were counted in.
pub fn rate_per_s(p: &Progress) -> f64 {
    if p.sent_last_minute == 0 {
        return 0.0;
    }
    let window = p.recent_window_s.unwrap_or(60.0).clamp(1.0, 60.0);
    p.sent_last_minute as f64 / window
}

/// Seconds to finish `remaining` at `rate`; `None` if nothing moves.
pub fn eta_s(remaining: i64, rate: f64) -> Option<f64> {
    if remaining == 0 {
        return Some(0.0);
    }
    (rate > 0.0).then(|| remaining as f64 / rate)
}

/// Reads everything `status` shows. `default_ratio` is `MAX_PERMANENT_FAILURE_RATIO` (the
/// settings row's ratio wins).
pub async fn gather(
    pool: &PgPool,
    campaign_id: &str,
    default_ratio: f64,
) -> Result<Status, sqlx::Error> {
    let store = Store::new(pool.clone(), campaign_id);
    let settings = campaigns::settings(pool, campaign_id).await?;
    let progress = store.progress().await?;
    let failures = store.reasons(RowState::Failed, TOP_REASONS).await?;
    let retrying = store.reasons(RowState::Pending, TOP_REASONS).await?;
    let limits = rate_sql::limits_of_campaign(pool, campaign_id).await?;
    let c = &progress.counts;
    let remaining = c.pending + c.sending;
    let rate = rate_per_s(&progress);
    Ok(Status {
        campaign_id: campaign_id.to_string(),
        at: Utc::now(),
        known: c.total > 0 || settings.stored,
        remaining,
        rate_per_s: rate,
        eta_s: eta_s(remaining, rate),
        done: c.total > 0 && remaining == 0,
        failure_budget: settings.failure_budget(c.total, default_ratio),
        failure_ratio: settings
            .max_permanent_failure_ratio
            .unwrap_or(default_ratio),
        paused: settings.pause,
        template: settings.template,
        limits,
        failures,
        retrying,
        progress,
    })
}

fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn reason(r: &Reason) -> String {
    match r.status {
        Some(s) => format!("{:>8}  {} {}", r.count, s, r.class),
        None => format!("{:>8}  {}", r.count, r.class),
    }
}

/// The short form: `spring-sale: 812034/1200000 settled, 498.2/s, ETA 12m59s`.
pub fn one_line(s: &Status) -> String {
    let c = &s.progress.counts;
    let settled = c.sent + c.failed + c.opted_out;
    let eta = match (s.done, s.eta_s) {
        (true, _) => "done".to_string(),
        (_, Some(e)) => format!("ETA {}", duration(e)),
        (_, None) => "ETA unknown (nothing delivered in the last minute)".to_string(),
    };
    let paused = match &s.paused {
        Some(p) => format!(", PAUSED by {}", p.by),
        None => String::new(),
    };
    format!(
        "{}: {settled}/{} settled ({} sent, {} failed, {} opted out), {:.1}/s, {eta}{paused}",
        s.campaign_id, c.total, c.sent, c.failed, c.opted_out, s.rate_per_s
    )
}

/// The full form, for a terminal: one section after the other.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    render_state(&mut o, s);
    render_counts(&mut o, s);
    render_limits(&mut o, s);
    render_reasons(&mut o, s);
    o
}

fn render_state(o: &mut String, s: &Status) {
    let _ = writeln!(o, "campaign   {} (template {})", s.campaign_id, s.template);
    match &s.paused {
        Some(p) => {
            let why = p
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "PAUSED     since {} by {}{why}",
                p.at.format("%Y-%m-%d %H:%M:%S UTC"),
                p.by
            );
            let _ = writeln!(
                o,
                "           `campaign-sender resume --campaign {}` lifts it",
                s.campaign_id
            );
        }
        None => {
            let _ = writeln!(o, "state      {}", if s.done { "done" } else { "running" });
        }
    }
}

fn render_counts(o: &mut String, s: &Status) {
    let c = &s.progress.counts;
    let _ = writeln!(
        o,
        "targets    {} total: {} sent, {} failed ({}), {} pending ({} waiting to retry), {} sending, {} opted out",
        c.total, c.sent, c.failed, budget(s), c.pending, s.progress.retry_waiting, c.sending, c.opted_out
    );
    let eta = match s.eta_s {
        Some(e) if !s.done => format!(", ETA {}", duration(e)),
        _ => String::new(),
    };
    let _ = writeln!(
        o,
        "rate       {:.1}/s over the last minute ({} delivered){eta}",
        s.rate_per_s, s.progress.sent_last_minute
    );
}

/// The failure budget in words: "budget 12 = 1 % of 1200", or, for a campaign too small for
/// its ratio to allow one row, that any failure stops a run.
fn budget(s: &Status) -> String {
    let pct = s.failure_ratio * 100.0;
    let total = s.progress.counts.total;
    if s.failure_budget == 0 {
        format!("any failure stops a run: {pct} % of {total} is less than one row")
    } else {
        format!("budget {} = {pct} % of {total}", s.failure_budget)
    }
}

/// Each rate-limit key the campaign's pods send under, with every live pod of the key.
fn render_limits(o: &mut String, s: &Status) {
    if s.limits.is_empty() {
        let _ = writeln!(o, "workers    none live");
    }
    for k in &s.limits {
        let paused = k
            .paused_for_s
            .map(|p| format!(", paused {p:.1}s after a 429"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "limit      {}: {:.0}/s configured, {:.0}/s effective{paused}, {} live pods",
            k.key,
            k.limit_per_s,
            k.effective_per_s,
            k.members.len()
        );
        for m in &k.members {
            let other = if m.campaign_id == s.campaign_id {
                String::new()
            } else {
                format!(" (campaign {})", m.campaign_id)
            };
            let idle = if m.weight == 0.0 { ", idle" } else { "" };
            let _ = writeln!(
                o,
                "  {:<24} share {:>7.1}/s{idle}{other}",
                m.worker, m.share_per_s
            );
        }
    }
}

fn render_reasons(o: &mut String, s: &Status) {
    for (title, list) in [("failed", &s.failures), ("retrying", &s.retrying)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(o, "{title} by last status and class:");
        for r in list {
            let _ = writeln!(o, "{}", reason(r));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(sent_last_minute: i64, window: Option<f64>) -> Progress {
        Progress {
            sent_last_minute,
            recent_window_s: window,
            ..Default::default()
        }
    }

    #[test]
    fn the_rate_is_recent_deliveries_over_the_window_they_span() {
        assert_eq!(rate_per_s(&progress(30_000, Some(59.9))), 30_000.0 / 59.9);
        // A run that started 10 s ago is not diluted over a whole minute.
        assert_eq!(rate_per_s(&progress(5_000, Some(10.0))), 500.0);
        // A single burst is not extrapolated beyond one second.
        assert_eq!(rate_per_s(&progress(3, Some(0.01))), 3.0);
        assert_eq!(rate_per_s(&progress(0, None)), 0.0);
    }

    #[test]
    fn the_eta_is_unknown_when_nothing_moves_and_zero_when_done() {
        assert_eq!(eta_s(1000, 500.0), Some(2.0));
        assert_eq!(eta_s(1000, 0.0), None);
        assert_eq!(eta_s(0, 0.0), Some(0.0));
    }

    #[test]
    fn a_budget_too_small_for_one_row_says_any_failure_stops_a_run() {
        let mut s = Status {
            campaign_id: "c".into(),
            at: Utc::now(),
            known: true,
            progress: progress(0, None),
            remaining: 0,
            rate_per_s: 0.0,
            eta_s: None,
            done: false,
            paused: None,
            template: "c".into(),
            failure_budget: 0,
            failure_ratio: 0.01,
            limits: vec![],
            failures: vec![],
            retrying: vec![],
        };
        s.progress.counts.total = 50;
        assert_eq!(
            budget(&s),
            "any failure stops a run: 1 % of 50 is less than one row"
        );
        s.progress.counts.total = 1200;
        s.failure_budget = 12;
        assert_eq!(budget(&s), "budget 12 = 1 % of 1200");
    }

    #[test]
    fn durations_read_like_a_clock() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(779.0), "12m59s");
        assert_eq!(duration(7380.0), "2h03m");
    }
}
