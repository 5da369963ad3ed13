//! `campaign-sender status`: where a campaign is, for a person at 2 a.m. or a script.
//!
//! One [`Status`] gathers: counts by state (opted out apart), the send rate over the last
//! minute and the ETA at that rate, the kill switch (who paused and why), the live pods with
//! their share of the fleet's rate limit, and the most common failure and retry reasons (the
//! last provider status and error class stored per row), and the send window with an ETA that
//! counts whole windows. [`render`] draws it for a terminal, [`one_line`] for a log or a pipe;
//! the struct itself serialises for `--json`.

mod render;
pub mod state;

pub use render::{budget, duration, one_line, render};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use crate::store::account::{self, KeyState};
use crate::store::archive::{self, Archived};
use crate::store::brake::{self, Line, Lines, Tally};
use crate::store::campaigns::{self, Pause};
use crate::store::suppressions::Bucket;
use crate::store::{CampaignCounts, Progress, Reason, RowState, Store};
use crate::window::{SendWindow, WindowState};

/// Reasons listed per kind.
pub const TOP_REASONS: i64 = 5;

/// What a campaign without settings of its own is held to: `MAX_PERMANENT_FAILURE_RATIO` and
/// the brake's lines ([`crate::config::BrakeConfig`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    pub failure_ratio: f64,
    pub lines: Lines,
}

impl Defaults {
    /// `failure_ratio` (a flag's or the environment's) and the lines from the environment.
    pub fn with_env_lines(failure_ratio: f64) -> Result<Self, crate::config::ConfigError> {
        use crate::config::FromEnv as _;
        Ok(Self {
            failure_ratio,
            lines: crate::config::BrakeConfig::from_env()?.lines(),
        })
    }

    /// The documented defaults, for tests.
    pub fn documented() -> Self {
        Self {
            failure_ratio: 0.01,
            lines: crate::config::BrakeConfig::default().lines(),
        }
    }
}

/// A campaign's complaint and hard-bounce rates against its lines (the brake,
/// [`crate::store::brake`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reputation {
    /// Mails sent, as the brake counts them.
    pub sent: i64,
    pub complaints: i64,
    pub hard_bounces: i64,
    pub complaint_rate: f64,
    pub complaint_line: f64,
    pub bounce_rate: f64,
    pub bounce_line: f64,
    /// Below this many mails sent the brake waits.
    pub min_sent: i64,
}

impl Reputation {
    fn of(t: &Tally, fleet: Lines) -> Self {
        let lines = t.lines(fleet);
        Self {
            sent: t.sent,
            complaints: t.complaints,
            hard_bounces: t.hard_bounces,
            complaint_rate: t.rate(Line::Complaint),
            complaint_line: lines.complaint,
            bounce_rate: t.rate(Line::Bounce),
            bounce_line: lines.bounce,
            min_sent: lines.min_sent,
        }
    }
}

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
    /// Deliveries per second over the last minute (or since the first delivery in it); 0 for a
    /// campaign that is not sending ([`Status::waits_for`]).
    pub rate_per_s: f64,
    /// Seconds to finish at that rate; `None` when nothing is being delivered, or the campaign
    /// is not sending.
    pub eta_s: Option<f64>,
    /// What a campaign that is not sending waits for (paused, refused, at a quota, outside its
    /// window, done): it has no current rate and no ETA at one ([`state::State::waits_for`]).
    pub waits_for: Option<String>,
    pub done: bool,
    pub paused: Option<Pause>,
    pub template: String,
    /// `configure --weight`: its share next to the other campaigns of its rate-limit key.
    pub weight: f64,
    /// `configure --from`: the campaign's sender (the company's address, not a member's).
    pub from: Option<String>,
    /// `configure --reply-to`.
    pub reply_to: Option<String>,
    /// `failed` rows allowed before a run stops with exit 2 (and pauses the campaign).
    pub failure_budget: i64,
    /// The share of the campaign the budget is (the settings row's, else the default).
    pub failure_ratio: f64,
    pub limits: Vec<KeyState>,
    /// Top (status, class) among `failed` rows.
    pub failures: Vec<Reason>,
    /// Top (status, class) among rows waiting to retry.
    pub retrying: Vec<Reason>,
    /// The send window, if the campaign has one.
    pub window: Option<WindowStatus>,
    /// `suppressed` rows by the reason their address is listed for.
    pub suppressed: Vec<Bucket>,
    /// When the oldest `unconfirmed` row's unknown attempt began.
    pub unconfirmed_since: Option<DateTime<Utc>>,
    /// Archived (`campaign-sender archive`): the counts above are its final ones.
    pub archived: Option<Archived>,
    /// The vendor's events for the campaign (`campaign-sender events`): each funnel column of
    /// [`crate::events::FUNNEL`] with its count.
    pub funnel: Vec<(String, i64)>,
    /// Its complaint and hard-bounce rates against its lines, once it has sent a mail.
    pub reputation: Option<Reputation>,
    /// The campaign by mailbox provider (Gmail, Outlook.com, …): sent, what the events said,
    /// the sender's refusals by cause ([`crate::store::providers`]).
    pub providers: Vec<crate::store::providers::AtProvider>,
    /// The mailto's inbound mails, fleet-wide (a mail without a token names no campaign): by
    /// vendor and outcome, with when the last came ([`crate::store::inbound`]).
    pub inbound: Vec<crate::store::inbound::Tally>,
}

