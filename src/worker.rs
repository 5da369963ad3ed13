//! The work loop: a pipeline per process that keeps the provider busy.
//!
//! ```text
//!  claimer ──rows──▶ gate/dispatcher ──spawns──▶ sends (≤ SEND_CONCURRENCY) ──results──▶ flusher
//!     ▲  claims a batch only when fewer    │ token from the pacer                  │ fenced writes every
//!     │  than `low_water` rows are held    │ fresh opt-out/ownership check          │ FLUSH_MAX_ROWS or
//!     │                                    │                                        │ FLUSH_INTERVAL_MS, or
//!     └──────────── room: rows written ◀────────────────────────────────────────────┤ at once for a waiting claim
//!  heartbeat: every LEASE_S/3 extends the lease of every row still held (fenced) ◀──┘ (rows leave `held`)
//! ```
//!
//! - **Pipelined batches**: the next batch is claimed while the current one is still sending, but
//!   only when fewer than `low_water` rows (about half a second of work) are held — claimed and
//!   not yet written, whether unsent, in flight or answered and waiting for the flusher — so a pod
//!   never hoards rows another pod could send.
//! - **Gate**: before any send starts, the pacer (governor, at this pod's share of the fleet-wide
//!   limit: [`crate::rate_share`]) hands out a token — every HTTP attempt spends one — and a
//!   check at most `OPTOUT_RECHECK_MS` old must have seen the row still ours and not opted out.
//! - **Results flushed as they come**, in small fenced groups, so a crash re-sends at most what
//!   was in flight plus one flush interval.
//! - **Heartbeat**: rows held by a live worker never expire, so `LEASE_S` can be short and a
//!   killed worker's rows come back quickly.
//! - **Provider unreachable** (no connection at all): the row is deferred without spending an
//!   attempt, and the pod pauses, then probes one request at a time until one is answered.
//! - **Stopping** (SIGTERM, deadline, failure threshold, a step's `stop_at`): nothing new is
//!   claimed or started; in-flight requests finish (bounded by the request timeout); their
//!   results are written, and every claimed-but-unsent row is released at once in the same
//!   fenced write, without counting the attempt.
//!
//! Memory is flat in campaign size, and what a SIGKILL can leave `sending` is bounded: a pod holds
//! fewer than `BATCH_SIZE + low_water` rows at any moment (room is made only when a row's result
//! is written, in `Pipeline::forget`; the flusher writes early when the claimer waits for room).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::campaign;
use crate::config::RunConfig;
use crate::metrics as m;
use crate::outage::Outage;
use crate::outcome::{
    failure_check_due, plausible_email, resolve, unreachable_pause, Attempt, ErrorClass,
    Resolution, RetryPolicy,
};
use crate::pacer::Pacer;
use crate::provider::Provider;
use crate::rate_share::{self, Coordinator, Signals};
use crate::report::{RunReport, StopReason, WorkerStats};
use crate::store::{self, ClaimedRow, Hold, Remaining, Store};

/// What one [`Worker::step`] did.
#[derive(Debug)]
pub enum Step {
    /// A batch was claimed and settled (sent, scheduled, failed or released).
    Worked { claimed: usize },
    /// Nothing claimable right now; `remaining.total() == 0` means the campaign is done.
    Empty(Remaining),
}

/// An unrecoverable problem for this run (the database stayed away too long).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("database unavailable for more than {:?}; rows this worker held are re-claimed after their lease. Check the database and rerun: {}", .0, crate::store::error_text(.1))]
    Database(Duration, #[source] sqlx::Error),
}

pub struct Worker {
    cfg: Arc<RunConfig>,
    store: Store,
    provider: Provider,
    /// This process's share of the fleet-wide limit, kept current by the coordinator.
    pacer: Pacer,
    signals: Signals,
    /// Not started yet (taken by the first run or step).
    coordinator: Mutex<Option<Coordinator>>,
    /// The running coordinator: its stop token and task.
    coordinating: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
    policy: RetryPolicy,
    name: String,
    outage_limit: Duration,
    stats: Mutex<WorkerStats>,
    reach: Arc<Reachability>,
}

/// Whether the provider can be reached, as this pod's attempts last found it. While it cannot,
/// the pod's pacer is paused ([`unreachable_pause`]) and the gate sends one request at a time,
/// so only a probe now and then is made; claimed rows wait, leased and heartbeated, instead of
/// each being tried and deferred.
struct Reachability {
    /// This worker's name, for the two log lines (never personal data).
    worker: String,
    down_since: Mutex<Option<Instant>>,
}

