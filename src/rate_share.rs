//! One provider rate limit for the whole fleet, coordinated in PostgreSQL.
//!
//! The limit (`MAIL_RATE_PER_S`) belongs to the provider account, not to a pod. Every pod
//! sending under one *limit key* (`RATE_LIMIT_KEY`, default: the host of `MAIL_URL`) registers
//! in `rate_pods` and renews its row every `RATE_SYNC_MS`; each renewal (a *round*) recomputes
//! that pod's share and the pod paces its own sends at it with governor ([`crate::pacer`]).
//!
//! # The rules (what keeps the fleet's total under the limit)
//! - **Shares are weighted by demand.** A pod with work has weight 1, an idle pod (nothing
//!   claimable, nothing queued) weight 0, so it holds no capacity. The fair share of a pod is
//!   `effective limit × its weight ÷ the live pods' total weight`.
//! - **A pod only ever changes its own share, in its own round, under the lock** of the key's
//!   `rate_limits` row (every round of a key is serialised by it).
//! - **Lowering is immediate; the capacity it frees is not.** A pod lowers its share locally
//!   *before* the change is committed, and the old rate stays *committed* to it for one more
//!   second ([`HANDOVER`]) after `share_changed_at`, which is stamped after it slowed down.
//! - **Raising only takes free capacity:** `effective limit − Σ committed(others)`, where a
//!   pod's committed rate is `max(share, previous share)` within a second of a change, its share
//!   otherwise, and, for a pod that stopped renewing, its share until one second past its
//!   expiry. So capacity moves between pods only after the old rate's one-second window has
//!   closed: during joins, leaves and crashes the sum of the rates in force never exceeds the
//!   limit.
//! - **A share is valid for `RATE_SHARE_TTL_MS` after the round that granted it started** (local
//!   clock, which is earlier than the database's `expires_at`). A pod that cannot renew stops
//!   sending by itself before anyone else may take its capacity.
//! - **The provider is the final judge.** On a 429 the pod pauses itself at once for the
//!   `Retry-After`, and its next round (started at once) writes a fleet-wide `paused_until` and
//!   cuts the key's *effective* limit by [`DECREASE_FACTOR`] (at most once a second); the
//!   effective limit then recovers by [`INCREASE_PER_S`] of the limit per second (AIMD).
//!
//! Times written to the tables are the database's `clock_timestamp()`, never a pod's clock, so
//! pods with skewed clocks still agree. The arithmetic is the pure [`plan_round`], tested with a
//! fake clock by a fleet simulation; the SQL is in [`Coordinator`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::metrics as m;
use crate::pacer::{Pacer, MIN_RATE_PER_S};

/// How long a lowered rate stays committed to the pod that lowered it: the provider counts
/// requests in one-second windows.
pub const HANDOVER: Duration = Duration::from_secs(1);
/// Multiplicative decrease of the effective limit on a 429 (at most once per [`HANDOVER`]).
pub const DECREASE_FACTOR: f64 = 0.7;
/// Additive increase of the effective limit: this fraction of the limit per second, so a
/// halved limit is whole again after 10 s without 429s.
pub const INCREASE_PER_S: f64 = 0.05;
/// The effective limit never falls below this fraction of the limit.
pub const MIN_FRACTION: f64 = 0.05;
/// A share change smaller than this (requests/s) is not worth a new limiter.
pub const MIN_CHANGE_PER_S: f64 = 0.5;
/// A 429 without a usable `Retry-After` pauses the fleet this long.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

fn delta(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

/// One pod's row in `rate_pods`.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRow {
    pub pod_id: Uuid,
    /// 1 with work to send, 0 idle.
    pub weight: f64,
    /// Its `MAIL_RATE_PER_S`; the fleet uses the smallest among live pods.
    pub limit_per_s: f64,
    /// The rate it may pace at now.
    pub share_per_s: f64,
    /// What was committed to it just before its last change.
    pub prev_share_per_s: f64,
    pub share_changed_at: DateTime<Utc>,
    /// It stops sending by itself before this unless it renews.
    pub expires_at: DateTime<Utc>,
}

impl PodRow {
    /// The rate this pod may still be sending at, at `now`: what every other pod must leave it.
    pub fn committed(&self, now: DateTime<Utc>) -> f64 {
        let window = delta(HANDOVER);
        if now >= self.expires_at + window {
            return 0.0;
        }
        if now < self.share_changed_at + window {
            self.share_per_s.max(self.prev_share_per_s)
        } else {
            self.share_per_s
        }
    }

    pub fn live(&self, now: DateTime<Utc>) -> bool {
        now < self.expires_at
    }
}

