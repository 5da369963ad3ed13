//! The arithmetic of one round, pure: AIMD on the key's effective limit, then the pod's share
//! under the handover rule ([`super`] states the rules). The database time comes in as an
//! argument, so every rule is unit-tested (and simulated for a whole fleet, `sim.rs`) without a
//! clock or a database.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::pacer::MIN_RATE_PER_S;

/// How long a lowered rate stays committed to the pod that lowered it: the provider counts
/// requests in one-second windows.
pub const HANDOVER: Duration = Duration::from_secs(1);
/// Multiplicative decrease of the effective limit on a 429 (at most once per [`HANDOVER`]).
pub const DECREASE_FACTOR: f64 = 0.7;
/// Additive increase of the effective limit: this fraction of the limit per second, so a
/// halved limit is whole again after 10 s without 429s.
pub const INCREASE_PER_S: f64 = 0.05;
/// The effective limit never falls below this fraction of the limit.
pub const MIN_FRACTION: f64 = 0.05;
/// A share change smaller than this (requests/s) is not worth a new limiter.
pub const MIN_CHANGE_PER_S: f64 = 0.5;
/// A 429 without a usable `Retry-After` pauses the fleet this long.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

fn delta(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

/// One pod's row in `rate_pods`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PodRow {
    pub pod_id: Uuid,
    /// 1 with work to send, 0 idle.
    pub weight: f64,
    /// Its `MAIL_RATE_PER_S`; the fleet uses the smallest among live pods.
    pub limit_per_s: f64,
    /// The rate it may pace at now.
    pub share_per_s: f64,
    /// What was committed to it just before its last change.
    pub prev_share_per_s: f64,
    pub share_changed_at: DateTime<Utc>,
    /// It stops sending by itself before this unless it renews.
    pub expires_at: DateTime<Utc>,
}

impl PodRow {
    /// The rate this pod may still be sending at, at `now`: what every other pod must leave it.
    pub fn committed(&self, now: DateTime<Utc>) -> f64 {
        let window = delta(HANDOVER);
        if now >= self.expires_at + window {
            return 0.0;
        }
        if now < self.share_changed_at + window {
            self.share_per_s.max(self.prev_share_per_s)
        } else {
            self.share_per_s
        }
    }

    pub fn live(&self, now: DateTime<Utc>) -> bool {
        now < self.expires_at
    }
}

/// The key's row in `rate_limits`: the effective (AIMD) limit and the fleet-wide pause.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LimitRow {
    pub effective_per_s: f64,
    pub paused_until: Option<DateTime<Utc>>,
    pub last_decrease_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// What one pod reports in a round.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    pub weight: f64,
    pub limit_per_s: f64,
    /// A 429 was seen since the last round, with the longest `Retry-After` (capped).
    pub throttled: Option<Option<Duration>>,
    pub ttl: Duration,
}

/// The outcome of a round: the pod's new row and the key's new row.
#[derive(Debug, Clone)]
pub struct Plan {
    pub me: PodRow,
    pub limit: LimitRow,
    /// `min(limit_per_s)` over the live pods.
    pub fleet_limit: f64,
    pub live_pods: usize,
    /// The share changed (a new limiter, a new `share_changed_at`).
    pub changed: bool,
}

