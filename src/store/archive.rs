//! The statements of `archive`: a finished campaign's rows leave `campaign_targets` for the
//! compact `campaign_archive`, in small batches, and its final counts stay in
//! `archived_campaigns` for `status`.
//!
//! Invariants for all of them:
//! - only a finished campaign moves: no row that is still work (`pending` or `sending`, not
//!   opted out) is ever archived, also one the other system inserts while the archive runs;
//! - each batch is one short transaction that locks only the rows it moves (all of the archived
//!   campaign, none another campaign's workers hold) and gives up at `lock_timeout` rather than
//!   queue; a batch either moves completely or not at all, so an interrupted archive resumes;
//! - the counts are those of the rows moved: each batch adds what it moved, by the outcome it
//!   archived them under, in the same transaction. A row settled while the archive runs (an
//!   `unconfirmed` row a vendor's delivery event makes `sent`) is counted as it moved, and
//!   every row is counted once — in `archived_campaigns` once moved, in the work table until
//!   then — whether the archive runs to the end, is interrupted and resumed, or runs again
//!   after a re-import.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Connection, FromRow, PgPool};

use super::campaigns::TARGET_CAMPAIGNS;

/// A campaign's final counts, as archived.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, FromRow)]
pub struct Archived {
    pub total: i64,
    pub sent: i64,
    pub failed: i64,
    pub opted_out: i64,
    pub unconfirmed: i64,
    pub suppressed: i64,
    pub last_sent_at: Option<DateTime<Utc>>,
    pub started_at: DateTime<Utc>,
    /// When the last row moved; `None` while (or if interrupted while) moving.
    pub archived_at: Option<DateTime<Utc>>,
}

/// How much of a campaign is still work: `pending` and `sending` rows not opted out (the
/// work-set index only).
pub async fn unfinished(pool: &PgPool, campaign_id: &str) -> Result<(i64, i64), sqlx::Error> {
    // language=PostgreSQL
    const UNFINISHED: &str = r#"
        SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'sending')
          FROM campaign_targets
         WHERE campaign_id = $1 AND state IN ('pending', 'sending') AND opted_out_at IS NULL
    "#;
    sqlx::query_as(UNFINISHED)
        .bind(campaign_id)
        .fetch_one(pool)
        .await
}

/// The campaign's rows still in the work table (what an archive would move, for `--dry-run`).
pub async fn rows_left(pool: &PgPool, campaign_id: &str) -> Result<i64, sqlx::Error> {
    // language=PostgreSQL
    sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE campaign_id = $1")
        .bind(campaign_id)
        .fetch_one(pool)
        .await
}

/// Starts (or resumes) an archive: the campaign's row in `archived_campaigns`, its counts at
/// zero for a first archive. A resumed one (`archived_at` still NULL) is left as it is: it holds
/// what its batches moved. A completed one with rows in the work table again (members imported
/// after it, settled since) becomes an archive under way until [`complete`], its counts kept
/// for the new batches to add to.
pub async fn begin(pool: &PgPool, campaign_id: &str) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const BEGIN: &str = r#"
        INSERT INTO archived_campaigns
               (campaign_id, total, sent, failed, opted_out, unconfirmed, suppressed)
        VALUES ($1, 0, 0, 0, 0, 0, 0)
        ON CONFLICT (campaign_id) DO UPDATE
           SET started_at = now(), archived_at = NULL
         WHERE archived_campaigns.archived_at IS NOT NULL
           AND EXISTS (SELECT 1 FROM campaign_targets WHERE campaign_id = $1)
    "#;
    sqlx::query(BEGIN).bind(campaign_id).execute(pool).await?;
    Ok(())
}

/// The archived counts of a campaign, if it is (being) archived.
pub async fn archived(pool: &PgPool, campaign_id: &str) -> Result<Option<Archived>, sqlx::Error> {
    // language=PostgreSQL
    const ARCHIVED: &str = r#"
        SELECT total, sent, failed, opted_out, unconfirmed, suppressed, last_sent_at, started_at,
               archived_at
          FROM archived_campaigns
         WHERE campaign_id = $1
    "#;
    sqlx::query_as(ARCHIVED)
        .bind(campaign_id)
        .fetch_optional(pool)
        .await
}

