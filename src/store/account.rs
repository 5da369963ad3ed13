//! The provider account as operators see and steer it, per limit key: its live members, the
//! limit in force, a refusal and who lifts it (`resume`), a live limit (`limit`), the daily
//! quota's use. The rounds that write the same rows are [`super::rate`].

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgPool};

use crate::text_enum::text_enum;

text_enum! {
    /// An answer that is not about the recipient: the provider refuses the account (an API key
    /// revoked or rotated before the Secret) or the endpoint is not the mail API (`MAIL_URL`
    /// without its path). Every row would get it: the fleet stops until an operator acts, and
    /// no row fails or spends an attempt (`crate::outcome` says what it does to a row, and
    /// what to tell an operator). Stored as its text in `rate_limits.refused_kind`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Refusal: "refusal" {
        Account = "account",
        Endpoint = "endpoint",
    }
}

impl Refusal {
    /// `rate_limits.refused_kind` read back; `None` for a word this version does not know.
    pub fn parse(s: &str) -> Option<Self> {
        s.parse().ok()
    }
}

/// A live member of a rate-limit key, as `status` shows it.
#[derive(Debug, Clone, serde::Serialize, FromRow)]
pub struct Member {
    pub worker: String,
    pub campaign_id: String,
    pub share_per_s: f64,
    pub weight: f64,
    pub expires_in_s: f64,
}

/// The live members of a limit key, for `status` and tests.
pub async fn members(pool: &PgPool, key: &str) -> Result<Vec<Member>, sqlx::Error> {
    // language=PostgreSQL
    const MEMBERS: &str = r#"
        SELECT worker, campaign_id, share_per_s, weight,
               extract(epoch FROM expires_at - clock_timestamp())::float8 AS expires_in_s
          FROM rate_pods
         WHERE limit_key = $1 AND expires_at > clock_timestamp()
         ORDER BY worker
    "#;
    sqlx::query_as(MEMBERS).bind(key).fetch_all(pool).await
}

/// A refusal recorded for a key: what, since when, seen by which campaign's pod.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RefusalState {
    pub status: u16,
    pub kind: Refusal,
    pub since: DateTime<Utc>,
    pub campaign: Option<String>,
}

/// The daily quota's use, as `status` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QuotaState {
    pub daily: i64,
    /// Recorded in the last 24 h plus granted and not yet spent.
    pub used: i64,
    /// When the oldest recorded minute leaves the 24 h (capacity frees then), if any is recorded.
    pub frees_from: Option<DateTime<Utc>>,
}

impl QuotaState {
    pub fn full(&self) -> bool {
        self.used >= self.daily
    }
}

/// One limit key as `status` and `limit` show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyState {
    pub key: String,
    /// The limit in force: the live override, else the smallest configured among live pods;
    /// `None` when neither is there (no pod is live to bring its `MAIL_RATE_PER_S`).
    pub limit_per_s: Option<f64>,
    /// `campaign-sender limit --rate`, if set.
    pub override_per_s: Option<f64>,
    /// After AIMD cuts on 429s.
    pub effective_per_s: f64,
    /// Seconds left of a fleet-wide pause after a 429.
    pub paused_for_s: Option<f64>,
    pub refused: Option<RefusalState>,
    pub quota: Option<QuotaState>,
    /// The vendor's own quota is used up until then (no pod of the key sends; it frees by
    /// itself).
    pub vendor_quota_until: Option<DateTime<Utc>>,
    pub members: Vec<Member>,
}

impl KeyState {
    /// Whether a pass may send at all under this key: not refused, neither quota used up.
    pub fn stops(&self) -> bool {
        self.refused.is_some()
            || self.quota.as_ref().is_some_and(QuotaState::full)
            || self.vendor_quota_until.is_some()
    }
}

/// A key's row as [`key_state`] reads it.
#[derive(FromRow)]
struct KeyRow {
    limit_key: String,
    effective_per_s: f64,
    paused_for_s: Option<f64>,
    configured_per_s: Option<f64>,
    override_per_s: Option<f64>,
    refused_at: Option<DateTime<Utc>>,
    refused_status: Option<i16>,
    refused_kind: Option<String>,
    refused_campaign: Option<String>,
    daily_quota: Option<i64>,
    used: i64,
    oldest_minute: Option<DateTime<Utc>>,
    vendor_quota_until: Option<DateTime<Utc>>,
}

