//! The pool and the migrations. Every subcommand connects through [`connect`] (bounded retries,
//! [`super::outage`]) and, when the database is not usable, says so through
//! `crate::cli::problem`, which also says how patient each command is.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use tokio::time::Instant;

use sqlx::Connection;

use super::outage::{retrying_if, Outage};
use crate::config::DbConfig;

/// How long a statement waits for a pooled connection before its retry rule
/// ([`super::outage`]) takes over. sqlx backs off between its own connection attempts by up to a
/// fifth of this, so it also bounds how late a pod notices that the database is back: 2.5 s
/// keeps that under 0.5 s (10 s let a pod sleep 2 s after an 8-s restart, then climb).
const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(2_500);

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

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
    cfg: &DbConfig,
    retry: impl Fn(&sqlx::Error) -> bool,
) -> Result<PgPool, sqlx::Error> {
    let opts: PgConnectOptions = cfg.database_url.expose().parse()?;
    let opts = opts
        .application_name("campaign-sender")
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(2));
    let limit = Duration::from_secs(cfg.db_connect_retry_s);
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
        Ok(PgPoolOptions::new()
            .max_connections(cfg.db_max_connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(opts.clone()))
    })
    .await
}

/// A database error as it may be logged or shown, at start and mid-run alike: a refused login
/// (SQLSTATE class 28) by its code only — the server's text names the user, the client address
/// and the database, and a Cloud SQL IAM user is an email address; anything else (I/O, TLS,
/// other server answers, whose messages name tables, columns or the database) as sqlx words it,
/// which never holds the URL or the password.
pub fn error_text(e: &sqlx::Error) -> String {
    match sqlstate(e) {
        Some(c) if c.starts_with("28") => format!("the server refused the login (SQLSTATE {c})"),
        _ => e.to_string(),
    }
}

/// The SQLSTATE of a server's answer, if the error is one.
pub fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) => d.code().map(|c| c.into_owned()),
        _ => None,
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
