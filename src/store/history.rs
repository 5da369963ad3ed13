//! A campaign's deliveries over its life, for the status page's chart.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::targets::ONE_CAMPAIGN_ONLY;
use super::Store;

/// The deliveries of one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Minute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    pub sent: i64,
}

impl Store {
    /// Rows delivered per minute since the campaign began, oldest first, minutes without a
    /// delivery left out; an archived campaign's moved rows are counted too.
    ///
    /// Invariant: reads this campaign's rows only (its primary-key range in both tables, see
    /// [`ONE_CAMPAIGN_ONLY`]), so its cost grows with the campaign, not the table.
    pub async fn sent_per_minute(&self) -> Result<Vec<Minute>, sqlx::Error> {
        // language=PostgreSQL
        const PER_MINUTE: &str = r#"
            SELECT date_trunc('minute', sent_at) AS minute, count(*) AS sent
              FROM (SELECT sent_at FROM campaign_targets
                     WHERE campaign_id = $1 AND state = 'sent' AND sent_at IS NOT NULL
                    UNION ALL
                    SELECT sent_at FROM campaign_archive
                     WHERE campaign_id = $1 AND outcome = 'sent' AND sent_at IS NOT NULL) AS s
             GROUP BY 1
             ORDER BY 1
        "#;
        let mut tx = self.pool().begin().await?;
        sqlx::query(ONE_CAMPAIGN_ONLY).execute(&mut *tx).await?;
        let minutes = sqlx::query_as(PER_MINUTE)
            .bind(self.campaign_id())
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(minutes)
    }
}