/// The key's row in `rate_limits`: the effective (AIMD) limit and the fleet-wide pause.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRow {
    pub effective_per_s: f64,
    pub paused_until: Option<DateTime<Utc>>,
    pub last_decrease_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// What one pod reports in a round.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub weight: f64,
    pub limit_per_s: f64,
    /// A 429 was seen since the last round, with the longest `Retry-After` (capped).
    pub throttled: Option<Option<Duration>>,
    pub ttl: Duration,
}

/// The outcome of a round: the pod's new row and the key's new row.
#[derive(Debug, Clone)]
pub struct Plan {
    pub me: PodRow,
    pub limit: LimitRow,
    /// `min(limit_per_s)` over the live pods.
    pub fleet_limit: f64,
    pub live_pods: usize,
    /// The share changed (a new limiter, a new `share_changed_at`).
    pub changed: bool,
}

/// One round of one pod, at database time `now`: AIMD on the key's limit, then the pod's share
/// under the handover rule (see the module docs). Pure; `others` are every other pod's rows of
/// the key, live or not.
pub fn plan_round(
    now: DateTime<Utc>,
    mine: Option<&PodRow>,
    pod_id: Uuid,
    report: Report,
    others: &[PodRow],
    limit: &LimitRow,
) -> Plan {
    let live: Vec<&PodRow> = others.iter().filter(|p| p.live(now)).collect();
    let fleet_limit = live
        .iter()
        .map(|p| p.limit_per_s)
        .fold(report.limit_per_s, f64::min)
        .max(0.0);

    // AIMD on the key's effective limit.
    let mut l = limit.clone();
    let mut effective = l.effective_per_s.min(fleet_limit);
    // Additive increase for the time since the last update or the end of a pause (none before).
    let since = l.paused_until.map_or(l.updated_at, |p| p.max(l.updated_at));
    let grown = fleet_limit * INCREASE_PER_S * secs(now - since).max(0.0);
    effective = (effective + grown).min(fleet_limit);
    if let Some(retry_after) = report.throttled {
        let until = now + delta(retry_after.unwrap_or(DEFAULT_PAUSE));
        l.paused_until = Some(l.paused_until.map_or(until, |p| p.max(until)));
        if l.last_decrease_at
            .is_none_or(|t| now - t >= delta(HANDOVER))
        {
            effective = (effective * DECREASE_FACTOR).max(fleet_limit * MIN_FRACTION);
            l.last_decrease_at = Some(now);
        }
    }
    l.effective_per_s = effective;
    l.updated_at = now;

    // This pod's share.
    let total_weight: f64 = live.iter().map(|p| p.weight).sum::<f64>() + report.weight;
    // (total_weight ≥ report.weight > 0: no division by zero.)
    let fair = if report.weight > 0.0 {
        effective * report.weight / total_weight
    } else {
        0.0
    };
    let free = effective - others.iter().map(|p| p.committed(now)).sum::<f64>();
    let current = mine.map_or(0.0, |m| m.share_per_s);
    let target = if fair <= current {
        fair
    } else {
        fair.min(current.max(free))
    }
    .max(0.0);
    let changed = (target - current).abs() >= MIN_CHANGE_PER_S
        || (target < MIN_RATE_PER_S && current >= MIN_RATE_PER_S);
    let mut me = mine.cloned().unwrap_or(PodRow {
        pod_id,
        weight: report.weight,
        limit_per_s: report.limit_per_s,
        share_per_s: 0.0,
        prev_share_per_s: 0.0,
        share_changed_at: now,
        expires_at: now,
    });
    if changed {
        me.prev_share_per_s = me.committed(now);
        me.share_per_s = target;
        me.share_changed_at = now;
    }
    me.weight = report.weight;
    me.limit_per_s = report.limit_per_s;
    me.expires_at = now + delta(report.ttl);
    Plan {
        me,
        limit: l,
        fleet_limit,
        live_pods: live.len() + 1,
        changed,
    }
}

/// What the rest of the process tells the coordinator: whether it has work, and 429s.
#[derive(Clone)]
pub struct Signals {
    busy: Arc<AtomicBool>,
    throttled: mpsc::UnboundedSender<Option<Duration>>,
}

impl Signals {
    /// This process has rows to send (weight 1) or nothing claimable (weight 0).
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
    }
    /// The provider answered 429 (with this `Retry-After`): start a round now.
    pub fn throttled(&self, retry_after: Option<Duration>) {
        let _ = self.throttled.send(retry_after);
    }
}

/// Settings of the coordinator (from [`crate::config::RunConfig`]).
#[derive(Debug, Clone)]
pub struct Settings {
    pub key: String,
    pub worker: String,
    pub campaign_id: String,
    pub limit_per_s: f64,
    pub ttl: Duration,
    pub sync: Duration,
    pub retry_after_cap: Duration,
}

