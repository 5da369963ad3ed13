//! The statements of `import` ([`crate::import`]): a session of its own, a staging table in one
//! transaction, the duplicate check, and the idempotent insert into `campaign_targets`.
//!
//! Invariant for all of them: everything happens in one transaction, so an import is all or
//! nothing, and the staging rows vanish with it, committed or not.

use futures::Stream;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, FromRow};

/// A connection of its own (not the pool), with session memory sized for a staging table of
/// 1.2 M rows (~80 MB), kept in memory instead of spilled.
pub async fn session(opts: &PgConnectOptions) -> Result<PgConnection, sqlx::Error> {
    // Its statements are slow by design (seconds for a million rows): no slow-statement warnings.
    let opts = opts.clone().disable_statement_logging();
    let mut conn = PgConnection::connect_with(&opts).await?;
    // language=PostgreSQL
    sqlx::query("SET temp_buffers = '256MB'")
        .execute(&mut conn)
        .await?;
    Ok(conn)
}

/// Inside the import's transaction: the staging table
/// `import_rows (line, member_id, email, priority, send_after, data)`.
///
/// Invariant: `ON COMMIT DROP` — the staging rows vanish with the transaction, committed or not.
pub async fn create_staging(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    sqlx::query("SET LOCAL work_mem = '64MB'")
        .execute(&mut *tx)
        .await?;
    // language=PostgreSQL
    sqlx::query(
        "CREATE TEMP TABLE import_rows (line bigint NOT NULL, member_id bigint NOT NULL, email text NOT NULL,
                                        priority integer NOT NULL, send_after timestamptz, data jsonb) ON COMMIT DROP",
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The COPY the reader's chunks are streamed into (COPY text, one line per record).
// language=PostgreSQL
pub const COPY_STAGING: &str =
    "COPY import_rows (line, member_id, email, priority, send_after, data) FROM STDIN";

/// Statistics for the planner (a temp table has none): hash/merge plans for the checks.
pub async fn analyze_staging(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    sqlx::query("ANALYZE import_rows").execute(tx).await?;
    Ok(())
}

/// A line whose member appeared on an earlier line of the same file.
#[derive(Debug, FromRow)]
pub struct Repeat {
    pub line: i64,
    pub member_id: i64,
    pub email: String,
    pub first_line: i64,
}

/// Every repeated line, in line order.
///
/// Invariant: a member appears at most once per file; the first line wins, later ones are the
/// rejects. Found by the database (hash aggregate), so the client holds no id set.
pub fn repeats(tx: &mut PgConnection) -> impl Stream<Item = Result<Repeat, sqlx::Error>> + '_ {
    // language=PostgreSQL
    const REPEATS: &str = r#"
        SELECT d.line, d.member_id, d.email, d.first_line
          FROM (SELECT line, member_id, email,
                       min(line) OVER (PARTITION BY member_id) AS first_line
                  FROM import_rows
                 WHERE member_id IN (SELECT member_id FROM import_rows
                                      GROUP BY member_id HAVING count(*) > 1)) d
         WHERE d.line > d.first_line
         ORDER BY d.line
    "#;
    sqlx::query_as(REPEATS).fetch(tx)
}

/// Drops the repeated lines from the staging table (the first line of each member stays).
pub async fn drop_repeats(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const DROP: &str = r#"
        DELETE FROM import_rows i
         USING (SELECT member_id, min(line) AS first_line FROM import_rows
                 GROUP BY member_id HAVING count(*) > 1) d
         WHERE i.member_id = d.member_id AND i.line > d.first_line
    "#;
    sqlx::query(DROP).execute(tx).await?;
    Ok(())
}

/// Inserts the staged rows the campaign does not have yet; returns how many.
///
/// Invariants:
/// - idempotent: a row the campaign already has is left exactly as it is (its state, its
///   attempts, its address): a `sent` row is never reset, a running worker's lease never
///   disturbed;
/// - a member of the campaign's archive (`campaign_archive`: the campaign was archived, its
///   rows moved out) is one the campaign has: never queued again, whatever became of it, so
///   re-importing the same list after `archive` mails nobody twice;
/// - new rows enter as `pending` with their priority, schedule and template data, every other
///   column at its default;
/// - inserted in key order, so the primary-key index is filled sequentially.
///
/// The fast path skips existing rows with an anti-join and inserts plainly (`ON CONFLICT`'s
/// speculative insertion took 60–80 % longer at 1.2 M rows, docs/BENCHMARKS.md). If another
/// writer inserts one of the same members meanwhile, the fast path meets a unique violation: it
/// is rolled back to a savepoint and the same rows go in with `ON CONFLICT DO NOTHING`.
pub async fn insert_new(tx: &mut PgConnection, campaign_id: &str) -> Result<u64, sqlx::Error> {
    // language=PostgreSQL
    const FAST: &str = r#"
        INSERT INTO campaign_targets (campaign_id, member_id, email, priority, send_after, data)
        SELECT $1, i.member_id, i.email, i.priority, i.send_after, i.data
          FROM import_rows i
         WHERE NOT EXISTS (SELECT 1 FROM campaign_targets t
                            WHERE t.campaign_id = $1 AND t.member_id = i.member_id)
           AND NOT EXISTS (SELECT 1 FROM campaign_archive a
                            WHERE a.campaign_id = $1 AND a.member_id = i.member_id)
         ORDER BY i.member_id
    "#;
    let mut sp = tx.begin().await?;
    match sqlx::query(FAST).bind(campaign_id).execute(&mut *sp).await {
        Ok(r) => {
            sp.commit().await?;
            Ok(r.rows_affected())
        }
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            sp.rollback().await?;
            tracing::info!("members were inserted concurrently; importing around them");
            // language=PostgreSQL
            let racing = format!("{FAST} ON CONFLICT (campaign_id, member_id) DO NOTHING");
            Ok(sqlx::query(&racing)
                .bind(campaign_id)
                .execute(&mut *tx)
                .await?
                .rows_affected())
        }
        Err(e) => Err(e),
    }
}

/// Of the staged rows the campaign already had, how many have another address in the file
/// (not applied: counted, so the operator knows).
pub async fn changed_emails(tx: &mut PgConnection, campaign_id: &str) -> Result<u64, sqlx::Error> {
    // language=PostgreSQL
    const CHANGED: &str = r#"
        SELECT count(*)
          FROM import_rows i
          JOIN campaign_targets t ON t.campaign_id = $1 AND t.member_id = i.member_id
         WHERE t.email IS DISTINCT FROM i.email
    "#;
    let n: i64 = sqlx::query_scalar(CHANGED)
        .bind(campaign_id)
        .fetch_one(tx)
        .await?;
    Ok(n as u64)
}
