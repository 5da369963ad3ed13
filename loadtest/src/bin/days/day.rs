//! One scaled day: its schedule (window, Jobs, kills, opt-outs, pause), what it achieved, and
//! the table of all days.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use fake_provider::{Delivery, Stats};
use rand::Rng;
use sqlx::PgPool;

use super::fleet::Fleet;
use super::{Args, CAMPAIGN, OPTOUT_RECHECK_MS};

/// A request may reach the provider this long after a pod decided to start it.
const ARRIVAL_SLACK_MS: u64 = 150;
/// Pods running when the window closes exit within this (the contract).
const EXIT_BOUND: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Ev {
    Configure,
    Fire(u64),
    OptOut,
    Kill,
    Pause,
    Resume,
}

pub struct Day {
    pub n: u32,
    start: Instant,
    start_wall: DateTime<Utc>,
    open: DateTime<Utc>,
    close: DateTime<Utc>,
    paused: bool,
    /// (members, Unix ms by which the opt-out had committed)
    pub optouts: Vec<(Vec<i64>, u64)>,
    kills: usize,
}

/// What the database and the provider say at a moment.
pub struct Snapshot {
    sent: i64,
    stats: Stats,
    deliveries: Vec<Delivery>,
}

/// One row of the table.
pub struct DayResult {
    n: u32,
    window: String,
    paused: bool,
    jobs: (usize, usize),
    kills: usize,
    sent: i64,
    remaining: i64,
    /// Of `remaining`: rows left `sending` at the day's end by pods killed in the window (their
    /// lease runs out LEASE_S after the kill; the next claim in a window takes them back).
    leased: i64,
    priority: (Option<i32>, Option<i32>),
    priority_held: bool,
    mailed_twice: u64,
    lost: usize,
    after_optout: usize,
    outside_window: usize,
    latest_exit_s: f64,
    bad_exits: Vec<String>,
}

impl Snapshot {
    pub async fn take(pool: &PgPool, http: &reqwest::Client, base: &str) -> anyhow::Result<Self> {
        let sent = sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE state = 'sent'")
            .fetch_one(pool)
            .await?;
        let stats = http
            .get(format!("{base}/stats"))
            .send()
            .await?
            .json()
            .await?;
        let deliveries = http
            .get(format!("{base}/deliveries"))
            .send()
            .await?
            .json()
            .await?;
        Ok(Self {
            sent,
            stats,
            deliveries,
        })
    }
}

impl Day {
    pub fn new(a: &Args, n: u32, run_start: Instant, run_wall: DateTime<Utc>) -> Self {
        let offset = Duration::from_secs(a.day_s * n as u64);
        let start_wall = run_wall + chrono::Duration::from_std(offset).expect("offset");
        let open = start_wall + chrono::Duration::seconds(a.window_at_s as i64);
        Self {
            n: n + 1,
            start: run_start + offset,
            start_wall,
            open,
            close: open + chrono::Duration::seconds(a.window_s as i64),
            paused: a.pause_day == n + 1,
            optouts: Vec::new(),
            kills: 0,
        }
    }

    fn schedule(&self, a: &Args) -> Vec<(f64, Ev)> {
        let (w0, w1) = (a.window_at_s as f64, (a.window_at_s + a.window_s) as f64);
        let mut ev = vec![(0.0, Ev::Configure)];
        let mut q = 0;
        while q * a.cadence_s < a.day_s {
            ev.push(((q * a.cadence_s) as f64 + 0.5, Ev::Fire(q)));
            q += 1;
        }
        for t in [w0 / 3.0, (w0 + w1) / 2.0, (w1 + a.day_s as f64) / 2.0] {
            ev.push((t, Ev::OptOut));
        }
        let mut t = w0 + 1.0;
        while t < w1 - 1.0 {
            ev.push((t, Ev::Kill));
            t += a.kill_every_s;
        }
        if self.paused {
            ev.push((w0 - 3.0, Ev::Pause));
            ev.push((w1 + 3.0, Ev::Resume));
        }
        ev.sort_by(|x, y| x.0.total_cmp(&y.0));
        ev
    }

