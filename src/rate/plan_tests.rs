//! The pure round's tests (a file of their own to keep `plan.rs` readable); `rate::sim` reuses
//! their helpers.

use super::*;

pub(crate) fn t(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_800_000_000_000 + ms).unwrap()
}

/// The campaign of the pods of these tests (a campaign of its own where a test says so).
pub(crate) const CAMPAIGN: &str = "c";

pub(crate) const TTL: Duration = Duration::from_millis(3000);
/// [`HANDOVER`] in milliseconds.
const H: i64 = HANDOVER.as_millis() as i64;

pub(crate) fn report(weight: f64) -> Report {
    Report {
        campaign: CAMPAIGN.to_string(),
        weight,
        demand: None,
        limit_per_s: 500.0,
        throttled: None,
        ttl: TTL,
        refused: None,
        spent: 0,
        daily_quota: None,
        vendor_quota: None,
    }
}

pub(crate) fn limit_row() -> LimitRow {
    LimitRow {
        effective_per_s: 500.0,
        updated_at: t(0),
        ..Default::default()
    }
}

fn row(share: f64, changed: i64, expires: i64) -> PodRow {
    PodRow {
        pod_id: Uuid::new_v4(),
        campaign_id: CAMPAIGN.to_string(),
        weight: 1.0,
        demand_per_s: None,
        limit_per_s: 500.0,
        share_per_s: share,
        prev_share_per_s: share,
        share_changed_at: t(changed),
        expires_at: t(expires),
        quota_granted: 0,
        quota_spent: 0,
    }
}

/// A round with no recorded quota usage.
pub(crate) fn round(
    now: i64,
    mine: Option<&PodRow>,
    id: Uuid,
    r: &Report,
    others: &[PodRow],
    l: &LimitRow,
) -> Plan {
    plan_round(t(now), mine, id, r, others, l, 0)
}

#[test]
fn the_handover_and_the_share_end_at_their_instant_exactly() {
    let r = PodRow {
        prev_share_per_s: 250.0,
        ..row(100.0, 0, 3000)
    };
    // Within the handover the old, larger share is still committed; from its end
    // (inclusive) only the new one.
    assert_eq!(r.committed(t(H - 1)), 250.0);
    assert_eq!(r.committed(t(H)), 100.0);
    // Live strictly before expiry; committed until the handover after it.
    assert!(r.live(t(2999)));
    assert!(!r.live(t(3000)));
    assert_eq!(r.committed(t(3000 + H - 1)), 100.0);
    assert_eq!(r.committed(t(3000 + H)), 0.0);
}

#[test]
fn shares_follow_weight_a_lone_idle_pod_holds_none_and_a_tiny_share_still_drops_to_zero() {
    let l = limit_row();
    // Alone and idle: nothing (the total weight is 0: no share from a division by it).
    let idle = round(0, None, Uuid::new_v4(), &report(0.0), &[], &l);
    assert_eq!(idle.me.share_per_s, 0.0);
    // The fair share is proportional to the campaigns' weights: 3 of 4 (and the pacer's
    // minimum each) next to a pod of another campaign holding nothing.
    let other = PodRow {
        campaign_id: "other".into(),
        ..row(0.0, -5000, 3000)
    };
    let heavy = round(
        0,
        None,
        Uuid::new_v4(),
        &report(3.0),
        std::slice::from_ref(&other),
        &l,
    );
    let floor = MIN_RATE_PER_S;
    assert!((heavy.me.share_per_s - (floor + (500.0 - 2.0 * floor) * 0.75)).abs() < 1e-9);
    // A share smaller than MIN_CHANGE_PER_S is still given up when the pod goes idle.
    let tiny = PodRow {
        share_per_s: 0.3,
        ..other
    };
    let p = round(0, Some(&tiny), tiny.pod_id, &report(0.0), &[], &l);
    assert!(p.changed);
    assert_eq!(p.me.share_per_s, 0.0);
}

#[test]
fn a_share_of_exactly_the_minimum_rate_is_a_rate_and_live_pods_count_this_one() {
    // Limit 0.01/s (MIN_RATE_PER_S), one pod at 0.3/s: its fair share is 0.01, a change of
    // 0.29 (< MIN_CHANGE_PER_S) and not a drop to nothing, so the share is left alone.
    let mine = PodRow {
        limit_per_s: MIN_RATE_PER_S,
        ..row(0.3, -5000, 3000)
    };
    let tiny_limit = Report {
        limit_per_s: MIN_RATE_PER_S,
        ..report(1.0)
    };
    let p = round(0, Some(&mine), mine.pod_id, &tiny_limit, &[], &limit_row());
    assert!(!p.changed, "{p:?}");
    assert_eq!(p.me.share_per_s, 0.3);
    assert_eq!(p.live_pods, 1);
    let two = round(0, None, Uuid::new_v4(), &report(1.0), &[mine], &limit_row());
    assert_eq!(two.live_pods, 2);
}

