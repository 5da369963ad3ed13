//! Exit codes: the contract with Kubernetes Job semantics, and the one rule that maps how a run
//! stopped to its code ([`code`]).
//!
//! A Job's `podFailurePolicy` (manifests/overlays/indexed-job) fails the Job on 2, 3, 4, 64 and 78
//! (a person must act) and retries the pod on 1 and 75, which simply continues where this one
//! stopped. `tests/it/manifests.rs` checks that every code here is handled there.

use serde::Serialize;

use crate::store::CampaignCounts;

/// Why a pass stopped (the run report's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Nothing left to send.
    Done,
    /// `DEADLINE_S` (or a step's `stop_at`) passed: the run's time is up, work may be left.
    Deadline,
    /// The campaign's send window is closed (at the start, or it closed during the run).
    WindowClosed,
    /// SIGTERM or SIGINT (the process's shutdown token).
    Signal,
    /// This pod found the campaign's `failed` rows over the budget (and paused it).
    TooManyFailures,
    /// The campaign's kill switch was on at the start or was turned on during the run.
    Paused,
    /// The provider refused the account or the endpoint (this pod's answer or another's of the
    /// same limit key), at the start or during the run; lifted by `campaign-sender resume`.
    AccountRefused,
    /// The limit key's daily quota (`MAIL_DAILY_QUOTA`) has nothing left until usage ages out.
    QuotaExhausted,
}

/// How a command ends, one name per code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Exit {
    /// The command did all it may. For `run`: the campaign is done, or its time ran out —
    /// `DEADLINE_S` (counted from the Job's start), the send window, or the daily quota — with
    /// the rest left for the next run. Neither a failure nor worth a retry now: a Job's pod
    /// exits 0 and is not restarted into more sending. Also `serve` told to stop (a pod being
    /// scaled in is not a failure).
    Done = 0,
    /// Not done. `run` interrupted (SIGTERM) with time left: a retried pod continues where this
    /// one stopped; an operator command, `run` or `serve` that named a campaign that does not
    /// exist (nothing was changed or sent; the line says "did you mean"); `archive` of a
    /// campaign that still has work (nothing was archived); `migrate` that failed; `suppress
    /// --export` whose file could not be written.
    Incomplete = 1,
    /// Permanent failures above `MAX_PERMANENT_FAILURE_RATIO` of the campaign: a person must
    /// look.
    TooManyFailures = 2,
    /// The campaign is paused (`campaign-sender pause`, or `events`' brake over a complaint or
    /// bounce line, `crate::store::brake`): nothing was sent, or the run stopped when the pause
    /// was seen. `campaign-sender resume` and a rerun continue. A Job fails on
    /// it (podFailurePolicy) instead of retrying a pod that would stop again at once.
    Paused = 3,
    /// The provider refused the account (401/403: the API key) or the endpoint (404/405:
    /// `MAIL_URL`), and every pod of the limit key stopped; no row failed. Fix the key or the
    /// URL, then `campaign-sender resume` and rerun. A Job fails on it (podFailurePolicy)
    /// rather than retrying pods into more refusals.
    AccountRefused = 4,
    /// The command line itself is wrong (sysexits' `EX_USAGE`): an unknown command or flag, a
    /// missing argument. Nothing was done. Not 2, clap's own code, which is ours for "too many
    /// failures": a typo in a Job's arguments must not read as failed mail. A Job fails on it.
    Usage = 64,
    /// `import`, `suppress`: the input has invalid or repeated lines, or no records, and
    /// nothing was imported.
    DataError = 65,
    /// `import`, `suppress`: the input file cannot be opened.
    NoInput = 66,
    /// The database stayed unreachable (at start or mid-run) longer than `DB_CONNECT_RETRY_S`,
    /// or refused the login; an operator command is told at once what waiting cannot heal.
    DatabaseUnavailable = 75,
    /// The role in `DATABASE_URL` lacks a grant docs/roles.sql gives it (sysexits' NOPERM);
    /// the line names the table and the grant.
    NoPermission = 77,
    /// Bad configuration; one line on stderr names the variable.
    Config = 78,
}

impl Exit {
    /// Every code, for the manifests' check that each is handled.
    pub const ALL: [Exit; 11] = [
        Exit::Done,
        Exit::Incomplete,
        Exit::TooManyFailures,
        Exit::Paused,
        Exit::AccountRefused,
        Exit::Usage,
        Exit::DataError,
        Exit::NoInput,
        Exit::DatabaseUnavailable,
        Exit::NoPermission,
        Exit::Config,
    ];

    /// The process's exit status.
    pub const fn code(self) -> u8 {
        self as u8
    }
}

/// As its number (the run report's `exit_code`).
impl Serialize for Exit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.code())
    }
}

/// The signal that asked this process to stop (0: none yet), noted by `main`.
static SIGNALLED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Notes the signal (2 SIGINT, 15 SIGTERM) that asked the process to stop.
pub fn note_signal(signal: u8) {
    SIGNALLED.store(signal, std::sync::atomic::Ordering::SeqCst);
}