/// The send window as `status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStatus {
    /// `22:00-06:00 Asia/Tokyo`.
    pub window: String,
    pub open: bool,
    /// When it closes (open) or next opens (closed).
    pub next_change: DateTime<Utc>,
    /// When the campaign finishes, sending only inside the window.
    pub finish: Option<Finish>,
    #[serde(skip)]
    pub send_window: SendWindow,
}

/// A finish that counts whole windows.
#[derive(Debug, Clone, Serialize)]
pub struct Finish {
    /// The rate assumed: the recent one, else the one the campaign was last sent at.
    pub rate_per_s: f64,
    /// Windows it takes, the current one (if open) included.
    pub windows: u32,
    pub at: DateTime<Utc>,
}

impl CampaignCounts {
    /// Rows nothing more will be done for by a worker: sent, failed, opted out, unconfirmed
    /// (waiting for `resolve`) or suppressed. The progress `status`, its bar and the status
    /// page show.
    pub fn settled(&self) -> i64 {
        self.sent + self.failed + self.opted_out + self.unconfirmed + self.suppressed
    }
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

/// The window now: open or closed, its next change, and when `remaining` rows are done at
/// `rate`, sending only inside it.
pub fn window_status(w: SendWindow, now: DateTime<Utc>, remaining: i64, rate: f64) -> WindowStatus {
    let (open, next_change) = match w.state_at(now) {
        WindowState::Open { closes_at } => (true, closes_at),
        WindowState::Closed { opens_at } => (false, opens_at),
    };
    WindowStatus {
        window: w.to_string(),
        open,
        next_change,
        finish: w.finish(now, remaining, rate).map(|(at, windows)| Finish {
            rate_per_s: rate,
            windows,
            at,
        }),
        send_window: w,
    }
}

/// An archived campaign's counts: the rows moved (each batch adds its own), plus the rows still
/// in the work table — those not moved yet while an archive runs, those imported since once it
/// is complete (members it never had: `import` skips archived ones). Every row counted once.
fn with_archive(a: &Archived, live: &CampaignCounts) -> CampaignCounts {
    let since = live;
    CampaignCounts {
        total: a.total + since.total,
        sent: a.sent + since.sent,
        failed: a.failed + since.failed,
        pending: since.pending,
        sending: since.sending,
        opted_out: a.opted_out + since.opted_out,
        unconfirmed: a.unconfirmed + since.unconfirmed,
        suppressed: a.suppressed + since.suppressed,
    }
}

/// Reads everything `status` shows, under `defaults` (the settings row's own ratio and lines
/// win).
pub async fn gather(
    pool: &PgPool,
    campaign_id: &str,
    defaults: Defaults,
) -> Result<Status, sqlx::Error> {
    let default_ratio = defaults.failure_ratio;
    let store = Store::new(pool.clone(), campaign_id);
    let settings = campaigns::settings(pool, campaign_id).await?;
    let archived = archive::archived(pool, campaign_id).await?;
    let mut progress = store.progress().await?;
    if let Some(a) = &archived {
        progress.counts = with_archive(a, &progress.counts);
        progress.last_sent_at = progress.last_sent_at.max(a.last_sent_at);
    }
    let failures = store.reasons(RowState::Failed, TOP_REASONS).await?;
    let retrying = store.reasons(RowState::Pending, TOP_REASONS).await?;
    let limits = account::keys_of_campaign(pool, campaign_id).await?;
    let c = &progress.counts;
    let suppressed = match c.suppressed {
        0 => Vec::new(),
        _ => store.suppressed_by_reason().await?,
    };
    let unconfirmed_since = match c.unconfirmed {
        0 => None,
        _ => store.unconfirmed().await?.since,
    };
    let remaining = c.pending + c.sending;
    let rate = rate_per_s(&progress);
    let window = match settings.window {
        Some(w) => {
            let last = match (rate > 0.0, progress.last_sent_at) {
                (true, _) | (_, None) => rate,
                (false, Some(at)) => store.rate_before(at).await?,
            };
            Some(window_status(w, Utc::now(), remaining, last))
        }
        None => None,
    };
    let status = Status {
        window,
        waits_for: None,
        campaign_id: campaign_id.to_string(),
        at: Utc::now(),
        known: c.total > 0 || settings.stored || archived.is_some(),
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
        weight: settings.weight,
        from: settings.from_address,
        reply_to: settings.reply_to,
        limits,
        failures,
        retrying,
        suppressed,
        unconfirmed_since,
        archived,
        progress,
        funnel: crate::store::events::funnel(pool, campaign_id).await?,
        providers: crate::store::providers::of_campaign(pool, campaign_id).await?,
        inbound: crate::store::inbound::tallies(pool).await?,
        reputation: brake::tally(pool, campaign_id)
            .await?
            .map(|t| Reputation::of(&t, defaults.lines)),
    };
    Ok(status.halted())
}

impl Status {
    /// A campaign that is not sending (see [`state::State::waits_for`]) says what it waits for
    /// instead of a rate and an ETA: what the last minute delivered before it stopped is not a
    /// rate it sends at. Outside its window it keeps the whole-window estimate (at the rate it
    /// sends when the window is open); otherwise that goes too.
    pub fn halted(mut self) -> Self {
        let st = state::State::of(&self);
        let Some(waits) = st.waits_for() else {
            return self;
        };
        self.waits_for = Some(waits.to_string());
        self.rate_per_s = 0.0;
        self.eta_s = None;
        if !matches!(st, state::State::OutsideWindow { .. }) {
            if let Some(w) = self.window.as_mut() {
                w.finish = None;
            }
        }
        self
    }
}

#[cfg(test)]
impl Status {
    /// A status of a known campaign with nothing in it, for tests to fill in what they need.
    pub(crate) fn empty(campaign_id: &str) -> Self {
        Status {
            campaign_id: campaign_id.into(),
            at: Utc::now(),
            known: true,
            progress: Progress::default(),
            remaining: 0,
            rate_per_s: 0.0,
            eta_s: None,
            waits_for: None,
            done: false,
            paused: None,
            template: campaign_id.into(),
            weight: 1.0,
            from: None,
            reply_to: None,
            failure_budget: 1,
            failure_ratio: 0.01,
            limits: vec![],
            failures: vec![],
            retrying: vec![],
            window: None,
            suppressed: vec![],
            unconfirmed_since: None,
            archived: None,
            funnel: vec![],
            providers: vec![],
            inbound: Vec::new(),
            reputation: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::render::{budget, duration};
    use super::*;

    /// A paused campaign that delivered 100 rows in the 2.3 s before its pause: no "43/s", no
    /// ETA at it, but what it waits for; the same figures while it sends keep their rate.
    #[test]
    fn a_campaign_that_is_not_sending_shows_no_rate_and_no_eta_but_what_it_waits_for() {
        let mut s = Status {
            remaining: 900,
            rate_per_s: 43.0,
            eta_s: Some(21.0),
            ..Status::empty("spring")
        };
        s.progress.sent_last_minute = 100;
        let sending = s.clone().halted();
        assert_eq!((sending.rate_per_s, sending.eta_s), (43.0, Some(21.0)));
        assert_eq!(sending.waits_for, None);
        s.paused = Some(Pause {
            at: Utc::now(),
            by: "ops".into(),
            reason: None,
        });
        let paused = s.halted();
        assert_eq!((paused.rate_per_s, paused.eta_s), (0.0, None));
        assert_eq!(paused.waits_for.as_deref(), Some("`resume`"));
        let text = render(&paused);
        assert!(
            text.contains("rate       none: not sending, waits for `resume`"),
            "{text}"
        );
        assert!(!text.contains("43") && !text.contains("ETA"), "{text}");
        let line = one_line(&paused);
        assert!(
            line.contains("not sending") && line.contains("no ETA"),
            "{line}"
        );
    }

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
            progress: progress(0, None),
            failure_budget: 0,
            ..Status::empty("c")
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
    fn with_a_window_the_eta_counts_whole_windows_in_its_zone() {
        use chrono::TimeZone;
        let tz: chrono_tz::Tz = "Asia/Tokyo".parse().unwrap();
        let w = SendWindow::new(
            chrono::NaiveTime::from_hms_opt(2, 0, 0).unwrap(),
            chrono::NaiveTime::from_hms_opt(6, 0, 0).unwrap(),
            tz,
        );
        // Saturday 2026-12-05 12:00 JST, closed; 3.5 windows of work at 100/s.
        let now = tz
            .with_ymd_and_hms(2026, 12, 5, 12, 0, 0)
            .unwrap()
            .with_timezone(&Utc);
        let mut s = Status {
            at: now,
            remaining: 5_040_000,
            window: Some(window_status(w, now, 5_040_000, 100.0)),
            ..Status::empty("c")
        };
        s.progress.counts.total = 6_000_000;
        let text = render(&s);
        assert!(
            text.contains(
                "window     02:00-06:00 Asia/Tokyo: closed, opens Sun 02:00 JST (in 14h00m)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "ETA        at 100/s, 4h00m a window: 4 more windows, done about Wed 04:00 JST"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_sending_campaign_shows_its_rates_against_its_lines() {
        let t = Tally {
            campaign_id: "c".into(),
            sent: 10_000,
            complaints: 5,
            hard_bounces: 120,
            own_complaint: None,
            own_bounce: Some(0.01),
            paused: false,
        };
        let s = Status {
            reputation: Some(Reputation::of(&t, Defaults::documented().lines)),
            ..Status::empty("c")
        };
        let text = render(&s);
        assert!(
            text.contains(
                "lines      complaints 0.05 % (5 of 10 000), line 0.08 % · hard bounces 1.20 % (120 of 10 000), line 1.00 %"
            ),
            "{text}"
        );
        let early = Tally {
            sent: 10,
            ..t.clone()
        };
        let s = Status {
            reputation: Some(Reputation::of(&early, Defaults::documented().lines)),
            ..Status::empty("c")
        };
        assert!(
            render(&s).contains("(the brake waits for 1 000 sent)"),
            "{}",
            render(&s)
        );
        assert!(!render(&Status::empty("c")).contains("lines "));
        let none_sent = Tally {
            sent: 0,
            complaints: 1,
            ..t
        };
        let s = Status {
            reputation: Some(Reputation::of(&none_sent, Defaults::documented().lines)),
            ..Status::empty("c")
        };
        let text = render(&s);
        let line = text.lines().find(|l| l.starts_with("lines")).unwrap();
        assert!(!line.contains(" of 0)"), "never a rate of nothing: {line}");
        assert!(line.contains("complaints 1 of no mail sent yet"), "{line}");
    }

    #[test]
    fn durations_read_like_a_clock() {
        assert_eq!(duration(42.0), "42s");
        assert_eq!(duration(779.0), "12m59s");
        assert_eq!(duration(7380.0), "2h03m");
    }
}
