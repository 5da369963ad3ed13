//! `archive`: a finished campaign leaves the work table for the compact archive, in batches,
//! without disturbing a campaign that is sending; `status` keeps its final counts.

use std::collections::HashMap;
use std::time::Duration;

use campaign_sender::exit;
use sqlx::PgPool;

use crate::helpers::*;

const DONE: &str = "autumn-sale";

/// `n` rows of `campaign`, settled as a finished campaign: every 10th failed, every 25th opted
/// out before it was sent, every 50th suppressed, every 100th unconfirmed, the rest sent.
async fn seed_finished(pool: &PgPool, campaign: &str, n: i64) {
    seed(pool, campaign, n).await;
    sqlx::query(
        "UPDATE campaign_targets
            SET state = CASE WHEN member_id % 100 = 0 THEN 'unconfirmed'
                             WHEN member_id % 50 = 0 THEN 'suppressed'
                             WHEN member_id % 25 = 0 THEN 'pending'
                             WHEN member_id % 10 = 0 THEN 'failed'
                             ELSE 'sent' END,
                opted_out_at = CASE WHEN member_id % 25 = 0 AND member_id % 50 <> 0 THEN now() END,
                sent_at = CASE WHEN member_id % 10 <> 0 AND member_id % 25 <> 0 THEN now() END,
                last_status = CASE WHEN member_id % 10 = 0 THEN 422 ELSE 202 END,
                attempts = 1, updated_at = now()
          WHERE campaign_id = $1",
    )
    .bind(campaign)
    .execute(pool)
    .await
    .unwrap();
}

/// Someone holds member 5's row of [`DONE`] (a long transaction, a stray psql session) until
/// the returned transaction ends.
async fn hold_member_5(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = pool.begin().await.unwrap();
    sqlx::query(
        "SELECT 1 FROM campaign_targets WHERE campaign_id = $1 AND member_id = 5 FOR UPDATE",
    )
    .bind(DONE)
    .execute(&mut *holder)
    .await
    .unwrap();
    holder
}

/// The outcome of each member as [`seed_finished`] settled it, counted.
fn expected_outcomes(n: i64) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for id in 1..=n {
        let outcome = match id {
            _ if id % 100 == 0 => "unconfirmed",
            _ if id % 50 == 0 => "suppressed",
            _ if id % 25 == 0 => "opted_out",
            _ if id % 10 == 0 => "failed",
            _ => "sent",
        };
        *m.entry(outcome.to_string()).or_insert(0) += 1;
    }
    m
}

async fn archive(pool: &PgPool, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["archive"];
    all.extend_from_slice(args);
    // As the schema owner: archiving deletes rows the operator role may not.
    let child = spawn_sender(&all, &database_url(pool).await, &[]);
    finish(child, Duration::from_secs(120)).await
}

