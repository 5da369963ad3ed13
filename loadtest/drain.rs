//! `drain`: one complete local load run, with a report.
//!
//! Given `DATABASE_URL` of a throwaway server (scripts/demo.sh starts one), it creates a fresh
//! database, migrates it, generates N targets, starts `fake-provider` with the chosen rate
//! limit / burst / latency / faults on 127.0.0.1, starts W `campaign-sender run` processes (each
//! with `JOB_COMPLETION_INDEX=i`, as an Indexed Job gives them), samples progress every second,
//! waits for them (bounded), and prints one JSON line and a human summary: elapsed, delivered/s
//! over the steady part, utilisation against the provider limit, 429s, duplicate requests,
//! members delivered more than once, final states, peak RSS per worker, exit codes.
//! Everything is bounded in time and talks only to 127.0.0.1.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use campaign_sender::fake_provider::Stats;
use campaign_sender::store::MIGRATOR;
use clap::Parser;
use serde_json::json;
use sqlx::{Connection, Executor};

#[derive(Parser, Debug)]
#[command(
    name = "drain",
    about = "Drain a generated campaign with W workers against the fake provider and report"
)]
struct Args {
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
    /// MAIL_RATE_PER_S for each worker (default: 96 % of the provider limit split evenly).
    #[arg(long)]
    worker_rate: Option<u32>,
    #[arg(long, default_value_t = 32)]
    send_concurrency: u32,
    /// Longest the run may take before workers are stopped (SIGTERM, then SIGKILL).
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Keep the run's database afterwards.
    #[arg(long)]
    keep: bool,
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let p = me.parent().context("exe dir")?.join(name);
    if !p.exists() {
        bail!(
            "{} not found next to drain: build all binaries (cargo build --release --bins)",
            p.display()
        );
    }
    Ok(p)
}

fn with_db(url: &str, db: &str) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url).context("DATABASE_URL is not a URL")?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

