//! The one stop path of a pipeline pass, whatever stops it.
//!
//! A pass stops on the caller's token (SIGTERM or SIGINT: the binary cancels it), at its
//! deadline (`DEADLINE_S` from the Job's start, or a step's `stop_at`), when the send window
//! closes (at its instant, or when the settings watch sees it closed), when the campaign is
//! paused (the settings watch),
//! when permanent failures cross the budget (the flusher), when the campaign is done (the
//! claimer), or when the database stays away too long (any stage). Every one of them goes
//! through [`Stop`], and stopping is the same for all:
//!
//! 1. nothing new is claimed ([`super::claim`]) and no send starts ([`super::gate`]);
//! 2. requests in flight finish, bounded by the request timeout;
//! 3. their results are written ([`super::finish`]), and every claimed-but-unsent row is released
//!    in the same fenced write with its attempt given back, so other pods take it at once;
//! 4. the pod leaves the fleet's rate limit (its share is free one second later).
//!
//! Stopping is bounded whatever the database does: every statement of a pass goes through
//! [`Pipeline::retrying`], whose attempts are each cut at their bound (`store::outage`) and
//! which gives up once the pass has been stopping for the request timeout plus
//! [`WRITES_AFTER_REQUESTS`], not after the whole `DB_CONNECT_RETRY_S`. Rows not written by
//! then come back after their lease and are re-sent under their key. The manifests'
//! `terminationGracePeriodSeconds` is above that bound (tests/it/manifests.rs), so Kubernetes never kills a pod mid-write.
//!
//! The first recorded reason wins: a pass that stopped itself (done, paused, over the budget)
//! reports that even if a signal came while it was finishing.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::pipeline::Pipeline;
use super::RunError;
use crate::report::StopReason;

/// How long after the requests in flight have had their timeout the results are still written
/// once a pass is stopping (see the module docs).
pub const WRITES_AFTER_REQUESTS: Duration = Duration::from_secs(10);

/// A pipeline pass's stop: the token every stage listens to, and why it fired.
pub(super) struct Stop {
    token: CancellationToken,
    reason: Mutex<Option<StopReason>>,
    fatal: Mutex<Option<RunError>>,
    /// When the token fired (set by a watcher task).
    since: Arc<OnceLock<Instant>>,
}

impl Stop {
    /// A stop that also fires when `parent` (the process's shutdown token) does. Must be called
    /// inside the runtime.
    pub(super) fn child_of(parent: &CancellationToken) -> Self {
        let token = parent.child_token();
        let since = Arc::new(OnceLock::new());
        let (t, s) = (token.clone(), since.clone());
        tokio::spawn(async move {
            t.cancelled().await;
            let _ = s.set(Instant::now());
        });
        Self {
            token,
            reason: Mutex::new(None),
            fatal: Mutex::new(None),
            since,
        }
    }

    /// Resolves once the pass has been stopping for `bound` (never, while it is not stopping).
    pub(super) async fn stopping_for(&self, bound: Duration) {
        self.stopped().await;
        let since = self.since.get().copied().unwrap_or_else(Instant::now);
        tokio::time::sleep_until(since + bound).await;
    }

    pub(super) fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub(super) fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Resolves once the pass is stopping.
    pub(super) async fn stopped(&self) {
        self.token.cancelled().await
    }

    /// Stops the pass for `reason` (kept only if it is the first).
    pub(super) fn stop(&self, reason: StopReason) {
        self.reason.lock().expect("lock").get_or_insert(reason);
        self.token.cancel();
    }

    /// Stops the pass on an error it cannot go on with (the first one is kept).
    pub(super) fn fail(&self, e: RunError) {
        self.fatal.lock().expect("lock").get_or_insert(e);
        self.token.cancel();
    }

    /// Stops the pass at `when` for `reason` unless it stopped before. The timer ends with the
    /// returned guard.
    pub(super) fn at(
        self: &std::sync::Arc<Self>,
        when: Instant,
        reason: StopReason,
    ) -> DeadlineGuard {
        let stop = self.clone();
        let task = tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep_until(when) => stop.stop(reason),
                _ = stop.token.cancelled() => {}
            }
        });
        DeadlineGuard(task)
    }

    /// The error that ended the pass, if one did.
    pub(super) fn take_fatal(&self) -> Option<RunError> {
        self.fatal.lock().expect("lock").take()
    }

    /// Why the pass stopped: the recorded reason; else a signal (the parent token fired: the
    /// only way a pass stops unrecorded).
    pub(super) fn reason(&self) -> StopReason {
        self.reason
            .lock()
            .expect("lock")
            .unwrap_or(StopReason::Signal)
    }
}

/// Ends the deadline timer of [`Stop::at`] when dropped.
pub(super) struct DeadlineGuard(tokio::task::JoinHandle<()>);

impl Drop for DeadlineGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a statement of a pass got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoAnswer {
    /// The database stayed away past `DB_CONNECT_RETRY_S`: the pass cannot go on.
    #[error(transparent)]
    Outage(RunError),
    /// The pass has been stopping for its shutdown bound: the pod must go.
    #[error(
        "given up: the pod is stopping and the database did not answer within the shutdown bound"
    )]
    Stopping,
}

impl Pipeline<'_> {
    /// A statement of this pass: the worker's retry rule (each attempt cut at its bound, the
    /// outage ridden out for `DB_CONNECT_RETRY_S`), given up once the pass has been stopping
    /// for its shutdown bound. The one place a pass's statements are bounded.
    pub(super) async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, NoAnswer>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        tokio::select! {
            answered = self.w.retrying(what, op) => answered.map_err(NoAnswer::Outage),
            _ = self.stop.stopping_for(self.shutdown_bound()) => Err(NoAnswer::Stopping),
        }
    }

    /// [`Pipeline::retrying`] for a stage that cannot go on without the answer: an outage past
    /// the limit fails the pass; `None` either way.
    pub(super) async fn ask<T, F, Fut>(&self, what: &str, op: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        match self.retrying(what, op).await {
            Ok(v) => Some(v),
            Err(NoAnswer::Outage(e)) => {
                self.stop.fail(e);
                None
            }
            Err(NoAnswer::Stopping) => None,
        }
    }
}
