//! The provider's suppression list: `suppress FILE` loads it atomically, a listed address is
//! never sent to in any campaign — also when listed mid-run — and `suppress --remove` lifts it.

use std::io::Write;
use std::time::Duration;

use campaign_sender::exit;
use sqlx::PgPool;

use crate::helpers::*;

/// Writes `lines` to a fresh CSV file and runs `suppress` on it (with `extra` arguments).
async fn suppress(pool: &PgPool, lines: &[&str], extra: &[&str]) -> (i32, String, String) {
    let path = temp_path("suppressions.csv");
    let mut f = std::fs::File::create(&path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
    drop(f);
    let mut args = vec!["suppress", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let child = spawn_sender(&args, &operator_url(pool).await, &[]);
    finish(child, Duration::from_secs(60)).await
}

async fn listed(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as("SELECT email, reason FROM suppressions ORDER BY email")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_bad_line_changes_nothing_and_a_good_file_lists_each_address_once_in_lower_case(
    pool: PgPool,
) {
    let good = [
        "email,reason",
        "Member1@Example.com,hard_bounce",
        "member2@example.com,complaint",
        "member1@example.COM,unsubscribe", // the same address: the last line wins
        "",
        "member3@example.com",
    ];
    let mut bad = good.to_vec();
    bad.push("not-an-address,complaint"); // line 7
    bad.push("member4@example.com,two words"); // line 8
    let (code, out, err) = suppress(&pool, &bad, &[]).await;
    assert_eq!(code, exit::Exit::DataError as i32, "{out}\n{err}");
    assert!(err.contains("line 7") && err.contains("line 8"), "{err}");
    assert!(
        !err.contains('@') && !out.contains('@'),
        "an address was printed: {err}"
    );
    assert!(
        listed(&pool).await.is_empty(),
        "nothing is listed after a bad line"
    );
    let (code, out, err) = suppress(&pool, &good, &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 addresses added, 0 with a new reason, 0 already listed"),
        "{out}"
    );
    assert_eq!(
        listed(&pool).await,
        [
            ("member1@example.com".into(), "unsubscribe".into()),
            ("member2@example.com".into(), "complaint".into()),
            ("member3@example.com".into(), "unspecified".into()),
        ]
    );
    let again = [
        "member2@example.com,complaint",
        "member3@example.com,hard_bounce",
    ];
    let (code, out, err) = suppress(&pool, &again, &[]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "0 addresses added, 1 with a new reason, 1 already listed as they were; 3 listed"
        ),
        "{out}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_listed_address_is_never_sent_to_in_any_campaign_and_remove_lifts_it(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    seed(&pool, "autumn-sale", 10).await;
    let (code, _, err) = suppress(&pool, &["MEMBER3@example.com,hard_bounce"], &[]).await;
    assert_eq!(code, 0, "{err}");
    let p = slow_provider(0).await;
    for campaign in [CAMPAIGN, "autumn-sale"] {
        let mut cfg = config(&p.url);
        cfg.campaign_id = campaign.into();
        let report = run_to_end(&pool, cfg).await;
        assert_eq!((report.stats.sent, report.stats.suppressed), (9, 1));
    }
    assert!(p.fake.deliveries().iter().all(|d| d.member_id != 3));
    assert_eq!(states(&pool).await["suppressed"], 1);
    let (state, attempts, _, _) = state_of(&pool, 3).await;
    assert_eq!(
        (state.as_str(), attempts),
        ("suppressed", 0),
        "never claimed"
    );
    let by_reason = store(&pool).suppressed_by_reason().await.unwrap();
    assert_eq!(
        (by_reason[0].label.as_str(), by_reason[0].count),
        ("hard_bounce", 1)
    );
    let status = spawn_sender(
        &["status", "--campaign", CAMPAIGN],
        &operator_url(&pool).await,
        &[],
    );
    let (_, out, _) = finish(status, Duration::from_secs(20)).await;
    assert!(
        out.contains("suppressed 1 (address on the suppression list: 1 hard_bounce)"),
        "{out}"
    );

    let (code, out, err) = suppress(&pool, &["member3@EXAMPLE.com"], &["--remove"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("1 addresses removed, 2 suppressed rows back to pending"),
        "{out}"
    );
    run_to_end(&pool, config(&p.url)).await;
    assert_eq!(states(&pool).await["sent"], 10);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_address_listed_mid_run_is_not_sent_to_after_the_recheck(pool: PgPool) {
    let (delivered, stats) = block_mid_run(
        &pool,
        "INSERT INTO suppressions (email, reason)
         SELECT 'member' || g || '@example.com', 'complaint'
           FROM generate_series(1, 40) g
          WHERE g > 30 OR g BETWEEN 11 AND 15",
    )
    .await;
    assert!(
        delivered.iter().all(|&m| !blocked_mid_run(m)),
        "sent after listing: {delivered:?}"
    );
    assert_eq!(delivered.len(), 25);
    assert_eq!(stats.suppressed, 15);
    assert_eq!(states(&pool).await["suppressed"], 15);
    assert_eq!(store(&pool).remaining().await.unwrap().total(), 0);
}

/// A block of listed rows ahead of the sendable ones is no reason to idle: each claim that
/// moved rows to `suppressed` made progress, and the next claim follows at once.
#[sqlx::test]
async fn a_block_of_listed_rows_does_not_stall_the_run(pool: PgPool) {
    seed(&pool, CAMPAIGN, 500).await;
    sqlx::query(
        "INSERT INTO suppressions (email, reason)
         SELECT 'member' || g || '@example.com', 'hard_bounce' FROM generate_series(1, 480) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let p = provider(fake_provider::FakeConfig::default()).await;
    let mut cfg = config(&p.url);
    // An idle wait is long here: one per claim of listed rows only (three at least) would take
    // 15 s before the last wait, the one every run makes while its last rows are in flight.
    cfg.idle_poll_ms = 5_000;
    let report = tokio::time::timeout(Duration::from_secs(12), run_to_end(&pool, cfg))
        .await
        .expect("the run idled behind listed rows");
    assert_eq!(
        (report.exit_code.code(), report.stats.sent),
        (0, 20),
        "{report:?}"
    );
    assert_eq!(states(&pool).await.get("suppressed"), Some(&480));
}

/// Lists `ÄNN@EXAMPLE.COM` (a `suppress` file's way) and `BJÖRN@EXAMPLE.COM` (a vendor's bounce),
/// then seeds their lower-case rows: neither is claimed, both become `suppressed`.
async fn folded_listing_stops_its_row(pool: &PgPool) {
    use campaign_sender::events::{Event, What};
    use campaign_sender::store::{events, suppressions};
    let mut tx = pool.begin().await.unwrap();
    suppressions::create_staging(&mut tx).await.unwrap();
    sqlx::query("INSERT INTO suppress_rows VALUES (1, 'ÄNN@EXAMPLE.COM', 'manual')")
        .execute(&mut *tx)
        .await
        .unwrap();
    suppressions::add(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    let bounce = Event {
        id: "ev-1".into(),
        what: What::HardBounce,
        campaign_id: None,
        member_id: None,
        message_id: None,
        email: Some("BJÖRN@EXAMPLE.COM".into()),
        occurred_at: None,
    };
    events::record(
        pool,
        "sendgrid",
        &[bounce],
        None,
        &campaign_sender::config::BrakeConfig::default().rules(),
    )
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         VALUES ($1, 1, 'änn@example.com'), ($1, 2, 'björn@example.com'), ($1, 3, 'eve@example.com')",
    )
    .bind(CAMPAIGN)
    .execute(pool)
    .await
    .unwrap();
    let store = campaign_sender::store::Store::new(pool.clone(), CAMPAIGN);
    let batch = store.claim(10, Duration::from_secs(30)).await.unwrap();
    let claimed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(claimed, [3], "a listed address was claimed in another case");
    assert_eq!(batch.suppressed, 2);
}

/// Suppression is matched in every script, whatever the database's collation: on the C
/// collation (the throwaway cluster's, where `lower()` folds ASCII only) and on an en-US one
/// (ICU, or PostgreSQL 17's builtin C.UTF-8 where the server has no ICU).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_listing_in_capitals_stops_its_lower_case_address_on_c_and_en_us(pool: PgPool) {
    let ctype: String = sqlx::query_scalar(
        "SELECT datctype::text FROM pg_database WHERE datname = current_database()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        ctype, "C",
        "the test database is meant to be on the C collation"
    );
    folded_listing_stops_its_row(&pool).await;

    let has_icu: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let locale = if has_icu {
        "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C'"
    } else {
        "LOCALE_PROVIDER builtin BUILTIN_LOCALE 'C.UTF-8' LOCALE 'C'"
    };
    let name = format!("cs_en_{}", std::process::id());
    sqlx::query(&format!(
        "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' {locale}"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut opts = pool.connect_options().as_ref().clone();
    opts = opts.database(&name);
    let en = sqlx::PgPool::connect_with(opts).await.unwrap();
    campaign_sender::store::MIGRATOR.run(&en).await.unwrap();
    folded_listing_stops_its_row(&en).await;
    en.close().await;
    sqlx::query(&format!("DROP DATABASE {name}"))
        .execute(&pool)
        .await
        .unwrap();
}

/// `suppress --export` writes who left (`email,reason,source,suppressed_at`) for the system that
/// feeds the work table, filtered by age and reason, to a file or standard output.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_list_is_exported_with_its_reasons_and_filters(pool: PgPool) {
    sqlx::query(
        "INSERT INTO suppressions (email, reason, source, created_at) VALUES
           ('old@example.com', 'hard_bounce', 'sendgrid', now() - interval '10 days'),
           ('ann@example.com', 'unsubscribe', 'one-click', now() - interval '1 hour'),
           ('bo@example.com', 'complaint', 'ses', now() - interval '2 hours')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let db = operator_url(&pool).await;
    let run = |args: Vec<String>| {
        let db = db.clone();
        async move {
            let mut all = vec!["suppress"];
            all.extend(args.iter().map(String::as_str));
            finish(spawn_sender(&all, &db, &[]), Duration::from_secs(30)).await
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let (code, out, err) = run(args(&["--export", "-"])).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "email,reason,source,suppressed_at");
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[1].starts_with("old@example.com,hard_bounce,sendgrid,"),
        "oldest first: {out}"
    );
    assert!(!err.contains('@'), "an address outside the file: {err}");

    let filtered = args(&[
        "--export",
        "-",
        "--since",
        "1d",
        "--reason",
        "unsubscribe,hard_bounce",
    ]);
    let (code, out, _) = run(filtered).await;
    assert_eq!(code, 0);
    let emails: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(emails, ["ann@example.com"], "{out}");

    let path = temp_path("export.csv");
    let (code, _, err) = run(args(&["--export", path.to_str().unwrap()])).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
    let _ = std::fs::remove_file(&path);
}
