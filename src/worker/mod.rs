//! The work loop: a pipeline per process that keeps the provider busy.
//!
//! ```text
//!  claim.rs ──rows──▶ gate.rs ──spawns──▶ send.rs (≤ SEND_CONCURRENCY) ──results──▶ finish.rs
//!     ▲  claims a batch only when fewer   │ token from the pacer                   │ fenced writes every
//!     │  than `low_water` rows are held   │ fresh opt-out/ownership re-check       │ FLUSH_MAX_ROWS or
//!     │                                   │                                        │ FLUSH_INTERVAL_MS, or
//!     └──────────── room: rows written ◀──────────────────────────────────────────┤ at once for a waiting claim
//!  watches.rs: every LEASE_S/3 extends the lease of every row still held (fenced)   ◀┘ (rows leave `held.rs`);
//!              every PAUSE_POLL_MS looks at the campaign's kill switch
//!  shutdown.rs: the one stop path (SIGTERM, deadline, pause, failure budget, a fatal error)
//! ```
//!
//! - **Pipelined batches** ([`claim`]): the next batch is claimed while the current one is still
//!   sending, but only when fewer than `low_water` rows (about half a second of work) are held —
//!   claimed and not yet written, whether unsent, in flight or answered and waiting for the
//!   flusher — so a pod never hoards rows another pod could send.
//! - **Gate** ([`gate`]): before any send starts, the pacer (governor, at this pod's share of the
//!   fleet-wide limit: [`crate::rate`]) hands out a token — every HTTP attempt spends one — and a
//!   re-check at most `OPTOUT_RECHECK_MS` old must have seen the row still ours and not opted out.
//! - **Sends** ([`send`]): tasks that touch only the provider; what an answer means is decided by
//!   the pure [`crate::outcome`]. A provider that cannot be reached at all defers the row without
//!   spending an attempt, and the pod pauses, then probes one request at a time.
//! - **Results written as they come** ([`finish`]), in small fenced groups, so a crash re-sends at
//!   most what was in flight plus one flush interval.
//! - **Heartbeat** ([`watches`]): rows held by a live worker never expire, so `LEASE_S` can be
//!   short and a killed worker's rows come back quickly.
//! - **Stopping** ([`shutdown`]): nothing new is claimed or started; in-flight requests finish
//!   (bounded by the request timeout); their results are written, and every claimed-but-unsent
//!   row is released at once in the same fenced write, without counting the attempt.
//! - **Counting** ([`recorder`]): every event updates the run report and the metrics together.
//! - **Lifecycle** ([`lifecycle`]): `run` until done, `serve` for ever, or one `step`; between
//!   `serve`'s passes [`idle`] waits, holding no share of the limit, for work, a resume, the
//!   window or the account.
//!
//! One row's result passes through five types, each adding what the next step needs:
//! [`crate::outcome::Attempt`] (what the HTTP exchange said, per the vendor's profile) →
//! [`crate::outcome::Resolution`] (what becomes of the row, by the one retry policy) →
//! `pipeline::Settled` (a resolution for a row under its claim, or the row left to someone
//! else: what the flusher receives) → [`crate::store::Written`] (the plain values one fenced
//! write stores; the store knows no policy) → [`crate::store::Finished`] (what that write did:
//! rows still ours, sends that raced an opt-out).
//!
//! Every statement of a pass goes through `Pipeline::retrying` ([`shutdown`]): each attempt cut
//! at its bound and retried on a new connection ([`crate::store::outage`]), given up at the
//! shutdown bound once the pass is stopping.
//!
//! Memory is flat in campaign size, and what a SIGKILL can leave `sending` is bounded: a pod holds
//! fewer than `BATCH_SIZE + low_water` rows at any moment (room is made only when a row's result
//! is written, in `Held::forget`; the flusher writes early when the claimer waits for room).

mod claim;
mod finish;
mod gate;
mod held;
mod idle;
mod lifecycle;
mod pipeline;
mod recorder;
mod send;
mod shutdown;
mod watches;

pub use shutdown::WRITES_AFTER_REQUESTS;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, RunConfig};
use crate::outcome::RetryPolicy;
use crate::provider::Provider;
use crate::rate::{Coordinator, CoordinatorSettings, Pacer, Signals};
use crate::report::WorkerStats;
use crate::store::outage::retrying;
use crate::store::{connect::error_text, Store};

use recorder::Recorder;
use send::Reachability;

/// What one [`Worker::step`] did.
#[derive(Debug)]
pub enum Step {
    /// A batch was claimed and settled (sent, scheduled, failed or released).
    Worked { claimed: usize },
    /// Nothing claimable right now; `remaining.total() == 0` means the campaign is done.
    Empty(crate::store::Remaining),
}

