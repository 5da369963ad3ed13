//! Every SQL statement on `campaign_targets`, each with the invariant it keeps.
//!
//! Transactions, locks and timeouts: every statement here is a single auto-committed statement.
//! No transaction is ever held across a provider call. Row locks live only for the duration of
//! the claim statement; after that, ownership is the lease (`lease_until`) plus the fencing token
//! (`claim_id`), and every write matches the token.
//!
//! `claim` is the one deliberate command–query exception: it changes rows and returns them,
//! because doing both in one statement is what makes it atomic.

use std::time::Duration;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Row};
use uuid::Uuid;

use crate::config::DbConfig;
use crate::outage::Outage;
use crate::outcome::Resolution;

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// One claimed row, as the worker needs it. The email is personal data: it goes into the
/// request body and nowhere else.
#[derive(Clone)]
pub struct ClaimedRow {
    pub member_id: i64,
    pub email: Option<String>,
    /// This claim's attempt number (1 for the first).
    pub attempt: i32,
}

impl std::fmt::Debug for ClaimedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedRow")
            .field("member_id", &self.member_id)
            .field("email", &"[personal data]")
            .field("attempt", &self.attempt)
            .finish()
    }
}

/// A claimed batch: the rows and the fencing token every write about them must carry.
#[derive(Debug, Clone)]
pub struct Batch {
    pub claim_id: Uuid,
    pub rows: Vec<ClaimedRow>,
    /// Rows taken over from a holder whose lease had expired (a killed or stalled worker).
    pub reclaimed: usize,
}

/// Work left in a campaign (opted-out rows are not work).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Remaining {
    /// `pending` and claimable now.
    pub ready: i64,
    /// `pending`, waiting for `not_before` (retry backoff).
    pub waiting: i64,
    /// `sending`: leased by a worker (or by a crashed one until the lease expires).
    pub leased: i64,
    /// Seconds until the earliest waiting row or lease becomes claimable.
    pub next_due_s: Option<f64>,
}

impl Remaining {
    pub fn total(&self) -> i64 {
        self.ready + self.waiting + self.leased
    }
}

/// Final states of a whole campaign.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CampaignCounts {
    pub total: i64,
    pub sent: i64,
    pub failed: i64,
    pub pending: i64,
    pub sending: i64,
    /// Opted out and neither sent nor failed: never mailed, never will be (a row sent or
    /// failed before its opt-out keeps that outcome, so the buckets add up to `total`).
    pub opted_out: i64,
}

/// Why a row must not be sent although we claimed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// `opted_out_at` was set after the claim.
    OptedOut,
    /// Our lease lapsed and another worker re-claimed the row: it is not ours any more.
    Lost,
}

/// The campaign-scoped store.
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    campaign_id: String,
}

/// Connects with bounded retries: an unreachable database at start (a pod scheduled before
/// Cloud SQL's proxy is up, a failover) is waited for up to `DB_CONNECT_RETRY_S`, then reported.
pub async fn connect(cfg: &DbConfig) -> Result<PgPool, sqlx::Error> {
    let opts: sqlx::postgres::PgConnectOptions = cfg.database_url.expose().parse()?;
    let opts = opts
        .application_name("campaign-sender")
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(2));
    let mut outage = Outage::new(
        tokio::time::Instant::now(),
        Duration::from_secs(cfg.db_connect_retry_s),
    );
    loop {
        // sqlx itself keeps retrying a refused connection until the acquire timeout: cap that at
        // what is left of DB_CONNECT_RETRY_S (at least 500 ms), so the limit is the limit.
        let left = outage.left(tokio::time::Instant::now());
        let attempt = PgPoolOptions::new()
            .max_connections(cfg.db_max_connections)
            .acquire_timeout(
                Duration::from_secs(10)
                    .min(left)
                    .max(Duration::from_millis(500)),
            )
            .connect_with(opts.clone())
            .await;
        // Everything is retried within the limit, refusals by the server too: a server starting
        // up (57P03) or full (53300) heals by waiting, and so does a login refused (class 28)
        // while a password is being rotated — the role changed before the Secret or after it.
        // Past the limit the error goes to the caller, which says what to check
        // (`cli::db_unavailable`).
        match attempt {
            Ok(pool) => return Ok(pool),
            Err(e) => match outage.next_wait(tokio::time::Instant::now()) {
                None => return Err(e),
                Some(nap) => {
                    tracing::warn!(error = %error_text(&e), retry_in_ms = nap.as_millis() as u64, "database not ready yet; retrying");
                    tokio::time::sleep(nap).await;
                }
            },
        }
    }
}

