//! Every statement on `rate_limits` and `rate_pods`: the fleet-wide rate limit's rounds
//! ([`crate::rate::coordinator`]) and what `status` shows of it.
//!
//! A round is one transaction: [`lock_key`] takes the row lock that serialises every round of a
//! key, then [`pods`], [`save_pod`], [`save_limit`] and [`forget_gone`] run under it. Times are
//! the database's `clock_timestamp()`, never a pod's clock, so pods with skewed clocks agree.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgPool};
use uuid::Uuid;

/// One pod's row in `rate_pods`.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct PodRow {
    pub pod_id: Uuid,
    pub campaign_id: String,
    /// Its campaign's weight (`configure --weight`) while it has work to send, 0 idle.
    pub weight: f64,
    /// What it can use, if it spent clearly less than it was given (`None`: all it gets).
    pub demand_per_s: Option<f64>,
    /// Its `MAIL_RATE_PER_S`; the fleet uses the smallest among live pods.
    pub limit_per_s: f64,
    /// The rate it may pace at now.
    pub share_per_s: f64,
    /// What was committed to it just before its last change.
    pub prev_share_per_s: f64,
    pub share_changed_at: DateTime<Utc>,
    /// It stops sending by itself before this unless it renews.
    pub expires_at: DateTime<Utc>,
    /// Daily-quota attempts granted to it and spent by it, cumulative ([`crate::rate::quota`]).
    pub quota_granted: i64,
    pub quota_spent: i64,
}

/// The key's row in `rate_limits`: the effective (AIMD) limit, the fleet-wide pause, a
/// refusal, a live limit and the daily quota.
#[derive(Debug, Clone, PartialEq, Default, sqlx::FromRow)]
pub struct LimitRow {
    pub effective_per_s: f64,
    pub paused_until: Option<DateTime<Utc>>,
    pub last_decrease_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    /// The provider refused the account or the endpoint: no pod of the key sends until an
    /// operator lifts it (`campaign-sender resume`).
    pub refused_at: Option<DateTime<Utc>>,
    pub refused_status: Option<i16>,
    pub refused_kind: Option<String>,
    pub refused_campaign: Option<String>,
    /// `campaign-sender limit --rate`: the fleet's limit instead of the pods' own while set.
    pub override_per_s: Option<f64>,
    /// The limit `effective_per_s` was last computed against: a changed limit rescales it.
    pub base_per_s: Option<f64>,
    /// The pods' `MAIL_DAILY_QUOTA`, for `status`.
    pub daily_quota: Option<i64>,
    /// The vendor's own quota is used up until then: no pod of the key sends.
    pub vendor_quota_until: Option<DateTime<Utc>>,
}

/// A key's row as locked by a round, with the database's time under the lock.
#[derive(Debug, Clone, FromRow)]
pub struct Locked {
    #[sqlx(flatten)]
    pub limit: LimitRow,
    pub now: DateTime<Utc>,
}

/// Locks the key's `rate_limits` row (creating it at `limit_per_s`) and reads it and the time.
///
/// Invariant: a pod's share is computed from every other pod's committed rate as it is while no
/// one else can change theirs: every round of a key takes this lock first, and
/// `clock_timestamp()` is read after it.
pub async fn lock_key(
    tx: &mut PgConnection,
    key: &str,
    limit_per_s: f64,
) -> Result<Locked, sqlx::Error> {
    // language=PostgreSQL
    const LOCK: &str = r#"
        INSERT INTO rate_limits AS l (limit_key, effective_per_s, updated_at)
        VALUES ($1, $2, clock_timestamp())
        ON CONFLICT (limit_key) DO UPDATE SET limit_key = l.limit_key
        RETURNING l.effective_per_s, l.paused_until, l.last_decrease_at, l.updated_at,
                  l.refused_at, l.refused_status, l.refused_kind, l.refused_campaign,
                  l.override_per_s, l.base_per_s, l.daily_quota, l.vendor_quota_until,
                  clock_timestamp() AS now
    "#;
    sqlx::query_as(LOCK)
        .bind(key)
        .bind(limit_per_s)
        .fetch_one(tx)
        .await
}

