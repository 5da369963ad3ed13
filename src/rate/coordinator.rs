//! One pod's membership in the fleet-wide rate limit: every `RATE_SYNC_MS` (and at once after a
//! 429 or a refusal) a round in one transaction renews the pod's row, recomputes its share and
//! its quota grant with the pure [`plan_round`], hands them to the [`Pacer`] and tells the
//! process what stops it ([`FleetView`]: a refusal, the quota); on stop it leaves. The rules it keeps are in
//! [`super`]; the statements are [`crate::store::rate`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::demand::Demand;
use super::pacer::Pacer;
use super::plan::{plan_round, Plan, PodRow, Refused, Report};
use crate::metrics as m;
use crate::outcome::Refusal;
use crate::store::connect::error_text;
use crate::store::rate::{self as sql, PodName};

/// What the provider said that concerns the whole fleet, for the next round.
enum Said {
    /// 429, with this `Retry-After`.
    Throttled(Option<Duration>),
    /// A refusal of the account or the endpoint, with its status.
    Refused(u16, Refusal),
    /// The vendor's own quota is used up, freeing in this long (`None`: it did not say).
    VendorQuota(Option<Duration>),
}

/// How long the fleet waits when the vendor says its quota is used up without saying until
/// when (SES's daily quota, SendGrid's credits): one probe an hour per pod, not a storm.
pub const VENDOR_QUOTA_PROBE: Duration = Duration::from_secs(3600);
/// The longest wait a vendor's quota answer may impose (a month's quota says "next month").
pub const VENDOR_QUOTA_MAX: Duration = Duration::from_secs(24 * 3600);

/// The key's state as this pod's last round saw it: what stops a pass besides its own work.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetView {
    /// A round has committed since this process started (before that, nothing is known).
    pub known: bool,
    /// The key is refused (by this pod's answer or another's) until an operator lifts it.
    pub refused: Option<(u16, Refusal)>,
    /// The daily quota has nothing left for this pod until usage ages out, or the vendor's
    /// own quota is used up (`vendor_quota`).
    pub quota_full: bool,
    /// It is the vendor's quota (until it frees), not `MAIL_DAILY_QUOTA`.
    pub vendor_quota: bool,
}

/// What the rest of the process tells the coordinator (whether it has work, 429s, refusals)
/// and hears back ([`FleetView`]).
#[derive(Clone)]
pub struct Signals {
    busy: Arc<AtomicBool>,
    said: mpsc::UnboundedSender<Said>,
    view: watch::Receiver<FleetView>,
}

impl Signals {
    /// This process has rows to send (its campaign's weight) or nothing claimable (weight 0).
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
    }
    /// The provider answered 429 (with this `Retry-After`): start a round now.
    pub fn throttled(&self, retry_after: Option<Duration>) {
        let _ = self.said.send(Said::Throttled(retry_after));
    }
    /// The provider refused the account or the endpoint: record it for the key now.
    pub fn refused(&self, status: u16, refusal: Refusal) {
        let _ = self.said.send(Said::Refused(status, refusal));
    }
    /// The vendor's own quota is used up (freeing in `frees_in`, if it said): record it for
    /// the key now.
    pub fn vendor_quota(&self, frees_in: Option<Duration>) {
        let _ = self.said.send(Said::VendorQuota(frees_in));
    }
    /// The key's state as the last round saw it; `changed()` on it wakes on the next change.
    pub fn view(&self) -> watch::Receiver<FleetView> {
        self.view.clone()
    }

    /// The key's state once a round has committed, waiting at most `limit` for one (the
    /// database may be slow; without a round this process has no share and sends nothing).
    pub async fn known_view(&self, limit: Duration) -> FleetView {
        let mut rx = self.view.clone();
        let _ = tokio::time::timeout(limit, rx.wait_for(|v| v.known)).await;
        let v = rx.borrow().clone();
        v
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
    /// `MAIL_DAILY_QUOTA`.
    pub daily_quota: Option<u64>,
}

