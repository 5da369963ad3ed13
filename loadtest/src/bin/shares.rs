//! Two campaigns under one rate-limit key (docs/BENCHMARKS.md "Campaigns side by side"): a fake
//! provider that enforces exactly `--provider-rate` on 127.0.0.1, campaign A on `--a-workers`
//! `campaign-sender run` processes and B on `--b-workers`, each campaign's weight set with
//! `campaign-sender configure --weight` before the start; B's weight is changed live at
//! `--change-at-s`. From the provider's first deliveries it reports B's part of what was
//! delivered before and after the change, the total against the limit, how long the change took
//! to be adopted and how long A alone took to reach 95 % of the limit after B's last delivery,
//! with the 429s and members mailed twice. One JSON line on stdout, a table on stderr; exits 1
//! when a part is off by more than `--tolerance`, a 429 or a duplicate was seen, or a worker
//! failed. Every run bounded by `--timeout-s`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use fake_provider::{Delivery, Stats};

const A: &str = "newsletter";
const B: &str = "flash-sale";

#[derive(Parser, Debug)]
#[command(about = "Two campaigns sharing one rate limit by weight, against the fake provider")]
struct Args {
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, default_value_t = 4)]
    a_workers: usize,
    #[arg(long, default_value_t = 1)]
    b_workers: usize,
    #[arg(long, default_value_t = 1.0)]
    a_weight: f64,
    #[arg(long, default_value_t = 3.0)]
    b_weight: f64,
    /// B's weight from `--change-at-s` on.
    #[arg(long, default_value_t = 1.0)]
    b_weight_then: f64,
    #[arg(long, default_value_t = 15.0)]
    change_at_s: f64,
    #[arg(long, default_value_t = 11_000)]
    a_targets: i64,
    #[arg(long, default_value_t = 9_500)]
    b_targets: i64,
    #[arg(long, default_value_t = 500.0)]
    provider_rate: f64,
    #[arg(long, default_value_t = 20)]
    burst: u32,
    #[arg(long, default_value_t = 20)]
    latency_ms: u64,
    #[arg(long, default_value_t = 10)]
    jitter_ms: u64,
    /// How far B's part may be from its weight's.
    #[arg(long, default_value_t = 0.05)]
    tolerance: f64,
    #[arg(long, default_value_t = 180)]
    timeout_s: u64,
}

/// B's part of the campaigns' weights.
fn part(b: f64, a: f64) -> f64 {
    b / (a + b)
}

