//! One pod's membership in the fleet-wide rate limit: every `RATE_SYNC_MS` (and at once after a
//! 429) a round in one transaction renews the pod's row, recomputes its share with the pure
//! [`plan_round`] and hands it to the [`Pacer`]; on stop it leaves. The rules it keeps are in
//! [`super`]; the statements are [`crate::store::rate`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::pacer::Pacer;
use super::plan::{plan_round, Plan, PodRow, Report};
use crate::metrics as m;
use crate::store::connect::error_text;
use crate::store::rate::{self as sql, PodName};

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

/// What a coordinator needs to know (from [`crate::config::RunConfig`]).
#[derive(Debug, Clone)]
pub struct CoordinatorSettings {
    /// `RATE_LIMIT_KEY`: the pods sharing one limit.
    pub key: String,
    /// This pod's name (`WORKER_ID`), for `status`.
    pub worker: String,
    pub campaign_id: String,
    /// `MAIL_RATE_PER_S`: the limit of the whole fleet as this pod is configured.
    pub limit_per_s: f64,
    /// `RATE_SHARE_TTL_MS`: how long a share is valid without a renewal.
    pub ttl: Duration,
    /// `RATE_SYNC_MS`: how often a round runs.
    pub sync: Duration,
    /// `RETRY_AFTER_MAX_S`: the longest fleet-wide pause a 429 may cause.
    pub retry_after_cap: Duration,
}

/// One pod's membership in the fleet: renews its row, recomputes its share, drives the pacer.
pub struct Coordinator {
    pool: PgPool,
    s: CoordinatorSettings,
    pod_id: Uuid,
    pacer: Pacer,
    busy: Arc<AtomicBool>,
    throttled: mpsc::UnboundedReceiver<Option<Duration>>,
}

impl Coordinator {
    pub fn new(pool: PgPool, s: CoordinatorSettings, pacer: Pacer) -> (Self, Signals) {
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
        let signals = Signals {
            busy,
            throttled: tx,
        };
        (c, signals)
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
            let report = self.report(pending_429);
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
                Ok(Err(e)) => error_text(&e),
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

    /// What this pod reports in a round: its weight, its limit, the 429s since the last one.
    fn report(&self, pending_429: Option<Option<Duration>>) -> Report {
        Report {
            weight: if self.busy.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
            limit_per_s: self.s.limit_per_s,
            throttled: pending_429.map(|ra| ra.map(|d| d.min(self.s.retry_after_cap))),
            ttl: self.s.ttl,
        }
    }

    /// One round in one transaction. The share is lowered locally *before* the commit and
    /// raised only after it (see the module docs of [`super`]).
    async fn round(
        &self,
        mine: Option<&PodRow>,
        report: Report,
        started: Instant,
    ) -> Result<Plan, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let locked = sql::lock_key(&mut tx, &self.s.key, self.s.limit_per_s).await?;
        let (from_db, others) = sql::pods(&mut tx, &self.s.key, self.pod_id).await?;
        // Our row as the database has it wins over our memory of it (a lost commit).
        let mine = from_db.as_ref().or(mine);
        let plan = plan_round(
            locked.now,
            mine,
            self.pod_id,
            report,
            &others,
            &locked.limit,
        );
        // Slower at once, before anyone can see the capacity as ours no more.
        self.pacer.lower_to(plan.me.share_per_s);
        let who = PodName {
            key: &self.s.key,
            pod_id: self.pod_id,
            worker: &self.s.worker,
            campaign_id: &self.s.campaign_id,
        };
        let changed = plan.changed || mine.is_none();
        sql::save_pod(&mut tx, &who, &plan.me, changed, self.s.ttl.as_secs_f64()).await?;
        sql::save_limit(&mut tx, &self.s.key, &plan.limit).await?;
        sql::forget_gone(&mut tx, &self.s.key).await?;
        tx.commit().await?;
        self.apply(&plan, started, locked.now);
        Ok(plan)
    }

    /// After the commit: the new share (raised or not) is ours until the TTL from the round's
    /// start; a fleet-wide pause holds this pod too.
    fn apply(&self, plan: &Plan, started: Instant, now: chrono::DateTime<chrono::Utc>) {
        self.pacer.grant(plan.me.share_per_s, started + self.s.ttl);
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
    }

    /// Stops sending, then marks the row expired: its capacity is free one second later.
    async fn leave(&self) {
        self.pacer.revoke();
        m::rate_share(0.0);
        let left = sql::leave(&self.pool, &self.s.key, self.pod_id);
        match tokio::time::timeout(Duration::from_secs(2), left).await {
            Ok(Ok(())) => debug!("left the rate-limit fleet"),
            _ => warn!(
                "could not mark this pod gone; its share frees when it expires (RATE_SHARE_TTL_MS)"
            ),
        }
    }
}

/// The longest of the `Retry-After`s of one round's 429s (`None`: the default pause).
fn longest(a: Option<Option<Duration>>, b: Option<Duration>) -> Option<Duration> {
    match (a.flatten(), b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