/// One pod's membership in the fleet: renews its row, recomputes its share, drives the pacer.
pub struct Coordinator {
    pool: PgPool,
    s: CoordinatorSettings,
    pod_id: Uuid,
    pacer: Pacer,
    busy: Arc<AtomicBool>,
    said: mpsc::UnboundedReceiver<Said>,
    view: watch::Sender<FleetView>,
    /// What this pod can use of its share, measured round after round.
    demand: Demand,
    born: Instant,
}

/// What the provider said since the last round that committed.
#[derive(Default)]
struct Pending {
    throttled: Option<Option<Duration>>,
    refused: Option<(u16, Refusal)>,
    vendor_quota: Option<Duration>,
}

impl Pending {
    fn add(&mut self, said: Said) {
        match said {
            Said::Throttled(ra) => self.throttled = Some(longest(self.throttled, ra)),
            Said::Refused(status, r) => {
                self.refused.get_or_insert((status, r));
            }
            Said::VendorQuota(frees_in) => {
                let wait = frees_in.unwrap_or(VENDOR_QUOTA_PROBE).min(VENDOR_QUOTA_MAX);
                self.vendor_quota = Some(self.vendor_quota.map_or(wait, |w| w.max(wait)));
            }
        }
    }
}

impl Coordinator {
    pub fn new(pool: PgPool, s: CoordinatorSettings, pacer: Pacer) -> (Self, Signals) {
        let (tx, rx) = mpsc::unbounded_channel();
        let busy = Arc::new(AtomicBool::new(true));
        let (view_tx, view_rx) = watch::channel(FleetView::default());
        let c = Self {
            pool,
            s,
            pod_id: Uuid::new_v4(),
            pacer,
            busy: busy.clone(),
            said: rx,
            view: view_tx,
            demand: Demand::default(),
            born: Instant::now(),
        };
        let signals = Signals {
            busy,
            said: tx,
            view: view_rx,
        };
        (c, signals)
    }