// language=PostgreSQL
const KEY_COLUMNS: &str = r#"
    SELECT l.limit_key, l.effective_per_s,
           extract(epoch FROM l.paused_until - clock_timestamp())::float8 AS paused_for_s,
           (SELECT min(p.limit_per_s) FROM rate_pods p
             WHERE p.limit_key = l.limit_key AND p.expires_at > clock_timestamp()) AS configured_per_s,
           l.override_per_s, l.refused_at, l.refused_status, l.refused_kind, l.refused_campaign,
           l.daily_quota,
           CASE WHEN l.vendor_quota_until > clock_timestamp() THEN l.vendor_quota_until END
               AS vendor_quota_until,
           (SELECT coalesce(sum(u.attempts), 0) FROM rate_usage u
             WHERE u.limit_key = l.limit_key
               AND u.minute > clock_timestamp() - interval '24 hours 1 minute')::bigint
           + (SELECT coalesce(sum(greatest(p.quota_granted - p.quota_spent, 0)), 0) FROM rate_pods p
               WHERE p.limit_key = l.limit_key)::bigint AS used,
           (SELECT min(u.minute) FROM rate_usage u
             WHERE u.limit_key = l.limit_key
               AND u.minute > clock_timestamp() - interval '24 hours 1 minute') AS oldest_minute
      FROM rate_limits l
"#;

async fn state_of(pool: &PgPool, r: KeyRow) -> Result<KeyState, sqlx::Error> {
    let refused = match (r.refused_at, r.refused_status, r.refused_kind.as_deref()) {
        (Some(since), Some(status), Some(kind)) => Refusal::parse(kind).map(|kind| RefusalState {
            status: status as u16,
            kind,
            since,
            campaign: r.refused_campaign.clone(),
        }),
        _ => None,
    };
    Ok(KeyState {
        members: members(pool, &r.limit_key).await?,
        limit_per_s: r.override_per_s.or(r.configured_per_s),
        override_per_s: r.override_per_s,
        effective_per_s: r.effective_per_s,
        paused_for_s: r.paused_for_s.filter(|s| *s > 0.0),
        refused,
        quota: r.daily_quota.map(|daily| QuotaState {
            daily,
            used: r.used,
            frees_from: r.oldest_minute.map(|m| m + chrono::Duration::hours(24)),
        }),
        vendor_quota_until: r.vendor_quota_until,
        key: r.limit_key,
    })
}

impl KeyState {
    /// The key in one line, as `status` and `limit` show it: its limit and where it comes
    /// from, the effective rate, a pause after a 429, the live pods — or that no limit is in
    /// force (no live pod brings its `MAIL_RATE_PER_S`, none is set live).
    pub fn limit_line(&self) -> String {
        let Some(limit) = self.limit_per_s else {
            return format!(
                "{}: no limit in force: no live pod brings its MAIL_RATE_PER_S and none is set live (`limit --rate`)",
                self.key
            );
        };
        let from = if self.override_per_s.is_some() {
            "set live (`campaign-sender limit`)"
        } else {
            "as the pods are configured (MAIL_RATE_PER_S)"
        };
        let paused = self
            .paused_for_s
            .map(|p| format!(", paused {p:.1}s after a 429"))
            .unwrap_or_default();
        format!(
            "{}: {limit:.0}/s {from}, {:.0}/s effective{paused}, {} live pods",
            self.key,
            self.effective_per_s,
            self.members.len()
        )
    }
}

/// One key's state (`None`: no pod ever used it and no operator set it).
pub async fn key_state(pool: &PgPool, key: &str) -> Result<Option<KeyState>, sqlx::Error> {
    let sql = format!("{KEY_COLUMNS} WHERE l.limit_key = $1");
    let row: Option<KeyRow> = sqlx::query_as(&sql).bind(key).fetch_optional(pool).await?;
    match row {
        Some(r) => Ok(Some(state_of(pool, r).await?)),
        None => Ok(None),
    }
}

