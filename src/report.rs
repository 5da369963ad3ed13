//! What a run did, and the exit code it maps to.
//!
//! Exit codes are the contract with Kubernetes Job semantics (see README, docs/DESIGN.md):
//! a `podFailurePolicy` fails the Job on 2 and 78 (a person must act), and a retry of the pod
//! on 1 or 75 simply continues where this one stopped.

use std::time::Duration;

use serde::Serialize;

use crate::outcome::{ErrorClass, Resolution};
use crate::store::CampaignCounts;

/// Exit codes.
pub mod exit {
    /// Campaign done; permanent failures within `MAX_PERMANENT_FAILURE_RATIO`.
    pub const DONE: u8 = 0;
    /// Stopped before done (deadline or SIGTERM). A rerun continues where this one stopped.
    pub const INCOMPLETE: u8 = 1;
    /// Permanent failures above `MAX_PERMANENT_FAILURE_RATIO` of the campaign: a person must look.
    pub const TOO_MANY_FAILURES: u8 = 2;
    /// The campaign is paused (`campaign-sender pause`): nothing was sent, or the run stopped
    /// when the pause was seen. `campaign-sender resume` and a rerun continue. A Job fails on it
    /// (podFailurePolicy) instead of retrying a pod that would stop again at once.
    pub const PAUSED: u8 = 3;
    /// `import`: the input has invalid or repeated lines, and nothing was imported.
    pub const DATA_ERROR: u8 = 65;
    /// `import`: the input file cannot be opened.
    pub const NO_INPUT: u8 = 66;
    /// The database stayed unreachable (at start or mid-run) longer than `DB_CONNECT_RETRY_S`.
    pub const DATABASE_UNAVAILABLE: u8 = 75;
    /// Bad configuration; one line on stderr names the variable.
    pub const CONFIG: u8 = 78;
}

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
    /// Attempts that found the provider unreachable (no connection): the row went back to
    /// `pending` after a backoff without spending an attempt.
    pub deferred: u64,
    pub invalid_email: u64,
    /// Results the fence refused: the row had been re-claimed by someone else.
    pub stale_writes: u64,
    /// Batches whose results could not be written at all (rows return after their lease).
    pub finish_errors: u64,
    /// Row leases extended by the heartbeat.
    pub leases_renewed: u64,
    /// 429 answers (each paused this pod, then the fleet).
    pub throttled_429: u64,
    /// Milliseconds the gate waited for pacer tokens, summed over sends.
    pub pacer_wait_ms: u64,
}

impl WorkerStats {
    pub fn count(&mut self, res: &Resolution) {
        match res {
            Resolution::Sent { .. } => self.sent += 1,
            Resolution::RetryAfter { class, .. } => {
                self.retried += 1;
                if *class == ErrorClass::Throttled {
                    self.throttled_429 += 1;
                }
            }
            Resolution::Failed { class, .. } => {
                self.failed += 1;
                if *class == ErrorClass::InvalidEmail {
                    self.invalid_email += 1;
                }
            }
            Resolution::Released {
                class: ErrorClass::OptedOut,
            } => self.opted_out += 1,
            Resolution::Released { .. } => self.released += 1,
            Resolution::Deferred { .. } => self.deferred += 1,
        }
    }

    pub fn add(&mut self, o: &WorkerStats) {
        self.batches += o.batches;
        self.claimed += o.claimed;
        self.requests += o.requests;
        self.sent += o.sent;
        self.retried += o.retried;
        self.failed += o.failed;
        self.released += o.released;
        self.opted_out += o.opted_out;
        self.deferred += o.deferred;
        self.invalid_email += o.invalid_email;
        self.stale_writes += o.stale_writes;
        self.finish_errors += o.finish_errors;
        self.leases_renewed += o.leases_renewed;
        self.throttled_429 += o.throttled_429;
        self.pacer_wait_ms += o.pacer_wait_ms;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Done,
    Deadline,
    Signal,
    TooManyFailures,
    /// The campaign's kill switch was on at the start or was turned on during the run.
    Paused,
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
    pub exit_code: u8,
}

impl RunReport {
    pub fn new(
        worker: String,
        reason: StopReason,
        elapsed: Duration,
        stats: WorkerStats,
        campaign: CampaignCounts,
        failure_budget: i64,
    ) -> Self {
        let exit_code = exit_code(reason, &campaign, failure_budget);
        Self {
            worker,
            reason,
            elapsed_s: elapsed.as_secs_f64(),
            stats,
            campaign,
            failure_budget,
            exit_code,
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
             {stale} stale writes\n  \
             campaign: {total} targets, {csent} sent, {cfailed} failed (budget {budget}), \
             {pending} pending, {sending} sending, {copt} opted out",
            worker = self.worker,
            reason = self.reason,
            el = self.elapsed_s,
            code = self.exit_code,
            req = s.requests,
            sent = s.sent,
            retry = s.retried,
            failed = s.failed,
            rel = s.released,
            oo = s.opted_out,
            def = s.deferred,
            stale = s.stale_writes,
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

/// The exit code: "a person must look" wins over everything, then done vs. not done.
pub fn exit_code(reason: StopReason, campaign: &CampaignCounts, failure_budget: i64) -> u8 {
    if reason == StopReason::TooManyFailures || campaign.failed > failure_budget {
        return exit::TOO_MANY_FAILURES;
    }
    match reason {
        StopReason::Done => exit::DONE,
        StopReason::Paused => exit::PAUSED,
        _ => exit::INCOMPLETE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_over_the_budget_win_over_done() {
        let c = CampaignCounts {
            total: 1000,
            sent: 989,
            failed: 11,
            ..Default::default()
        };
        assert_eq!(exit_code(StopReason::Done, &c, 10), exit::TOO_MANY_FAILURES);
        let ok = CampaignCounts {
            failed: 10,
            ..c.clone()
        };
        assert_eq!(exit_code(StopReason::Done, &ok, 10), exit::DONE);
        assert_eq!(exit_code(StopReason::Deadline, &ok, 10), exit::INCOMPLETE);
        assert_eq!(exit_code(StopReason::Signal, &ok, 10), exit::INCOMPLETE);
        assert_eq!(
            exit_code(StopReason::TooManyFailures, &ok, 10),
            exit::TOO_MANY_FAILURES
        );
        assert_eq!(exit_code(StopReason::Paused, &ok, 10), exit::PAUSED);
        // An auto-pause (failures over the budget) is still "a person must look".
        assert_eq!(
            exit_code(StopReason::Paused, &c, 10),
            exit::TOO_MANY_FAILURES
        );
    }
}