/// `status --campaign DONE --json` as the operator at `url`.
async fn status_json(url: &str) -> serde_json::Value {
    let status = spawn_sender(&["status", "--campaign", DONE, "--json"], url, &[]);
    let (code, out, err) = finish(status, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

async fn rows_of(pool: &PgPool, table: &str, campaign: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {table} WHERE campaign_id = $1"
    ))
    .bind(campaign)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_unfinished_campaign_is_refused_and_nothing_moves(pool: PgPool) {
    seed_finished(&pool, DONE, 100).await;
    sqlx::query(
        "UPDATE campaign_targets SET state = 'pending', opted_out_at = NULL WHERE member_id <= 3",
    )
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("not finished — 3 pending and 0 sending rows; nothing archived"),
        "{err}"
    );
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 100);
    assert_eq!(rows_of(&pool, "archived_campaigns", DONE).await, 0);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_archived_campaign_leaves_the_work_table_and_status_keeps_its_final_counts(
    pool: PgPool,
) {
    // More than two batches.
    seed_finished(&pool, DONE, 12_000).await;
    let (code, out, _) = archive(&pool, &["--campaign", DONE, "--dry-run"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("12000 rows would move"), "{out}");
    assert_eq!(
        rows_of(&pool, "archived_campaigns", DONE).await,
        0,
        "a dry run changes nothing"
    );
    let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("archived 12000 rows"), "{out}");
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
    let outcomes: HashMap<String, i64> = sqlx::query_as(
        "SELECT outcome, count(*) FROM campaign_archive WHERE campaign_id = $1 GROUP BY 1",
    )
    .bind(DONE)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(outcomes, expected_outcomes(12_000));
    let url = operator_url(&pool).await;
    let v = status_json(&url).await;
    assert_eq!(v["counts"]["total"], 12_000);
    assert_eq!(v["counts"]["sent"], outcomes["sent"]);
    assert_eq!(v["counts"]["failed"], outcomes["failed"]);
    assert_eq!(v["counts"]["opted_out"], outcomes["opted_out"]);
    assert_eq!(v["done"], true);
    assert!(v["archived"]["archived_at"].is_string(), "{v}");
    let text = spawn_sender(&["status", "--campaign", DONE], &url, &[]);
    let (_, out, _) = finish(text, Duration::from_secs(20)).await;
    assert!(out.contains("state      archived 20"), "{out}");
}

/// Re-importing the list after `archive` queues only members the campaign never had, `status`
/// counts the archived and the new rows, and archiving the campaign again once those are sent
/// adds them to the archived counts: no row drops out of the totals.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_reimport_after_archive_queues_only_new_members_and_archiving_again_keeps_every_count(
    pool: PgPool,
) {
    seed_finished(&pool, DONE, 100).await;
    let (code, _, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 0, "{err}");
    // The same list again, and three members the campaign never had.
    let csv: String = (1..=103)
        .map(|i| format!("{i},member{i}@example.com\n"))
        .collect();
    let path = temp_path("reimport.csv");
    std::fs::write(&path, format!("member_id,email\n{csv}")).unwrap();
    let url = operator_url(&pool).await;
    let child = spawn_sender(
        &["import", "--campaign", DONE, path.to_str().unwrap()],
        &url,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 0, "{out}\n{err}");
    let queued: Vec<i64> = sqlx::query_scalar(
        "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'pending' ORDER BY 1",
    )
    .bind(DONE)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        queued,
        [101, 102, 103],
        "an archived member was queued again"
    );
    let v = status_json(&url).await;
    assert_eq!(v["counts"]["total"], 103, "{v}");
    assert_eq!(v["counts"]["pending"], 3, "{v}");
    assert_eq!(v["counts"]["sent"], expected_outcomes(100)["sent"], "{v}");
    assert_eq!(v["done"], false);

    // The three are sent; the campaign is archived again, and then once more with nothing new.
    sqlx::query(
        "UPDATE campaign_targets SET state = 'sent', sent_at = now(), attempts = 1
          WHERE campaign_id = $1",
    )
    .bind(DONE)
    .execute(&pool)
    .await
    .unwrap();
    let mut archived_at = serde_json::Value::Null;
    for round in ["again", "with nothing new"] {
        let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
        assert_eq!(code, 0, "{round}: {out}\n{err}");
        assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0, "{round}");
        assert_eq!(
            rows_of(&pool, "campaign_archive", DONE).await,
            103,
            "{round}"
        );
        let v = status_json(&url).await;
        assert_eq!(v["counts"]["total"], 103, "{round}: {v}");
        assert_eq!(
            v["counts"]["sent"],
            expected_outcomes(100)["sent"] + 3,
            "{round}: {v}"
        );
        assert_eq!(
            v["counts"]["failed"],
            expected_outcomes(100)["failed"],
            "{round}: {v}"
        );
        assert_eq!(v["done"], true, "{round}: {v}");
        if round == "with nothing new" {
            assert_eq!(
                v["archived"]["archived_at"], archived_at,
                "nothing moved: {v}"
            );
        }
        archived_at = v["archived"]["archived_at"].clone();
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn older_than_archives_only_finished_campaigns_unchanged_for_that_long(pool: PgPool) {
    seed_finished(&pool, DONE, 50).await;
    seed_finished(&pool, "recent-sale", 50).await;
    seed(&pool, "running-sale", 50).await;
    sqlx::query(
        "UPDATE campaign_targets SET updated_at = now() - interval '40 days'
          WHERE campaign_id IN ($1, 'running-sale')",
    )
    .bind(DONE)
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, err) = archive(&pool, &["--older-than", "30d"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("1 finished campaigns unchanged since"),
        "{out}"
    );
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
    assert_eq!(rows_of(&pool, "campaign_targets", "recent-sale").await, 50);
    assert_eq!(rows_of(&pool, "campaign_targets", "running-sale").await, 50);
}