/// A database error as it may be logged or shown, at start and mid-run alike: a refused login
/// (SQLSTATE class 28) by its code only — the server's text names the user, the client address
/// and the database, and a Cloud SQL IAM user is an email address; anything else (I/O, TLS,
/// other server answers, whose messages name tables, columns or the database) as sqlx words it,
/// which never holds the URL or the password.
pub fn error_text(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => match d.code() {
            Some(c) if c.starts_with("28") => {
                format!("the server refused the login (SQLSTATE {c})")
            }
            _ => e.to_string(),
        },
        _ => e.to_string(),
    }
}

/// Whether every embedded migration has been applied (a pod started together with the migrate
/// Job waits for this instead of failing on a missing column).
pub async fn schema_ready(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    // language=PostgreSQL
    let applied: Result<Option<i64>, sqlx::Error> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await;
    match applied {
        Ok(v) => Ok(v.unwrap_or(0) >= latest),
        // 42P01: no _sqlx_migrations yet, i.e. nothing migrated.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(false),
        Err(e) => Err(e),
    }
}

impl Store {
    pub fn new(pool: PgPool, campaign_id: impl Into<String>) -> Self {
        Self {
            pool,
            campaign_id: campaign_id.into(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn campaign_id(&self) -> &str {
        &self.campaign_id
    }

    /// Claims up to `limit` rows for `lease`, under a fresh fencing token.
    ///
    /// Invariants:
    /// - two claims never get the same row: `FOR UPDATE SKIP LOCKED` locks what it picks and
    ///   passes over rows another claim is locking, instead of waiting for it;
    /// - an opted-out row is never claimed (`opted_out_at IS NULL`, re-evaluated on the locked,
    ///   latest row version, so an opt-out committed before the claim always wins);
    /// - a row in retry backoff is not claimed before `not_before`;
    /// - a row another worker holds is taken only after its lease expired (the crash case);
    /// - the claim counts the attempt (`attempts + 1`) and stamps a new `claim_id`, which
    ///   fences off every later write by the previous holder.
    pub async fn claim(&self, limit: u32, lease: Duration) -> Result<Batch, sqlx::Error> {
        let claim_id = Uuid::new_v4();
        // language=PostgreSQL
        let rows = sqlx::query(
            r#"
            WITH picked AS (
                SELECT member_id, state AS was
                  FROM campaign_targets
                 WHERE campaign_id = $1
                   AND opted_out_at IS NULL
                   AND state IN ('pending', 'sending')
                   AND (   (state = 'pending' AND (not_before IS NULL OR not_before <= now()))
                        OR (state = 'sending' AND (lease_until IS NULL OR lease_until < now())))
                 ORDER BY member_id
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE campaign_targets t
               SET state       = 'sending',
                   attempts    = t.attempts + 1,
                   claim_id    = $3,
                   lease_until = now() + make_interval(secs => $4),
                   not_before  = NULL,
                   updated_at  = now()
              FROM picked
             WHERE t.campaign_id = $1
               AND t.member_id = picked.member_id
            RETURNING t.member_id, t.email, t.attempts, picked.was = 'sending'
            "#,
        )
        .bind(&self.campaign_id)
        .bind(limit as i64)
        .bind(claim_id)
        .bind(lease.as_secs_f64())
        .fetch_all(&self.pool)
        .await?;
        let reclaimed = rows.iter().filter(|r| r.get::<bool, _>(3)).count();
        let rows = rows
            .into_iter()
            .map(|r| ClaimedRow {
                member_id: r.get(0),
                email: r.get(1),
                attempt: r.get(2),
            })
            .collect();
        Ok(Batch {
            claim_id,
            rows,
            reclaimed,
        })
    }

    /// Which of these claimed rows (member id, the claim that holds it) must not be sent now.
    ///
    /// Invariant: a send starts only after this has seen the row still ours (`state =
    /// 'sending'` under the claim we hold it by) and not opted out. Run just before sending, it
    /// closes the window between claim and send to the freshness the caller demands. Primary-key
    /// lookups only: cost O(rows asked).
    pub async fn holds(&self, rows: &[(i64, Uuid)]) -> Result<Vec<(i64, Hold)>, sqlx::Error> {
        let (ids, claims): (Vec<i64>, Vec<Uuid>) = rows.iter().copied().unzip();
        // language=PostgreSQL
        let found = sqlx::query(
            r#"
            SELECT t.member_id, t.opted_out_at IS NOT NULL AS opted_out
              FROM unnest($2::bigint[], $3::uuid[]) AS r(member_id, claim_id)
              JOIN campaign_targets t
                ON t.campaign_id = $1 AND t.member_id = r.member_id
             WHERE t.opted_out_at IS NOT NULL
                OR t.state <> 'sending'
                OR t.claim_id IS DISTINCT FROM r.claim_id
            "#,
        )
        .bind(&self.campaign_id)
        .bind(&ids)
        .bind(&claims)
        .fetch_all(&self.pool)
        .await?;
        Ok(found
            .into_iter()
            .map(|r| {
                let hold = if r.get::<bool, _>(1) {
                    Hold::OptedOut
                } else {
                    Hold::Lost
                };
                (r.get(0), hold)
            })
            .collect())
    }

    /// The heartbeat: pushes the lease of rows we still hold (member id, claim) to
    /// `now() + lease`. Returns how many rows were extended.
    ///
    /// Invariant: fenced like every write — only rows still `sending` under the claim we hold
    /// them by; a row someone else re-claimed is not extended (and not ours any more).
    /// Primary-key lookups only, so its cost is O(rows held), not O(campaign).
    pub async fn extend_leases(
        &self,
        rows: &[(i64, Uuid)],
        lease: Duration,
    ) -> Result<u64, sqlx::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, claims): (Vec<i64>, Vec<Uuid>) = rows.iter().copied().unzip();
        // language=PostgreSQL
        let n = sqlx::query(
            r#"
            UPDATE campaign_targets t
               SET lease_until = now() + make_interval(secs => $4)
              FROM unnest($2::bigint[], $3::uuid[]) AS r(member_id, claim_id)
             WHERE t.campaign_id = $1
               AND t.member_id = r.member_id
               AND t.state = 'sending'
               AND t.claim_id = r.claim_id
            "#,
        )
        .bind(&self.campaign_id)
        .bind(&ids)
        .bind(&claims)
        .bind(lease.as_secs_f64())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n)
    }

    /// Writes a batch's results in one fenced statement; returns how many rows were written.
    /// `results.len() - written` rows were stale: re-claimed by someone else after our lease
    /// expired, so their outcome is not ours to record.
    ///
    /// Invariants:
    /// - the fence: only rows still `sending` under our `claim_id` are touched;
    /// - `sent` stamps `sent_at` (what the legacy job and any rollback read);
    /// - a released row gives its attempt back (`attempts - 1`) and keeps its last provider
    ///   answer, so time-budget leftovers and shutdown do not use up retries;
    /// - a retry gets `not_before = now() + delay`, so no one claims it before then;
    /// - a row written `sent` whose `opted_out_at` is set by now (the opt-out raced the request
    ///   in flight) is counted in `campaign_sender_sent_after_optout_total`: it should stay 0.
    pub async fn finish(
        &self,
        claim_id: Uuid,
        results: &[(i64, Resolution)],
    ) -> Result<u64, sqlx::Error> {
        if results.is_empty() {
            return Ok(0);
        }
        let n = results.len();
        let (mut ids, mut states, mut attempted, mut delays, mut statuses, mut errors) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (member_id, res) in results {
            let (state, was_attempted, delay_ms, status, error): (
                &str,
                bool,
                Option<i64>,
                Option<u16>,
                Option<&str>,
            ) = match res {
                Resolution::Sent { status } => ("sent", true, None, Some(*status), None),
                Resolution::RetryAfter {
                    delay,
                    status,
                    class,
                } => (
                    "pending",
                    true,
                    Some(delay.as_millis() as i64),
                    *status,
                    Some(class.as_str()),
                ),
                Resolution::Failed { status, class } => {
                    ("failed", true, None, *status, Some(class.as_str()))
                }
                Resolution::Released { class } => {
                    ("pending", false, None, None, Some(class.as_str()))
                }
                Resolution::Deferred { delay, class } => (
                    "pending",
                    false,
                    Some(delay.as_millis() as i64),
                    None,
                    Some(class.as_str()),
                ),
            };
            ids.push(*member_id);
            states.push(state);
            attempted.push(was_attempted);
            delays.push(delay_ms);
            statuses.push(status.map(|s| s as i16));
            errors.push(error);
        }
        // language=PostgreSQL
        let written = sqlx::query(
            r#"
            UPDATE campaign_targets t
               SET state       = r.state,
                   attempts    = CASE WHEN r.attempted THEN t.attempts ELSE greatest(t.attempts - 1, 0) END,
                   not_before  = CASE WHEN r.delay_ms IS NULL THEN NULL
                                      ELSE now() + r.delay_ms * interval '1 millisecond' END,
                   sent_at     = CASE WHEN r.state = 'sent' THEN now() ELSE t.sent_at END,
                   last_status = CASE WHEN r.attempted THEN r.status ELSE t.last_status END,
                   last_error  = CASE WHEN r.attempted THEN r.error ELSE coalesce(r.error, t.last_error) END,
                   lease_until = NULL,
                   updated_at  = now()
              FROM unnest($3::bigint[], $4::text[], $5::bool[], $6::bigint[], $7::int2[], $8::text[])
                   AS r(member_id, state, attempted, delay_ms, status, error)
             WHERE t.campaign_id = $1
               AND t.member_id = r.member_id
               AND t.state = 'sending'
               AND t.claim_id = $2
            RETURNING r.state = 'sent' AND t.opted_out_at IS NOT NULL
            "#,
        )
        .bind(&self.campaign_id)
        .bind(claim_id)
        .bind(&ids)
        .bind(&states)
        .bind(&attempted)
        .bind(&delays)
        .bind(&statuses)
        .bind(&errors)
        .fetch_all(&self.pool)
        .await?;
        let after_optout = written.iter().filter(|r| r.get::<bool, _>(0)).count();
        crate::metrics::sent_after_optout(after_optout as u64);
        Ok(written.len() as u64)
    }

    /// Work left. Uses the work-set index only.
    ///
    /// Invariant: opted-out rows are not remaining work (they will never be claimed).
    pub async fn remaining(&self) -> Result<Remaining, sqlx::Error> {
        // language=PostgreSQL
        let r = sqlx::query(
            r#"
            SELECT count(*) FILTER (WHERE state = 'pending' AND (not_before IS NULL OR not_before <= now())),
                   count(*) FILTER (WHERE state = 'pending' AND not_before > now()),
                   count(*) FILTER (WHERE state = 'sending'),
                   extract(epoch FROM min(CASE WHEN state = 'pending' THEN not_before
                                               ELSE lease_until END) - now())::float8
              FROM campaign_targets
             WHERE campaign_id = $1
               AND state IN ('pending', 'sending')
               AND opted_out_at IS NULL
            "#,
        )
        .bind(&self.campaign_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(Remaining {
            ready: r.get(0),
            waiting: r.get(1),
            leased: r.get(2),
            next_due_s: r.get(3),
        })
    }

    /// Rows in `failed` (partial index): checked during the run against the threshold.
    pub async fn failed_count(&self) -> Result<i64, sqlx::Error> {
        // language=PostgreSQL
        sqlx::query_scalar(
            "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND state = 'failed'",
        )
        .bind(&self.campaign_id)
        .fetch_one(&self.pool)
        .await
    }

    /// Counts by final state for the whole campaign (one scan of its rows; for reports): the
    /// counts of [`Store::progress`], so a report and `status` can never disagree.
    pub async fn counts(&self) -> Result<CampaignCounts, sqlx::Error> {
        Ok(self.progress().await?.counts)
    }

    /// Everything `status` shows about the rows, in one scan of the campaign's rows.
    ///
    /// Invariants: the buckets partition the campaign — `sent` and `failed` are outcomes and
    /// stand whenever the opt-out came; opted out and neither sent nor failed is not work
    /// (neither `pending` nor `sending`, but `opted_out`), so a row is never counted twice;
    /// "sent recently" counts rows whose `sent_at` is in the last minute.
    pub async fn progress(&self) -> Result<Progress, sqlx::Error> {
        // language=PostgreSQL
        let r = sqlx::query(
            r#"
            SELECT count(*),
                   count(*) FILTER (WHERE state = 'sent'),
                   count(*) FILTER (WHERE state = 'failed'),
                   count(*) FILTER (WHERE state = 'pending' AND opted_out_at IS NULL),
                   count(*) FILTER (WHERE state = 'sending' AND opted_out_at IS NULL),
                   count(*) FILTER (WHERE opted_out_at IS NOT NULL AND state NOT IN ('sent', 'failed')),
                   count(*) FILTER (WHERE state = 'pending' AND opted_out_at IS NULL
                                      AND not_before > now()),
                   count(*) FILTER (WHERE state = 'sent' AND sent_at > now() - interval '1 minute'),
                   extract(epoch FROM now() - min(sent_at) FILTER (
                       WHERE state = 'sent' AND sent_at > now() - interval '1 minute'))::float8
              FROM campaign_targets
             WHERE campaign_id = $1
            "#,
        )
        .bind(&self.campaign_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(Progress {
            counts: CampaignCounts {
                total: r.get(0),
                sent: r.get(1),
                failed: r.get(2),
                pending: r.get(3),
                sending: r.get(4),
                opted_out: r.get(5),
            },
            retry_waiting: r.get(6),
            sent_last_minute: r.get(7),
            recent_window_s: r.get(8),
        })
    }

    /// The most common (last provider status, error class) pairs among rows in `state`
    /// (`failed`, or `pending` for rows waiting to retry), most frequent first.
    ///
    /// Invariant: only the short class and the status are stored per row (never a response
    /// body), so nothing personal can surface here.
    pub async fn reasons(&self, state: &str, limit: i64) -> Result<Vec<Reason>, sqlx::Error> {
        // language=PostgreSQL
        let rows = sqlx::query(
            r#"
            SELECT last_status, coalesce(last_error, 'unknown'), count(*)
              FROM campaign_targets
             WHERE campaign_id = $1
               AND state = $2
               AND ($2 <> 'pending' OR (attempts > 0 AND last_error IS NOT NULL
                                        AND opted_out_at IS NULL))
             GROUP BY 1, 2
             ORDER BY 3 DESC, 1, 2
             LIMIT $3
            "#,
        )
        .bind(&self.campaign_id)
        .bind(state)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Reason {
                status: r.get(0),
                class: r.get(1),
                count: r.get(2),
            })
            .collect())
    }

    /// `retry-failed`: puts the selected `failed` rows back to `pending` with their attempts
    /// reset. Returns how many rows it moved (or, with `dry_run`, would move).
    ///
    /// Invariants:
    /// - only `failed` rows of this campaign change — never a `sent`, `pending` or `sending`
    ///   row, so a worker's claim is never disturbed;
    /// - an opted-out row is never selected (it must not be mailed);
    /// - the filters narrow (AND): any of `statuses`, any of `classes`, failed at or after
    ///   `since`; empty filters select every failed row;
    /// - the last status and class stay on the row until its next attempt overwrites them.
    pub async fn retry_failed(
        &self,
        filter: &RetryFilter,
        dry_run: bool,
    ) -> Result<u64, sqlx::Error> {
        // language=PostgreSQL
        const SELECTED: &str = r#"
              campaign_id = $1
          AND state = 'failed'
          AND opted_out_at IS NULL
          AND (cardinality($2::int2[]) = 0 OR last_status = ANY($2))
          AND (cardinality($3::text[]) = 0 OR last_error = ANY($3))
          AND ($4::timestamptz IS NULL OR updated_at >= $4)
        "#;
        let statuses: Vec<i16> = filter.statuses.clone();
        if dry_run {
            let n: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM campaign_targets WHERE {SELECTED}"
            ))
            .bind(&self.campaign_id)
            .bind(&statuses)
            .bind(&filter.classes)
            .bind(filter.since)
            .fetch_one(&self.pool)
            .await?;
            return Ok(n as u64);
        }
        let n = sqlx::query(&format!(
            "UPDATE campaign_targets
                SET state = 'pending', attempts = 0, not_before = NULL, lease_until = NULL,
                    updated_at = now()
              WHERE {SELECTED}"
        ))
        .bind(&self.campaign_id)
        .bind(&statuses)
        .bind(&filter.classes)
        .bind(filter.since)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n)
    }
}

/// The rows side of `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Progress {
    pub counts: CampaignCounts,
    /// `pending` rows in retry backoff.
    pub retry_waiting: i64,
    /// Rows that became `sent` in the last minute.
    pub sent_last_minute: i64,
    /// Seconds since the oldest of those (the window the rate is measured over).
    pub recent_window_s: Option<f64>,
}

/// A count of rows by their last provider status and error class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reason {
    pub status: Option<i16>,
    pub class: String,
    pub count: i64,
}

/// Which failed rows `retry-failed` selects.
#[derive(Debug, Clone, Default)]
pub struct RetryFilter {
    /// Last provider status is one of these (empty: any).
    pub statuses: Vec<i16>,
    /// Error class is one of these, e.g. `rejected`, `invalid_email` (empty: any).
    pub classes: Vec<String>,
    /// Failed at or after this time.
    pub since: Option<chrono::DateTime<chrono::Utc>>,
}
