//! The drain's results: what the provider and the database say, each `--event`'s dip and
//! recovery, the steady rate, and the report — one JSON line on stdout, a summary on stderr.

use std::collections::BTreeMap;
use std::path::Path;

use fake_provider::{Delivery, Stats, TimelinePoint};
use serde_json::json;
use sqlx::PgPool;

use super::fleet::Run;
use super::shape::{shape, Shape};
use super::{Args, CAMPAIGN};

/// What the provider and the database say after the run.
pub struct Results {
    pub stats: Stats,
    /// Requests per second per worker, on the provider's clock.
    pub per_second: Vec<TimelinePoint>,
    pub states: Vec<(String, i64)>,
    pub events: Vec<serde_json::Value>,
    /// Start ramp, steady rate and tail from every arrival (limited provider, ≤ 300 000 targets).
    pub shape: Option<Shape>,
}

impl Results {
    pub async fn gather(a: &Args, run: &Run, base: &str, pool: &PgPool) -> anyhow::Result<Self> {
        let http = loadtest::http_client(a.ca_file.as_deref())?;
        let stats: Stats = http
            .get(format!("{base}/stats"))
            .send()
            .await?
            .json()
            .await?;
        let per_second: Vec<TimelinePoint> = http
            .get(format!("{base}/timeline"))
            .send()
            .await?
            .json()
            .await?;
        let states: Vec<(String, i64)> = sqlx::query_as(
            "SELECT state, count(*) FROM campaign_targets WHERE campaign_id = $1 GROUP BY state ORDER BY 1",
        )
        .bind(CAMPAIGN)
        .fetch_all(pool)
        .await?;
        let events = event_report(a, run, &per_second);
        let shape = if a.provider_rate > 0.0 && a.targets <= 300_000 {
            let deliveries: Vec<Delivery> = http
                .get(format!("{base}/deliveries"))
                .send()
                .await?
                .json()
                .await?;
            let arrivals: Vec<u64> = deliveries.iter().map(|d| d.first_ms).collect();
            shape(&arrivals, a.provider_rate)
        } else {
            None
        };
        Ok(Self {
            stats,
            per_second,
            states,
            events,
            shape,
        })
    }
}

