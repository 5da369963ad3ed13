//! The claimer: claims the next batch ([`crate::store::Store::claim`]) while the current one is
//! still sending, but only while fewer than `low_water` rows are held, and decides what an empty
//! claim means (done, or wait for rows in backoff or under a lease).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::debug;
use uuid::Uuid;

use super::pipeline::Pipeline;
use crate::metrics as m;
use crate::report::StopReason;
use crate::store::{Batch, ClaimedRow, Remaining};

/// What to do after a claim came back empty.
enum WhenEmpty {
    /// Stop the claimer (done, a step's answer, stopped or failed).
    Return(Option<Remaining>),
    /// Claim again (after waiting for the earliest row to become claimable).
    ClaimAgain,
}

impl Pipeline<'_> {
    /// Claims batches and hands their rows to the gate, until stopped, done, or (for a step)
    /// after one claim. Returns the remaining work when a step found nothing to claim.
    pub(super) async fn claimer(
        &self,
        tx: mpsc::UnboundedSender<(Uuid, ClaimedRow)>,
    ) -> Option<Remaining> {
        loop {
            if !self.wait_for_room().await {
                return None;
            }
            let batch = match self.claim_batch().await {
                Some(b) => b,
                None => return None,
            };
            self.w.recorder.diverted(batch.suppressed, 0);
            // A claim that moved listed rows to `suppressed` made progress: the rows behind
            // them may be sendable, so it claims again at once instead of idling.
            if batch.rows.is_empty() && batch.suppressed > 0 && !self.one_batch {
                continue;
            }
            if batch.rows.is_empty() {
                match self.when_empty().await {
                    WhenEmpty::Return(r) => return r,
                    WhenEmpty::ClaimAgain => continue,
                }
            }
            self.take(batch, &tx);
            if self.one_batch {
                return None;
            }
        }
    }

    /// Waits until fewer than `low_water` rows are held — written rows make room, and so does
    /// a larger share — ; false if the pass stopped meanwhile.
    async fn wait_for_room(&self) -> bool {
        let pacer = &self.w.pacer;
        let larger_share = || {
            let mut share = pacer.changes();
            async move {
                let _ = share.changed().await;
            }
        };
        tokio::select! {
            () = self.held.wait_for_room(|| self.low_water(), larger_share) => !self.stop.is_stopped(),
            _ = self.stop.stopped() => false,
        }
    }

    /// One claim — of [`Pipeline::low_water`] rows; a step's of `BATCH_SIZE` — riding out a
    /// database outage; `None` (the pass failed) past the limit.
    async fn claim_batch(&self) -> Option<Batch> {
        let (w, cfg) = (self.w, self.cfg());
        let n = if self.one_batch {
            cfg.batch_size
        } else {
            self.low_water() as u32
        };
        // A claim in flight at a stop is waited for (its rows are then released at once), but
        // not past the shutdown bound. Every retry keeps the claim's id: an attempt whose answer
        // was lost committed its rows under it, and the retry takes them back.
        let claim_id = uuid::Uuid::new_v4();
        self.ask("claiming rows", || {
            w.store.claim_as(claim_id, n, cfg.lease())
        })
        .await
    }

    /// Nothing was claimable: done, a step's answer, or a wait for the earliest row in backoff
    /// or under a lease (at most `IDLE_POLL_MS`: others may release rows).
    async fn when_empty(&self) -> WhenEmpty {
        let w = self.w;
        // Hold no share of the fleet's limit unless rows are held.
        w.signals.set_busy(self.held.count() > 0);
        let Some(rem) = self
            .ask("counting what is left", || w.store.remaining())
            .await
        else {
            return WhenEmpty::Return(None);
        };
        m::backlog(&rem, None);
        if self.one_batch {
            return WhenEmpty::Return(Some(rem));
        }
        if rem.total() == 0 {
            // Nothing left anywhere, so nothing held either (its rows were written).
            w.signals.set_busy(false);
            self.stop.stop(StopReason::Done);
            return WhenEmpty::Return(None);
        }
        let idle_poll = self.cfg().idle_poll();
        let due = rem
            .next_due_s
            .map(|s| Duration::from_secs_f64(s.clamp(0.0, 3600.0)));
        let wait = due.unwrap_or(idle_poll).min(idle_poll);
        tokio::select! {
            _ = tokio::time::sleep(wait) => WhenEmpty::ClaimAgain,
            _ = self.stop.stopped() => WhenEmpty::Return(None),
        }
    }

    /// A non-empty batch: counted, held, and handed to the gate in claim order.
    fn take(&self, batch: Batch, tx: &mpsc::UnboundedSender<(Uuid, ClaimedRow)>) {
        let n = batch.rows.len();
        self.w.signals.set_busy(true);
        debug!(claim_id = %batch.claim_id, rows = n, "claimed");
        self.claimed.fetch_add(n, Ordering::SeqCst);
        self.w.recorder.claimed(n, batch.reclaimed);
        self.held
            .hold(batch.claim_id, batch.rows.iter().map(|r| r.member_id));
        for row in batch.rows {
            // The gate outlives the claimer, so the channel is open.
            let _ = tx.send((batch.claim_id, row));
        }
    }
}
