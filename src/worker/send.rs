//! One send: a task that makes one HTTP attempt for one row ([`crate::provider`]), turns the
//! answer into what to write ([`crate::outcome::resolve`]) and hands it to the flusher. It never
//! touches the database. What an answer does to the pod:
//! - a 429 pauses this pod at once for the `Retry-After` and tells the coordinator, which
//!   pauses the fleet at its next round ([`crate::rate`]);
//! - no connection at all (refused, DNS, TLS): the provider is unreachable ([`Reachability`]),
//!   the pod pauses and the gate sends one probe at a time; the row is deferred without
//!   spending an attempt;
//! - a refusal of the account or the endpoint stops the pass at once and, through the
//!   coordinator, every pod of the key; the row is released with its attempt given back;
//! - the vendor's own quota (not its rate) stops the pass as `MAIL_DAILY_QUOTA` does ("done
//!   for now", exit 0) and, through the coordinator, every pod of the key until it frees, so no
//!   pod storms the vendor with requests it will refuse; the row is released.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::Instant;
use tracing::{error, info, warn};
use uuid::Uuid;

use super::pipeline::Settled;
use super::recorder::Recorder;
use super::shutdown::Stop;
use crate::outcome::{resolve, unreachable_pause, Attempt, ErrorClass, Resolution, RetryPolicy};
use crate::provider::{Letter, Provider};
use crate::rate::coordinator::VENDOR_QUOTA_PROBE;
use crate::rate::{Pacer, Signals, DEFAULT_PAUSE};
use crate::report::StopReason;
use crate::store::ClaimedRow;

/// Everything a send task needs (cheap clones of the worker's parts).
pub(super) struct SendTask {
    pub(super) provider: Provider,
    pub(super) policy: RetryPolicy,
    pub(super) letter: Arc<Letter>,
    pub(super) pacer: Pacer,
    pub(super) signals: Signals,
    pub(super) reach: Arc<Reachability>,
    pub(super) recorder: Arc<Recorder>,
    pub(super) out: mpsc::UnboundedSender<Settled>,
    /// No request runs past this (the pass's end plus its grace).
    pub(super) until: Option<Instant>,
    /// The pass's stop: a refusal stops it at once.
    pub(super) stop: Arc<Stop>,
}

impl SendTask {
    /// One attempt for `row`; the slot `permit` is held until its result is handed on.
    pub(super) async fn run(self, claim_id: Uuid, row: ClaimedRow, permit: OwnedSemaphorePermit) {
        let t0 = Instant::now();
        let email = row.email.as_deref().unwrap_or_default();
        let attempt = self
            .provider
            .send(
                row.member_id,
                row.attempt,
                email,
                &self.letter,
                row.data.as_ref().and_then(|d| d.0.as_object()),
                self.until,
            )
            .await;
        self.recorder.request(t0.elapsed(), &attempt);
        let pause = self.unreachable_pause(&attempt);
        self.on_throttled(&attempt);
        self.on_refused(&attempt);
        self.on_quota(&attempt);
        let mut res = resolve(
            attempt,
            row.attempt.max(1) as u32,
            &self.policy,
            rand::random::<f64>(),
        );
        if let (Resolution::Deferred { delay, .. }, Some(pause)) = (&mut res, pause) {
            // The row waits at least as long as the pod does.
            *delay = (*delay).max(pause);
        }
        let _ = self.out.send(Settled::Row {
            claim_id,
            member_id: row.member_id,
            res,
        });
        drop(permit);
    }

    /// Nobody to send to: this pod sends nothing for a while (growing with the outage). Any
    /// answer ends the outage.
    fn unreachable_pause(&self, attempt: &Attempt) -> Option<Duration> {
        if !matches!(attempt, Attempt::Undelivered { .. }) {
            self.reach.reached();
            return None;
        }
        let pause = self.reach.unreachable(&self.policy);
        self.pacer.pause_until(Instant::now() + pause);
        Some(pause)
    }

    /// The provider is the judge: this pod pauses now, the fleet at its coordinator's next round.
    fn on_throttled(&self, attempt: &Attempt) {
        if let Attempt::Retry {
            class: ErrorClass::Throttled,
            retry_after,
            ..
        } = attempt
        {
            let ra = retry_after.map(|r| r.min(self.policy.retry_after_cap));
            self.pacer
                .pause_until(Instant::now() + ra.unwrap_or(DEFAULT_PAUSE));
            self.signals.throttled(ra);
        }
    }
}

impl SendTask {
    /// The account or the endpoint is refused: no send starts here any more (this pass stops
    /// now), and the coordinator records it for every pod of the key at once. The row is
    /// released by [`crate::outcome::resolve`].
    fn on_refused(&self, attempt: &Attempt) {
        if let Attempt::Refused { status, refusal } = attempt {
            if !self.stop.is_stopped() {
                error!(
                    status,
                    "{}; stopping every pod of the limit key, no row is failed",
                    refusal.advice(*status)
                );
            }
            self.signals.refused(*status, *refusal);
            self.stop.stop(StopReason::AccountRefused);
        }
    }
}

impl SendTask {
    /// The vendor's daily or monthly quota is used up: this pod sends nothing more (its pacer
    /// pauses for the vendor's wait, else [`VENDOR_QUOTA_PROBE`]) and the coordinator records it
    /// for every pod of the key, whose next round stops their passes ("done for now") as
    /// `MAIL_DAILY_QUOTA` does — this pod's too: one mechanism stops them all.
    fn on_quota(&self, attempt: &Attempt) {
        if let Attempt::Quota { status, frees_in } = attempt {
            if !self.stop.is_stopped() {
                warn!(
                    status,
                    frees_in_s = frees_in.map(|d| d.as_secs()),
                    "the provider's own sending quota is used up; stopping (done for now), the row is released"
                );
            }
            self.pacer
                .pause_until(Instant::now() + frees_in.unwrap_or(VENDOR_QUOTA_PROBE));
            self.signals.vendor_quota(*frees_in);
        }
    }
}

/// Whether the provider can be reached, as this pod's attempts last found it. While it cannot,
/// the pod's pacer is paused ([`unreachable_pause`]) and the gate sends one request at a time,
/// so only a probe now and then is made; claimed rows wait, leased and heartbeated, instead of
/// each being tried and deferred.
pub(super) struct Reachability {
    /// This worker's name, for the two log lines (never personal data).
    worker: String,
    down_since: Mutex<Option<Instant>>,
}

impl Reachability {
    pub(super) fn new(worker: String) -> Self {
        Self {
            worker,
            down_since: Mutex::new(None),
        }
    }

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

    pub(super) fn is_down(&self) -> bool {
        self.down_since.lock().expect("lock").is_some()
    }

    /// An attempt got an answer (of any kind): the provider is reachable.
    fn reached(&self) {
        if let Some(since) = self.down_since.lock().expect("lock").take() {
            info!(worker = %self.worker, down_s = since.elapsed().as_secs_f64(), "provider reachable again; sending resumes");
        }
    }
}
