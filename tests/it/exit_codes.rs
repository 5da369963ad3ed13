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

/// No server at DATABASE_URL at start: bounded retries (DB_CONNECT_RETRY_S), then exit 75 with
/// one line that says what to check — never the password, never a request to the provider.
#[tokio::test]
async fn an_unreachable_database_at_start_is_retried_for_a_bounded_time_then_gives_75() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://campaign_sender_worker:s3cret-pw@127.0.0.1:{port}/app");
    let p = provider(Default::default()).await;
    let t0 = std::time::Instant::now();
    let (code, _out, err) = finish(
        spawn_sender(
            &["run"],
            &url,
            &[
                ("CAMPAIGN_ID", CAMPAIGN),
                ("MAIL_URL", &p.url),
                ("DB_CONNECT_RETRY_S", "2"),
            ],
        ),
        Duration::from_secs(30),
    )
    .await;
    let took = t0.elapsed();
    assert_eq!(code, exit::DATABASE_UNAVAILABLE as i32, "{err}");
    // It kept trying for the whole DB_CONNECT_RETRY_S (sqlx retries a refused connect within
    // the acquire timeout), and no longer: before the acquire timeout was capped at what is
    // left of the limit, this took 10 s.
    assert!(
        took >= Duration::from_millis(1800),
        "gave up without retrying: {took:?}"
    );
    assert!(
        took < Duration::from_secs(6),
        "DB_CONNECT_RETRY_S=2 not honoured: {took:?}"
    );
    assert!(err.contains("check DATABASE_URL"), "{err}");
    assert!(
        !err.contains("s3cret-pw"),
        "the password was printed: {err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
}