    /// Plays the day's schedule until its end.
    pub async fn play(
        &mut self,
        a: &Args,
        fleet: &mut Fleet,
        pool: &PgPool,
        rng: &mut impl Rng,
    ) -> anyhow::Result<()> {
        let end = self.start + Duration::from_secs(a.day_s) - Duration::from_millis(300);
        for (t, ev) in self.schedule(a) {
            let at = self.start + Duration::from_secs_f64(t);
            while Instant::now() < at {
                fleet.tick()?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.apply(ev, fleet, pool, rng, a).await?;
        }
        while Instant::now() < end {
            fleet.tick()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        fleet.tick()
    }

    async fn apply(
        &mut self,
        ev: Ev,
        fleet: &mut Fleet,
        pool: &PgPool,
        rng: &mut impl Rng,
        a: &Args,
    ) -> anyhow::Result<()> {
        let id = CAMPAIGN;
        match ev {
            Ev::Configure => {
                let span = format!(
                    "{}-{}",
                    self.open.format("%H:%M:%S"),
                    self.close.format("%H:%M:%S")
                );
                fleet.operator(&[
                    "configure",
                    "--campaign",
                    id,
                    "--window",
                    &span,
                    "--timezone",
                    "UTC",
                ])?;
            }
            Ev::Fire(q) => fleet.fire(&format!("d{}q{q}", self.n))?,
            Ev::OptOut => self.optouts.push(
                loadtest::opt_out(pool, CAMPAIGN, a.optouts, loadtest::Waiting::NextInLine).await?,
            ),
            Ev::Kill => {
                if fleet.kill_one(rng, Duration::from_secs(1))? {
                    self.kills += 1;
                }
            }
            Ev::Pause => {
                fleet.operator(&["pause", "--campaign", id, "--reason", "days harness"])?
            }
            Ev::Resume => fleet.operator(&["resume", "--campaign", id])?,
        }
        Ok(())
    }

    /// The day's row, from the snapshots before and after it.
    pub async fn judge(
        &self,
        a: &Args,
        fleet: &Fleet,
        pool: &PgPool,
        optouts: &[(Vec<i64>, u64)],
        before: &Snapshot,
        after: &Snapshot,
    ) -> anyhow::Result<DayResult> {
        let (lo, hi) = (ms(self.start_wall), ms(self.start_wall) + a.day_s * 1000);
        let today: Vec<&Delivery> = after
            .deliveries
            .iter()
            .filter(|d| d.first_ms >= lo && d.first_ms < hi)
            .collect();
        let outside_window = today
            .iter()
            .filter(|d| {
                d.first_ms < ms(self.open) || d.first_ms > ms(self.close) + ARRIVAL_SLACK_MS
            })
            .count();
        let first: HashMap<i64, u64> = today.iter().map(|d| (d.member_id, d.first_ms)).collect();
        let after_optout = optouts
            .iter()
            .flat_map(|(ids, at)| ids.iter().map(move |m| (m, at)))
            .filter(|(m, at)| {
                first
                    .get(m)
                    .is_some_and(|f| *f > **at + OPTOUT_RECHECK_MS + 250)
            })
            .count();
        let delivered: std::collections::HashSet<i64> =
            after.deliveries.iter().map(|d| d.member_id).collect();
        let sent_ids: Vec<i64> =
            sqlx::query_scalar("SELECT member_id FROM campaign_targets WHERE state = 'sent'")
                .fetch_all(pool)
                .await?;
        let lost = sent_ids.iter().filter(|m| !delivered.contains(m)).count();
        let remaining: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM campaign_targets WHERE opted_out_at IS NULL AND state NOT IN ('sent', 'failed')",
        )
        .fetch_one(pool)
        .await?;
        let leased: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM campaign_targets WHERE opted_out_at IS NULL AND state = 'sending'",
        )
        .fetch_one(pool)
        .await?;
        let priority = priority_frontier(
            pool,
            self.start_wall,
            self.start_wall + chrono::Duration::seconds(a.day_s as i64),
        )
        .await?;
        let close = self.start + Duration::from_secs(a.window_at_s + a.window_s);
        let (latest_exit_s, bad_exits) = self.exits(fleet, close);
        let jobs_of_day = |v: &[String]| {
            v.iter()
                .filter(|j| j.starts_with(&format!("d{}q", self.n)))
                .count()
        };
        Ok(DayResult {
            n: self.n,
            window: format!(
                "{}–{} UTC",
                self.open.format("%H:%M:%S"),
                self.close.format("%H:%M:%S")
            ),
            paused: self.paused,
            jobs: (
                jobs_of_day(&fleet.jobs_started),
                jobs_of_day(&fleet.jobs_skipped),
            ),
            kills: self.kills,
            sent: after.sent - before.sent,
            remaining,
            leased,
            priority,
            priority_held: match priority {
                (Some(min_sent), Some(max_waiting)) => min_sent >= max_waiting,
                _ => true,
            },
            mailed_twice: after.stats.members_delivered_more_than_once,
            lost,
            after_optout,
            outside_window,
            latest_exit_s,
            bad_exits,
        })
    }

