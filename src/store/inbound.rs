//! `inbound_mail`: the mails the mailto of `List-Unsubscribe` brought to `events` through a
//! vendor's inbound route ([`crate::events::inbound`]), counted by what became of them, with
//! when the last one came — so `status` shows a route that went quiet and the mails no token
//! named (a person writing by hand, a mail sent before the token was in the mailto), for an
//! operator to read in the vendor's inbound log. Nothing of a mail is kept: no address, no
//! subject.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// What became of one inbound mail (the table's `CHECK` holds these words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A valid token: its member unsubscribed as by the one-click POST.
    Unsubscribed,
    /// A valid token naming no row in the work table or the archive.
    Unmatched,
    /// No valid token in its `+tag` or its subject: nothing done, to be read by hand.
    NoToken,
}

impl Outcome {
    pub const ALL: [Outcome; 3] = [Outcome::Unsubscribed, Outcome::Unmatched, Outcome::NoToken];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unsubscribed => "unsubscribed",
            Outcome::Unmatched => "unmatched",
            Outcome::NoToken => "no_token",
        }
    }
}

/// One vendor's count of one outcome, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tally {
    pub vendor: String,
    pub outcome: String,
    pub mails: i64,
    pub last_at: DateTime<Utc>,
}

/// Counts one mail of `vendor` as `outcome`, now.
///
/// Invariant: one row per (vendor, outcome), its `mails` only ever grows and `last_at` is the
/// latest mail's (the upsert adds under the row's lock: replicas never lose a count).
pub async fn count(pool: &PgPool, vendor: &str, outcome: Outcome) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const COUNT: &str = r#"
        INSERT INTO inbound_mail (vendor, outcome, mails, last_at) VALUES ($1, $2, 1, now())
        ON CONFLICT (vendor, outcome)
        DO UPDATE SET mails = inbound_mail.mails + 1, last_at = greatest(inbound_mail.last_at, now())
    "#;
    sqlx::query(COUNT)
        .bind(vendor)
        .bind(outcome.as_str())
        .execute(pool)
        .await?;
    Ok(())
}

/// Every vendor's counts, by vendor then outcome.
pub async fn tallies(pool: &PgPool) -> Result<Vec<Tally>, sqlx::Error> {
    // language=PostgreSQL
    const TALLIES: &str = r#"
        SELECT vendor, outcome, mails, last_at FROM inbound_mail ORDER BY vendor, outcome
    "#;
    let rows: Vec<(String, String, i64, DateTime<Utc>)> =
        sqlx::query_as(TALLIES).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|(vendor, outcome, mails, last_at)| Tally {
            vendor,
            outcome,
            mails,
            last_at,
        })
        .collect())
}
