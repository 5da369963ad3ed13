//! `bloat`: what a growing `campaign_targets` does to the work loop, measured (docs/BENCHMARKS.md,
//! "The table grows"). On a fresh database: `--finished` campaigns of `--rows` rows each, already
//! sent (the audit record our users keep), plus one campaign of `--rows` to send — 13.2 M rows
//! with the defaults. Then the live campaign is drained by `--workers` loops of the real
//! statements (claim, re-check, finish as `sent`: the provider is instant, so the database is
//! all that is measured), paced to `--rate` rows/s. Reported:
//!
//! - table and index sizes before the drain, right after it and `--settle-s` later (no manual
//!   VACUUM: autovacuum as configured), and the growth per sent row;
//! - dead tuples and the share of HOT updates, sampled every 5 s;
//! - claim latency p50/p99 for each tenth of the drain, against the same on a fresh table of
//!   only the live campaign (`--rows` rows, measured first, same run);
//! - `status` (its whole gather) for the live and for a finished campaign;
//! - `archive` of one finished campaign while a second live campaign is drained: how long it
//!   took, and the drain's rate during it against before it.
//!
//! `--tuning` applies candidate per-table settings before seeding (e.g.
//! `fillfactor=70,autovacuum_vacuum_scale_factor=0.01`), so each change is measured the same way.
//! Bounded: every phase has a deadline; 127.0.0.1 only.

use std::time::{Duration, Instant};

use anyhow::Context;
use campaign_sender::outcome::Resolution;
use campaign_sender::store::{self, Store};
use clap::Parser;
use serde::Serialize;
use sqlx::PgPool;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "bloat",
    about = "Bloat, HOT updates, claim latency and status on a 13 M-row table"
)]
struct Args {
    /// PostgreSQL server to create the run's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, default_value_t = 10)]
    finished: i64,
    #[arg(long, default_value_t = 1_200_000)]
    rows: i64,
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Rows per second the drain is paced to (all workers together).
    #[arg(long, default_value_t = 4_000)]
    rate: u64,
    /// Seconds to wait after the drain before the sizes are measured again (default: 60 s of
    /// the provider's 500/s, scaled like --naptime-s).
    #[arg(long)]
    settle_s: Option<f64>,
    /// `autovacuum_naptime` set on the (throwaway) server for the run. Default: PostgreSQL's
    /// 60 s scaled by 500 / --rate, so a drain faster than the provider's 500/s meets as many
    /// autovacuum rounds per sent row as the real one (at 4 000/s: 7.5 s).
    #[arg(long)]
    naptime_s: Option<f64>,
    /// Per-table storage parameters applied before seeding, `k=v,k=v`.
    #[arg(long, default_value = "")]
    tuning: String,
    /// Rows of the second live campaign, drained while one finished campaign is archived
    /// (default: three minutes of --rate).
    #[arg(long)]
    archive_load_rows: Option<i64>,
}

const LIVE: &str = "live";
/// The provider's rate the harness's time is scaled to.
const PROVIDER_PER_S: f64 = 500.0;
const LOAD: &str = "load";
const BATCH: u32 = 200;

#[derive(Debug, Default, Serialize, Clone, Copy)]
struct Sizes {
    table_bytes: i64,
    index_bytes: i64,
    live_tuples: i64,
    dead_tuples: i64,
    updates: i64,
    hot_updates: i64,
    autovacuums: i64,
}

