//! The `campaign-sender` command line. Workers: `migrate`, `run`, `serve`. Operators: `import`,
//! `status`, `pause`, `resume`, `retry-failed`, `configure`. Each subcommand reads its typed
//! config, does its work through the library, and maps the outcome to an exit code
//! (see [`crate::report::exit`]). The operator commands need only `DATABASE_URL`.

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
        Command::Import { .. }
        | Command::Status { .. }
        | Command::Pause { .. }
        | Command::Resume { .. }
        | Command::RetryFailed { .. }
        | Command::Configure { .. } => {
            let pool = match store::connect(&db).await {
                Ok(p) => p,
                Err(e) => return db_unavailable(e),
            };
            if let Err(code) = wait_for_schema(&pool, Duration::ZERO).await {
                return code;
            }
            crate::operator::dispatch(cli.command, &pool).await
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

/// Exit 75 with one line that says what to check, by what the server answered. Never the URL,
/// the password, or the user a refused login named (`store::error_text`).
pub(crate) fn db_unavailable(e: sqlx::Error) -> ExitCode {
    let shown = crate::store::error_text(&e);
    let code = match &e {
        sqlx::Error::Database(d) => d.code().map(|c| c.into_owned()),
        _ => None,
    };
    match code.as_deref() {
        // 28P01 invalid_password, 28000 no pg_hba.conf entry / role may not log in.
        Some(c) if c.starts_with("28") => {
            error!(error = %shown, sqlstate = c, "the database refused the login: check the user and password in DATABASE_URL (the Secret) and that the role may log in from here; a rerun is safe")
        }
        Some(c @ "3D000") => {
            error!(error = %shown, sqlstate = c, "the database named in DATABASE_URL does not exist: check its path; a rerun is safe")
        }
        _ => {
            error!(error = %shown, "cannot reach the database: check DATABASE_URL, credentials and network; a rerun is safe")
        }
    }
    ExitCode::from(exit::DATABASE_UNAVAILABLE)
}
