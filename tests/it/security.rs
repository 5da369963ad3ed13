//! Least privilege and personal data: the roles of `docs/roles.sql` allow exactly the work, and
//! a whole run's logs carry no address and no secret.

use std::time::Duration;

use campaign_sender::exit;
use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

async fn connect(url: &str) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .unwrap()
}

/// Runs `sql` and returns whether PostgreSQL refused it for lack of privilege.
async fn denied(pool: &PgPool, sql: &str) -> bool {
    match sqlx::query(sql).execute(pool).await {
        Ok(_) => false,
        Err(sqlx::Error::Database(e)) => e.code().as_deref() == Some("42501"),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_worker_role_cannot_add_remove_or_redirect_rows_nor_touch_opt_outs(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    let w = connect(&worker_url(&pool).await).await;
    for sql in [
        "INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ('x', 1, 'a@example.com')",
        "DELETE FROM campaign_targets",
        "TRUNCATE campaign_targets",
        "UPDATE campaign_targets SET opted_out_at = NULL",
        "UPDATE campaign_targets SET email = 'other@example.com'",
        "UPDATE campaign_targets SET member_id = member_id + 100",
        "UPDATE campaigns SET template = 'other'",
        "DELETE FROM campaigns",
        "CREATE TABLE stolen (x int)",
        "DROP TABLE rate_pods",
        "DELETE FROM _sqlx_migrations",
    ] {
        assert!(denied(&w, sql).await, "the worker role may: {sql}");
    }
    // What it needs works (the whole test suite runs workers as this role besides).
    assert!(
        !denied(
            &w,
            "UPDATE campaign_targets SET attempts = attempts WHERE member_id = 1"
        )
        .await
    );
    w.close().await;
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_operator_role_cannot_delete_rows_touch_opt_outs_fences_or_rate_shares(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    let o = connect(&operator_url(&pool).await).await;
    for sql in [
        "DELETE FROM campaign_targets",
        "UPDATE campaign_targets SET opted_out_at = NULL",
        "UPDATE campaign_targets SET email = 'other@example.com'",
        "UPDATE campaign_targets SET claim_id = gen_random_uuid()",
        "UPDATE campaign_targets SET started_at = NULL",
        "DELETE FROM rate_pods",
        "UPDATE rate_limits SET effective_per_s = 1e9",
        "CREATE TABLE stolen (x int)",
    ] {
        assert!(denied(&o, sql).await, "the operator role may: {sql}");
    }
    o.close().await;
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_whole_run_logs_no_address_no_api_key_and_no_database_password(pool: PgPool) {
    const KEY: &str = "sk_live_7hVq2SUPERSECRETkey";
    const PASSWORD: &str = "db-pw-Zx81SECRET";
    seed(&pool, CAMPAIGN, 600).await;
    sqlx::query(
        "UPDATE campaign_targets SET email = 'person' || member_id || '@private.example.org'",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Invalid addresses are failed without a request, and logged by member id only.
    sqlx::query("UPDATE campaign_targets SET email = 'broken-person-5.private.example.org' WHERE member_id = 5")
        .execute(&pool)
        .await
        .unwrap();
    // Standard faults (503s, 422s) and a 429 limit, so retries, rejections and throttling all log.
    let p = provider(FakeConfig {
        faults: true,
        api_key: Some(KEY.into()),
        rate_per_s: Some(300.0),
        burst: 5,
        ..Default::default()
    })
    .await;
    // The throwaway server trusts local logins, so any password works and must not be printed.
    let mut url = reqwest::Url::parse(&worker_url(&pool).await).unwrap();
    url.set_password(Some(PASSWORD)).unwrap();
    let env = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", p.url.as_str()),
        ("MAIL_API_KEY", KEY),
        ("MAIL_RATE_PER_S", "1000"),
        ("BACKOFF_BASE_MS", "20"),
        ("BACKOFF_MAX_MS", "200"),
        ("MAX_PERMANENT_FAILURE_RATIO", "0.05"),
        // As verbose as an operator debugging would set it, libraries included.
        ("RUST_LOG", "debug"),
    ];
    let child = spawn_sender(&["run"], url.as_str(), &env);
    let (code, out, err) = finish(child, Duration::from_secs(120)).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.fake.stats().unauthorized, 0, "the key was not sent");
    assert!(p.fake.stats().throttled_429 + p.fake.stats().faults_503 > 0);
    let logs = format!("{out}\n{err}");
    assert!(
        logs.lines().count() > 50,
        "too few log lines to mean anything"
    );
    for secret in ["private.example.org", KEY, PASSWORD] {
        let hit = logs.lines().find(|l| l.contains(secret));
        assert!(hit.is_none(), "{secret:?} appears in the logs: {hit:?}");
    }
}

/// A claimed batch printed with `{:?}` (a log line, a panic message) shows which members and
/// attempts it holds, and never their addresses.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_claimed_batch_debug_prints_members_but_never_addresses(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2).await;
    let batch = store(&pool)
        .claim(10, Duration::from_secs(30))
        .await
        .unwrap();
    let printed = format!("{batch:?}");
    assert!(!printed.contains('@'), "{printed}");
    assert!(!printed.contains("member1"), "{printed}");
    for id in [
        "member_id: 1,",
        "member_id: 2,",
        "attempt: 1",
        "[personal data]",
    ] {
        assert!(printed.contains(id), "{id} missing: {printed}");
    }
}

/// A webhook secret anyone can guess lets anyone suppress anyone (or brake a campaign): `events`
/// refuses to start with one weaker than the vendor issues, 78 naming the variable and never
/// the value, before it touches the database (the URL points nowhere).
#[tokio::test]
async fn events_refuses_empty_and_trivial_webhook_secrets_naming_the_variable_never_the_value() {
    let sixteen = "sixteen-byte-key";
    let cases: &[&[(&str, &str)]] = &[
        &[("RESEND_WEBHOOK_SECRET", "whsec_")],
        &[("RESEND_WEBHOOK_SECRET", "whsec_eA==")],
        &[("MAILGUN_WEBHOOK_SIGNING_KEY", "k")],
        &[("MAILGUN_WEBHOOK_SIGNING_KEY", "key-1234567890abcdef")],
        &[
            ("POSTMARK_WEBHOOK_USER", "hook"),
            ("POSTMARK_WEBHOOK_PASSWORD", "p"),
        ],
        &[("UNSUBSCRIBE_SECRET", sixteen)],
    ];
    for env in cases {
        let (var, value) = env[env.len() - 1];
        let mut env = env.to_vec();
        env.push(("DB_CONNECT_RETRY_S", "1"));
        let (code, _, err) = finish(
            spawn_sender(&["events"], "postgres://nobody@127.0.0.1:9/none", &env),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(code, exit::Exit::Config as i32, "{var}={value}: {err}");
        assert!(err.contains(var), "{var}: not named: {err}");
        assert!(
            value.len() < 3 || !err.contains(value),
            "{var}: value shown: {err}"
        );
    }
    // An older 16-byte secret after a 32-byte one still verifies: a warning, not a refusal.
    let rotated = format!("{}, {sixteen}", "k".repeat(32));
    let (code, _, err) = finish(
        spawn_sender(
            &["events"],
            "postgres://nobody@127.0.0.1:9/none",
            &[
                ("UNSUBSCRIBE_SECRET", &rotated),
                ("DB_CONNECT_RETRY_S", "1"),
            ],
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_ne!(code, exit::Exit::Config as i32, "{err}");
    assert!(err.contains("verify-only secret"), "warned: {err}");
    assert!(!err.contains(sixteen), "{err}");
}
