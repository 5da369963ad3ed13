//! What a pod can use of its share, measured by the pod itself, pure: the requests it started
//! against what its shares allowed over the last second or so of rounds. A pod that spent
//! clearly less than it was allowed (its `SEND_CONCURRENCY`, a slow provider or database) reports
//! a demand, and [`super::shares`] caps its campaign there so the others can use the rest.
//!
//! # The rule
//! - **Measured over a window**, [`WINDOW`] (at least two rounds), so a share of a few requests
//!   a second is not judged by a round that held none.
//! - **Held** when it used less than [`HELD_BELOW`] of what it was allowed, by more than
//!   [`SLACK`] requests, under a share that stayed within [`STEADY_WITHIN`] over the window (a
//!   pod whose share was just raised is still claiming into it): its demand is then what it
//!   used times [`HEADROOM`].
//! - **Probed** when, held, it used at least [`RELEASED_AT`] of what its capped share allowed:
//!   it could use more, so its demand doubles (a first estimate taken while the pod was still
//!   starting is low); a demand over [`RELEASE_OVER`] times what it was allowed binds nothing
//!   and is dropped — the pod is released. The two thresholds keep a held pod held while its capacity stays the
//!   same (it uses `1 / HEADROOM` of its cap, below the probe line).
//! - A pause (a 429, a quota) lowers the use of every pod alike: every campaign is capped, and
//!   [`super::shares`] then divides what is left by weight, so nobody loses a share by it.

use std::collections::VecDeque;
use std::time::Duration;

/// How far back the use is measured.
pub const WINDOW: Duration = Duration::from_secs(1);
/// A pod that used less than this fraction of what it was allowed is held to what it used.
pub const HELD_BELOW: f64 = 0.7;
/// A pod is held only when its share stayed within this fraction over the window.
pub const STEADY_WITHIN: f64 = 0.1;
/// A held pod that used at least this fraction of its capped share is released.
pub const RELEASED_AT: f64 = 0.95;
/// A held pod's demand above this many times what it was allowed is dropped: it binds nothing.
pub const RELEASE_OVER: f64 = 4.0;
/// What a held pod may use by its next round: this factor of what it used.
pub const HEADROOM: f64 = 1.2;
/// Fewer unused requests than this over the window never hold a pod (a few requests a second
/// are counted in whole requests).
pub const SLACK: f64 = 2.0;

/// One committed round as the pod saw it.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Since the pod started.
    at: Duration,
    /// Requests started so far (the pacer's tokens).
    spent: u64,
    /// The share in force from this round to the next.
    share_per_s: f64,
}

/// One pod's use of its shares, round after round.
#[derive(Debug, Default)]
pub struct Demand {
    samples: VecDeque<Sample>,
    /// The demand it reports while held.
    held: Option<f64>,
}

impl Demand {
    /// Records a committed round: at `at` (since the pod started), `spent` requests started so
    /// far, and the share granted from now on.
    pub fn record(&mut self, at: Duration, spent: u64, share_per_s: f64) {
        self.samples.push_back(Sample {
            at,
            spent,
            share_per_s,
        });
        // Keep one sample at or before the window's start.
        while self.samples.len() > 2 && at.saturating_sub(self.samples[1].at) >= WINDOW {
            self.samples.pop_front();
        }
    }

    /// What this pod can use, requests/s, if it spent clearly less than it was allowed over
    /// the window (`None`: as much as it is given), as of `now` with `spent` started so far.
    pub fn demand(&mut self, now: Duration, spent: u64) -> Option<f64> {
        let first = *self.samples.front()?;
        let span = now.saturating_sub(first.at);
        if self.samples.len() < 2 || span < WINDOW {
            return self.held;
        }
        let allowed = self.allowed(now);
        let used = spent.saturating_sub(first.spent) as f64;
        let secs = span.as_secs_f64();
        self.held = match self.held {
            // It spent what it was allowed: probe higher; released once that binds nothing.
            Some(cap) if used >= RELEASED_AT * allowed => {
                Some(cap * 2.0).filter(|c| *c <= RELEASE_OVER * allowed / secs)
            }
            Some(_) => Some(used / secs * HEADROOM),
            None if self.steady() && used < HELD_BELOW * allowed && allowed - used > SLACK => {
                Some(used / secs * HEADROOM)
            }
            None => None,
        };
        self.held
    }

