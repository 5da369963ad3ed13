//! The pool, the migrations, and the one path from a database error to what an operator reads.
//!
//! Every subcommand connects through [`connect`] (bounded retries, [`super::outage`]) and, when
//! the database is not usable, says so through [`DbProblem`]: one classification of the error,
//! one sentence of advice, one exit code, and never the URL, the password, or the user a refused
//! login names ([`error_text`]).

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use tokio::time::Instant;

use super::outage::{retrying, Outage};
use crate::config::DbConfig;
use crate::exit;

/// The embedded migrations (`migrations/`).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Connects with bounded retries: an unreachable database at start (a pod scheduled before
/// Cloud SQL's proxy is up, a failover) is waited for up to `DB_CONNECT_RETRY_S`, then reported.
///
/// Everything is retried within the limit, refusals by the server too: a server starting up
/// (57P03) or full (53300) heals by waiting, and so does a login refused (class 28) while a
/// password is being rotated — the role changed before the Secret or after it. Past the limit
/// the error goes to the caller, which says what to check ([`DbProblem`]).
pub async fn connect(cfg: &DbConfig) -> Result<PgPool, sqlx::Error> {
    let opts: PgConnectOptions = cfg.database_url.expose().parse()?;
    let opts = opts
        .application_name("campaign-sender")
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(2));
    let limit = Duration::from_secs(cfg.db_connect_retry_s);
    let give_up = Instant::now() + limit;
    retrying(limit, "connecting to the database", || {
        // sqlx itself keeps retrying a refused connection until the acquire timeout: cap that at
        // what is left of DB_CONNECT_RETRY_S (at least 500 ms), so the limit is the limit.
        let left = give_up.saturating_duration_since(Instant::now());
        PgPoolOptions::new()
            .max_connections(cfg.db_max_connections)
            .acquire_timeout(
                Duration::from_secs(10)
                    .min(left)
                    .max(Duration::from_millis(500)),
            )
            .connect_with(opts.clone())
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

/// What is wrong with the database, for the person who must fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbProblem {
    /// SQLSTATE class 28: a wrong password, a role that may not log in, no pg_hba.conf entry.
    LoginRefused { sqlstate: String },
    /// 3D000: the database named in the URL does not exist.
    NoDatabase,
    /// Anything else: refused or timed-out connections, TLS, a server that went away.
    Unreachable,
}

impl DbProblem {
    pub fn of(e: &sqlx::Error) -> Self {
        match sqlstate(e).as_deref() {
            Some(c) if c.starts_with("28") => DbProblem::LoginRefused {
                sqlstate: c.to_string(),
            },
            Some("3D000") => DbProblem::NoDatabase,
            _ => DbProblem::Unreachable,
        }
    }

    /// What to check, in one sentence.
    pub fn advice(&self) -> &'static str {
        match self {
            DbProblem::LoginRefused { .. } => "the database refused the login: check the user and password in DATABASE_URL (the Secret) and that the role may log in from here; a rerun is safe",
            DbProblem::NoDatabase => "the database named in DATABASE_URL does not exist: check its path; a rerun is safe",
            DbProblem::Unreachable => "cannot reach the database: check DATABASE_URL, credentials and network; a rerun is safe",
        }
    }

    pub fn exit_code(&self) -> u8 {
        exit::DATABASE_UNAVAILABLE
    }
}

/// Logs what is wrong with the database and what to check; returns the exit code for it. The
/// one place a database error ends a command.
pub fn report(e: &sqlx::Error) -> u8 {
    let problem = DbProblem::of(e);
    let shown = error_text(e);
    match &problem {
        DbProblem::LoginRefused { sqlstate } => {
            tracing::error!(error = %shown, sqlstate = %sqlstate, "{}", problem.advice())
        }
        DbProblem::NoDatabase => {
            tracing::error!(error = %shown, sqlstate = "3D000", "{}", problem.advice())
        }
        DbProblem::Unreachable => tracing::error!(error = %shown, "{}", problem.advice()),
    }
    problem.exit_code()
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
