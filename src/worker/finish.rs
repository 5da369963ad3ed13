//! The flusher: writes results in small fenced groups ([`crate::store::Store::finish`]) — every
//! `FLUSH_MAX_ROWS`, `FLUSH_INTERVAL_MS` after the oldest unwritten one arrived, as soon as
//! writing them lets a waiting claimer claim, and at the end — and after each group counts the
//! campaign's failures against its budget.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::warn;
use uuid::Uuid;

use super::pipeline::{Pipeline, Settled};
use crate::outcome::{failure_check_due, Resolution};
use crate::report::StopReason;
use crate::store::connect::error_text;
use crate::store::outage::retrying;
use crate::store::{campaigns, Recheck};

/// Results received and not written yet, by claim.
#[derive(Default)]
struct Unwritten {
    by_claim: HashMap<Uuid, Vec<(i64, Resolution)>>,
    rows: usize,
    oldest: Option<Instant>,
}

impl Unwritten {
    fn push(&mut self, claim_id: Uuid, member_id: i64, res: Resolution) {
        self.by_claim
            .entry(claim_id)
            .or_default()
            .push((member_id, res));
        self.rows += 1;
        self.oldest.get_or_insert_with(Instant::now);
    }

    fn take(&mut self) -> HashMap<Uuid, Vec<(i64, Resolution)>> {
        self.rows = 0;
        self.oldest = None;
        std::mem::take(&mut self.by_claim)
    }
}

/// When this worker last counted the campaign's failures against the budget.
#[derive(Default)]
struct FailureWatch {
    last_check: Option<Instant>,
    /// This worker's own failures at that check.
    own_seen: u64,
    /// The campaign's `failed` rows at that check.
    failed_in_db: i64,
}

impl Pipeline<'_> {
    pub(super) async fn flusher(&self, mut rx: mpsc::UnboundedReceiver<Settled>) {
        let max_rows = self.cfg().flush_max_rows as usize;
        let interval = self.cfg().flush_interval();
        let mut unwritten = Unwritten::default();
        let mut watch = FailureWatch::default();
        loop {
            let flush_at = unwritten.oldest.map(|t| t + interval);
            let closed = tokio::select! {
                s = rx.recv() => match s {
                    Some(s) => {
                        self.receive(s, &mut unwritten);
                        false
                    }
                    None => true,
                },
                _ = async { tokio::time::sleep_until(flush_at.expect("guarded")).await }, if flush_at.is_some() => false,
            };
            let due = flush_at.is_some_and(|t| Instant::now() >= t);
            if closed
                || due
                || self.held.makes_room(unwritten.rows, self.low_water())
                || unwritten.rows >= max_rows
            {
                self.flush(unwritten.take()).await;
                self.check_failures(&mut watch).await;
            }
            if closed {
                return;
            }
        }
    }

    /// A settled row: counted, and queued for the next write (or, taken over, forgotten).
    fn receive(&self, s: Settled, unwritten: &mut Unwritten) {
        match s {
            Settled::Row {
                claim_id,
                member_id,
                res,
            } => {
                self.w.recorder.settled(&res);
                unwritten.push(claim_id, member_id, res);
            }
            Settled::Left {
                claim_id,
                member_id,
                why,
            } => {
                match why {
                    Recheck::Suppressed => self.w.recorder.diverted(1, 0),
                    Recheck::Unconfirmed => self.w.recorder.diverted(0, 1),
                    Recheck::TakenOver | Recheck::OptedOut | Recheck::Paused => {
                        self.w.recorder.taken_over(1)
                    }
                }
                self.held.forget(claim_id, &[member_id]);
            }
        }
    }

    /// One fenced write per claim. Written or not, the rows are no longer held: if the write was
    /// given up they come back after their lease and are re-sent under the same idempotency key.
    async fn flush(&self, groups: HashMap<Uuid, Vec<(i64, Resolution)>>) {
        let w = self.w;
        for (claim_id, results) in groups {
            let rows: Vec<_> = results.iter().map(|(m, r)| (*m, r.written())).collect();
            let written = self
                .retrying("writing results", || w.store.finish(claim_id, &rows))
                .await;
            let ids: Vec<i64> = results.iter().map(|(m, _)| *m).collect();
            self.held.forget(claim_id, &ids);
            match written {
                Ok(f) => w.recorder.finished(results.len(), f),
                Err(e) => {
                    warn!(error = %e, rows = results.len(), "results not written; the rows return after their lease and are sent again under the same idempotency key");
                    w.recorder.finish_failed(results.len());
                }
            }
        }
    }

    /// The failure budget, checked when this worker's failures grew ([`failure_check_due`]); a
    /// step's budget is unlimited: it only counts. Over it: stop, and pause the campaign for the
    /// whole fleet.
    async fn check_failures(&self, watch: &mut FailureWatch) {
        let own = self.w.stats().failed;
        let new_here = own.saturating_sub(watch.own_seen) as i64;
        let since = watch.last_check.map(|t| t.elapsed());
        if !failure_check_due(new_here, watch.failed_in_db, self.failure_budget, since) {
            return;
        }
        watch.own_seen = own;
        watch.last_check = Some(Instant::now());
        // One attempt, cut at its bound: the next write's check counts again.
        let counting = retrying(Duration::ZERO, "counting failures", || {
            self.w.store.failed_count()
        });
        let Ok(failed) = counting.await else {
            return;
        };
        watch.failed_in_db = failed;
        if failed > self.failure_budget {
            self.over_budget(failed).await;
        }
    }

    async fn over_budget(&self, failed: i64) {
        let budget = self.failure_budget;
        warn!(
            failed,
            budget, "permanent failures over the threshold; pausing the campaign and stopping"
        );
        self.stop.stop(StopReason::TooManyFailures);
        // The whole fleet stops too, and `status` says why. Best effort: this pod stops (exit 2)
        // even if the pause cannot be written.
        let reason = format!(
            "{failed} permanent failures exceed the budget of {budget}; look at `status`, then `retry-failed` and `resume`"
        );
        let store = &self.w.store;
        let pausing = retrying(Duration::ZERO, "pausing the campaign", || {
            campaigns::pause(
                store.pool(),
                store.campaign_id(),
                campaigns::BY_AUTO,
                Some(&reason),
            )
        });
        if let Err(e) = pausing.await {
            warn!(error = %error_text(&e), "could not pause the campaign; other pods stop at their own threshold check");
        }
    }
}