    /// How long after the window closed the last pod that was running then exited; and pods of
    /// this day that exited with a code the contract does not give for what happened (0 for
    /// done for now, 3 while paused; killed ones aside).
    fn exits(&self, fleet: &Fleet, close: Instant) -> (f64, Vec<String>) {
        let mine = fleet
            .pods
            .iter()
            .filter(|p| p.job.starts_with(&format!("d{}q", self.n)));
        let mut latest: f64 = 0.0;
        let mut bad = Vec::new();
        for p in mine.filter(|p| !p.killed) {
            if let Some(at) = p.exited_at {
                if p.started < close && at > close {
                    latest = latest.max((at - close).as_secs_f64());
                }
            }
            let ok = match p.code {
                Some(0) => true,
                Some(3) => self.paused,
                _ => false,
            };
            if !ok {
                bad.push(format!(
                    "{}-{}: {:?} ({:?})",
                    p.job, p.index, p.code, p.reason
                ));
            }
        }
        (latest, bad)
    }
}

/// (lowest priority sent in [from, to), highest priority never claimed): priority order held if
/// the first is not below the second — claims take rows in priority order. Rows claimed and then
/// released (a pod's unsent rows at the window's close) or waiting out a retry backoff are not
/// in the second set: within what the pods hold, sends from different pods interleave.
async fn priority_frontier(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<(Option<i32>, Option<i32>)> {
    let min_sent: Option<i32> = sqlx::query_scalar(
        "SELECT min(priority) FROM campaign_targets WHERE state = 'sent' AND sent_at >= $1 AND sent_at < $2",
    )
    .bind(from)
    .bind(to)
    .fetch_one(pool)
    .await?;
    let max_waiting: Option<i32> = sqlx::query_scalar(
        "SELECT max(priority) FROM campaign_targets
          WHERE state = 'pending' AND claim_id IS NULL AND opted_out_at IS NULL",
    )
    .fetch_one(pool)
    .await?;
    Ok((min_sent, max_waiting))
}

fn ms(t: DateTime<Utc>) -> u64 {
    t.timestamp_millis() as u64
}

/// Prints the table (stderr, Markdown) and one JSON line (stdout); true if a check failed.
pub fn report(a: &Args, days: &[DayResult], fleet: &Fleet) -> bool {
    eprintln!(
        "\n{} targets, priority 0–9, provider {}/s, day {} s with a {} s window, a Job every {} s ({} pods, DEADLINE_S {}, BATCH_SIZE {}, LEASE_S {}), SIGKILL every {} s in the window\n",
        a.targets, a.provider_rate, a.day_s, a.window_s, a.cadence_s, a.workers, a.deadline_s, a.batch_size, a.lease_s, a.kill_every_s
    );
    eprintln!("| day | window | paused | Jobs run (skipped) | SIGKILLs | sent | remaining (left `sending` by killed pods) | priority order held (lowest sent ≥ highest never claimed) | mailed twice | lost | mailed after opt-out | requests outside the window | last pod exit after close |");
    eprintln!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    let mut json = Vec::new();
    for d in days {
        let show = |p: Option<i32>| p.map(|v| v.to_string()).unwrap_or_else(|| "–".into());
        eprintln!(
            "| {} | {} | {} | {} ({}) | {} | {} | {} ({}) | {} ({} ≥ {}) | {} | {} | {} | {} | {:.1} s |",
            d.n, d.window, if d.paused { "yes" } else { "no" }, d.jobs.0, d.jobs.1, d.kills, d.sent, d.remaining, d.leased,
            if d.priority_held { "yes" } else { "NO" }, show(d.priority.0), show(d.priority.1),
            d.mailed_twice, d.lost, d.after_optout, d.outside_window, d.latest_exit_s
        );
        let checks = [
            ("priority order held", d.priority_held),
            ("nobody mailed twice", d.mailed_twice == 0),
            ("nothing recorded sent that was not delivered", d.lost == 0),
            ("no mail after an opt-out", d.after_optout == 0),
            ("no request outside the window", d.outside_window == 0),
            (
                "pods exit within 5 s of the close",
                d.latest_exit_s <= EXIT_BOUND.as_secs_f64(),
            ),
            ("exit codes as documented", d.bad_exits.is_empty()),
            ("nothing sent while paused", !d.paused || d.sent == 0),
        ];
        for (what, ok) in checks {
            if !ok {
                failed = true;
                eprintln!("day {}: FAILED: {what} {:?}", d.n, d.bad_exits);
            }
        }
        json.push(serde_json::json!({
            "day": d.n, "paused": d.paused, "jobs_started": d.jobs.0, "jobs_skipped": d.jobs.1,
            "kills": d.kills, "sent": d.sent, "remaining": d.remaining, "leased": d.leased,
            "lowest_priority_sent": d.priority.0, "highest_priority_waiting": d.priority.1,
            "priority_held": d.priority_held, "mailed_twice": d.mailed_twice, "lost": d.lost,
            "after_optout": d.after_optout, "outside_window": d.outside_window,
            "last_exit_after_close_s": d.latest_exit_s, "bad_exits": d.bad_exits,
        }));
    }
    let total_pods = fleet.pods.len();
    println!(
        "{}",
        serde_json::json!({ "days": json, "pods_started": total_pods })
    );
    failed
}
