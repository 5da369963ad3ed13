//! `forget`: what the provider's key retention and its suppression list do to a campaign that
//! spans days, with three ways of running it (scaled time, 127.0.0.1 only, bounded):
//!
//! - **a**: relying on the provider alone — no `suppress`, and a re-send whatever the age of an
//!   unknown outcome (`IDEMPOTENCY_WINDOW_S` ten years: the rule switched off);
//! - **b**: `campaign-sender suppress` of the provider's exported list before each run;
//! - **c**: (b) plus the idempotency window rule (`IDEMPOTENCY_WINDOW_S` = the key retention).
//!
//! Each scenario gets a fresh database and a fresh fake provider that forgets keys after
//! `--retention-s`, answers `--late-ppm` of fresh deliveries too late (the mail went, the client
//! timed out) and keeps a suppression list: `--listed-pct` of the members at the start, another
//! `--new-pct` each day before the run and as much again halfway through it. Each day a Job of
//! `--workers` `run` pods sends; on every day but the last, `--stop-at-s` into the run two pods
//! get SIGKILL and the others SIGTERM (a node drain, an eviction, a failed night); then the
//! campaign rests `--gap-s` (longer than the retention). The last day runs to the end.
//!
//! Counted per scenario: members mailed twice, misses (members never on the list who were never
//! mailed), requests for listed addresses (each a 406 and a `failed` row), rows `unconfirmed`
//! and, of those, how many the provider had in fact delivered (what `resolve --assume-sent`
//! gets right; the rest `--resend` would get right), and whether the failure budget paused the
//! campaign. Prints a Markdown table (docs/BENCHMARKS.md) and one JSON line per scenario.

mod scenario;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use scenario::{Outcome, Scenario};

#[derive(Parser, Debug)]
#[command(
    name = "forget",
    about = "Key retention and suppression lists over scaled days"
)]
pub struct Args {
    /// PostgreSQL server to create each scenario's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// Which scenarios: a, b, c, or all.
    #[arg(long, default_value = "all")]
    pub scenario: String,
    #[arg(long, default_value_t = 3000)]
    pub targets: i64,
    #[arg(long, default_value_t = 3)]
    pub days: u32,
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    #[arg(long, default_value_t = 100.0)]
    pub provider_rate: f64,
    /// The provider's key retention (seconds) — "24 h" in scaled time.
    #[arg(long, default_value_t = 20)]
    pub retention_s: u64,
    /// Fresh deliveries per million answered after --late-ms (past READ_TIMEOUT_MS).
    #[arg(long, default_value_t = 30_000)]
    pub late_ppm: u32,
    #[arg(long, default_value_t = 3_000)]
    pub late_ms: u64,
    #[arg(long, default_value_t = 1_000)]
    pub read_timeout_ms: u64,
    /// Seconds into a day's run when its pods are stopped (every day but the last).
    #[arg(long, default_value_t = 8.0)]
    pub stop_at_s: f64,
    /// Rest between days: longer than the retention.
    #[arg(long, default_value_t = 25)]
    pub gap_s: u64,
    /// Members on the provider's list at the start, and added each day (twice: before the run
    /// and halfway through it), in percent.
    #[arg(long, default_value_t = 0.5)]
    pub listed_pct: f64,
    #[arg(long, default_value_t = 0.2)]
    pub new_pct: f64,
    #[arg(long, default_value = "target/forget-logs")]
    pub logs: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(
        a.gap_s > a.retention_s,
        "--gap-s must exceed --retention-s (the provider must have forgotten the keys)"
    );
    let scenarios: Vec<Scenario> = match a.scenario.as_str() {
        "all" => vec![Scenario::A, Scenario::B, Scenario::C],
        s => vec![Scenario::parse(s)?],
    };
    let mut rows = Vec::new();
    for s in scenarios {
        eprintln!("scenario {}: {}", s.name(), s.what());
        let out = tokio::time::timeout(budget(&a), scenario::play(&a, s))
            .await
            .map_err(|_| anyhow::anyhow!("scenario {} ran out of time", s.name()))??;
        println!("{}", serde_json::to_string(&out)?);
        rows.push((s, out));
    }
    table(&a, &rows);
    Ok(())
}

/// Days × (a run + the gap) plus the last day's drain, with room.
fn budget(a: &Args) -> Duration {
    let last = a.targets as f64 / a.provider_rate * 3.0 + 60.0;
    Duration::from_secs_f64(a.days as f64 * (a.stop_at_s + a.gap_s as f64 + 10.0) + last)
}

fn table(a: &Args, rows: &[(Scenario, Outcome)]) {
    eprintln!(
        "\n{} members over {} scaled days, {} pods, provider {}/s forgetting keys after {} s, {} ppm answered after {} ms (READ_TIMEOUT_MS {}), pods stopped {} s into each run but the last, {} s between runs; list {} % + {} % before and {} % during each run\n",
        a.targets, a.days, a.workers, a.provider_rate, a.retention_s, a.late_ppm, a.late_ms,
        a.read_timeout_ms, a.stop_at_s, a.gap_s, a.listed_pct, a.new_pct, a.new_pct
    );
    eprintln!("| scenario | mailed twice | misses | requests for listed addresses (failed rows) | unconfirmed (of them delivered) | paused by the failure budget |");
    eprintln!("|---|---|---|---|---|---|");
    for (s, o) in rows {
        eprintln!(
            "| {} {} | {} | {} | {} ({}) | {} ({}) | {} |",
            s.name(),
            s.what(),
            o.mailed_twice,
            o.misses,
            o.listed_requests,
            o.failed,
            o.unconfirmed,
            o.unconfirmed_delivered,
            if o.paused { "yes" } else { "no" }
        );
    }
}