#[test]
fn a_lone_pod_gets_the_whole_limit_at_once_and_an_idle_pod_holds_none() {
    let id = Uuid::new_v4();
    let p = round(0, None, id, &report(1.0), &[], &limit_row());
    assert_eq!(p.me.share_per_s, 500.0);
    let busy = p.me.clone();
    // An idle second pod gets nothing and takes nothing.
    let idle = round(
        100,
        None,
        Uuid::new_v4(),
        &report(0.0),
        std::slice::from_ref(&busy),
        &limit_row(),
    );
    assert_eq!(idle.me.share_per_s, 0.0);
    let again = round(350, Some(&busy), id, &report(1.0), &[idle.me], &limit_row());
    assert_eq!(again.me.share_per_s, 500.0);
}

#[test]
fn a_joining_pod_gets_the_capacity_the_others_gave_up_once_the_handover_is_over() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let l = limit_row();
    let a0 = round(0, None, a, &report(1.0), &[], &l).me;
    let b0 = round(100, None, b, &report(1.0), std::slice::from_ref(&a0), &l).me;
    assert_eq!(b0.share_per_s, 0.0, "nothing free while a holds it all");
    let a1 = round(
        250,
        Some(&a0),
        a,
        &report(1.0),
        std::slice::from_ref(&b0),
        &l,
    )
    .me;
    assert_eq!(a1.share_per_s, 250.0, "a lowers to its fair share at once");
    let b1 = round(
        250 + H - 1,
        Some(&b0),
        b,
        &report(1.0),
        std::slice::from_ref(&a1),
        &l,
    )
    .me;
    assert_eq!(
        b1.share_per_s, 0.0,
        "a's old rate is committed for the handover"
    );
    let b2 = round(
        250 + H,
        Some(&b1),
        b,
        &report(1.0),
        std::slice::from_ref(&a1),
        &l,
    )
    .me;
    assert_eq!(b2.share_per_s, 250.0);
}

#[test]
fn a_pod_renewing_an_unchanged_share_does_not_restart_its_handover() {
    // a lowered at 250 ms; its rounds every 100 ms after that renew the same share. The old
    // rate stops being committed one handover after the change, not after the last round.
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let l = limit_row();
    let a0 = round(0, None, a, &report(1.0), &[], &l).me;
    let b0 = round(100, None, b, &report(1.0), std::slice::from_ref(&a0), &l).me;
    let mut a_now = round(
        250,
        Some(&a0),
        a,
        &report(1.0),
        std::slice::from_ref(&b0),
        &l,
    )
    .me;
    assert_eq!(a_now.share_per_s, 250.0);
    for at in (350..=250 + 3 * H).step_by(100) {
        a_now = round(
            at,
            Some(&a_now),
            a,
            &report(1.0),
            std::slice::from_ref(&b0),
            &l,
        )
        .me;
    }
    assert_eq!(
        a_now.share_changed_at,
        t(250),
        "an unchanged share is not a change"
    );
    assert_eq!(a_now.committed(t(250 + H)), 250.0);
}

#[test]
fn a_crashed_pods_capacity_is_free_only_after_its_share_expired_and_the_handover() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let l = limit_row();
    let a0 = round(0, None, a, &report(1.0), &[], &l).me;
    let b0 = round(10, None, b, &report(1.0), std::slice::from_ref(&a0), &l).me;
    let a1 = round(
        250,
        Some(&a0),
        a,
        &report(1.0),
        std::slice::from_ref(&b0),
        &l,
    )
    .me;
    let b1 = round(
        1_300,
        Some(&b0),
        b,
        &report(1.0),
        std::slice::from_ref(&a1),
        &l,
    )
    .me;
    assert_eq!(b1.share_per_s, 250.0);
    // a crashes after its round at 250 ms: expires at 3 250 ms.
    let b2 = round(
        3_250 + H - 1,
        Some(&b1),
        b,
        &report(1.0),
        std::slice::from_ref(&a1),
        &l,
    )
    .me;
    assert_eq!(b2.share_per_s, 250.0, "a's share is still committed");
    let b3 = round(3_250 + H, Some(&b2), b, &report(1.0), &[a1], &l).me;
    assert_eq!(b3.share_per_s, 500.0);
}

