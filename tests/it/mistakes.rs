//! The mistakes an operator makes, each answered: an unknown campaign, a login the database
//! refuses, a missing grant, a closed port, a URL without its scheme, a CSV that is not what
//! `import` reads. Process-level: the exit code and the message are what the operator sees.

use std::time::Duration;

use campaign_sender::exit;
use campaign_sender::store::campaigns;
use sqlx::PgPool;

use crate::helpers::*;

/// `campaign-sender ARGS` as the operator role; (exit code, stdout, stderr).
async fn operator(pool: &PgPool, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let db = operator_url(pool).await;
    finish(spawn_sender(args, &db, env), Duration::from_secs(60)).await
}

async fn settings_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM campaigns")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_typo_in_a_campaign_name_changes_nothing_and_suggests_the_real_one(pool: PgPool) {
    seed(&pool, "spring-sale", 5).await;
    seed(&pool, "autumn-sale", 5).await;
    for args in [
        &["pause", "--campaign", "sprng-sale", "--reason", "typo"][..],
        &["resume", "--campaign", "sprng-sale"],
        &["retry-failed", "--campaign", "sprng-sale", "--dry-run"],
        &["configure", "--campaign", "sprng-sale", "--template", "t2"],
        &["status", "--campaign", "sprng-sale"],
    ] {
        let (code, out, err) = operator(&pool, args, &[]).await;
        assert_eq!(code, exit::Exit::Incomplete as i32, "{args:?}: {out}{err}");
        assert!(
            err.contains("no campaign 'sprng-sale' (known: autumn-sale, spring-sale; did you mean spring-sale?)"),
            "{args:?}: {err}"
        );
        assert!(
            !out.contains("paused since"),
            "{args:?} reported success: {out}"
        );
    }
    assert_eq!(settings_rows(&pool).await, 0, "a settings row was created");
    assert_eq!(campaigns::paused(&pool, "spring-sale").await.unwrap(), None);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn configure_creates_a_campaign_only_when_asked_to(pool: PgPool) {
    let args = ["configure", "--campaign", "new-one", "--template", "t1"];
    let (code, _, err) = operator(&pool, &args, &[]).await;
    assert_eq!(code, exit::Exit::Incomplete as i32, "{err}");
    assert!(err.contains("none yet"), "{err}");
    assert_eq!(settings_rows(&pool).await, 0);
    let (code, out, err) = operator(&pool, &[&args[..], &["--create"]].concat(), &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("new-one: template t1"), "{out}");
    assert_eq!(settings_rows(&pool).await, 1);
}

/// A server of its own whose pg_hba.conf checks the operator role's password
/// (`scram-sha-256`), migrated, with docs/roles.sql applied and the right password set.
async fn password_server() -> (OwnServer, PgPool) {
    let server = OwnServer::start(false);
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&server.url())
        .await
        .unwrap();
    campaign_sender::store::MIGRATOR.run(&admin).await.unwrap();
    seed(&admin, CAMPAIGN, 5).await;
    sqlx::raw_sql(include_str!("../../docs/roles.sql"))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::query(&format!("ALTER ROLE {OPERATOR_ROLE} PASSWORD 'right-pw'"))
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
        format!("host all {OPERATOR_ROLE} all scram-sha-256\n{rules}"),
    )
    .unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await
        .unwrap();
    // The reload took: a wrong password is refused now.
    let wrong = format!(
        "postgres://{OPERATOR_ROLE}:nope@127.0.0.1:{}/postgres",
        server.port
    );
    until_some(
        Duration::from_secs(10),
        "the server checks passwords",
        || async {
            use sqlx::Connection;
            sqlx::PgConnection::connect(&wrong).await.err().map(|_| ())
        },
    )
    .await;
    (server, admin)
}