/// An age no date can be (it once became zero: the cutoff was now, and every finished
/// campaign went) is refused with 64; an age under a day takes campaigns that finished
/// moments ago, so it needs `--yes`, and `--dry-run` shows what it would take first.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_age_that_cannot_be_held_or_under_a_day_archives_nothing_without_yes(pool: PgPool) {
    seed_finished(&pool, DONE, 20).await;
    for huge in ["300000000y", "300000y"] {
        let (code, out, err) = archive(&pool, &["--older-than", huge]).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{huge}: {out}\n{err}");
        assert!(err.contains("--older-than"), "names the flag: {err}");
    }
    for args in [
        &["--older-than", "300000y", "--dry-run"][..],
        &["--older-than", "1s"][..],
    ] {
        let (code, out, err) = archive(&pool, args).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{args:?}: {out}\n{err}");
    }
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 20);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (code, out, err) = archive(&pool, &["--older-than", "1s", "--dry-run"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(DONE) && out.contains("nothing changed"),
        "{out}"
    );
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 20);
    let (code, out, err) = archive(&pool, &["--older-than", "1s", "--yes"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
}

/// `--since` in every command that takes it: an age no date can be is 64 naming the flag,
/// never a panic (101) nor a cutoff of its own choosing.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_since_that_cannot_be_held_is_a_usage_error_in_every_command(pool: PgPool) {
    let url = database_url(&pool).await;
    for args in [
        &["suppress", "--export", "-", "--since", "300000y"][..],
        &["retry-failed", "--campaign", DONE, "--since", "300000y"][..],
        &[
            "resolve",
            "--campaign",
            DONE,
            "--assume-sent",
            "--since",
            "300000y",
        ][..],
    ] {
        let (code, out, err) = finish(spawn_sender(args, &url, &[]), Duration::from_secs(30)).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{args:?}: {out}\n{err}");
        assert!(
            err.contains("--since") && err.contains("longer ago"),
            "{args:?}: {err}"
        );
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn archiving_leaves_a_sending_campaign_undisturbed(pool: PgPool) {
    seed_finished(&pool, DONE, 30_000).await;
    seed(&pool, CAMPAIGN, 3_000).await;
    let p = slow_provider(5).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 1_000;
    let (report, (code, out, err)) = tokio::join!(
        run_to_end(&pool, cfg),
        archive(&pool, &["--campaign", DONE])
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
    assert_eq!(report.stats.sent, 3_000);
    assert_eq!(states(&pool).await["sent"], 3_000);
    let s = p.fake.stats();
    assert_eq!(
        (s.delivered, s.members_delivered_more_than_once),
        (3_000, 0)
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_batch_never_moves_a_row_that_is_still_work(pool: PgPool) {
    // Rows the other system inserts while an archive runs are work: they stay.
    seed_finished(&pool, DONE, 100).await;
    sqlx::query(
        "UPDATE campaign_targets SET state = CASE WHEN member_id <= 2 THEN 'pending' ELSE 'sending' END,
                opted_out_at = NULL
          WHERE member_id <= 4",
    )
    .execute(&pool)
    .await
    .unwrap();
    let moved = campaign_sender::store::archive::move_batch(
        &pool,
        DONE,
        i64::MIN,
        1_000,
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    assert_eq!(moved, Some((96, 100)));
    let left: Vec<i64> = sqlx::query_scalar(
        "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 ORDER BY 1",
    )
    .bind(DONE)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(left, [1, 2, 3, 4]);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_batch_gives_up_on_a_held_lock_at_once_and_only_that_is_retried(pool: PgPool) {
    use campaign_sender::store::archive::{is_lock_timeout, move_batch};
    seed_finished(&pool, DONE, 10).await;
    let holder = hold_member_5(&pool).await;
    let t0 = std::time::Instant::now();
    let held = move_batch(&pool, DONE, i64::MIN, 100, Duration::from_millis(200))
        .await
        .expect_err("the held row blocks the batch");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(is_lock_timeout(&held), "{held}");
    let other = sqlx::query("SELECT 1 / 0")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(!is_lock_timeout(&other), "{other}");
    holder.rollback().await.unwrap();
    // Nothing moved, and with the lock gone the batch goes through.
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 10);
    let moved = move_batch(&pool, DONE, i64::MIN, 100, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(moved, Some((10, 10)));
}

/// `move_all` waits out a row lock held longer than one batch waits (2 s, `LockRetry::ARCHIVE`):
/// the batch that gave up is tried again, and every row moves.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn archiving_rides_out_a_lock_held_longer_than_one_batch_waits(pool: PgPool) {
    use campaign_sender::store::archive::{move_all, LockRetry};
    let lock = LockRetry::ARCHIVE;
    seed_finished(&pool, DONE, 10).await;
    let holder = hold_member_5(&pool).await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(lock.wait + Duration::from_secs(1)).await;
        holder.rollback().await.unwrap();
    });
    let moved = tokio::time::timeout(Duration::from_secs(20), move_all(&pool, DONE, lock))
        .await
        .expect("move_all returns once the lock is gone")
        .expect("a lock wait given up is tried again");
    release.await.unwrap();
    assert_eq!(moved, 10);
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
}

/// A lock that is never released ends `move_all` after its tries, with the lock wait's error
/// and nothing moved.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn archiving_gives_up_on_a_lock_that_is_never_released(pool: PgPool) {
    use campaign_sender::store::archive::{is_lock_timeout, move_all, LockRetry};
    seed_finished(&pool, DONE, 10).await;
    let holder = hold_member_5(&pool).await;
    let lock = LockRetry {
        wait: Duration::from_millis(100),
        tries: 3,
    };
    let held = tokio::time::timeout(Duration::from_secs(20), move_all(&pool, DONE, lock))
        .await
        .expect("the tries end")
        .expect_err("the lock is never released");
    assert!(is_lock_timeout(&held), "{held}");
    holder.rollback().await.unwrap();
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 10);
}

/// Only a lock wait is tried again: any other error (here a role that may not delete) ends
/// `move_all` at once, nothing moved.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn archiving_stops_at_once_on_an_error_waiting_cannot_heal(pool: PgPool) {
    seed_finished(&pool, DONE, 10).await;
    let worker = PgPool::connect(&worker_url(&pool).await).await.unwrap();
    let t0 = std::time::Instant::now();
    let denied = tokio::time::timeout(
        Duration::from_secs(20),
        campaign_sender::store::archive::move_all(
            &worker,
            DONE,
            campaign_sender::store::archive::LockRetry::ARCHIVE,
        ),
    )
    .await
    .expect("an error waiting cannot heal is not retried for ever")
    .expect_err("the worker role may not archive");
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "retried: {:?}",
        t0.elapsed()
    );
    assert!(denied.to_string().contains("permission denied"), "{denied}");
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 10);
}

