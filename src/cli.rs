//! The `campaign-sender` command line: `migrate`, `run` and `serve`. Each subcommand reads its typed
//! config, does its work through the library, and maps the outcome to an exit code
//! (see [`crate::report::exit`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tracing::error;

use crate::config::{ConfigError, DbConfig, RunConfig};
use crate::report::exit;
use crate::store::{self, Store, MIGRATOR};
use crate::worker::Worker;

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

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply the embedded migrations (safe when several pods run it at once: an advisory lock
    /// serialises them, and the second finds nothing left to do). Needs DATABASE_URL.
    Migrate,
    /// Send the campaign CAMPAIGN_ID until done, DEADLINE_S, too many failures or SIGTERM.
    /// Prints a JSON report line on stdout. Configuration: environment (see README).
    Run,
    /// Long-running mode (a Deployment): like `run` with no deadline; when the campaign is done
    /// it idles (one backlog query per IDLE_POLL_MS) and resumes when rows arrive. SIGTERM exits
    /// 0; too many permanent failures exit 2.
    Serve,
}

fn config_failure(e: ConfigError) -> ExitCode {
    // One line naming the variable; stderr, so it reaches the pod log even without tracing.
    eprintln!("configuration error: {e}");
    ExitCode::from(exit::CONFIG)
}

/// Runs the parsed command on a fresh multi-threaded runtime.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::telemetry::init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(dispatch(cli))
}

async fn dispatch(cli: Cli) -> ExitCode {
    // Both configs are read and validated before anything connects.
    let db = match DbConfig::from_env() {
        Ok(c) => c,
        Err(e) => return config_failure(e),
    };
    match cli.command {
        Command::Migrate => {
            let pool = match store::connect(&db).await {
                Ok(p) => p,
                Err(e) => return db_unavailable(e),
            };
            match MIGRATOR.run(&pool).await {
                Ok(()) => {
                    tracing::info!("migrations applied");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    error!(error = %e, "migration failed; the database is unchanged past the last applied migration");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run | Command::Serve => {
            let serve = matches!(cli.command, Command::Serve);
            let cfg = match RunConfig::from_env() {
                Ok(c) => c,
                Err(e) => return config_failure(e),
            };
            if let Some(addr) = cfg.metrics_socket() {
                if let Err(e) = crate::metrics::install(addr, &cfg.worker_name()) {
                    eprintln!(
                        "configuration error: METRICS_ADDR: cannot serve metrics on {addr} ({e})"
                    );
                    return ExitCode::from(exit::CONFIG);
                }
            }
            let cancel = crate::shutdown::root_token();
            let pool = match store::connect(&db).await {
                Ok(p) => p,
                Err(e) => return db_unavailable(e),
            };
            if let Err(code) =
                wait_for_schema(&pool, Duration::from_secs(db.db_connect_retry_s)).await
            {
                return code;
            }
            let store = Store::new(pool, cfg.campaign_id.clone());
            let worker = match Worker::new(cfg, store, Duration::from_secs(db.db_connect_retry_s)) {
                Ok(w) => w,
                Err(e) => {
                    error!(error = %e, "cannot build the HTTP client (TLS roots?)");
                    return ExitCode::from(exit::CONFIG);
                }
            };
            let outcome = if serve {
                worker.serve(cancel).await
            } else {
                worker.run(cancel).await
            };
            match outcome {
                Ok(report) => {
                    println!(
                        "{}",
                        serde_json::to_string(&report).expect("report serialises")
                    );
                    eprintln!("{}", report.human());
                    ExitCode::from(report.exit_code)
                }
                Err(e) => {
                    error!(error = %e, "run aborted");
                    ExitCode::from(exit::DATABASE_UNAVAILABLE)
                }
            }
        }
    }
}

/// Waits (up to `limit`) for the migrate Job to have applied every migration this binary knows.
async fn wait_for_schema(pool: &sqlx::PgPool, limit: Duration) -> Result<(), ExitCode> {
    let give_up = tokio::time::Instant::now() + limit;
    let mut said = false;
    loop {
        match store::schema_ready(pool).await {
            Ok(true) => return Ok(()),
            Ok(false) if tokio::time::Instant::now() < give_up => {
                if !said {
                    tracing::info!(
                        "waiting for the schema: run `campaign-sender migrate` (the migrate Job)"
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok(false) => {
                error!("the database schema is not migrated to this version: run `campaign-sender migrate` (the migrate Job) first; a rerun is safe");
                return Err(ExitCode::from(exit::DATABASE_UNAVAILABLE));
            }
            Err(e) => return Err(db_unavailable(e)),
        }
    }
}

fn db_unavailable(e: sqlx::Error) -> ExitCode {
    error!(error = %e, "cannot reach the database: check DATABASE_URL, credentials and network; a rerun is safe");
    ExitCode::from(exit::DATABASE_UNAVAILABLE)
}