impl Reachability {
    /// An attempt could not connect: how long to pause sending.
    fn unreachable(&self, policy: &RetryPolicy) -> Duration {
        let now = Instant::now();
        let mut down = self.down_since.lock().expect("lock");
        if down.is_none() {
            warn!(worker = %self.worker, "provider unreachable (no connection); pausing sends, claimed rows are kept and no attempt is spent");
        }
        let since = *down.get_or_insert(now);
        unreachable_pause(policy, now - since, rand::random::<f64>())
    }

    fn is_down(&self) -> bool {
        self.down_since.lock().expect("lock").is_some()
    }

    /// An attempt got an answer (of any kind): the provider is reachable.
    fn reached(&self) {
        if let Some(since) = self.down_since.lock().expect("lock").take() {
            info!(worker = %self.worker, down_s = since.elapsed().as_secs_f64(), "provider reachable again; sending resumes");
        }
    }
}

/// What a send (or the gate) reports to the flusher.
enum Outcome {
    Row {
        claim_id: Uuid,
        member_id: i64,
        res: Resolution,
        requested: bool,
    },
    /// No longer ours (someone re-claimed it after our lease lapsed): nothing to write.
    Lost { claim_id: Uuid, member_id: i64 },
}

/// One run of the pipeline (a whole `run`, or a single `step`).
struct Pipeline<'a> {
    w: &'a Worker,
    /// The provider template (the settings row's, else the campaign id).
    template: Arc<str>,
    /// Stop claiming and starting sends.
    stop: CancellationToken,
    one_batch: bool,
    failure_budget: i64,
    reason: Mutex<Option<StopReason>>,
    fatal: Mutex<Option<RunError>>,
    /// Rows claimed and not yet written, by claim: what the heartbeat extends.
    held: Mutex<HashMap<Uuid, HashSet<i64>>>,
    /// How many rows `held` has: claimed and not yet written (or given up as lost). The claimer
    /// claims only while this is below `low_water`, so it is also the bound on what a crash can
    /// leave `sending`: unsent, in flight and answered-but-unflushed rows all count until written.
    holding: AtomicUsize,
    /// Signalled when rows are forgotten (written): the claimer looks at `holding` again.
    room: Notify,
    /// The claimer is waiting for room: the flusher writes early once that would make enough
    /// (otherwise answered rows waiting for FLUSH_INTERVAL_MS would stall the next claim).
    room_wanted: AtomicBool,
    claimed: AtomicUsize,
}