/// Moves the next `limit` finished rows from member `from` on (inclusive: the first batch
/// starts at `i64::MIN`, which is a member id too) into `campaign_archive` and adds them to the
/// campaign's counts by the outcome each was archived under, in one transaction that waits at
/// most `lock_wait` for a lock. Returns how many moved and the last member moved (`None`:
/// nothing left from `from` on). Needs [`begin`]'s row.
pub async fn move_batch(
    pool: &PgPool,
    campaign_id: &str,
    from: i64,
    limit: i64,
    lock_wait: Duration,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    // language=PostgreSQL
    const MOVE: &str = r#"
        -- The batch's rows are locked (FOR UPDATE re-checks the filter on the latest version of
        -- a row it waited for), so none can become work before the delete.
        WITH batch AS (
            SELECT member_id
              FROM campaign_targets
             WHERE campaign_id = $1 AND member_id >= $2
               AND NOT (state IN ('pending', 'sending') AND opted_out_at IS NULL)
             ORDER BY member_id
             LIMIT $3
               FOR UPDATE
        ),
        moved AS (
            DELETE FROM campaign_targets t
             USING batch b
             WHERE t.campaign_id = $1 AND t.member_id = b.member_id
            RETURNING t.member_id, t.state, t.opted_out_at, t.sent_at, t.last_status, t.attempts,
                      t.email
        ),
        -- The folded address stays: a one-click on an archived mail must find its mailbox.
        kept AS (
            INSERT INTO campaign_archive
                   (campaign_id, member_id, outcome, sent_at, last_status, attempts, email)
            SELECT $1, member_id,
                   CASE WHEN state IN ('pending', 'sending') THEN 'opted_out' ELSE state END,
                   sent_at, last_status, least(attempts, 32767)::smallint,
                   nullif(email_fold(email), '')
              FROM moved
            ON CONFLICT (campaign_id, member_id) DO NOTHING
            RETURNING outcome, sent_at
        ),
        -- The counts are the archived rows' own (a member archived before is not counted again).
        counted AS (
            UPDATE archived_campaigns a
               SET total        = a.total + k.total,
                   sent         = a.sent + k.sent,
                   failed       = a.failed + k.failed,
                   opted_out    = a.opted_out + k.opted_out,
                   unconfirmed  = a.unconfirmed + k.unconfirmed,
                   suppressed   = a.suppressed + k.suppressed,
                   last_sent_at = greatest(a.last_sent_at, k.last_sent_at)
              FROM (SELECT count(*) AS total,
                           count(*) FILTER (WHERE outcome = 'sent') AS sent,
                           count(*) FILTER (WHERE outcome = 'failed') AS failed,
                           count(*) FILTER (WHERE outcome = 'opted_out') AS opted_out,
                           count(*) FILTER (WHERE outcome = 'unconfirmed') AS unconfirmed,
                           count(*) FILTER (WHERE outcome = 'suppressed') AS suppressed,
                           max(sent_at) FILTER (WHERE outcome = 'sent') AS last_sent_at
                      FROM kept) k
             WHERE a.campaign_id = $1
        )
        SELECT count(*), max(member_id) FROM moved
    "#;
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    // language=PostgreSQL
    sqlx::query(&format!(
        "SET LOCAL lock_timeout = '{}ms'",
        lock_wait.as_millis()
    ))
    .execute(&mut *tx)
    .await?;
    let (n, last): (i64, Option<i64>) = sqlx::query_as(MOVE)
        .bind(campaign_id)
        .bind(from)
        .bind(limit)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(last.map(|l| (n, l)))
}

/// Marks the archive under way complete. One already complete keeps its moment: archiving a
/// campaign again with nothing new to move changes nothing.
pub async fn complete(pool: &PgPool, campaign_id: &str) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    sqlx::query(
        "UPDATE archived_campaigns SET archived_at = now()
          WHERE campaign_id = $1 AND archived_at IS NULL",
    )
    .bind(campaign_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Rows moved a batch (one transaction each: short locks, a bounded WAL burst).
pub const BATCH: i64 = 5_000;

/// How a batch that waited too long for a row lock (a worker's write) is tried again.
#[derive(Debug, Clone, Copy)]
pub struct LockRetry {
    /// How long a batch waits for a row lock before it gives up.
    pub wait: Duration,
    /// How many times one batch is tried before the lock wait's error goes up.
    pub tries: u32,
}

impl LockRetry {
    /// `archive`'s: 2 s a try, ten tries, 200 ms apart.
    pub const ARCHIVE: LockRetry = LockRetry {
        wait: Duration::from_secs(2),
        tries: 10,
    };
}

/// Moves every finished row of `campaign_id` into `campaign_archive`, [`BATCH`] rows at a
/// time in member order from the first member on; returns how many moved. A batch that gave up
/// waiting for a row lock is tried again 200 ms later, up to `lock.tries` times; any other
/// error ends it at once. Resumable: a second call moves what the first left.
pub async fn move_all(
    pool: &PgPool,
    campaign_id: &str,
    lock: LockRetry,
) -> Result<i64, sqlx::Error> {
    let (mut from, mut moved) = (i64::MIN, 0i64);
    loop {
        let mut tries = 0;
        let batch = loop {
            match move_batch(pool, campaign_id, from, BATCH, lock.wait).await {
                Err(e) if is_lock_timeout(&e) && tries + 1 < lock.tries => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => break other?,
            }
        };
        let Some((n, last)) = batch else {
            return Ok(moved);
        };
        moved += n;
        match last.checked_add(1) {
            Some(next) => from = next,
            None => return Ok(moved),
        }
    }
}

/// Whether an error is a lock wait given up (`lock_timeout`): the batch is simply tried again.
pub fn is_lock_timeout(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03"))
}

/// Campaigns with rows in the work table, finished, whose last change is older than `cutoff`
/// (for `archive --older-than`). Scans each campaign's rows once (seconds at 13 M rows): an
/// operator's batch command, not a hot path.
pub async fn finished_before(
    pool: &PgPool,
    cutoff: DateTime<Utc>,
) -> Result<Vec<String>, sqlx::Error> {
    // language=PostgreSQL
    let old = format!(
        "{TARGET_CAMPAIGNS}
        SELECT i.campaign_id
          FROM ids i
         WHERE i.campaign_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM campaign_targets w
                            WHERE w.campaign_id = i.campaign_id
                              AND w.state IN ('pending', 'sending') AND w.opted_out_at IS NULL)
           AND (SELECT max(coalesce(updated_at, sent_at)) FROM campaign_targets c
                 WHERE c.campaign_id = i.campaign_id) < $1
         ORDER BY 1"
    );
    sqlx::query_scalar(&old).bind(cutoff).fetch_all(pool).await
}