#[tokio::test]
async fn a_refused_login_or_an_unknown_database_is_said_at_once_to_an_operator() {
    let (server, admin) = password_server().await;
    let url = |pw: &str, db: &str| {
        format!(
            "postgres://{OPERATOR_ROLE}:{pw}@127.0.0.1:{}/{db}",
            server.port
        )
    };
    // DB_CONNECT_RETRY_S is 30 s: what waiting cannot heal must not wait for it.
    let env = [("DB_CONNECT_RETRY_S", "30")];
    for (db_url, expected) in [
        (
            url("wrong-pw", "postgres"),
            "the database refused the login",
        ),
        (
            url("right-pw", "no_such_db"),
            "the database named in DATABASE_URL does not exist",
        ),
    ] {
        let t0 = std::time::Instant::now();
        let (code, _, err) = finish(
            spawn_sender(&["status", "--campaign", CAMPAIGN], &db_url, &env),
            Duration::from_secs(60),
        )
        .await;
        assert_eq!(code, exit::Exit::DatabaseUnavailable as i32, "{err}");
        assert!(err.contains(expected), "{err}");
        assert!(
            !err.contains("retrying"),
            "retried what waiting cannot heal: {err}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "took {:?}",
            t0.elapsed()
        );
        assert!(
            !err.contains("wrong-pw") && !err.contains("right-pw"),
            "{err}"
        );
    }
    // The right ones work.
    let (code, out, err) = finish(
        spawn_sender(
            &["status", "--campaign", CAMPAIGN],
            &url("right-pw", "postgres"),
            &env,
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("5 total"), "{out}");
    drop(admin);
}

#[tokio::test]
async fn a_closed_port_is_waited_for_and_named_as_a_refused_connection() {
    let port = refused_addr().port();
    let url = format!("postgres://{OPERATOR_ROLE}:pw@127.0.0.1:{port}/app");
    let t0 = std::time::Instant::now();
    let (code, _, err) = finish(
        spawn_sender(
            &["status", "--campaign", CAMPAIGN],
            &url,
            &[("DB_CONNECT_RETRY_S", "2")],
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, exit::Exit::DatabaseUnavailable as i32, "{err}");
    assert!(
        t0.elapsed() >= Duration::from_millis(1800),
        "not waited for: {:?}",
        t0.elapsed()
    );
    assert!(err.contains("retrying"), "{err}");
    assert!(
        err.contains(&format!(
            "connection refused at 127.0.0.1:{port} — is the server running?"
        )),
        "{err}"
    );
    assert!(!err.contains("pool timed out"), "{err}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_missing_grant_is_a_permission_error_naming_the_table_and_the_grant(pool: PgPool) {
    seed(&pool, CAMPAIGN, 5).await;
    // The worker role cannot write a campaign's template.
    let worker_db = worker_url(&pool).await;
    let (code, _, err) = finish(
        spawn_sender(
            &["configure", "--campaign", CAMPAIGN, "--template", "t2"],
            &worker_db,
            &[],
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, exit::Exit::NoPermission as i32, "{err}");
    assert!(err.contains("permission denied on campaigns"), "{err}");
    assert!(
        err.contains("the role campaign_sender_worker lacks a grant"),
        "{err}"
    );
    assert!(
        err.contains("GRANT SELECT, INSERT, UPDATE ON campaigns TO campaign_sender_operator;"),
        "{err}"
    );
    // A role with no grants at all: the schema check is refused, at once.
    let nobody = format!(
        "cs_nobody_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    sqlx::raw_sql(&format!("CREATE ROLE {nobody} LOGIN"))
        .execute(&pool)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&database_url(&pool).await).unwrap();
    url.set_username(&nobody).unwrap();
    let (code, _, err) = finish(
        spawn_sender(
            &["status", "--campaign", CAMPAIGN],
            url.as_str(),
            &[("DB_CONNECT_RETRY_S", "30")],
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code, exit::Exit::NoPermission as i32, "{err}");
    assert!(
        err.contains("permission denied on _sqlx_migrations"),
        "{err}"
    );
    assert!(err.contains("docs/roles.sql"), "{err}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mail_url_without_its_scheme_says_to_add_it(pool: PgPool) {
    let db = worker_url(&pool).await;
    for value in ["127.0.0.1:18080/v1/send", "localhost:18080/v1/send"] {
        let (code, _, err) = finish(
            spawn_sender(
                &["run"],
                &db,
                &[("CAMPAIGN_ID", CAMPAIGN), ("MAIL_URL", value)],
            ),
            Duration::from_secs(30),
        )
        .await;
        assert_eq!(code, exit::Exit::Config as i32, "{err}");
        assert!(
            err.contains(&format!(
                "MAIL_URL: must start with http:// or https:// (got '{value}')"
            )),
            "{err}"
        );
    }
}

/// `import` of `text` (stdin) with `args`: (exit code, stdout, stderr).
async fn import(pool: &PgPool, text: &str, args: &[&str]) -> (i32, String, String) {
    import_as(pool, CAMPAIGN, text, args).await
}

/// `import --campaign CAMPAIGN` of `text` (stdin) with `args`.
async fn import_as(
    pool: &PgPool,
    campaign: &str,
    text: &str,
    args: &[&str],
) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt;
    let db = operator_url(pool).await;
    let cmd = [&["import", "--campaign", campaign][..], args, &["-"]].concat();
    let mut child = {
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_campaign-sender"));
        c.args(&cmd)
            .env_clear()
            .env("DATABASE_URL", &db)
            .env("LOG_FORMAT", "json")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        c.spawn().unwrap()
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(text.as_bytes()).await.unwrap();
    drop(stdin);
    finish(child, Duration::from_secs(60)).await
}

async fn imported(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM campaign_targets")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_csv_with_another_separator_is_named_and_read_with_delimiter(pool: PgPool) {
    let semi = "member_id;email\n1;a@example.com\n2;b@example.com\n";
    let (code, _, err) = import(&pool, semi, &[]).await;
    assert_eq!(code, exit::Exit::DataError as i32, "{err}");
    assert!(
        err.contains("line 1: the fields are separated by ';', not ',': pass --delimiter ';'"),
        "{err}"
    );
    assert!(!err.contains("a@example.com"), "{err}");
    assert_eq!(imported(&pool).await, 0);
    let (code, out, err) = import(&pool, semi, &["--delimiter", ";"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("2 imported"), "{out}");
    let tabs = "3\tc@example.com\n";
    let (code, _, err) = import(&pool, tabs, &[]).await;
    assert_eq!(code, exit::Exit::DataError as i32);
    assert!(err.contains("pass --delimiter tab"), "{err}");
    let (code, _, err) = import(&pool, tabs, &["--delimiter", "tab"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(imported(&pool).await, 3);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_header_without_member_id_names_the_header_expected(pool: PgPool) {
    let (code, _, err) = import(&pool, "id,email\n1,a@example.com\n", &[]).await;
    assert_eq!(code, exit::Exit::DataError as i32, "{err}");
    assert!(
        err.contains("line 1: a header without a member_id column: expected member_id,email (found 'id,email')"),
        "{err}"
    );
    assert_eq!(imported(&pool).await, 0);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_empty_file_is_an_error_unless_allowed(pool: PgPool) {
    for text in ["", "member_id,email\n", "\n\n"] {
        let (code, out, err) = import(&pool, text, &[]).await;
        assert_eq!(code, exit::Exit::DataError as i32, "{text:?}: {out}{err}");
        assert!(err.contains("no records in the input"), "{err}");
    }
    let (code, out, err) = import(&pool, "member_id,email\n", &["--allow-empty"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 records read"), "{out}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn what_an_operator_is_told_is_what_happened(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    // A second pause keeps the first's reason, and says so.
    let (code, out, _) = operator(
        &pool,
        &["pause", "--campaign", CAMPAIGN, "--reason", "first"],
        &[],
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        out.contains("paused since") && out.contains("(first)"),
        "{out}"
    );
    let (code, out, _) = operator(
        &pool,
        &["pause", "--campaign", CAMPAIGN, "--reason", "second"],
        &[],
    )
    .await;
    assert_eq!(code, 0);
    assert!(
        out.contains("your reason was not recorded") && out.contains("(first)"),
        "{out}"
    );
    // retry-failed that matched nothing says nothing about sending them.
    let (code, out, _) = operator(&pool, &["retry-failed", "--campaign", CAMPAIGN], &[]).await;
    assert_eq!(code, 0);
    assert!(out.contains("0 failed rows"), "{out}");
    assert!(!out.contains("still paused"), "{out}");
    // A campaign too small for its budget to allow one row says what that means.
    let (_, out, _) = operator(&pool, &["status", "--campaign", CAMPAIGN], &[]).await;
    assert!(
        out.contains("any failure stops a run: 1 % of 50 is less than one row"),
        "{out}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn status_watch_stopped_by_sigterm_ends_quietly(pool: PgPool) {
    seed(&pool, CAMPAIGN, 5).await;
    let db = operator_url(&pool).await;
    let child = spawn_sender(
        &[
            "status",
            "--campaign",
            CAMPAIGN,
            "--watch",
            "--interval-ms",
            "100",
        ],
        &db,
        &[],
    );
    let pid = child.id().unwrap().to_string();
    // It is connected, and the campaign is not done (5 pending): it watches until stopped.
    until_some(Duration::from_secs(30), "status watches", || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE application_name = 'campaign-sender' AND datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (n > 0).then_some(())
    })
    .await;
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(CAMPAIGN), "{out}");
    assert!(
        !err.contains("in-flight") && !err.contains("shutdown requested"),
        "{err}"
    );
}

/// #34 item 7: one alphabet of campaign ids (`campaign_id::problem`), refused where an id is
/// made and where it is sent, naming the character; a campaign made before the rule can still
/// be looked at. A newline in `WORKER_ID` is blamed on `WORKER_ID`, not on `MAIL_URL`.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_campaign_id_that_cannot_travel_is_refused_where_it_is_made_and_sent(pool: PgPool) {
    let csv = "member_id,email\n1,a@example.com\n";
    for (id, shown) in [
        ("spring\nsale", r"'\n' (U+000A)"),
        ("café", "'é' (U+00E9)"),
        ("a:b", "':' (U+003A)"),
    ] {
        let (code, _, err) = import_as(&pool, id, csv, &[]).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{id:?}: {err}");
        assert!(
            err.contains(shown) && err.contains("A-Z a-z 0-9 _ -"),
            "{id:?}: {err}"
        );
        let args = ["configure", "--campaign", id, "--template", "t", "--create"];
        let (code, _, err) = operator(&pool, &args, &[]).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{id:?}: {err}");
        assert!(err.contains(shown), "{id:?}: {err}");
    }
    let long = "x".repeat(129);
    let (code, _, err) = import_as(&pool, &long, csv, &[]).await;
    assert_eq!(code, exit::Exit::Usage as i32, "{err}");
    assert!(err.contains("at most 128") && err.len() < 400, "{err}");
    assert_eq!(imported(&pool).await, 0, "a row was imported");
    assert_eq!(settings_rows(&pool).await, 0, "a settings row was created");

    // Written by another system before the rule: seen, not sent.
    seed(&pool, "legacy.id", 3).await;
    let (code, out, err) = operator(&pool, &["status", "--campaign", "legacy.id"], &[]).await;
    assert_eq!(code, 0, "{out}{err}");
    let db = worker_url(&pool).await;
    let run = |env: Vec<(&'static str, String)>| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spawn_sender(&["run"], &db, &env)
    };
    let mail_url = format!("http://{}/v1/send", refused_addr());
    let (code, _, err) = finish(
        run(vec![
            ("CAMPAIGN_ID", "legacy.id".into()),
            ("MAIL_URL", mail_url.clone()),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::Exit::Config as i32, "{err}");
    assert!(
        err.contains("CAMPAIGN_ID") && err.contains("'.' (U+002E)"),
        "{err}"
    );
    let (code, _, err) = finish(
        run(vec![
            ("CAMPAIGN_ID", CAMPAIGN.into()),
            ("MAIL_URL", mail_url),
            ("WORKER_ID", "pod-1\nforged".into()),
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::Exit::Config as i32, "{err}");
    assert!(
        err.contains("WORKER_ID") && !err.contains("MAIL_URL"),
        "{err}"
    );
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE campaign_id = 'legacy.id' AND state = 'pending'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(pending, 3, "a row of the legacy campaign was touched");
}

/// A stream (a pipe) that ends in the middle of a line was cut off — its producer died — and
/// nothing is imported (65); a named file is complete as it is, final newline or not.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_stream_cut_mid_line_imports_nothing_and_a_file_without_a_final_newline_imports(
    pool: PgPool,
) {
    let db = operator_url(&pool).await;
    let cut = "member_id,email\n1,a@example.com\n2,b@example.co";
    let (code, out, err) = import(&pool, cut, &[]).await;
    assert_eq!(code, exit::Exit::DataError as i32, "{out}\n{err}");
    assert!(err.contains("ended in the middle of a line"), "{err}");
    let rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM campaign_targets")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(rows().await, 0);
    let file = temp_path("no-final-newline.csv");
    std::fs::write(&file, cut).unwrap();
    let (code, out, err) = finish(
        spawn_sender(
            &["import", "--campaign", CAMPAIGN, file.to_str().unwrap()],
            &db,
            &[],
        ),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows().await, 2);
}

/// `--from` and `--reply-to` take exactly one mailbox: several senders, a two-address reply-to
/// and group syntax exit 64 naming the flag, never showing the value, and change nothing; a
/// display name with quotes is stored so that it reads back exactly.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_sender_that_is_not_one_mailbox_is_refused_by_flag_without_its_value(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    for (flag, value) in [
        ("--from", "evil@attacker.com, News <news@example.com>"),
        ("--reply-to", "a@x.com,b@y.com"),
        ("--from", "undisclosed:a@x.com,b@y.com;<c@z.com>"),
    ] {
        let (code, out, err) = operator(
            &pool,
            &["configure", "--campaign", CAMPAIGN, flag, value],
            &[],
        )
        .await;
        assert_eq!(code, exit::Exit::Usage as i32, "{flag} {value}: {out}{err}");
        assert!(err.contains(flag), "{err}");
        assert!(
            !format!("{out}{err}").contains('@'),
            "the value was shown: {out}{err}"
        );
    }
    let s = campaigns::settings(&pool, CAMPAIGN).await.unwrap();
    assert_eq!(
        (s.from_address, s.reply_to),
        (None, None),
        "a refused value was stored"
    );

    let (code, out, err) = operator(
        &pool,
        &[
            "configure",
            "--campaign",
            CAMPAIGN,
            "--reply-to",
            r#"Ann "Q" <reply@example.com>"#,
        ],
        &[],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let stored = campaigns::settings(&pool, CAMPAIGN)
        .await
        .unwrap()
        .reply_to
        .unwrap();
    let m = campaign_sender::mailbox::Mailbox::parse(&stored).unwrap();
    assert_eq!(m.name.as_deref(), Some(r#"Ann "Q""#));
}