/// One round of one pod, at database time `now`: AIMD on the key's limit, then the pod's share
/// under the handover rule (see the module docs). Pure; `others` are every other pod's rows of
/// the key, live or not.
pub fn plan_round(
    now: DateTime<Utc>,
    mine: Option<&PodRow>,
    pod_id: Uuid,
    report: Report,
    others: &[PodRow],
    limit: &LimitRow,
) -> Plan {
    let live: Vec<&PodRow> = others.iter().filter(|p| p.live(now)).collect();
    let fleet_limit = live
        .iter()
        .map(|p| p.limit_per_s)
        .fold(report.limit_per_s, f64::min)
        .max(0.0);

    // AIMD on the key's effective limit.
    let mut l = limit.clone();
    let mut effective = l.effective_per_s.min(fleet_limit);
    // Additive increase for the time since the last update or the end of a pause (none before).
    let since = l.paused_until.map_or(l.updated_at, |p| p.max(l.updated_at));
    let grown = fleet_limit * INCREASE_PER_S * secs(now - since).max(0.0);
    effective = (effective + grown).min(fleet_limit);
    if let Some(retry_after) = report.throttled {
        let until = now + delta(retry_after.unwrap_or(DEFAULT_PAUSE));
        l.paused_until = Some(l.paused_until.map_or(until, |p| p.max(until)));
        if l.last_decrease_at
            .is_none_or(|t| now - t >= delta(HANDOVER))
        {
            effective = (effective * DECREASE_FACTOR).max(fleet_limit * MIN_FRACTION);
            l.last_decrease_at = Some(now);
        }
    }
    l.effective_per_s = effective;
    l.updated_at = now;

    // This pod's share.
    let total_weight: f64 = live.iter().map(|p| p.weight).sum::<f64>() + report.weight;
    // (total_weight ≥ report.weight > 0: no division by zero.)
    let fair = if report.weight > 0.0 {
        effective * report.weight / total_weight
    } else {
        0.0
    };
    let free = effective - others.iter().map(|p| p.committed(now)).sum::<f64>();
    let current = mine.map_or(0.0, |m| m.share_per_s);
    let target = if fair <= current {
        fair
    } else {
        fair.min(current.max(free))
    }
    .max(0.0);
    let changed = (target - current).abs() >= MIN_CHANGE_PER_S
        || (target < MIN_RATE_PER_S && current >= MIN_RATE_PER_S);
    let mut me = mine.cloned().unwrap_or(PodRow {
        pod_id,
        weight: report.weight,
        limit_per_s: report.limit_per_s,
        share_per_s: 0.0,
        prev_share_per_s: 0.0,
        share_changed_at: now,
        expires_at: now,
    });
    if changed {
        me.prev_share_per_s = me.committed(now);
        me.share_per_s = target;
        me.share_changed_at = now;
    }
    me.weight = report.weight;
    me.limit_per_s = report.limit_per_s;
    me.expires_at = now + delta(report.ttl);
    Plan {
        me,
        limit: l,
        fleet_limit,
        live_pods: live.len() + 1,
        changed,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn t(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
    }

    pub(crate) const TTL: Duration = Duration::from_millis(3000);

    #[test]
    fn the_handover_second_and_the_share_end_at_their_instant_exactly() {
        let row = PodRow {
            pod_id: Uuid::nil(),
            weight: 1.0,
            limit_per_s: 500.0,
            share_per_s: 100.0,
            prev_share_per_s: 250.0,
            share_changed_at: t(0),
            expires_at: t(3000),
        };
        // Within the handover second the old, larger share is still committed; from its end
        // (inclusive) only the new one.
        assert_eq!(row.committed(t(999)), 250.0);
        assert_eq!(row.committed(t(1000)), 100.0);
        // Live strictly before expiry; committed until a second after it.
        assert!(row.live(t(2999)));
        assert!(!row.live(t(3000)));
        assert_eq!(row.committed(t(3999)), 100.0);
        assert_eq!(row.committed(t(4000)), 0.0);
    }

    pub(crate) fn report(weight: f64) -> Report {
        Report {
            weight,
            limit_per_s: 500.0,
            throttled: None,
            ttl: TTL,
        }
    }

    pub(crate) fn limit_row() -> LimitRow {
        LimitRow {
            effective_per_s: 500.0,
            paused_until: None,
            last_decrease_at: None,
            updated_at: t(0),
        }
    }

    #[test]
    fn shares_follow_weight_a_lone_idle_pod_holds_none_and_a_tiny_share_still_drops_to_zero() {
        let l = limit_row();
        // Alone and idle: nothing (the total weight is 0: no share from a division by it).
        let idle = plan_round(t(0), None, Uuid::new_v4(), report(0.0), &[], &l);
        assert_eq!(idle.me.share_per_s, 0.0);
        // The fair share is proportional to weight: 3 of 4 next to a pod holding nothing.
        let other = PodRow {
            pod_id: Uuid::new_v4(),
            weight: 1.0,
            limit_per_s: 500.0,
            share_per_s: 0.0,
            prev_share_per_s: 0.0,
            share_changed_at: t(-5000),
            expires_at: t(3000),
        };
        let heavy = plan_round(
            t(0),
            None,
            Uuid::new_v4(),
            report(3.0),
            std::slice::from_ref(&other),
            &l,
        );
        assert_eq!(heavy.me.share_per_s, 375.0);
        // A share smaller than MIN_CHANGE_PER_S is still given up when the pod goes idle.
        let tiny = PodRow {
            share_per_s: 0.3,
            ..other
        };
        let p = plan_round(t(0), Some(&tiny), tiny.pod_id, report(0.0), &[], &l);
        assert!(p.changed);
        assert_eq!(p.me.share_per_s, 0.0);
    }

    #[test]
    fn a_share_of_exactly_the_minimum_rate_is_a_rate_and_live_pods_count_this_one() {
        // Limit 0.01/s (MIN_RATE_PER_S), one pod at 0.3/s: its fair share is 0.01, a change of
        // 0.29 (< MIN_CHANGE_PER_S) and not a drop to nothing, so the share is left alone.
        let row = PodRow {
            pod_id: Uuid::new_v4(),
            weight: 1.0,
            limit_per_s: MIN_RATE_PER_S,
            share_per_s: 0.3,
            prev_share_per_s: 0.3,
            share_changed_at: t(-5000),
            expires_at: t(3000),
        };
        let tiny_limit = Report {
            limit_per_s: MIN_RATE_PER_S,
            ..report(1.0)
        };
        let p = plan_round(t(0), Some(&row), row.pod_id, tiny_limit, &[], &limit_row());
        assert!(!p.changed, "{p:?}");
        assert_eq!(p.me.share_per_s, 0.3);
        assert_eq!(p.live_pods, 1);
        let two = plan_round(
            t(0),
            None,
            Uuid::new_v4(),
            report(1.0),
            &[row],
            &limit_row(),
        );
        assert_eq!(two.live_pods, 2);
    }

    #[test]
    fn a_lone_pod_gets_the_whole_limit_at_once_and_an_idle_pod_holds_none() {
        let id = Uuid::new_v4();
        let p = plan_round(t(0), None, id, report(1.0), &[], &limit_row());
        assert_eq!(p.me.share_per_s, 500.0);
        let busy = p.me.clone();
        // An idle second pod gets nothing and takes nothing.
        let idle = plan_round(
            t(100),
            None,
            Uuid::new_v4(),
            report(0.0),
            std::slice::from_ref(&busy),
            &limit_row(),
        );
        assert_eq!(idle.me.share_per_s, 0.0);
        let again = plan_round(
            t(350),
            Some(&busy),
            id,
            report(1.0),
            &[idle.me],
            &limit_row(),
        );
        assert_eq!(again.me.share_per_s, 500.0);
    }

    #[test]
    fn a_joining_pod_waits_for_the_capacity_the_others_gave_up_a_second_ago() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let l = limit_row();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &l).me;
        let b0 = plan_round(t(100), None, b, report(1.0), std::slice::from_ref(&a0), &l).me;
        assert_eq!(b0.share_per_s, 0.0, "nothing free while a holds it all");
        let a1 = plan_round(
            t(250),
            Some(&a0),
            a,
            report(1.0),
            std::slice::from_ref(&b0),
            &l,
        )
        .me;
        assert_eq!(a1.share_per_s, 250.0, "a lowers to its fair share at once");
        let b1 = plan_round(
            t(1_200),
            Some(&b0),
            b,
            report(1.0),
            std::slice::from_ref(&a1),
            &l,
        )
        .me;
        assert_eq!(
            b1.share_per_s, 0.0,
            "a's old rate is committed until 1 s after its change"
        );
        let b2 = plan_round(
            t(1_251),
            Some(&b1),
            b,
            report(1.0),
            std::slice::from_ref(&a1),
            &l,
        )
        .me;
        assert_eq!(b2.share_per_s, 250.0);
    }

    #[test]
    fn a_crashed_pods_capacity_is_free_only_a_second_after_its_share_expired() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let l = limit_row();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &l).me;
        let b0 = plan_round(t(10), None, b, report(1.0), std::slice::from_ref(&a0), &l).me;
        let a1 = plan_round(
            t(250),
            Some(&a0),
            a,
            report(1.0),
            std::slice::from_ref(&b0),
            &l,
        )
        .me;
        let b1 = plan_round(
            t(1_300),
            Some(&b0),
            b,
            report(1.0),
            std::slice::from_ref(&a1),
            &l,
        )
        .me;
        assert_eq!(b1.share_per_s, 250.0);
        // a crashes after its round at 250 ms: expires at 3 250 ms, committed until 4 250 ms.
        let b2 = plan_round(
            t(4_000),
            Some(&b1),
            b,
            report(1.0),
            std::slice::from_ref(&a1),
            &l,
        )
        .me;
        assert_eq!(b2.share_per_s, 250.0, "a's share is still committed");
        let b3 = plan_round(t(4_251), Some(&b2), b, report(1.0), &[a1], &l).me;
        assert_eq!(b3.share_per_s, 500.0);
    }

    #[test]
    fn a_429_pauses_the_fleet_cuts_the_limit_once_a_second_and_it_recovers_additively() {
        let a = Uuid::new_v4();
        let mut r = report(1.0);
        r.throttled = Some(Some(Duration::from_secs(2)));
        let p = plan_round(t(1_000), None, a, r, &[], &limit_row());
        assert_eq!(p.limit.paused_until, Some(t(3_000)));
        assert!(
            (p.limit.effective_per_s - 350.0).abs() < 1e-9,
            "{:?}",
            p.limit
        );
        assert_eq!(p.me.share_per_s, 350.0);
        // A second 429 of the same storm 200 ms later extends the pause but does not cut again.
        let p2 = plan_round(t(1_200), Some(&p.me), a, r, &[], &p.limit);
        assert!((p2.limit.effective_per_s - 350.0).abs() < 1e-9);
        assert_eq!(p2.limit.paused_until, Some(t(3_200)));
        // No increase during the pause; afterwards +5 % of the limit per second.
        let p3 = plan_round(t(3_000), Some(&p2.me), a, report(1.0), &[], &p2.limit);
        assert!((p3.limit.effective_per_s - 350.0).abs() < 1e-9);
        let p4 = plan_round(t(5_200), Some(&p3.me), a, report(1.0), &[], &p3.limit);
        assert!(
            (p4.limit.effective_per_s - 400.0).abs() < 1e-6,
            "{:?}",
            p4.limit
        );
        let p5 = plan_round(t(60_000), Some(&p4.me), a, report(1.0), &[], &p4.limit);
        assert_eq!(p5.limit.effective_per_s, 500.0, "never above the limit");
    }

    #[test]
    fn the_smallest_configured_limit_of_the_live_pods_wins() {
        let a = Uuid::new_v4();
        let a0 = plan_round(t(0), None, a, report(1.0), &[], &limit_row()).me;
        let mut r = report(1.0);
        r.limit_per_s = 200.0;
        let b = plan_round(t(10), None, Uuid::new_v4(), r, &[a0], &limit_row());
        assert_eq!(b.fleet_limit, 200.0);
        assert!(b.limit.effective_per_s <= 200.0);
    }
}
