//! Exit codes: the contract with Kubernetes Job semantics.

use std::time::Duration;

use campaign_sender::exit;
use fake_provider::FakeConfig;
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
    assert_eq!(report.exit_code, exit::Exit::TooManyFailures, "{report:?}");
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
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    assert_eq!((report.campaign.failed, report.campaign.sent), (2, 1998));
    assert_eq!(state_of(&pool, 997).await.2, Some(422));
    // The report accounts for every request the provider saw, each once: delivered, retried
    // (the first-attempt 503s) or failed (the 422s); and every row it claimed (each retry is
    // claimed again) got exactly one request, in batches of at most BATCH_SIZE (200).
    let s = p.fake.stats();
    let r = &report.stats;
    assert_eq!(
        (r.requests, r.sent, r.retried, r.failed, r.claimed),
        (
            s.requests,
            s.delivered,
            s.faults_503,
            s.rejected_422,
            s.requests
        ),
        "{report:?}\n{s:?}"
    );
    assert!(
        (r.claimed.div_ceil(200)..=r.claimed).contains(&r.batches),
        "{report:?}"
    );
}

/// The budget is what may fail: a campaign exactly at it (1 of 100 at 1 %) is finished, sent and
/// exits 0 — it is not paused as if over it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn failures_exactly_at_the_budget_still_finish_the_campaign_with_0(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    sqlx::query("UPDATE campaign_targets SET email = NULL WHERE member_id = 10")
        .execute(&pool)
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    assert_eq!(
        (
            report.campaign.failed,
            report.campaign.sent,
            report.failure_budget
        ),
        (1, 99, 1)
    );
    let paused: Option<String> = sqlx::query_scalar("SELECT paused_by FROM campaigns")
        .fetch_optional(&pool)
        .await
        .unwrap()
        .flatten();
    assert_eq!(paused, None, "a campaign within its budget was paused");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn too_many_failures_stop_the_run_early(pool: PgPool) {
    let (_, report) = run_against_an_unavailable_provider(&pool, 5000).await;
    assert_eq!(report.exit_code, exit::Exit::TooManyFailures);
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
        // "Forever" written as the largest number: refused, never an overflow or a hang.
        ("DEADLINE_S", "18446744073709551615"),
        ("DB_CONNECT_RETRY_S", "18446744073709551615"),
        ("LEASE_S", "18446744073709551615"),
        ("IDEMPOTENCY_WINDOW_S", "18446744073709551615"),
        ("MAIL_DAILY_QUOTA", "18446744073709551615"),
        ("FLUSH_INTERVAL_MS", "18446744073709551615"),
        ("IDLE_POLL_MS", "18446744073709551615"),
        ("MAIL_RATE_PER_S", "4294967295"),
    ];
    for (var, value) in cases {
        let mut env: Vec<(&str, &str)> = base.iter().copied().filter(|(k, _)| k != var).collect();
        env.push((var, value));
        let (code, _, err) =
            finish(spawn_sender(&["run"], &url, &env), Duration::from_secs(30)).await;
        assert_eq!(code, exit::Exit::Config as i32, "{var}={value}: {err}");
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
    assert_eq!(code, exit::Exit::Config as i32);
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

/// A mistake in the command line itself is a usage error, 64 — never 2, which says "too many
/// failures" to an operator and to the Job's failure policy; help is 0; a malformed value of a
/// flag or a value missing is a usage error too (78 is the environment's). Nothing connects (the
/// URL points nowhere).
#[tokio::test]
async fn a_usage_error_exits_64_never_the_failures_code() {
    let nowhere = "postgres://nobody@127.0.0.1:9/none";
    for args in [
        &["rnu"][..],
        &["run", "--no-such-flag"],
        &["status"],
        &["pause"],
        &["status", "--campaign"],
        &["configure", "--campaign", "c", "--window", "25:00-26:00"],
        &["configure", "--campaign", "c", "--weight", "0"],
        &["configure", "--campaign", "c", "--weight", "1001"],
    ] {
        let (code, _, err) =
            finish(spawn_sender(args, nowhere, &[]), Duration::from_secs(30)).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{args:?}: {err}");
        assert!(
            err.contains("Usage") || err.contains("--help"),
            "{args:?}: no usage said: {err}"
        );
    }
    let (code, out, _) = finish(
        spawn_sender(&["--help"], nowhere, &[]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0);
    assert!(out.contains("Usage"));
}

/// No server at DATABASE_URL at start: bounded retries (DB_CONNECT_RETRY_S), then exit 75 with
/// one line that says what to check — never the password, never a request to the provider.
/// A run with `DB_CONNECT_RETRY_S=2` kept trying for the whole limit, and not much longer.
fn gave_up_at_the_two_second_limit(took: Duration, err: &str) {
    assert!(
        took >= Duration::from_millis(1800),
        "gave up without retrying for the limit: {took:?}\n{err}"
    );
    assert!(
        took < Duration::from_secs(6),
        "DB_CONNECT_RETRY_S=2 not honoured: {took:?}"
    );
}

/// The database goes away under a running worker (here: every connection is accepted and hung up
/// on, so every statement fails). The worker rides it out for `DB_CONNECT_RETRY_S` — trying
/// again with growing waits, the last try at the limit — and then gives up with the database
/// error (`run` exits 75 on it), not before: a PostgreSQL restart or failover shorter than the
/// limit must not end the run. Before the waits were cut to the limit, a 2-s limit gave up at
/// 1.5 s.
#[tokio::test]
async fn a_database_gone_mid_run_is_ridden_out_for_the_whole_limit_then_the_run_ends_with_it() {
    use campaign_sender::store::Store;
    use campaign_sender::worker::RunError;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy(&format!("postgres://campaign_sender_worker@{addr}/app"))
        .unwrap();
    let p = provider(Default::default()).await;
    let limit = Duration::from_secs(2);
    let w = worker_on(config(&p.url), Store::new(pool, CAMPAIGN), limit);
    let t0 = std::time::Instant::now();
    let err = w.run(Default::default()).await.unwrap_err();
    let took = t0.elapsed();
    assert!(
        matches!(err, RunError::Database(l, _) if l == limit),
        "{err}"
    );
    assert!(took >= limit, "gave up before the limit: {took:?}");
    // The limit, one last try (≤ the 200-ms acquire timeout) and leaving the fleet (its write
    // fails as fast): not much more.
    assert!(took < limit + Duration::from_millis(1500), "{took:?}");
    assert_eq!(p.fake.stats().requests, 0);
}

/// The database refuses the pipeline's statements (here the claim: the worker role lost its
/// UPDATE grant) for longer than the limit, after the run has started: the run ends with the
/// database error (`run` exits 75 on it), not with a report that says it reached its deadline.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_claim_refused_past_the_limit_ends_the_run_with_the_database_error(pool: PgPool) {
    use campaign_sender::store::Store;
    use campaign_sender::worker::RunError;
    seed(&pool, CAMPAIGN, 10).await;
    let url = worker_url(&pool).await; // creates the role with docs/roles.sql's grants
    sqlx::query("REVOKE UPDATE ON campaign_targets FROM campaign_sender_worker")
        .execute(&pool)
        .await
        .unwrap();
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_lazy(&url)
        .unwrap();
    let p = provider(Default::default()).await;
    let limit = Duration::from_secs(1);
    let w = worker_on(config(&p.url), Store::new(db, CAMPAIGN), limit);
    let err = w.run(Default::default()).await.unwrap_err();
    assert!(
        matches!(err, RunError::Database(l, _) if l == limit),
        "{err}"
    );
    assert!(err.to_string().contains("permission denied"), "{err}");
    assert_eq!(p.fake.stats().requests, 0);
}

/// A database user can be an email address (a Cloud SQL IAM user is), and the server names it
/// when it refuses a login. Mid-run, when the pool opens a connection again (a password
/// rotation, a failover), that refusal must reach the logs and the run's error by its SQLSTATE
/// only — the same rule as at start.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_login_refused_mid_run_is_shown_by_its_code_never_naming_the_user(pool: PgPool) {
    use campaign_sender::store::Store;
    let role = format!("sender.{}@example.com", std::process::id());
    sqlx::raw_sql(&format!(
        r#"DROP ROLE IF EXISTS "{role}"; CREATE ROLE "{role}" NOLOGIN"#
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut url = reqwest::Url::parse(&database_url(&pool).await).unwrap();
    url.set_username(&role.replace('@', "%40")).unwrap();
    let db = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy(url.as_str())
        .unwrap();
    let p = provider(Default::default()).await;
    let w = worker_on(
        config(&p.url),
        Store::new(db, CAMPAIGN),
        Duration::from_secs(1),
    );
    let err = w.run(Default::default()).await.unwrap_err().to_string();
    sqlx::raw_sql(&format!(r#"DROP ROLE "{role}""#))
        .execute(&pool)
        .await
        .unwrap();
    assert!(err.contains("SQLSTATE 28000"), "{err}");
    assert!(
        !err.contains("example.com"),
        "the user (an address) was printed: {err}"
    );
}

/// A DATABASE_URL naming a database that does not exist (3D000): retried like any refusal
/// (the database may be being created), then exit 75 saying so, with the server's own words —
/// only a refused login is cut down to its code.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_missing_database_is_retried_then_gives_75_naming_it(pool: PgPool) {
    let mut url = reqwest::Url::parse(&database_url(&pool).await).unwrap();
    url.set_path("/cs_no_such_db");
    let p = provider(Default::default()).await;
    let (code, _out, err) = finish(
        spawn_sender(
            &["run"],
            url.as_str(),
            &[
                ("CAMPAIGN_ID", CAMPAIGN),
                ("MAIL_URL", &p.url),
                ("DB_CONNECT_RETRY_S", "2"),
            ],
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::Exit::DatabaseUnavailable as i32, "{err}");
    assert!(err.contains("retrying"), "not retried: {err}");
    assert!(
        err.contains("the database named in DATABASE_URL does not exist"),
        "{err}"
    );
    assert!(
        err.contains(r#"database \"cs_no_such_db\" does not exist"#),
        "the server's words are missing: {err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
}

#[tokio::test]
async fn an_unreachable_database_at_start_is_retried_for_a_bounded_time_then_gives_75() {
    let port = refused_addr().port();
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
    assert_eq!(code, exit::Exit::DatabaseUnavailable as i32, "{err}");
    // It kept trying for the whole DB_CONNECT_RETRY_S (sqlx retries a refused connect within
    // the acquire timeout), and no longer: before the acquire timeout was capped at what is
    // left of the limit, this took 10 s.
    gave_up_at_the_two_second_limit(t0.elapsed(), &err);
    assert!(
        err.contains(&format!(
            "connection refused at 127.0.0.1:{port} — is the server running?"
        )),
        "{err}"
    );
    assert!(
        !err.contains("s3cret-pw"),
        "the password was printed: {err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
}

/// A server that checks passwords (its own, with a scram-sha-256 line for the worker role in
/// pg_hba.conf): a wrong password is retried with backoff for DB_CONNECT_RETRY_S — a rotation
/// can set the role's password after the Secret — then exit 75 with one line saying the login
/// was refused, never the password, never a request; and a password the server starts to accept
/// while the worker retries is picked up and the run completes.
#[tokio::test]
async fn a_wrong_password_is_retried_with_backoff_then_gives_75_and_a_rotation_heals() {
    let server = OwnServer::start(false);
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&server.url())
        .await
        .unwrap();
    campaign_sender::store::MIGRATOR.run(&admin).await.unwrap();
    seed(&admin, CAMPAIGN, 20).await;
    sqlx::raw_sql(include_str!("../../docs/roles.sql"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query(&format!("ALTER ROLE {WORKER_ROLE} PASSWORD 'right-pw'"))
        .execute(&admin)
        .await
        .unwrap();
    let hba: String = sqlx::query_scalar("SHOW hba_file")
        .fetch_one(&admin)
        .await
        .unwrap();
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("host all {WORKER_ROLE} all scram-sha-256\n{rules}"),
    )
    .unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await
        .unwrap();
    let url = |pw: &str| {
        format!(
            "postgres://{WORKER_ROLE}:{pw}@127.0.0.1:{}/postgres",
            server.port
        )
    };
    let try_login = |pw: &'static str| {
        let u = url(pw);
        async move { sqlx::PgConnection::connect(&u).await.map(|_| ()) }
    };
    use sqlx::Connection;
    // The control: the reload took (bounded wait) — a wrong password is refused with 28P01 and
    // the right one logs in — so the runs below meet a server that really checks.
    let t0 = std::time::Instant::now();
    loop {
        match try_login("wrong-pw-123").await {
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("28P01") => break,
            other => assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the server does not check passwords: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    try_login("right-pw").await.expect("the right password");

    let p = provider(FakeConfig::default()).await;
    let env = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", p.url.as_str()),
        ("DB_CONNECT_RETRY_S", "2"),
    ];
    let t0 = std::time::Instant::now();
    let (code, _out, err) = finish(
        spawn_sender(&["run"], &url("wrong-pw-123"), &env),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::Exit::DatabaseUnavailable as i32, "{err}");
    gave_up_at_the_two_second_limit(t0.elapsed(), &err);
    // Backoff from 200 ms, doubling, the last wait cut to the limit: attempts at about 0, 0.2,
    // 0.6, 1.4 and 2.0 s — retried, and not in a tight loop against the server.
    let retries = err.matches("retrying").count();
    assert!(
        (2..=6).contains(&retries),
        "{retries} retries in 2 s:\n{err}"
    );
    assert!(err.contains("the database refused the login"), "{err}");
    // Each retry and the last line show the refusal by its code, not the server's words.
    assert!(
        err.matches("the server refused the login (SQLSTATE 28P01)")
            .count()
            > retries,
        "{err}"
    );
    assert!(
        !err.contains("wrong-pw-123"),
        "the password was printed: {err}"
    );
    // Nor the user the server's refusal names: a Cloud SQL IAM user is an email address.
    assert!(
        !err.contains("campaign_sender_worker"),
        "the login's user was printed: {err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
    assert_eq!(states(&admin).await.get("pending"), Some(&20));

    // A rotation: the worker has the new password before the server does.
    const REFUSED: &str = "password authentication failed";
    let refused_before = server.log_lines(REFUSED);
    let child = spawn_sender(
        &["run"],
        &url("next-pw"),
        &[
            ("CAMPAIGN_ID", CAMPAIGN),
            ("MAIL_URL", p.url.as_str()),
            ("DB_CONNECT_RETRY_S", "30"),
        ],
    );
    // The server has refused it at least once before it learns the new password.
    until_some(Duration::from_secs(30), "a refused login", || async {
        (server.log_lines(REFUSED) > refused_before).then_some(())
    })
    .await;
    sqlx::query(&format!("ALTER ROLE {WORKER_ROLE} PASSWORD 'next-pw'"))
        .execute(&admin)
        .await
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(code, exit::Exit::Done as i32, "{out}\n{err}");
    assert!(err.contains("retrying"), "it never had to retry: {err}");
    assert!(!err.contains("next-pw"), "the password was printed: {err}");
    assert_eq!(states(&admin).await.get("sent"), Some(&20));
    assert_eq!(p.fake.stats().delivered, 20);
}

/// SIGTERM while the database has stopped answering (statements hang, nothing is refused): the
/// pod must still be gone within its grace period. Results are written until the request
/// timeout plus `WRITES_AFTER_REQUESTS` after the stop, not for the whole outage limit (here
/// 60 s), and no stage waits on a statement after that; what is not written comes back after
/// its lease and is re-sent under its key.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_stopping_pod_gives_up_writing_to_a_silent_database_within_its_grace(pool: PgPool) {
    use campaign_sender::rate::LEAVE_TIMEOUT;
    use campaign_sender::store::Store;
    use campaign_sender::worker::WRITES_AFTER_REQUESTS;
    seed(&pool, CAMPAIGN, 5_000).await;
    let p = provider(FakeConfig {
        latency_mean_ms: 50,
        ..Default::default()
    })
    .await;
    let url = worker_url(&pool).await;
    let u = reqwest::Url::parse(&url).unwrap();
    let upstream = tokio::net::lookup_host((u.host_str().unwrap(), u.port().unwrap()))
        .await
        .unwrap()
        .next()
        .unwrap();
    let db = FrozenDb::start(upstream).await;
    let worker_pool = campaign_sender::store::connect::pool(db.url(&url).parse().unwrap(), 8);
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 500;
    let request = cfg.request_timeout();
    let w = worker_on(
        cfg,
        Store::new(worker_pool, CAMPAIGN),
        Duration::from_secs(60),
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { w.run(cancel).await }
    });
    until_some(Duration::from_secs(30), "sending under way", || async {
        (p.fake.stats().delivered >= 200).then_some(())
    })
    .await;
    db.freeze();
    cancel.cancel();
    let t0 = std::time::Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(50), run).await;
    let took = t0.elapsed();
    assert!(ended.is_ok(), "still stopping after {took:?}");
    // Writes until the request timeout plus WRITES_AFTER_REQUESTS after the stop, then leaving
    // the fleet (LEAVE_TIMEOUT); the margin is for a loaded machine.
    let bound = request + WRITES_AFTER_REQUESTS + LEAVE_TIMEOUT + Duration::from_millis(1500);
    assert!(took < bound, "stopping took {took:?}, bound {bound:?}");
}