    /// Rounds every `RATE_SYNC_MS` (and at once after a 429 or a refusal) until `stop`, then
    /// leaves.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.s.sync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut mine: Option<PodRow> = None;
        let mut pending = Pending::default();
        let mut failing = false;
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
                Some(said) = self.said.recv() => {
                    pending.add(said);
                    while let Ok(said) = self.said.try_recv() {
                        pending.add(said);
                    }
                }
            }
            let started = Instant::now();
            let mut report = self.report(&pending);
            report.demand = self.demand.demand(started - self.born, self.pacer.spent());
            // Bounded: a hung round must not outlive the share it would renew.
            let round =
                tokio::time::timeout(self.s.ttl, self.round(mine.as_ref(), report, started));
            // Told to leave mid-round (a database that stopped answering holds the round until
            // its timeout): the round is dropped (its transaction rolls back) and the pod leaves.
            let round = tokio::select! {
                r = round => r,
                _ = stop.cancelled() => break,
            };
            let failed = match round {
                Ok(Ok(plan)) => {
                    if failing {
                        info!(
                            share_per_s = plan.me.share_per_s,
                            "rate share renewed again"
                        );
                        failing = false;
                    }
                    pending = Pending::default();
                    let at = Instant::now() - self.born;
                    self.demand
                        .record(at, self.pacer.spent(), plan.me.share_per_s);
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
        self.record_last_refusal(mine.as_ref(), pending).await;
        self.leave().await;
    }

    /// A refusal or a vendor's quota this pod saw must reach the key even if the pod stops at
    /// once (it does: either stops its pass): one last round records it before leaving.
    async fn record_last_refusal(&mut self, mine: Option<&PodRow>, mut pending: Pending) {
        while let Ok(said) = self.said.try_recv() {
            pending.add(said);
        }
        if pending.refused.is_none() && pending.vendor_quota.is_none() {
            return;
        }
        self.busy.store(false, Ordering::Relaxed);
        let report = self.report(&pending);
        let round = self.round(mine, report, Instant::now());
        match tokio::time::timeout(self.s.ttl, round).await {
            Ok(Ok(_)) => debug!("refusal recorded for the key"),
            _ => warn!("could not record the provider's refusal for the key; the other pods will meet it themselves"),
        }
    }

    /// What this pod reports in a round: whether it has work (weight 1 or 0: the round
    /// multiplies it by its campaign's weight), its limit, the 429s and the refusal since the
    /// last one, its spending.
    fn report(&self, pending: &Pending) -> Report {
        Report {
            campaign: self.s.campaign_id.clone(),
            demand: None,
            weight: if self.busy.load(Ordering::Relaxed) {
                1.0
            } else {
                0.0
            },
            limit_per_s: self.s.limit_per_s,
            throttled: pending
                .throttled
                .map(|ra| ra.map(|d| d.min(self.s.retry_after_cap))),
            ttl: self.s.ttl,
            refused: pending.refused.map(|(status, kind)| Refused {
                status,
                kind,
                campaign: self.s.campaign_id.clone(),
            }),
            spent: self.pacer.spent(),
            daily_quota: self.s.daily_quota,
            vendor_quota: pending.vendor_quota,
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
        // Read before the key's lock: every round of the key waits on that lock, so nothing
        // that needs no lock runs under it.
        let weight = sql::campaign_weight(&mut tx, &self.s.campaign_id).await?;
        let locked = sql::lock_key(&mut tx, &self.s.key, self.s.limit_per_s).await?;
        let report = Report {
            weight: report.weight * weight,
            ..report
        };
        let (from_db, others) = sql::pods(&mut tx, &self.s.key, self.pod_id).await?;
        let used_24h = sql::used_24h(&mut tx, &self.s.key).await?;
        // Our row as the database has it wins over our memory of it (a lost commit).
        let mine = from_db.as_ref().or(mine);
        let plan = plan_round(
            locked.now,
            mine,
            self.pod_id,
            &report,
            &others,
            &locked.limit,
            used_24h,
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
        sql::add_usage(&mut tx, &self.s.key, plan.used_add).await?;
        sql::forget_gone(&mut tx, &self.s.key).await?;
        tx.commit().await?;
        self.apply(&plan, started, locked.now);
        Ok(plan)
    }

    /// After the commit: the new share (raised or not) is ours until the TTL from the round's
    /// start; a fleet-wide pause holds this pod too.
    fn apply(&self, plan: &Plan, started: Instant, now: chrono::DateTime<chrono::Utc>) {
        self.pacer
            .set_quota(plan.quota.map(|q| q.granted.max(0) as u64));
        self.pacer.grant(plan.me.share_per_s, started + self.s.ttl);
        let refused = match (
            plan.limit.refused_status,
            plan.limit.refused_kind.as_deref(),
        ) {
            (Some(status), Some(kind)) => Refusal::parse(kind).map(|r| (status as u16, r)),
            _ => None,
        };
        self.view.send_if_modified(|v| {
            let new = FleetView {
                known: true,
                refused,
                quota_full: plan.quota.is_some_and(|q| q.full) || plan.vendor_quota_full,
                vendor_quota: plan.vendor_quota_full,
            };
            let changed = *v != new;
            *v = new;
            changed
        });
        m::account_refused(refused.is_some());
        if let Some(q) = plan.quota {
            m::quota(q.used, q.daily);
        }
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
        let spent = self.pacer.spent() as i64;
        let left = sql::leave(&self.pool, &self.s.key, self.pod_id, spent);
        match tokio::time::timeout(LEAVE_TIMEOUT, left).await {
            Ok(Ok(())) => debug!("left the rate-limit fleet"),
            _ => warn!(
                "could not mark this pod gone; its share frees when it expires (RATE_SHARE_TTL_MS)"
            ),
        }
    }
}

/// How long a leaving pod tries to mark its row gone (part of the shutdown bound:
/// [`crate::worker::WRITES_AFTER_REQUESTS`]).
pub const LEAVE_TIMEOUT: Duration = Duration::from_secs(2);

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