/// An archive cut off after its first batch (the pod killed, the lock given up) is resumed by
/// `archive` again: the counts it took before the first row moved stand — the rows left are in
/// them already, none is counted twice — and `--dry-run` says it would resume, and no longer
/// once it is complete.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_resumed_archive_counts_every_row_once(pool: PgPool) {
    use campaign_sender::store::archive::{begin, move_batch};
    seed_finished(&pool, DONE, 100).await;
    begin(&pool, DONE).await.unwrap();
    let moved = move_batch(&pool, DONE, i64::MIN, 30, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(moved, Some((30, 30)));
    let (code, out, err) = archive(&pool, &["--campaign", DONE, "--dry-run"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("70 rows would move") && out.contains("resuming"),
        "{out}"
    );
    let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows_of(&pool, "campaign_archive", DONE).await, 100);
    let url = operator_url(&pool).await;
    let v = status_json(&url).await;
    let expected = expected_outcomes(100);
    assert_eq!(v["counts"]["total"], 100, "{v}");
    assert_eq!(v["counts"]["sent"], expected["sent"], "{v}");
    assert_eq!(v["counts"]["unconfirmed"], expected["unconfirmed"], "{v}");
    let (code, out, err) = archive(&pool, &["--campaign", DONE, "--dry-run"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("0 rows would move") && !out.contains("resuming"),
        "{out}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_smallest_and_the_largest_member_ids_are_archived_too(pool: PgPool) {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state, sent_at, attempts)
         SELECT $1, m, 'm@example.com', 'sent', now(), 1
           FROM unnest(ARRAY[-9223372036854775808, -1, 0, 9223372036854775807]::bigint[]) m",
    )
    .bind(DONE)
    .execute(&pool)
    .await
    .unwrap();
    let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("archived 4 rows"), "{out}");
    assert_eq!(rows_of(&pool, "campaign_targets", DONE).await, 0);
    assert_eq!(rows_of(&pool, "campaign_archive", DONE).await, 4);
}