/// One pod's membership in the fleet: renews its row, recomputes its share, drives the pacer.
pub struct Coordinator {
    pool: PgPool,
    s: Settings,
    pod_id: Uuid,
    pacer: Pacer,
    busy: Arc<AtomicBool>,
    throttled: mpsc::UnboundedReceiver<Option<Duration>>,
}

/// A live member of a rate-limit key, as `status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Member {
    pub worker: String,
    pub campaign_id: String,
    pub share_per_s: f64,
    pub weight: f64,
    pub expires_in_s: f64,
}

impl Coordinator {
    pub fn new(pool: PgPool, s: Settings, pacer: Pacer) -> (Self, Signals) {
        let (tx, rx) = mpsc::unbounded_channel();
        let busy = Arc::new(AtomicBool::new(true));
        let c = Self {
            pool,
            s,
            pod_id: Uuid::new_v4(),
            pacer,
            busy: busy.clone(),
            throttled: rx,
        };
        (
            c,
            Signals {
                busy,
                throttled: tx,
            },
        )
    }

    /// Rounds every `RATE_SYNC_MS` (and at once after a 429) until `stop`, then leaves.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.s.sync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut mine: Option<PodRow> = None;
        let mut pending_429: Option<Option<Duration>> = None;
        let mut failing = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                Some(ra) = self.throttled.recv() => {
                    pending_429 = Some(longest(pending_429, ra));
                    while let Ok(ra) = self.throttled.try_recv() {
                        pending_429 = Some(longest(pending_429, ra));
                    }
                }
            }
            let started = Instant::now();
            let report = Report {
                weight: if self.busy.load(Ordering::Relaxed) {
                    1.0
                } else {
                    0.0
                },
                limit_per_s: self.s.limit_per_s,
                throttled: pending_429.map(|ra| ra.map(|d| d.min(self.s.retry_after_cap))),
                ttl: self.s.ttl,
            };
            // Bounded: a hung round must not outlive the share it would renew.
            let round =
                tokio::time::timeout(self.s.ttl, self.round(mine.as_ref(), report, started));
            let failed = match round.await {
                Ok(Ok(plan)) => {
                    if failing {
                        info!(
                            share_per_s = plan.me.share_per_s,
                            "rate share renewed again"
                        );
                        failing = false;
                    }
                    pending_429 = None;
                    mine = Some(plan.me);
                    continue;
                }
                Ok(Err(e)) => crate::store::error_text(&e),
                Err(_) => "the round timed out".to_string(),
            };
            // Not renewed: the share lapses by itself (the pacer's grant has a validity), so the
            // gauge says 0 now; our row is re-read next time (this round may have committed).
            // Said once per outage, not once per round.
            if !failing {
                warn!(error = %failed, "rate share not renewed; sending stops when it lapses (RATE_SHARE_TTL_MS) unless the database answers");
            }
            failing = true;
            m::rate_share(0.0);
            mine = None;
        }
        self.leave().await;
    }

    /// One round in one transaction. The share is lowered locally *before* the commit and
    /// raised only after it (see the module docs).
    async fn round(
        &self,
        mine: Option<&PodRow>,
        report: Report,
        started: Instant,
    ) -> Result<Plan, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // The lock that serialises every round of this key, and the time under it.
        // Invariant: a pod's share is computed from every other pod's committed rate as it is
        // while no one else can change theirs; clock_timestamp() is read after the lock.
        // language=PostgreSQL
        let r = sqlx::query(
            r#"
            INSERT INTO rate_limits AS l (limit_key, effective_per_s, updated_at)
            VALUES ($1, $2, clock_timestamp())
            ON CONFLICT (limit_key) DO UPDATE SET limit_key = l.limit_key
            RETURNING l.effective_per_s, l.paused_until, l.last_decrease_at, l.updated_at,
                      clock_timestamp()
            "#,
        )
        .bind(&self.s.key)
        .bind(self.s.limit_per_s)
        .fetch_one(&mut *tx)
        .await?;
        let limit = LimitRow {
            effective_per_s: r.get(0),
            paused_until: r.get(1),
            last_decrease_at: r.get(2),
            updated_at: r.get(3),
        };
        let now: DateTime<Utc> = r.get(4);
        // Every pod of the key, live or recently gone (their capacity may still be committed).
        // language=PostgreSQL
        let rows = sqlx::query(
            r#"
            SELECT pod_id, weight, limit_per_s, share_per_s, prev_share_per_s,
                   share_changed_at, expires_at
              FROM rate_pods
             WHERE limit_key = $1
            "#,
        )
        .bind(&self.s.key)
        .fetch_all(&mut *tx)
        .await?;
        let mut from_db: Option<PodRow> = None;
        let mut others = Vec::with_capacity(rows.len());
        for r in rows {
            let p = PodRow {
                pod_id: r.get(0),
                weight: r.get(1),
                limit_per_s: r.get(2),
                share_per_s: r.get(3),
                prev_share_per_s: r.get(4),
                share_changed_at: r.get(5),
                expires_at: r.get(6),
            };
            if p.pod_id == self.pod_id {
                from_db = Some(p);
            } else {
                others.push(p);
            }
        }
        // Our row as the database has it wins over our memory of it (a lost commit).
        let mine = from_db.as_ref().or(mine);
        let plan = plan_round(now, mine, self.pod_id, report, &others, &limit);
        let valid_until = started + self.s.ttl;
        // Slower at once, before anyone can see the capacity as ours no more.
        self.pacer.lower_to(plan.me.share_per_s);
        // Invariant: share_changed_at is stamped after this pod slowed down, so the window in
        // which its old rate still counts begins no earlier than its last send at that rate.
        // language=PostgreSQL
        sqlx::query(
            r#"
            INSERT INTO rate_pods AS p (limit_key, pod_id, worker, campaign_id, weight, limit_per_s,
                                   share_per_s, prev_share_per_s, share_changed_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp(),
                    clock_timestamp() + make_interval(secs => $10))
            ON CONFLICT (limit_key, pod_id) DO UPDATE
               SET weight           = EXCLUDED.weight,
                   limit_per_s      = EXCLUDED.limit_per_s,
                   share_per_s      = EXCLUDED.share_per_s,
                   prev_share_per_s = EXCLUDED.prev_share_per_s,
                   share_changed_at = CASE WHEN $9 THEN clock_timestamp() ELSE p.share_changed_at END,
                   expires_at       = EXCLUDED.expires_at
            "#,
        )
        .bind(&self.s.key)
        .bind(self.pod_id)
        .bind(&self.s.worker)
        .bind(&self.s.campaign_id)
        .bind(plan.me.weight)
        .bind(plan.me.limit_per_s)
        .bind(plan.me.share_per_s)
        .bind(plan.me.prev_share_per_s)
        .bind(plan.changed || mine.is_none())
        .bind(self.s.ttl.as_secs_f64())
        .execute(&mut *tx)
        .await?;
        // The key's AIMD state and pause. Invariant: written under the same lock, so two pods
        // reporting one 429 storm cut the limit once.
        // language=PostgreSQL
        sqlx::query(
            r#"
            UPDATE rate_limits
               SET effective_per_s = $2, paused_until = $3, last_decrease_at = $4, updated_at = $5
             WHERE limit_key = $1
            "#,
        )
        .bind(&self.s.key)
        .bind(plan.limit.effective_per_s)
        .bind(plan.limit.paused_until)
        .bind(plan.limit.last_decrease_at)
        .bind(plan.limit.updated_at)
        .execute(&mut *tx)
        .await?;
        // Forget pods gone for a while (kept that long only for `status`).
        // language=PostgreSQL
        sqlx::query(
            "DELETE FROM rate_pods WHERE limit_key = $1 AND expires_at < clock_timestamp() - interval '10 minutes'",
        )
        .bind(&self.s.key)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;

        // Committed: the new share (raised or not) is ours until the TTL from this round's start.
        self.pacer.grant(plan.me.share_per_s, valid_until);
        if let Some(p) = plan.limit.paused_until.filter(|p| *p > now) {
            let left = (p - now).to_std().unwrap_or_default();
            self.pacer.pause_until(Instant::now() + left);
        }
        m::rate_share(plan.me.share_per_s);
        m::rate_limit(plan.fleet_limit);
        m::rate_effective_limit(plan.limit.effective_per_s);
        m::rate_live_pods(plan.live_pods);
        if plan.changed {
            debug!(
                share_per_s = plan.me.share_per_s,
                effective_per_s = plan.limit.effective_per_s,
                live_pods = plan.live_pods,
                "rate share changed"
            );
        }
        Ok(plan)
    }

    /// Stops sending, then marks the row expired: its capacity is free one second later.
    async fn leave(&self) {
        self.pacer.revoke();
        m::rate_share(0.0);
        // Invariant: only after the pacer is revoked, so the committed window starts after the
        // last request this pod can start.
        // language=PostgreSQL
        let q = sqlx::query(
            r#"
            UPDATE rate_pods
               SET expires_at = least(expires_at, clock_timestamp()), weight = 0
             WHERE limit_key = $1 AND pod_id = $2
            "#,
        )
        .bind(&self.s.key)
        .bind(self.pod_id);
        match tokio::time::timeout(Duration::from_secs(2), q.execute(&self.pool)).await {
            Ok(Ok(_)) => debug!("left the rate-limit fleet"),
            _ => warn!(
                "could not mark this pod gone; its share frees when it expires (RATE_SHARE_TTL_MS)"
            ),
        }
    }
}

