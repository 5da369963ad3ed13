//! The gate: hands claimed rows, in claim order, to sends — each only with a free send slot, a
//! pacer token (every HTTP attempt spends one, at this pod's share of the fleet's limit) and a
//! re-check at most `OPTOUT_RECHECK_MS` (and `PAUSE_POLL_MS`) old that saw the row still ours,
//! not opted out and its campaign not paused ([`crate::store::Store::recheck`]), which also moves rows whose address was suppressed, or
//! whose idempotency window closed, out of the claim. A row whose address can never be delivered fails here,
//! once, without a token or a request. On stop, it releases everything not started.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use uuid::Uuid;

use super::pipeline::{Pipeline, Settled};
use super::send::SendTask;
use crate::outcome::{ErrorClass, Resolution};
use crate::shown::plausible_email;
use crate::store::{ClaimedRow, Recheck};

type Claimed = (Uuid, ClaimedRow);

struct Gate<'p, 'a> {
    p: &'p Pipeline<'a>,
    rx: mpsc::UnboundedReceiver<Claimed>,
    out: mpsc::UnboundedSender<Settled>,
    slots: Arc<Semaphore>,
    concurrency: usize,
    /// Rows re-checked in one statement.
    chunk: usize,
    max_age: Duration,
    /// Claimed, not re-checked since.
    unchecked: VecDeque<Claimed>,
    /// Re-checked at `checked_at` and found sendable.
    cleared: VecDeque<Claimed>,
    checked_at: Option<Instant>,
    /// The claimer may still send rows.
    input_open: bool,
}

impl Pipeline<'_> {
    pub(super) async fn gate(
        &self,
        rx: mpsc::UnboundedReceiver<Claimed>,
        out: mpsc::UnboundedSender<Settled>,
    ) {
        let cfg = self.cfg();
        let concurrency = cfg.send_concurrency as usize;
        let gate = Gate {
            p: self,
            rx,
            out,
            slots: self.slots.clone(),
            concurrency,
            chunk: concurrency.max(16),
            // A check clears both the opt-out and the pause: as fresh as the stricter asks.
            max_age: cfg.optout_recheck().min(cfg.pause_poll()),
            unchecked: VecDeque::new(),
            cleared: VecDeque::new(),
            checked_at: None,
            input_open: true,
        };
        gate.run().await;
    }
}

impl Gate<'_, '_> {
    async fn run(mut self) {
        loop {
            while let Ok(x) = self.rx.try_recv() {
                self.intake(x);
            }
            if self.p.stop.is_stopped() {
                break;
            }
            if self.unchecked.is_empty() && self.cleared.is_empty() {
                if !self.input_open {
                    break;
                }
                self.wait_for_rows().await;
                continue;
            }
            // A slot, a token and a fresh re-check, in that order; a stop during any of them
            // starts nothing (the loop's top sees it).
            let Some(permit) = self.free_slot().await else {
                continue;
            };
            if !self.token().await || !self.recheck_if_stale().await || self.p.stop.is_stopped() {
                continue;
            }
            let Some((claim_id, row)) = self.cleared.pop_front() else {
                continue; // the whole chunk was held back; the token is simply unused
            };
            self.start(claim_id, row, permit).await;
        }
        self.release_unsent().await;
        // Wait for every in-flight send (each holds a slot); they end within the request timeout.
        let _ = self.slots.acquire_many(self.concurrency as u32).await;
    }

    /// A claimed row enters the queue, unless it can never be delivered: an implausible address
    /// fails here, once per row, without a token or a request.
    fn intake(&mut self, (claim_id, row): Claimed) {
        if plausible_email(row.email.as_deref()) {
            self.unchecked.push_back((claim_id, row));
            return;
        }
        self.settle(
            claim_id,
            row.member_id,
            Resolution::Failed {
                status: None,
                class: ErrorClass::InvalidEmail,
            },
        );
    }

    fn settle(&self, claim_id: Uuid, member_id: i64, res: Resolution) {
        let _ = self.out.send(Settled::Row {
            claim_id,
            member_id,
            res,
        });
    }

    /// Nothing queued: waits for the claimer's next rows (or the end of its input, or a stop).
    async fn wait_for_rows(&mut self) {
        tokio::select! {
            x = self.rx.recv() => match x {
                Some(x) => self.intake(x),
                None => self.input_open = false,
            },
            _ = self.p.stop.stopped() => {}
        }
    }