/// An unrecoverable problem for this run (the database stayed away too long).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The campaign cannot be sent through this vendor as configured (exit 78): what to set.
    #[error("{0}")]
    Config(ConfigError),
    #[error("database unavailable for more than {:?}; rows this worker held are re-claimed after their lease. Check the database and rerun: {}", .0, error_text(.1))]
    Database(Duration, #[source] sqlx::Error),
}

/// Where a worker is in the fleet's rate limit ([`crate::rate::Coordinator`]).
enum Coordination {
    /// Not joined yet: the first run or step starts it (boxed: it is large, and the other
    /// states are what a worker holds for the rest of its life).
    Ready(Box<Coordinator>),
    /// Joined: the coordinator's rounds run until `stop`.
    Running {
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    },
    /// Left (a stopped worker does not join again).
    Left,
}

/// One process's worker: its provider client, its share of the fleet's limit, its counters.
pub struct Worker {
    cfg: Arc<RunConfig>,
    store: Store,
    provider: Provider,
    /// This process's share of the fleet-wide limit, kept current by the coordinator.
    pacer: Pacer,
    signals: Signals,
    /// This pod's part in the fleet's limit.
    coordination: Mutex<Coordination>,
    policy: RetryPolicy,
    name: String,
    /// `DB_CONNECT_RETRY_S`: how long a database outage is ridden out.
    outage_limit: Duration,
    recorder: Arc<Recorder>,
    reach: Arc<Reachability>,
}

impl Worker {
    /// A worker for `cfg`'s campaign on `store`, sending through `provider` (built from the
    /// same configuration: [`RunConfig::provider`]).
    pub fn new(cfg: RunConfig, provider: Provider, store: Store, outage_limit: Duration) -> Self {
        let pacer = Pacer::new();
        let (coordinator, signals) = Coordinator::new(
            store.pool().clone(),
            CoordinatorSettings {
                key: cfg.limit_key(),
                worker: cfg.worker_name(),
                campaign_id: cfg.campaign_id.clone(),
                limit_per_s: cfg.mail_rate_per_s as f64,
                ttl: cfg.rate_share_ttl(),
                sync: cfg.rate_sync(),
                retry_after_cap: cfg.retry_policy().retry_after_cap,
                daily_quota: cfg.mail_daily_quota,
            },
            pacer.clone(),
        );
        let name = cfg.worker_name();
        Self {
            policy: cfg.retry_policy(),
            reach: Arc::new(Reachability::new(name.clone())),
            name,
            cfg: Arc::new(cfg),
            store,
            provider,
            pacer,
            signals,
            coordination: Mutex::new(Coordination::Ready(Box::new(coordinator))),
            outage_limit,
            recorder: Arc::new(Recorder::default()),
        }
    }

    /// What this worker did so far.
    pub fn stats(&self) -> WorkerStats {
        self.recorder.snapshot()
    }

    /// Joins the fleet's rate limit (once): nothing is sent before the first round grants a
    /// share.
    fn start_coordinator(&self) {
        let mut c = self.coordination.lock().expect("lock");
        *c = match std::mem::replace(&mut *c, Coordination::Left) {
            Coordination::Ready(coordinator) => {
                let stop = CancellationToken::new();
                let task = tokio::spawn(coordinator.run(stop.clone()));
                Coordination::Running { stop, task }
            }
            joined_or_left => joined_or_left,
        };
    }

    /// Leaves the fleet's rate limit: stops sending and frees the share (one second later).
    async fn stop_coordinator(&self) {
        let running = {
            let mut c = self.coordination.lock().expect("lock");
            match &*c {
                Coordination::Running { .. } => std::mem::replace(&mut *c, Coordination::Left),
                // Never started: it stays ready for a later pass.
                Coordination::Ready(_) | Coordination::Left => return,
            }
        };
        if let Coordination::Running { stop, task } = running {
            stop.cancel();
            let _ = task.await;
        }
    }

    /// Rides out a database outage of up to `DB_CONNECT_RETRY_S` by the one retry rule
    /// ([`crate::store::outage`]); past it the run ends with [`RunError::Database`].
    async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, RunError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, sqlx::Error>>,
    {
        retrying(self.outage_limit, what, op)
            .await
            .map_err(|e| RunError::Database(self.outage_limit, e))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A worker dropped without finishing a run (tests driving `step`) still leaves the fleet.
        if let Coordination::Running { stop, .. } = &*self.coordination.lock().expect("lock") {
            stop.cancel();
        }
    }
}
