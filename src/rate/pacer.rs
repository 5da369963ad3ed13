//! Local pacing: the rate this process may start provider requests at, enforced with
//! `governor`, and changed at run time as the fleet-wide share ([`crate::rate`]) moves.
//!
//! Three facts about governor shape this module:
//! - `Quota::per_second(n)` allows a burst of `n` (up to 2n in one second). The quota here
//!   allows 10 ms worth of burst (at least 1): enough to absorb the timer's lateness, at most
//!   `rate / 100` extra in any one-second window.
//! - A live limiter's quota cannot be changed. A new share builds a new limiter, and its burst
//!   is spent at once, so the first request under the new rate comes one interval after the
//!   change, as if the last send had just happened ("carry the last send time over", rounded
//!   towards caution). A change therefore never adds a burst.
//! - A limiter only spaces requests. Whether this process may send *at all* is the share's
//!   validity: a grant carries a `valid_until`, and past it no token is handed out until the
//!   coordinator renews it. A process cut off from the database stops itself before the others
//!   take its capacity over (see the handover rule in [`crate::rate`]).
//!
//! Every HTTP attempt, retries included, takes one token through [`Pacer::acquire`].

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Below this a share is "nothing": no limiter, no sends.
pub const MIN_RATE_PER_S: f64 = 0.01;

/// The quota for `rate` requests per second, with a burst of 10 ms worth of tokens (at least
/// 2). `None` for a rate too small to send at.
///
/// Strict spacing (burst 1) loses throughput: every wait overshoots by the timer's granularity
/// (~1 ms), and with no burst that lateness is never made up (125/s became ~122/s; 8 pods at
/// 62.5/s each held 99.3 % of their limit with a burst of 1, 100 % with 2). Ten milliseconds of
/// burst, and at least 2 tokens, absorb the lateness while adding at most `max(rate/100, 2)`
/// to any one-second window.
pub fn quota(rate: f64) -> Option<Quota> {
    if rate.is_nan() || rate < MIN_RATE_PER_S || !rate.is_finite() {
        return None;
    }
    let burst = burst(rate);
    let period = Duration::from_secs_f64(1.0 / rate);
    Some(Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst).expect("at least 1")))
}

/// The burst [`quota`] allows at `rate`.
pub fn burst(rate: f64) -> u32 {
    ((rate / 100.0).ceil() as u32).max(2)
}

/// A limiter for `rate` on `clock` whose burst is already spent: the first token comes one
/// interval from now. `None` below [`MIN_RATE_PER_S`].
pub fn limiter_with_clock<C: Clock>(
    rate: f64,
    clock: C,
) -> Option<RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>> {
    let q = quota(rate)?;
    let l = RateLimiter::direct_with_clock(q, clock);
    let b = NonZeroU32::new(burst(rate)).expect("at least 1");
    let _ = l.check_n(b);
    Some(l)
}

#[derive(Clone)]
struct State {
    rate: f64,
    limiter: Option<Arc<DefaultDirectRateLimiter>>,
    /// No token after this (the share lapsed without a renewal).
    valid_until: Option<Instant>,
    /// No token before this (the provider said 429 with Retry-After, here or fleet-wide).
    paused_until: Option<Instant>,
    /// With a daily quota: the tokens granted to this process so far (cumulative); no token
    /// once as many were handed out ([`crate::rate::quota`]).
    quota_granted: Option<u64>,
}

/// The process's pacer. Cheap to clone; every clone paces the same requests.
#[derive(Clone)]
pub struct Pacer {
    tx: Arc<watch::Sender<State>>,
    /// Tokens handed out so far: the requests this process started (the quota's spending).
    spent: Arc<AtomicU64>,
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

impl Pacer {
    /// A pacer with no share yet: nothing is sent until the first [`Pacer::grant`].
    pub fn new() -> Self {
        let (tx, _) = watch::channel(State {
            rate: 0.0,
            limiter: None,
            valid_until: None,
            paused_until: None,
            quota_granted: None,
        });
        Self {
            tx: Arc::new(tx),
            spent: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Tokens handed out so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::SeqCst)
    }

