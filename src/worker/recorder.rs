//! One place that counts: every event of the pipeline updates the run report's counters
//! ([`WorkerStats`]) and the Prometheus metrics ([`crate::metrics`]) together, so the two can
//! never disagree about what a pod did.

use std::sync::Mutex;
use std::time::Duration;

use crate::metrics as m;
use crate::outcome::{Attempt, ErrorClass, Resolution};
use crate::report::WorkerStats;
use crate::store::targets::Finished;

#[derive(Default)]
pub(crate) struct Recorder {
    stats: Mutex<WorkerStats>,
}

impl Recorder {
    pub(crate) fn snapshot(&self) -> WorkerStats {
        self.stats.lock().expect("stats lock").clone()
    }

    fn with(&self, f: impl FnOnce(&mut WorkerStats)) {
        f(&mut self.stats.lock().expect("stats lock"));
    }

    /// A batch of `rows` was claimed, `reclaimed` of them from a holder whose lease expired.
    pub(crate) fn claimed(&self, rows: usize, reclaimed: usize) {
        self.with(|s| {
            s.batches += 1;
            s.claimed += rows as u64;
        });
        m::claimed(rows, reclaimed);
    }

    /// Rows moved out of the work set unsent: `suppressed` (their address is on the
    /// suppression list) and `unconfirmed` (past their idempotency window).
    pub(crate) fn diverted(&self, suppressed: usize, unconfirmed: usize) {
        self.with(|s| {
            s.suppressed += suppressed as u64;
            s.unconfirmed += unconfirmed as u64;
        });
        m::diverted(suppressed, unconfirmed);
    }

    /// The gate waited this long for a pacer token.
    pub(crate) fn pacer_wait(&self, waited: Duration) {
        self.with(|s| s.pacer_wait_ms += waited.as_millis() as u64);
        m::pacer_wait(waited);
    }

    /// One HTTP attempt ended (answered, timed out or never connected) after `took`.
    pub(crate) fn request(&self, took: Duration, attempt: &Attempt) {
        let throttled = matches!(
            attempt,
            Attempt::Retry {
                class: ErrorClass::Throttled,
                ..
            }
        );
        self.with(|s| {
            s.requests += 1;
            s.throttled_429 += throttled as u64;
        });
        m::request(took);
        if throttled {
            m::throttled();
        }
        if matches!(attempt, Attempt::Undelivered { .. }) {
            m::unreachable();
        }
    }

    /// A row's outcome reached the flusher (to be written).
    pub(crate) fn settled(&self, res: &Resolution) {
        self.with(|s| s.count(res));
        m::settled(res.outcome());
        if matches!(
            res,
            Resolution::Released {
                class: ErrorClass::Released
            }
        ) {
            m::released(1);
        }
    }

    /// `n` rows turned out to be someone else's (re-claimed after our lease lapsed): their
    /// results are not ours to write.
    pub(crate) fn taken_over(&self, n: u64) {
        if n == 0 {
            return;
        }
        self.with(|s| s.stale_writes += n);
        m::stale_writes(n);
    }

    /// A fenced write of `asked` results came back.
    pub(crate) fn finished(&self, asked: usize, f: Finished) {
        self.taken_over(asked as u64 - f.written);
        m::sent_after_optout(f.sent_after_optout);
    }

    /// A fenced write was given up (its rows return after their lease).
    pub(crate) fn finish_failed(&self, rows: usize) {
        self.with(|s| s.finish_errors += 1);
        m::result_writes_failed(rows as u64);
    }

    /// The heartbeat extended `n` leases.
    pub(crate) fn leases_renewed(&self, n: u64) {
        self.with(|s| s.leases_renewed += n);
        m::leases_renewed(n);
    }
}