impl Worker {
    pub fn new(
        cfg: RunConfig,
        store: Store,
        outage_limit: Duration,
    ) -> Result<Self, reqwest::Error> {
        let provider = Provider::new(&cfg)?;
        let pacer = Pacer::new();
        let (coordinator, signals) = Coordinator::new(
            store.pool().clone(),
            rate_share::Settings {
                key: cfg.limit_key(),
                worker: cfg.worker_name(),
                campaign_id: cfg.campaign_id.clone(),
                limit_per_s: cfg.mail_rate_per_s as f64,
                ttl: cfg.rate_share_ttl(),
                sync: cfg.rate_sync(),
                retry_after_cap: Duration::from_secs(cfg.retry_after_max_s),
            },
            pacer.clone(),
        );
        let policy = RetryPolicy {
            max_attempts: cfg.max_attempts,
            base: Duration::from_millis(cfg.backoff_base_ms),
            cap: Duration::from_millis(cfg.backoff_max_ms),
            retry_after_cap: Duration::from_secs(cfg.retry_after_max_s),
        };
        let cfg_name = cfg.worker_name();
        Ok(Self {
            name: cfg_name.clone(),
            cfg: Arc::new(cfg),
            store,
            provider,
            pacer,
            signals,
            coordinator: Mutex::new(Some(coordinator)),
            coordinating: Mutex::new(None),
            policy,
            outage_limit,
            stats: Default::default(),
            reach: Arc::new(Reachability {
                worker: cfg_name.clone(),
                down_since: Mutex::new(None),
            }),
        })
    }

    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().expect("stats lock").clone()
    }

    /// Joins the fleet's rate limit (once): nothing is sent before the first round grants a
    /// share.
    fn start_coordinator(&self) {
        if let Some(c) = self.coordinator.lock().expect("lock").take() {
            let stop = CancellationToken::new();
            let task = tokio::spawn(c.run(stop.clone()));
            *self.coordinating.lock().expect("lock") = Some((stop, task));
        }
    }

    /// Leaves the fleet's rate limit: stops sending and frees the share (one second later).
    async fn stop_coordinator(&self) {
        let running = self.coordinating.lock().expect("lock").take();
        if let Some((stop, task)) = running {
            stop.cancel();
            let _ = task.await;
        }
    }

    /// Claims one batch and settles it: sends, writes results, releases what was not sent by
    /// `stop_at` (or on `cancel`). For tests and tools that want to drive the queue step by step.
    pub async fn step(
        &self,
        stop_at: Instant,
        cancel: &CancellationToken,
    ) -> Result<Step, RunError> {
        self.start_coordinator();
        let settings = self
            .retrying(|| campaign::settings(self.store.pool(), self.store.campaign_id()))
            .await?;
        let p = Pipeline::new(
            self,
            settings.template.into(),
            cancel.child_token(),
            true,
            i64::MAX,
        );
        let timer = p.stop.clone();
        let guard = tokio::spawn(async move {
            tokio::time::sleep_until(stop_at).await;
            timer.cancel();
        });
        let empty = p.drive().await;
        guard.abort();
        if let Some(e) = p.fatal.lock().expect("lock").take() {
            return Err(e);
        }
        Ok(match empty {
            Some(rem) => Step::Empty(rem),
            None => Step::Worked {
                claimed: p.claimed.load(Ordering::SeqCst),
            },
        })
    }

    /// Runs until done, deadline, failure threshold or cancellation; always returns a report
    /// unless the database stayed unreachable longer than the outage limit.
    pub async fn run(&self, cancel: CancellationToken) -> Result<RunReport, RunError> {
        self.start_coordinator();
        let report = self.run_once(&cancel, self.cfg.deadline()).await;
        self.stop_coordinator().await;
        report
    }

    /// The long-running mode (`campaign-sender serve`, a Deployment): no deadline; when the
    /// campaign is done it idles — one backlog query per `IDLE_POLL_MS`, no share of the rate
    /// limit held — and starts again when rows appear. Ends on `cancel` (exit 0: a pod being
    /// scaled in is not a failure) or when permanent failures cross the threshold (exit 2).
    /// Each pass that finishes the work logs its report.
    pub async fn serve(&self, cancel: CancellationToken) -> Result<RunReport, RunError> {
        self.start_coordinator();
        let result = async {
            loop {
                let mut report = self.run_once(&cancel, None).await?;
                match report.reason {
                    StopReason::Done => {
                        info!(
                            worker = %self.name,
                            sent = report.campaign.sent,
                            failed = report.campaign.failed,
                            "campaign done; idling until new rows arrive"
                        );
                        // The claimer already gave the share back (nothing claimable, nothing
                        // held), so idling holds no capacity.
                        if !self.idle_until_work(&cancel).await? {
                            report.reason = StopReason::Signal;
                            report.exit_code = crate::report::exit::DONE;
                            return Ok(report);
                        }
                    }
                    StopReason::Paused => {
                        // A Deployment's pod must not exit (it would be restarted in a loop):
                        // it idles, holding no share, until the campaign is resumed — also when
                        // the pause is the automatic one and failures are over the budget (the
                        // pod that crossed it exited 2; the others, and its restart, wait).
                        if !self.idle_while_paused(&cancel).await? {
                            report.reason = StopReason::Signal;
                            report.exit_code = crate::report::exit::DONE;
                            return Ok(report);
                        }
                    }
                    StopReason::Signal => {
                        if report.exit_code != crate::report::exit::TOO_MANY_FAILURES {
                            report.exit_code = crate::report::exit::DONE;
                        }
                        return Ok(report);
                    }
                    _ => return Ok(report),
                }
            }
        }
        .await;
        self.stop_coordinator().await;
        result
    }

    /// Waits until the campaign is resumed (true) or `cancel` fires (false).
    async fn idle_while_paused(&self, cancel: &CancellationToken) -> Result<bool, RunError> {
        info!(worker = %self.name, "campaign paused; idling until `campaign-sender resume`");
        self.signals.set_busy(false);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.cfg.pause_poll()) => {}
            }
            let pause = self
                .retrying(|| campaign::paused(self.store.pool(), self.store.campaign_id()))
                .await?;
            if pause.is_none() {
                info!(worker = %self.name, "campaign resumed");
                return Ok(true);
            }
        }
    }

    /// Waits until the campaign has work again (true) or `cancel` fires (false).
    async fn idle_until_work(&self, cancel: &CancellationToken) -> Result<bool, RunError> {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.cfg.idle_poll()) => {}
            }
            let rem = self.retrying(|| self.store.remaining()).await?;
            m::backlog(&rem, None);
            if rem.total() > 0 {
                return Ok(true);
            }
        }
    }

    /// One pass of the pipeline until done, `deadline`, the failure threshold or `cancel`.
    async fn run_once(
        &self,
        cancel: &CancellationToken,
        deadline: Option<Duration>,
    ) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let settings = self
            .retrying(|| campaign::settings(self.store.pool(), self.store.campaign_id()))
            .await?;
        let counts = self.retrying(|| self.store.counts()).await?;
        let failure_budget =
            settings.failure_budget(counts.total, self.cfg.max_permanent_failure_ratio);
        if let Some(pause) = &settings.pause {
            // The kill switch is on: claim nothing, send nothing.
            warn!(worker = %self.name, campaign = %self.store.campaign_id(), paused_by = %pause.by,
                  reason = pause.reason.as_deref().unwrap_or(""),
                  "campaign is paused; nothing sent. `campaign-sender resume --campaign …` lifts it");
            return Ok(RunReport::new(
                self.name.clone(),
                StopReason::Paused,
                started.elapsed(),
                self.stats(),
                counts,
                failure_budget,
            ));
        }
        info!(worker = %self.name, campaign = %self.store.campaign_id(), total = counts.total, "run started");

        let p = Pipeline::new(
            self,
            settings.template.into(),
            cancel.child_token(),
            false,
            failure_budget,
        );
        let deadline_guard = deadline.map(|d| {
            let stop = p.stop.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(started + d).await;
                stop.cancel();
            })
        });
        p.drive().await;
        if let Some(g) = deadline_guard {
            g.abort();
        }
        if let Some(e) = p.fatal.lock().expect("lock").take() {
            return Err(e);
        }
        let recorded = *p.reason.lock().expect("lock");
        let reason = match recorded {
            // The pipeline stopped itself (done, paused, over the failure budget): that is what
            // happened, even if a signal came while it was finishing.
            Some(r) => r,
            None if cancel.is_cancelled() => StopReason::Signal,
            // The only other way the pipeline stops.
            None => StopReason::Deadline,
        };
        let counts = self.retrying(|| self.store.counts()).await?;
        let report = RunReport::new(
            self.name.clone(),
            reason,
            started.elapsed(),
            self.stats(),
            counts,
            failure_budget,
        );
        info!(worker = %self.name, reason = ?reason, exit_code = report.exit_code, "run finished");
        Ok(report)
    }

    /// Rides out a database outage of up to the configured limit (`DB_CONNECT_RETRY_S`), with
    /// the backoff of [`Outage`]: the last try is made at the limit.
    async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, RunError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let mut outage = Outage::new(Instant::now(), self.outage_limit);
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) => match outage.next_wait(Instant::now()) {
                    None => return Err(RunError::Database(self.outage_limit, e)),
                    Some(wait) => {
                        warn!(error = %store::error_text(&e), retry_in_ms = wait.as_millis() as u64, "database error; retrying");
                        tokio::time::sleep(wait).await;
                    }
                },
            }
        }
    }
}

