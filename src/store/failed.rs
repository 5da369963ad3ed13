//! The operators' statements on failed and retrying rows: the most common reasons (`status`)
//! and `retry-failed`.

use sqlx::FromRow;

use super::{RowState, Store};

/// A count of rows by their last provider status and error class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, FromRow)]
pub struct Reason {
    pub status: Option<i16>,
    pub class: String,
    pub count: i64,
}

/// Which failed rows `retry-failed` selects.
#[derive(Debug, Clone, Default)]
pub struct RetryFilter {
    /// Last provider status is one of these (empty: any).
    pub statuses: Vec<i16>,
    /// Error class is one of these, e.g. `rejected`, `invalid_email` (empty: any).
    pub classes: Vec<String>,
    /// Failed at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}

impl Store {
    /// The most common (last provider status, error class) pairs among rows in `state`
    /// (`failed`, or `pending` for rows waiting to retry), most frequent first.
    ///
    /// Invariant: only the short class and the status are stored per row (never a response
    /// body), so nothing personal can surface here.
    pub async fn reasons(&self, state: RowState, limit: i64) -> Result<Vec<Reason>, sqlx::Error> {
        // language=PostgreSQL
        const REASONS: &str = r#"
            SELECT last_status AS status, coalesce(last_error, 'unknown') AS class, count(*) AS count
              FROM campaign_targets
             WHERE campaign_id = $1
               AND state = $2
               AND ($2 <> 'pending' OR (attempts > 0 AND last_error IS NOT NULL
                                        AND opted_out_at IS NULL))
             GROUP BY 1, 2
             ORDER BY 3 DESC, 1, 2
             LIMIT $3
        "#;
        sqlx::query_as(REASONS)
            .bind(self.campaign_id())
            .bind(state)
            .bind(limit)
            .fetch_all(self.pool())
            .await
    }

    /// `retry-failed`: puts the selected `failed` rows back to `pending` with their attempts
    /// reset. Returns how many rows it moved (or, with `dry_run`, would move).
    ///
    /// Invariants:
    /// - only `failed` rows of this campaign change — never a `sent`, `pending` or `sending`
    ///   row, so a worker's claim is never disturbed;
    /// - an opted-out row is never selected (it must not be mailed);
    /// - the filters narrow (AND): any of `statuses`, any of `classes`, failed at or after
    ///   `since`; empty filters select every failed row;
    /// - the last status and class stay on the row until its next attempt overwrites them.
    pub async fn retry_failed(
        &self,
        filter: &RetryFilter,
        dry_run: bool,
    ) -> Result<u64, sqlx::Error> {
        // language=PostgreSQL
        const SELECTED: &str = r#"
              campaign_id = $1
          AND state = 'failed'
          AND opted_out_at IS NULL
          AND (cardinality($2::int2[]) = 0 OR last_status = ANY($2))
          AND (cardinality($3::text[]) = 0 OR last_error = ANY($3))
          AND ($4::timestamptz IS NULL OR updated_at >= $4)
        "#;
        let count = format!("SELECT count(*) FROM campaign_targets WHERE {SELECTED}");
        let reset = format!(
            "UPDATE campaign_targets
                SET state = 'pending', attempts = 0, not_before = NULL, lease_until = NULL,
                    updated_at = now()
              WHERE {SELECTED}"
        );
        if dry_run {
            let n: i64 = sqlx::query_scalar(&count)
                .bind(self.campaign_id())
                .bind(&filter.statuses)
                .bind(&filter.classes)
                .bind(filter.since)
                .fetch_one(self.pool())
                .await?;
            return Ok(n as u64);
        }
        Ok(sqlx::query(&reset)
            .bind(self.campaign_id())
            .bind(&filter.statuses)
            .bind(&filter.classes)
            .bind(filter.since)
            .execute(self.pool())
            .await?
            .rows_affected())
    }
}
