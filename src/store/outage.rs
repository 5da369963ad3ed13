//! The one retry rule for a database that does not answer, used everywhere a statement is
//! retried: connecting at start ([`super::connect`]), waiting for the schema, every statement
//! of the work loop (`Worker::retrying`), the fenced result write, the lease heartbeat and the
//! pause watch. Only the limit differs: `DB_CONNECT_RETRY_S` for what the run cannot go on
//! without, one beat or one poll for what is tried again at the next one anyway.
//!
//! And how a database error may be shown in a log line or to a person ([`error_text`]).
//!
//! Tries 200 ms apart, doubling, at most 500 ms apart, and the last wait cut so that the last
//! try is made at the limit. At most half a second apart, so a fleet is back within half a
//! second of the database's return (and at its rate limit within two: docs/BENCHMARKS.md;
//! a 1-s cap with the result writer waiting out its last second made that 2.2 s), for two tries
//! a second per waiting statement — nothing to a database that is starting. A PostgreSQL
//! restart or failover shorter than the limit is ridden out; a longer one hands the caller the
//! last error (`run` exits 75 on it).
//!
//! **One bound per attempt.** A connection can also go dark: a dead NAT or proxy entry, or a
//! failover that leaves the old address silent, and the socket stays open while nothing comes
//! back. So every attempt is cut after its bound: [`FIRST_ATTEMPT`] (2 s: the claim's p99 on a
//! 13.2 M-row table is ~30 ms, a fenced write of 200 rows ~5 ms, docs/BENCHMARKS.md), doubled
//! after each attempt that was cut, so a statement that is merely slow (a cold cache, a
//! bloated table) gets 4, 8, 16 s… within the limit, and a dark one costs 2 s before the next
//! attempt opens a new connection. The connection the cut attempt held is closed, never
//! reused: the pool checks it on release (`super::connect`'s `after_release`). The server
//! keeps its own bounds on the worker's sessions (`super::connect::Session`). Two statements
//! are single attempts with a bound of their own, not retried here: a round of the rate limit
//! (bounded by the share's TTL and tried again at the next tick: `crate::rate::Coordinator`)
//! and leaving the fleet (`crate::rate::LEAVE_TIMEOUT`).
//!
//! [`Outage`] is pure (the caller passes the time), so the rule is unit-tested without a clock
//! or a database; [`retrying`] applies it to a statement.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

/// The wait after the first failed try.
pub const FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest wait between two tries.
pub const MAX_WAIT: Duration = Duration::from_millis(500);
/// How long the first attempt of a statement may take before it is cut (see the module docs).
pub const FIRST_ATTEMPT: Duration = Duration::from_secs(2);

/// One outage being ridden out.
#[derive(Debug, Clone)]
pub struct Outage {
    give_up: Instant,
    wait: Duration,
    attempt: Duration,
}

impl Outage {
    /// An outage that began at `now`, to be ridden out for `limit`.
    pub fn new(now: Instant, limit: Duration) -> Self {
        Self {
            give_up: now + limit,
            wait: FIRST_WAIT,
            attempt: FIRST_ATTEMPT,
        }
    }

    /// How long the next attempt may take at `now`: its bound, but no more than what is left
    /// of the limit, unless that is less than [`FIRST_ATTEMPT`] (every attempt gets that).
    pub fn attempt_bound(&self, now: Instant) -> Duration {
        self.attempt.min(self.left(now).max(FIRST_ATTEMPT))
    }

    /// The attempt was cut at its bound: the next one may take twice as long.
    pub fn attempt_cut(&mut self) {
        self.attempt *= 2;
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

/// Runs `op` until it succeeds or the rule gives up after `limit`; then returns its last
/// error. Each attempt is cut at its bound ([`Outage::attempt_bound`]); a cut attempt's error
/// is [`cut`]'s. Every failed try is logged as `what` with the error (as [`error_text`] words
/// it: never a user name, URL or password) and the wait before the next.
pub async fn retrying<T, F, Fut>(limit: Duration, what: &str, op: F) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    retrying_if(limit, what, |_| true, op).await
}

/// [`retrying`], but an error `retry` says no to is returned at once.
pub async fn retrying_if<T, F, Fut>(
    limit: Duration,
    what: &str,
    retry: impl Fn(&sqlx::Error) -> bool,
    mut op: F,
) -> Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut outage = Outage::new(Instant::now(), limit);
    loop {
        let bound = outage.attempt_bound(Instant::now());
        let tried = match tokio::time::timeout(bound, op()).await {
            Ok(tried) => tried,
            Err(_) => {
                outage.attempt_cut();
                Err(cut(bound))
            }
        };
        match tried {
            Ok(v) => return Ok(v),
            Err(e) if !retry(&e) => return Err(e),
            Err(e) => match outage.next_wait(Instant::now()) {
                None => return Err(e),
                Some(wait) => {
                    warn!(error = %error_text(&e), retry_in_ms = wait.as_millis() as u64, "{what} failed; retrying");
                    tokio::time::sleep(wait).await;
                }
            },
        }
    }
}

/// The error of an attempt cut at `bound`: an I/O time-out, which every caller's patience
/// waits for.
pub fn cut(bound: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!(
            "no answer within {:.1} s (the connection is closed; the next attempt opens a new one)",
            bound.as_secs_f64()
        ),
    ))
}