/// After a database outage every pod's row has expired; the first pod back takes what is
/// free. A pod back later must not keep its old share as if it were still its own: that
/// capacity was given away meanwhile (the 429 after a PostgreSQL restart).
#[test]
fn an_expired_share_of_our_own_is_not_ours_after_an_outage() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let l = limit_row();
    let a_old = PodRow {
        pod_id: a,
        ..row(250.0, -10_000, 0)
    };
    let b_old = PodRow {
        pod_id: b,
        ..row(250.0, -10_000, 0)
    };
    // 8 s later a is back first: b's row is long expired, so a may take the whole limit.
    let a1 = round(
        8_000,
        Some(&a_old),
        a,
        &report(1.0),
        std::slice::from_ref(&b_old),
        &l,
    )
    .me;
    assert_eq!(a1.share_per_s, 500.0);
    // b is back 100 ms later: nothing is free, and its old 250 is not its own any more.
    let b1 = round(
        8_100,
        Some(&b_old),
        b,
        &report(1.0),
        std::slice::from_ref(&a1),
        &l,
    );
    assert_eq!(b1.me.share_per_s, 0.0, "{b1:?}");
    assert!(b1.changed);
}

#[test]
fn a_429_pauses_the_fleet_cuts_the_limit_once_a_second_and_it_recovers_additively() {
    let a = Uuid::new_v4();
    let mut r = report(1.0);
    r.throttled = Some(Some(Duration::from_secs(2)));
    let p = round(1_000, None, a, &r, &[], &limit_row());
    assert_eq!(p.limit.paused_until, Some(t(3_000)));
    assert!(
        (p.limit.effective_per_s - 350.0).abs() < 1e-9,
        "{:?}",
        p.limit
    );
    assert_eq!(p.me.share_per_s, 350.0);
    // A second 429 of the same storm 200 ms later extends the pause but does not cut again.
    let p2 = round(1_200, Some(&p.me), a, &r, &[], &p.limit);
    assert!((p2.limit.effective_per_s - 350.0).abs() < 1e-9);
    assert_eq!(p2.limit.paused_until, Some(t(3_200)));
    // No increase during the pause; afterwards +5 % of the limit per second.
    let p3 = round(3_000, Some(&p2.me), a, &report(1.0), &[], &p2.limit);
    assert!((p3.limit.effective_per_s - 350.0).abs() < 1e-9);
    let p4 = round(5_200, Some(&p3.me), a, &report(1.0), &[], &p3.limit);
    assert!(
        (p4.limit.effective_per_s - 400.0).abs() < 1e-6,
        "{:?}",
        p4.limit
    );
    let p5 = round(60_000, Some(&p4.me), a, &report(1.0), &[], &p4.limit);
    assert_eq!(p5.limit.effective_per_s, 500.0, "never above the limit");
}

#[test]
fn the_smallest_configured_limit_of_the_live_pods_wins() {
    let a0 = round(0, None, Uuid::new_v4(), &report(1.0), &[], &limit_row()).me;
    let mut r = report(1.0);
    r.limit_per_s = 200.0;
    let b = round(10, None, Uuid::new_v4(), &r, &[a0], &limit_row());
    assert_eq!(b.fleet_limit, 200.0);
    assert!(b.limit.effective_per_s <= 200.0);
}

/// `campaign-sender limit --rate`: in force for the key whatever the pods are configured
/// with, lower or higher, at the next round; an AIMD cut in progress keeps its proportion.
#[test]
fn a_live_limit_overrides_the_pods_and_takes_effect_in_one_round_both_ways() {
    let a = Uuid::new_v4();
    let p0 = round(0, None, a, &report(1.0), &[], &limit_row());
    assert_eq!(p0.me.share_per_s, 500.0);
    let lowered = LimitRow {
        override_per_s: Some(100.0),
        ..p0.limit.clone()
    };
    let p1 = round(250, Some(&p0.me), a, &report(1.0), &[], &lowered);
    assert_eq!((p1.fleet_limit, p1.me.share_per_s), (100.0, 100.0));
    let raised = LimitRow {
        override_per_s: Some(800.0),
        ..p1.limit.clone()
    };
    let p2 = round(500, Some(&p1.me), a, &report(1.0), &[], &raised);
    assert_eq!((p2.fleet_limit, p2.me.share_per_s), (800.0, 800.0));
    // Cleared: back to the pods' own MAIL_RATE_PER_S.
    let cleared = LimitRow {
        override_per_s: None,
        ..p2.limit.clone()
    };
    let p3 = round(750, Some(&p2.me), a, &report(1.0), &[], &cleared);
    assert_eq!((p3.fleet_limit, p3.me.share_per_s), (500.0, 500.0));
    // During a 429 recovery (effective 350 of 500), a new limit of 1000 gives 700.
    let cut = LimitRow {
        effective_per_s: 350.0,
        override_per_s: Some(1_000.0),
        ..p3.limit.clone()
    };
    let p4 = round(750, Some(&p3.me), a, &report(1.0), &[], &cut);
    assert!(
        (p4.limit.effective_per_s - 700.0).abs() < 1e-6,
        "{:?}",
        p4.limit
    );
}