struct Provider {
    child: Child,
    base: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_provider(a: &Args) -> anyhow::Result<Provider> {
    use std::io::BufRead;
    let mut child = Command::new(sibling("fake-provider")?)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--rate",
            &a.provider_rate.to_string(),
            "--burst",
            &a.burst.to_string(),
        ])
        .args([
            "--latency-ms",
            &a.latency_ms.to_string(),
            "--jitter-ms",
            &a.jitter_ms.to_string(),
        ])
        .args(["--faults", &a.faults])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start fake-provider")?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("provider stdout")?)
        .read_line(&mut line)?;
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .context("unexpected fake-provider banner")?
        .to_string();
    Ok(Provider { child, base })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.targets <= 0 || a.workers == 0 {
        bail!("--targets and --workers must be positive");
    }
    let run_id = format!(
        "drain_{}_{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    );
    let campaign = "drain-campaign";

    // A fresh database for this run.
    let mut admin = sqlx::PgConnection::connect(&a.database_url)
        .await
        .context("connect to DATABASE_URL")?;
    admin
        .execute(format!("CREATE DATABASE {run_id}").as_str())
        .await?;
    let db_url = with_db(&a.database_url, &run_id)?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&db_url)
        .await?;
    MIGRATOR.run(&pool).await?;
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         SELECT $1, g, 'member' || g || '@example.com' FROM generate_series(1, $2) g",
    )
    .bind(campaign)
    .bind(a.targets)
    .execute(&pool)
    .await?;
    sqlx::query("ANALYZE campaign_targets")
        .execute(&pool)
        .await?;

    let provider = start_provider(&a)?;
    let http = reqwest::Client::new();
    let stats = |http: reqwest::Client, base: String| async move {
        http.get(format!("{base}/stats"))
            .send()
            .await?
            .json::<Stats>()
            .await
    };

    let worker_rate = a.worker_rate.unwrap_or_else(|| {
        if a.provider_rate > 0.0 {
            ((a.provider_rate * 0.96) / a.workers as f64)
                .floor()
                .max(1.0) as u32
        } else {
            100_000
        }
    });
    let sender = sibling("campaign-sender")?;
    let logdir = std::env::temp_dir().join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let started = Instant::now();
    let mut workers: Vec<Child> = (0..a.workers)
        .map(|i| {
            Command::new(&sender)
                .arg("run")
                .env("DATABASE_URL", &db_url)
                .env("CAMPAIGN_ID", campaign)
                .env("MAIL_URL", format!("{}/v1/send", provider.base))
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env("MAIL_RATE_PER_S", worker_rate.to_string())
                .env("SEND_CONCURRENCY", a.send_concurrency.to_string())
                .env("DEADLINE_S", a.timeout_s.to_string())
                .env("BACKOFF_BASE_MS", "500")
                .env("LOG_FORMAT", "json")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(
                    logdir.join(format!("worker-{i}.log")),
                )?)
                .spawn()
                .context("start campaign-sender")
        })
        .collect::<anyhow::Result<_>>()?;

    // Sample once a second until every worker exited (bounded by timeout_s + 30 s).
    let mut timeline: Vec<(f64, u64)> = Vec::new();
    let mut rss = vec![0u64; workers.len()];
    let mut codes: Vec<Option<i32>> = vec![None; workers.len()];
    let hard_stop = started + Duration::from_secs(a.timeout_s + 30);
    while codes.iter().any(Option::is_none) {
        for (i, w) in workers.iter_mut().enumerate() {
            if codes[i].is_none() {
                if let Some(k) = peak_rss_kib(w.id()) {
                    rss[i] = rss[i].max(k);
                }
                if let Some(st) = w.try_wait()? {
                    codes[i] = Some(st.code().unwrap_or(-1));
                }
            }
        }
        if let Ok(s) = stats(http.clone(), provider.base.clone()).await {
            timeline.push((started.elapsed().as_secs_f64(), s.delivered));
            if a.targets >= 10_000 && timeline.len() % 10 == 0 {
                eprintln!(
                    "  t={:>4.0}s delivered {:>8}",
                    started.elapsed().as_secs_f64(),
                    s.delivered
                );
            }
        }
        if Instant::now() > hard_stop {
            eprintln!("drain: timeout; killing workers");
            for w in workers.iter_mut() {
                let _ = w.kill();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut reports = Vec::new();
    for w in workers.iter_mut() {
        let mut out = String::new();
        if let Some(mut o) = w.stdout.take() {
            use std::io::Read;
            o.read_to_string(&mut out)?;
        }
        reports.push(
            out.lines()
                .last()
                .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok()),
        );
    }
    let s = stats(http.clone(), provider.base.clone()).await?;
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM campaign_targets WHERE campaign_id = $1 GROUP BY state ORDER BY 1")
            .bind(campaign)
            .fetch_all(&pool)
            .await?;
    pool.close().await;
    drop(provider);
    if !a.keep {
        admin
            .execute(format!("DROP DATABASE {run_id} WITH (FORCE)").as_str())
            .await?;
    }

    // Steady part: between 10 % and 90 % of the final deliveries.
    let total = s.delivered as f64;
    let crossing = |frac: f64| {
        timeline
            .iter()
            .find(|(_, d)| *d as f64 >= frac * total)
            .copied()
    };
    let steady = match (crossing(0.1), crossing(0.9)) {
        (Some((t1, d1)), Some((t2, d2))) if t2 > t1 => (d2 - d1) as f64 / (t2 - t1),
        _ => total / elapsed,
    };
    let utilisation = if a.provider_rate > 0.0 {
        steady / a.provider_rate
    } else {
        f64::NAN
    };
    let report = json!({
        "targets": a.targets,
        "workers": a.workers,
        "provider": {"rate_per_s": a.provider_rate, "burst": a.burst, "latency_ms": a.latency_ms,
                     "jitter_ms": a.jitter_ms, "faults": a.faults},
        "worker_rate_per_s": worker_rate,
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "delivered_per_s_steady": steady.round(),
        "utilisation": if utilisation.is_nan() { serde_json::Value::Null } else { json!((utilisation * 1000.0).round() / 1000.0) },
        "requests": s.requests,
        "delivered": s.delivered,
        "throttled_429": s.throttled_429,
        "duplicates_suppressed": s.duplicates_suppressed,
        "members_delivered_more_than_once": s.members_delivered_more_than_once,
        "max_accepted_in_1s": s.max_accepted_in_1s,
        "final_states": states.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "peak_rss_mib": rss.iter().map(|k| (*k as f64 / 1024.0 * 10.0).round() / 10.0).collect::<Vec<_>>(),
        "exit_codes": codes.iter().map(|c| c.unwrap_or(-1)).collect::<Vec<_>>(),
        "worker_logs": logdir.display().to_string(),
    });
    println!("{report}");
    eprintln!(
        "\n== drain: {} targets, {} workers, provider {}/s (burst {}), latency {}±{} ms, faults {}\n\
         elapsed {:.1}s; steady {:.0} delivered/s = {:.1}% of the limit; max accepted in 1 s: {}\n\
         requests {}, delivered {}, 429s {}, duplicates suppressed {}, members mailed twice {}\n\
         final states {:?}; exit codes {:?}; peak RSS MiB {:?}\n\
         per-worker reports: {}",
        a.targets,
        a.workers,
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        a.faults,
        elapsed,
        steady,
        utilisation * 100.0,
        s.max_accepted_in_1s,
        s.requests,
        s.delivered,
        s.throttled_429,
        s.duplicates_suppressed,
        s.members_delivered_more_than_once,
        states,
        codes.iter().map(|c| c.unwrap_or(-1)).collect::<Vec<_>>(),
        rss.iter().map(|k| format!("{:.1}", *k as f64 / 1024.0)).collect::<Vec<_>>(),
        reports
            .iter()
            .flatten()
            .map(|r| format!("{}: sent {} retried {} failed {}", r["worker"], r["stats"]["sent"], r["stats"]["retried"], r["stats"]["failed"]))
            .collect::<Vec<_>>()
            .join("; "),
    );
    if s.members_delivered_more_than_once > 0 || codes.iter().any(|c| !matches!(c, Some(0))) {
        std::process::exit(1);
    }
    Ok(())
}
