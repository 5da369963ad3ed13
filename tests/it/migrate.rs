//! Schema: the legacy upgrade and concurrent `migrate`.

use std::collections::HashSet;
use std::time::Duration;

use campaign_sender::fake_provider::FakeConfig;
use campaign_sender::store::MIGRATOR;
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
    let p = provider(FakeConfig::default()).await;
    let report = worker(&pool, config(&p.url))
        .run(Default::default())
        .await
        .unwrap();
    assert_eq!(report.exit_code, 0);
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
}
