//! A fleet of pods on one fake clock (governor's `FakeRelativeClock`): each rounds every `sync`
//! ms (staggered), applies the plan as the coordinator does (lower before commit, raise after),
//! and sends greedily whenever its limiter allows. Joins, leaves, crashes and pods cut off from
//! the database are checked against the limit in every one-second window.

use std::time::Duration;

use governor::clock::FakeRelativeClock;
use uuid::Uuid;

use super::plan::tests::{limit_row, report, t, TTL};
use super::plan::{plan_round, LimitRow, PodRow};

type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;

struct SimPod {
    id: Uuid,
    row: Option<PodRow>,
    limiter: Option<Limiter>,
    rate: f64,
    /// Local expiry of the share: round start + TTL.
    valid_until: i64,
    offset_ms: i64,
    /// Rounds and sends (false once left or killed).
    running: bool,
    /// Sends fail to renew (cut off from the database) from this time on.
    cut_off_at: Option<i64>,
}

/// A fleet of pods on one fake clock: each rounds every `sync` ms (staggered), applies the
/// plan as the coordinator does (lower before commit, raise after), and sends greedily
/// whenever its governor limiter allows. Returns every admitted send (ms, pod index).
struct Fleet {
    clock: FakeRelativeClock,
    pods: Vec<SimPod>,
    limit: LimitRow,
    sync: i64,
    sends: Vec<(i64, usize)>,
}

impl Fleet {
    fn new(sync: i64) -> Self {
        Self {
            clock: FakeRelativeClock::default(),
            pods: Vec::new(),
            limit: limit_row(),
            sync,
            sends: Vec::new(),
        }
    }

    fn join(&mut self, now: i64) -> usize {
        self.pods.push(SimPod {
            id: Uuid::new_v4(),
            row: None,
            limiter: None,
            rate: 0.0,
            valid_until: 0,
            offset_ms: (now + self.pods.len() as i64 * 37) % self.sync,
            running: true,
            cut_off_at: None,
        });
        self.pods.len() - 1
    }

    fn set_rate(&mut self, i: usize, rate: f64) {
        let p = &mut self.pods[i];
        if (p.rate - rate).abs() > 1e-9 || p.limiter.is_none() {
            p.rate = rate;
            p.limiter = super::pacer::limiter_with_clock(rate, self.clock.clone());
        }
    }

    fn round(&mut self, i: usize, now: i64) {
        let others: Vec<PodRow> = self
            .pods
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, p)| p.row.clone())
            .collect();
        let p = &self.pods[i];
        let plan = plan_round(
            t(now),
            p.row.as_ref(),
            p.id,
            &report(1.0),
            &others,
            &self.limit,
            0,
        );
        if plan.me.share_per_s < p.rate {
            self.set_rate(i, plan.me.share_per_s);
        }
        self.limit = plan.limit.clone();
        let p = &mut self.pods[i];
        p.row = Some(plan.me.clone());
        p.valid_until = now + TTL.as_millis() as i64;
        self.set_rate(i, plan.me.share_per_s);
    }

    /// Runs from `from` to `to` ms; `events` are applied at their time.
    fn run(&mut self, from: i64, to: i64, events: &mut Vec<(i64, Event)>) {
        for now in from..to {
            events.sort_by_key(|e| e.0);
            while events.first().is_some_and(|e| e.0 <= now) {
                let (_, ev) = events.remove(0);
                match ev {
                    Event::Join => {
                        self.join(now);
                    }
                    Event::Leave(i) => {
                        // As Coordinator::leave: revoke, then expire the row.
                        let p = &mut self.pods[i];
                        p.running = false;
                        p.limiter = None;
                        p.rate = 0.0;
                        if let Some(r) = &mut p.row {
                            r.expires_at = r.expires_at.min(t(now));
                            r.weight = 0.0;
                        }
                    }
                    Event::Kill(i) => {
                        let p = &mut self.pods[i];
                        p.running = false;
                        p.limiter = None;
                    }
                    Event::CutOff(i) => self.pods[i].cut_off_at = Some(now),
                }
            }
            for i in 0..self.pods.len() {
                let p = &self.pods[i];
                if !p.running {
                    continue;
                }
                let cut = p.cut_off_at.is_some_and(|c| now >= c);
                if !cut && (now - p.offset_ms).rem_euclid(self.sync) == 0 {
                    self.round(i, now);
                }
                // A cut-off pod keeps sending until its local share lapses, then stops.
                let p = &self.pods[i];
                if now >= p.valid_until {
                    continue;
                }
                if let Some(l) = &p.limiter {
                    while l.check().is_ok() {
                        self.sends.push((now, i));
                    }
                }
            }
            self.clock.advance(Duration::from_millis(1));
        }
    }

    /// The most sends in any window [t, t + 1000).
    fn worst_window(&self, from: i64, to: i64) -> usize {
        let s: Vec<i64> = self
            .sends
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| (from..to).contains(t))
            .collect();
        (0..s.len())
            .map(|i| s[i..].iter().take_while(|u| **u < s[i] + 1000).count())
            .max()
            .unwrap_or(0)
    }

    fn sent_between(&self, from: i64, to: i64) -> usize {
        self.sends
            .iter()
            .filter(|(t, _)| (from..to).contains(t))
            .count()
    }
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Join,
    Leave(usize),
    Kill(usize),
    CutOff(usize),
}

/// The sum of the bursts the pods may add (10 ms worth of each share, at least 1 each).
fn burst_allowance(pods: usize) -> usize {
    super::pacer::burst(500.0) as usize + pods
}

#[test]
fn joins_leaves_crashes_and_cut_offs_never_push_any_one_second_window_over_the_limit() {
    let mut f = Fleet::new(250);
    let mut events = vec![
        (0, Event::Join),
        (0, Event::Join),
        (5_000, Event::Join),
        (5_000, Event::Join),
        (8_000, Event::Join), // 5 pods
        (12_000, Event::Leave(1)),
        (15_000, Event::Kill(2)),
        (19_000, Event::CutOff(3)),
        (24_000, Event::Join),
        (24_100, Event::Join),
        (24_200, Event::Join),
        (28_000, Event::Leave(0)),
        (28_000, Event::Leave(4)),
    ];
    f.run(0, 34_000, &mut events);
    let worst = f.worst_window(0, 34_000);
    assert!(
        worst <= 500 + burst_allowance(8),
        "{worst} sends in one second against a limit of 500"
    );
    // The rule costs little: each steady stretch delivers ≥ 95 % of the limit once it has
    // settled (3 s after each change).
    for (from, to) in [
        (2_000, 5_000),
        (10_000, 12_000),
        (23_600, 24_000),
        (31_000, 34_000),
    ] {
        let rate = f.sent_between(from, to) as f64 / ((to - from) as f64 / 1000.0);
        assert!(rate >= 475.0, "{rate:.0}/s between {from} and {to} ms");
    }
}
