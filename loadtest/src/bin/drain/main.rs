//! `drain`: one complete local load run, with a report.
//!
//! Given `DATABASE_URL` of a throwaway server (scripts/demo.sh starts one), it creates a fresh
//! database, migrates it, generates N targets, starts `fake-provider` with the chosen rate
//! limit / burst / latency / faults on 127.0.0.1, starts W `campaign-sender run` processes (each
//! with `JOB_COMPLETION_INDEX=i`, as an Indexed Job gives them),
//! waits for them (bounded; progress sampled every 250 ms), and prints one JSON line and a human
//! summary: elapsed, delivered/s over the steady part, utilisation against the provider limit, 429s, duplicate requests,
//! members delivered more than once, final states, peak RSS per worker, exit codes.
//!
//! Every worker is given the provider's whole limit as `MAIL_RATE_PER_S`: they share it through
//! PostgreSQL (`src/rate/`). `--event 10:join`, `--event 20:term`, `--event 30:kill`
//! start a worker, or SIGTERM / SIGKILL the oldest one still running, at that second; for each
//! event the report gives the lowest 1-second rate in the 10 s after it and how long the rate
//! stayed below 95 % of the limit.
//! Everything is bounded in time and talks only to 127.0.0.1.

mod chart;
mod fleet;
mod shape;
mod summary;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

use fleet::Fleet;

#[derive(Parser, Debug)]
#[command(
    name = "drain",
    about = "Drain a generated campaign with W workers against the fake provider and report"
)]
pub struct Args {
    /// PostgreSQL server to create the run's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, default_value_t = 20_000)]
    targets: i64,
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// The provider's limit, requests/s (0 = unlimited).
    #[arg(long, default_value_t = 500.0)]
    provider_rate: f64,
    #[arg(long, default_value_t = 20)]
    burst: u32,
    #[arg(long, default_value_t = 80)]
    latency_ms: u64,
    #[arg(long, default_value_t = 20)]
    jitter_ms: u64,
    /// standard | none | outage
    #[arg(long, default_value = "standard")]
    faults: String,
    /// The contract the workers speak (`MAIL_PROVIDER`): json | sendgrid | ses | postmark |
    /// mailgun | resend. The fake serves them all.
    #[arg(long, default_value = "json")]
    provider: String,
    /// MAIL_RATE_PER_S for every worker: the fleet-wide limit they share (default: the
    /// provider's limit; 100000 when it is unlimited).
    #[arg(long)]
    worker_rate: Option<u32>,
    #[arg(long, default_value_t = 100)]
    send_concurrency: u32,
    /// `SECONDS:join|term|kill`, repeatable: start a worker, or SIGTERM / SIGKILL the oldest
    /// one still running, that many seconds into the run.
    #[arg(long = "event", value_parser = parse_event)]
    events: Vec<(f64, String)>,
    #[arg(long, default_value_t = 200)]
    batch_size: u32,
    /// Write the chart (sends per second, per worker and total, with the limit) here.
    #[arg(long, default_value = "target/drain.svg")]
    chart: PathBuf,
    /// The workers' logs go to a directory of the run's name under this one.
    #[arg(long, default_value = "target/drain-logs")]
    logs: PathBuf,
    /// Longest the run may take before workers are stopped (SIGTERM, then SIGKILL).
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Send a signal to worker 0 this many seconds into the run (with --kill-signal) and measure
    /// how long until every row that was `sending` at that moment is settled.
    #[arg(long)]
    kill_after_s: Option<u64>,
    /// KILL (a crash: rows return after LEASE_S) or TERM (graceful: released at once).
    #[arg(long, default_value = "KILL")]
    kill_signal: String,
    /// LEASE_S for the workers.
    #[arg(long, default_value_t = 30)]
    lease_s: u64,
    /// Concurrent claim → finish loops for the database ceiling (default: --workers).
    #[arg(long)]
    ceiling_loops: Option<u32>,
    /// Keep the run's database afterwards.
    #[arg(long)]
    keep: bool,
    /// The provider over HTTPS: a throwaway CA and a certificate for `localhost`
    /// (`scripts/tls-certs.sh`, in the run's log directory), trusted by the workers through
    /// `MAIL_CA_FILE` — what TLS costs the workers in CPU and memory.
    #[arg(long)]
    tls: bool,
    /// Run every worker under `valgrind --tool=callgrind` and report the instructions each
    /// executed (`instructions`): CPU per mail as a count, the same however busy the machine
    /// is (valgrind slows a worker ~50×: keep the rate low, e.g. `--provider-rate 50`).
    #[arg(long)]
    callgrind: bool,
    /// The CA the workers and the harness trust (set by --tls).
    #[arg(skip)]
    ca_file: Option<PathBuf>,
}