/// Deliveries of `campaign` per whole second since `t0_ms` (Unix ms).
fn per_second(d: &[Delivery], campaign: &str, t0_ms: u64, secs: usize) -> Vec<f64> {
    let mut v = vec![0.0; secs];
    for x in d.iter().filter(|x| x.template == campaign) {
        let s = (x.first_ms.saturating_sub(t0_ms) / 1000) as usize;
        if s < secs {
            v[s] += 1.0;
        }
    }
    v
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn configure(
    sender: &std::path::Path,
    db: &str,
    campaign: &str,
    weight: f64,
) -> anyhow::Result<()> {
    let out = Command::new(sender)
        .args([
            "configure",
            "--campaign",
            campaign,
            "--weight",
            &weight.to_string(),
        ])
        .env("DATABASE_URL", db)
        .output()
        .context("campaign-sender configure")?;
    if !out.status.success() {
        bail!(
            "configure --weight: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn spawn(
    a: &Args,
    sender: &std::path::Path,
    db: &str,
    base: &str,
    campaign: &str,
    i: usize,
) -> anyhow::Result<Child> {
    let env = [
        ("DATABASE_URL", db.to_string()),
        ("CAMPAIGN_ID", campaign.to_string()),
        ("WORKER_ID", format!("{campaign}-{i}")),
        ("MAIL_RATE_PER_S", a.provider_rate.to_string()),
        ("SEND_CONCURRENCY", "64".to_string()),
        ("DEADLINE_S", a.timeout_s.to_string()),
        ("LOG_FORMAT", "json".to_string()),
        ("RUST_LOG", "warn".to_string()),
    ];
    Command::new(sender)
        .arg("run")
        .envs(env)
        .envs(loadtest::vendor_env("json", base)?)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("start campaign-sender run")
}

/// The first second from which every whole second up to `to` has B's part within `tol` of
/// `want`, counted from `from`.
fn settled(a: &[f64], b: &[f64], from: usize, to: usize, want: f64, tol: f64) -> Option<usize> {
    (from..to).find(|&s| (s..to).all(|k| (part(b[k], a[k]) - want).abs() <= tol))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let run_id = format!("shares_{}", std::process::id());
    let (db, pool) = loadtest::create_run_db(&a.database_url, &run_id, A, a.a_targets).await?;
    loadtest::insert_targets(&pool, B, a.b_targets).await?;
    loadtest::configure_sender(&pool, B).await?;
    let sender = loadtest::sibling("campaign-sender")?;
    configure(&sender, &db, A, a.a_weight)?;
    configure(&sender, &db, B, a.b_weight)?;
    let provider = loadtest::start_provider(&loadtest::provider_args(
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        "none",
    ))?;
    let t0 = loadtest::unix_ms();
    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..a.a_workers {
        workers.push(spawn(&a, &sender, &db, &provider.base, A, i)?);
    }
    for i in 0..a.b_workers {
        workers.push(spawn(&a, &sender, &db, &provider.base, B, i)?);
    }
    tokio::time::sleep(Duration::from_secs_f64(a.change_at_s)).await;
    configure(&sender, &db, B, a.b_weight_then)?;
    let changed_s = (loadtest::unix_ms() - t0) as f64 / 1000.0;
    let hard_stop = started + Duration::from_secs(a.timeout_s + 30);
    let mut codes = vec![None; workers.len()];
    while codes.iter().any(Option::is_none) && Instant::now() < hard_stop {
        for (w, c) in workers.iter_mut().zip(codes.iter_mut()) {
            if c.is_none() {
                *c = w.try_wait()?.map(|s| s.code().unwrap_or(-1));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (w, c) in workers.iter_mut().zip(&codes) {
        if c.is_none() {
            let _ = w.kill();
        }
    }
    let http = loadtest::http_client(None)?;
    let stats: Stats = http
        .get(format!("{}/stats", provider.base))
        .send()
        .await?
        .json()
        .await?;
    let d: Vec<Delivery> = http
        .get(format!("{}/deliveries", provider.base))
        .send()
        .await?
        .json()
        .await?;
    drop(provider);
    pool.close().await;
    loadtest::drop_run_db(&a.database_url, &run_id).await?;
    report(&a, &d, &stats, t0, changed_s, &codes)
}

/// The table, the JSON line and the verdict.
fn report(
    a: &Args,
    d: &[Delivery],
    stats: &Stats,
    t0: u64,
    changed_s: f64,
    codes: &[Option<i32>],
) -> anyhow::Result<()> {
    let end = |c: &str| {
        d.iter()
            .filter(|x| x.template == c)
            .map(|x| x.first_ms)
            .max()
            .unwrap_or(t0)
    };
    let (b_end, a_end) = (
        ((end(B) - t0) / 1000) as usize,
        ((end(A) - t0) / 1000) as usize,
    );
    let secs = a_end + 1;
    let (ra, rb) = (per_second(d, A, t0, secs), per_second(d, B, t0, secs));
    let change = changed_s.ceil() as usize;
    let (want1, want2) = (
        part(a.b_weight, a.a_weight),
        part(a.b_weight_then, a.a_weight),
    );
    // Before the change: from the 3rd second (every pod has its share) to the change.
    let p1 = 2..(change - 1);
    let adopted = settled(&ra, &rb, change, b_end, want2, a.tolerance);
    let p2 = adopted.unwrap_or(b_end)..b_end;
    let alone_at = (b_end + 1..a_end).find(|&s| ra[s] >= 0.95 * a.provider_rate);
    let p3 = alone_at.map_or(a_end, |s| s)..a_end;
    let m = |v: &[f64], r: &std::ops::Range<usize>| mean(&v[r.clone()]);
    let (a1, b1, a2, b2, a3) = (
        m(&ra, &p1),
        m(&rb, &p1),
        m(&ra, &p2),
        m(&rb, &p2),
        m(&ra, &p3),
    );
    eprintln!(
        "| stretch | seconds | A/s | B/s | B's part (weights' part) | total, % of {:.0}/s |",
        a.provider_rate
    );
    eprintln!("|---|---|---|---|---|---|");
    eprintln!(
        "| weights {}:{} | {:?} | {a1:.0} | {b1:.0} | {:.3} ({want1:.3}) | {:.0}, {:.1} % |",
        a.a_weight,
        a.b_weight,
        p1,
        part(b1, a1),
        a1 + b1,
        100.0 * (a1 + b1) / a.provider_rate
    );
    eprintln!(
        "| weights {}:{} | {:?} | {a2:.0} | {b2:.0} | {:.3} ({want2:.3}) | {:.0}, {:.1} % |",
        a.a_weight,
        a.b_weight_then,
        p2,
        part(b2, a2),
        a2 + b2,
        100.0 * (a2 + b2) / a.provider_rate
    );
    eprintln!(
        "| A alone | {:?} | {a3:.0} | | | {a3:.0}, {:.1} % |",
        p3,
        100.0 * a3 / a.provider_rate
    );
    let adopt_s = adopted.map(|s| s as f64 - changed_s);
    let alone_s = alone_at.map(|s| s as f64 - (end(B) - t0) as f64 / 1000.0);
    eprintln!("weight change at {changed_s:.1} s adopted (every later second within {}) after {adopt_s:?} s; A alone at ≥ 95 % {alone_s:?} s after B's last delivery; 429s {}, mailed twice {}, delivered {}, exit codes {codes:?}", a.tolerance, stats.throttled_429, stats.members_delivered_more_than_once, stats.delivered);
    println!(
        "{}",
        serde_json::json!({
            "a_workers": a.a_workers, "b_workers": a.b_workers,
            "before": {"a": a1, "b": b1, "b_part": part(b1, a1), "want": want1},
            "after": {"a": a2, "b": b2, "b_part": part(b2, a2), "want": want2},
            "alone": a3, "adopted_after_s": adopt_s, "alone_after_s": alone_s,
            "throttled_429": stats.throttled_429,
            "mailed_twice": stats.members_delivered_more_than_once,
            "delivered": stats.delivered,
        })
    );
    let ok = (part(b1, a1) - want1).abs() <= a.tolerance
        && (part(b2, a2) - want2).abs() <= a.tolerance
        && adopted.is_some()
        && alone_at.is_some()
        && stats.throttled_429 == 0
        && stats.members_delivered_more_than_once == 0
        && stats.delivered == (a.a_targets + a.b_targets) as u64
        && codes.iter().all(|c| *c == Some(0));
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