fn longest(a: Option<Option<Duration>>, b: Option<Duration>) -> Option<Duration> {
    match (a.flatten(), b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

/// The live members of a limit key and the key's state, for `status` and tests.
pub async fn members(pool: &PgPool, key: &str) -> Result<Vec<Member>, sqlx::Error> {
    // language=PostgreSQL
    let rows = sqlx::query(
        r#"
        SELECT worker, campaign_id, share_per_s, weight,
               extract(epoch FROM expires_at - clock_timestamp())::float8
          FROM rate_pods
         WHERE limit_key = $1 AND expires_at > clock_timestamp()
         ORDER BY worker
        "#,
    )
    .bind(key)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Member {
            worker: r.get(0),
            campaign_id: r.get(1),
            share_per_s: r.get(2),
            weight: r.get(3),
            expires_in_s: r.get(4),
        })
        .collect())
}

/// The rate-limit keys a campaign's live pods send under, each with every live member of the
/// key (other campaigns on the same provider account included: they share its limit).
pub async fn limits_of_campaign(
    pool: &PgPool,
    campaign_id: &str,
) -> Result<Vec<KeyState>, sqlx::Error> {
    // language=PostgreSQL
    let rows = sqlx::query(
        r#"
        SELECT l.limit_key, l.effective_per_s,
               extract(epoch FROM l.paused_until - clock_timestamp())::float8,
               (SELECT min(p.limit_per_s) FROM rate_pods p
                 WHERE p.limit_key = l.limit_key AND p.expires_at > clock_timestamp())
          FROM rate_limits l
         WHERE l.limit_key IN (SELECT limit_key FROM rate_pods
                                WHERE campaign_id = $1 AND expires_at > clock_timestamp())
         ORDER BY l.limit_key
        "#,
    )
    .bind(campaign_id)
    .fetch_all(pool)
    .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let key: String = r.get(0);
        let members = members(pool, &key).await?;
        out.push(KeyState {
            limit_per_s: r.get::<Option<f64>, _>(3).unwrap_or(0.0),
            effective_per_s: r.get(1),
            paused_for_s: r.get::<Option<f64>, _>(2).filter(|s| *s > 0.0),
            key,
            members,
        });
    }
    Ok(out)
}