    /// Its share stayed within [`STEADY_WITHIN`] over the window: a pod whose share was just
    /// raised is still claiming into it, which is not a pod that cannot spend it.
    fn steady(&self) -> bool {
        let shares = self.samples.iter().map(|s| s.share_per_s);
        let (lo, hi) = shares.fold((f64::MAX, 0.0_f64), |(lo, hi), x| (lo.min(x), hi.max(x)));
        lo >= (1.0 - STEADY_WITHIN) * hi
    }

    /// The requests the shares in force allowed between the oldest sample and `now`.
    fn allowed(&self, now: Duration) -> f64 {
        let ends = self.samples.iter().skip(1).map(|s| s.at).chain([now]);
        self.samples
            .iter()
            .zip(ends)
            .map(|(s, end)| s.share_per_s * end.saturating_sub(s.at).as_secs_f64())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A pod's rounds: every 250 ms, with its requests started so far.
    #[derive(Default)]
    struct Pod {
        d: Demand,
        at_ms: u64,
        spent: f64,
    }

    impl Pod {
        /// Rounds for `secs` seconds at `share`, spending `used_per_s`; the last demand.
        fn run(&mut self, secs: u64, share: f64, used_per_s: f64) -> Option<f64> {
            let mut last = None;
            for _ in 0..(secs * 4) {
                last = self.d.demand(ms(self.at_ms), self.spent as u64);
                self.d.record(ms(self.at_ms), self.spent as u64, share);
                self.at_ms += 250;
                self.spent += used_per_s / 4.0;
            }
            last
        }
    }

    #[test]
    fn a_pod_that_spends_its_share_has_no_demand() {
        assert_eq!(Pod::default().run(3, 100.0, 100.0), None);
        // Nor with its integer counts at a few requests a second.
        assert_eq!(Pod::default().run(3, 2.0, 1.0), None);
    }

    #[test]
    fn a_pod_that_cannot_spend_its_share_is_held_near_what_it_used_until_it_can_again() {
        let mut p = Pod::default();
        let held = p.run(3, 375.0, 100.0).expect("held");
        assert!((held - 120.0).abs() < 3.0, "{held}");
        // Held at its cap, it uses 1/HEADROOM of it: it stays held.
        let kept = p.run(3, held, 100.0).expect("still held");
        assert!((kept - 120.0).abs() < 3.0, "{kept}");
        // Its capacity comes back: it spends the whole cap and is released.
        assert_eq!(p.run(2, kept, kept), None);
    }

    #[test]
    fn a_pod_still_claiming_into_a_raised_share_is_not_held() {
        let mut p = Pod::default();
        assert_eq!(p.run(2, 31.0, 31.0), None);
        // Raised fourfold, it spends the new share only from the next rounds on.
        assert_eq!(p.run(1, 125.0, 40.0), None);
    }

    #[test]
    fn no_demand_before_a_whole_window_is_measured() {
        let mut d = Demand::default();
        d.record(ms(0), 0, 500.0);
        assert_eq!(d.demand(ms(500), 0), None);
        d.record(ms(500), 0, 500.0);
        assert_eq!(d.demand(ms(900), 0), None);
        assert!(d.demand(ms(1000), 0).is_some());
    }

    #[test]
    fn what_was_allowed_follows_each_rounds_share() {
        let mut d = Demand::default();
        d.record(ms(0), 0, 100.0);
        d.record(ms(500), 50, 300.0);
        // 0.5 s at 100/s and 0.5 s at 300/s: 200 allowed; 150 used is not "clearly less".
        assert_eq!(d.demand(ms(1000), 150), None);
        assert!((d.allowed(ms(1000)) - 200.0).abs() < 1e-9);
    }
}
