//! `provider_events` and `webhook_tokens`: what the vendors' events do to our tables
//! (`campaign-sender events`, [`crate::events`]). One transaction per request, committed before
//! the vendor hears 2xx:
//!
//! 1. a Mailgun token is taken for its one event ([`take_token`]);
//! 2. the events are inserted by the vendor's event id; only those not already there go on
//!    (a vendor's retry of a committed request changes nothing) — [`INSERT_NEW`];
//! 3. of those, every address a bounce, complaint, unsubscribe or drop names is listed
//!    ([`SUPPRESS`]): never removed here, so a delivery after a bounce lifts nothing;
//! 4. every row of ours one proves accepted whose attempt had an unknown outcome is `sent`
//!    ([`SETTLE`]);
//! 5. each soft bounce is kept, and an address with `SOFT_BOUNCE_LIMIT` of them in the window
//!    is listed ([`super::soft_bounces`]);
//! 6. and the campaigns' tallies take the rows settled and the complaints and hard bounces of
//!    rows of ours; a campaign pushed over a line is paused ([`super::brake::weigh`]).

use sqlx::{PgConnection, PgPool};

use super::brake::{self, Braked, Line};
use super::event::{funnel_of, Event, Family, What, FUNNEL};
use super::soft_bounces::{self, SoftBounce};

/// What one request's events did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The events not seen before (the rest were the vendor's retries).
    pub fresh: Vec<Fresh>,
    /// Addresses newly listed.
    pub suppressed: u64,
    /// Rows settled as `sent`.
    pub settled: u64,
    /// Addresses listed for their soft bounces.
    pub soft_listed: u64,
    /// Campaigns paused over a line.
    pub braked: Vec<Braked>,
}

/// An event stored by this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fresh {
    /// Its index in the request's events.
    pub at: usize,
    /// Whether it names a row of ours (a campaign and member in the work table); an event of
    /// another tool on the account, or one naming a campaign we do not have, is not.
    pub ours: bool,
}

impl Recorded {
    /// The new events naming no row of ours.
    pub fn unmatched(&self) -> u64 {
        self.fresh.iter().filter(|f| !f.ours).count() as u64
    }
}

/// Why nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum NotRecorded {
    /// A Mailgun token already used for another event: a replay.
    #[error("the token was used for another event")]
    TokenReused,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The rules an event is weighed by: the brake's lines and the soft-bounce rule
/// (`crate::config::BrakeConfig::rules`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    pub lines: brake::Lines,
    /// Soft bounces of one address within the window that list it.
    pub soft_bounce_limit: u64,
    pub soft_bounce_window_s: u64,
}

/// Records `events` of `vendor` in one transaction (`token`: Mailgun's, taken for them), under
/// `rules`.
pub async fn record(
    pool: &PgPool,
    vendor: &str,
    events: &[Event],
    token: Option<&str>,
    rules: &Rules,
) -> Result<Recorded, NotRecorded> {
    let mut tx = pool.begin().await?;
    if let Some(token) = token {
        let first = events.first().map(|e| e.id.as_str()).unwrap_or_default();
        if !take_token(&mut tx, token, first).await? {
            return Err(NotRecorded::TokenReused);
        }
    }
    let new = insert_new(&mut tx, vendor, events).await?;
    // The first of a repeated id in one request is the one stored.
    let mut first = std::collections::HashSet::new();
    let fresh: Vec<Fresh> = (0..events.len())
        .filter_map(|at| {
            let ours = *new.get(&events[at].id)?;
            first.insert(&events[at].id).then_some(Fresh { at, ours })
        })
        .collect();
    let stored: Vec<&Event> = fresh.iter().map(|f| &events[f.at]).collect();
    let suppressed = suppress(&mut tx, vendor, &stored).await?;
    let settled = settle(&mut tx, &stored).await?;
    let soft = soft_bounces_of(&stored);
    let soft_listed = soft_bounces::record(
        &mut tx,
        vendor,
        &soft,
        rules.soft_bounce_limit,
        rules.soft_bounce_window_s,
    )
    .await?;
    let ours: Vec<&Event> = fresh
        .iter()
        .filter(|f| f.ours)
        .map(|f| &events[f.at])
        .collect();
    let added = brake::Added {
        sent: settled.clone(),
        strikes: strikes_of(&ours),
        refusals: refusals_of(&ours),
    };
    let braked = brake::weigh(&mut tx, &added, rules.lines).await?;
    tx.commit().await?;
    Ok(Recorded {
        fresh,
        suppressed,
        settled: settled.iter().map(|(_, _, n)| *n as u64).sum(),
        soft_listed,
        braked,
    })
}