    async fn free_slot(&self) -> Option<OwnedSemaphorePermit> {
        tokio::select! {
            p = self.slots.clone().acquire_owned() => Some(p.expect("semaphore open")),
            _ = self.p.stop.stopped() => None,
        }
    }

    /// Every attempt spends a token of this pod's share of the fleet's limit.
    async fn token(&self) -> bool {
        match self.p.w.pacer.acquire(self.p.stop.token()).await {
            Some(waited) => {
                self.p.w.recorder.pacer_wait(waited);
                true
            }
            None => false,
        }
    }

    /// Re-checks the next chunk when the cleared rows' check is older than `OPTOUT_RECHECK_MS`
    /// (or none are cleared). False if the pass failed (the database stayed away).
    async fn recheck_if_stale(&mut self) -> bool {
        let fresh = self.checked_at.is_some_and(|t| t.elapsed() <= self.max_age);
        if fresh && !self.cleared.is_empty() {
            return true;
        }
        // Stale cleared rows go back in front, in order.
        while let Some(x) = self.cleared.pop_back() {
            self.unchecked.push_front(x);
        }
        let take = self.chunk.min(self.unchecked.len());
        let ids: Vec<(i64, Uuid)> = self
            .unchecked
            .iter()
            .take(take)
            .map(|(c, r)| (r.member_id, *c))
            .collect();
        // The check's time is when it *starts*: everything committed before it is seen.
        let started = Instant::now();
        let (w, ids) = (self.p.w, &ids);
        // Nothing is sent after a stop, so a check still waiting for the database then is
        // given up (the rows are released) once the shutdown bound is reached.
        let within = self.p.cfg().resend_within();
        let checking = self.p.ask("re-checking rows before sending", || {
            w.store.recheck(ids, within)
        });
        let Some(blocked) = checking.await else {
            return false;
        };
        self.checked_at = Some(started);
        if blocked.iter().any(|(_, why)| *why == Recheck::Paused) {
            // Nothing of this check is sent; the rows stay queued and are released with the
            // rest as the pass stops.
            tracing::warn!(worker = %self.p.w.name,
                "campaign paused (seen before a send); stopping: in-flight requests finish, the rest is released");
            self.p.stop.stop(crate::report::StopReason::Paused);
            return false;
        }
        let blocked: HashMap<i64, Recheck> = blocked.into_iter().collect();
        for (claim_id, row) in self.unchecked.drain(..take).collect::<Vec<_>>() {
            match blocked.get(&row.member_id) {
                None => self.cleared.push_back((claim_id, row)),
                Some(Recheck::OptedOut) => self.settle(
                    claim_id,
                    row.member_id,
                    Resolution::Released {
                        class: ErrorClass::OptedOut,
                    },
                ),
                Some(&why) => {
                    let _ = self.out.send(Settled::Left {
                        claim_id,
                        member_id: row.member_id,
                        why,
                    });
                }
            }
        }
        true
    }

    /// Starts the send of a cleared row (its slot goes with it). While the provider cannot be
    /// reached, one request at a time: each after the pause its predecessor set, until one gets
    /// an answer.
    async fn start(&self, claim_id: Uuid, row: ClaimedRow, permit: OwnedSemaphorePermit) {
        let w = self.p.w;
        let probe = w.reach.is_down();
        let send = SendTask {
            provider: w.provider.clone(),
            policy: w.policy,
            letter: self.p.letter.clone(),
            pacer: w.pacer.clone(),
            signals: w.signals.clone(),
            reach: w.reach.clone(),
            recorder: w.recorder.clone(),
            out: self.out.clone(),
            until: self.p.requests_end,
            stop: self.p.stop.clone(),
        };
        let task = tokio::spawn(send.run(claim_id, row, permit));
        if probe {
            let _ = task.await;
        }
    }

    /// Stopping (or all input handed out): releases whatever was not started, including rows the
    /// claimer still pushes until it sees the stop.
    async fn release_unsent(&mut self) {
        let unsent: Vec<Claimed> = self
            .unchecked
            .drain(..)
            .chain(self.cleared.drain(..))
            .collect();
        for x in unsent {
            self.release(x);
        }
        if self.input_open {
            while let Some(x) = self.rx.recv().await {
                self.release(x);
            }
        }
    }

    fn release(&self, (claim_id, row): Claimed) {
        self.settle(
            claim_id,
            row.member_id,
            Resolution::Released {
                class: ErrorClass::Released,
            },
        );
    }
}