    /// The daily quota's grant to this process, cumulative (`None`: no quota). Tokens stop once
    /// [`Pacer::spent`] reaches it.
    pub fn set_quota(&self, granted: Option<u64>) {
        self.tx.send_if_modified(|s| {
            let changed = s.quota_granted != granted;
            s.quota_granted = granted;
            changed
        });
    }

    /// Counts one token against the quota's grant; false if the grant is spent.
    fn spend(&self, granted: Option<u64>) -> bool {
        self.spent
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                granted.is_none_or(|g| n < g).then_some(n + 1)
            })
            .is_ok()
    }

    /// The rate currently granted (0 when none).
    pub fn rate(&self) -> f64 {
        self.tx.borrow().rate
    }

    /// A receiver that sees every later change (a grant, a renewal, a pause): for whoever sizes
    /// work by [`Pacer::rate`].
    pub fn changes(&self) -> watch::Receiver<impl Sized> {
        self.tx.subscribe()
    }

    /// Paces at `rate` until `valid_until`. A different rate builds a new limiter (burst
    /// spent); the same rate only moves the validity (the coordinator renews every round, and a
    /// new limiter each time would push a slow pod's next token out by a full interval).
    pub fn grant(&self, rate: f64, valid_until: Instant) {
        self.tx.send_modify(|s| {
            // Exact: shares move in steps of at least MIN_CHANGE_PER_S and come back from the
            // database bit for bit, so the same share compares equal.
            if s.rate != rate {
                s.rate = rate;
                s.limiter = limiter_with_clock(rate, governor::clock::DefaultClock::default())
                    .map(Arc::new);
            }
            s.valid_until = Some(valid_until);
        });
    }

    /// Lowers the rate at once (keeping the grant's validity); a higher `rate` is ignored:
    /// raising waits for the round's commit, lowering must not.
    pub fn lower_to(&self, rate: f64) {
        self.tx.send_if_modified(|s| {
            if rate >= s.rate - 1e-9 {
                return false;
            }
            s.rate = rate;
            s.limiter =
                limiter_with_clock(rate, governor::clock::DefaultClock::default()).map(Arc::new);
            true
        });
    }

    /// Stops handing out tokens at once (a leave, or the share lapsed).
    pub fn revoke(&self) {
        self.tx.send_modify(|s| {
            s.rate = 0.0;
            s.limiter = None;
            s.valid_until = None;
        });
    }

    /// The end of the pause in force (a 429 here or fleet-wide, an unreachable provider), if one
    /// is.
    pub fn paused_until(&self) -> Option<Instant> {
        self.tx
            .borrow()
            .paused_until
            .filter(|p| *p > Instant::now())
    }

    /// No token before `until` (extends, never shortens, a pause).
    pub fn pause_until(&self, until: Instant) {
        self.tx.send_if_modified(|s| {
            if s.paused_until.is_some_and(|p| p >= until) {
                return false;
            }
            s.paused_until = Some(until);
            true
        });
    }

    /// Waits for a token; returns how long it waited, or `None` if `stop` fired first.
    pub async fn acquire(&self, stop: &CancellationToken) -> Option<Duration> {
        let started = Instant::now();
        let mut rx = self.tx.subscribe();
        loop {
            let s = rx.borrow_and_update().clone();
            let now = Instant::now();
            // The sender lives as long as any Pacer clone, so `changed` only reports changes.
            if let Some(p) = s.paused_until.filter(|p| *p > now) {
                tokio::select! {
                    _ = stop.cancelled() => return None,
                    _ = rx.changed() => {}
                    _ = tokio::time::sleep_until(p) => {}
                }
                continue;
            }
            let quota_left = s.quota_granted.is_none_or(|g| self.spent() < g);
            let limiter = match (&s.limiter, s.valid_until) {
                (Some(l), Some(v)) if v > now && quota_left => l.clone(),
                _ => {
                    tokio::select! {
                        _ = stop.cancelled() => return None,
                        _ = rx.changed() => {}
                    }
                    continue;
                }
            };
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = rx.changed() => continue,
                _ = limiter.until_ready() => {}
            }
            // A token from a limiter that was just replaced, a pause that just began, or a
            // grant that lapsed while waiting does not count: look again.
            if rx.has_changed().unwrap_or(false)
                || s.valid_until.is_none_or(|v| Instant::now() >= v)
                || !self.spend(s.quota_granted)
            {
                continue;
            }
            return Some(started.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    /// A greedy sender offered a token every millisecond for `ms` of fake time; the rate
    /// changes at the given times (a new limiter each time, as [`Pacer::grant`] does).
    fn admitted(changes: &[(u64, f64)], ms: u64) -> Vec<(u64, f64)> {
        let clock = FakeRelativeClock::default();
        let mut limiter = None;
        let mut rate = 0.0;
        let mut at = Vec::new();
        let mut changes = changes.iter().peekable();
        for t in 0..ms {
            while let Some((_, r)) = changes.next_if(|(when, _)| *when <= t) {
                rate = *r;
                limiter = limiter_with_clock(rate, clock.clone());
            }
            if let Some(l) = &limiter {
                while l.check().is_ok() {
                    at.push((t, rate));
                }
            }
            clock.advance(Duration::from_millis(1));
        }
        at
    }

    fn worst_window(at: &[(u64, f64)]) -> usize {
        let mut worst = 0;
        for (i, (t, _)) in at.iter().enumerate() {
            worst = worst.max(at[i..].iter().take_while(|(u, _)| *u < t + 1000).count());
        }
        worst
    }

    #[test]
    fn the_pacer_never_lets_a_one_second_window_exceed_rate_plus_ten_ms_of_burst() {
        for rate in [1.0, 7.0, 62.5, 125.0, 500.0, 2000.0] {
            let at = admitted(&[(0, rate)], 5000);
            let b = burst(rate) as usize;
            let worst = worst_window(&at);
            assert!(
                worst <= rate as usize + b,
                "rate {rate}: {worst} in one second"
            );
            // And it does give the rate: a greedy sender gets rate × 5 s (the burst is spent at
            // the start, so at most the burst is lost).
            let total = at.len() as f64;
            assert!(
                total >= rate * 5.0 - b as f64 && total <= rate * 5.0 + b as f64,
                "rate {rate}: {total} in 5 s"
            );
        }
    }

    #[test]
    fn a_share_change_never_adds_a_burst_or_exceeds_the_larger_rate_in_a_window() {
        // 500/s, down to 125/s at 2 s, up to 250/s at 3.5 s, down to 0 at 5 s, 400/s at 6 s.
        let changes = [
            (0, 500.0),
            (2000, 125.0),
            (3500, 250.0),
            (5000, 0.0),
            (6000, 400.0),
        ];
        let at = admitted(&changes, 8000);
        for (i, (t, _)) in at.iter().enumerate() {
            let window: Vec<_> = at[i..].iter().take_while(|(u, _)| *u < t + 1000).collect();
            // The largest rate in force during the window, plus its burst.
            let max_rate = window.iter().map(|(_, r)| *r).fold(0.0, f64::max);
            assert!(
                window.len() as f64 <= max_rate + burst(max_rate) as f64,
                "window at {t} ms: {} sends, max rate {max_rate}",
                window.len()
            );
        }
        // Nothing while the share is 0.
        assert!(!at.iter().any(|(t, _)| (5000..6000).contains(t)));
    }

    #[tokio::test]
    async fn no_token_without_a_valid_grant_or_during_a_pause() {
        let p = Pacer::new();
        let stop = CancellationToken::new();
        let short = Duration::from_millis(200);
        // No grant: nothing.
        let r = tokio::time::timeout(short, p.acquire(&stop)).await;
        assert!(r.is_err(), "a token without a grant");
        // A grant that has already lapsed: nothing either.
        p.grant(100.0, Instant::now());
        let r = tokio::time::timeout(short, p.acquire(&stop)).await;
        assert!(r.is_err(), "a token from a lapsed grant");
        // A valid grant, paused: the first token comes after the pause.
        let t0 = Instant::now();
        p.pause_until(t0 + Duration::from_millis(300));
        p.grant(100.0, t0 + Duration::from_secs(60));
        let waited = p.acquire(&stop).await.expect("a token");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "token during the pause after {waited:?}"
        );
        // Revoked: nothing again; stop ends the wait.
        p.revoke();
        stop.cancel();
        assert_eq!(p.acquire(&stop).await, None);
    }

    #[test]
    fn the_quota_starts_at_the_minimum_rate_and_bursts_ten_ms_of_it_but_at_least_two() {
        assert!(quota(MIN_RATE_PER_S).is_some());
        for r in [MIN_RATE_PER_S / 2.0, 0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(quota(r).is_none(), "{r}");
        }
        for (rate, b) in [
            (1.0, 2),
            (62.5, 2),
            (100.0, 2),
            (250.0, 3),
            (500.0, 5),
            (2000.0, 20),
        ] {
            assert_eq!(burst(rate), b, "{rate}");
        }
    }

    #[tokio::test]
    async fn no_token_beyond_the_daily_quota_grant_until_it_is_topped_up() {
        let p = Pacer::new();
        let stop = CancellationToken::new();
        p.grant(10_000.0, Instant::now() + Duration::from_secs(60));
        p.set_quota(Some(5));
        assert_eq!(tokens(&p, Duration::from_millis(300)).await, 5);
        assert_eq!(p.spent(), 5);
        // Topped up by 3 (cumulative 8): three more, then nothing.
        p.set_quota(Some(8));
        assert_eq!(tokens(&p, Duration::from_millis(300)).await, 3);
        // No quota: the rate alone.
        p.set_quota(None);
        assert!(tokens(&p, Duration::from_millis(100)).await > 10);
        stop.cancel();
    }

    /// The count itself refuses past the grant, whatever an acquirer saw before its token
    /// (many acquirers wait at once; two may both have seen one token left).
    #[test]
    fn the_quota_count_never_passes_the_grant() {
        let p = Pacer::new();
        assert!(p.spend(Some(2)));
        assert!(p.spend(Some(2)));
        assert!(!p.spend(Some(2)), "a third token out of a grant of two");
        assert_eq!(p.spent(), 2);
        assert!(p.spend(None), "no quota: no limit on the count");
    }

    #[tokio::test]
    async fn a_sender_stopped_by_a_spent_grant_resumes_when_the_grant_grows() {
        let p = Pacer::new();
        p.grant(1000.0, Instant::now() + Duration::from_secs(60));
        p.set_quota(Some(2));
        assert_eq!(tokens(&p, Duration::from_millis(100)).await, 2);
        // Blocked on the spent grant; a larger one must wake it, not the next rate change.
        let waiting = {
            let p = p.clone();
            tokio::spawn(async move { p.acquire(&CancellationToken::new()).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "a token past the grant");
        p.set_quota(Some(3));
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert!(matches!(got, Ok(Ok(Some(_)))), "still waiting: {got:?}");
        assert_eq!(p.spent(), 3);
    }

    #[tokio::test]
    async fn a_sender_held_by_a_spent_grant_does_not_burn_the_rate_meanwhile() {
        // At 2/s (burst 2) a second of waiting refills the burst. Held by the grant, the waiter
        // must not take those tokens and throw them away: once the grant grows, both are there.
        let p = Pacer::new();
        p.grant(2.0, Instant::now() + Duration::from_secs(60));
        p.set_quota(Some(2));
        // A new limiter starts empty: the two tokens take a second.
        assert_eq!(tokens(&p, Duration::from_millis(1300)).await, 2);
        let waiting = {
            let p = p.clone();
            tokio::spawn(async move { p.acquire(&CancellationToken::new()).await })
        };
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let t0 = Instant::now();
        p.set_quota(Some(4));
        assert!(waiting.await.unwrap().is_some());
        assert!(p.acquire(&CancellationToken::new()).await.is_some());
        // Burned, the second token would come ~500 ms after the first.
        assert!(
            t0.elapsed() < Duration::from_millis(400),
            "{:?}",
            t0.elapsed()
        );
    }

    /// How many tokens `p` hands out within `within` (real time: governor keeps its own clock).
    async fn tokens(p: &Pacer, within: Duration) -> usize {
        let stop = CancellationToken::new();
        let mut n = 0;
        let _ = tokio::time::timeout(within, async {
            while p.acquire(&stop).await.is_some() {
                n += 1;
            }
        })
        .await;
        n
    }

    #[tokio::test]
    async fn a_new_rate_takes_effect_at_once_and_a_revoke_stops_every_token() {
        let p = Pacer::new();
        let far = Instant::now() + Duration::from_secs(60);
        p.grant(2.0, far);
        assert_eq!(p.rate(), 2.0);
        p.grant(1000.0, far);
        assert_eq!(p.rate(), 1000.0);
        // At 1000/s, 300 ms give ~300 tokens; at 2/s they would give none.
        let n = tokens(&p, Duration::from_millis(300)).await;
        assert!(n >= 50, "{n} tokens at 1000/s");
        p.revoke();
        assert_eq!(p.rate(), 0.0);
        assert_eq!(tokens(&p, Duration::from_millis(200)).await, 0);
    }

    #[tokio::test]
    async fn renewing_a_grant_at_the_same_rate_keeps_its_pace() {
        // 20/s: a token every 50 ms. Renewed every 10 ms (far more often than any round), it
        // still gives its tokens; a fresh limiter per renewal would give none (each starts with
        // its burst spent, 50 ms from the renewal).
        let p = Pacer::new();
        p.grant(20.0, Instant::now() + Duration::from_secs(60));
        let renew = {
            let p = p.clone();
            tokio::spawn(async move {
                for _ in 0..60 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    p.grant(20.0, Instant::now() + Duration::from_secs(60));
                }
            })
        };
        let n = tokens(&p, Duration::from_millis(500)).await;
        renew.abort();
        assert!(n >= 4, "{n} tokens in 500 ms at 20/s while renewed");
    }

    #[tokio::test]
    async fn lowering_is_immediate_and_never_raises() {
        let p = Pacer::new();
        let far = Instant::now() + Duration::from_secs(60);
        p.grant(1000.0, far);
        p.lower_to(2.0);
        assert_eq!(p.rate(), 2.0);
        // 2/s with the burst spent: nothing within 300 ms.
        assert_eq!(tokens(&p, Duration::from_millis(300)).await, 0);
        p.lower_to(1000.0);
        assert_eq!(p.rate(), 2.0, "lower_to raised the rate");
        // Lowering to the same rate (the coordinator does, every round of a 429 streak) keeps
        // the limiter, as a renewal does.
        p.grant(20.0, far);
        let lower = {
            let p = p.clone();
            tokio::spawn(async move {
                for _ in 0..60 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    p.lower_to(20.0);
                }
            })
        };
        let n = tokens(&p, Duration::from_millis(500)).await;
        lower.abort();
        assert!(
            n >= 4,
            "{n} tokens in 500 ms at 20/s while lowered to the same rate"
        );
    }

    #[tokio::test]
    async fn a_pause_is_extended_by_a_later_one_and_never_shortened() {
        let p = Pacer::new();
        let stop = CancellationToken::new();
        p.grant(1000.0, Instant::now() + Duration::from_secs(60));
        let t0 = Instant::now();
        p.pause_until(t0 + Duration::from_millis(100));
        p.pause_until(t0 + Duration::from_millis(300)); // extends
        p.pause_until(t0 + Duration::from_millis(50)); // does not shorten
        p.acquire(&stop).await.expect("a token after the pause");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
    }

    #[tokio::test]
    async fn no_token_is_handed_out_after_its_grant_lapsed_mid_wait() {
        // 2/s with the burst spent: the first token is 500 ms away, the grant lapses at 100 ms.
        let p = Pacer::new();
        p.grant(2.0, Instant::now() + Duration::from_millis(100));
        assert_eq!(tokens(&p, Duration::from_millis(800)).await, 0);
    }
}
