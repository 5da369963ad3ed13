//! Schema: the legacy upgrade and concurrent `migrate`.

use std::collections::HashSet;
use std::time::Duration;

use campaign_sender::store::MIGRATOR;
use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

#[sqlx::test(migrations = false)]
async fn a_legacy_table_with_sent_at_rows_migrates_and_those_rows_are_never_sent(pool: PgPool) {
    // The table our users have today, with rows the old CronJob already mailed.
    sqlx::raw_sql(
        "CREATE TABLE campaign_targets (
             campaign_id text, member_id bigint, email text, sent_at timestamptz,
             PRIMARY KEY (campaign_id, member_id));
         INSERT INTO campaign_targets
         SELECT 'spring-sale', g, 'm' || g || '@example.com', CASE WHEN g <= 60 THEN now() - interval '1 day' END
           FROM generate_series(1, 100) g;",
    )
    .execute(&pool)
    .await
    .unwrap();
    MIGRATOR.run(&pool).await.unwrap();

    let st = states(&pool).await;
    assert_eq!((st.get("sent"), st.get("pending")), (Some(&60), Some(&40)));
    // Autovacuum by dead-row count, whatever the table's size (migration …000008).
    let options: Vec<String> = sqlx::query_scalar(
        "SELECT unnest(reloptions) FROM pg_class WHERE relname = 'campaign_targets'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        options,
        [
            "autovacuum_vacuum_scale_factor=0",
            "autovacuum_vacuum_threshold=20000"
        ]
    );
    let p = provider(FakeConfig::default()).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code.code(), 0);
    let delivered: HashSet<i64> = p.fake.deliveries().iter().map(|d| d.member_id).collect();
    assert_eq!(delivered, (61..=100).collect());
    // Another system keeps inserting legacy-shaped rows: accepted, and picked up as work.
    sqlx::query("INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ('spring-sale', 101, NULL)")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(state_of(&pool, 101).await.0, "pending");
}

#[sqlx::test(migrations = false)]
async fn migrate_is_safe_when_four_pods_run_it_at_the_same_moment(pool: PgPool) {
    let url = database_url(&pool).await;
    let children: Vec<_> = (0..4)
        .map(|_| spawn_sender(&["migrate"], &url, &[]))
        .collect();
    for child in children {
        let (code, _, err) = finish(child, Duration::from_secs(60)).await;
        assert_eq!(code, 0, "a concurrent migrate failed: {err}");
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(applied as usize, MIGRATOR.iter().count());
    // And the schema works.
    seed(&pool, CAMPAIGN, 3).await;
    assert_eq!(states(&pool).await.get("pending"), Some(&3));
    // The roles of docs/roles.sql are granted by migrate itself (nothing else granted them in
    // this fresh database): the worker role reads and claims, and still cannot insert.
    let mut as_worker = reqwest::Url::parse(&url).unwrap();
    as_worker.set_username(WORKER_ROLE).unwrap();
    let worker = PgPool::connect(as_worker.as_str()).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM campaign_targets")
        .fetch_one(&worker)
        .await
        .expect("migrate granted the worker role its reads");
    assert_eq!(n, 3);
    let insert = sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ('x', 1, 'a@b.c')",
    )
    .execute(&worker)
    .await;
    assert!(insert.is_err(), "the worker role may insert");
}

/// The schema as the catalog sees it: columns, constraints, index definitions.
async fn schema(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT 'col ' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
           FROM information_schema.columns WHERE table_name = 'campaign_targets'
         UNION ALL
         SELECT 'con ' || conname || ' ' || pg_get_constraintdef(oid) || ' ' || convalidated
           FROM pg_constraint WHERE conrelid = 'campaign_targets'::regclass
         UNION ALL
         SELECT 'idx ' || pg_get_indexdef(indexrelid) || ' ' || indisvalid
           FROM pg_index WHERE indrelid = 'campaign_targets'::regclass
         UNION ALL
         SELECT 'opt ' || opt FROM pg_class, unnest(reloptions) opt
          WHERE oid = 'campaign_targets'::regclass
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn legacy_table(pool: &PgPool) {
    sqlx::raw_sql(
        "CREATE TABLE campaign_targets (
             campaign_id text, member_id bigint, email text, sent_at timestamptz,
             PRIMARY KEY (campaign_id, member_id));
         INSERT INTO campaign_targets
         SELECT 'spring-sale', g, 'm' || g || '@example.com', CASE WHEN g % 3 = 0 THEN now() END
           FROM generate_series(1, 25000) g;",
    )
    .execute(pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = false)]
