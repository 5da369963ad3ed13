//! The pool and the migrations. Every subcommand connects through [`connect`] (bounded retries,
//! [`super::outage`]) and, when the database is not usable, says so through
//! `crate::cli::problem`, which also says how patient each command is.
//!
//! **A dark connection** (packets vanish, the socket stays open) is bounded on both ends:
//! - the client cuts each attempt of a statement at its bound ([`super::outage`]) and
//!   [`pool`] closes the connection the cut attempt held instead of returning it (sqlx would
//!   ping it on release, and that ping waits for the dropped statement's answer: minutes on a
//!   dark socket, holding a pool slot);
//! - the server ends what a vanished client left behind ([`Session`]): TCP keepalives on its
//!   end of every connection; for `run`, a statement time-out, a time-out for a transaction
//!   left open (a rate round holds its key's row lock: [`super::rate`]) and a check that the
//!   client is still there during a long statement.
//!
//! sqlx 0.8 has no TCP keepalive for the client's end of the socket (launchbadge/sqlx#3540, open;
//! the pull request that adds it is not released), so the client's end relies on the bound.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use tokio::time::Instant;

use sqlx::Connection;

pub use super::outage::{error_text, sqlstate};
use super::outage::{retrying_if, Outage};

/// How long a statement waits for a pooled connection before its retry rule
/// ([`super::outage`]) takes over. sqlx backs off between its own connection attempts by up to a
/// fifth of this, so it also bounds how late a pod notices that the database is back: 2.5 s
/// keeps that under 0.5 s (10 s let a pod sleep 2 s after an 8-s restart, then climb).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(2_500);

/// How long a released connection may take to answer a ping before it is taken for dark and
/// closed (see [`pool`]). A healthy one answers in well under a millisecond.
const RELEASE_PING: Duration = Duration::from_millis(1_000);

/// Who the connections are for: what the server bounds on their sessions (startup options, so
/// they hold from the first statement on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// `run`: short statements only (a claim, a fenced write, a round of the rate limit), each
    /// retried within `DB_CONNECT_RETRY_S`. The server also ends a statement that runs past
    /// the longest a client waits for one (the outage limit, at least 2 s), a transaction left
    /// open for 2 s (no round thinks that long between statements), and checks every second
    /// that the client is still there.
    Worker { outage_limit: Duration },
    /// Everything else: imports, archives and migrations run statements of minutes, and a
    /// person at a terminal stops what hangs. TCP keepalives only.
    Other,
}

/// The server's end of a connection: the first keepalive after 10 s idle, then every 5 s; the
/// connection is dropped after 3 unanswered (~25 s), or 30 s of unacknowledged data.
const KEEPALIVES: [(&str, &str); 4] = [
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
    ("tcp_user_timeout", "30000"),
];

/// How long the server lets a worker's transaction sit idle before ending its session. A rate
/// round holds its key's row lock between statements the client sends back to back (a plan
/// computed in microseconds): a pod gone dark mid-round stalls the fleet's rounds this long.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(2);

impl Session {
    /// The startup options that set the server's bounds (see [`Session`]).
    pub fn server_settings(self) -> Vec<(&'static str, String)> {
        let mut settings: Vec<_> = KEEPALIVES
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        if let Session::Worker { outage_limit } = self {
            let statement = outage_limit.max(super::outage::FIRST_ATTEMPT);
            settings.extend([
                ("statement_timeout", statement.as_millis().to_string()),
                (
                    "idle_in_transaction_session_timeout",
                    IDLE_IN_TRANSACTION.as_millis().to_string(),
                ),
                ("client_connection_check_interval", "1000".to_string()),
            ]);
        }
        settings
    }
}

/// The pool every command uses, on `opts`: at most `max` connections, a statement waits at
/// most 2.5 s for one, and a connection released while a statement on it was cut (or that
/// does not answer a ping within 1 s on release) is closed, never handed out again.
pub fn pool(opts: PgConnectOptions, max: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .after_release(|conn, _| {
            Box::pin(async move {
                match tokio::time::timeout(RELEASE_PING, conn.ping()).await {
                    Ok(Ok(())) => Ok(true),
                    // Broken: sqlx closes it without a goodbye.
                    Ok(Err(e)) => Err(e),
                    // Dark, or still busy with a statement whose attempt was cut: closed.
                    Err(_) => Ok(false),
                }
            })
        })
        .connect_lazy_with(opts)
}

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Where the database is and how long to keep trying it (`crate::config::DbConfig`'s
/// `DATABASE_URL`, `DB_MAX_CONNECTIONS`, `DB_CONNECT_RETRY_S`).
#[derive(Clone, Copy)]
pub struct Reach<'a> {
    /// The connection URL: a secret, never shown.
    pub url: &'a str,
    /// The pool's size.
    pub max_connections: u32,
    /// How long an unreachable database is waited for.
    pub retry_for: Duration,
}

/// Connects with bounded retries: an unreachable database at start (a pod scheduled before
/// Cloud SQL's proxy is up, a failover) is waited for up to `DB_CONNECT_RETRY_S`, then the last
/// error goes to the caller, which says what to check (`crate::cli::problem::report`). `retry`
/// says which errors are waited for: all of them for a worker, only those waiting can heal for a
/// person at a terminal (the caller's patience).
///
/// Each try opens one connection first, so the error is the server's or the socket's own
/// ("connection refused", a refused login), not the pool's "timed out waiting for a
/// connection"; the pool is built on it once it succeeds.
pub async fn connect(
    reach: Reach<'_>,
    session: Session,
    retry: impl Fn(&sqlx::Error) -> bool,
) -> Result<PgPool, sqlx::Error> {
    let opts: PgConnectOptions = reach.url.parse()?;
    let opts = opts
        .application_name("campaign-sender")
        .options(session.server_settings())
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(2));
    let limit = reach.retry_for;
    let give_up = Instant::now() + limit;
    retrying_if(limit, "connecting to the database", retry, || async {
        // Each try is bounded by what is left of DB_CONNECT_RETRY_S (at least 500 ms, at most
        // 10 s), so the limit is the limit.
        let left = give_up.saturating_duration_since(Instant::now());
        let per_try = Duration::from_secs(10)
            .min(left)
            .max(Duration::from_millis(500));
        let first = tokio::time::timeout(per_try, PgConnection::connect_with(&opts))
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)??;
        first.close().await?;
        Ok(pool(opts.clone(), reach.max_connections))
    })
    .await
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

/// Why [`wait_for_schema`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum SchemaWait {
    #[error("the database schema is not migrated to this version: run `campaign-sender migrate` (the migrate Job) first; a rerun is safe")]
    NotMigrated,
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// Waits (up to `limit`, by the one retry rule's waits) for the migrate Job to have applied every
/// migration this binary knows. A limit of zero looks once. The database refusing the check
/// itself (a missing grant) is an error at once: waiting for a migration would not heal it.
pub async fn wait_for_schema(pool: &PgPool, limit: Duration) -> Result<(), SchemaWait> {
    let mut outage = Outage::new(Instant::now(), limit);
    let mut said = false;
    loop {
        if schema_ready(pool).await? {
            return Ok(());
        }
        let Some(wait) = outage.next_wait(Instant::now()) else {
            return Err(SchemaWait::NotMigrated);
        };
        if !said {
            tracing::info!(
                "waiting for the schema: run `campaign-sender migrate` (the migrate Job)"
            );
            said = true;
        }
        tokio::time::sleep(wait).await;
    }
}