/// Every pod of the key, live or recently gone (their capacity may still be committed): this
/// pod's row apart.
pub async fn pods(
    tx: &mut PgConnection,
    key: &str,
    pod_id: Uuid,
) -> Result<(Option<PodRow>, Vec<PodRow>), sqlx::Error> {
    // language=PostgreSQL
    const PODS: &str = r#"
        SELECT pod_id, campaign_id, weight, demand_per_s, limit_per_s, share_per_s,
               prev_share_per_s, share_changed_at, expires_at, quota_granted, quota_spent
          FROM rate_pods
         WHERE limit_key = $1
    "#;
    let rows: Vec<PodRow> = sqlx::query_as(PODS).bind(key).fetch_all(tx).await?;
    let (mine, others): (Vec<PodRow>, Vec<PodRow>) =
        rows.into_iter().partition(|p| p.pod_id == pod_id);
    Ok((mine.into_iter().next(), others))
}

/// Who a pod is, for its row (names only: never personal data).
#[derive(Debug, Clone)]
pub struct PodName<'a> {
    pub key: &'a str,
    pub pod_id: Uuid,
    pub worker: &'a str,
    pub campaign_id: &'a str,
}

/// Writes this pod's row: its new share, weight and limit, and an expiry `ttl_s` from now.
/// `changed` stamps `share_changed_at`.
///
/// Invariant: `share_changed_at` is stamped after this pod slowed down (the caller lowers its
/// pacer before this), so the window in which its old rate still counts begins no earlier than
/// its last send at that rate.
pub async fn save_pod(
    tx: &mut PgConnection,
    who: &PodName<'_>,
    me: &PodRow,
    changed: bool,
    ttl_s: f64,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SAVE: &str = r#"
        INSERT INTO rate_pods AS p (limit_key, pod_id, worker, campaign_id, weight, limit_per_s,
                               share_per_s, prev_share_per_s, share_changed_at, expires_at,
                               quota_granted, quota_spent, demand_per_s)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp(),
                clock_timestamp() + make_interval(secs => $10), $11, $12, $13)
        ON CONFLICT (limit_key, pod_id) DO UPDATE
           SET weight           = EXCLUDED.weight,
               demand_per_s     = EXCLUDED.demand_per_s,
               limit_per_s      = EXCLUDED.limit_per_s,
               share_per_s      = EXCLUDED.share_per_s,
               prev_share_per_s = EXCLUDED.prev_share_per_s,
               share_changed_at = CASE WHEN $9 THEN clock_timestamp() ELSE p.share_changed_at END,
               expires_at       = EXCLUDED.expires_at,
               quota_granted    = EXCLUDED.quota_granted,
               quota_spent      = EXCLUDED.quota_spent
    "#;
    sqlx::query(SAVE)
        .bind(who.key)
        .bind(who.pod_id)
        .bind(who.worker)
        .bind(who.campaign_id)
        .bind(me.weight)
        .bind(me.limit_per_s)
        .bind(me.share_per_s)
        .bind(me.prev_share_per_s)
        .bind(changed)
        .bind(ttl_s)
        .bind(me.quota_granted)
        .bind(me.quota_spent)
        .bind(me.demand_per_s)
        .execute(tx)
        .await?;
    Ok(())
}

/// Writes the key's AIMD state, fleet-wide pause, refusal, quota and the vendor's quota (never
/// the live limit: that is the operator's).
///
/// Invariant: written under the round's lock, so two pods reporting one 429 storm cut the limit
/// once, and the first refusal is the one kept.
pub async fn save_limit(
    tx: &mut PgConnection,
    key: &str,
    limit: &LimitRow,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SAVE: &str = r#"
        UPDATE rate_limits
           SET effective_per_s = $2, paused_until = $3, last_decrease_at = $4, updated_at = $5,
               refused_at = $6, refused_status = $7, refused_kind = $8, refused_campaign = $9,
               base_per_s = $10, daily_quota = $11, vendor_quota_until = $12
         WHERE limit_key = $1
    "#;
    sqlx::query(SAVE)
        .bind(key)
        .bind(limit.effective_per_s)
        .bind(limit.paused_until)
        .bind(limit.last_decrease_at)
        .bind(limit.updated_at)
        .bind(limit.refused_at)
        .bind(limit.refused_status)
        .bind(&limit.refused_kind)
        .bind(&limit.refused_campaign)
        .bind(limit.base_per_s)
        .bind(limit.daily_quota)
        .bind(limit.vendor_quota_until)
        .execute(tx)
        .await?;
    Ok(())
}

