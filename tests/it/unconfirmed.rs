//! Never twice, even after the provider forgets the key: an attempt with an unknown outcome
//! starts the row's idempotency window, and past it the row becomes `unconfirmed` instead of
//! being sent again; `resolve` settles such rows.

use std::time::Duration;

use campaign_sender::config::FromEnv;
use campaign_sender::exit;
use campaign_sender::outcome::{ErrorClass, Resolution};
use campaign_sender::store::suppressions::Settle;
use campaign_sender::store::Recheck;
use fake_provider::FakeConfig;
use sqlx::PgPool;
use uuid::Uuid;

use crate::helpers::*;

const LEASE: Duration = Duration::from_secs(30);

/// `unknown_since IS NOT NULL` per member, in member order.
async fn unknown(pool: &PgPool) -> Vec<(i64, bool)> {
    sqlx::query_as(
        "SELECT member_id, unknown_since IS NOT NULL FROM campaign_targets
          WHERE campaign_id = $1 ORDER BY member_id",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await
    .unwrap()
}

fn held(claim_id: Uuid, members: impl IntoIterator<Item = i64>) -> Vec<(i64, Uuid)> {
    members.into_iter().map(|m| (m, claim_id)).collect()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_crash_after_the_send_began_starts_the_window_and_rows_never_cleared_stay_sendable(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 10).await;
    let s = store(&pool);
    let crashed = s.claim(10, Duration::from_secs(1)).await.unwrap();
    // The crashed pod had cleared 1..=3 for sending (their requests may have left), not 4..=10.
    assert!(s
        .recheck(&held(crashed.claim_id, 1..=3), RESEND)
        .await
        .unwrap()
        .is_empty());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let retaken = s.claim(10, LEASE).await.unwrap();
    assert_eq!(retaken.reclaimed, 10);
    let marked: Vec<i64> = unknown(&pool)
        .await
        .into_iter()
        .filter(|(_, u)| *u)
        .map(|(m, _)| m)
        .collect();
    assert_eq!(marked, [1, 2, 3], "only the rows whose send may have begun");
    // Within the window all ten may be sent again (the provider suppresses the repeats) …
    let ours = held(retaken.claim_id, 1..=10);
    assert!(s.recheck(&ours, RESEND).await.unwrap().is_empty());
    // … past it the three are moved out, unsent; the seven are still ours.
    let mut blocked = s.recheck(&ours, Duration::ZERO).await.unwrap();
    blocked.sort_by_key(|(m, _)| *m);
    assert_eq!(
        blocked,
        [1, 2, 3].map(|m| (m, Recheck::Unconfirmed)).to_vec()
    );
    let st = states(&pool).await;
    assert_eq!((st["unconfirmed"], st["sending"]), (3, 7));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn only_an_attempt_without_an_answer_starts_the_window(pool: PgPool) {
    seed(&pool, CAMPAIGN, 4).await;
    let s = store(&pool);
    let b = s.claim(4, LEASE).await.unwrap();
    s.recheck(&held(b.claim_id, 1..=4), RESEND).await.unwrap();
    let retry = |status: Option<u16>, class| Resolution::RetryAfter {
        delay: Duration::ZERO,
        status,
        class,
    };
    let results = [
        (1, retry(None, ErrorClass::Timeout)),
        (2, retry(Some(503), ErrorClass::ServerError)),
        (3, retry(None, ErrorClass::Transport)),
        (4, retry(Some(429), ErrorClass::Throttled)),
    ];
    assert_eq!(
        s.finish(b.claim_id, &written(&results))
            .await
            .unwrap()
            .written,
        4
    );
    assert_eq!(
        unknown(&pool).await,
        [(1, true), (2, false), (3, true), (4, false)]
    );
    // The window starts when the send began (the re-check's stamp), not at the answer.
    let started_before_finish: bool = sqlx::query_scalar(
        "SELECT bool_and(unknown_since < updated_at) FROM campaign_targets
          WHERE campaign_id = $1 AND member_id IN (1, 3)",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(started_before_finish);
    let again = s.claim(4, LEASE).await.unwrap();
    let mut blocked = s
        .recheck(&held(again.claim_id, 1..=4), Duration::ZERO)
        .await
        .unwrap();
    blocked.sort_by_key(|(m, _)| *m);
    assert_eq!(
        blocked,
        [(1, Recheck::Unconfirmed), (3, Recheck::Unconfirmed)]
    );
}

/// A provider that remembers keys for 3 s and answers every fresh delivery too late (the mail
/// went, the client timed out); workers whose retry comes after the window.
async fn late_answers_then_a_late_retry(pool: &PgPool, backoff_ms: u64) -> (TestProvider, u64) {
    seed(pool, CAMPAIGN, 20).await;
    let p = provider(FakeConfig {
        idempotency_window: Duration::from_secs(3),
        late_per_million: 1_000_000,
        late_ms: 2_000,
        ..Default::default()
    })
    .await;
    let mut cfg = config(&p.url);
    cfg.connect_timeout_ms = 200;
    cfg.read_timeout_ms = 300;
    cfg.optout_recheck_ms = 100;
    cfg.idempotency_window_s = Some(3); // resend within 3 - (0.5 + 0.1 + 1) = 1.4 s
    cfg.backoff_base_ms = backoff_ms;
    cfg.backoff_max_ms = backoff_ms;
    cfg.validate().unwrap();
    let report = run_to_end(pool, cfg).await;
    (p, report.stats.unconfirmed)
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_row_answered_too_late_is_not_sent_again_after_the_providers_key_retention(pool: PgPool) {
    // Retries 3.5–7 s after the first attempt: past the provider's 3-s retention.
    let (p, unconfirmed) = late_answers_then_a_late_retry(&pool, 7_000).await;
    let s = p.fake.stats();
    assert_eq!(s.members_delivered_more_than_once, 0, "{s:?}");
    assert_eq!((s.delivered, s.answered_late), (20, 20));
    assert_eq!(unconfirmed, 20);
    assert_eq!(states(&pool).await["unconfirmed"], 20);
    let u = store(&pool).unconfirmed().await.unwrap();
    assert_eq!(u.count, 20);
    assert!(u.since.is_some());
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn within_the_window_a_row_answered_too_late_is_sent_again_and_counted_once(pool: PgPool) {
    // Retries 0.1–0.2 s after: the provider still remembers the key and suppresses the repeat.
    let (p, unconfirmed) = late_answers_then_a_late_retry(&pool, 200).await;
    let s = p.fake.stats();
    assert_eq!(
        (
            s.delivered,
            s.duplicates_suppressed,
            s.members_delivered_more_than_once
        ),
        (20, 20, 0)
    );
    assert_eq!(unconfirmed, 0);
    assert_eq!(states(&pool).await["sent"], 20);
}

/// Members 1..=4 `unconfirmed`, their unknown attempts 4, 3, 2 and 1 hours ago; 4 opted out.
async fn seed_unconfirmed(pool: &PgPool) {
    seed(pool, CAMPAIGN, 4).await;
    sqlx::query(
        "UPDATE campaign_targets
            SET state = 'unconfirmed', attempts = 2,
                unknown_since = now() - (5 - member_id) * interval '1 hour',
                opted_out_at = CASE WHEN member_id = 4 THEN now() END
          WHERE campaign_id = $1",
    )
    .bind(CAMPAIGN)
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn resolve_settles_unconfirmed_rows_either_way_and_never_resends_an_opted_out_one(
    pool: PgPool,
) {
    seed_unconfirmed(&pool).await;
    let s = store(&pool);
    let since = chrono::Utc::now() - chrono::Duration::minutes(150);
    assert_eq!(s.resolve(Settle::Resend, None, true).await.unwrap(), 3);
    assert_eq!(
        states(&pool).await["unconfirmed"],
        4,
        "a dry run changes nothing"
    );
    assert_eq!(
        s.resolve(Settle::Resend, Some(since), false).await.unwrap(),
        1
    );
    let (state, attempts, _, error) = state_of(&pool, 3).await;
    assert_eq!(
        (state.as_str(), attempts, error.as_deref()),
        ("pending", 0, Some("resend"))
    );
    assert_eq!(
        unknown(&pool).await[2],
        (3, false),
        "a new window for a resend"
    );
    assert_eq!(s.resolve(Settle::Resend, None, false).await.unwrap(), 2);
    assert_eq!(
        state_of(&pool, 4).await.0,
        "unconfirmed",
        "opted out: never resent"
    );
    let tally = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT coalesce((SELECT sent FROM campaign_tallies WHERE campaign_id = $1), 0)",
        )
        .bind(CAMPAIGN)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = tally().await;
    assert_eq!(s.resolve(Settle::AssumeSent, None, false).await.unwrap(), 1);
    assert_eq!(
        tally().await,
        before + 1,
        "the brake's tally counts what is now sent"
    );
    let assumed: (String, bool, Option<String>) = sqlx::query_as(
        "SELECT state, sent_at = unknown_since, last_error FROM campaign_targets
          WHERE campaign_id = $1 AND member_id = 4",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(assumed, ("sent".into(), true, Some("assumed_sent".into())));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn status_shows_unconfirmed_rows_and_resolve_prints_what_it_did(pool: PgPool) {
    seed_unconfirmed(&pool).await;
    let url = operator_url(&pool).await;
    let status = spawn_sender(&["status", "--campaign", CAMPAIGN], &url, &[]);
    let (code, out, err) = finish(status, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("UNCONFIRMED 4 since"), "{out}");
    assert!(out.contains("resolve --campaign spring-sale"), "{out}");
    let neither = spawn_sender(&["resolve", "--campaign", CAMPAIGN], &url, &[]);
    let (code, _, err) = finish(neither, Duration::from_secs(20)).await;
    assert_eq!(
        code,
        exit::Exit::Usage as i32,
        "--assume-sent or --resend is required: {err}"
    );
    let resend = spawn_sender(&["resolve", "--campaign", CAMPAIGN, "--resend"], &url, &[]);
    let (code, out, err) = finish(resend, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 unconfirmed rows put back to pending"),
        "{out}"
    );
    assert!(out.contains("1 unconfirmed rows left"), "{out}");
    assert_eq!(states(&pool).await["pending"], 3);
    // The last one, opted out, is settled as sent by the operator's role, tally included.
    sqlx::query("UPDATE campaign_targets SET opted_out_at = NULL WHERE state = 'unconfirmed'")
        .execute(&pool)
        .await
        .unwrap();
    let assume = spawn_sender(
        &["resolve", "--campaign", CAMPAIGN, "--assume-sent"],
        &url,
        &[],
    );
    let (code, out, err) = finish(assume, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let tally: i64 = sqlx::query_scalar("SELECT sent FROM campaign_tallies WHERE campaign_id = $1")
        .bind(CAMPAIGN)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tally, 1, "the operator's resolve adds to the brake's tally");
}