/// The soft bounces among `events`, each named by its message (else its row, else itself).
fn soft_bounces_of<'a>(events: &[&'a Event]) -> Vec<SoftBounce<'a>> {
    let now = chrono::Utc::now();
    events
        .iter()
        .filter(|e| e.what == What::SoftBounce)
        .filter_map(|e| {
            let message = match (&e.message_id, &e.campaign_id, e.member_id) {
                (Some(m), _, _) => format!("message:{m}"),
                (None, Some(c), Some(m)) => format!("row:{c}:{m}"),
                _ => format!("event:{}", e.id),
            };
            Some(SoftBounce {
                email: e.email.as_deref()?,
                message,
                at: e.occurred_at.unwrap_or(now),
            })
        })
        .collect()
}

/// The complaints and hard bounces among `events` (rows of ours), each with its line.
fn strikes_of(events: &[&Event]) -> Vec<(String, i64, Line)> {
    events
        .iter()
        .filter_map(|e| {
            let line = match e.what {
                What::Complaint => Line::Complaint,
                What::HardBounce => Line::Bounce,
                _ => return None,
            };
            Some((e.campaign_id.clone()?, e.member_id?, line))
        })
        .collect()
}

/// The permanent refusals of our own domain among `events` (rows of ours): the sender's brake
/// weighs them per provider.
fn refusals_of(events: &[&Event]) -> Vec<brake::SenderRefusal> {
    events
        .iter()
        .filter(|e| e.what == What::Refused)
        .filter_map(|e| {
            let r = e.refusal.as_ref()?;
            Some(brake::SenderRefusal {
                campaign_id: e.campaign_id.clone()?,
                member_id: e.member_id?,
                family: r.family,
                cause: r.cause,
                code: r.code.clone(),
            })
        })
        .collect()
}

/// Takes `token` for `event_id`: true if it is new, or was taken for this same event (the
/// vendor's retry of a request whose answer it lost, on this replica or another at the same
/// moment); false if another event used it.
///
/// Invariant: a token carries one event, whichever replica sees it (the primary key). `DO
/// UPDATE` (a no-op write) rather than `DO NOTHING` then a read: a replica whose insert waited
/// on another's uncommitted row gets that row as committed, where a second read in the same
/// statement would still see the snapshot from before it, find nothing and call a retry a
/// replay.
async fn take_token(
    tx: &mut PgConnection,
    token: &str,
    event_id: &str,
) -> Result<bool, sqlx::Error> {
    // language=PostgreSQL
    const TAKE: &str = r#"
        INSERT INTO webhook_tokens (token, event_id) VALUES ($1, $2)
        ON CONFLICT (token) DO UPDATE SET event_id = webhook_tokens.event_id
        RETURNING event_id = $2
    "#;
    let ok: Option<bool> = sqlx::query_scalar(TAKE)
        .bind(token)
        .bind(event_id)
        .fetch_one(&mut *tx)
        .await?;
    Ok(ok.unwrap_or(false))
}

/// Forgets tokens older than `max_age_s` (their signatures are refused as stale anyway).
pub async fn prune_tokens(pool: &PgPool, max_age_s: i64) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM webhook_tokens WHERE seen_at < now() - make_interval(secs => $1 * 2)",
    )
    .bind(max_age_s as f64)
    .execute(pool)
    .await?;
    Ok(r.rows_affected())
}

/// Invariant: an event id is stored once per vendor, with whose fault a refusal was (cause,
/// code, family; never the server's words); returns the ids this call stored, each with
/// whether it names a row of ours (the work table's primary key: one probe each).
// language=PostgreSQL
const INSERT_NEW: &str = r#"
    INSERT INTO provider_events AS p (vendor, event_id, what, campaign_id, member_id, cause, code, family)
    SELECT $1, e.id, e.what, e.campaign_id, e.member_id, e.cause, e.code, e.family
      FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[])
           AS e(id, what, campaign_id, member_id, cause, code, family)
    ON CONFLICT (vendor, event_id) DO NOTHING
    RETURNING p.event_id,
              EXISTS (SELECT 1 FROM campaign_targets t
                       WHERE t.campaign_id = p.campaign_id AND t.member_id = p.member_id)