/// Forgets pods gone for ten minutes (kept that long only for `status`; their capacity was free
/// shortly after they expired), counting what they were granted of the daily quota and did not
/// report spent as used; and forgets usage older than the rolling 24 h.
///
/// Invariant: a grant counts against the quota until it is reported spent or, here, recorded
/// as used — never dropped, so pods that die never let the fleet exceed the quota.
pub async fn forget_gone(tx: &mut PgConnection, key: &str) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const FORGET: &str = r#"
        WITH gone AS (
            DELETE FROM rate_pods
             WHERE limit_key = $1 AND expires_at < clock_timestamp() - interval '10 minutes'
            RETURNING greatest(quota_granted - quota_spent, 0) AS unspent
        )
        INSERT INTO rate_usage AS u (limit_key, minute, attempts)
        SELECT $1, date_trunc('minute', clock_timestamp()), sum(unspent) FROM gone
        HAVING sum(unspent) > 0
        ON CONFLICT (limit_key, minute) DO UPDATE SET attempts = u.attempts + excluded.attempts
    "#;
    // language=PostgreSQL
    const PRUNE: &str = "DELETE FROM rate_usage WHERE limit_key = $1 AND minute < clock_timestamp() - interval '25 hours'";
    sqlx::query(FORGET).bind(key).execute(&mut *tx).await?;
    sqlx::query(PRUNE).bind(key).execute(tx).await?;
    Ok(())
}

/// The key's requests recorded in the last 24 h (the minute that started 24 h ago included).
pub async fn used_24h(tx: &mut PgConnection, key: &str) -> Result<i64, sqlx::Error> {
    // language=PostgreSQL
    const USED: &str = r#"
        SELECT coalesce(sum(attempts), 0)::bigint FROM rate_usage
         WHERE limit_key = $1 AND minute > clock_timestamp() - interval '24 hours 1 minute'
    "#;
    sqlx::query_scalar(USED).bind(key).fetch_one(tx).await
}

/// The campaign's weight (`configure --weight`; 1 without a settings row), read by each round.
///
/// Invariant: read in each round (before the key's lock, which it does not need), so a weight
/// changed live is adopted by each pod at its next round, and the row it writes says which
/// weight its share was computed with.
pub async fn campaign_weight(tx: &mut PgConnection, campaign_id: &str) -> Result<f64, sqlx::Error> {
    // language=PostgreSQL
    const WEIGHT: &str = "SELECT weight FROM campaigns WHERE campaign_id = $1";
    let w: Option<f64> = sqlx::query_scalar(WEIGHT)
        .bind(campaign_id)
        .fetch_optional(tx)
        .await?;
    Ok(w.unwrap_or(super::campaigns::WEIGHT_DEFAULT))
}

/// Adds `n` requests to the key's usage of the current minute.
///
/// Invariant: under the round's lock, in the same transaction as the pod's new `quota_spent`,
/// so a request is counted either as unspent grant or as usage, never both and never neither.
pub async fn add_usage(tx: &mut PgConnection, key: &str, n: i64) -> Result<(), sqlx::Error> {
    if n <= 0 {
        return Ok(());
    }
    // language=PostgreSQL
    const ADD: &str = r#"
        INSERT INTO rate_usage AS u (limit_key, minute, attempts)
        VALUES ($1, date_trunc('minute', clock_timestamp()), $2)
        ON CONFLICT (limit_key, minute) DO UPDATE SET attempts = u.attempts + excluded.attempts
    "#;
    sqlx::query(ADD).bind(key).bind(n).execute(tx).await?;
    Ok(())
}

/// Marks a pod gone: expired now, weight 0, its final spending recorded as usage and the rest
/// of its grant given back.
///
/// Invariant: called only after the pod's pacer is revoked (no token after `spent`), so the
/// handover after the expiry starts after the last request this pod can start; under the key's
/// lock, like a round, so the usage and the grant change together.
pub async fn leave(pool: &PgPool, key: &str, pod_id: Uuid, spent: i64) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const LOCK: &str = "SELECT 1 FROM rate_limits WHERE limit_key = $1 FOR UPDATE";
    // language=PostgreSQL
    const LEAVE: &str = r#"
        UPDATE rate_pods p
           SET expires_at = least(p.expires_at, clock_timestamp()), weight = 0,
               quota_granted = greatest($3, old.quota_spent),
               quota_spent = greatest($3, old.quota_spent)
          FROM (SELECT quota_spent FROM rate_pods WHERE limit_key = $1 AND pod_id = $2) old
         WHERE p.limit_key = $1 AND p.pod_id = $2
        RETURNING greatest($3 - old.quota_spent, 0)
    "#;
    let mut tx = pool.begin().await?;
    sqlx::query(LOCK).bind(key).execute(&mut *tx).await?;
    let added: Option<i64> = sqlx::query_scalar(LEAVE)
        .bind(key)
        .bind(pod_id)
        .bind(spent)
        .fetch_optional(&mut *tx)
        .await?;
    add_usage(&mut tx, key, added.unwrap_or(0)).await?;
    tx.commit().await
}