impl Sizes {
    async fn take(pool: &PgPool) -> anyhow::Result<Sizes> {
        let row: (i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(
            "SELECT pg_table_size('campaign_targets'), pg_indexes_size('campaign_targets'),
                    n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count
               FROM pg_stat_user_tables WHERE relname = 'campaign_targets'",
        )
        .fetch_one(pool)
        .await?;
        Ok(Sizes {
            table_bytes: row.0,
            index_bytes: row.1,
            live_tuples: row.2,
            dead_tuples: row.3,
            updates: row.4,
            hot_updates: row.5,
            autovacuums: row.6,
        })
    }
    fn total(&self) -> i64 {
        self.table_bytes + self.index_bytes
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let run_id = format!("bloat_{}", std::process::id());
    let (db_url, small) = loadtest::create_run_db(&a.database_url, &run_id, LIVE, 0).await?;
    small.close().await;
    // A connection per worker, plus the sampler, `status` and the archive.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(a.workers as u32 + 4)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&db_url)
        .await?;
    let naptime = a.naptime_s.unwrap_or(60.0 * PROVIDER_PER_S / a.rate as f64);
    set_naptime(&pool, Some(naptime)).await?;
    let result = measure(&a, &pool, naptime).await;
    set_naptime(&pool, None).await?;
    pool.close().await;
    loadtest::drop_run_db(&a.database_url, &run_id).await?;
    let report = result?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// Sets (or, with `None`, resets) the server's `autovacuum_naptime`.
async fn set_naptime(pool: &PgPool, seconds: Option<f64>) -> anyhow::Result<()> {
    let sql = match seconds {
        Some(s) => format!(
            "ALTER SYSTEM SET autovacuum_naptime = '{}ms'",
            (s * 1000.0) as u64
        ),
        None => "ALTER SYSTEM RESET autovacuum_naptime".into(),
    };
    sqlx::query(&sql)
        .execute(pool)
        .await
        .context("autovacuum_naptime (the harness needs a superuser on a throwaway server)")?;
    sqlx::query("SELECT pg_reload_conf()").execute(pool).await?;
    Ok(())
}

#[derive(Debug, Serialize)]
struct Report {
    tuning: String,
    naptime_s: f64,
    rows_total: i64,
    fresh_claim_ms: (f64, f64),
    claim_ms_by_tenth: Vec<(f64, f64)>,
    before: Sizes,
    after: Sizes,
    settled: Sizes,
    samples: Vec<(f64, Sizes)>,
    growth_bytes_per_sent_row: f64,
    /// HOT updates among the drain's updates (counted once the statistics settled).
    hot_share: f64,
    status_live_ms: f64,
    status_finished_ms: f64,
    archive_s: f64,
    rate_before_archive: f64,
    rate_during_archive: f64,
}

async fn measure(a: &Args, pool: &PgPool, naptime: f64) -> anyhow::Result<Report> {
    anyhow::ensure!(
        a.finished >= 1,
        "--finished must be at least 1 (one is archived)"
    );
    let settle_s = a.settle_s.unwrap_or(60.0 * PROVIDER_PER_S / a.rate as f64);
    if !a.tuning.is_empty() {
        sqlx::query(&format!("ALTER TABLE campaign_targets SET ({})", a.tuning))
            .execute(pool)
            .await
            .context("--tuning")?;
    }
    // The same campaign on a fresh table first: the claim latency to compare with.
    seed(pool, LIVE, a.rows, false).await?;
    let fresh = drain(a, pool, LIVE, a.rows / 10, None).await?;
    sqlx::query("TRUNCATE campaign_targets")
        .execute(pool)
        .await?;
    eprintln!(
        "fresh table: claim p50 {:.2} ms, p99 {:.2} ms",
        fresh.p(0.5),
        fresh.p(0.99)
    );

    for i in 0..a.finished {
        seed(pool, &format!("done-{i:02}"), a.rows, true).await?;
        eprintln!("seeded finished campaign {}/{}", i + 1, a.finished);
    }
    seed(pool, LIVE, a.rows, false).await?;
    sqlx::query("VACUUM ANALYZE campaign_targets")
        .execute(pool)
        .await?;
    let before = Sizes::take(pool).await?;
    eprintln!("before: {before:?}");
    let mut samples = Vec::new();
    let drained = drain(a, pool, LIVE, a.rows, Some(&mut samples)).await?;
    let after = Sizes::take(pool).await?;
    tokio::time::sleep(Duration::from_secs_f64(settle_s)).await;
    let settled = Sizes::take(pool).await?;
    let growth = (settled.total() - before.total()) as f64 / a.rows as f64;
    let hot_share = (settled.hot_updates - before.hot_updates) as f64
        / (settled.updates - before.updates).max(1) as f64;
    eprintln!("after: {after:?}\nsettled: {settled:?}\ngrowth {growth:.0} bytes per sent row");

    let status_live_ms = time_status(pool, LIVE).await?;
    let status_finished_ms = time_status(pool, "done-00").await?;
    eprintln!("status: live {status_live_ms:.0} ms, finished {status_finished_ms:.0} ms");

    let (archive_s, rate_before, rate_during) = archive_under_load(a, pool).await?;
    eprintln!("archive of 1 campaign: {archive_s:.1} s; the other campaign's rate {rate_before:.0}/s before, {rate_during:.0}/s during");
    let p99_at_scale = drained.p(0.99);
    eprintln!(
        "\n| tuning | rows | drain rate, naptime, settle | growth per sent row | HOT share | dead tuples after / settled | claim p50 / p99, fresh | claim p50 / p99, {} rows | status live / finished | archive {} rows (rate of another campaign before → during) |",
        (a.finished + 1) * a.rows, a.rows
    );
    eprintln!("|---|---|---|---|---|---|---|---|---|---|");
    eprintln!(
        "| {} | {} | {}/s, {naptime} s, {settle_s} s | {growth:.0} B | {:.0} % | {} / {} | {:.1} / {:.1} ms | {:.1} / {p99_at_scale:.1} ms ({:.2}×) | {status_live_ms:.0} / {status_finished_ms:.0} ms | {archive_s:.1} s ({rate_before:.0} → {rate_during:.0}/s) |",
        if a.tuning.is_empty() { "none" } else { &a.tuning },
        (a.finished + 1) * a.rows,
        a.rate,
        hot_share * 100.0,
        after.dead_tuples,
        settled.dead_tuples,
        fresh.p(0.5),
        fresh.p(0.99),
        drained.p(0.5),
        p99_at_scale / fresh.p(0.99).max(f64::EPSILON),
    );
    Ok(Report {
        tuning: a.tuning.clone(),
        naptime_s: naptime,
        rows_total: (a.finished + 1) * a.rows,
        fresh_claim_ms: (fresh.p(0.5), fresh.p(0.99)),
        claim_ms_by_tenth: drained.by_tenth(),
        before,
        after,
        settled,
        samples,
        growth_bytes_per_sent_row: growth,
        hot_share,
        status_live_ms,
        status_finished_ms,
        archive_s,
        rate_before_archive: rate_before,
        rate_during_archive: rate_during,
    })
}

/// `rows` members of `campaign`; `finished`: as a sent campaign (rows that went through claim
/// and finish, sent_at set).
async fn seed(pool: &PgPool, campaign: &str, rows: i64, finished: bool) -> anyhow::Result<()> {
    let sql = if finished {
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state, attempts, claim_id,
                                       last_status, sent_at, updated_at)
         SELECT $1, g, 'member' || g || '@example.com', 'sent', 1, gen_random_uuid(), 202,
                now() - interval '10 days', now() - interval '10 days'
           FROM generate_series(1, $2) g"
    } else {
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         SELECT $1, g, 'member' || g || '@example.com' FROM generate_series(1, $2) g"
    };
    sqlx::query(sql)
        .bind(campaign)
        .bind(rows)
        .execute(pool)
        .await?;
    Ok(())
}

/// Claim latencies, in drain order.
struct Latencies(Vec<f64>);

impl Latencies {
    fn p(&self, q: f64) -> f64 {
        percentile(&self.0, q)
    }
    fn by_tenth(&self) -> Vec<(f64, f64)> {
        let n = self.0.len().max(1);
        (0..10)
            .map(|i| {
                let part = &self.0[i * n / 10..((i + 1) * n / 10).min(self.0.len())];
                (percentile(part, 0.5), percentile(part, 0.99))
            })
            .collect()
    }
}

fn percentile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[((s.len() - 1) as f64 * q).round() as usize]
}

/// Sends `limit` rows of `campaign` through claim → re-check → finish, paced to `--rate`; every
/// 5 s a size sample when asked.
async fn drain(
    a: &Args,
    pool: &PgPool,
    campaign: &str,
    limit: i64,
    mut samples: Option<&mut Vec<(f64, Sizes)>>,
) -> anyhow::Result<Latencies> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3600);
    let per_worker = Duration::from_secs_f64(BATCH as f64 * a.workers as f64 / a.rate as f64);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..a.workers {
        let (store, done) = (Store::new(pool.clone(), campaign), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut next = Instant::now();
            while done.load(std::sync::atomic::Ordering::SeqCst) < limit
                && Instant::now() < deadline
            {
                tokio::time::sleep_until(next.into()).await;
                next += per_worker;
                let n = one_batch(&store, &mut lat).await?;
                if n == 0 {
                    break;
                }
                done.fetch_add(n as i64, std::sync::atomic::Ordering::SeqCst);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut last_sample = Instant::now();
    while tasks.iter().any(|t| !t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(s) = samples.as_deref_mut() {
            if last_sample.elapsed() >= Duration::from_secs(5) {
                last_sample = Instant::now();
                s.push((started.elapsed().as_secs_f64(), Sizes::take(pool).await?));
            }
        }
    }
    let mut all: Vec<(f64, f64)> = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    // In drain order (by when each claim started).
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    Ok(Latencies(all.into_iter().map(|(_, ms)| ms).collect()))
}

/// One claim of `BATCH`, its re-check, and a finish of every row as sent. Records (start, ms).
async fn one_batch(store: &Store, lat: &mut Vec<(f64, f64)>) -> anyhow::Result<usize> {
    let (start, t) = (unix_s(), Instant::now());
    let batch = store.claim(BATCH, Duration::from_secs(30)).await?;
    lat.push((start, t.elapsed().as_secs_f64() * 1000.0));
    if batch.rows.is_empty() {
        return Ok(0);
    }
    let held: Vec<_> = batch
        .rows
        .iter()
        .map(|r| (r.member_id, batch.claim_id))
        .collect();
    store.recheck(&held, Duration::from_secs(86_000)).await?;
    let results: Vec<_> = batch
        .rows
        .iter()
        .map(|r| {
            (
                r.member_id,
                Resolution::Sent {
                    status: 202,
                    message_id: None,
                }
                .written(),
            )
        })
        .collect();
    store.finish(batch.claim_id, &results).await?;
    Ok(batch.rows.len())
}

fn unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

async fn time_status(pool: &PgPool, campaign: &str) -> anyhow::Result<f64> {
    // The second of two: what an operator sees with the cache warm.
    let mut ms = 0.0;
    for _ in 0..2 {
        let t = Instant::now();
        campaign_sender::status::gather(
            pool,
            campaign,
            campaign_sender::status::Defaults::documented(),
        )
        .await?;
        ms = t.elapsed().as_secs_f64() * 1000.0;
    }
    Ok(ms)
}

/// Archives `done-00` (its rows moved as `campaign-sender archive` moves them) while a second
/// live campaign drains; returns the archive's seconds and the drain's rate before and during.
async fn archive_under_load(a: &Args, pool: &PgPool) -> anyhow::Result<(f64, f64, f64)> {
    let load_rows = a.archive_load_rows.unwrap_or(a.rate as i64 * 180);
    seed(pool, LOAD, load_rows, false).await?;
    let sent = |pool: PgPool| async move {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM campaign_targets WHERE campaign_id = 'load' AND state = 'sent'",
        )
        .fetch_one(&pool)
        .await?;
        anyhow::Ok(n)
    };
    let drainer = {
        let pool = pool.clone();
        let a = a.clone();
        tokio::spawn(async move { drain(&a, &pool, LOAD, load_rows, None).await })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (n0, t0) = (sent(pool.clone()).await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rate_before = (sent(pool.clone()).await? - n0) as f64 / t0.elapsed().as_secs_f64();
    let (n1, t1) = (sent(pool.clone()).await?, Instant::now());
    store::archive::begin(pool, "done-00").await?;
    let mut after = i64::MIN;
    while let Some((_, last)) =
        store::archive::move_batch(pool, "done-00", after, 5_000, Duration::from_secs(2)).await?
    {
        after = last;
    }
    store::archive::complete(pool, "done-00").await?;
    let archive_s = t1.elapsed().as_secs_f64();
    let rate_during = (sent(pool.clone()).await? - n1) as f64 / archive_s;
    if drainer.is_finished() {
        // It should still be draining: say why it is not.
        drainer.await??;
        anyhow::bail!(
            "the load campaign ran out before the archive ended: raise --archive-load-rows"
        );
    }
    drainer.abort();
    Ok((archive_s, rate_before, rate_during))
}
