//! The statements on `suppressions`, the provider's suppression list, and those of `resolve` on
//! `unconfirmed` rows.
//!
//! Addresses are compared whole and case-insensitively, in every script: `suppressions.email`
//! holds `email_fold()` of the address (a `CHECK` keeps it so; the function, fixed by a
//! migration, folds all of Unicode whatever the database's collation) and every comparison takes
//! `email_fold()` of the row's. The claim and the re-check before every send consult the list
//! ([`super::Store::claim`], [`super::Store::recheck`]); a listed address is never claimed or
//! sent to, in any campaign.

use futures::stream::BoxStream;
use sqlx::{FromRow, PgConnection, PgPool};

use super::Store;

/// Inside `suppress`'s transaction: the staging table `suppress_rows (line, email, reason)`.
///
/// Invariant: `ON COMMIT DROP` — the staging rows vanish with the transaction, committed or not.
pub async fn create_staging(tx: &mut PgConnection) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    sqlx::query("SET LOCAL work_mem = '64MB'")
        .execute(&mut *tx)
        .await?;
    // language=PostgreSQL
    sqlx::query(
        "CREATE TEMP TABLE suppress_rows (line bigint NOT NULL, email text NOT NULL, reason text NOT NULL)
             ON COMMIT DROP",
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The COPY the reader's chunks are streamed into (COPY text, one line per record).
// language=PostgreSQL
pub const COPY_STAGING: &str = "COPY suppress_rows (line, email, reason) FROM STDIN";

/// What adding a list did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
pub struct Added {
    /// Distinct addresses in the file (lower-cased).
    pub distinct: i64,
    /// Addresses new to the list.
    pub added: i64,
    /// Addresses already listed with another reason (now the file's).
    pub updated: i64,
}

/// Adds the staged addresses to the list.
///
/// Invariants: one entry per lower-cased address (the file's last line for it wins); an
/// address already listed keeps its `created_at` and takes the file's reason, and one listed
/// with the same reason is not written at all (a re-import of the same list changes nothing).
/// Once committed, no claim takes a row of it and the re-check stops a send of one already
/// claimed.
pub async fn add(tx: &mut PgConnection) -> Result<Added, sqlx::Error> {
    // language=PostgreSQL
    const ADD: &str = r#"
        WITH staged AS MATERIALIZED (
            SELECT DISTINCT ON (email_fold(email)) email_fold(email) AS email, reason
              FROM suppress_rows
             ORDER BY email_fold(email), line DESC
        ),
        merged AS (
            INSERT INTO suppressions (email, reason)
            SELECT email, reason FROM staged
            ON CONFLICT (email) DO UPDATE SET reason = EXCLUDED.reason
                WHERE suppressions.reason IS DISTINCT FROM EXCLUDED.reason
            RETURNING xmax = 0 AS inserted
        )
        SELECT (SELECT count(*) FROM staged) AS distinct,
               count(*) FILTER (WHERE inserted) AS added,
               count(*) FILTER (WHERE NOT inserted) AS updated
          FROM merged
    "#;
    sqlx::query_as(ADD).fetch_one(tx).await
}

/// One listed address, as `suppress --export` writes it.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Listed {
    pub email: String,
    pub reason: String,
    pub source: Option<String>,
    pub suppressed_at: chrono::DateTime<chrono::Utc>,
}

/// The list, oldest first, listed at `since` or later, of one of `reasons` (all when empty),
/// as a stream.
pub fn export<'a>(
    pool: &'a PgPool,
    since: Option<chrono::DateTime<chrono::Utc>>,
    reasons: &'a [String],
) -> BoxStream<'a, Result<Listed, sqlx::Error>> {
    // language=PostgreSQL
    const EXPORT: &str = r#"
        SELECT email, reason, source, created_at AS suppressed_at
          FROM suppressions
         WHERE ($1::timestamptz IS NULL OR created_at >= $1)
           AND (cardinality($2::text[]) = 0 OR reason = ANY ($2))
         ORDER BY created_at, email
    "#;
    sqlx::query_as(EXPORT).bind(since).bind(reasons).fetch(pool)
}

/// What lifting a list did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifted {
    /// Addresses taken off the list.
    pub removed: u64,
    /// Rows of any campaign that were `suppressed` for them: back to `pending`.
    pub restored: u64,
}

/// Takes the staged addresses off the list, and puts their `suppressed` rows back to
/// `pending`.
///
/// Invariants: only `suppressed` rows change (found through their partial index), so no sent,
/// failed or claimed row is touched; a restored row is claimable at once (its opt-out, if any,
/// still keeps it out of the work set); an address lifted starts its soft bounces afresh (the
/// ones that listed it would list it again at the next).
pub async fn lift(tx: &mut PgConnection) -> Result<Lifted, sqlx::Error> {
    // language=PostgreSQL
    const REMOVE: &str = r#"
        DELETE FROM suppressions s
         WHERE s.email IN (SELECT email_fold(email) FROM suppress_rows)
    "#;
    // language=PostgreSQL
    const FORGET_SOFT: &str = r#"
        DELETE FROM soft_bounces b
         WHERE b.email IN (SELECT email_fold(email) FROM suppress_rows)
    "#;
    // language=PostgreSQL
    const RESTORE: &str = r#"
        UPDATE campaign_targets t
           SET state = 'pending', updated_at = now()
         WHERE t.state = 'suppressed'
           AND email_fold(t.email) IN (SELECT email_fold(email) FROM suppress_rows)
    "#;
    let removed = sqlx::query(REMOVE).execute(&mut *tx).await?.rows_affected();
    sqlx::query(FORGET_SOFT).execute(&mut *tx).await?;
    let restored = sqlx::query(RESTORE)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    Ok(Lifted { removed, restored })
}