/// The keys a campaign sends under — those of its live pods, those its pods used before (their
/// rows are kept ten minutes), and one a pod of it found refused — each with every live member
/// (other campaigns on the same account included: they share its limit).
pub async fn keys_of_campaign(
    pool: &PgPool,
    campaign_id: &str,
) -> Result<Vec<KeyState>, sqlx::Error> {
    let sql = format!(
        "{KEY_COLUMNS} WHERE l.limit_key IN (SELECT limit_key FROM rate_pods WHERE campaign_id = $1)
                          OR l.refused_campaign = $1
         ORDER BY l.limit_key"
    );
    let rows: Vec<KeyRow> = sqlx::query_as(&sql)
        .bind(campaign_id)
        .fetch_all(pool)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(state_of(pool, r).await?);
    }
    Ok(out)
}

/// Lifts the refusal of `key` (`resume --key`); returns what was lifted.
///
/// Invariant: only the refusal columns change; a round holding the key's lock finishes first
/// (the update waits for the row lock), so the next round of every pod sees it lifted.
pub async fn lift_refusal(pool: &PgPool, key: &str) -> Result<Option<RefusalState>, sqlx::Error> {
    Ok(lift(pool, "l.limit_key = $1", key)
        .await?
        .into_iter()
        .next()
        .map(|(_, r)| r))
}

/// Lifts every refusal a campaign is stopped by (`resume --campaign`): on the keys its pods use
/// or used, or the one its pod recorded. Returns the keys lifted, with what was lifted.
pub async fn lift_refusals_of(
    pool: &PgPool,
    campaign_id: &str,
) -> Result<Vec<(String, RefusalState)>, sqlx::Error> {
    lift(
        pool,
        "(l.limit_key IN (SELECT limit_key FROM rate_pods WHERE campaign_id = $1) OR l.refused_campaign = $1)",
        campaign_id,
    )
    .await
}

async fn lift(
    pool: &PgPool,
    which: &str,
    arg: &str,
) -> Result<Vec<(String, RefusalState)>, sqlx::Error> {
    // language=PostgreSQL
    let sql = format!(
        r#"
        UPDATE rate_limits l
           SET refused_at = NULL, refused_status = NULL, refused_kind = NULL, refused_campaign = NULL
          FROM rate_limits old
         WHERE old.limit_key = l.limit_key AND {which} AND l.refused_at IS NOT NULL
        RETURNING l.limit_key, old.refused_at AS refused_at, old.refused_status AS refused_status,
                  old.refused_kind AS refused_kind, old.refused_campaign AS refused_campaign
        "#
    );
    #[derive(FromRow)]
    struct Lifted {
        limit_key: String,
        refused_at: DateTime<Utc>,
        refused_status: i16,
        refused_kind: String,
        refused_campaign: Option<String>,
    }
    let rows: Vec<Lifted> = sqlx::query_as(&sql).bind(arg).fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let kind = Refusal::parse(&r.refused_kind)?;
            Some((
                r.limit_key,
                RefusalState {
                    status: r.refused_status as u16,
                    kind,
                    since: r.refused_at,
                    campaign: r.refused_campaign,
                },
            ))
        })
        .collect())
}

/// Sets (`Some`) or clears (`None`) the live limit of `key` (`campaign-sender limit`).
///
/// Invariant: only the override columns change (a key no pod has used yet gets its row, at that
/// rate); pods adopt it at their next round, lowering at once and raising only into capacity the
/// others have freed (the handover rule of [`crate::rate`]).
pub async fn set_limit(pool: &PgPool, key: &str, rate: Option<f64>) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SET: &str = r#"
        INSERT INTO rate_limits AS l (limit_key, effective_per_s, updated_at, override_per_s, override_set_at)
        VALUES ($1, $2, clock_timestamp(), $2, clock_timestamp())
        ON CONFLICT (limit_key) DO UPDATE
           SET override_per_s = excluded.override_per_s, override_set_at = excluded.override_set_at
    "#;
    // language=PostgreSQL
    const CLEAR: &str =
        "UPDATE rate_limits SET override_per_s = NULL, override_set_at = NULL WHERE limit_key = $1";
    match rate {
        Some(r) => sqlx::query(SET).bind(key).bind(r).execute(pool).await?,
        None => sqlx::query(CLEAR).bind(key).execute(pool).await?,
    };
    Ok(())
}
