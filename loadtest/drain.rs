//! `drain`: one complete local load run, with a report.
//!
//! Given `DATABASE_URL` of a throwaway server (scripts/demo.sh starts one), it creates a fresh
//! database, migrates it, generates N targets, starts `fake-provider` with the chosen rate
//! limit / burst / latency / faults on 127.0.0.1, starts W `campaign-sender run` processes (each
//! with `JOB_COMPLETION_INDEX=i`, as an Indexed Job gives them), samples progress every second,
//! waits for them (bounded; progress sampled every 250 ms), and prints one JSON line and a human summary: elapsed, delivered/s
//! over the steady part, utilisation against the provider limit, 429s, duplicate requests,
//! members delivered more than once, final states, peak RSS per worker, exit codes.
//!
//! Every worker is given the provider's whole limit as `MAIL_RATE_PER_S`: they share it through
//! PostgreSQL (`src/rate_share.rs`). `--event 10:join`, `--event 20:term`, `--event 30:kill`
//! start a worker, or SIGTERM / SIGKILL the oldest one still running, at that second; for each
//! event the report gives the lowest 1-second rate in the 10 s after it and how long the rate
//! stayed below 95 % of the limit.
//! Everything is bounded in time and talks only to 127.0.0.1.

#[path = "harness.rs"]
mod harness;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use campaign_sender::fake_provider::{Stats, TimelinePoint};
use clap::Parser;
use harness::sibling;
use serde_json::json;

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

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn start_provider(a: &Args) -> anyhow::Result<harness::Provider> {
    harness::start_provider(&harness::provider_args(
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        &a.faults,
    ))
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
    let (db_url, pool) =
        harness::create_run_db(&a.database_url, &run_id, campaign, a.targets).await?;

    // The database's own ceiling, in this run: W loops of the same claim → fenced-finish
    // statements the workers use, with no HTTP, over a separate campaign.
    let ceiling_rows = a.targets.min(100_000);
    let loops = a.ceiling_loops.unwrap_or(a.workers);
    let ceiling = db_ceiling(&db_url, loops, ceiling_rows, a.batch_size).await?;
    eprintln!("  database ceiling: {ceiling:.0} rows/s (claim + finish of {ceiling_rows} rows, {loops} loops)");

    let provider_t0 = Instant::now();
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
            a.provider_rate.floor().max(1.0) as u32
        } else {
            100_000
        }
    });
    let sender = sibling("campaign-sender")?;
    let logdir = std::env::temp_dir().join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let started = Instant::now();
    let spawn_worker = |i: usize| {
        Command::new(&sender)
            .arg("run")
            .env("DATABASE_URL", &db_url)
            .env("CAMPAIGN_ID", campaign)
            .env("MAIL_URL", format!("{}/v1/send", provider.base))
            .env("JOB_COMPLETION_INDEX", i.to_string())
            .env("MAIL_RATE_PER_S", worker_rate.to_string())
            .env("SEND_CONCURRENCY", a.send_concurrency.to_string())
            .env("BATCH_SIZE", a.batch_size.to_string())
            .env("LEASE_S", a.lease_s.to_string())
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
    };
    let mut workers: Vec<Child> = (0..a.workers as usize)
        .map(spawn_worker)
        .collect::<anyhow::Result<_>>()?;
    // Scheduled events, and what happened: (at s since start, action, worker index).
    let mut pending_events = a.events.clone();
    pending_events.sort_by(|x, y| x.0.total_cmp(&y.0));
    pending_events.reverse();
    let mut happened: Vec<(f64, String, usize)> = Vec::new();
    let mut signalled: Vec<bool> = vec![false; workers.len()];

    // Sample every 250 ms until every worker exited (bounded by timeout_s + 30 s).
    let mut timeline: Vec<(f64, u64)> = Vec::new();
    let mut rss = vec![0u64; workers.len()];
    let mut codes: Vec<Option<i32>> = vec![None; workers.len()];
    let hard_stop = started + Duration::from_secs(a.timeout_s + 30);
    // The kill experiment: (when, rows `sending` at that moment, when they were all settled).
    let mut killed: Option<(Instant, Vec<i64>)> = None;
    let mut recovery_s: Option<f64> = None;
    while codes.iter().any(Option::is_none) {
        while pending_events
            .last()
            .is_some_and(|(t, _)| started.elapsed().as_secs_f64() >= *t)
        {
            let (_, what) = pending_events.pop().expect("checked");
            let at = provider_t0.elapsed().as_secs_f64();
            if what == "join" {
                let i = workers.len();
                workers.push(spawn_worker(i)?);
                rss.push(0);
                codes.push(None);
                signalled.push(false);
                eprintln!(
                    "  t={:.1}s: worker-{i} joins",
                    started.elapsed().as_secs_f64()
                );
                happened.push((at, what, i));
            } else if let Some(i) =
                (0..workers.len()).find(|i| codes[*i].is_none() && !signalled[*i])
            {
                let sig = if what == "term" { "-TERM" } else { "-KILL" };
                Command::new("kill")
                    .args([sig, &workers[i].id().to_string()])
                    .status()?;
                signalled[i] = true;
                eprintln!(
                    "  t={:.1}s: SIG{} to worker-{i}",
                    started.elapsed().as_secs_f64(),
                    &sig[1..]
                );
                happened.push((at, what, i));
            }
        }
        if let (Some(after), None) = (a.kill_after_s, &killed) {
            if started.elapsed() >= Duration::from_secs(after) && codes[0].is_none() {
                let pid = workers[0].id().to_string();
                Command::new("kill")
                    .args([format!("-{}", a.kill_signal), pid])
                    .status()?;
                let at = Instant::now();
                let held: Vec<i64> = sqlx::query_scalar(
                    "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'sending'",
                )
                .bind(campaign)
                .fetch_all(&pool)
                .await?;
                eprintln!(
                    "  t={:.0}s: SIG{} to worker-0; {} rows were sending",
                    started.elapsed().as_secs_f64(),
                    a.kill_signal,
                    held.len()
                );
                killed = Some((at, held));
            }
        }
        if let (Some((at, held)), None) = (&killed, recovery_s) {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND member_id = ANY($2) AND state NOT IN ('sent', 'failed')",
            )
            .bind(campaign)
            .bind(held)
            .fetch_one(&pool)
            .await?;
            if open == 0 {
                recovery_s = Some(at.elapsed().as_secs_f64());
            }
        }
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
            if a.targets >= 10_000 && timeline.len() % 40 == 0 {
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
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut reports = Vec::new();
    for w in workers.iter_mut() {
        reports.push(harness::report_of(w)?);
    }
    let s = stats(http.clone(), provider.base.clone()).await?;
    let per_second: Vec<TimelinePoint> = http
        .get(format!("{}/timeline", provider.base))
        .send()
        .await?
        .json()
        .await?;
    chart(&a.chart, &per_second, a.provider_rate, workers.len() as u32)?;
    // Per-second totals on the provider's clock, for the event analysis.
    let mut accepted_per_s: Vec<u64> = Vec::new();
    for p in &per_second {
        let i = p.second as usize;
        if accepted_per_s.len() <= i {
            accepted_per_s.resize(i + 1, 0);
        }
        accepted_per_s[i] += p.accepted;
    }
    let event_report: Vec<serde_json::Value> = happened
        .iter()
        .map(|(at, what, i)| {
            // Whole provider seconds from the one after the event, for 10 s.
            let first = at.ceil() as usize;
            let window: Vec<u64> = accepted_per_s.iter().skip(first).take(10).copied().collect();
            let threshold = 0.95 * a.provider_rate;
            let below = window.iter().rposition(|n| (*n as f64) < threshold);
            json!({
                "at_s": (at * 10.0).round() / 10.0,
                "event": what,
                "worker": i,
                "min_per_s_next_10s": window.iter().min(),
                // Seconds after the event until the last second below 95 % of the limit ended
                // (0: it never dipped). Meaningless if the campaign ran out in the window.
                "below_95pct_for_s": below.map(|b| ((first + b + 1) as f64 - at) * 10.0).map(|x| x.round() / 10.0).unwrap_or(0.0),
                "per_s_next_10s": window,
            })
        })
        .collect();
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM campaign_targets WHERE campaign_id = $1 GROUP BY state ORDER BY 1")
            .bind(campaign)
            .fetch_all(&pool)
            .await?;
    pool.close().await;
    drop(provider);
    if !a.keep {
        harness::drop_run_db(&a.database_url, &run_id).await?;
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
        "workers_started": workers.len(),
        "events": event_report,
        "provider": {"rate_per_s": a.provider_rate, "burst": a.burst, "latency_ms": a.latency_ms,
                     "jitter_ms": a.jitter_ms, "faults": a.faults},
        "worker_rate_per_s": worker_rate,
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "delivered_per_s_steady": steady.round(),
        "db_ceiling_rows_per_s": ceiling.round(),
        "of_db_ceiling": ((steady / ceiling) * 1000.0).round() / 1000.0,
        "utilisation": if utilisation.is_nan() { serde_json::Value::Null } else { json!((utilisation * 1000.0).round() / 1000.0) },
        "requests": s.requests,
        "delivered": s.delivered,
        "throttled_429": s.throttled_429,
        "duplicates_suppressed": s.duplicates_suppressed,
        "members_delivered_more_than_once": s.members_delivered_more_than_once,
        "max_accepted_in_1s": s.max_accepted_in_1s,
        // Provider seconds (since it started) in which it answered 429, with how many.
        "throttled_at_s": per_second.iter().filter(|p| p.throttled > 0).fold(std::collections::BTreeMap::<u64, u64>::new(), |mut m, p| { *m.entry(p.second).or_default() += p.throttled; m }),
        "final_states": states.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "peak_rss_mib": rss.iter().map(|k| (*k as f64 / 1024.0 * 10.0).round() / 10.0).collect::<Vec<_>>(),
        "exit_codes": codes.iter().map(|c| c.unwrap_or(-1)).collect::<Vec<_>>(),
        "kill": a.kill_after_s.map(|t| json!({"after_s": t, "signal": a.kill_signal, "lease_s": a.lease_s,
            "rows_sending_at_kill": killed.as_ref().map(|k| k.1.len()),
            "all_settled_after_s": recovery_s.map(|r| (r * 10.0).round() / 10.0)})),
        "worker_logs": logdir.display().to_string(),
        "chart": a.chart.display().to_string(),
    });
    println!("{report}");
    eprintln!(
        "\n== drain: {} targets, {} workers, provider {}/s (burst {}), latency {}±{} ms, faults {}\n\
         elapsed {:.1}s; steady {:.0} delivered/s = {:.1}% of the limit, {:.1}% of the database ceiling ({:.0} rows/s); max accepted in 1 s: {}\n\
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
        steady / ceiling * 100.0,
        ceiling,
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
    if let Some(k) = report.get("kill").filter(|k| !k.is_null()) {
        eprintln!("kill experiment: {k}");
    }
    if !event_report.is_empty() {
        for e in &event_report {
            eprintln!("event: {e}");
        }
    }
    // A worker we killed or stopped on purpose is not a failure of the run (a stopped one
    // exits 1, "incomplete", or 0 if the campaign was done by then).
    let expected = |i: usize, c: &Option<i32>| {
        matches!(c, Some(0))
            || (i == 0 && a.kill_after_s.is_some())
            || (signalled[i] && matches!(c, Some(1) | Some(-1)))
    };
    if s.members_delivered_more_than_once > 0
        || !codes.iter().enumerate().all(|(i, c)| expected(i, c))
    {
        std::process::exit(1);
    }
    Ok(())
}

