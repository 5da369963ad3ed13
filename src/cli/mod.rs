//! The `campaign-sender` command line. Workers: `migrate`, `run`, `serve`. Operators: `import`,
//! `status`, `pause`, `resume`, `retry-failed`, `configure`. Each subcommand reads its typed
//! config, does its work through the library, and maps the outcome to an exit code
//! ([`crate::exit`]). The operator commands need only `DATABASE_URL`.
//!
//! The binary (`src/main.rs`) parses the [`Cli`], sets up logging and the runtime, turns
//! SIGTERM/SIGINT into the shutdown token, and calls [`run`]; nothing here exits the process.
//!
//! - `mod.rs`: the arguments, and `migrate`, `run`, `serve`;
//! - [`operator`]: `pause`, `resume`, `retry-failed`, `configure`;
//! - `import.rs`, `status.rs`: the terminal side of `import` and `status` (progress bars,
//!   periodic lines, output).

mod import;
pub mod operator;
mod status;

use std::time::Duration;

use clap::{Parser, Subcommand};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::error;

use crate::config::{ConfigError, DbConfig, FromEnv, RunConfig};
use crate::exit;
use crate::store::connect::{self, wait_for_schema, SchemaWait};
use crate::store::{Store, MIGRATOR};
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
    /// Load recipients from CSV (`member_id,email`, header optional) into a campaign, in one
    /// transaction: any invalid or repeated line and nothing is imported (exit 65), unless
    /// --skip-invalid names a file for the rejects. Rows the campaign already has are left
    /// exactly as they are, so importing twice changes nothing.
    Import {
        #[arg(long)]
        campaign: String,
        /// The CSV file; `-` or nothing reads standard input.
        file: Option<std::path::PathBuf>,
        /// Import the valid lines and write every rejected one here (CSV:
        /// member_id,email,line,reason; fix it and import it again as it is).
        #[arg(long, value_name = "FILE")]
        skip_invalid: Option<std::path::PathBuf>,
    },
    /// Where a campaign is: counts by state, rate and ETA, pause, live pods and their rate
    /// shares, top failure reasons.
    Status {
        #[arg(long)]
        campaign: String,
        /// Redraw every --interval-ms until the campaign is done (Ctrl-C stops watching).
        #[arg(long)]
        watch: bool,
        /// JSON (one object per line with --watch) instead of text.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 2000, value_name = "MS")]
        interval_ms: u64,
        /// For the failure budget shown, unless the campaign's settings row has its own.
        #[arg(long, env = "MAX_PERMANENT_FAILURE_RATIO", default_value_t = 0.01)]
        max_permanent_failure_ratio: f64,
    },
    /// The kill switch: every running pod stops claiming and sending within a second, lets
    /// in-flight requests finish and releases the rest; `run` exits 3 while it is on, `serve`
    /// idles.
    Pause {
        #[arg(long)]
        campaign: String,
        /// Shown by `status`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lifts a pause (an operator's or an automatic one). Pods in `serve` continue by
    /// themselves; a Job must be started again.
    Resume {
        #[arg(long)]
        campaign: String,
    },
    /// Puts failed rows back to `pending` with their attempts reset, and prints how many.
    /// Filters narrow the selection; opted-out rows are never selected.
    RetryFailed {
        #[arg(long)]
        campaign: String,
        /// Only rows whose last provider status is one of these (e.g. `--status 422,400`).
        #[arg(long = "status", value_delimiter = ',', value_name = "CODE")]
        statuses: Vec<u16>,
        /// Only rows of these error classes (e.g. `rejected`, `invalid_email`, `timeout`).
        #[arg(long = "class", value_delimiter = ',', value_name = "CLASS")]
        classes: Vec<String>,
        /// Only rows that failed at or after this: RFC 3339 (`2026-12-02T02:00:00+09:00`) or
        /// a time ago (`90m`, `2h`).
        #[arg(long, value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Count, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Writes the campaign's optional settings row: template and failure threshold. Only the
    /// options given change; the pause is not touched.
    Configure {
        #[arg(long)]
        campaign: String,
        /// Provider template (default: the campaign id).
        #[arg(long)]
        template: Option<String>,
        /// Failure threshold for this campaign (default: MAX_PERMANENT_FAILURE_RATIO).
        #[arg(long, value_parser = parse_ratio)]
        max_permanent_failure_ratio: Option<f64>,
    },
}

/// `--since`: an RFC 3339 time, or a duration ago (`90m`, `2h 30m`).
pub fn parse_since(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let ago = humantime::parse_duration(v)
        .map_err(|e| format!("neither an RFC 3339 time nor a duration like 2h ({e})"))?;
    let ago = chrono::Duration::from_std(ago).map_err(|e| e.to_string())?;
    Ok(chrono::Utc::now() - ago)
}

fn parse_ratio(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err("must be a number between 0 and 1".into()),
    }
}

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
        Command::Run => work(&db, false, shutdown).await,
        Command::Serve => work(&db, true, shutdown).await,
        operator => {
            let pool = match ready_pool(&db, Duration::ZERO).await {
                Ok(p) => p,
                Err(code) => return code,
            };
            operator::dispatch(operator, &pool, shutdown).await
        }
    }
}

/// A pool on a database migrated to this version, waiting up to `schema_wait` for the migrate
/// Job; else the exit code, with what to do said once ([`connect::report`]).
async fn ready_pool(db: &DbConfig, schema_wait: Duration) -> Result<PgPool, u8> {
    let pool = connect::connect(db)
        .await
        .map_err(|e| connect::report(&e))?;
    match wait_for_schema(&pool, schema_wait).await {
        Ok(()) => Ok(pool),
        Err(SchemaWait::NotMigrated) => {
            error!("{}", SchemaWait::NotMigrated);
            Err(exit::DATABASE_UNAVAILABLE)
        }
        Err(SchemaWait::Database(e)) => Err(connect::report(&e)),
    }
}

async fn migrate(db: &DbConfig) -> u8 {
    let pool = match connect::connect(db).await {
        Ok(p) => p,
        Err(e) => return connect::report(&e),
    };
    match MIGRATOR.run(&pool).await {
        Ok(()) => {
            tracing::info!("migrations applied");
            exit::DONE
        }
        Err(e) => {
            error!(error = %e, "migration failed; the database is unchanged past the last applied migration");
            1
        }
    }
}

/// `run` or `serve`: the worker, until it is done or told to stop. Prints the JSON report on
/// stdout and a summary on stderr.
async fn work(db: &DbConfig, serve: bool, shutdown: CancellationToken) -> u8 {
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
    let pool = match ready_pool(db, outage_limit).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let store = Store::new(pool, cfg.campaign_id.clone());
    let worker = match Worker::new(cfg, store, outage_limit) {
        Ok(w) => w,
        Err(e) => {
            error!(error = %e, "cannot build the HTTP client (TLS roots?)");
            return exit::CONFIG;
        }
    };
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
        Err(e) => {
            error!(error = %e, "run aborted");
            exit::DATABASE_UNAVAILABLE
        }
    }
}
