//! The statements on `suppressions`, the provider's suppression list, and those of `resolve` on
//! `unconfirmed` rows.
//!
//! **One mailbox, one spelling.** `suppressions.email` holds `email_fold()` of the address (a
//! `CHECK` keeps it so; the function, fixed by a migration, is the SQL form of
//! [`crate::fold::fold`]) and every comparison takes `email_fold()` of the row's. The claim and
//! the re-check before every send consult the list ([`super::Store::claim`],
//! [`super::Store::recheck`]); a listed address is never claimed or sent to, in any campaign. An
//! internationalised domain is listed in both its forms ([`crate::fold::listings`]) by every
//! writer that has the address in hand; [`complete_forms`] lists the other form of any listing
//! that lacks it (one written by the workers' finish, or by another system).
//!
//! **An address carries the set of reasons it was listed for**, one row per reason (the primary
//! key is the address and the reason), each with when (`created_at`) and by what (`source`):
//! a listing never hides or overwrites another, a repeat of one changes nothing, and the
//! address stays listed while any reason remains. `suppress --remove` lifts only the reasons it
//! names, by default every one but an unsubscribe and a complaint ([`Reason::kept_by_default`]):
//! those are the member's own word, lifted only when named.

use futures::stream::BoxStream;
use sqlx::{FromRow, PgConnection, PgPool};

use super::Store;
use crate::text_enum::text_enum;

text_enum! {
    /// Why an address is listed (`suppressions.reason`), as this tool writes it. `suppress` may
    /// import other words too (a vendor's own reasons); they are lifted by default.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Reason: "suppression reason" {
        Complaint = "complaint",
        Unsubscribe = "unsubscribe",
        HardBounce = "hard_bounce",
        SoftBounce = "soft_bounce",
        Inactive = "inactive",
        Unspecified = "unspecified",
    }
}

impl Reason {
    /// The member's own word: an unsubscribe or a complaint is lifted only when named.
    pub const KEPT_BY_DEFAULT: [Reason; 2] = [Reason::Complaint, Reason::Unsubscribe];

    /// Whether `suppress --remove` without `--reason` keeps this reason.
    pub fn kept_by_default(reason: &str) -> bool {
        Self::KEPT_BY_DEFAULT.iter().any(|r| r.as_str() == reason)
    }
}

/// The order in which one address's reasons are shown when only one is (`status`): the
/// member's own word first.
// language=PostgreSQL
const PRECEDENCE: &str = "array_position(ARRAY['complaint', 'unsubscribe', 'hard_bounce', \
                           'soft_bounce', 'inactive']::text[], s.reason)";

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

/// The COPY the reader's chunks are streamed into (COPY text, one line per record, and one
/// more for each other form of an internationalised domain, with the same line number).
// language=PostgreSQL
pub const COPY_STAGING: &str = "COPY suppress_rows (line, email, reason) FROM STDIN";

/// What adding a list did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, FromRow)]
pub struct Added {
    /// Distinct (address, reason) listings in the file, every form of an address counted.
    pub listings: i64,
    /// Listings new to the list (an address new to it, or listed now for one more reason).
    pub added: i64,
}

/// Adds the staged listings to the list (source `suppress`).
///
/// Invariants: one row per folded address and reason; a listing already there keeps its
/// `created_at` and `source` (a re-import of the same list changes nothing), and no other
/// reason of the address is touched. Once committed, no claim takes a row of it and the
/// re-check stops a send of one already claimed.
pub async fn add(tx: &mut PgConnection) -> Result<Added, sqlx::Error> {
    // language=PostgreSQL
    const ADD: &str = r#"
        WITH staged AS MATERIALIZED (
            SELECT DISTINCT email_fold(email) AS email, reason
              FROM suppress_rows
             WHERE email_fold(email) <> ''
        ),
        merged AS (
            INSERT INTO suppressions (email, reason, source)
            SELECT email, reason, 'suppress' FROM staged
            ON CONFLICT (email, reason) DO NOTHING
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM staged) AS listings, (SELECT count(*) FROM merged) AS added
    "#;
    sqlx::query_as(ADD).fetch_one(tx).await
}