/// Drains `rows` rows of a separate campaign with `loops` concurrent claim → finish(sent) loops
/// using the library's own statements; returns rows per second.
async fn db_ceiling(db_url: &str, loops: u32, rows: i64, batch: u32) -> anyhow::Result<f64> {
    use campaign_sender::outcome::Resolution;
    use campaign_sender::store::Store;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(loops + 1)
        .connect(db_url)
        .await?;
    harness::insert_targets(&pool, "db-ceiling", rows).await?;
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
                        .map(|r| (r.member_id, Resolution::Sent { status: 200 }))
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

/// An SVG of requests accepted per second, per worker and in total, with the provider limit.
fn chart(
    path: &std::path::Path,
    timeline: &[TimelinePoint],
    limit: f64,
    workers: u32,
) -> anyhow::Result<()> {
    use plotters::prelude::*;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let last = timeline.iter().map(|p| p.second).max().unwrap_or(0) + 1;
    let mut total = vec![0u64; last as usize];
    let mut throttled = vec![0u64; last as usize];
    let mut per_worker: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for p in timeline {
        total[p.second as usize] += p.accepted;
        throttled[p.second as usize] += p.throttled;
        per_worker
            .entry(p.worker.as_str())
            .or_insert_with(|| vec![0; last as usize])[p.second as usize] += p.accepted;
    }
    let top = (*total.iter().max().unwrap_or(&1) as f64).max(limit) * 1.15;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            format!("requests accepted per second — {workers} workers, provider limit {limit}/s"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0u64..last, 0f64..top)?;
    c.configure_mesh()
        .x_desc("seconds")
        .y_desc("requests/s")
        .draw()?;
    let series = |v: &Vec<u64>| {
        v.iter()
            .enumerate()
            .map(|(i, n)| (i as u64, *n as f64))
            .collect::<Vec<_>>()
    };
    c.draw_series(LineSeries::new(series(&total), BLACK.stroke_width(2)))?
        .label("total")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    if limit > 0.0 {
        c.draw_series(LineSeries::new(
            vec![(0, limit), (last, limit)],
            RED.stroke_width(1),
        ))?
        .label("provider limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    }
    if throttled.iter().any(|n| *n > 0) {
        c.draw_series(LineSeries::new(series(&throttled), MAGENTA))?
            .label("429s")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    }
    for (i, (name, v)) in per_worker.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(series(v), color))?
            .label(name.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
