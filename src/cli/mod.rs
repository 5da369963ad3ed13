//! The `campaign-sender` command line. Long-running: `run`, `serve` (the workers), `events` (the
//! vendors' webhooks), `web` (the status page); `migrate`. Operators, with only `DATABASE_URL`:
//! `import`, `status`, `pause`, `resume`, `limit`, `retry-failed`, `resolve`, `suppress`,
//! `archive`, `configure`. Each subcommand reads its typed config, does its work through the
//! library, and maps the outcome to an exit code ([`crate::exit`]).
//!
//! The binary (`src/main.rs`) parses the [`Cli`], sets up logging and the runtime, turns
//! SIGTERM/SIGINT into the shutdown token, and calls [`run`]; nothing here exits the process.
//!
//! - `mod.rs`: the [`Cli`], the dispatch (one line per command), connecting for every command;
//! - [`cmd`]: one file per command, its arguments beside its work;
//! - [`args`]: the value parsers the commands share (times, rates, ratios, windows);
//! - `servers.rs`: what the two HTTP servers (`events`, `web`) share;
//! - [`problem`]: what a database error means for the person who must fix it (advice, exit
//!   code, whether waiting can heal it), and how patient each command is.

pub mod args;
pub mod cmd;
pub mod problem;
mod servers;

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::error;

use clap::{Parser, Subcommand};

use crate::config::{ConfigError, DbConfig, FromEnv};
use crate::exit::{self, Exit};
use crate::store::connect::{self, wait_for_schema, SchemaWait, Session};
use problem::{Patience, Target, Who};

#[derive(Parser, Debug)]
#[command(
    name = "campaign-sender",
    version,
    about = "Crash-, overlap- and restart-safe campaign sender on PostgreSQL"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Every subcommand, one line each: its arguments and its work are its file in [`cmd`].
#[derive(Subcommand, Debug)]
pub enum Command {
    Migrate(cmd::migrate::Migrate),
    Run(cmd::run::Run),
    Serve(cmd::run::Serve),
    Events(cmd::events::Events),
    Web(cmd::web::Web),
    #[command(flatten)]
    Operator(cmd::Operator),
}

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
        Command::Migrate(c) => c.run(&db).await,
        Command::Run(c) => c.run(&db, shutdown).await,
        Command::Serve(c) => c.run(&db, shutdown).await,
        Command::Events(c) => c.run(&db, shutdown).await,
        Command::Web(c) => c.run(&db, shutdown).await,
        Command::Operator(c) => c.run(&db, shutdown).await,
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

    /// Where the database is ([`connect::connect`]).
    fn reach(&self) -> connect::Reach<'_> {
        self.cfg.reach()
    }

    /// How long a database outage is ridden out (`DB_CONNECT_RETRY_S`).
    fn outage_limit(&self) -> Duration {
        self.reach().retry_for
    }

    /// A pool on a database migrated to this version, waiting up to `schema_wait` for the
    /// migrate Job.
    async fn ready_pool(
        &self,
        session: Session,
        patience: Patience,
        schema_wait: Duration,
    ) -> Result<PgPool, CliError> {
        let pool = connect::connect(self.reach(), session, |e| patience.waits_for(e)).await?;
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
