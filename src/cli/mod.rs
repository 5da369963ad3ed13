//! The `campaign-sender` command line. Long-running: `run`, `serve` (the workers), `events` (the
//! vendors' webhooks), `web` (the status page); `migrate`. Operators, with only `DATABASE_URL`:
//! `import`, `status`, `pause`, `resume`, `limit`, `retry-failed`, `resolve`, `suppress`,
//! `archive`, `configure`. Each subcommand reads its typed config, does its work through the
//! library, and maps the outcome to an exit code ([`crate::exit`]).
//!
//! The binary (`src/main.rs`) parses the [`Cli`], sets up logging and the runtime, turns
//! SIGTERM/SIGINT into the shutdown token, and calls [`run`]; nothing here exits the process.
//!
//! - [`args`]: every subcommand and option;
//! - `mod.rs`: `migrate`, `run`, `serve`, and connecting for every command;
//! - `servers.rs`: `events` and `web`, the two HTTP servers;
//! - [`operator`]: dispatching the operator commands, `pause`, `retry-failed`, `configure`,
//!   and the check that a named campaign exists;
//! - [`problem`]: what a database error means for the person who must fix it (advice, exit
//!   code, whether waiting can heal it), and how patient each command is;
//! - `account.rs`: `resume` and `limit`; `suppress.rs`: `suppress` and `resolve`;
//!   `archive.rs`: `archive`;
//! - `import.rs`, `status.rs`: the terminal side of `import` and `status` (progress bars,
//!   periodic lines, output).

mod account;
mod archive;
pub mod args;
mod import;
pub mod operator;
pub mod problem;
mod servers;
mod status;
mod suppress;

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

pub use args::{Cli, Command};

use crate::config::{ConfigError, DbConfig, FromEnv, RunConfig};
use crate::exit::{self, Exit};
use crate::store::connect::{self, wait_for_schema, SchemaWait, Session};
use crate::store::{Store, MIGRATOR};
use crate::worker::Worker;
use problem::{Patience, Target, Who};

/// How a command did not succeed. What went wrong has already been said, except for a
/// database error, which [`Db::exit`] says (with what to do) as the command ends.
#[derive(Debug)]
pub enum CliError {
    /// Said; the process exits with this code.
    Exit(Exit),
    /// The database: [`problem::report`] says what to do and picks the code (75 or 77).
    Database(sqlx::Error),
    /// Given up when asked to stop (`import`): 128 + the signal ([`exit::interrupted`]).
    Interrupted,
}

impl From<sqlx::Error> for CliError {
    fn from(e: sqlx::Error) -> Self {
        CliError::Database(e)
    }
}

impl From<Exit> for CliError {
    fn from(code: Exit) -> Self {
        CliError::Exit(code)
    }
}

/// What every command returns.
pub type CliResult = Result<(), CliError>;

/// Prints a configuration problem (one line naming the variable, on stderr so that it reaches
/// the pod log even without tracing); exit 78.
fn config_failure(e: ConfigError) -> CliError {
    eprintln!("configuration error: {e}");
    CliError::Exit(Exit::Config)
}

/// Runs the parsed command until it is done or `shutdown` fires; returns the exit code.
pub async fn run(cli: Cli, shutdown: CancellationToken) -> u8 {
    // Both configs are read and validated before anything connects.
    let cfg = match DbConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("configuration error: {e}");
            return Exit::Config.code();
        }
    };
    let db = Db::new(&cfg, Who::of(&cli.command));
    let result = match cli.command {
        Command::Migrate => migrate(&db).await,
        Command::Run => work(&db, None, shutdown).await,
        Command::Serve { wait_for_campaign } => work(&db, Some(wait_for_campaign), shutdown).await,
        Command::Events => servers::events(&db, shutdown).await,
        Command::Web {
            max_permanent_failure_ratio,
        } => servers::web(&db, max_permanent_failure_ratio, shutdown).await,
        operator => operator::run(operator, &db, shutdown).await,
    };
    db.exit(result)
}

/// A command's database: how to reach it, and how to say what is wrong with it.
pub struct Db<'a> {
    cfg: &'a DbConfig,
    target: Target,
    who: Who,
}

impl<'a> Db<'a> {
    fn new(cfg: &'a DbConfig, who: Who) -> Self {
        Self {
            cfg,
            target: Target::of(cfg),
            who,
        }
    }

    /// The exit status of a command that ended with `result`; a database error is said here,
    /// once, with what to do ([`problem::report`]).
    fn exit(&self, result: CliResult) -> u8 {
        match result {
            Ok(()) => Exit::Done.code(),
            Err(CliError::Exit(code)) => code.code(),
            Err(CliError::Database(e)) => problem::report(&e, &self.target, self.who).code(),
            Err(CliError::Interrupted) => exit::interrupted(),
        }
    }

