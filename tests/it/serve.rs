//! The long-running mode (`campaign-sender serve`, the Deployment) and the wait for the schema.

use std::time::Duration;

use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

fn env(mail_url: &str) -> Vec<(&str, &str)> {
    vec![
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", mail_url),
        ("WORKER_ID", "serve-0"),
        ("MAIL_RATE_PER_S", "2000"),
        ("SEND_CONCURRENCY", "16"),
        ("LEASE_S", "4"),
        ("CONNECT_TIMEOUT_MS", "500"),
        ("READ_TIMEOUT_MS", "500"),
        ("IDLE_POLL_MS", "100"),
        // serve ignores the deadline: it must still be running after it.
        ("DEADLINE_S", "1"),
    ]
}

/// SIGTERM, as Kubernetes sends on scale-in; then (exit code, stdout, stderr).
async fn terminate(child: tokio::process::Child) -> (i32, String, String) {
    let pid = child.id().expect("running").to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    finish(child, Duration::from_secs(20)).await
}

async fn wait_delivered(p: &TestProvider, n: u64) {
    until_stats(p, Duration::from_secs(30), &format!("{n} delivered"), |s| {
        s.delivered >= n
    })
    .await;
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn serve_idles_when_done_sends_rows_that_arrive_later_and_exits_0_on_sigterm(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let child = spawn_sender(&["serve"], &db, &env(&p.url));
    wait_delivered(&p, 300).await;
    // Done: still running, holding no share of the rate limit (bounded wait for it).
    until_idle(&pool, "serve-0").await;
    // Idling past DEADLINE_S (serve has none). A fixed stretch for an absence: the passes
    // counted below can only be fewer on a loaded machine, never more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Another system adds rows: they are sent without a restart.
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         SELECT $1, g, 'late' || g || '@example.com' FROM generate_series(1001, 1100) g",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    wait_delivered(&p, 400).await;
    let (code, out, err) = terminate(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(states(&pool).await.get("sent"), Some(&400));
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);
    // Idling is one backlog count per IDLE_POLL_MS, not a pass of the pipeline: the pod ran dry
    // after the first 300 rows (and maybe after the late 100, if before the SIGTERM), not once
    // per 100-ms poll of its 1.5 s of idling.
    let passes = err.matches("campaign done; idling").count();
    assert!((1..=2).contains(&passes), "ran dry {passes} times:\n{err}");
}

/// An idle `serve` pod wakes for rows that are not claimable yet: a row in retry backoff, and
/// rows a crashed pod left leased. Both are work that only a claim after their time can finish;
/// an idle pod that counted them as nothing left would leave them unsent until a restart.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_idle_serve_pod_wakes_for_rows_in_backoff_and_rows_a_crashed_pod_left_leased(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 10).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let child = spawn_sender(&["serve"], &db, &env(&p.url));
    wait_delivered(&p, 10).await;
    until_idle(&pool, "serve-0").await;
    // Only a row in backoff: nothing ready, nothing leased.
    seed_in_backoff(&pool, CAMPAIGN, 101..=101).await;
    wait_delivered(&p, 11).await;
    until_idle(&pool, "serve-0").await;
    // Only rows a crashed pod holds: leased under a claim nobody will finish.
    seed_leased_by_a_crashed_worker(&pool, CAMPAIGN, 201..=203).await;
    wait_delivered(&p, 14).await;
    let (code, out, err) = terminate(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(states(&pool).await.get("sent"), Some(&14));
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);
}

#[sqlx::test(migrations = false)]
async fn run_waits_for_the_schema_and_gives_75_when_it_never_comes(pool: PgPool) {
    // No migrations at all in this database (the migrate Job has not run).
    let db = database_url(&pool).await;
    let mut e = env("http://127.0.0.1:9/v1/send");
    e.push(("DB_CONNECT_RETRY_S", "2"));
    let t0 = std::time::Instant::now();
    let (code, _, err) = finish(spawn_sender(&["run"], &db, &e), Duration::from_secs(20)).await;
    assert_eq!(code, 75, "{err}");
    assert!(t0.elapsed() >= Duration::from_secs(2), "did not wait");
    assert!(err.contains("campaign-sender migrate"), "{err}");
}