/// The first refusal is recorded for the key (and only the first: its time, status and
/// campaign stay); from then on no pod of the key has a share until it is lifted.
#[test]
fn a_refusal_takes_every_share_of_the_key_until_it_is_lifted() {
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    let a0 = round(0, None, a, &report(1.0), &[], &limit_row());
    let mut r = report(1.0);
    r.refused = Some(Refused {
        status: 401,
        kind: Refusal::Account,
        campaign: "spring-sale".into(),
    });
    let a1 = round(100, Some(&a0.me), a, &r, &[], &a0.limit);
    assert_eq!(a1.me.share_per_s, 0.0);
    assert_eq!(a1.limit.refused_at, Some(t(100)));
    assert_eq!(a1.limit.refused_status, Some(401));
    assert_eq!(a1.limit.refused_kind.as_deref(), Some("account"));
    assert_eq!(a1.limit.refused_campaign.as_deref(), Some("spring-sale"));
    // Another pod of the key gets nothing; a later refusal does not overwrite the first.
    let mut r2 = r.clone();
    r2.refused.as_mut().unwrap().status = 404;
    let b1 = round(200, None, b, &r2, std::slice::from_ref(&a1.me), &a1.limit);
    assert_eq!(b1.me.share_per_s, 0.0);
    assert_eq!(b1.limit.refused_status, Some(401));
    // Lifted (`resume`): the whole limit again.
    let lifted = LimitRow {
        refused_at: None,
        refused_status: None,
        refused_kind: None,
        refused_campaign: None,
        ..b1.limit.clone()
    };
    let a2 = round(400, Some(&a1.me), a, &report(1.0), &[], &lifted);
    assert_eq!(a2.me.share_per_s, 500.0);
}

/// The pod's spending since its last round is what the round adds to the usage, and its grant
/// is topped up out of what the quota has left after every pod's unspent grant.
#[test]
fn a_round_records_the_spending_and_grants_out_of_what_the_quota_has_left() {
    let a = Uuid::new_v4();
    let mut r = report(1.0);
    r.daily_quota = Some(1_000);
    let p0 = plan_round(t(0), None, a, &r, &[], &limit_row(), 0);
    assert_eq!(p0.me.quota_granted, 500, "a second of its 500/s share");
    assert_eq!(p0.limit.daily_quota, Some(1_000));
    r.spent = 300;
    let other = PodRow {
        quota_granted: 250,
        quota_spent: 50,
        ..row(0.0, -5000, 3000)
    };
    // 200 recorded before this round, 300 new, 200 unspent by the other pod, 200 by this one:
    // 100 left; this pod's share is now 250/s (the other is live), so 50 tops it up.
    let p1 = plan_round(t(250), Some(&p0.me), a, &r, &[other], &p0.limit, 200);
    assert_eq!(p1.used_add, 300);
    assert_eq!(p1.me.quota_spent, 300);
    let q = p1.quota.unwrap();
    assert_eq!((p1.me.quota_granted, q.used, q.full), (550, 950, false));
    // Only what was started since the last round is new usage.
    r.spent = 400;
    let p2 = plan_round(t(500), Some(&p1.me), a, &r, &[], &p1.limit, 500);
    assert_eq!((p2.used_add, p2.me.quota_spent), (100, 400));
}

#[test]
fn a_vendors_quota_holds_the_key_until_the_latest_moment_any_pod_was_told() {
    let id = Uuid::new_v4();
    let told = |ms: u64| Report {
        vendor_quota: Some(Duration::from_millis(ms)),
        ..report(1.0)
    };
    let p = round(0, None, id, &told(60_000), &[], &limit_row());
    assert_eq!(p.limit.vendor_quota_until, Some(t(60_000)));
    assert!(p.vendor_quota_full);
    // A shorter wait told later keeps the longer one; a longer one extends it.
    let p = round(5_000, None, id, &told(10_000), &[], &p.limit);
    assert_eq!(p.limit.vendor_quota_until, Some(t(60_000)));
    let p = round(5_000, None, id, &told(100_000), &[], &p.limit);
    assert_eq!(p.limit.vendor_quota_until, Some(t(105_000)));
    // Rounds that hear nothing keep it, full until that instant and not from it on.
    let before = round(104_999, None, id, &report(1.0), &[], &p.limit);
    assert!(before.vendor_quota_full);
    assert_eq!(before.limit.vendor_quota_until, Some(t(105_000)));
    let at = round(105_000, None, id, &report(1.0), &[], &p.limit);
    assert!(!at.vendor_quota_full);
    assert!(!round(0, None, id, &report(1.0), &[], &limit_row()).vendor_quota_full);
}