/// One listing, as `suppress --export` writes it: an address and one of its reasons.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct Listed {
    pub email: String,
    pub reason: String,
    pub source: Option<String>,
    pub suppressed_at: chrono::DateTime<chrono::Utc>,
}

/// The listings, oldest first, each listed for its reason at `since` or later, of one of
/// `reasons` (all when empty), as a stream: an address listed for two reasons is two lines.
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
         ORDER BY created_at, email, reason
    "#;
    sqlx::query_as(EXPORT).bind(since).bind(reasons).fetch(pool)
}

/// Of `reasons`, those that are neither this tool's ([`Reason`]) nor listed for any address:
/// an export or a lift by a reason nobody has is a typo, refused rather than done silently.
pub async fn unknown_reasons(
    pool: &PgPool,
    reasons: &[String],
) -> Result<Vec<String>, sqlx::Error> {
    let mut unknown = Vec::new();
    for r in reasons {
        if r.parse::<Reason>().is_ok() {
            continue;
        }
        // language=PostgreSQL
        let listed: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM suppressions WHERE reason = $1)")
                .bind(r)
                .fetch_one(pool)
                .await?;
        if !listed {
            unknown.push(r.clone());
        }
    }
    Ok(unknown)
}

/// What lifting a list did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lifted {
    /// Listings taken off, per reason.
    pub lifted: Vec<(String, i64)>,
    /// Listings of the file's addresses that stay, per reason (not named, or kept by default).
    pub kept: Vec<(String, i64)>,
    /// Rows of any campaign that were `suppressed` for an address now listed for no reason:
    /// back to `pending`.
    pub restored: u64,
}

/// Takes the staged addresses' listings for `reasons` off the list (without `reasons`: every
/// reason but those [`Reason::kept_by_default`]), and puts back to `pending` the `suppressed`
/// rows of the addresses left listed for no reason at all.
///
/// Invariants: an unsubscribe or a complaint is lifted only when named; only `suppressed`
/// rows change (found through their partial index), so no sent, failed or claimed row is
/// touched; a restored row is claimable at once (its opt-out, if any, still keeps it out of
/// the work set); an address whose soft bounces listed it starts them afresh when that
/// listing is lifted (they would list it again at the next).
pub async fn lift(tx: &mut PgConnection, reasons: &[String]) -> Result<Lifted, sqlx::Error> {
    let kept_by_default: Vec<&str> = Reason::KEPT_BY_DEFAULT.iter().map(|r| r.as_str()).collect();
    // language=PostgreSQL
    const REMOVE: &str = r#"
        WITH gone AS (
            DELETE FROM suppressions s
             WHERE s.email IN (SELECT email_fold(email) FROM suppress_rows)
               AND CASE WHEN cardinality($1::text[]) = 0 THEN s.reason <> ALL ($2::text[])
                        ELSE s.reason = ANY ($1) END
            RETURNING s.email, s.reason
        ),
        forgotten AS (
            DELETE FROM soft_bounces b
             WHERE b.email IN (SELECT email FROM gone WHERE reason = 'soft_bounce')
        )
        SELECT reason, count(*) FROM gone GROUP BY reason ORDER BY reason
    "#;
    // language=PostgreSQL
    const KEPT: &str = r#"
        SELECT s.reason, count(*) FROM suppressions s
         WHERE s.email IN (SELECT email_fold(email) FROM suppress_rows)
         GROUP BY s.reason ORDER BY s.reason
    "#;
    // language=PostgreSQL
    const RESTORE: &str = r#"
        UPDATE campaign_targets t
           SET state = 'pending', updated_at = now()
         WHERE t.state = 'suppressed'
           AND email_fold(t.email) IN (SELECT email_fold(email) FROM suppress_rows)
           AND NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.email = email_fold(t.email))
    "#;
    let lifted = sqlx::query_as(REMOVE)
        .bind(reasons)
        .bind(&kept_by_default)
        .fetch_all(&mut *tx)
        .await?;
    let kept = sqlx::query_as(KEPT).fetch_all(&mut *tx).await?;
    let restored = sqlx::query(RESTORE)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    Ok(Lifted {
        lifted,
        kept,
        restored,
    })
}