"#;

async fn insert_new(
    tx: &mut PgConnection,
    vendor: &str,
    events: &[Event],
) -> Result<std::collections::HashMap<String, bool>, sqlx::Error> {
    // One request may repeat an event (a batch retried inside a batch): the first counts.
    let mut seen = std::collections::HashSet::new();
    let events: Vec<&Event> = events.iter().filter(|e| seen.insert(&e.id)).collect();
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let whats: Vec<&str> = events.iter().map(|e| e.what.as_str()).collect();
    let campaigns: Vec<Option<&str>> = events.iter().map(|e| e.campaign_id.as_deref()).collect();
    let members: Vec<Option<i64>> = events.iter().map(|e| e.member_id).collect();
    let refusal = |f: fn(&super::event::Refusal) -> Option<&str>| -> Vec<Option<&str>> {
        events
            .iter()
            .map(|e| e.refusal.as_ref().and_then(f))
            .collect()
    };
    let causes = refusal(|r| Some(r.cause.as_str()));
    let codes = refusal(|r| r.code.as_deref());
    // Every event of an address keeps its provider (the status by provider counts them).
    let families: Vec<Option<&str>> = events
        .iter()
        .map(|e| match (&e.refusal, e.email.as_deref()) {
            (Some(r), _) => Some(r.family.as_str()),
            (None, Some(email)) => Some(Family::of(email).as_str()),
            (None, None) => None,
        })
        .collect();
    let rows: Vec<(String, bool)> = sqlx::query_as(INSERT_NEW)
        .bind(vendor)
        .bind(&ids)
        .bind(&whats)
        .bind(&campaigns)
        .bind(&members)
        .bind(&causes)
        .bind(&codes)
        .bind(&families)
        .fetch_all(&mut *tx)
        .await?;
    Ok(rows.into_iter().collect())
}

/// Invariants: an event lists its address for its reason, in every form
/// ([`crate::fold::listings`]); a listing already there (that reason, from any source) keeps
/// its time and source, and no other reason of the address is touched; an event never lifts
/// one (`suppress --remove` is the only way off); a vendor's drop (`Dropped`: its own list) of
/// an address once refused for our domain's fault (`sender_refused`) lists nobody — the
/// vendor listed it after our refusal, not for the recipient.
// language=PostgreSQL
const SUPPRESS: &str = r#"
    INSERT INTO suppressions (email, reason, source)
    SELECT DISTINCT email_fold(e.email), e.reason, $1
      FROM unnest($2::text[], $3::text[], $4::bool[]) AS e(email, reason, dropped)
     WHERE email_fold(e.email) <> ''
       AND NOT (e.dropped AND EXISTS (SELECT 1 FROM sender_refused r
                                       WHERE r.email = email_fold(e.email)))
    ON CONFLICT (email, reason) DO NOTHING
"#;

/// Invariant: an address refused for our domain's fault is kept in every form, its first
/// refusal's provider and cause; a new refusal of an address the vendor lifted (`suppress
/// --lift-at-vendor`) clears `lifted_at`: the vendor has listed it again.
// language=PostgreSQL
const REFUSED: &str = r#"
    INSERT INTO sender_refused (email, family, cause)
    SELECT DISTINCT ON (email_fold(e.email)) email_fold(e.email), e.family, e.cause
      FROM unnest($1::text[], $2::text[], $3::text[]) AS e(email, family, cause)
     WHERE email_fold(e.email) <> ''
    ON CONFLICT (email) DO UPDATE SET lifted_at = NULL
     WHERE sender_refused.lifted_at IS NOT NULL
"#;