/// A database error as it may be logged or shown, at start and mid-run alike: a refused login
/// (SQLSTATE class 28) by its code only — the server's text names the user, the client address
/// and the database, and a Cloud SQL IAM user is an email address; anything else (I/O, TLS,
/// other server answers, whose messages name tables, columns or the database) as sqlx words it,
/// which never holds the URL or the password.
pub fn error_text(e: &sqlx::Error) -> String {
    match sqlstate(e) {
        Some(c) if c.starts_with("28") => format!("the server refused the login (SQLSTATE {c})"),
        _ => e.to_string(),
    }
}

/// The SQLSTATE of a server's answer, if the error is one.
pub fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) => d.code().map(|c| c.into_owned()),
        _ => None,
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

    /// A server's answer, as sqlx hands it over.
    #[derive(Debug)]
    struct Answer {
        code: &'static str,
        message: &'static str,
    }

    impl std::fmt::Display for Answer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.message)
        }
    }

    impl std::error::Error for Answer {}

    impl sqlx::error::DatabaseError for Answer {
        fn message(&self) -> &str {
            self.message
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.code.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn answer(code: &'static str, message: &'static str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Answer { code, message }))
    }

    #[test]
    fn a_refused_login_is_shown_by_its_code_only_never_in_the_servers_words() {
        // A Cloud SQL IAM user is an address: the server's text must not reach a log line.
        let refused = answer(
            "28P01",
            r#"password authentication failed for user "ann@example.com""#,
        );
        assert_eq!(sqlstate(&refused).as_deref(), Some("28P01"));
        assert_eq!(
            error_text(&refused),
            "the server refused the login (SQLSTATE 28P01)"
        );
        let denied = answer("42501", "permission denied for table campaign_targets");
        assert_eq!(sqlstate(&denied).as_deref(), Some("42501"));
        assert!(error_text(&denied).contains("permission denied for table"));
        let timeout = sqlx::Error::PoolTimedOut;
        assert_eq!(sqlstate(&timeout), None);
        assert_eq!(error_text(&timeout), timeout.to_string());
    }

    #[test]
    fn waits_double_from_200_ms_up_to_half_a_second() {
        let mut expected: Vec<Duration> = [200, 400].map(|ms| ms * MS).to_vec();
        expected.extend(std::iter::repeat_n(500 * MS, 58));
        expected.push(400 * MS);
        assert_eq!(waits(Duration::from_secs(30)), expected);
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
            [200, 400, 500, 500, 400].map(|ms| ms * MS)
        );
    }

    #[test]
    fn an_attempt_gets_two_seconds_then_twice_as_long_after_each_cut_within_the_limit() {
        let now = Instant::now();
        let mut o = Outage::new(now, Duration::from_secs(30));
        let mut bounds = Vec::new();
        for _ in 0..5 {
            bounds.push(o.attempt_bound(now).as_secs());
            o.attempt_cut();
        }
        assert_eq!(bounds, [2, 4, 8, 16, 30]);
        // Late in the outage: no more than what is left, but never less than the first bound.
        assert_eq!(o.attempt_bound(now + Duration::from_secs(25)), 5000 * MS);
        assert_eq!(
            o.attempt_bound(now + Duration::from_secs(29)),
            FIRST_ATTEMPT
        );
        // No limit (no retry): the one attempt still gets the first bound.
        let o = Outage::new(now, Duration::ZERO);
        assert_eq!(o.attempt_bound(now), FIRST_ATTEMPT);
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_never_answers_is_cut_and_the_next_one_is_made() {
        let mut tries = 0;
        let started = Instant::now();
        let got = retrying(Duration::from_secs(30), "a test statement", || {
            tries += 1;
            let first = tries == 1;
            async move {
                if first {
                    std::future::pending::<()>().await;
                }
                Ok::<_, sqlx::Error>(tries)
            }
        })
        .await
        .unwrap();
        assert_eq!(got, 2);
        // Cut at 2 s, then the first wait.
        assert_eq!(started.elapsed(), FIRST_ATTEMPT + FIRST_WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_database_that_never_answers_is_given_up_at_the_limit_with_the_cut() {
        let started = Instant::now();
        let got = retrying(Duration::from_secs(10), "a test statement", || async {
            std::future::pending::<Result<(), sqlx::Error>>().await
        })
        .await;
        let e = got.unwrap_err();
        assert!(e.to_string().contains("no answer within"), "{e}");
        // 2 s, wait 0.2, 4 s, wait 0.4, then 3.4 s left: cut at 3.4 s, at the limit.
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_the_caller_does_not_wait_for_is_returned_at_once() {
        let mut tries = 0;
        let started = Instant::now();
        let got = retrying_if(
            Duration::from_secs(30),
            "a test statement",
            |e| !matches!(e, sqlx::Error::RowNotFound),
            || {
                tries += 1;
                async { Err::<(), _>(sqlx::Error::RowNotFound) }
            },
        )
        .await;
        assert!(matches!(got, Err(sqlx::Error::RowNotFound)));
        assert_eq!((tries, started.elapsed()), (1, Duration::ZERO));
    }

    #[test]
    fn no_limit_means_no_retry_and_time_past_the_limit_gives_up() {
        assert_eq!(waits(Duration::ZERO), Vec::<Duration>::new());
        let now = Instant::now();
        let mut o = Outage::new(now, Duration::from_secs(1));
        assert_eq!(o.left(now + Duration::from_millis(400)), 600 * MS);
        assert_eq!(o.next_wait(now + Duration::from_secs(1)), None);
        assert_eq!(o.left(now + Duration::from_secs(2)), Duration::ZERO);
    }
}