async fn the_online_migration_variant_ends_in_the_same_schema_and_data(pool: PgPool) {
    // Reference: the plain migration on a legacy table, in a second database of this test.
    let url = database_url(&pool).await;
    // (Identifiers stop at 63 bytes: a suffix on sqlx's long test name would be cut off.)
    let reference_db = format!("ref_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!("CREATE DATABASE {reference_db}"))
        .execute(&pool)
        .await
        .unwrap();
    let mut ref_url = reqwest::Url::parse(&url).unwrap();
    ref_url.set_path(&format!("/{reference_db}"));
    let reference = PgPool::connect(ref_url.as_str()).await.unwrap();
    legacy_table(&reference).await;
    MIGRATOR.run(&reference).await.unwrap();
    let expected = schema(&reference).await;
    reference.close().await;
    // FORCE: a backend of the closed pool may still be ending (seen on PostgreSQL 18).
    sqlx::query(&format!("DROP DATABASE {reference_db} WITH (FORCE)"))
        .execute(&pool)
        .await
        .unwrap();

    // The online variant, statement by statement (as psql would), then `migrate`.
    legacy_table(&pool).await;
    let script = include_str!("../../docs/online-migration.sql");
    let statements = script
        .split(";\n")
        .map(|s| {
            s.lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|s| !s.trim().is_empty());
    for stmt in statements {
        if stmt.trim_start().starts_with("UPDATE") {
            // "repeat until UPDATE 0"
            let mut rounds = 0;
            while sqlx::query(&stmt)
                .execute(&pool)
                .await
                .unwrap()
                .rows_affected()
                > 0
            {
                rounds += 1;
                assert!(rounds < 100, "backfill does not converge");
            }
            assert!(rounds >= 1);
        } else {
            sqlx::query(&stmt)
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{stmt}: {e}"));
        }
    }
    MIGRATOR.run(&pool).await.unwrap();
    assert_eq!(schema(&pool).await, expected);
    let st = states(&pool).await;
    assert_eq!(
        (st.get("sent"), st.get("pending")),
        (Some(&8333), Some(&16667))
    );
}

/// A half-migrated database (the migrate Job stopped after its first migration) is not ready:
/// `run` waits for the rest, then exits 75 naming the fix, having sent nothing. (No schema at
/// all, and the migrations landing while a pod waits, are `serve::run_waits_for_the_schema…`
/// and `serve::a_worker_started_before_the_migration_starts_sending_once_it_lands`.)
#[sqlx::test(migrations = false)]
async fn a_half_migrated_database_is_not_ready_and_the_worker_says_run_migrate(pool: PgPool) {
    let mut half = sqlx::migrate::Migrator::new(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/migrations"
    )))
    .await
    .unwrap();
    half.migrations = std::borrow::Cow::Owned(half.migrations[..1].to_vec());
    assert!(
        MIGRATOR.iter().count() > 1,
        "the half-migrated case needs two migrations"
    );
    half.run(&pool).await.unwrap();
    seed(&pool, CAMPAIGN, 5).await;
    let p = provider(FakeConfig::default()).await;
    let (code, _out, err) = finish(
        spawn_sender(
            &["run"],
            &database_url(&pool).await,
            &[
                ("CAMPAIGN_ID", CAMPAIGN),
                ("MAIL_URL", &p.url),
                ("DB_CONNECT_RETRY_S", "1"),
            ],
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::DatabaseUnavailable as i32,
        "{err}"
    );
    assert!(err.contains("run `campaign-sender migrate`"), "{err}");
    assert_eq!(p.fake.stats().requests, 0);
}

/// A schema check the server refuses for another reason than a missing table (here a role
/// with no right to read `_sqlx_migrations`) is an error at once, named — not a wait for a
/// migration that would not help.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_schema_check_refused_for_another_reason_fails_at_once_naming_it(pool: PgPool) {
    let role = format!(
        "cs_noperm_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&pool)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&database_url(&pool).await).unwrap();
    url.set_username(&role).unwrap();
    let p = provider(FakeConfig::default()).await;
    let t0 = std::time::Instant::now();
    let (code, _out, err) = finish(
        spawn_sender(
            &["run"],
            url.as_str(),
            &[
                ("CAMPAIGN_ID", CAMPAIGN),
                ("MAIL_URL", &p.url),
                ("DB_CONNECT_RETRY_S", "10"),
            ],
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::NoPermission as i32,
        "{err}"
    );
    assert!(
        err.contains("permission denied on _sqlx_migrations"),
        "{err}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "waited for a migration: {:?}",
        t0.elapsed()
    );
    assert_eq!(p.fake.stats().requests, 0);
}

/// The heartbeat (`lease_until`) and the re-check's stamp (`started_at`; `state`, `lease_until`
/// and `updated_at` rewritten unchanged) can be HOT updates — no new index entries, space
/// reclaimed by page pruning without a VACUUM — only while no index reads those columns, in
/// its key or in its predicate (docs/DESIGN.md, "The table grows").
#[sqlx::test]
async fn no_index_reads_a_column_only_the_heartbeat_or_the_stamp_change(pool: PgPool) {
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index
          WHERE indrelid = 'campaign_targets'::regclass",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(indexes.len() >= 5, "{indexes:?}");
    for def in &indexes {
        for column in ["lease_until", "started_at", "updated_at"] {
            assert!(!def.contains(column), "{def} reads {column}");
        }
    }
}