async fn suppress(
    tx: &mut PgConnection,
    vendor: &str,
    events: &[&Event],
) -> Result<u64, sqlx::Error> {
    let (mut refused, mut families, mut causes) = (Vec::new(), Vec::new(), Vec::new());
    for e in events.iter().filter(|e| e.what == What::Refused) {
        let (Some(email), Some(r)) = (e.email.as_deref(), e.refusal.as_ref()) else {
            continue;
        };
        for form in crate::fold::listings(email) {
            refused.push(form);
            families.push(r.family.as_str());
            causes.push(r.cause.as_str());
        }
    }
    if !refused.is_empty() {
        sqlx::query(REFUSED)
            .bind(&refused)
            .bind(&families)
            .bind(&causes)
            .execute(&mut *tx)
            .await?;
    }
    let (mut emails, mut reasons, mut dropped) = (Vec::new(), Vec::new(), Vec::new());
    for e in events {
        let (Some(email), Some(reason)) = (e.email.as_deref(), e.what.effect().suppress) else {
            continue;
        };
        for form in crate::fold::listings(email) {
            emails.push(form);
            reasons.push(reason.as_str());
            dropped.push(e.what == What::Dropped);
        }
    }
    if emails.is_empty() {
        return Ok(0);
    }
    let r = sqlx::query(SUPPRESS)
        .bind(vendor)
        .bind(&emails)
        .bind(&reasons)
        .bind(&dropped)
        .execute(&mut *tx)
        .await?;
    Ok(r.rows_affected())
}

/// Invariant: only a row whose attempt had an unknown outcome (`unknown_since` set: it is
/// `unconfirmed`, or waits to be retried, or is claimed for that retry) becomes `sent`; its
/// claim is dropped with it, so a worker holding it fails the pre-send re-check and every
/// fenced write (`claim_id`), and never mails it again. A row already settled is left alone.
// language=PostgreSQL
const SETTLE: &str = r#"
    UPDATE campaign_targets t
       SET state = 'sent', claim_id = NULL, lease_until = NULL, started_at = NULL,
           unknown_since = NULL, updated_at = now(),
           provider_message_id = coalesce(t.provider_message_id, e.message_id)
      FROM unnest($1::text[], $2::bigint[], $3::text[]) AS e(campaign_id, member_id, message_id)
     WHERE t.campaign_id = e.campaign_id AND t.member_id = e.member_id
       AND t.unknown_since IS NOT NULL
       AND t.state IN ('unconfirmed', 'pending', 'sending')
    RETURNING t.campaign_id, coalesce(mailbox_family(t.email), 'other')
"#;

/// Settles what `events` prove accepted; returns the rows settled, per campaign and mailbox
/// provider.
async fn settle(
    tx: &mut PgConnection,
    events: &[&Event],
) -> Result<Vec<(String, Family, i64)>, sqlx::Error> {
    let mut campaigns = Vec::new();
    let mut members = Vec::new();
    let mut messages = Vec::new();
    for e in events.iter().filter(|e| e.what.effect().settles) {
        if let (Some(c), Some(m)) = (e.campaign_id.as_deref(), e.member_id) {
            campaigns.push(c);
            members.push(m);
            messages.push(e.message_id.as_deref());
        }
    }
    if campaigns.is_empty() {
        return Ok(Vec::new());
    }
    let settled: Vec<(String, String)> = sqlx::query_as(SETTLE)
        .bind(&campaigns)
        .bind(&members)
        .bind(&messages)
        .fetch_all(&mut *tx)
        .await?;
    let mut per: std::collections::BTreeMap<(String, Family), i64> = Default::default();
    for (campaign, family) in settled {
        let family = family.parse().unwrap_or(Family::Other);
        *per.entry((campaign, family)).or_default() += 1;
    }
    Ok(per.into_iter().map(|((c, f), n)| (c, f, n)).collect())
}

/// A campaign's funnel: each column of [`FUNNEL`] with its count of events (zero included).
pub async fn funnel(pool: &PgPool, campaign_id: &str) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT what, count(*) FROM provider_events WHERE campaign_id = $1 GROUP BY what",
    )
    .bind(campaign_id)
    .fetch_all(pool)
    .await?;
    Ok(FUNNEL
        .iter()
        .map(|col| {
            let n = rows
                .iter()
                .filter(|(what, _)| funnel_of(what) == Some(col))
                .map(|(_, n)| n)
                .sum();
            (col.to_string(), n)
        })
        .collect())
}
