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
    sqlx::query_as("SELECT email, reason FROM suppressions ORDER BY email, reason")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_bad_line_changes_nothing_and_a_good_file_lists_each_address_and_reason_once_folded(
    pool: PgPool,
) {
    let good = [
        "email,reason",
        "Member1@Example.com,hard_bounce",
        "member2@example.com,complaint",
        "member1@example.COM,unsubscribe", // the same address: listed for both reasons
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
        out.contains("4 listings added, 0 already listed as they were; 3 addresses listed"),
        "{out}"
    );
    assert_eq!(
        listed(&pool).await,
        [
            ("member1@example.com".into(), "hard_bounce".into()),
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
        out.contains("1 listings added, 1 already listed as they were; 3 addresses listed"),
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
        out.contains("lifted 1 hard_bounce; kept none; 2 suppressed rows back to pending"),
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
        refusal: None,
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

/// `suppress --export` and `suppress --remove` as the operator, with `args`.
async fn suppress_cli(pool: &PgPool, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["suppress"];
    all.extend_from_slice(args);
    finish(
        spawn_sender(&all, &operator_url(pool).await, &[]),
        Duration::from_secs(30),
    )
    .await
}

async fn reasons_of(pool: &PgPool, email: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT reason FROM suppressions WHERE email = $1 ORDER BY reason")
        .bind(email)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// An unsubscribe is never lost under an older listing, nor freed by a bounce list's removal:
/// a one-click on an address listed as a hard bounce adds its reason, a bounce list imported
/// after it adds one more, the export by `unsubscribe` lists it, and `--remove` of the bounce
/// list lifts only the bounce (the member is still not mailed) until the unsubscribe is named.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_unsubscribe_is_never_lost_under_a_bounce_nor_freed_by_its_removal(pool: PgPool) {
    use campaign_sender::store::one_click::{unsubscribe, Unsubscribed};
    seed(&pool, "earlier", 3).await;
    seed(&pool, CAMPAIGN, 3).await;
    let ann = "member1@example.com";
    let bo = "member2@example.com";
    let (code, _, err) = suppress(&pool, &[&format!("{ann},hard_bounce")], &[]).await;
    assert_eq!(code, 0, "{err}");
    // ann: listed as a bounce, then clicks; bo: clicks, then a bounce list names him.
    for member in [1, 2] {
        assert_eq!(
            unsubscribe(&pool, "earlier", member).await.unwrap(),
            Unsubscribed::Done
        );
    }
    let (code, _, err) = suppress(&pool, &[&format!("{bo},hard_bounce")], &[]).await;
    assert_eq!(code, 0, "{err}");
    for who in [ann, bo] {
        assert_eq!(
            reasons_of(&pool, who).await,
            ["hard_bounce", "unsubscribe"],
            "{who}"
        );
    }
    let (code, out, _) = suppress_cli(&pool, &["--export", "-", "--reason", "UNSUBSCRIBE"]).await;
    assert_eq!(code, 0);
    let exported: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(
        exported,
        [ann, bo],
        "the system of record hears of both: {out}"
    );

    let (code, out, err) = suppress(&pool, &[ann, bo], &["--remove"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lifted 2 hard_bounce; kept 2 unsubscribe"),
        "{out}"
    );
    assert!(
        out.contains("--reason unsubscribe"),
        "says how to lift the rest: {out}"
    );
    let p = slow_provider(0).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.stats.sent, 1, "only member 3 is mailed");
    assert!(p.fake.deliveries().iter().all(|d| d.member_id == 3));

    let (code, out, err) = suppress(&pool, &[ann], &["--remove", "--reason", "unsubscribe"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("lifted 1 unsubscribe; kept none; 1 suppressed rows back"),
        "{out}"
    );
    assert!(reasons_of(&pool, ann).await.is_empty());
    assert_eq!(reasons_of(&pool, bo).await, ["unsubscribe"]);
}

/// A repeated one-click changes nothing: no row of the work table, the list or the events is
/// written again (17 000 repeats once meant 17 000 updates).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_repeated_one_click_writes_nothing(pool: PgPool) {
    use campaign_sender::store::one_click::unsubscribe;
    seed(&pool, CAMPAIGN, 1).await;
    unsubscribe(&pool, CAMPAIGN, 1).await.unwrap();
    let versions = || async {
        sqlx::query_as::<_, (String, String, String)>(
            "SELECT (SELECT xmin::text FROM campaign_targets),
                    (SELECT string_agg(xmin::text, ',') FROM suppressions),
                    (SELECT string_agg(xmin::text, ',') FROM provider_events)",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = versions().await;
    for _ in 0..3 {
        unsubscribe(&pool, CAMPAIGN, 1).await.unwrap();
    }
    assert_eq!(versions().await, before);
}

/// The export is personal data: created 0600, never over an existing file nor through a
/// symbolic link (`--force` replaces a regular file, never a link); by default no cell begins
/// with a formula character (`--raw` writes the bytes); an unknown reason is refused.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_export_is_private_exclusive_and_inert_unless_raw(pool: PgPool) {
    use std::os::unix::fs::PermissionsExt as _;
    sqlx::query(
        "INSERT INTO suppressions (email, reason, source) VALUES
           ('=1+1@x.example', 'unsubscribe', 'suppress'),
           ('+x@y.example', 'complaint', 'suppress'),
           ('ann@example.com', 'hard_bounce', '@vendor')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let path = temp_path("who-left.csv");
    let file = path.to_str().unwrap();
    // umask 022 is the usual one; the file is 0600 all the same.
    let (code, _, err) = suppress_cli(&pool, &["--export", file]).await;
    assert_eq!(code, 0, "{err}");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    for line in text.lines().skip(1) {
        for cell in line.split(',') {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "{line}"
            );
        }
    }
    let (code, _, err) = suppress_cli(&pool, &["--export", file]).await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::Incomplete as i32,
        "{err}"
    );
    assert!(err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text, "untouched");
    let (code, _, err) = suppress_cli(&pool, &["--export", file, "--force", "--raw"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .contains("\n=1+1@x.example,"));

    let target = path.with_file_name("someone-elses.txt");
    std::fs::write(&target, "keep me").unwrap();
    let link = path.with_file_name("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    for extra in [&[][..], &["--force"][..]] {
        let mut args = vec!["--export", link.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (code, _, err) = suppress_cli(&pool, &args).await;
        assert_eq!(
            code,
            campaign_sender::exit::Exit::Incomplete as i32,
            "{extra:?}: {err}"
        );
        assert!(err.contains("symbolic link"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");

    for bad in ["unsubscrbe", ""] {
        let (code, out, err) = suppress_cli(&pool, &["--export", "-", "--reason", bad]).await;
        assert_eq!(
            code,
            campaign_sender::exit::Exit::Usage as i32,
            "{bad:?}: {out}{err}"
        );
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
