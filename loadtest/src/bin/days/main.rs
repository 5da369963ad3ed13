//! `days`: a campaign that spans days, in scaled time — one day is `--day-s` seconds (60), its
//! send window `--window-s` (20) starting `--window-at-s` (15) into the day — against a provider
//! at `--provider-rate` (100/s). Everything an operator and Kubernetes would do happens through
//! the real binary:
//!
//! - the campaign is imported with a `priority` column (seeded random 0–9);
//! - at the start of each scaled day, `campaign-sender configure --window HH:MM:SS-HH:MM:SS
//!   --timezone UTC` sets that day's window (a real day is 24 h; this is the scaled clock);
//! - a CronJob fires every `--cadence-s` (a quarter day, "every 6 hours"): an Indexed Job of
//!   `--workers` `run` pods with `JOB_NAME` and `DEADLINE_S` (its `activeDeadlineSeconds`),
//!   skipped while the previous Job still runs (`concurrencyPolicy: Forbid`); outside the window
//!   its pods exit 0 at once;
//! - while the window is open a random pod gets SIGKILL every `--kill-every-s` and its Job
//!   restarts it a second later (same `JOB_NAME`: it keeps the Job's budget);
//! - opt-outs are committed before, during and after each day's window (half on the rows next in
//!   line, half on rows in flight);
//! - on `--pause-day`, `campaign-sender pause` before its window and `resume` after it.
//!
//! Per day it prints sent, remaining, whether priority order held, duplicates, lost, mails after
//! an opt-out, requests outside the window and how late pods exited after the close; and exits
//! 1 if a check fails. Bounded: `--days` days plus 30 s; 127.0.0.1 only.

mod day;
mod fleet;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use loadtest::sibling;
use rand::{Rng, SeedableRng};

use day::{Day, Snapshot};
use fleet::Fleet;

#[derive(Parser, Debug)]
#[command(
    name = "days",
    about = "A campaign over several scaled days, with windows, priority, kills, opt-outs and a pause"
)]
pub struct Args {
    /// PostgreSQL server to create the run's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    #[arg(long, default_value_t = 2000)]
    pub targets: i64,
    #[arg(long, default_value_t = 3)]
    pub days: u32,
    /// Seconds in one scaled day.
    #[arg(long, default_value_t = 60)]
    pub day_s: u64,
    /// The send window's length and its start within the day (seconds).
    #[arg(long, default_value_t = 20)]
    pub window_s: u64,
    #[arg(long, default_value_t = 15)]
    pub window_at_s: u64,
    /// A Job every this many seconds (a quarter day: "every 6 hours").
    #[arg(long, default_value_t = 15)]
    pub cadence_s: u64,
    /// Each Job's time budget (DEADLINE_S; its activeDeadlineSeconds), within the cadence.
    #[arg(long, default_value_t = 13)]
    pub deadline_s: u64,
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// BATCH_SIZE, scaled with the rate: production's 200 rows at 500/s over 4 pods are 1.6 s of
    /// a pod's work; 40 are that at 100/s.
    #[arg(long, default_value_t = 40)]
    pub batch_size: u32,
    #[arg(long, default_value_t = 100.0)]
    pub provider_rate: f64,
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    #[arg(long, default_value_t = 4.0)]
    pub kill_every_s: f64,
    /// Opt-outs committed at each of three moments a day.
    #[arg(long, default_value_t = 40)]
    pub optouts: i64,
    /// The day (1-based) whose window the campaign is paused across; 0 for none.
    #[arg(long, default_value_t = 2)]
    pub pause_day: u32,
    /// LEASE_S (short, so a killed pod's rows come back within the window; at least the request
    /// timeout + 2 s).
    #[arg(long, default_value_t = 10)]
    pub lease_s: u64,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    #[arg(long, default_value = "target/days-logs")]
    pub logs: PathBuf,
}

pub const CAMPAIGN: &str = "days-campaign";
pub const OPTOUT_RECHECK_MS: u64 = 1000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.window_at_s + a.window_s < a.day_s && a.deadline_s < a.cadence_s,
        "the window must fit in the day and a Job's deadline in the cadence"
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);
    let run_id = format!(
        "days_{}_{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    );
    let (db_url, pool) = loadtest::create_run_db(&a.database_url, &run_id, CAMPAIGN, 0).await?;
    let logdir = a.logs.join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let sender = sibling("campaign-sender")?;
    import_with_priorities(&sender, &db_url, &logdir, a.targets, &mut rng)?;
    let provider = loadtest::start_provider(&loadtest::provider_args(
        a.provider_rate,
        a.burst,
        80,
        20,
        "standard",
    ))?;
    let mut fleet = Fleet::new(
        &a,
        sender,
        db_url,
        format!("{}/v1/send", provider.base),
        logdir.clone(),
    );
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;

    // Day 1 starts on the next whole second, so windows fall on whole seconds.
    let now = chrono::Utc::now();
    let start_wall =
        now + chrono::Duration::milliseconds(2000 - now.timestamp_subsec_millis() as i64);
    let start = Instant::now() + (start_wall - now).to_std()?;
    let mut days = Vec::new();
    let mut optouts = Vec::new();
    let mut before = Snapshot::take(&pool, &http, &provider.base).await?;
    for d in 0..a.days {
        let mut day = Day::new(&a, d, start, start_wall);
        day.play(&a, &mut fleet, &pool, &mut rng).await?;
        optouts.append(&mut day.optouts);
        let after = Snapshot::take(&pool, &http, &provider.base).await?;
        days.push(
            day.judge(&a, &fleet, &pool, &optouts, &before, &after)
                .await?,
        );
        before = after;
    }
    fleet.stop_all()?;
    let failed = day::report(&a, &days, &fleet);
    eprintln!("worker logs: {}", logdir.display());
    pool.close().await;
    drop(provider);
    loadtest::drop_run_db(&a.database_url, &run_id).await?;
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

/// The campaign as the other system hands it over: a CSV with a priority per member, imported
/// by `campaign-sender import`.
fn import_with_priorities(
    sender: &std::path::Path,
    db_url: &str,
    logdir: &std::path::Path,
    targets: i64,
    rng: &mut impl Rng,
) -> anyhow::Result<()> {
    let csv = logdir.join("members.csv");
    let mut text = String::from("member_id,email,priority\n");
    for m in 1..=targets {
        text += &format!("{m},member{m}@example.com,{}\n", rng.random_range(0..10));
    }
    std::fs::write(&csv, text)?;
    let out = std::process::Command::new(sender)
        .args(["import", "--campaign", CAMPAIGN])
        .arg(&csv)
        .env("DATABASE_URL", db_url)
        .output()
        .context("campaign-sender import")?;
    anyhow::ensure!(
        out.status.success(),
        "import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
