//! The work loop: claim → send → fenced finish, one batch at a time per [`Worker::step`], and
//! [`Worker::run`] looping steps until the campaign is done, the deadline passes, the failure
//! threshold is crossed or the root token is cancelled.
//!
//! Inside a batch up to `SEND_CONCURRENCY` requests are in flight; results may come back in any
//! order (each is keyed by member id). Before any send starts, a [`Gate`] makes sure a check at
//! most `OPTOUT_RECHECK_MS` old saw the row still ours and not opted out, and the local pacer
//! (governor) hands out a token: every HTTP attempt spends one.
//!
//! Stopping a batch (budget spent, deadline, SIGTERM) stops *starting* sends; requests already
//! in flight finish (bounded by the request timeout), their results are written, and every row
//! not attempted is released at once to `pending` with its attempt given back.

use std::collections::{HashSet, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use uuid::Uuid;

use crate::config::RunConfig;
use crate::outcome::{plausible_email, resolve, ErrorClass, Resolution, RetryPolicy};
use crate::provider::Provider;
use crate::report::{RunReport, StopReason, WorkerStats};
use crate::store::{Batch, ClaimedRow, Hold, Remaining, Store};

/// What one [`Worker::step`] did.
#[derive(Debug)]
pub enum Step {
    /// A batch was claimed and settled.
    Worked { claimed: usize },
    /// Nothing claimable right now; `remaining.total() == 0` means the campaign is done.
    Empty(Remaining),
}

/// An unrecoverable problem for this run (the database stayed away too long).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("database unavailable for more than {0:?}; rows this worker held are re-claimed after their lease. Check the database and rerun: {1}")]
    Database(Duration, #[source] sqlx::Error),
}

pub struct Worker {
    cfg: Arc<RunConfig>,
    store: Store,
    provider: Provider,
    limiter: Arc<DefaultDirectRateLimiter>,
    policy: RetryPolicy,
    name: String,
    outage_limit: Duration,
    stats: std::sync::Mutex<WorkerStats>,
}

/// One item leaving the gate.
enum Dispatch {
    /// Cleared to send now (token spent, check fresh).
    Send(ClaimedRow),
    /// Settled without a request.
    Settle(i64, Resolution),
    /// No longer ours: someone re-claimed it. Nothing to write.
    Lost(i64),
}

enum Done {
    Row {
        member_id: i64,
        res: Resolution,
        requested: bool,
    },
    Lost(i64),
}

/// Hands out rows of one batch, in order, each only when (a) a pacer token is spent and (b) a
/// database check no older than `max_age` saw it still ours and not opted out.
struct Gate {
    store: Store,
    claim_id: Uuid,
    unchecked: VecDeque<ClaimedRow>,
    cleared: VecDeque<ClaimedRow>,
    held: VecDeque<Dispatch>,
    checked_at: Option<Instant>,
    max_age: Duration,
    chunk: usize,
    limiter: Arc<DefaultDirectRateLimiter>,
}

impl Gate {
    async fn next(&mut self) -> Option<Dispatch> {
        loop {
            if let Some(d) = self.held.pop_front() {
                return Some(d);
            }
            // Rows that can never be delivered fail here, without a token or a request.
            if let Some(pos) = self
                .unchecked
                .iter()
                .position(|r| !plausible_email(r.email.as_deref()))
            {
                let row = self.unchecked.remove(pos).expect("position is in range");
                return Some(Dispatch::Settle(
                    row.member_id,
                    Resolution::Failed {
                        status: None,
                        class: ErrorClass::InvalidEmail,
                    },
                ));
            }
            if self.cleared.is_empty() && self.unchecked.is_empty() {
                return None;
            }
            self.limiter.until_ready().await;
            let fresh = self.checked_at.is_some_and(|t| t.elapsed() <= self.max_age);
            if fresh {
                if let Some(row) = self.cleared.pop_front() {
                    return Some(Dispatch::Send(row));
                }
            }
            // Re-check the next chunk (stale cleared rows go back in front, in order).
            while let Some(row) = self.cleared.pop_back() {
                self.unchecked.push_front(row);
            }
            let take = self.chunk.min(self.unchecked.len());
            let chunk: Vec<ClaimedRow> = self.unchecked.drain(..take).collect();
            let ids: Vec<i64> = chunk.iter().map(|r| r.member_id).collect();
            // The check's time is when it *starts*: everything committed before that is seen.
            let started = Instant::now();
            let holds = match self.store.holds(self.claim_id, &ids).await {
                Ok(h) => h,
                Err(e) => {
                    // Cannot prove the rows are still sendable: send nothing more from this
                    // batch. What was not sent is released (or, with the database gone,
                    // re-claimed after the lease).
                    warn!(error = %e, "opt-out re-check failed; stopping this batch's sends");
                    return None;
                }
            };
            self.checked_at = Some(started);
            let held: std::collections::HashMap<i64, Hold> = holds.into_iter().collect();
            for row in chunk {
                match held.get(&row.member_id) {
                    None => self.cleared.push_back(row),
                    Some(Hold::OptedOut) => self.held.push_back(Dispatch::Settle(
                        row.member_id,
                        Resolution::Released {
                            class: ErrorClass::OptedOut,
                        },
                    )),
                    Some(Hold::Lost) => self.held.push_back(Dispatch::Lost(row.member_id)),
                }
            }
        }
    }
}

impl Worker {
    pub fn new(
        cfg: RunConfig,
        store: Store,
        outage_limit: Duration,
    ) -> Result<Self, reqwest::Error> {
        let provider = Provider::new(&cfg)?;
        let rate = NonZeroU32::new(cfg.mail_rate_per_s).expect("validated > 0");
        // Strict spacing (burst 1): a per-second quota would otherwise allow a burst of `rate`.
        let limiter = Arc::new(RateLimiter::direct(
            Quota::per_second(rate).allow_burst(NonZeroU32::MIN),
        ));
        let policy = RetryPolicy {
            max_attempts: cfg.max_attempts,
            base: Duration::from_millis(cfg.backoff_base_ms),
            cap: Duration::from_millis(cfg.backoff_max_ms),
            retry_after_cap: Duration::from_secs(cfg.retry_after_max_s),
        };
        Ok(Self {
            name: cfg.worker_name(),
            cfg: Arc::new(cfg),
            store,
            provider,
            limiter,
            policy,
            outage_limit,
            stats: Default::default(),
        })
    }

    pub fn stats(&self) -> WorkerStats {
        self.stats.lock().expect("stats lock").clone()
    }

    /// Claims one batch and settles it, stopping new sends at `stop_at` or on `cancel`.
    pub async fn step(
        &self,
        stop_at: Instant,
        cancel: &CancellationToken,
    ) -> Result<Step, sqlx::Error> {
        let batch = self
            .store
            .claim(self.cfg.batch_size, self.cfg.lease())
            .await?;
        if batch.rows.is_empty() {
            return Ok(Step::Empty(self.store.remaining().await?));
        }
        let claimed = batch.rows.len();
        let stop_at = stop_at.min(Instant::now() + self.cfg.batch_budget());
        self.settle(batch, stop_at, cancel).await;
        Ok(Step::Worked { claimed })
    }

    async fn settle(&self, batch: Batch, stop_at: Instant, cancel: &CancellationToken) {
        let claim_id = batch.claim_id;
        let claimed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
        let gate = Gate {
            store: self.store.clone(),
            claim_id,
            unchecked: batch.rows.into(),
            cleared: VecDeque::new(),
            held: VecDeque::new(),
            checked_at: None,
            max_age: self.cfg.optout_recheck(),
            chunk: (self.cfg.send_concurrency as usize).max(16),
            limiter: self.limiter.clone(),
        };
        let stop = {
            let cancel = cancel.clone();
            async move {
                tokio::select! {
                    _ = tokio::time::sleep_until(stop_at) => {}
                    _ = cancel.cancelled() => {}
                }
            }
        };
        let done: Vec<Done> =
            futures::stream::unfold(gate, |mut g| async move { g.next().await.map(|d| (d, g)) })
                .take_until(stop)
                .map(|d| async move {
                    match d {
                        Dispatch::Send(row) => {
                            let attempt = self
                                .provider
                                .send(
                                    row.member_id,
                                    row.attempt,
                                    row.email.as_deref().unwrap_or_default(),
                                )
                                .await;
                            let res = resolve(
                                attempt,
                                row.attempt.max(1) as u32,
                                &self.policy,
                                rand::random::<f64>(),
                            );
                            Done::Row {
                                member_id: row.member_id,
                                res,
                                requested: true,
                            }
                        }
                        Dispatch::Settle(member_id, res) => Done::Row {
                            member_id,
                            res,
                            requested: false,
                        },
                        Dispatch::Lost(member_id) => Done::Lost(member_id),
                    }
                })
                .buffer_unordered(self.cfg.send_concurrency as usize)
                .collect()
                .await;

        let mut results: Vec<(i64, Resolution)> = Vec::with_capacity(claimed.len());
        let mut seen: HashSet<i64> = HashSet::with_capacity(claimed.len());
        let mut stats = WorkerStats {
            batches: 1,
            claimed: claimed.len() as u64,
            ..Default::default()
        };
        for d in done {
            match d {
                Done::Row {
                    member_id,
                    res,
                    requested,
                } => {
                    stats.requests += requested as u64;
                    stats.count(&res);
                    seen.insert(member_id);
                    results.push((member_id, res));
                }
                // Re-claimed by someone else: their result, not ours to write.
                Done::Lost(member_id) => {
                    stats.stale_writes += 1;
                    seen.insert(member_id);
                }
            }
        }
        // Claimed but never dispatched (budget, deadline, shutdown, a failed re-check): give
        // them back now, so any worker can take them without waiting for the lease.
        for id in claimed {
            if !seen.contains(&id) {
                stats.released += 1;
                results.push((
                    id,
                    Resolution::Released {
                        class: ErrorClass::Released,
                    },
                ));
            }
        }
        let attempted_writes = results.len() as u64;
        let written = self.finish_with_retry(claim_id, &results).await;
        match written {
            Some(w) => stats.stale_writes += attempted_writes - w,
            None => stats.finish_errors += 1,
        }
        info!(
            worker = %self.name,
            claim_id = %claim_id,
            claimed = stats.claimed,
            sent = stats.sent,
            retry = stats.retried,
            failed = stats.failed,
            released = stats.released,
            opted_out = stats.opted_out,
            stale_writes = stats.stale_writes,
            "batch settled"
        );
        self.stats.lock().expect("stats lock").add(&stats);
    }

    /// The fenced write, retried briefly on a database error. If it still fails, the rows stay
    /// `sending` until their lease expires and are then re-sent under the same idempotency key:
    /// delayed, never lost, never mailed twice.
    async fn finish_with_retry(
        &self,
        claim_id: Uuid,
        results: &[(i64, Resolution)],
    ) -> Option<u64> {
        let mut wait = Duration::from_millis(200);
        for attempt in 1..=5 {
            match self.store.finish(claim_id, results).await {
                Ok(w) => return Some(w),
                Err(e) => {
                    warn!(error = %e, attempt, "writing batch results failed; retrying");
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                }
            }
        }
        warn!(
            rows = results.len(),
            "batch results not written; the rows return after their lease"
        );
        None
    }

    /// Runs until done, deadline, failure threshold or cancellation; always returns a report.
    pub async fn run(&self, cancel: CancellationToken) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let deadline = self.cfg.deadline().map(|d| started + d);
        let far = started + Duration::from_secs(100 * 365 * 24 * 3600);
        let total = self.retrying(|| self.store.counts()).await?.total;
        let failure_budget = (total as f64 * self.cfg.max_permanent_failure_ratio).floor() as i64;
        info!(worker = %self.name, campaign = %self.store.campaign_id(), total, "run started");

        let mut last_failed_seen = 0u64;
        let reason = loop {
            if cancel.is_cancelled() {
                break StopReason::Signal;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break StopReason::Deadline;
            }
            let step = self
                .retrying(|| self.step(deadline.unwrap_or(far), &cancel))
                .await?;
            match step {
                Step::Worked { .. } => {
                    let failed_now = self.stats().failed;
                    if failed_now > last_failed_seen {
                        last_failed_seen = failed_now;
                        let failed = self.retrying(|| self.store.failed_count()).await?;
                        if failed > failure_budget {
                            break StopReason::TooManyFailures;
                        }
                    }
                }
                Step::Empty(rem) if rem.total() == 0 => break StopReason::Done,
                Step::Empty(rem) => {
                    // Only rows in backoff or leased elsewhere: wait for the earliest, but
                    // look again at least every IDLE_POLL_MS (others may release rows).
                    let due = rem.next_due_s.map(|s| Duration::from_secs_f64(s.max(0.0)));
                    let mut wake = Instant::now()
                        + due
                            .unwrap_or(self.cfg.idle_poll())
                            .min(self.cfg.idle_poll());
                    if let Some(d) = deadline {
                        wake = wake.min(d);
                    }
                    tokio::select! {
                        _ = tokio::time::sleep_until(wake) => {}
                        _ = cancel.cancelled() => {}
                    }
                }
            }
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

    /// Rides out a database outage of up to the configured limit, with capped backoff.
    async fn retrying<T, F, Fut>(&self, mut op: F) -> Result<T, RunError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        let since = Instant::now();
        let mut wait = Duration::from_millis(200);
        loop {
            match op().await {
                Ok(v) => return Ok(v),
                Err(e) if since.elapsed() + wait > self.outage_limit => {
                    return Err(RunError::Database(self.outage_limit, e))
                }
                Err(e) => {
                    warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "database error; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}
