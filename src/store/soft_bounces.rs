//! `soft_bounces`: soft bounces that age into a suppression (`SOFT_BOUNCE_LIMIT` within
//! `SOFT_BOUNCE_WINDOW_S`, [`crate::config::BrakeConfig`]).
//!
//! Only what the vendors call the recipient's final temporary failure is a soft bounce
//! ([`crate::events::What::SoftBounce`]: a full or unavailable mailbox, after the vendor's own
//! retries); a delay or a block of our IP or content is not. Each is kept once per address and
//! message — a vendor's retries of one message, and its retries of one event, are one — at the
//! time the vendor says it happened, so a batch that arrives late still counts where it belongs
//! and a soft bounce older than the window counts no more (and is pruned).

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

/// One soft bounce to record.
#[derive(Debug, Clone)]
pub struct SoftBounce<'a> {
    /// The address (folded by the statement); personal data, never logged.
    pub email: &'a str,
    /// What names the message: the vendor's message id, else the row, else the event.
    pub message: String,
    /// When the vendor says it happened (our clock when it does not say, or says the future).
    pub at: DateTime<Utc>,
}

/// Records `bounces` and lists each address that now has `limit` of them within the window
/// (reason `soft_bounce`, source `vendor`), in the caller's transaction. Returns the addresses
/// newly listed.
///
/// Invariants: a message counts once per address (the primary key); only soft bounces newer
/// than `window_s` before now count; an address is listed for `soft_bounce` in every form,
/// beside any other reason it has, and a listing already there is kept as it was.
pub async fn record(
    tx: &mut PgConnection,
    vendor: &str,
    bounces: &[SoftBounce<'_>],
    limit: u64,
    window_s: u64,
) -> Result<u64, sqlx::Error> {
    if bounces.is_empty() {
        return Ok(0);
    }
    let emails: Vec<&str> = bounces.iter().map(|b| b.email).collect();
    let messages: Vec<&str> = bounces.iter().map(|b| b.message.as_str()).collect();
    let ats: Vec<DateTime<Utc>> = bounces.iter().map(|b| b.at).collect();
    // language=PostgreSQL
    const KEEP: &str = r#"
        INSERT INTO soft_bounces (email, message, occurred_at)
        SELECT email_fold(e.email), e.message, least(e.at, now())
          FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS e(email, message, at)
         WHERE e.email <> ''
        ON CONFLICT (email, message) DO NOTHING
    "#;
    sqlx::query(KEEP)
        .bind(&emails)
        .bind(&messages)
        .bind(&ats)
        .execute(&mut *tx)
        .await?;
    // Every form of each address (crate::fold::listings), keyed by the address as the vendor
    // spelled it: the statement folds both sides with email_fold, the one that decides.
    let (mut keys, mut forms) = (Vec::new(), Vec::new());
    for b in bounces {
        for form in crate::fold::listings(b.email) {
            keys.push(b.email);
            forms.push(form);
        }
    }
    // language=PostgreSQL
    const LIST: &str = r#"
        WITH due AS (
            SELECT s.email
              FROM soft_bounces s
             WHERE s.email IN (SELECT email_fold(x) FROM unnest($1::text[]) AS x WHERE x <> '')
               AND s.occurred_at > now() - make_interval(secs => $3)
             GROUP BY s.email
            HAVING count(*) >= $2
        )
        INSERT INTO suppressions (email, reason, source)
        SELECT DISTINCT email_fold(f.form), 'soft_bounce', $4
          FROM unnest($5::text[], $6::text[]) AS f(key, form)
         WHERE email_fold(f.key) IN (SELECT email FROM due) AND email_fold(f.form) <> ''
        ON CONFLICT (email, reason) DO NOTHING
        RETURNING email
    "#;
    let listed: Vec<String> = sqlx::query_scalar(LIST)
        .bind(&emails)
        .bind(limit as i64)
        .bind(window_s as f64)
        .bind(vendor)
        .bind(&keys)
        .bind(&forms)
        .fetch_all(&mut *tx)
        .await?;
    // Addresses, not forms: an internationalised one is listed twice but counts once.
    let primary: std::collections::HashSet<String> =
        bounces.iter().map(|b| crate::fold::fold(b.email)).collect();
    Ok(listed.iter().filter(|e| primary.contains(*e)).count() as u64)
}

/// Forgets soft bounces older than the window: they count no more.
pub async fn prune(pool: &PgPool, window_s: u64) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM soft_bounces WHERE occurred_at < now() - make_interval(secs => $1)",
    )
    .bind(window_s as f64)
    .execute(pool)
    .await?;
    Ok(r.rows_affected())
}
