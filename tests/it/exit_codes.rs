//! Exit codes: the contract with Kubernetes Job semantics.

use std::time::Duration;

use campaign_sender::fake_provider::FakeConfig;
use campaign_sender::report::exit;
use sqlx::PgPool;

use crate::helpers::*;

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn permanent_failures_over_one_percent_give_exit_code_2(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    // Two undeliverable addresses in 100 (2 %): failed without a request.
    sqlx::query("UPDATE campaign_targets SET email = CASE member_id WHEN 10 THEN NULL ELSE 'not-an-address' END WHERE member_id IN (10, 20)")
        .execute(&pool)
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code, exit::TOO_MANY_FAILURES, "{report:?}");
    assert_eq!(report.stats.invalid_email, 2);
    assert_eq!(
        state_of(&pool, 10).await.3.as_deref(),
        Some("invalid_email")
    );
    assert!(
        p.fake.stats().requests <= 98,
        "requests made for invalid addresses"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn permanent_failures_within_one_percent_still_exit_0(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2000).await;
    // Standard faults: 997 and 1994 answer 422 (0.1 %), every 25th one 503 first.
    let p = provider(FakeConfig {
        faults: true,
        ..Default::default()
    })
    .await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code, exit::DONE, "{report:?}");
    assert_eq!((report.campaign.failed, report.campaign.sent), (2, 1998));
    assert_eq!(state_of(&pool, 997).await.2, Some(422));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn too_many_failures_stop_the_run_early(pool: PgPool) {
    let (_, report) = run_against_an_unavailable_provider(&pool, 5000).await;
    assert_eq!(report.exit_code, exit::TOO_MANY_FAILURES);
    // Stopped after the first batch that crossed 1 % (50 rows), not after all 5000.
    assert!(report.stats.requests <= 400, "{:?}", report.stats);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn bad_config_gives_78_and_names_the_variable(pool: PgPool) {
    let url = worker_url(&pool).await;
    seed(&pool, "c", 5).await;
    let base = [
        ("CAMPAIGN_ID", "c"),
        ("MAIL_URL", "http://127.0.0.1:9/v1/send"),
    ];
    let cases: &[(&str, &str)] = &[
        ("BATCH_SIZE", "abc"),
        ("BATCH_SIZE", "0"),
        ("MAIL_URL", "ftp://x"),
        ("LEASE_S", "-1"),
    ];
    for (var, value) in cases {
        let mut env: Vec<(&str, &str)> = base.iter().copied().filter(|(k, _)| k != var).collect();
        env.push((var, value));
        let (code, _, err) =
            finish(spawn_sender(&["run"], &url, &env), Duration::from_secs(30)).await;
        assert_eq!(code, exit::CONFIG as i32, "{var}={value}: {err}");
        assert!(
            err.contains(var),
            "{var}={value}: stderr does not name it: {err}"
        );
    }
    // A missing required variable, too.
    let (code, _, err) = finish(
        spawn_sender(&["run"], &url, &base[..1]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::CONFIG as i32);
    assert!(err.contains("MAIL_URL"), "{err}");
    // Nothing was claimed or changed.
    let touched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE state <> 'pending' OR attempts <> 0",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(touched, 0);
}
