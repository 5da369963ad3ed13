//! A fleet of pods on one fake clock (governor's `FakeRelativeClock`): each rounds every `sync`
//! ms (staggered), applies the plan as the coordinator does (lower before commit, raise after),
//! and sends greedily whenever its limiter allows. Joins, leaves, crashes and pods cut off from
//! the database are checked against the limit in every one-second window; campaigns of
//! different weights, and pods that cannot spend their share, against their shares.

use std::collections::HashMap;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use uuid::Uuid;

use super::demand::Demand;
use super::plan::tests::{limit_row, report, t, TTL};
use super::plan::{plan_round, LimitRow, PodRow, Report};

type Limiter = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;

struct SimPod {
    id: Uuid,
    campaign: &'static str,
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
    /// The most it can start per second (its concurrency, a slow provider), if bounded.
    capacity_per_s: Option<f64>,
    /// Starts it may still make under its capacity (refilled every ms, 10 ms of it at most).
    credit: f64,
    /// Requests started (its pacer's tokens) and what it measures of them.
    spent: u64,
    demand: Demand,
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
    /// `configure --weight` per campaign (1 unless set).
    weights: HashMap<&'static str, f64>,
}

impl Fleet {
    fn new(sync: i64) -> Self {
        Self {
            clock: FakeRelativeClock::default(),
            pods: Vec::new(),
            limit: limit_row(),
            sync,
            sends: Vec::new(),
            weights: HashMap::new(),
        }
    }

