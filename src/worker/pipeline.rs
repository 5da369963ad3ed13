//! One pass of the pipeline (a whole `run`, a `serve` pass, or a single `step`): the state the
//! stages share, and [`Pipeline::drive`], which runs them all to completion.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::held::Held;
use super::shutdown::Stop;
use super::Worker;
use crate::config::RunConfig;
use crate::outcome::Resolution;
use crate::provider::Letter;
use crate::store::{Recheck, Remaining};

/// How much of its own share a pod keeps claimed ahead of its sends ([`Pipeline::low_water`]).
pub(super) const HOLD: std::time::Duration = std::time::Duration::from_millis(500);
/// The smallest claim: what a pod without a share yet (starting, or back from idle) claims, so
/// that it has work and asks the fleet for a share.
pub(super) const MIN_CLAIM: usize = 16;

/// How long a request may still run after the pass's time is up (the send window closed, the
/// deadline passed): the pod exits within this, plus the final write, of the end.
pub(super) const REQUEST_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// What a send (or the gate) hands the flusher about one claimed row.
pub(super) enum Settled {
    /// To be written under the claim.
    Row {
        claim_id: Uuid,
        member_id: i64,
        res: Resolution,
    },
    /// No longer ours — someone re-claimed it after our lease lapsed, or the re-check moved it
    /// to `suppressed` or `unconfirmed` — : nothing to write.
    Left {
        claim_id: Uuid,
        member_id: i64,
        /// Never [`Recheck::OptedOut`] (an opted-out row is released and written).
        why: Recheck,
    },
}

pub(super) struct Pipeline<'a> {
    pub(super) w: &'a Worker,
    /// The campaign's part of every mail: template, sender, reply-to (its settings row's).
    pub(super) letter: Arc<Letter>,
    pub(super) stop: Arc<Stop>,
    /// No request may run past this (the send window's end or the deadline, plus
    /// [`REQUEST_GRACE`]): a request started close to it gets only what is left as its timeout.
    pub(super) requests_end: Option<Instant>,
    /// A `step`: claim one batch only.
    pub(super) one_batch: bool,
    /// `failed` rows the campaign may have before the pass stops (`i64::MAX` for a step).
    pub(super) failure_budget: i64,
    /// Rows claimed and not yet written: what the heartbeat extends and the claimer counts.
    pub(super) held: Held,
    /// Rows claimed in this pass.
    pub(super) claimed: AtomicUsize,
    /// `SEND_CONCURRENCY` send slots: a request holds one until its result is handed on.
    pub(super) slots: Arc<Semaphore>,
}

impl<'a> Pipeline<'a> {
    /// How long after its stop this pass still writes to the database (see [`super::shutdown`]).
    pub(super) fn shutdown_bound(&self) -> std::time::Duration {
        self.cfg().request_timeout() + super::shutdown::WRITES_AFTER_REQUESTS
    }

    pub(super) fn new(
        w: &'a Worker,
        letter: Arc<Letter>,
        cancel: &CancellationToken,
        one_batch: bool,
        failure_budget: i64,
    ) -> Self {
        Self {
            w,
            letter,
            stop: Arc::new(Stop::child_of(cancel)),
            requests_end: None,
            one_batch,
            failure_budget,
            held: Held::default(),
            claimed: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(w.cfg.send_concurrency as usize)),
        }
    }

    pub(super) fn cfg(&self) -> &RunConfig {
        &self.w.cfg
    }

    /// Claim only when fewer rows than this are held — unsent, in flight or unwritten: about
    /// [`HOLD`] of this pod's own share of the fleet's limit (not the limit: 8 pods sharing 500/s
    /// hold 62.5/s worth each, so at the end no pod is left with seconds of work while the others
    /// idle), plus what is in flight now, at least [`MIN_CLAIM`], at most `BATCH_SIZE`. Each
    /// claim takes this many rows, so a pod holds fewer than twice this.
    pub(super) fn low_water(&self) -> usize {
        let c = self.cfg();
        let share = self.w.pacer.rate();
        let in_flight =
            (c.send_concurrency as usize).saturating_sub(self.slots.available_permits());
        let batch = c.batch_size as usize;
        ((share * HOLD.as_secs_f64()).ceil() as usize + in_flight)
            .clamp(MIN_CLAIM.min(batch), batch)
    }

    /// Runs all stages to completion. Returns the remaining work when a one-batch step found
    /// nothing to claim.
    pub(super) async fn drive(&self) -> Option<Remaining> {
        let (rows_tx, rows_rx) = mpsc::unbounded_channel();
        let (res_tx, res_rx) = mpsc::unbounded_channel();
        let flushed = CancellationToken::new();
        let (empty, (), (), (), ()) = tokio::join!(
            self.claimer(rows_tx),
            self.gate(rows_rx, res_tx),
            async {
                self.flusher(res_rx).await;
                flushed.cancel();
            },
            self.heartbeat(flushed.clone()),
            self.pause_watch(flushed.clone()),
        );
        empty
    }
}