impl<'a> Pipeline<'a> {
    fn new(
        w: &'a Worker,
        template: Arc<str>,
        stop: CancellationToken,
        one_batch: bool,
        failure_budget: i64,
    ) -> Self {
        Self {
            w,
            template,
            stop,
            one_batch,
            failure_budget,
            reason: Mutex::new(None),
            fatal: Mutex::new(None),
            held: Mutex::new(HashMap::new()),
            holding: AtomicUsize::new(0),
            room: Notify::new(),
            room_wanted: AtomicBool::new(false),
            claimed: AtomicUsize::new(0),
        }
    }

    fn cfg(&self) -> &RunConfig {
        &self.w.cfg
    }

    fn set_reason(&self, r: StopReason) {
        let mut g = self.reason.lock().expect("lock");
        if g.is_none() {
            *g = Some(r);
        }
    }

    fn fail(&self, e: RunError) {
        self.fatal.lock().expect("lock").get_or_insert(e);
        self.stop.cancel();
    }

    /// Claim only when fewer rows than about half a second of work (and at least enough to keep
    /// every send slot busy), capped at one batch, are held — unsent, in flight or unwritten.
    fn low_water(&self) -> usize {
        let c = self.cfg();
        (c.send_concurrency as usize)
            .max(c.mail_rate_per_s as usize / 2)
            .min(c.batch_size as usize)
            .max(1)
    }

    /// Runs all stages to completion. Returns the remaining work when a one-batch step found
    /// nothing to claim.
    async fn drive(&self) -> Option<Remaining> {
        let (rows_tx, rows_rx) = mpsc::unbounded_channel();
        let (res_tx, res_rx) = mpsc::unbounded_channel();
        let flushed = CancellationToken::new();
        let (empty, (), (), (), ()) = tokio::join!(
            self.claimer(rows_tx),
            self.dispatcher(rows_rx, res_tx),
            async {
                self.flusher(res_rx).await;
                flushed.cancel();
            },
            self.heartbeat(flushed.clone()),
            self.pause_watch(flushed.clone()),
        );
        empty
    }