fn parse_event(s: &str) -> Result<(f64, String), String> {
    let (t, what) = s.split_once(':').ok_or("expected SECONDS:join|term|kill")?;
    let t: f64 = t
        .parse()
        .map_err(|_| format!("{t:?} is not a number of seconds"))?;
    match what {
        "join" | "term" | "kill" => Ok((t, what.to_string())),
        _ => Err(format!("{what:?} is not join, term or kill")),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut a = Args::parse();
    if a.targets <= 0 || a.workers == 0 {
        bail!("--targets and --workers must be positive");
    }
    let run_id = format!(
        "drain_{}_{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    );
    let (db_url, pool) =
        loadtest::create_run_db(&a.database_url, &run_id, CAMPAIGN, a.targets).await?;
    // The database's own ceiling, in this run: W loops of the same claim → fenced-finish
    // statements the workers use, with no HTTP, over a separate campaign.
    let ceiling_rows = a.targets.min(100_000);
    let loops = a.ceiling_loops.unwrap_or(a.workers);
    let ceiling = db_ceiling(&db_url, loops, ceiling_rows, a.batch_size).await?;
    eprintln!("  database ceiling: {ceiling:.0} rows/s (claim + finish of {ceiling_rows} rows, {loops} loops)");
    let logdir = a.logs.join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let mut provider_args = loadtest::provider_args(
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        &a.faults,
    );
    if a.tls {
        let dir = logdir.join("tls");
        let made = std::process::Command::new("scripts/tls-certs.sh")
            .arg(&dir)
            .status()
            .context("scripts/tls-certs.sh (run from the repository's root)")?;
        anyhow::ensure!(made.success(), "scripts/tls-certs.sh failed");
        for (flag, file) in [("--tls-cert", "server.crt"), ("--tls-key", "server.key")] {
            provider_args.extend([flag.to_string(), dir.join(file).display().to_string()]);
        }
        a.ca_file = Some(dir.join("ca.crt"));
    }
    let provider_t0 = Instant::now();
    let provider = loadtest::start_provider(&provider_args)?;
    let mut fleet = Fleet::start(&a, &db_url, &provider.base, pool.clone(), logdir.clone())?;
    let run = fleet.run(&a, provider_t0).await?;
    let results = summary::Results::gather(&a, &run, &provider.base, &pool).await?;
    let title = summary::headline(&a, &run, &results);
    chart::draw(&a.chart, &results.per_second, a.provider_rate, &title)?;
    pool.close().await;
    drop(provider);
    if !a.keep {
        loadtest::drop_run_db(&a.database_url, &run_id).await?;
    }
    let ok = summary::report(&a, &run, &results, ceiling, &logdir);
    // A worker we killed or stopped on purpose is not a failure of the run (a stopped one exits
    // 1, "incomplete", or 0 if the campaign was done by then).
    let expected = |i: usize, c: &Option<i32>| {
        matches!(c, Some(0))
            || (i == 0 && a.kill_after_s.is_some())
            || (run.signalled[i] && matches!(c, Some(1) | Some(-1)))
    };
    if !ok || !run.codes.iter().enumerate().all(|(i, c)| expected(i, c)) {
        std::process::exit(1);
    }
    Ok(())
}

/// The campaign every drain run sends.
pub const CAMPAIGN: &str = "drain-campaign";

/// Drains `rows` rows of a separate campaign with `loops` concurrent claim → finish(sent) loops
/// using the library's own statements; returns rows per second.
async fn db_ceiling(db_url: &str, loops: u32, rows: i64, batch: u32) -> anyhow::Result<f64> {
    use campaign_sender::outcome::Resolution;
    use campaign_sender::store::Store;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(loops + 1)
        .connect(db_url)
        .await?;
    loadtest::insert_targets(&pool, "db-ceiling", rows).await?;
    let store = Store::new(pool.clone(), "db-ceiling");
    let started = Instant::now();
    let tasks: Vec<_> = (0..loops)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    let b = store.claim(batch, Duration::from_secs(30)).await?;
                    if b.rows.is_empty() {
                        return Ok::<_, sqlx::Error>(());
                    }
                    let res: Vec<_> = b
                        .rows
                        .iter()
                        .map(|r| {
                            (
                                r.member_id,
                                Resolution::Sent {
                                    status: 200,
                                    message_id: None,
                                }
                                .written(),
                            )
                        })
                        .collect();
                    store.finish(b.claim_id, &res).await?;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    sqlx::query("DELETE FROM campaign_targets WHERE campaign_id = 'db-ceiling'")
        .execute(&pool)
        .await?;
    pool.close().await;
    Ok(rate)
}