/// A command that gives up its work when asked to stop (`import`): 128 + the signal, as a
/// shell reports it — 130 for SIGINT (Ctrl-C), 143 for SIGTERM; 130 when none was noted. (Not
/// an [`Exit`]: the code is the signal's.)
pub fn interrupted() -> u8 {
    128 + match SIGNALLED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => 2,
        s => s,
    }
}

/// How the worker was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `run`: a Job's pod, which ends.
    Run,
    /// `serve`: a Deployment's pod, which runs until it is told to stop.
    Serve,
}

/// The exit code of a run that stopped for `reason` with the campaign at `campaign`.
///
/// "A person must look" wins over everything: this pod found failures over the budget (2). A
/// `serve` pod otherwise exits 0 — it stops only when told to, and a Deployment restarts it
/// anyway. A `run` then says: failures over the budget (2, also when another pod crossed it),
/// paused (3), the provider refused the account (4), interrupted with time left (1), or it did
/// all it may (0: done, or its time or quota ran out — the report's `reason` and counts say
/// which).
pub fn code(
    reason: StopReason,
    mode: Mode,
    campaign: &CampaignCounts,
    failure_budget: i64,
) -> Exit {
    if reason == StopReason::TooManyFailures {
        return Exit::TooManyFailures;
    }
    match mode {
        Mode::Serve => Exit::Done,
        Mode::Run if campaign.failed > failure_budget => Exit::TooManyFailures,
        Mode::Run => match reason {
            StopReason::Done
            | StopReason::Deadline
            | StopReason::WindowClosed
            | StopReason::QuotaExhausted => Exit::Done,
            StopReason::Paused => Exit::Paused,
            StopReason::AccountRefused => Exit::AccountRefused,
            StopReason::Signal | StopReason::TooManyFailures => Exit::Incomplete,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exit_is_its_number_in_the_process_status_and_the_report() {
        let numbers: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(numbers, [0, 1, 2, 3, 4, 64, 65, 66, 75, 77, 78]);
        assert_eq!(serde_json::json!(Exit::Config), 78);
    }

    #[test]
    fn an_interrupted_command_exits_128_plus_its_signal_as_a_shell_reports_it() {
        assert_eq!(interrupted(), 130, "none noted: as for Ctrl-C");
        note_signal(15);
        assert_eq!(interrupted(), 143);
        note_signal(2);
        assert_eq!(interrupted(), 130);
    }

    fn counts(failed: i64) -> CampaignCounts {
        CampaignCounts {
            total: 1000,
            sent: 1000 - failed,
            failed,
            ..Default::default()
        }
    }

    #[test]
    fn a_run_over_its_failure_budget_exits_2_whatever_stopped_it() {
        let over = counts(11);
        for reason in [
            StopReason::Done,
            StopReason::Deadline,
            StopReason::WindowClosed,
            StopReason::Signal,
            StopReason::Paused,
            StopReason::TooManyFailures,
            StopReason::AccountRefused,
            StopReason::QuotaExhausted,
        ] {
            assert_eq!(
                code(reason, Mode::Run, &over, 10),
                Exit::TooManyFailures,
                "{reason:?}"
            );
        }
    }

    #[test]
    fn a_run_within_its_budget_says_done_for_now_paused_or_interrupted() {
        let ok = counts(10);
        assert_eq!(code(StopReason::Done, Mode::Run, &ok, 10), Exit::Done);
        assert_eq!(code(StopReason::Paused, Mode::Run, &ok, 10), Exit::Paused);
        // Out of time is not a failure, nor worth a retry now: done for now.
        assert_eq!(code(StopReason::Deadline, Mode::Run, &ok, 10), Exit::Done);
        assert_eq!(
            code(StopReason::WindowClosed, Mode::Run, &ok, 10),
            Exit::Done
        );
        assert_eq!(
            code(StopReason::QuotaExhausted, Mode::Run, &ok, 10),
            Exit::Done
        );
        // The account refused: a person must fix the key or the URL, not a retry.
        assert_eq!(
            code(StopReason::AccountRefused, Mode::Run, &ok, 10),
            Exit::AccountRefused
        );
        assert_eq!(
            code(StopReason::Signal, Mode::Run, &ok, 10),
            Exit::Incomplete
        );
        assert_eq!(
            code(StopReason::TooManyFailures, Mode::Run, &ok, 10),
            Exit::TooManyFailures
        );
    }

    #[test]
    fn a_serve_pod_exits_0_unless_it_crossed_the_budget_itself() {
        for failed in [0, 11] {
            for reason in [
                StopReason::Signal,
                StopReason::Done,
                StopReason::Paused,
                StopReason::WindowClosed,
                StopReason::AccountRefused,
            ] {
                assert_eq!(code(reason, Mode::Serve, &counts(failed), 10), Exit::Done);
            }
        }
        assert_eq!(
            code(StopReason::TooManyFailures, Mode::Serve, &counts(11), 10),
            Exit::TooManyFailures
        );
    }
}
