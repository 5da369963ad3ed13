//! A campaign by mailbox provider (`status`, the page): the mails sent to each family
//! (`campaign_family_tallies`, kept by the finish) beside what its events said — delivered,
//! deferred (for rate), the recipient's bounces, the sender's refusals by cause, complaints.
//! The events are read by the same one read of the campaign's events as the funnel
//! (`provider_events_campaign_idx`); the sent counts are the tallies, never a count of rows.

use serde::Serialize;
use sqlx::{FromRow, PgPool};

use super::event::Family;

/// One provider's line of a campaign.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AtProvider {
    pub family: String,
    pub sent: i64,
    pub delivered: i64,
    pub deferred: i64,
    /// Of `deferred`, those whose cause was our rate (Gmail 4.7.28, Outlook.com 4.7.650, …).
    pub deferred_for_rate: i64,
    /// The recipient's bounces, hard (and unknown) and soft.
    pub bounced: i64,
    /// The permanent refusals of our own domain, by cause.
    pub refused: Vec<(String, i64)>,
    pub complaints: i64,
    /// Complaints / sent; `None` where the provider reports none per message (Gmail: only
    /// Postmaster Tools has its users' complaint rate).
    pub complaint_rate: Option<f64>,
    /// Bounced / sent.
    pub bounce_rate: f64,
}

#[derive(FromRow)]
struct Counted {
    family: String,
    delivered: i64,
    deferred: i64,
    deferred_for_rate: i64,
    bounced: i64,
    complaints: i64,
}

/// Each provider the campaign sent to or heard from, in the families' order.
pub async fn of_campaign(pool: &PgPool, campaign_id: &str) -> Result<Vec<AtProvider>, sqlx::Error> {
    // language=PostgreSQL
    const SENT: &str = "SELECT family, sent FROM campaign_family_tallies WHERE campaign_id = $1";
    // language=PostgreSQL
    const COUNTED: &str = r#"
        SELECT family,
               count(*) FILTER (WHERE what = 'delivered') AS delivered,
               count(*) FILTER (WHERE what = 'deferred') AS deferred,
               count(*) FILTER (WHERE what = 'deferred' AND cause = 'rate') AS deferred_for_rate,
               count(*) FILTER (WHERE what IN ('hard_bounce', 'soft_bounce')) AS bounced,
               count(*) FILTER (WHERE what = 'complaint') AS complaints
          FROM provider_events
         WHERE campaign_id = $1 AND family IS NOT NULL
         GROUP BY family
    "#;
    // language=PostgreSQL
    const REFUSED: &str = r#"
        SELECT family, coalesce(cause, 'unknown'), count(*)
          FROM provider_events
         WHERE campaign_id = $1 AND what = 'refused' AND family IS NOT NULL
         GROUP BY 1, 2 ORDER BY 3 DESC, 2
    "#;
    let sent: Vec<(String, i64)> = sqlx::query_as(SENT)
        .bind(campaign_id)
        .fetch_all(pool)
        .await?;
    let counted: Vec<Counted> = sqlx::query_as(COUNTED)
        .bind(campaign_id)
        .fetch_all(pool)
        .await?;
    let refused: Vec<(String, String, i64)> = sqlx::query_as(REFUSED)
        .bind(campaign_id)
        .fetch_all(pool)
        .await?;
    Ok(Family::ALL
        .iter()
        .filter_map(|family| {
            let name = family.as_str();
            let sent = sent.iter().find(|(f, _)| f == name).map(|(_, n)| *n);
            let c = counted.iter().find(|c| c.family == name);
            if sent.is_none() && c.is_none() {
                return None;
            }
            let sent = sent.unwrap_or(0);
            let rate = |n: i64| {
                if sent > 0 {
                    n as f64 / sent as f64
                } else {
                    0.0
                }
            };
            let (delivered, deferred, deferred_for_rate, bounced, complaints) =
                c.map_or((0, 0, 0, 0, 0), |c| {
                    (
                        c.delivered,
                        c.deferred,
                        c.deferred_for_rate,
                        c.bounced,
                        c.complaints,
                    )
                });
            Some(AtProvider {
                family: name.to_string(),
                sent,
                delivered,
                deferred,
                deferred_for_rate,
                bounced,
                refused: refused
                    .iter()
                    .filter(|(f, _, _)| f == name)
                    .map(|(_, cause, n)| (cause.clone(), *n))
                    .collect(),
                complaints,
                complaint_rate: (*family != Family::Google).then(|| rate(complaints)),
                bounce_rate: rate(bounced),
            })
        })
        .collect())
}