/// For each event: the lowest 1-second rate in the 10 whole provider seconds after it, and how
/// long the rate stayed below 95 % of the limit.
fn event_report(a: &Args, run: &Run, per_second: &[TimelinePoint]) -> Vec<serde_json::Value> {
    let mut accepted_per_s: Vec<u64> = Vec::new();
    for p in per_second {
        let i = p.second as usize;
        if accepted_per_s.len() <= i {
            accepted_per_s.resize(i + 1, 0);
        }
        accepted_per_s[i] += p.accepted;
    }
    run.happened
        .iter()
        .map(|(at, what, i)| {
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
        .collect()
}

/// Delivered per second between 10 % and 90 % of the final deliveries (the whole run's average
/// if the timeline is too short).
fn steady_rate(run: &Run, delivered: u64) -> f64 {
    let total = delivered as f64;
    let crossing = |frac: f64| {
        run.timeline
            .iter()
            .find(|(_, d)| *d as f64 >= frac * total)
            .copied()
    };
    match (crossing(0.1), crossing(0.9)) {
        (Some((t1, d1)), Some((t2, d2))) if t2 > t1 => (d2 - d1) as f64 / (t2 - t1),
        _ => total / run.elapsed,
    }
}

fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

/// The run's headline, the same in the summary and the chart's title: "480 delivered/s steady
/// = 96.0 % of the 500/s limit, 4 workers, 0 mailed twice".
pub fn headline(a: &Args, run: &Run, r: &Results) -> String {
    let steady = steady_rate(run, r.stats.delivered);
    let of = if a.provider_rate > 0.0 {
        format!(
            " = {:.1} % of the {}/s limit",
            steady / a.provider_rate * 100.0,
            a.provider_rate
        )
    } else {
        " (unlimited provider)".to_string()
    };
    format!(
        "{steady:.0} delivered/s steady{of}, {} workers, {} mailed twice",
        run.codes.len(),
        r.stats.members_delivered_more_than_once
    )
}

/// `12 345`: thousands apart, for the summary.
fn n(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Prints the report; false if anybody was mailed twice.
pub fn report(a: &Args, run: &Run, r: &Results, ceiling: f64, logdir: &Path) -> bool {
    let s = &r.stats;
    let steady = steady_rate(run, s.delivered);
    let utilisation = (a.provider_rate > 0.0).then(|| steady / a.provider_rate);
    let codes: Vec<i32> = run.codes.iter().map(|c| c.unwrap_or(-1)).collect();
    print_json(a, run, r, ceiling, logdir, steady, utilisation, &codes);
    let states = r
        .states
        .iter()
        .map(|(k, v)| format!("{k} {}", n(*v as u64)))
        .collect::<Vec<_>>()
        .join(", ");
    let rss = run
        .rss
        .iter()
        .map(|k| format!("{:.1}", mib(*k)))
        .collect::<Vec<_>>()
        .join("  ");
    let cpu = run
        .cpu_ticks
        .iter()
        .map(|t| format!("{:.1} s", *t as f64 / 100.0))
        .collect::<Vec<_>>()
        .join("  ");
    let cores: f64 = run.cpu_ticks.iter().sum::<u64>() as f64 / 100.0 / run.elapsed.max(1e-9);
    let limit = if a.provider_rate > 0.0 {
        format!(
            "  (limit + burst: {})",
            a.provider_rate as u64 + a.burst as u64
        )
    } else {
        String::new()
    };
    let rows: Vec<(&str, String)> = vec![
        ("elapsed", format!("{:.1} s", run.elapsed)),
        ("delivered per second", format!("{steady:.0} steady (10–90 % of the run); the database's own ceiling here: {} rows/s", n(ceiling as u64))),
        ("most accepted in 1 s", format!("{}{limit}", n(s.max_accepted_in_1s))),
        ("start ramp, tail", match r.shape {
            Some(sh) => format!("{:.1} s, {:.1} s (below 95 % of the limit; arrivals: {}/s steady)", sh.start_ramp_s, sh.tail_s, sh.steady_per_s),
            None => "–".into(),
        }),
        ("requests", n(s.requests)),
        ("delivered", n(s.delivered)),
        ("429 answers", n(s.throttled_429)),
        ("repeats suppressed", format!("{} (the same Idempotency-Key sent again)", n(s.duplicates_suppressed))),
        ("members mailed twice", n(s.members_delivered_more_than_once)),
        ("final states", states),
        ("exit codes", codes.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")),
        ("peak RSS, MiB", rss),
        ("CPU per worker", format!("{cpu} (all workers: {cores:.2} cores on average){}", BUILD_NOTE)),
        ("chart", a.chart.display().to_string()),
        ("worker logs", logdir.display().to_string()),
    ];
    eprintln!(
        "\n== drain: {} targets, provider {} {}/s (burst {}), {}±{} ms, faults {}\n   {}\n",
        n(a.targets as u64),
        a.provider,
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        a.faults,
        headline(a, run, r)
    );
    for (k, v) in rows {
        eprintln!("   {k:<22} {v}");
    }
    for w in run.reports.iter().flatten() {
        let st = &w["stats"];
        eprintln!(
            "   {:<22} {} sent, {} retried, {} failed",
            w["worker"].as_str().unwrap_or("?"),
            st["sent"],
            st["retried"],
            st["failed"]
        );
    }
    for e in &r.events {
        eprintln!("   event                  {e}");
    }
    s.members_delivered_more_than_once == 0
}

/// The run as one JSON line on stdout (what scripts/benchmarks.sh collects).
#[allow(clippy::too_many_arguments)]
fn print_json(
    a: &Args,
    run: &Run,
    r: &Results,
    ceiling: f64,
    logdir: &Path,
    steady: f64,
    utilisation: Option<f64>,
    codes: &[i32],
) {
    let s = &r.stats;
    let throttled_at: BTreeMap<u64, u64> =
        r.per_second
            .iter()
            .filter(|p| p.throttled > 0)
            .fold(BTreeMap::new(), |mut m, p| {
                *m.entry(p.second).or_default() += p.throttled;
                m
            });
    let json = json!({
        "targets": a.targets,
        "workers": a.workers,
        "workers_started": run.codes.len(),
        "events": r.events,
        "provider": {"contract": a.provider, "rate_per_s": a.provider_rate, "burst": a.burst, "latency_ms": a.latency_ms,
                     "jitter_ms": a.jitter_ms, "faults": a.faults},
        "worker_rate_per_s": super::fleet::worker_rate(a),
        "elapsed_s": (run.elapsed * 10.0).round() / 10.0,
        "delivered_per_s_steady": steady.round(),
        "db_ceiling_rows_per_s": ceiling.round(),
        "of_db_ceiling": ((steady / ceiling) * 1000.0).round() / 1000.0,
        "utilisation": utilisation.map(|u| (u * 1000.0).round() / 1000.0),
        "requests": s.requests,
        "delivered": s.delivered,
        "throttled_429": s.throttled_429,
        "duplicates_suppressed": s.duplicates_suppressed,
        "members_delivered_more_than_once": s.members_delivered_more_than_once,
        "max_accepted_in_1s": s.max_accepted_in_1s,
        "shape": r.shape,
        // Provider seconds (since it started) in which it answered 429, with how many.
        "throttled_at_s": throttled_at,
        "final_states": r.states.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "peak_rss_mib": run.rss.iter().map(|k| mib(*k)).collect::<Vec<_>>(),
        "cpu_s": run.cpu_ticks.iter().map(|t| *t as f64 / 100.0).collect::<Vec<_>>(),
        "instructions": a.callgrind.then(|| (0..run.codes.len())
            .map(|i| super::fleet::instructions(logdir, i)).collect::<Vec<_>>()),
        "tls": a.tls,
        "exit_codes": codes,
        "kill": a.kill_after_s.map(|t| json!({"after_s": t, "signal": a.kill_signal, "lease_s": a.lease_s,
            "rows_sending_at_kill": run.killed_rows,
            "all_settled_after_s": run.recovery_s.map(|r| (r * 10.0).round() / 10.0)})),
        "worker_logs": logdir.display().to_string(),
        "chart": a.chart.display().to_string(),
    });
    println!("{json}");
    if let Some(k) = json.get("kill").filter(|k| !k.is_null()) {
        eprintln!("kill experiment: {k}");
    }
}

/// What the CPU and memory figures are of: a debug build (the demo's, which shares the tests'
/// build) spends more than a release build; rates, 429s and duplicates are alike
/// (docs/BENCHMARKS.md "Build time").
const BUILD_NOTE: &str = if cfg!(debug_assertions) {
    "; a debug build: a release build spends less (DEMO_PROFILE=release)"
} else {
    ""
};