/// Addresses on the list.
pub async fn listed_on(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    // language=PostgreSQL
    sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(conn)
        .await
}

/// A count of a campaign's rows by one label (a suppression reason).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, FromRow)]
pub struct Bucket {
    pub label: String,
    pub count: i64,
}

/// How `resolve` settles `unconfirmed` rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Count them as delivered: a member may have missed the mail.
    AssumeSent,
    /// Send them again under the same key: a member may get it twice.
    Resend,
}

/// The `unconfirmed` rows of a campaign: how many, and the oldest unknown attempt.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, FromRow)]
pub struct Unconfirmed {
    pub count: i64,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

impl Store {
    /// The campaign's `suppressed` rows by the reason their address is listed for (`lifted`
    /// if it has been taken off the list since, by hand). Uses the partial index.
    pub async fn suppressed_by_reason(&self) -> Result<Vec<Bucket>, sqlx::Error> {
        // language=PostgreSQL
        const BY_REASON: &str = r#"
            SELECT coalesce(s.reason, 'lifted') AS label, count(*) AS count
              FROM campaign_targets t
              LEFT JOIN suppressions s ON s.email = email_fold(t.email)
             WHERE t.campaign_id = $1 AND t.state = 'suppressed'
             GROUP BY 1
             ORDER BY 2 DESC, 1
        "#;
        sqlx::query_as(BY_REASON)
            .bind(self.campaign_id())
            .fetch_all(self.pool())
            .await
    }

    /// How many rows are `unconfirmed`, and since when (the oldest unknown attempt).
    pub async fn unconfirmed(&self) -> Result<Unconfirmed, sqlx::Error> {
        // language=PostgreSQL
        const UNCONFIRMED: &str = r#"
            SELECT count(*) AS count, min(unknown_since) AS since
              FROM campaign_targets
             WHERE campaign_id = $1 AND state = 'unconfirmed'
        "#;
        sqlx::query_as(UNCONFIRMED)
            .bind(self.campaign_id())
            .fetch_one(self.pool())
            .await
    }

    /// `resolve`: settles the campaign's `unconfirmed` rows whose unknown attempt began at or
    /// after `since` (all without it). Returns how many it changed (or, with `dry_run`, would).
    ///
    /// Invariants:
    /// - only `unconfirmed` rows change, so no claim is disturbed;
    /// - [`Settle::AssumeSent`]: `sent`, with `sent_at` the moment the unknown attempt began
    ///   and `last_error = 'assumed_sent'`, so an audit can tell them from confirmed sends, and
    ///   added to `campaign_tallies.sent` in the same statement (the tally is the sent rows);
    /// - [`Settle::Resend`]: `pending` with its attempts reset and its unknown attempt
    ///   forgotten (a new window starts if the next attempt is unknown too); an opted-out row
    ///   is never resent (it stays `unconfirmed`).
    pub async fn resolve(
        &self,
        how: Settle,
        since: Option<chrono::DateTime<chrono::Utc>>,
        dry_run: bool,
    ) -> Result<u64, sqlx::Error> {
        // language=PostgreSQL
        const SELECTED: &str = r#"
              campaign_id = $1
          AND state = 'unconfirmed'
          AND ($2::timestamptz IS NULL OR unknown_since >= $2)
          AND ($3 OR opted_out_at IS NULL)
        "#;
        let assume = how == Settle::AssumeSent;
        let statement = if dry_run {
            format!("SELECT count(*) FROM campaign_targets WHERE {SELECTED}")
        } else if assume {
            // The tally is the rows: what is now sent counts toward the brake's lines.
            format!(
                "WITH s AS (UPDATE campaign_targets
                               SET state = 'sent', sent_at = coalesce(sent_at, unknown_since, now()),
                                   last_error = 'assumed_sent', updated_at = now()
                             WHERE {SELECTED} RETURNING 1),
                      tallied AS (INSERT INTO campaign_tallies AS c (campaign_id, sent)
                                  SELECT $1, count(*) FROM s HAVING count(*) > 0
                                  ON CONFLICT (campaign_id) DO UPDATE SET sent = c.sent + excluded.sent)
                 SELECT count(*) FROM s"
            )
        } else {
            format!(
                "WITH s AS (UPDATE campaign_targets
                               SET state = 'pending', attempts = 0, not_before = NULL,
                                   unknown_since = NULL, last_error = 'resend', updated_at = now()
                             WHERE {SELECTED} RETURNING 1)
                 SELECT count(*) FROM s"
            )
        };
        let n: i64 = sqlx::query_scalar(&statement)
            .bind(self.campaign_id())
            .bind(since)
            .bind(assume)
            .fetch_one(self.pool())
            .await?;
        Ok(n as u64)
    }
}
