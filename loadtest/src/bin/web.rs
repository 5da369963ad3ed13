//! `web`: how fast the status page answers at the scale — 13.2 M rows, 11 campaigns (10
//! finished of `--rows` rows each, the audit record our users keep, and one of `--rows` being
//! sent) — and what its background reads cost the database. Starts the real binary
//! (`campaign-sender web`, release build) on 127.0.0.1 against a fresh migrated database, and
//! reports:
//!
//! - the first round of reads (every campaign once, cold: `/healthz` turns 200);
//! - one read of the live and of a finished campaign (`status::gather` plus the per-minute
//!   deliveries: what the board does per campaign), timed in-process, warm;
//! - `/` and `/campaigns/{id}` (live and finished): p50 / p99 / max over `--requests` each from
//!   `--viewers` clients at once, while the board keeps refreshing.
//!
//! One JSON line. Bounded: every wait has a deadline; 127.0.0.1 only.
//!   DATABASE_URL=… web [--rows 1200000] [--finished 10] [--requests 300] [--viewers 8]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use campaign_sender::store::Store;
use clap::Parser;

const LIVE: &str = "live";

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, default_value_t = 10)]
    finished: i64,
    #[arg(long, default_value_t = 1_200_000)]
    rows: i64,
    /// Requests per page.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    requests: u64,
    /// Clients asking at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    viewers: u64,
    #[arg(long, default_value_t = 18_081)]
    port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let run = format!("web_bench_{}", std::process::id());
    let (db_url, pool) = loadtest::create_run_db(&a.database_url, &run, LIVE, 0).await?;
    let result = measure(&a, &db_url, &pool).await;
    pool.close().await;
    loadtest::drop_run_db(&a.database_url, &run).await?;
    println!("{}", serde_json::to_string(&result?)?);
    Ok(())
}

async fn measure(a: &Args, db_url: &str, pool: &sqlx::PgPool) -> anyhow::Result<serde_json::Value> {
    let t = Instant::now();
    seed(pool, a).await?;
    let seeded_s = t.elapsed().as_secs_f64();
    let addr = format!("127.0.0.1:{}", a.port);
    let mut server = Command::new(loadtest::sibling("campaign-sender")?)
        .arg("web")
        .env_clear()
        .env("DATABASE_URL", db_url)
        .env("WEB_ADDR", &addr)
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .context("start campaign-sender web")?;
    let result = pages(a, pool, &format!("http://{addr}")).await;
    let _ = server.kill();
    let _ = server.wait();
    let mut r = result?;
    r["rows"] = ((a.finished + 1) * a.rows).into();
    r["campaigns"] = (a.finished + 1).into();
    r["seeded_s"] = seeded_s.into();
    Ok(r)
}

/// Ten finished campaigns, delivered over 40 minutes ten days ago, and the live one: a third
/// sent over the last 15 minutes, a little of it in the last minute, the rest waiting.
async fn seed(pool: &sqlx::PgPool, a: &Args) -> anyhow::Result<()> {
    for i in 1..=a.finished {
        sqlx::query(
            "INSERT INTO campaign_targets (campaign_id, member_id, email, state, attempts, claim_id,
                                           last_status, sent_at, updated_at)
             SELECT $1, g, 'member' || g || '@example.com', 'sent', 1, gen_random_uuid(), 202,
                    now() - interval '10 days' + (g % 2400) * interval '1 second',
                    now() - interval '10 days'
               FROM generate_series(1, $2) g",
        )
        .bind(format!("finished_{i:02}"))
        .bind(a.rows)
        .execute(pool)
        .await?;
    }
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state, attempts, sent_at)
         SELECT $1, g, 'member' || g || '@example.com',
                CASE WHEN g <= $2 / 3 THEN 'sent' ELSE 'pending' END,
                CASE WHEN g <= $2 / 3 THEN 1 ELSE 0 END,
                CASE WHEN g <= $2 / 3 THEN now() - (g % 900) * interval '1 second' END
           FROM generate_series(1, $2) g",
    )
    .bind(LIVE)
    .bind(a.rows)
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE campaign_targets")
        .execute(pool)
        .await?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn pages(a: &Args, pool: &sqlx::PgPool, base: &str) -> anyhow::Result<serde_json::Value> {
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                break;
            }
        }
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(600),
            "web never read every campaign"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_round_s = t0.elapsed().as_secs_f64();
    let mut reads = serde_json::Map::new();
    for id in [LIVE, "finished_01"] {
        campaign_sender::status::gather(pool, id, campaign_sender::status::Defaults::documented())
            .await?; // warm, as the board's are
        let t = Instant::now();
        campaign_sender::status::gather(pool, id, campaign_sender::status::Defaults::documented())
            .await?;
        let status_ms = ms(t.elapsed());
        let t = Instant::now();
        let minutes = Store::new(pool.clone(), id).sent_per_minute().await?;
        reads.insert(
            id.into(),
            serde_json::json!({"status_ms": status_ms, "history_ms": ms(t.elapsed()), "minutes": minutes.len()}),
        );
    }
    let mut latencies = serde_json::Map::new();
    for path in ["/", "/campaigns/live", "/campaigns/finished_01"] {
        let url = format!("{base}{path}");
        let mut tasks = Vec::new();
        for v in 0..a.viewers {
            let (http, url) = (http.clone(), url.clone());
            let n = a.requests / a.viewers + u64::from(v < a.requests % a.viewers);
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..n {
                    let t = Instant::now();
                    let r = http.get(&url).send().await?;
                    anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
                    let body = r.bytes().await?;
                    anyhow::ensure!(!body.is_empty(), "{url}: empty");
                    out.push(ms(t.elapsed()));
                }
                Ok(out)
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await??);
        }
        all.sort_by(f64::total_cmp);
        latencies.insert(
            path.into(),
            serde_json::json!({"p50_ms": percentile(&all, 0.5), "p99_ms": percentile(&all, 0.99),
                "max_ms": all[all.len() - 1], "requests": all.len()}),
        );
    }
    Ok(serde_json::json!({"first_round_s": first_round_s, "reads": reads, "pages": latencies}))
}
