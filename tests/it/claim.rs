//! Claiming and fencing: who may take a row, and who may write its result.

use std::collections::HashSet;
use std::time::Duration;

use campaign_sender::outcome::Resolution;
use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

const LEASE: Duration = Duration::from_secs(60);

async fn expire_leases(pool: &PgPool) {
    // Stands in for time passing beyond LEASE_S (the crash case), deterministically.
    sqlx::query("UPDATE campaign_targets SET lease_until = now() - interval '1 second' WHERE state = 'sending'")
        .execute(pool)
        .await
        .unwrap();
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn two_workers_claiming_at_once_get_disjoint_rows(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1000).await;
    let (a, b) = (store(&pool), store(&pool));
    let mut all = HashSet::new();
    for _ in 0..3 {
        let (x, y) = tokio::join!(a.claim(150, LEASE), b.claim(150, LEASE));
        for row in x.unwrap().rows.into_iter().chain(y.unwrap().rows) {
            assert!(
                all.insert(row.member_id),
                "member {} claimed twice",
                row.member_id
            );
        }
    }
    assert_eq!(all.len(), 900);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_claim_is_not_made_to_wait_by_rows_another_worker_holds_locked(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    // Another worker's claim statement, caught mid-flight: it holds row locks on 1..=100.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT member_id FROM campaign_targets WHERE member_id <= 100 ORDER BY member_id FOR UPDATE")
        .execute(&mut *holder)
        .await
        .unwrap();

    let claimed = tokio::time::timeout(Duration::from_secs(3), store(&pool).claim(200, LEASE))
        .await
        .expect("claim waited for another worker's locks instead of skipping them")
        .unwrap();
    let ids: Vec<i64> = claimed.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(ids.len(), 200);
    assert!(
        ids.iter().all(|&id| id > 100),
        "claimed a row locked by someone else"
    );
    holder.rollback().await.unwrap();
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_opted_out_member_is_never_claimed_sent_or_counted_as_remaining(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20).await;
    sqlx::query("UPDATE campaign_targets SET opted_out_at = now() WHERE member_id IN (3, 7)")
        .execute(&pool)
        .await
        .unwrap();
    let s = store(&pool);
    assert_eq!(s.remaining().await.unwrap().total(), 18);
    let batch = s.claim(200, LEASE).await.unwrap();
    let ids: HashSet<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(ids.len(), 18);
    assert!(!ids.contains(&3) && !ids.contains(&7));
    s.finish(
        batch.claim_id,
        &written(
            &batch
                .rows
                .iter()
                .map(|r| {
                    (
                        r.member_id,
                        Resolution::Released {
                            class: campaign_sender::outcome::ErrorClass::Released,
                        },
                    )
                })
                .collect::<Vec<_>>(),
        ),
    )
    .await
    .unwrap();

    let p = provider(FakeConfig::default()).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code.code(), 0);
    assert_eq!(report.campaign.opted_out, 2);
    let delivered: HashSet<i64> = p.fake.deliveries().iter().map(|d| d.member_id).collect();
    assert_eq!(delivered.len(), 18);
    assert!(!delivered.contains(&3) && !delivered.contains(&7));
    assert_eq!(state_of(&pool, 3).await.0, "pending");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_crashed_claim_is_retaken_only_after_its_lease_expires(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let s = store(&pool);
    let crashed = s.claim(200, LEASE).await.unwrap();
    assert_eq!(crashed.rows.len(), 50);
    // The worker "dies" here: no finish. Its lease still runs.
    assert!(
        s.claim(200, LEASE).await.unwrap().rows.is_empty(),
        "leased rows were taken early"
    );
    let rem = s.remaining().await.unwrap();
    assert_eq!((rem.leased, rem.total()), (50, 50));

    expire_leases(&pool).await;
    let retaken = s.claim(200, LEASE).await.unwrap();
    assert_eq!(retaken.rows.len(), 50);
    assert!(retaken.rows.iter().all(|r| r.attempt == 2));
    assert_ne!(retaken.claim_id, crashed.claim_id);
}

/// A claim whose answer was lost (its connection went dark after the commit) is retried under
/// the same id: the retry gets the committed rows back, counted once, instead of leaving them
/// leased to nobody until the lease runs out; another claim still cannot take them.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_claim_retried_after_its_answer_was_lost_gets_its_own_rows_back(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let s = store(&pool);
    let id = uuid::Uuid::new_v4();
    let lost = s.claim_as(id, 20, LEASE).await.unwrap();
    assert_eq!(lost.rows.len(), 20);
    let retried = s.claim_as(id, 20, LEASE).await.unwrap();
    let ids = |b: &campaign_sender::store::Batch| -> Vec<i64> {
        b.rows.iter().map(|r| r.member_id).collect()
    };
    assert_eq!(
        ids(&retried),
        ids(&lost),
        "the retry did not get its rows back"
    );
    assert!(
        retried.rows.iter().all(|r| r.attempt == 1),
        "an attempt counted twice"
    );
    assert_eq!(retried.reclaimed, 0);
    let other = s.claim(50, LEASE).await.unwrap();
    assert_eq!(
        other.rows.len(),
        30,
        "another claim took rows held under a live lease"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_stale_worker_cannot_overwrite_a_row_after_it_was_reclaimed(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    let s = store(&pool);
    let slow = s.claim(200, LEASE).await.unwrap();
    expire_leases(&pool).await;
    let fresh = s.claim(200, LEASE).await.unwrap();
    assert_eq!(fresh.rows.len(), 10);

    // The slow worker wakes up and reports failures: the fence must refuse every row.
    let late: Vec<_> = slow
        .rows
        .iter()
        .map(|r| {
            (
                r.member_id,
                Resolution::Failed {
                    status: Some(422),
                    class: campaign_sender::outcome::ErrorClass::Rejected,
                },
            )
        })
        .collect();
    assert_eq!(
        s.finish(slow.claim_id, &written(&late))
            .await
            .unwrap()
            .written,
        0,
        "stale results were written"
    );
    assert_eq!(states(&pool).await.get("sending"), Some(&10));

    let ok: Vec<_> = fresh
        .rows
        .iter()
        .map(|r| {
            (
                r.member_id,
                Resolution::Sent {
                    status: 200,
                    message_id: None,
                },
            )
        })
        .collect();
    assert_eq!(
        s.finish(fresh.claim_id, &written(&ok))
            .await
            .unwrap()
            .written,
        10
    );
    assert_eq!(states(&pool).await.get("sent"), Some(&10));
    // And once settled, the stale worker still cannot touch them.
    assert_eq!(
        s.finish(slow.claim_id, &written(&late))
            .await
            .unwrap()
            .written,
        0
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn opt_outs_on_sent_failed_waiting_and_in_flight_rows_are_each_counted_once(pool: PgPool) {
    use campaign_sender::outcome::ErrorClass;
    seed(&pool, CAMPAIGN, 10).await;
    let s = store(&pool);
    let b = s.claim(4, LEASE).await.unwrap();
    let ids: Vec<i64> = b.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    // 1 sent, 2 failed for good; 3 and 4 still in flight.
    let settled = [
        (
            1,
            Resolution::Sent {
                status: 200,
                message_id: None,
            },
        ),
        (
            2,
            Resolution::Failed {
                status: Some(422),
                class: ErrorClass::Rejected,
            },
        ),
    ];
    assert_eq!(
        s.finish(b.claim_id, &written(&settled))
            .await
            .unwrap()
            .written,
        2
    );
    // Another system opts out 1..=5: a sent, a failed, two in-flight and a waiting row.
    sqlx::query("UPDATE campaign_targets SET opted_out_at = now() WHERE member_id <= 5")
        .execute(&pool)
        .await
        .unwrap();
    // 3's request was already on its way: its answer is still recorded. 4 is caught by the
    // check before its send and released.
    let in_flight = [
        (
            3,
            Resolution::Sent {
                status: 200,
                message_id: None,
            },
        ),
        (
            4,
            Resolution::Released {
                class: ErrorClass::OptedOut,
            },
        ),
    ];
    assert_eq!(
        s.finish(b.claim_id, &written(&in_flight))
            .await
            .unwrap()
            .written,
        2
    );

    let c = s.counts().await.unwrap();
    // sent: 1 and 3 (an outcome stands); failed: 2; opted out: 4 and 5, never mailed; work
    // left: 6..=10. Every row in exactly one bucket.
    assert_eq!(
        (c.sent, c.failed, c.opted_out, c.pending, c.sending),
        (2, 1, 2, 5, 0),
        "{c:?}"
    );
    assert_eq!(
        c.sent + c.failed + c.opted_out + c.pending + c.sending,
        c.total
    );
    // Nothing opted out is claimable again; the rest is.
    let next = s.claim(100, LEASE).await.unwrap();
    let ids: Vec<i64> = next.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(ids, vec![6, 7, 8, 9, 10]);
}

/// (member, claim) of every row of a batch: what a worker holds.
fn held_by(b: &campaign_sender::store::Batch) -> Vec<(i64, uuid::Uuid)> {
    b.rows.iter().map(|r| (r.member_id, b.claim_id)).collect()
}

/// The heartbeat and the finish of the same rows lock them in their plans' orders: a heartbeat
/// that waited for a row another statement holds could close a deadlock (PostgreSQL breaks it
/// after `deadlock_timeout`, a second of that pod's sending). It skips the row this beat.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_heartbeat_never_waits_for_a_row_another_statement_holds(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let a = store(&pool);
    let held = held_by(&a.claim(3, LEASE).await.unwrap());
    // The finish of member 2 is under way: its row is locked by an open transaction.
    let mut finishing = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM campaign_targets WHERE member_id = 2 FOR UPDATE")
        .execute(&mut *finishing)
        .await
        .unwrap();
    let beat = tokio::time::timeout(Duration::from_secs(5), a.extend_leases(&held, LEASE)).await;
    assert_eq!(
        beat.expect("the heartbeat waited for a locked row")
            .unwrap(),
        2
    );
    finishing.rollback().await.unwrap();
    // The next beat extends it too.
    assert_eq!(a.extend_leases(&held, LEASE).await.unwrap(), 3);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_heartbeat_extends_only_rows_still_held_under_its_own_claim(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let (a, b) = (store(&pool), store(&pool));
    let first = a.claim(3, LEASE).await.unwrap();
    let held = held_by(&first);
    assert_eq!(a.extend_leases(&held, LEASE).await.unwrap(), 3);
    // A's lease runs out (it was cut off); B re-claims with a short lease.
    expire_leases(&pool).await;
    let second = b.claim(3, Duration::from_secs(5)).await.unwrap();
    assert_eq!(second.rows.len(), 3);
    // A's late heartbeat must not touch B's rows: B's lease stays as B set it.
    assert_eq!(a.extend_leases(&held, LEASE).await.unwrap(), 0);
    let longest: f64 = sqlx::query_scalar(
        "SELECT max(extract(epoch FROM lease_until - now()))::float8 FROM campaign_targets",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        longest <= 5.5,
        "a stale heartbeat extended another claim's lease to {longest} s"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_check_before_a_send_sees_rows_taken_over_by_another_claim(pool: PgPool) {
    use campaign_sender::store::Recheck;
    seed(&pool, CAMPAIGN, 2).await;
    let (a, b) = (store(&pool), store(&pool));
    let first = a.claim(2, LEASE).await.unwrap();
    let held = held_by(&first);
    assert!(
        a.recheck(&held, RESEND).await.unwrap().is_empty(),
        "our own rows"
    );
    expire_leases(&pool).await;
    b.claim(1, LEASE).await.unwrap();
    // Row 1 is B's now: A must not send it. Row 2 is still A's (expired, not re-claimed).
    assert_eq!(
        a.recheck(&held, RESEND).await.unwrap(),
        vec![(1, Recheck::TakenOver)]
    );
}

/// A pause committed before a check starts stops every send that check would have cleared,
/// whatever the settings poll does: every row is `paused`, none stamped or moved, all still ours
/// to release; resumed, the same rows clear.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_check_before_a_send_sees_a_pause_and_clears_nothing(pool: PgPool) {
    use campaign_sender::store::{campaigns, Recheck};
    seed(&pool, CAMPAIGN, 3).await;
    let a = store(&pool);
    let held = held_by(&a.claim(3, LEASE).await.unwrap());
    campaigns::pause(&pool, CAMPAIGN, "brake", Some("test"))
        .await
        .unwrap();
    let mut verdicts = a.recheck(&held, RESEND).await.unwrap();
    verdicts.sort_by_key(|(m, _)| *m);
    assert_eq!(
        verdicts,
        vec![
            (1, Recheck::Paused),
            (2, Recheck::Paused),
            (3, Recheck::Paused)
        ]
    );
    let stamped: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE started_at IS NOT NULL OR state <> 'sending'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(stamped, 0, "a paused check stamped or moved a row");
    campaigns::resume(&pool, CAMPAIGN).await.unwrap();
    assert!(a.recheck(&held, RESEND).await.unwrap().is_empty());
}
