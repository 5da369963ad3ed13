//! `sender_refused`: the addresses refused for our domain's fault (written by
//! [`super::events`]), and what `suppress --lift-at-vendor` reads and writes of it — which of a
//! campaign's members to take off the vendor's own list, and when each was.
//!
//! The statements here run outside any transaction and never across a vendor call: the command
//! reads the list, asks the vendor address by address, and records each lift as it is answered,
//! so a lift cut short (a signal, a 429 that outlasts its patience) is resumed by a rerun that
//! asks only for the addresses not lifted yet.

use sqlx::{FromRow, PgPool};

/// One address a vendor may have listed after our refusal.
#[derive(Debug, Clone, FromRow)]
pub struct Refused {
    /// The address as the campaign sent to it (the vendor lists the spelling it was given).
    pub email: String,
    /// Already taken off the vendor's list since its last refusal.
    pub lifted: bool,
    /// On our own list for some reason (the member left, or bounced for their own fault): the
    /// vendor's listing is left as a second guard.
    pub ours: bool,
}

/// Invariant: exactly the addresses of campaign `$1`'s members that vendor `$2` reported
/// permanently refused for our domain's fault (`what = 'refused'`, [`super::event`]), each once
/// by its folded mailbox — the rows' own spelling, never one the events carried.
// language=PostgreSQL
const OF_CAMPAIGN: &str = r#"
    SELECT DISTINCT ON (f.email)
           t.email,
           r.lifted_at IS NOT NULL AS lifted,
           EXISTS (SELECT 1 FROM suppressions s WHERE s.email = f.email) AS ours
      FROM provider_events e
      JOIN campaign_targets t ON t.campaign_id = e.campaign_id AND t.member_id = e.member_id
     CROSS JOIN LATERAL (SELECT email_fold(t.email) AS email) f
      JOIN sender_refused r ON r.email = f.email
     WHERE e.campaign_id = $1
       AND e.vendor = $2
       AND e.what = 'refused'
       AND t.email IS NOT NULL
     ORDER BY f.email, t.member_id
"#;

/// The addresses of `campaign` that `vendor` reported refused for our domain's fault.
pub async fn of_campaign(
    pool: &PgPool,
    campaign: &str,
    vendor: &str,
) -> Result<Vec<Refused>, sqlx::Error> {
    sqlx::query_as(OF_CAMPAIGN)
        .bind(campaign)
        .bind(vendor)
        .fetch_all(pool)
        .await
}

/// Invariant: the address is marked lifted in every form it is kept in
/// ([`crate::fold::listings`]); a later refusal clears the mark ([`super::events`]).
// language=PostgreSQL
const LIFTED: &str = r#"
    UPDATE sender_refused SET lifted_at = now()
     WHERE email IN (SELECT email_fold(x) FROM unnest($1::text[]) AS x)
"#;

/// Records that the vendor took `email` off its list (or never had it).
pub async fn lifted(pool: &PgPool, email: &str) -> Result<(), sqlx::Error> {
    let forms = crate::fold::listings(email);
    sqlx::query(LIFTED).bind(&forms).execute(pool).await?;
    Ok(())
}