    /// The kill switch: every `PAUSE_POLL_MS` looks at the campaign's pause and, once it is on,
    /// stops the pipeline — the same stop as SIGTERM: no claim and no send starts after this,
    /// in-flight requests finish, results are written and the rest is released.
    async fn pause_watch(&self, done: CancellationToken) {
        let mut tick = tokio::time::interval(self.cfg().pause_poll());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.stop.cancelled() => return,
                _ = done.cancelled() => return,
            }
            match campaign::paused(self.w.store.pool(), self.w.store.campaign_id()).await {
                Ok(Some(pause)) => {
                    warn!(worker = %self.w.name, paused_by = %pause.by,
                          reason = pause.reason.as_deref().unwrap_or(""),
                          "campaign paused; stopping: in-flight requests finish, the rest is released");
                    self.set_reason(StopReason::Paused);
                    self.stop.cancel();
                    return;
                }
                Ok(None) => {}
                // Sends need the database too (the gate's check), so an outage stops them anyway.
                Err(e) => {
                    warn!(error = %store::error_text(&e), "cannot read the campaign's pause; will retry")
                }
            }
        }
    }

    async fn claimer(&self, tx: mpsc::UnboundedSender<(Uuid, ClaimedRow)>) -> Option<Remaining> {
        let w = self.w;
        let low_water = self.low_water();
        loop {
            while self.holding.load(Ordering::SeqCst) >= low_water {
                self.room_wanted.store(true, Ordering::SeqCst);
                tokio::select! {
                    _ = self.room.notified() => {}
                    _ = self.stop.cancelled() => return None,
                }
            }
            self.room_wanted.store(false, Ordering::SeqCst);
            if self.stop.is_cancelled() {
                return None;
            }
            let batch = match w
                .retrying(|| w.store.claim(self.cfg().batch_size, self.cfg().lease()))
                .await
            {
                Ok(b) => b,
                Err(e) => {
                    self.fail(e);
                    return None;
                }
            };
            if batch.rows.is_empty() {
                // Nothing claimable: hold no share of the fleet's limit unless rows are held.
                self.w
                    .signals
                    .set_busy(self.holding.load(Ordering::SeqCst) > 0);
                let rem = match w.retrying(|| w.store.remaining()).await {
                    Ok(r) => r,
                    Err(e) => {
                        self.fail(e);
                        return None;
                    }
                };
                m::backlog(&rem, None);
                if self.one_batch {
                    return Some(rem);
                }
                if rem.total() == 0 {
                    self.set_reason(StopReason::Done);
                    return None;
                }
                // Only rows in backoff or leased (maybe by us): wait for the earliest, but look
                // again at least every IDLE_POLL_MS (others may release rows).
                let due = rem
                    .next_due_s
                    .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)));
                let wait = due
                    .unwrap_or(self.cfg().idle_poll())
                    .min(self.cfg().idle_poll());
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = self.stop.cancelled() => return None,
                }
                continue;
            }
            let n = batch.rows.len();
            self.w.signals.set_busy(true);
            debug!(claim_id = %batch.claim_id, rows = n, "claimed");
            self.claimed.fetch_add(n, Ordering::SeqCst);
            {
                let mut stats = self.w.stats.lock().expect("stats");
                stats.batches += 1;
                stats.claimed += n as u64;
                m::claimed(n, batch.reclaimed);
            }
            self.held.lock().expect("lock").insert(
                batch.claim_id,
                batch.rows.iter().map(|r| r.member_id).collect(),
            );
            self.holding.fetch_add(n, Ordering::SeqCst);
            for row in batch.rows {
                // The dispatcher outlives the claimer, so the channel is open.
                let _ = tx.send((batch.claim_id, row));
            }
            if self.one_batch {
                return None;
            }
        }
    }

    /// The gate: hands rows, in claim order, to sends — each only with a free send slot, a pacer
    /// token and a fresh ownership/opt-out check. On stop, releases everything not started.
    async fn dispatcher(
        &self,
        mut rx: mpsc::UnboundedReceiver<(Uuid, ClaimedRow)>,
        res: mpsc::UnboundedSender<Outcome>,
    ) {
        let cfg = self.cfg();
        let concurrency = cfg.send_concurrency as usize;
        let slots = Arc::new(Semaphore::new(concurrency));
        let chunk = concurrency.max(16);
        let max_age = cfg.optout_recheck();
        let mut unchecked: VecDeque<(Uuid, ClaimedRow)> = VecDeque::new();
        let mut cleared: VecDeque<(Uuid, ClaimedRow)> = VecDeque::new();
        let mut checked_at: Option<Instant> = None;
        let mut input_open = true;

        loop {
            while let Ok(x) = rx.try_recv() {
                self.intake(x, &mut unchecked, &res);
            }
            if self.stop.is_cancelled() {
                break;
            }
            if unchecked.is_empty() && cleared.is_empty() {
                if !input_open {
                    break;
                }
                tokio::select! {
                    x = rx.recv() => match x {
                        Some(x) => self.intake(x, &mut unchecked, &res),
                        None => input_open = false,
                    },
                    _ = self.stop.cancelled() => {}
                }
                continue;
            }
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p.expect("semaphore open"),
                _ = self.stop.cancelled() => continue,
            };
            // Every attempt spends a token of this pod's share of the fleet's limit.
            match self.w.pacer.acquire(&self.stop).await {
                Some(waited) => {
                    m::pacer_wait(waited);
                    self.w.stats.lock().expect("stats").pacer_wait_ms += waited.as_millis() as u64;
                }
                None => continue,
            }
            let fresh = checked_at.is_some_and(|t| t.elapsed() <= max_age);
            if !fresh || cleared.is_empty() {
                // (Re-)check the next chunk; stale cleared rows go back in front, in order.
                while let Some(x) = cleared.pop_back() {
                    unchecked.push_front(x);
                }
                let take = chunk.min(unchecked.len());
                let ids: Vec<(i64, Uuid)> = unchecked
                    .iter()
                    .take(take)
                    .map(|(c, r)| (r.member_id, *c))
                    .collect();
                // The check's time is when it *starts*: everything committed before it is seen.
                let started = Instant::now();
                let holds = match self.w.retrying(|| self.w.store.holds(&ids)).await {
                    Ok(h) => h,
                    Err(e) => {
                        self.fail(e);
                        continue;
                    }
                };
                checked_at = Some(started);
                let holds: HashMap<i64, Hold> = holds.into_iter().collect();
                for (claim_id, row) in unchecked.drain(..take).collect::<Vec<_>>() {
                    match holds.get(&row.member_id) {
                        None => cleared.push_back((claim_id, row)),
                        Some(hold) => {
                            let o = match hold {
                                Hold::OptedOut => Outcome::Row {
                                    claim_id,
                                    member_id: row.member_id,
                                    res: Resolution::Released {
                                        class: ErrorClass::OptedOut,
                                    },
                                    requested: false,
                                },
                                Hold::Lost => Outcome::Lost {
                                    claim_id,
                                    member_id: row.member_id,
                                },
                            };
                            let _ = res.send(o);
                        }
                    }
                }
            }
            if self.stop.is_cancelled() {
                // Stopped (a pause, SIGTERM) while waiting for the token or the check: no send
                // starts after the stop; the row is released with the others below.
                continue;
            }
            let Some((claim_id, row)) = cleared.pop_front() else {
                continue; // the whole chunk was held back; the token is simply unused
            };
            let template = self.template.clone();
            let provider = self.w.provider.clone();
            let policy = self.w.policy;
            let res = res.clone();
            let pacer = self.w.pacer.clone();
            let signals = self.w.signals.clone();
            let reach = self.w.reach.clone();
            let probe = self.w.reach.is_down();
            let send = tokio::spawn(async move {
                let t0 = Instant::now();
                let attempt = provider
                    .send(
                        row.member_id,
                        row.attempt,
                        row.email.as_deref().unwrap_or_default(),
                        &template,
                    )
                    .await;
                m::request(t0.elapsed());
                let pause = if let Attempt::Undelivered { .. } = &attempt {
                    // Nobody to send to: this pod sends nothing for a while (growing with the
                    // outage); the row waits at least as long, without spending an attempt.
                    m::unreachable();
                    let pause = reach.unreachable(&policy);
                    pacer.pause_until(Instant::now() + pause);
                    Some(pause)
                } else {
                    reach.reached();
                    None
                };
                if let Attempt::Retry {
                    class: ErrorClass::Throttled,
                    retry_after,
                    ..
                } = &attempt
                {
                    // The provider is the judge: this pod pauses now, the fleet at its next round.
                    let ra = retry_after.map(|r| r.min(policy.retry_after_cap));
                    m::throttled();
                    pacer.pause_until(Instant::now() + ra.unwrap_or(rate_share::DEFAULT_PAUSE));
                    signals.throttled(ra);
                }
                let mut resolution = resolve(
                    attempt,
                    row.attempt.max(1) as u32,
                    &policy,
                    rand::random::<f64>(),
                );
                if let (Resolution::Deferred { delay, .. }, Some(pause)) = (&mut resolution, pause)
                {
                    *delay = (*delay).max(pause);
                }
                let _ = res.send(Outcome::Row {
                    claim_id,
                    member_id: row.member_id,
                    res: resolution,
                    requested: true,
                });
                drop(permit);
            });
            if probe {
                // Unreachable so far: one request at a time, each after the pause its
                // predecessor set, until one gets an answer.
                let _ = send.await;
            }
        }

        // Stopping (or all input handed out): release whatever was not started, including rows
        // the claimer still pushes until it sees the stop.
        let mut release = |(claim_id, row): (Uuid, ClaimedRow)| {
            m::released(1);
            let _ = res.send(Outcome::Row {
                claim_id,
                member_id: row.member_id,
                res: Resolution::Released {
                    class: ErrorClass::Released,
                },
                requested: false,
            });
        };
        unchecked
            .drain(..)
            .chain(cleared.drain(..))
            .for_each(&mut release);
        if input_open {
            while let Some(x) = rx.recv().await {
                release(x);
            }
        }
        // Wait for every in-flight send (each holds a slot); they end within the request timeout.
        let _ = slots.acquire_many(concurrency as u32).await;
    }

    /// A claimed row enters the gate's queue, unless it can never be delivered: an implausible
    /// address fails here, once per row, without a token or a request.
    fn intake(
        &self,
        (claim_id, row): (Uuid, ClaimedRow),
        unchecked: &mut VecDeque<(Uuid, ClaimedRow)>,
        res: &mpsc::UnboundedSender<Outcome>,
    ) {
        if plausible_email(row.email.as_deref()) {
            unchecked.push_back((claim_id, row));
            return;
        }
        let _ = res.send(Outcome::Row {
            claim_id,
            member_id: row.member_id,
            res: Resolution::Failed {
                status: None,
                class: ErrorClass::InvalidEmail,
            },
            requested: false,
        });
    }

    /// Writes results in small fenced groups: every FLUSH_MAX_ROWS, or FLUSH_INTERVAL_MS after
    /// the oldest unwritten one arrived, as soon as writing them lets a waiting claimer claim,
    /// and at the end.
    async fn flusher(&self, mut rx: mpsc::UnboundedReceiver<Outcome>) {
        let max_rows = self.cfg().flush_max_rows as usize;
        let low_water = self.low_water();
        let interval = self.cfg().flush_interval();
        let mut pending: HashMap<Uuid, Vec<(i64, Resolution)>> = HashMap::new();
        let mut n_pending = 0usize;
        let mut oldest: Option<Instant> = None;
        let mut last_failure_check: Option<Instant> = None;
        let mut failures_seen = 0u64;
        let mut failed_in_db = 0i64;
        loop {
            let flush_at = oldest.map(|t| t + interval);
            let closed = tokio::select! {
                o = rx.recv() => match o {
                    Some(Outcome::Row { claim_id, member_id, res, requested }) => {
                        {
                            let mut s = self.w.stats.lock().expect("stats");
                            s.requests += requested as u64;
                            s.count(&res);
                        }
                        m::settled(res.outcome());
                        pending.entry(claim_id).or_default().push((member_id, res));
                        n_pending += 1;
                        oldest.get_or_insert_with(Instant::now);
                        false
                    }
                    Some(Outcome::Lost { claim_id, member_id }) => {
                        self.w.stats.lock().expect("stats").stale_writes += 1;
                        m::stale_writes(1);
                        self.forget(claim_id, &[member_id]);
                        false
                    }
                    None => true,
                },
                _ = async { tokio::time::sleep_until(flush_at.expect("guarded")).await }, if flush_at.is_some() => false,
            };
            let due = flush_at.is_some_and(|t| Instant::now() >= t);
            // Written, these rows would let a waiting claimer claim: write them now. (With none
            // pending this holds only if the claimer already has room; writing nothing is a no-op.)
            let makes_room = self.room_wanted.load(Ordering::SeqCst)
                && self
                    .holding
                    .load(Ordering::SeqCst)
                    .saturating_sub(n_pending)
                    < low_water;
            if closed || due || makes_room || n_pending >= max_rows {
                self.flush(std::mem::take(&mut pending)).await;
                n_pending = 0;
                oldest = None;
                // The failure threshold, checked when this worker's failures grew (a step's
                // budget is unlimited: it only counts).
                let failed_here = self.w.stats().failed;
                let new_here = failed_here.saturating_sub(failures_seen) as i64;
                if failure_check_due(
                    new_here,
                    failed_in_db,
                    self.failure_budget,
                    last_failure_check.map(|t| t.elapsed()),
                ) {
                    failures_seen = failed_here;
                    last_failure_check = Some(Instant::now());
                    if let Ok(failed) = self.w.store.failed_count().await {
                        failed_in_db = failed;
                        if failed > self.failure_budget {
                            warn!(
                                failed,
                                budget = self.failure_budget,
                                "permanent failures over the threshold; pausing the campaign and stopping"
                            );
                            self.set_reason(StopReason::TooManyFailures);
                            self.stop.cancel();
                            // The whole fleet stops too, and `status` says why. Best effort: this
                            // pod stops (exit 2) even if the pause cannot be written.
                            let reason = format!(
                                "{failed} permanent failures exceed the budget of {}; look at `status`, then `retry-failed` and `resume`",
                                self.failure_budget
                            );
                            if let Err(e) = campaign::pause(
                                self.w.store.pool(),
                                self.w.store.campaign_id(),
                                campaign::BY_AUTO,
                                Some(&reason),
                            )
                            .await
                            {
                                warn!(error = %store::error_text(&e), "could not pause the campaign; other pods stop at their own threshold check");
                            }
                        }
                    }
                }
            }
            if closed {
                return;
            }
        }
    }

    /// Rows written (or given up): no longer extended, no longer counted against the claimer's
    /// room. The only place `holding` goes down.
    fn forget(&self, claim_id: Uuid, members: &[i64]) {
        let mut gone = 0;
        {
            let mut held = self.held.lock().expect("lock");
            if let Some(set) = held.get_mut(&claim_id) {
                for m in members {
                    gone += set.remove(m) as usize;
                }
                if set.is_empty() {
                    held.remove(&claim_id);
                }
            }
        }
        // (Nothing forgotten: subtracting 0 and one spurious look by the claimer are harmless.)
        self.holding.fetch_sub(gone, Ordering::SeqCst);
        self.room.notify_one();
    }

    async fn flush(&self, pending: HashMap<Uuid, Vec<(i64, Resolution)>>) {
        for (claim_id, results) in pending {
            let written = self.finish_with_retry(claim_id, &results).await;
            let ids: Vec<i64> = results.iter().map(|(m, _)| *m).collect();
            // Written or not, these rows are no longer extended: if the write failed they come
            // back after their lease and are re-sent under the same idempotency key.
            self.forget(claim_id, &ids);
            let mut s = self.w.stats.lock().expect("stats");
            match written {
                Some(w) => {
                    s.stale_writes += results.len() as u64 - w;
                    m::stale_writes(results.len() as u64 - w);
                }
                None => s.finish_errors += 1,
            }
        }
    }

    /// The fenced write, retried briefly on a database error.
    async fn finish_with_retry(
        &self,
        claim_id: Uuid,
        results: &[(i64, Resolution)],
    ) -> Option<u64> {
        let mut wait = Duration::from_millis(200);
        for attempt in 1..=5 {
            match self.w.store.finish(claim_id, results).await {
                Ok(w) => return Some(w),
                Err(e) => {
                    warn!(error = %store::error_text(&e), attempt, "writing results failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
        }
        warn!(
            rows = results.len(),
            "results not written; the rows return after their lease"
        );
        None
    }

    /// Extends the lease of every row still held, every LEASE_S / 3, until the flusher is done.
    async fn heartbeat(&self, done: CancellationToken) {
        let mut tick = tokio::time::interval(self.cfg().heartbeat());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; a fresh claim needs no renewal
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = done.cancelled() => return,
            }
            // The backlog gauges, for dashboards and KEDA-independent alerts: two cheap counts on
            // partial indexes.
            if let (Ok(rem), Ok(failed)) = (
                self.w.store.remaining().await,
                self.w.store.failed_count().await,
            ) {
                m::backlog(&rem, Some(failed));
            }
            let rows: Vec<(i64, Uuid)> = self
                .held
                .lock()
                .expect("lock")
                .iter()
                .flat_map(|(c, set)| set.iter().map(move |m| (*m, *c)))
                .collect();
            if rows.is_empty() {
                continue;
            }
            match self.w.store.extend_leases(&rows, self.cfg().lease()).await {
                Ok(n) => {
                    let mut s = self.w.stats.lock().expect("stats");
                    s.leases_renewed += n;
                    m::leases_renewed(n);
                    debug!(held = rows.len(), renewed = n, "leases renewed");
                }
                Err(e) => {
                    warn!(error = %store::error_text(&e), held = rows.len(), "lease renewal failed; will retry next beat")
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker dropped without finishing a run (tests driving `step`) still leaves the fleet.
        if let Some((stop, _)) = self.coordinating.lock().expect("lock").as_ref() {
            stop.cancel();
        }
    }
}