    /// How long a database outage is ridden out (`DB_CONNECT_RETRY_S`).
    fn outage_limit(&self) -> Duration {
        Duration::from_secs(self.cfg.db_connect_retry_s)
    }

    /// A pool on a database migrated to this version, waiting up to `schema_wait` for the
    /// migrate Job.
    async fn ready_pool(
        &self,
        session: Session,
        patience: Patience,
        schema_wait: Duration,
    ) -> Result<PgPool, CliError> {
        let pool = connect::connect(self.cfg.reach(), session, |e| patience.waits_for(e)).await?;
        match wait_for_schema(&pool, schema_wait).await {
            Ok(()) => Ok(pool),
            Err(SchemaWait::NotMigrated) => {
                error!("{}", SchemaWait::NotMigrated);
                Err(Exit::DatabaseUnavailable.into())
            }
            Err(SchemaWait::Database(e)) => Err(e.into()),
        }
    }
}

async fn migrate(db: &Db<'_>) -> CliResult {
    let pool = connect::connect(db.cfg.reach(), Session::Other, |e| {
        Patience::Worker.waits_for(e)
    })
    .await?;
    if let Err(e) = MIGRATOR.run(&pool).await {
        error!(error = %e, "migration failed; the database is unchanged past the last applied migration");
        return Err(Exit::Incomplete.into());
    }
    info!("migrations applied");
    if let Err(e) = crate::store::roles::grant(&pool).await {
        let denied = connect::sqlstate(&e).as_deref() == Some("42501");
        error!(error = %connect::error_text(&e), "the migrations are applied, but granting the roles of docs/roles.sql failed: the owner needs CREATEROLE, or create the roles first; then run migrate again");
        return Err(if denied {
            Exit::NoPermission
        } else {
            Exit::Incomplete
        }
        .into());
    }
    info!("the roles of docs/roles.sql are granted");
    Ok(())
}

/// `run` (`serve`: `None`) or `serve` (`Some(wait_for_campaign)`): the worker, until it is
/// done or told to stop. Prints the JSON report on stdout and a summary on stderr.
async fn work(db: &Db<'_>, serve: Option<bool>, shutdown: CancellationToken) -> CliResult {
    let (serve, wait_for_campaign) = (serve.is_some(), serve.unwrap_or(false));
    let cfg = RunConfig::from_env().map_err(config_failure)?;
    let provider = cfg.provider().map_err(config_failure)?;
    if let Some(addr) = cfg.metrics_socket() {
        if let Err(e) = crate::metrics::install(addr, &cfg.worker_name()) {
            eprintln!("configuration error: METRICS_ADDR: cannot serve metrics on {addr} ({e})");
            return Err(Exit::Config.into());
        }
        crate::metrics::start_worker_counters_at_zero();
    }
    let outage_limit = db.outage_limit();
    let session = Session::Worker { outage_limit };
    let pool = db
        .ready_pool(session, Patience::Worker, outage_limit)
        .await?;
    let said = shutdown.clone();
    tokio::spawn(async move {
        said.cancelled().await;
        info!(
            "shutdown requested: no new sends; finishing in-flight requests and releasing the rest"
        );
    });
    let campaign_id = cfg.campaign_id.clone();
    let store = Store::new(pool.clone(), cfg.campaign_id.clone());
    let worker = Worker::new(cfg, provider, store, outage_limit);
    // A typo in CAMPAIGN_ID would "succeed" with nothing sent (a Job) or idle forever (serve).
    if !wait_for_campaign {
        if let Some(refusal) = operator::known(&pool, &campaign_id, false).await? {
            error!("CAMPAIGN_ID: {refusal}");
            return Err(Exit::Incomplete.into());
        }
    }
    let outcome = if serve {
        worker.serve(shutdown).await
    } else {
        worker.run(shutdown).await
    };
    match outcome {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string(&report).expect("report serialises")
            );
            eprintln!("{}", report.human());
            match report.exit_code {
                Exit::Done => Ok(()),
                code => Err(code.into()),
            }
        }
        Err(crate::worker::RunError::Config(e)) => {
            error!(error = %e, "configuration error; nothing sent");
            Err(Exit::Config.into())
        }
        Err(crate::worker::RunError::Database(limit, e)) => {
            error!(
                limit_s = limit.as_secs(),
                "the database stayed away; rows this worker held are re-claimed after their lease"
            );
            Err(e.into())
        }
    }
}