#[sqlx::test(migrations = false)]
async fn a_worker_started_before_the_migration_starts_sending_once_it_lands(pool: PgPool) {
    // `serve`, so that the moment the rows are inserted after the migration cannot race with a
    // `run` that would find an empty campaign and finish.
    let p = provider(FakeConfig::default()).await;
    let db = database_url(&pool).await;
    let mut e = env(&p.url);
    e.push(("DB_CONNECT_RETRY_S", "30"));
    let child = spawn_sender(&["serve"], &db, &e);
    // It has looked for the schema at least once (and found none) before the migration lands.
    until_some(
        Duration::from_secs(30),
        "the worker looks for the schema",
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
              WHERE application_name = 'campaign-sender' AND datname = current_database()
                AND query LIKE '%_sqlx_migrations%'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            (n > 0).then_some(())
        },
    )
    .await;
    campaign_sender::store::MIGRATOR.run(&pool).await.unwrap();
    seed(&pool, CAMPAIGN, 100).await;
    wait_delivered(&p, 100).await;
    let (code, out, err) = terminate(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("waiting for the schema"), "{err}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn metrics_are_served_with_the_documented_names_and_no_personal_data(pool: PgPool) {
    seed(&pool, CAMPAIGN, 200).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let port = refused_addr().port();
    let addr = format!("127.0.0.1:{port}");
    let mut e = env(&p.url);
    e.push(("METRICS_ADDR", &addr));
    let child = spawn_sender(&["serve"], &db, &e);
    wait_delivered(&p, 200).await;
    // The backlog gauges are sampled when the claimer finds nothing left; the last results
    // may still be on their way to the database (the counter moves when they are written).
    let body = until_some(
        Duration::from_secs(30),
        "the backlog gauge at 0 and every result written",
        || async {
            let body = metrics_text(&addr).await?;
            (body.contains("campaign_sender_backlog_rows{worker=\"serve-0\",state=\"ready\"} 0")
                && body.contains(
                    "campaign_sender_sends_total{worker=\"serve-0\",outcome=\"sent\"} 200",
                ))
            .then_some(body)
        },
    )
    .await;
    for name in [
        "campaign_sender_sends_total{worker=\"serve-0\",outcome=\"sent\"} 200",
        "campaign_sender_requests_total",
        "campaign_sender_send_duration_seconds_bucket",
        "campaign_sender_rate_share_per_second",
        "campaign_sender_rate_limit_per_second",
        "campaign_sender_batches_claimed_total",
        "campaign_sender_rows_claimed_total",
        "campaign_sender_backlog_rows{worker=\"serve-0\",state=\"ready\"} 0",
        "campaign_sender_pacer_wait_seconds",
        // Every counter an alert takes `increase` of is there at 0 before its first event:
        // Prometheus cannot see the first increment of a series that appears with it.
        "campaign_sender_sends_total{worker=\"serve-0\",outcome=\"failed\"} 0",
        "campaign_sender_provider_throttled_total{worker=\"serve-0\"} 0",
        "campaign_sender_provider_unreachable_total{worker=\"serve-0\"} 0",
        "campaign_sender_leases_expired_total{worker=\"serve-0\"} 0",
        "campaign_sender_stale_writes_total{worker=\"serve-0\"} 0",
        "campaign_sender_sent_after_optout_total{worker=\"serve-0\"} 0",
    ] {
        assert!(body.contains(name), "{name} missing from:\n{body}");
    }
    assert!(!body.contains("@example.com"), "an address in the metrics");
    assert!(
        !body.contains("member_id"),
        "a member id label in the metrics"
    );
    let (code, _, err) = terminate(child).await;
    assert_eq!(code, 0, "{err}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn run_and_serve_refuse_a_campaign_that_does_not_exist_unless_told_to_wait(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let p = provider(FakeConfig::default()).await;
    let url = worker_url(&pool).await;
    let mut typo = env(&p.url);
    typo.retain(|(k, _)| *k != "CAMPAIGN_ID");
    typo.push(("CAMPAIGN_ID", "spring-sal"));
    for cmd in [&["run"][..], &["serve"][..]] {
        let (code, out, err) =
            finish(spawn_sender(cmd, &url, &typo), Duration::from_secs(30)).await;
        assert_eq!(
            code,
            campaign_sender::exit::Exit::Incomplete as i32,
            "{cmd:?}: {out}\n{err}"
        );
        assert!(err.contains("did you mean spring-sale?"), "{cmd:?}: {err}");
    }
    assert_eq!(p.fake.stats().requests, 0);
    // Told to wait, serve starts for a campaign not loaded yet and sends it once it arrives.
    let mut later = env(&p.url);
    later.retain(|(k, _)| *k != "CAMPAIGN_ID");
    later.push(("CAMPAIGN_ID", "later-sale"));
    let child = spawn_sender(&["serve", "--wait-for-campaign"], &url, &later);
    tokio::time::sleep(Duration::from_millis(500)).await;
    seed(&pool, "later-sale", 5).await;
    wait_delivered(&p, 5).await;
    let (code, out, err) = terminate(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
}
