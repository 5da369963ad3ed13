//! Riding out a database that does not answer, for a bounded time.
//!
//! One rule for the start (`store::connect`) and mid-run (`Worker::retrying`), with the same limit
//! (`DB_CONNECT_RETRY_S`): tries 200 ms apart, doubling, at most 5 s apart, and the last wait cut
//! so that the last try is made at the limit. A PostgreSQL restart or failover shorter than the
//! limit is ridden out; a longer one hands the caller the last error (exit 75).
//!
//! Pure: the caller passes the time, so the rule is unit-tested without a clock or a database.

use std::time::Duration;

use tokio::time::Instant;

/// The wait after the first failed try.
pub const FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest wait between two tries.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

/// One outage being ridden out.
#[derive(Debug, Clone)]
pub struct Outage {
    give_up: Instant,
    wait: Duration,
}

impl Outage {
    /// An outage that began at `now`, to be ridden out for `limit`.
    pub fn new(now: Instant, limit: Duration) -> Self {
        Self {
            give_up: now + limit,
            wait: FIRST_WAIT,
        }
    }

    /// What is left of the limit at `now`.
    pub fn left(&self, now: Instant) -> Duration {
        self.give_up.saturating_duration_since(now)
    }

    /// A try failed at `now`: how long to wait before the next one, or `None` when the limit is
    /// reached and the caller should give up.
    pub fn next_wait(&mut self, now: Instant) -> Option<Duration> {
        let left = self.left(now);
        if left.is_zero() {
            return None;
        }
        let wait = self.wait.min(left);
        self.wait = (self.wait * 2).min(MAX_WAIT);
        Some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// The waits of an outage that never ends, each try failing the moment it is made.
    fn waits(limit: Duration) -> Vec<Duration> {
        let mut now = Instant::now();
        let mut o = Outage::new(now, limit);
        let mut out = Vec::new();
        while let Some(w) = o.next_wait(now) {
            out.push(w);
            now += w;
            assert!(out.len() < 100, "never gives up: {out:?}");
        }
        out
    }

    #[test]
    fn waits_double_from_200_ms_up_to_5_s() {
        assert_eq!(
            waits(Duration::from_secs(30)),
            [200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000, 3800].map(|ms| ms * MS)
        );
    }

    #[test]
    fn the_last_try_is_made_at_the_limit_not_one_wait_before_it() {
        // Without the cut, a 2-s limit gave up at 1.4 s (the next 1.6-s wait would pass it) and a
        // 30-s one at 26.2 s: a database restart of 28 s failed a run the limit says survives it.
        for limit_ms in [1u64, 200, 2000, 2001, 30_000] {
            let limit = Duration::from_millis(limit_ms);
            let total: Duration = waits(limit).iter().sum();
            assert_eq!(total, limit, "limit {limit:?}");
        }
        assert_eq!(
            waits(Duration::from_secs(2)),
            [200, 400, 800, 600].map(|ms| ms * MS)
        );
    }

    #[test]
    fn no_limit_means_no_retry_and_time_past_the_limit_gives_up() {
        assert_eq!(waits(Duration::ZERO), []);
        let now = Instant::now();
        let mut o = Outage::new(now, Duration::from_secs(1));
        assert_eq!(o.left(now + Duration::from_millis(400)), 600 * MS);
        assert_eq!(o.next_wait(now + Duration::from_secs(1)), None);
        assert_eq!(o.left(now + Duration::from_secs(2)), Duration::ZERO);
    }
}
