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
use crate::exit;
use crate::store::connect::{self, wait_for_schema, SchemaWait};
use crate::store::{Store, MIGRATOR};
use crate::worker::Worker;
use problem::{Patience, Target, Who};

/// Prints a configuration problem (one line naming the variable, on stderr so that it reaches
/// the pod log even without tracing); exit 78.
fn config_failure(e: ConfigError) -> u8 {
    eprintln!("configuration error: {e}");
    exit::CONFIG
}

/// Runs the parsed command until it is done or `shutdown` fires; returns the exit code.
pub async fn run(cli: Cli, shutdown: CancellationToken) -> u8 {
    // Both configs are read and validated before anything connects.
    let db = match DbConfig::from_env() {
        Ok(c) => c,
        Err(e) => return config_failure(e),
    };
    match cli.command {
        Command::Migrate => migrate(&db).await,
        Command::Run => work(&db, None, shutdown).await,
        Command::Serve { wait_for_campaign } => work(&db, Some(wait_for_campaign), shutdown).await,
        Command::Events => servers::events(&db, shutdown).await,
        Command::Web {
            max_permanent_failure_ratio,
        } => servers::web(&db, max_permanent_failure_ratio, shutdown).await,
        operator => {
            let db = Db::new(&db, Who::Operator);
            let pool = match db.ready_pool(Patience::Interactive, Duration::ZERO).await {
                Ok(p) => p,
                Err(code) => return code,
            };
            operator::dispatch(operator, &pool, &db, shutdown).await
        }
    }
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

    /// Says what is wrong (once, with what to do); the exit code for it.
    pub fn report(&self, e: &sqlx::Error) -> u8 {
        problem::report(e, &self.target, self.who)
    }

    /// A pool on a database migrated to this version, waiting up to `schema_wait` for the
    /// migrate Job; else the exit code, with what to do said once.
    async fn ready_pool(&self, patience: Patience, schema_wait: Duration) -> Result<PgPool, u8> {
        let pool = connect::connect(self.cfg, |e| patience.waits_for(e))
            .await
            .map_err(|e| self.report(&e))?;
        match wait_for_schema(&pool, schema_wait).await {
            Ok(()) => Ok(pool),
            Err(SchemaWait::NotMigrated) => {
                error!("{}", SchemaWait::NotMigrated);
                Err(exit::DATABASE_UNAVAILABLE)
            }
            Err(SchemaWait::Database(e)) => Err(self.report(&e)),
        }
    }
}

async fn migrate(cfg: &DbConfig) -> u8 {
    let db = Db::new(cfg, Who::Owner);
    let pool = match connect::connect(cfg, |e| Patience::Worker.waits_for(e)).await {
        Ok(p) => p,
        Err(e) => return db.report(&e),
    };
    if let Err(e) = MIGRATOR.run(&pool).await {
        error!(error = %e, "migration failed; the database is unchanged past the last applied migration");
        return 1;
    }
    info!("migrations applied");
    match crate::store::roles::grant(&pool).await {
        Ok(()) => {
            info!("the roles of docs/roles.sql are granted");
            exit::DONE
        }
        Err(e) => {
            let denied = connect::sqlstate(&e).as_deref() == Some("42501");
            error!(error = %connect::error_text(&e), "the migrations are applied, but granting the roles of docs/roles.sql failed: the owner needs CREATEROLE, or create the roles first; then run migrate again");
            if denied {
                exit::NO_PERMISSION
            } else {
                1
            }
        }
    }
}

/// `run` (`serve`: `None`) or `serve` (`Some(wait_for_campaign)`): the worker, until it is
/// done or told to stop. Prints the JSON report on stdout and a summary on stderr.
async fn work(db: &DbConfig, serve: Option<bool>, shutdown: CancellationToken) -> u8 {
    let (serve, wait_for_campaign) = (serve.is_some(), serve.unwrap_or(false));
    let cfg = match RunConfig::from_env() {
        Ok(c) => c,
        Err(e) => return config_failure(e),
    };
    if let Some(addr) = cfg.metrics_socket() {
        if let Err(e) = crate::metrics::install(addr, &cfg.worker_name()) {
            eprintln!("configuration error: METRICS_ADDR: cannot serve metrics on {addr} ({e})");
            return exit::CONFIG;
        }
    }
    let outage_limit = Duration::from_secs(db.db_connect_retry_s);
    let db = Db::new(db, Who::Worker);
    let pool = match db.ready_pool(Patience::Worker, outage_limit).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let said = shutdown.clone();
    tokio::spawn(async move {
        said.cancelled().await;
        info!(
            "shutdown requested: no new sends; finishing in-flight requests and releasing the rest"
        );
    });
    let campaign_id = cfg.campaign_id.clone();
    let store = Store::new(pool.clone(), cfg.campaign_id.clone());
    let worker = match Worker::new(cfg, store, outage_limit) {
        Ok(w) => w,
        Err(e) => {
            error!(error = %e, "configuration error; nothing sent");
            return exit::CONFIG;
        }
    };
    // A typo in CAMPAIGN_ID would "succeed" with nothing sent (a Job) or idle forever (serve).
    if !wait_for_campaign {
        match operator::known(&pool, &campaign_id, false).await {
            Ok(None) => {}
            Ok(Some(refusal)) => {
                error!("CAMPAIGN_ID: {refusal}");
                return exit::UNKNOWN_CAMPAIGN;
            }
            Err(e) => return db.report(&e),
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
            report.exit_code
        }
        Err(crate::worker::RunError::Config(e)) => {
            error!(error = %e, "configuration error; nothing sent");
            exit::CONFIG
        }
        Err(crate::worker::RunError::Database(limit, e)) => {
            error!(
                limit_s = limit.as_secs(),
                "the database stayed away; rows this worker held are re-claimed after their lease"
            );
            db.report(&e)
        }
    }
}