/// One limit key as `status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyState {
    pub key: String,
    /// The configured limit (the smallest among live pods).
    pub limit_per_s: f64,
    /// After AIMD cuts on 429s.
    pub effective_per_s: f64,
    /// Seconds left of a fleet-wide pause after a 429.
    pub paused_for_s: Option<f64>,
    pub members: Vec<Member>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    const TTL: Duration = Duration::from_millis(3000);

    #[test]
    fn the_handover_second_and_the_share_end_at_their_instant_exactly() {
        let row = PodRow {
            pod_id: Uuid::nil(),
            weight: 1.0,
            limit_per_s: 500.0,
            share_per_s: 100.0,
            prev_share_per_s: 250.0,
            share_changed_at: t(0),
            expires_at: t(3000),
        };
        // Within the handover second the old, larger share is still committed; from its end
        // (inclusive) only the new one.
        assert_eq!(row.committed(t(999)), 250.0);
        assert_eq!(row.committed(t(1000)), 100.0);
        // Live strictly before expiry; committed until a second after it.
        assert!(row.live(t(2999)));
        assert!(!row.live(t(3000)));
        assert_eq!(row.committed(t(3999)), 100.0);
        assert_eq!(row.committed(t(4000)), 0.0);
    }

    fn report(weight: f64) -> Report {
        Report {
            weight,
            limit_per_s: 500.0,
            throttled: None,
            ttl: TTL,
        }
    }

    fn limit_row() -> LimitRow {
        LimitRow {
            effective_per_s: 500.0,
            paused_until: None,
            last_decrease_at: None,
            updated_at: t(0),
        }
    }

    type Limiter = governor::RateLimiter<
        governor::state::NotKeyed,
        governor::state::InMemoryState,
        FakeRelativeClock,
        governor::middleware::NoOpMiddleware<
            <FakeRelativeClock as governor::clock::Clock>::Instant,
        >,
    >;

    struct SimPod {
        id: Uuid,
        row: Option<PodRow>,
        limiter: Option<Limiter>,
        rate: f64,
        /// Local expiry of the share: round start + TTL.
        valid_until: i64,
        offset_ms: i64,
        /// Rounds and sends (false once left or killed).
        running: bool,
        /// Sends fail to renew (cut off from the database) from this time on.
        cut_off_at: Option<i64>,
    }

    /// A fleet of pods on one fake clock: each rounds every `sync` ms (staggered), applies the
    /// plan as the coordinator does (lower before commit, raise after), and sends greedily
    /// whenever its governor limiter allows. Returns every admitted send (ms, pod index).
    struct Fleet {
        clock: FakeRelativeClock,
        pods: Vec<SimPod>,
        limit: LimitRow,
        sync: i64,
        sends: Vec<(i64, usize)>,
    }

    impl Fleet {
        fn new(sync: i64) -> Self {
            Self {
                clock: FakeRelativeClock::default(),
                pods: Vec::new(),
                limit: limit_row(),
                sync,
                sends: Vec::new(),
            }
        }

        fn join(&mut self, now: i64) -> usize {
            self.pods.push(SimPod {
                id: Uuid::new_v4(),
                row: None,
                limiter: None,
                rate: 0.0,
                valid_until: 0,
                offset_ms: (now + self.pods.len() as i64 * 37) % self.sync,
                running: true,
                cut_off_at: None,
            });
            self.pods.len() - 1
        }

        fn set_rate(&mut self, i: usize, rate: f64) {
            let p = &mut self.pods[i];
            if (p.rate - rate).abs() > 1e-9 || p.limiter.is_none() {
                p.rate = rate;
                p.limiter = crate::pacer::limiter_with_clock(rate, self.clock.clone());
            }
        }

        fn round(&mut self, i: usize, now: i64) {
            let others: Vec<PodRow> = self
                .pods
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, p)| p.row.clone())
                .collect();
            let p = &self.pods[i];
            let plan = plan_round(
                t(now),
                p.row.as_ref(),
                p.id,
                report(1.0),
                &others,
                &self.limit,
            );
            if plan.me.share_per_s < p.rate {
                self.set_rate(i, plan.me.share_per_s);
            }
            self.limit = plan.limit.clone();
            let p = &mut self.pods[i];
            p.row = Some(plan.me.clone());
            p.valid_until = now + TTL.as_millis() as i64;
            self.set_rate(i, plan.me.share_per_s);
        }

        /// Runs from `from` to `to` ms; `events` are applied at their time.
        fn run(&mut self, from: i64, to: i64, events: &mut Vec<(i64, Event)>) {
            for now in from..to {
                events.sort_by_key(|e| e.0);
                while events.first().is_some_and(|e| e.0 <= now) {
                    let (_, ev) = events.remove(0);
                    match ev {
                        Event::Join => {
                            self.join(now);
                        }
                        Event::Leave(i) => {
                            // As Coordinator::leave: revoke, then expire the row.
                            let p = &mut self.pods[i];
                            p.running = false;
                            p.limiter = None;
                            p.rate = 0.0;
                            if let Some(r) = &mut p.row {
                                r.expires_at = r.expires_at.min(t(now));
                                r.weight = 0.0;
                            }
                        }
                        Event::Kill(i) => {
                            let p = &mut self.pods[i];
                            p.running = false;
                            p.limiter = None;
                        }
                        Event::CutOff(i) => self.pods[i].cut_off_at = Some(now),
                    }
                }
                for i in 0..self.pods.len() {
                    let p = &self.pods[i];
                    if !p.running {
                        continue;
                    }
                    let cut = p.cut_off_at.is_some_and(|c| now >= c);
                    if !cut && (now - p.offset_ms).rem_euclid(self.sync) == 0 {
                        self.round(i, now);
                    }
                    // A cut-off pod keeps sending until its local share lapses, then stops.
                    let p = &self.pods[i];
                    if now >= p.valid_until {
                        continue;
                    }
                    if let Some(l) = &p.limiter {
                        while l.check().is_ok() {
                            self.sends.push((now, i));
                        }
                    }
                }
                self.clock.advance(Duration::from_millis(1));
            }
        }

        /// The most sends in any window [t, t + 1000).
        fn worst_window(&self, from: i64, to: i64) -> usize {
            let s: Vec<i64> = self
                .sends
                .iter()
                .map(|(t, _)| *t)
                .filter(|t| (from..to).contains(t))
                .collect();
            (0..s.len())
                .map(|i| s[i..].iter().take_while(|u| **u < s[i] + 1000).count())
                .max()
                .unwrap_or(0)
        }

        fn sent_between(&self, from: i64, to: i64) -> usize {
            self.sends
                .iter()
                .filter(|(t, _)| (from..to).contains(t))
                .count()
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Event {
        Join,
        Leave(usize),
        Kill(usize),
        CutOff(usize),
    }

    /// The sum of the bursts the pods may add (10 ms worth of each share, at least 1 each).
    fn burst_allowance(pods: usize) -> usize {
        crate::pacer::burst(500.0) as usize + pods
    }

    #[test]
    fn joins_leaves_crashes_and_cut_offs_never_push_any_one_second_window_over_the_limit() {
        let mut f = Fleet::new(250);
        let mut events = vec![
            (0, Event::Join),
            (0, Event::Join),
            (5_000, Event::Join),
            (5_000, Event::Join),
            (8_000, Event::Join), // 5 pods
            (12_000, Event::Leave(1)),
            (15_000, Event::Kill(2)),
            (19_000, Event::CutOff(3)),
            (24_000, Event::Join),
            (24_100, Event::Join),
            (24_200, Event::Join),
            (28_000, Event::Leave(0)),
            (28_000, Event::Leave(4)),
        ];
        f.run(0, 34_000, &mut events);
        let worst = f.worst_window(0, 34_000);
        assert!(
            worst <= 500 + burst_allowance(8),
            "{worst} sends in one second against a limit of 500"
        );
        // The rule costs little: each steady stretch delivers ≥ 95 % of the limit once it has
        // settled (3 s after each change).
        for (from, to) in [
            (2_000, 5_000),
            (10_000, 12_000),
            (23_600, 24_000),
            (31_000, 34_000),
        ] {
            let rate = f.sent_between(from, to) as f64 / ((to - from) as f64 / 1000.0);
            assert!(rate >= 475.0, "{rate:.0}/s between {from} and {to} ms");
        }
    }

    #[test]
    fn shares_follow_weight_a_lone_idle_pod_holds_none_and_a_tiny_share_still_drops_to_zero() {
        let l = limit_row();
        // Alone and idle: nothing (the total weight is 0: no share from a division by it).
        let idle = plan_round(t(0), None, Uuid::new_v4(), report(0.0), &[], &l);
        assert_eq!(idle.me.share_per_s, 0.0);
        // The fair share is proportional to weight: 3 of 4 next to a pod holding nothing.
        let other = PodRow {
            pod_id: Uuid::new_v4(),
            weight: 1.0,
            limit_per_s: 500.0,
            share_per_s: 0.0,
            prev_share_per_s: 0.0,
            share_changed_at: t(-5000),
            expires_at: t(3000),
        };
        let heavy = plan_round(
            t(0),
            None,
            Uuid::new_v4(),
            report(3.0),
            &[other.clone()],
            &l,
        );
        assert_eq!(heavy.me.share_per_s, 375.0);
        // A share smaller than MIN_CHANGE_PER_S is still given up when the pod goes idle.
        let tiny = PodRow {
            share_per_s: 0.3,
            ..other
        };
        let p = plan_round(t(0), Some(&tiny), tiny.pod_id, report(0.0), &[], &l);
        assert!(p.changed);
        assert_eq!(p.me.share_per_s, 0.0);
    }

    #[test]
    fn the_longest_retry_after_of_a_round_wins_and_none_means_the_default() {
        let s = Duration::from_secs;
        assert_eq!(longest(None, None), None);
        assert_eq!(longest(Some(None), None), None);
        assert_eq!(longest(None, Some(s(3))), Some(s(3)));
        assert_eq!(longest(Some(None), Some(s(3))), Some(s(3)));
        assert_eq!(longest(Some(Some(s(2))), None), Some(s(2)));
        assert_eq!(longest(Some(Some(s(5))), Some(s(3))), Some(s(5)));
        assert_eq!(longest(Some(Some(s(2))), Some(s(7))), Some(s(7)));
    }

    #[test]
    fn a_share_of_exactly_the_minimum_rate_is_a_rate_and_live_pods_count_this_one() {
        // Limit 0.01/s (MIN_RATE_PER_S), one pod at 0.3/s: its fair share is 0.01, a change of
        // 0.29 (< MIN_CHANGE_PER_S) and not a drop to nothing, so the share is left alone.
        let row = PodRow {
            pod_id: Uuid::new_v4(),
            weight: 1.0,
            limit_per_s: MIN_RATE_PER_S,
            share_per_s: 0.3,
            prev_share_per_s: 0.3,
            share_changed_at: t(-5000),
            expires_at: t(3000),
        };
        let tiny_limit = Report {
            limit_per_s: MIN_RATE_PER_S,
            ..report(1.0)
        };
        let p = plan_round(t(0), Some(&row), row.pod_id, tiny_limit, &[], &limit_row());
        assert!(!p.changed, "{p:?}");
        assert_eq!(p.me.share_per_s, 0.3);
        assert_eq!(p.live_pods, 1);
        let two = plan_round(
            t(0),
            None,
            Uuid::new_v4(),
            report(1.0),
            &[row],
            &limit_row(),
        );
        assert_eq!(two.live_pods, 2);
    }

    #[test]
    fn a_lone_pod_gets_the_whole_limit_at_once_and_an_idle_pod_holds_none() {
        let id = Uuid::new_v4();
        let p = plan_round(t(0), None, id, report(1.0), &[], &limit_row());
        assert_eq!(p.me.share_per_s, 500.0);
        let busy = p.me.clone();
        // An idle second pod gets nothing and takes nothing.
        let idle = plan_round(
            t(100),
            None,
            Uuid::new_v4(),
            report(0.0),
            &[busy.clone()],
            &limit_row(),
        );
        assert_eq!(idle.me.share_per_s, 0.0);
        let again = plan_round(
            t(350),
            Some(&busy),
            id,
            report(1.0),
            &[idle.me],
            &limit_row(),
        );
        assert_eq!(again.me.share_per_s, 500.0);
    }

    #[test]
    fn a_joining_pod_waits_for_the_capacity_the_others_gave_up_a_second_ago() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let l = limit_row();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &l).me;
        let b0 = plan_round(t(100), None, b, report(1.0), &[a0.clone()], &l).me;
        assert_eq!(b0.share_per_s, 0.0, "nothing free while a holds it all");
        let a1 = plan_round(t(250), Some(&a0), a, report(1.0), &[b0.clone()], &l).me;
        assert_eq!(a1.share_per_s, 250.0, "a lowers to its fair share at once");
        let b1 = plan_round(t(1_200), Some(&b0), b, report(1.0), &[a1.clone()], &l).me;
        assert_eq!(
            b1.share_per_s, 0.0,
            "a's old rate is committed until 1 s after its change"
        );
        let b2 = plan_round(t(1_251), Some(&b1), b, report(1.0), &[a1.clone()], &l).me;
        assert_eq!(b2.share_per_s, 250.0);
    }

    #[test]
    fn a_crashed_pods_capacity_is_free_only_a_second_after_its_share_expired() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let l = limit_row();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &l).me;
        let b0 = plan_round(t(10), None, b, report(1.0), &[a0.clone()], &l).me;
        let a1 = plan_round(t(250), Some(&a0), a, report(1.0), &[b0.clone()], &l).me;
        let b1 = plan_round(t(1_300), Some(&b0), b, report(1.0), &[a1.clone()], &l).me;
        assert_eq!(b1.share_per_s, 250.0);
        // a crashes after its round at 250 ms: expires at 3 250 ms, committed until 4 250 ms.
        let b2 = plan_round(t(4_000), Some(&b1), b, report(1.0), &[a1.clone()], &l).me;
        assert_eq!(b2.share_per_s, 250.0, "a's share is still committed");
        let b3 = plan_round(t(4_251), Some(&b2), b, report(1.0), &[a1], &l).me;
        assert_eq!(b3.share_per_s, 500.0);
    }

    #[test]
    fn a_429_pauses_the_fleet_cuts_the_limit_once_a_second_and_it_recovers_additively() {
        let a = Uuid::new_v4();
        let mut r = report(1.0);
        r.throttled = Some(Some(Duration::from_secs(2)));
        let p = plan_round(t(1_000), None, a, r, &[], &limit_row());
        assert_eq!(p.limit.paused_until, Some(t(3_000)));
        assert!(
            (p.limit.effective_per_s - 350.0).abs() < 1e-9,
            "{:?}",
            p.limit
        );
        assert_eq!(p.me.share_per_s, 350.0);
        // A second 429 of the same storm 200 ms later extends the pause but does not cut again.
        let p2 = plan_round(t(1_200), Some(&p.me), a, r, &[], &p.limit);
        assert!((p2.limit.effective_per_s - 350.0).abs() < 1e-9);
        assert_eq!(p2.limit.paused_until, Some(t(3_200)));
        // No increase during the pause; afterwards +5 % of the limit per second.
        let p3 = plan_round(t(3_000), Some(&p2.me), a, report(1.0), &[], &p2.limit);
        assert!((p3.limit.effective_per_s - 350.0).abs() < 1e-9);
        let p4 = plan_round(t(5_200), Some(&p3.me), a, report(1.0), &[], &p3.limit);
        assert!(
            (p4.limit.effective_per_s - 400.0).abs() < 1e-6,
            "{:?}",
            p4.limit
        );
        let p5 = plan_round(t(60_000), Some(&p4.me), a, report(1.0), &[], &p4.limit);
        assert_eq!(p5.limit.effective_per_s, 500.0, "never above the limit");
    }

    #[test]
    fn the_smallest_configured_limit_of_the_live_pods_wins() {
        let a = Uuid::new_v4();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &limit_row()).me;
        let mut r = report(1.0);
        r.limit_per_s = 200.0;
        let b = plan_round(t(10), None, Uuid::new_v4(), r, &[a0], &limit_row());
        assert_eq!(b.fleet_limit, 200.0);
        assert!(b.limit.effective_per_s <= 200.0);
    }
}
