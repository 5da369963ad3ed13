//! The statements of a one-click unsubscribe (`POST /unsubscribe/{token}` on `events`,
//! [`crate::unsubscribe`]): the member of the campaign the token names leaves, at once and for
//! every campaign — also when that campaign is archived.

use sqlx::{Connection, PgPool};

/// What one unsubscribe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsubscribed {
    /// The row was opted out and its address listed (or had been: a repeat changes nothing).
    Done,
    /// The campaign is archived: its row's mailbox, kept by the archive, is listed.
    Archived,
    /// No row of that campaign and member, in the work table or the archive (archived before
    /// the archive kept addresses, or never imported).
    NoSuchRow,
}

/// The address of the token's row: in the work table, else in the archive (folded there).
// language=PostgreSQL
const ADDRESS: &str = r#"
    SELECT email, false AS archived FROM campaign_targets WHERE campaign_id = $1 AND member_id = $2
    UNION ALL
    SELECT email, true FROM campaign_archive
     WHERE campaign_id = $1 AND member_id = $2
       AND NOT EXISTS (SELECT 1 FROM campaign_targets WHERE campaign_id = $1 AND member_id = $2)
"#;

/// In one transaction, committed before the person hears 200:
/// 1. the row's `opted_out_at` is set if it was not (a repeat writes nothing): no pod sends to
///    it after its next pre-send re-check (`OPTOUT_RECHECK_MS`), no claim takes it;
/// 2. its address is listed in `suppressions` for `unsubscribe` (source `one-click`) in every
///    form ([`crate::fold::listings`]), beside any other reason it is listed for: no later
///    campaign mails it, and `suppress --export --reason unsubscribe` tells the member table;
/// 3. one `provider_events` row (vendor `one-click`, one per campaign and member) counts it in
///    the campaign's funnel; a repeat adds none.
///
/// An archived campaign's row is gone from the work table, but the archive kept its folded
/// address: step 2 is done with it (and 3), so a click is honoured for every mail ever sent.
///
/// Invariants: a second POST changes nothing; only the row the genuine token names is touched.
pub async fn unsubscribe(
    pool: &PgPool,
    campaign_id: &str,
    member_id: i64,
) -> Result<Unsubscribed, sqlx::Error> {
    // language=PostgreSQL
    const OPT_OUT: &str = r#"
        WITH opted AS (
            UPDATE campaign_targets
               SET opted_out_at = now()
             WHERE campaign_id = $1 AND member_id = $2 AND opted_out_at IS NULL
        ),
        listed AS (
            INSERT INTO suppressions (email, reason, source)
            SELECT DISTINCT email_fold(f), 'unsubscribe', 'one-click' FROM unnest($3::text[]) AS f
             WHERE email_fold(f) <> ''
            ON CONFLICT (email, reason) DO NOTHING
        )
        INSERT INTO provider_events (vendor, event_id, what, campaign_id, member_id)
        VALUES ('one-click', $1 || ':' || $2::text, 'unsubscribe', $1, $2)
        ON CONFLICT (vendor, event_id) DO NOTHING
    "#;
    let mut conn = pool.acquire().await?;
    let mut tx = conn.begin().await?;
    let found: Option<(Option<String>, bool)> = sqlx::query_as(ADDRESS)
        .bind(campaign_id)
        .bind(member_id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some((email, archived)) = found else {
        return Ok(Unsubscribed::NoSuchRow);
    };
    if archived && email.is_none() {
        return Ok(Unsubscribed::NoSuchRow);
    }
    let forms = email
        .as_deref()
        .map(crate::fold::listings)
        .unwrap_or_default();
    sqlx::query(OPT_OUT)
        .bind(campaign_id)
        .bind(member_id)
        .bind(&forms)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(if archived {
        Unsubscribed::Archived
    } else {
        Unsubscribed::Done
    })
}
