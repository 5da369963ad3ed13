//! Every statement on `rate_limits` and `rate_pods`: the fleet-wide rate limit's rounds
//! ([`crate::rate::coordinator`]) and what `status` shows of it.
//!
//! A round is one transaction: [`lock_key`] takes the row lock that serialises every round of a
//! key, then [`pods`], [`save_pod`], [`save_limit`] and [`forget_gone`] run under it. Times are
//! the database's `clock_timestamp()`, never a pod's clock, so pods with skewed clocks agree.

use chrono::{DateTime, Utc};
use sqlx::{FromRow, PgConnection, PgPool};
use uuid::Uuid;

use crate::rate::plan::{LimitRow, PodRow};

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
        SELECT pod_id, weight, limit_per_s, share_per_s, prev_share_per_s,
               share_changed_at, expires_at
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
                               share_per_s, prev_share_per_s, share_changed_at, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp(),
                clock_timestamp() + make_interval(secs => $10))
        ON CONFLICT (limit_key, pod_id) DO UPDATE
           SET weight           = EXCLUDED.weight,
               limit_per_s      = EXCLUDED.limit_per_s,
               share_per_s      = EXCLUDED.share_per_s,
               prev_share_per_s = EXCLUDED.prev_share_per_s,
               share_changed_at = CASE WHEN $9 THEN clock_timestamp() ELSE p.share_changed_at END,
               expires_at       = EXCLUDED.expires_at
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
        .execute(tx)
        .await?;
    Ok(())
}

/// Writes the key's AIMD state and fleet-wide pause.
///
/// Invariant: written under the round's lock, so two pods reporting one 429 storm cut the limit
/// once.
pub async fn save_limit(
    tx: &mut PgConnection,
    key: &str,
    limit: &LimitRow,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SAVE: &str = r#"
        UPDATE rate_limits
           SET effective_per_s = $2, paused_until = $3, last_decrease_at = $4, updated_at = $5
         WHERE limit_key = $1
    "#;
    sqlx::query(SAVE)
        .bind(key)
        .bind(limit.effective_per_s)
        .bind(limit.paused_until)
        .bind(limit.last_decrease_at)
        .bind(limit.updated_at)
        .execute(tx)
        .await?;
    Ok(())
}

/// Forgets pods gone for ten minutes (kept that long only for `status`; their capacity was free
/// a second after they expired).
pub async fn forget_gone(tx: &mut PgConnection, key: &str) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const FORGET: &str = "DELETE FROM rate_pods WHERE limit_key = $1 AND expires_at < clock_timestamp() - interval '10 minutes'";
    sqlx::query(FORGET).bind(key).execute(tx).await?;
    Ok(())
}

/// Marks a pod gone: expired now, weight 0.
///
/// Invariant: called only after the pod's pacer is revoked, so the committed window (a second
/// past the expiry) starts after the last request this pod can start.
pub async fn leave(pool: &PgPool, key: &str, pod_id: Uuid) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const LEAVE: &str = r#"
        UPDATE rate_pods
           SET expires_at = least(expires_at, clock_timestamp()), weight = 0
         WHERE limit_key = $1 AND pod_id = $2
    "#;
    sqlx::query(LEAVE)
        .bind(key)
        .bind(pod_id)
        .execute(pool)
        .await?;
    Ok(())
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

/// One limit key as `status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KeyState {
    pub key: String,
    /// The configured limit (the smallest among live pods).
    pub limit_per_s: f64,
    /// After AIMD cuts on 429s.
    pub effective_per_s: f64,
    /// Seconds left of a fleet-wide pause after a 429.
    pub paused_for_s: Option<f64>,
    pub members: Vec<Member>,
}

/// A key's row as [`limits_of_campaign`] reads it.
#[derive(FromRow)]
struct KeyRow {
    limit_key: String,
    effective_per_s: f64,
    paused_for_s: Option<f64>,
    limit_per_s: Option<f64>,
}

/// The rate-limit keys a campaign's live pods send under, each with every live member of the
/// key (other campaigns on the same provider account included: they share its limit).
pub async fn limits_of_campaign(
    pool: &PgPool,
    campaign_id: &str,
) -> Result<Vec<KeyState>, sqlx::Error> {
    // language=PostgreSQL
    const KEYS: &str = r#"
        SELECT l.limit_key, l.effective_per_s,
               extract(epoch FROM l.paused_until - clock_timestamp())::float8 AS paused_for_s,
               (SELECT min(p.limit_per_s) FROM rate_pods p
                 WHERE p.limit_key = l.limit_key AND p.expires_at > clock_timestamp()) AS limit_per_s
          FROM rate_limits l
         WHERE l.limit_key IN (SELECT limit_key FROM rate_pods
                                WHERE campaign_id = $1 AND expires_at > clock_timestamp())
         ORDER BY l.limit_key
    "#;
    let rows: Vec<KeyRow> = sqlx::query_as(KEYS)
        .bind(campaign_id)
        .fetch_all(pool)
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(KeyState {
            members: members(pool, &r.limit_key).await?,
            limit_per_s: r.limit_per_s.unwrap_or(0.0),
            effective_per_s: r.effective_per_s,
            paused_for_s: r.paused_for_s.filter(|s| *s > 0.0),
            key: r.limit_key,
        });
    }
    Ok(out)
}