/// Rows settled while the archive runs (a vendor's delivery event makes an `unconfirmed` row
/// `sent` between two batches) are counted as they moved: the counts `status` keeps are the
/// archived rows' own, and the command does not ask to `resolve` rows that are sent.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn rows_settled_while_the_archive_runs_are_counted_as_they_moved(pool: PgPool) {
    use campaign_sender::store::archive::{begin, move_batch};
    seed_finished(&pool, DONE, 1_000).await;
    begin(&pool, DONE).await.unwrap();
    move_batch(&pool, DONE, i64::MIN, 100, Duration::from_secs(2))
        .await
        .unwrap();
    // The events settle every unconfirmed row left (members 200, 300, …, 1000).
    sqlx::query("UPDATE campaign_targets SET state = 'sent', sent_at = now(), unknown_since = NULL WHERE campaign_id = $1 AND state = 'unconfirmed'")
        .bind(DONE)
        .execute(&pool)
        .await
        .unwrap();
    let (code, out, err) = archive(&pool, &["--campaign", DONE]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let rows: HashMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT outcome, count(*) FROM campaign_archive WHERE campaign_id = $1 GROUP BY 1",
    )
    .bind(DONE)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let counted: (i64, i64, i64, i64, i64, i64) = sqlx::query_as(
        "SELECT total, sent, failed, opted_out, unconfirmed, suppressed FROM archived_campaigns WHERE campaign_id = $1",
    )
    .bind(DONE)
    .fetch_one(&pool)
    .await
    .unwrap();
    let of = |k: &str| rows.get(k).copied().unwrap_or(0);
    assert_eq!(
        counted,
        (
            rows.values().sum(),
            of("sent"),
            of("failed"),
            of("opted_out"),
            of("unconfirmed"),
            of("suppressed")
        ),
        "archived_campaigns disagrees with campaign_archive"
    );
    assert_eq!(
        of("unconfirmed"),
        1,
        "only member 100 moved before the events settled the rest"
    );
    assert!(out.contains("1 rows were archived as unconfirmed"), "{out}");
    let v = status_json(&operator_url(&pool).await).await;
    assert_eq!(v["counts"]["unconfirmed"], 1, "{v}");
    assert_eq!(v["counts"]["total"], 1_000, "{v}");
}