    fn join(&mut self, now: i64, campaign: &'static str) -> usize {
        self.pods.push(SimPod {
            id: Uuid::new_v4(),
            campaign,
            capacity_per_s: None,
            credit: 0.0,
            spent: 0,
            demand: Demand::default(),
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
        let at = Duration::from_millis(now as u64);
        let weight = self
            .weights
            .get(self.pods[i].campaign)
            .copied()
            .unwrap_or(1.0);
        let p = &mut self.pods[i];
        let r = Report {
            campaign: p.campaign.to_string(),
            demand: p.demand.demand(at, p.spent),
            ..report(weight)
        };
        let p = &self.pods[i];
        let plan = plan_round(t(now), p.row.as_ref(), p.id, &r, &others, &self.limit, 0);
        if plan.me.share_per_s < p.rate {
            self.set_rate(i, plan.me.share_per_s);
        }
        self.limit = plan.limit.clone();
        let p = &mut self.pods[i];
        p.row = Some(plan.me.clone());
        p.valid_until = now + TTL.as_millis() as i64;
        p.demand.record(at, p.spent, plan.me.share_per_s);
        self.set_rate(i, plan.me.share_per_s);
    }

    /// Runs from `from` to `to` ms; `events` are applied at their time.
    fn run(&mut self, from: i64, to: i64, events: &mut Vec<(i64, Event)>) {
        for now in from..to {
            events.sort_by_key(|e| e.0);
            while events.first().is_some_and(|e| e.0 <= now) {
                let (_, ev) = events.remove(0);
                match ev {
                    Event::Join(c) => {
                        self.join(now, c);
                    }
                    Event::Weight(c, w) => {
                        self.weights.insert(c, w);
                    }
                    Event::Capacity(i, c) => self.pods[i].capacity_per_s = c,
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
                let p = &mut self.pods[i];
                if let Some(c) = p.capacity_per_s {
                    p.credit = (p.credit + c / 1000.0).min((c / 100.0).max(1.0));
                }
                if let Some(l) = &p.limiter {
                    // (1e-9: ten additions of 0.1 make a little less than 1.)
                    while p.capacity_per_s.is_none_or(|_| p.credit >= 1.0 - 1e-9)
                        && l.check().is_ok()
                    {
                        p.credit -= 1.0;
                        p.spent += 1;
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

    /// Requests/s the pods of `campaign` sent between `from` and `to` ms.
    fn rate_of(&self, campaign: &str, from: i64, to: i64) -> f64 {
        let n = self
            .sends
            .iter()
            .filter(|(t, i)| (from..to).contains(t) && self.pods[*i].campaign == campaign)
            .count();
        n as f64 / ((to - from) as f64 / 1000.0)
    }
}

#[derive(Debug, Clone, Copy)]
enum Event {
    /// A pod of this campaign joins.
    Join(&'static str),
    /// `configure --weight` on this campaign.
    Weight(&'static str, f64),
    /// The pod can start at most this many requests a second from now (`None`: unbounded).
    Capacity(usize, Option<f64>),
    Leave(usize),
    Kill(usize),
    CutOff(usize),
}

/// The campaigns of the simulations.
const A: &str = "a";
const B: &str = "b";

/// The sum of the bursts the pods may add (10 ms worth of each share, at least 1 each).
fn burst_allowance(pods: usize) -> usize {
    super::pacer::burst(500.0) as usize + pods
}

#[test]
fn joins_leaves_crashes_and_cut_offs_never_push_any_one_second_window_over_the_limit() {
    let mut f = Fleet::new(250);
    let mut events = vec![
        (0, Event::Join(A)),
        (0, Event::Join(A)),
        (5_000, Event::Join(A)),
        (5_000, Event::Join(A)),
        (8_000, Event::Join(A)), // 5 pods
        (12_000, Event::Leave(1)),
        (15_000, Event::Kill(2)),
        (19_000, Event::CutOff(3)),
        (24_000, Event::Join(A)),
        (24_100, Event::Join(A)),
        (24_200, Event::Join(A)),
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

/// B's part of what both campaigns sent between `from` and `to` ms.
fn b_part(f: &Fleet, from: i64, to: i64) -> f64 {
    let (a, b) = (f.rate_of(A, from, to), f.rate_of(B, from, to));
    b / (a + b)
}

#[test]
fn two_campaigns_share_by_weight_whatever_their_pod_counts_as_pods_join_leave_and_die() {
    // Campaign A at weight 1 and B at weight 3 under one 500/s key, with 1 to 16 pods each.
    for (na, nb) in [(4, 1), (1, 1), (1, 16), (16, 1), (16, 16), (3, 8)] {
        let mut f = Fleet::new(250);
        f.weights.insert(B, 3.0);
        let mut events: Vec<(i64, Event)> = (0..na).map(|_| (0, Event::Join(A))).collect();
        events.extend((0..nb).map(|_| (0, Event::Join(B))));
        let (first_a, first_b) = (0, na);
        events.extend([
            // A pod of each dies (its share stays committed until TTL + handover), another of
            // each joins; then B's weight is changed live; then B's pods all leave.
            (5_000, Event::Kill(first_a)),
            (5_000, Event::Kill(first_b)),
            (5_500, Event::Join(A)),
            (5_500, Event::Join(B)),
            (12_000, Event::Weight(B, 1.0)),
        ]);
        let b_pods: Vec<usize> = (first_b + 1..first_b + nb).chain([na + nb + 1]).collect();
        events.extend(b_pods.iter().map(|&i| (16_000, Event::Leave(i))));
        f.run(0, 20_000, &mut events);
        let case = format!("{na} A pods, {nb} B pods");
        let worst = f.worst_window(0, 20_000);
        assert!(
            worst <= 500 + burst_allowance(na + nb + 2),
            "{case}: {worst} in 1 s"
        );
        for (from, to, part) in [
            (2_000, 5_000, 0.75),
            (9_500, 12_000, 0.75),
            (13_000, 16_000, 0.5),
        ] {
            let b = b_part(&f, from, to);
            assert!(
                (b - part).abs() <= 0.05,
                "{case}: B sent {b:.3} of it in {from}..{to} ms"
            );
            let total = f.sent_between(from, to) as f64 / ((to - from) as f64 / 1000.0);
            assert!(total >= 475.0, "{case}: {total:.0}/s in {from}..{to} ms");
        }
        // B's capacity is taken by A within a round and the handover of B's leaving.
        let alone = f.rate_of(A, 16_600, 20_000);
        assert!(alone >= 475.0, "{case}: A alone {alone:.0}/s");
        assert_eq!(f.rate_of(B, 16_300, 20_000), 0.0, "{case}");
    }
}

#[test]
fn a_campaign_whose_pods_cannot_spend_its_share_leaves_the_rest_to_the_others() {
    // B (weight 3) on one pod that can start only 100/s; A on two pods takes the rest.
    let mut f = Fleet::new(250);
    f.weights.insert(B, 3.0);
    let mut events = vec![
        (0, Event::Join(A)),
        (0, Event::Join(A)),
        (0, Event::Join(B)),
        (0, Event::Capacity(2, Some(100.0))),
        (10_000, Event::Capacity(2, None)),
    ];
    f.run(0, 16_000, &mut events);
    let worst = f.worst_window(0, 16_000);
    assert!(worst <= 500 + burst_allowance(3), "{worst} in 1 s");
    // Settled within 5 s (its first measures, taken while it was starting, are low: probed).
    let (a, b) = (f.rate_of(A, 5_000, 10_000), f.rate_of(B, 5_000, 10_000));
    assert!(b >= 95.0, "B {b:.0}/s of its 100/s");
    assert!(a + b >= 475.0, "A {a:.0}/s + B {b:.0}/s");
    // Its capacity back, B takes its weighted share again within 2 s.
    let b = b_part(&f, 12_000, 16_000);
    assert!((b - 0.75).abs() <= 0.05, "B {b:.3} once it can spend it");
}