/// Addresses on the list (each once, however many reasons it has).
pub async fn listed_on(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    // language=PostgreSQL
    sqlx::query_scalar("SELECT count(DISTINCT email) FROM suppressions")
        .fetch_one(conn)
        .await
}

/// How many listings [`complete_forms`] reads at once.
const FORMS_BATCH: i64 = 1000;

/// Lists the other forms of every internationalised address listed without them
/// ([`crate::fold::listings`]), each with the reason, source and time of the listing it
/// completes. Returns the listings added. Run by `migrate` and by `events` (at start, then
/// hourly), so a listing that only SQL wrote — the workers' finish, another system — is
/// completed within the hour.
///
/// Invariant: it only adds (`ON CONFLICT DO NOTHING`), so it is safe beside every writer and
/// repeated; it reads the list in batches by its key, never the whole of it at once.
pub async fn complete_forms(pool: &PgPool) -> Result<u64, sqlx::Error> {
    // language=PostgreSQL
    const INTERNATIONALISED: &str = r#"
        SELECT email, reason, source, created_at FROM suppressions
         WHERE (email, reason) > ($1, $2)
           AND (email !~ '^[[:ascii:]]*$' OR email ~ '[@.]xn--')
         ORDER BY email, reason
         LIMIT $3
    "#;
    // language=PostgreSQL
    const ADD_FORMS: &str = r#"
        INSERT INTO suppressions (email, reason, source, created_at)
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
        ON CONFLICT (email, reason) DO NOTHING
    "#;
    type Row = (
        String,
        String,
        Option<String>,
        chrono::DateTime<chrono::Utc>,
    );
    let (mut after, mut added) = ((String::new(), String::new()), 0);
    loop {
        let rows: Vec<Row> = sqlx::query_as(INTERNATIONALISED)
            .bind(&after.0)
            .bind(&after.1)
            .bind(FORMS_BATCH)
            .fetch_all(pool)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(added);
        };
        after = (last.0.clone(), last.1.clone());
        let (mut emails, mut reasons, mut sources, mut ats) = (vec![], vec![], vec![], vec![]);
        for (email, reason, source, at) in &rows {
            for form in crate::fold::listings(email).into_iter().skip(1) {
                emails.push(form);
                reasons.push(reason.as_str());
                sources.push(source.as_deref());
                ats.push(*at);
            }
        }
        added += sqlx::query(ADD_FORMS)
            .bind(&emails)
            .bind(&reasons)
            .bind(&sources)
            .bind(&ats)
            .execute(pool)
            .await?
            .rows_affected();
    }
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
    /// The campaign's `suppressed` rows by the reason their address is listed for — the first
    /// of its reasons by [`PRECEDENCE`], so each row counts once — or `lifted` if it has been
    /// taken off the list since, by hand. Uses the partial index.
    pub async fn suppressed_by_reason(&self) -> Result<Vec<Bucket>, sqlx::Error> {
        let by_reason = format!(
            "SELECT coalesce(s.reason, 'lifted') AS label, count(*) AS count
               FROM campaign_targets t
               LEFT JOIN LATERAL (SELECT s.reason FROM suppressions s
                                   WHERE s.email = email_fold(t.email)
                                   ORDER BY {PRECEDENCE} NULLS LAST, s.reason LIMIT 1) s ON true
              WHERE t.campaign_id = $1 AND t.state = 'suppressed'
              GROUP BY 1
              ORDER BY 2 DESC, 1"
        );
        sqlx::query_as(&by_reason)
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
                             WHERE {SELECTED} RETURNING email),
                      tallied AS (INSERT INTO campaign_tallies AS c (campaign_id, sent)
                                  SELECT $1, count(*) FROM s HAVING count(*) > 0
                                  ON CONFLICT (campaign_id) DO UPDATE SET sent = c.sent + excluded.sent
                                  RETURNING 1),
                      per_provider AS (INSERT INTO campaign_family_tallies AS f (campaign_id, family, sent)
                                  SELECT $1, mailbox_family(email), count(*) FROM s
                                   WHERE email IS NOT NULL AND EXISTS (SELECT 1 FROM tallied)
                                   GROUP BY 2 ORDER BY 2
                                  ON CONFLICT (campaign_id, family) DO UPDATE SET sent = f.sent + excluded.sent)
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
