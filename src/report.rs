//! What a run did: the per-process counters, why it stopped, and the report printed at the end
//! (its exit code is the one rule of [`crate::exit::code`]).

use std::time::Duration;

use serde::Serialize;

pub use crate::exit::StopReason;
use crate::exit::{self, Exit, Mode};
use crate::outcome::{ErrorClass, Resolution};
use crate::store::CampaignCounts;

/// Per-process counters (never per-recipient data).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WorkerStats {
    pub batches: u64,
    pub claimed: u64,
    /// HTTP attempts made.
    pub requests: u64,
    pub sent: u64,
    /// Retryable failures scheduled for a later attempt.
    pub retried: u64,
    /// Rows this worker moved to `failed`.
    pub failed: u64,
    /// Claimed rows given back unsent (budget, deadline, shutdown).
    pub released: u64,
    /// Claimed rows that had opted out by the time of sending: released, not sent.
    pub opted_out: u64,
    /// Attempts the provider refused for the account or the endpoint, or for its own quota:
    /// released, never failed.
    pub refused: u64,
    /// Attempts that found the provider unreachable (no connection): the row went back to
    /// `pending` after a backoff without spending an attempt.
    pub deferred: u64,
    pub invalid_email: u64,
    /// Results the fence refused: the row had been re-claimed by someone else.
    pub stale_writes: u64,
    /// Claimed rows whose address was on the suppression list: moved to `suppressed`, unsent;
    /// and rows the vendor refused as inactive (suppressed and listed).
    pub suppressed: u64,
    /// Claimed rows past their idempotency window: moved to `unconfirmed`, unsent; and rows
    /// whose attempt had an unknown outcome under a vendor without keys.
    pub unconfirmed: u64,
    /// Batches whose results could not be written at all (rows return after their lease).
    pub finish_errors: u64,
    /// Row leases extended by the heartbeat.
    pub leases_renewed: u64,
    /// 429 answers (each paused this pod, then the fleet), whatever became of the row.
    pub throttled_429: u64,
    /// Milliseconds the gate waited for pacer tokens, summed over sends.
    pub pacer_wait_ms: u64,
}

impl WorkerStats {
    pub fn count(&mut self, res: &Resolution) {
        match res {
            Resolution::Sent { .. } => self.sent += 1,
            Resolution::RetryAfter { .. } => self.retried += 1,
            Resolution::Failed { class, .. } => {
                self.failed += 1;
                if *class == ErrorClass::InvalidEmail {
                    self.invalid_email += 1;
                }
            }
            Resolution::Released {
                class: ErrorClass::OptedOut,
            } => self.opted_out += 1,
            Resolution::Released {
                class:
                    ErrorClass::AccountRefused | ErrorClass::EndpointRefused | ErrorClass::VendorQuota,
            } => self.refused += 1,
            Resolution::Released { .. } => self.released += 1,
            Resolution::Deferred { .. } => self.deferred += 1,
            Resolution::Suppressed { .. } => self.suppressed += 1,
            Resolution::Unconfirmed { .. } => self.unconfirmed += 1,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub worker: String,
    pub reason: StopReason,
    pub elapsed_s: f64,
    pub stats: WorkerStats,
    pub campaign: CampaignCounts,
    /// Most `failed` rows the campaign may have before exit code 2.
    pub failure_budget: i64,
    pub mode: Mode,
    pub exit_code: Exit,
}

impl RunReport {
    pub fn new(
        worker: String,
        reason: StopReason,
        mode: Mode,
        elapsed: Duration,
        stats: WorkerStats,
        campaign: CampaignCounts,
        failure_budget: i64,
    ) -> Self {
        let exit_code = exit::code(reason, mode, &campaign, failure_budget);
        Self {
            worker,
            reason,
            elapsed_s: elapsed.as_secs_f64(),
            stats,
            campaign,
            failure_budget,
            mode,
            exit_code,
        }
    }

    /// The same report for a pod that was told to stop while idling (`serve`).
    pub fn stopped_by_signal(self) -> Self {
        let reason = StopReason::Signal;
        Self {
            exit_code: exit::code(reason, self.mode, &self.campaign, self.failure_budget),
            reason,
            ..self
        }
    }

    /// A few lines for a person reading the pod log.
    pub fn human(&self) -> String {
        let c = &self.campaign;
        let s = &self.stats;
        format!(
            "{worker}: {reason:?} after {el:.1}s, exit {code}\n  \
             this worker: {req} requests, {sent} sent, {retry} retries scheduled, {failed} failed, \
             {rel} released, {oo} skipped (opted out), {def} deferred (provider unreachable), \
             {refused} refused (account or endpoint), {supp} suppressed, {unconf} unconfirmed, \
             {stale} stale writes\n  \
             campaign: {total} targets, {csent} sent, {cfailed} failed (budget {budget}), \
             {pending} pending, {sending} sending, {copt} opted out, {csupp} suppressed, \
             {cunconf} unconfirmed",
            worker = self.worker,
            reason = self.reason,
            el = self.elapsed_s,
            code = self.exit_code.code(),
            req = s.requests,
            sent = s.sent,
            retry = s.retried,
            failed = s.failed,
            rel = s.released,
            oo = s.opted_out,
            def = s.deferred,
            refused = s.refused,
            stale = s.stale_writes,
            supp = s.suppressed,
            unconf = s.unconfirmed,
            csupp = c.suppressed,
            cunconf = c.unconfirmed,
            total = c.total,
            csent = c.sent,
            cfailed = c.failed,
            budget = self.failure_budget,
            pending = c.pending,
            sending = c.sending,
            copt = c.opted_out,
        )
    }
}
