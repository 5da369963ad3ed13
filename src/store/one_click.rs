//! The statement of a one-click unsubscribe (`POST /unsubscribe/{token}` on `events`,
//! [`crate::unsubscribe`]): the member of the campaign the token names leaves, at once and for
//! every campaign.

use sqlx::PgPool;

/// What one unsubscribe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsubscribed {
    /// The row was opted out and its address listed (or had been: a repeat changes nothing).
    Done,
    /// No row of that campaign and member is in the work table (archived, or never imported).
    NoSuchRow,
}

/// In one transaction, committed before the person hears 200:
/// 1. the row's `opted_out_at` is set (kept if already set): no pod sends to it after its next
///    pre-send re-check (`OPTOUT_RECHECK_MS`), no claim takes it;
/// 2. its address is listed in `suppressions` (reason `unsubscribe`, source `one-click`), so no
///    later campaign mails it; an address already listed keeps its first listing;
/// 3. one `provider_events` row (vendor `one-click`, one per campaign and member) counts it in
///    the campaign's funnel; a repeat adds none.
///
/// Invariant: a second POST changes nothing; only the row the genuine token names is touched.
pub async fn unsubscribe(
    pool: &PgPool,
    campaign_id: &str,
    member_id: i64,
) -> Result<Unsubscribed, sqlx::Error> {
    // language=PostgreSQL
    const OPT_OUT: &str = r#"
        WITH opted AS (
            UPDATE campaign_targets
               SET opted_out_at = coalesce(opted_out_at, now())
             WHERE campaign_id = $1 AND member_id = $2
            RETURNING email
        ),
        listed AS (
            INSERT INTO suppressions (email, reason, source)
            SELECT email_fold(email), 'unsubscribe', 'one-click' FROM opted
             WHERE email IS NOT NULL AND email <> ''
            ON CONFLICT (email) DO NOTHING
        ),
        counted AS (
            INSERT INTO provider_events (vendor, event_id, what, campaign_id, member_id)
            SELECT 'one-click', $1 || ':' || $2::text, 'unsubscribe', $1, $2 FROM opted
            ON CONFLICT (vendor, event_id) DO NOTHING
        )
        SELECT count(*) FROM opted
    "#;
    let found: i64 = sqlx::query_scalar(OPT_OUT)
        .bind(campaign_id)
        .bind(member_id)
        .fetch_one(pool)
        .await?;
    Ok(if found > 0 {
        Unsubscribed::Done
    } else {
        Unsubscribed::NoSuchRow
    })
}
