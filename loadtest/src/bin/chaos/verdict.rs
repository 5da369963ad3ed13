//! After a chaos run: what the provider and the database say happened, the checks that must all
//! pass, and the report (one JSON line on stdout, one Markdown table row on stderr).

use std::collections::{BTreeMap, HashMap};

use fake_provider::{Delivery, Stats};
use serde_json::{json, Value};
use sqlx::PgPool;

use super::play::{Play, Proc};
use super::schedule::{most_running, Ev};
use super::{Args, CAMPAIGN, OPTOUT_RECHECK_MS};

/// What the database says about the campaign's rows.
struct Rows {
    states: BTreeMap<String, i64>,
    /// Not opted out and neither sent nor failed.
    lost: i64,
    sent_ids: Vec<i64>,
    failed_by_class: BTreeMap<String, i64>,
    /// Failed for another reason than the profile's permanent 422 (member_id % 997 == 0).
    failed_not_422: i64,
}

async fn rows(pool: &PgPool) -> anyhow::Result<Rows> {
    let states = sqlx::query_as::<_, (String, i64)>(
        "SELECT state || CASE WHEN opted_out_at IS NULL THEN '' ELSE ' (opted out)' END, count(*)
           FROM campaign_targets WHERE campaign_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    let lost = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets
          WHERE campaign_id = $1 AND opted_out_at IS NULL AND state NOT IN ('sent', 'failed')",
    )
    .bind(CAMPAIGN)
    .fetch_one(pool)
    .await?;
    let sent_ids = sqlx::query_scalar(
        "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'sent'",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await?;
    let failed_by_class = sqlx::query_as::<_, (String, i64)>(
        "SELECT coalesce(last_error, '?') || ' ' || coalesce(last_status::text, '-'), count(*)
           FROM campaign_targets WHERE campaign_id = $1 AND state = 'failed' GROUP BY 1",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    let failed_not_422 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets
          WHERE campaign_id = $1 AND state = 'failed' AND last_status IS DISTINCT FROM 422",
    )
    .bind(CAMPAIGN)
    .fetch_one(pool)
    .await?;
    Ok(Rows {
        states,
        lost,
        sent_ids,
        failed_by_class,
        failed_not_422,
    })
}

/// Opted-out members: how many, delivered while their request was in flight (within
/// `OPTOUT_RECHECK_MS` + 250 ms of scheduling), and delivered after that (must be 0).
fn optout_deliveries(play: &Play, delivered: &HashMap<i64, u64>) -> (usize, usize, usize) {
    let window_ms = OPTOUT_RECHECK_MS + 250;
    let (mut opted_out, mut raced, mut after) = (0, 0, 0);
    for (ids, committed) in &play.optouts {
        for m in ids {
            opted_out += 1;
            match delivered.get(m) {
                Some(first) if *first > committed + window_ms => after += 1,
                Some(_) => raced += 1,
                None => {}
            }
        }
    }
    (opted_out, raced, after)
}

/// Workers whose exit code is not the documented one for what we did to them.
fn bad_exits(procs: &[Proc]) -> Vec<Value> {
    procs
        .iter()
        .filter(|p| {
            !matches!(
                (p.signalled, p.code),
                (Some("KILL"), _) | (Some("TERM"), Some(0 | 1)) | (_, Some(0))
            )
        })
        .map(|p| json!({"worker": p.index, "code": p.code, "signalled": p.signalled}))
        .collect()
}

fn stale_writes(procs: &[Proc], only_worker_0: bool) -> u64 {
    procs
        .iter()
        .filter(|p| !only_worker_0 || p.index == 0)
        .filter_map(|p| {
            p.report
                .as_ref()
                .and_then(|r| r["stats"]["stale_writes"].as_u64())
        })
        .sum()
}

/// Checks the run, prints its report, and returns the names of the checks that failed.
///
/// (Over 80 lines: most of it is the report's one JSON literal, which names every figure where
/// a reader looks for it; the facts it reports are gathered by the functions above.)
pub async fn judge(
    a: &Args,
    play: &Play,
    events: &[(f64, Ev)],
    start_workers: usize,
    elapsed: f64,
) -> anyhow::Result<Vec<&'static str>> {
    let l = play.levers();
    let get = |path: &str| l.http.get(format!("{}{path}", l.provider_base)).send();
    let s: Stats = get("/stats").await?.json().await?;
    let deliveries: Vec<Delivery> = get("/deliveries").await?.json().await?;
    let accepted_ms: Vec<u64> = get("/accepted").await?.json().await?;
    let delivered: HashMap<i64, u64> = deliveries
        .iter()
        .map(|d| (d.member_id, d.first_ms))
        .collect();
    let r = rows(&l.pool).await?;
    let sent_not_delivered = r
        .sent_ids
        .iter()
        .filter(|m| !delivered.contains_key(m))
        .count();
    let (opted_out, raced, after_optout) = optout_deliveries(play, &delivered);
    let dup_bound = play.dup_bound_rows as u64 + s.chaos_stalled;
    let limit_plus_burst = a.provider_rate as u64 + a.burst as u64;
    let bad_exits = bad_exits(&play.procs);
    let blackholed = events.iter().any(|(_, e)| matches!(e, Ev::Blackhole(_)));
    let fenced_0 = stale_writes(&play.procs, true);
    let after_dark = after_dark(&play.dark_ms, accepted_ms.clone(), a.provider_rate);
    let slowest_stop = play
        .procs
        .iter()
        .filter_map(|p| p.stopped_after_term)
        .max()
        .map(|d| d.as_secs_f64());
    let mut checks = vec![
        (
            "every target sent or failed (none lost or stuck)",
            r.lost == 0,
        ),
        (
            "nobody mailed twice",
            s.members_delivered_more_than_once == 0,
        ),
        (
            "no row sent that was not delivered",
            sent_not_delivered == 0,
        ),
        (
            "duplicate requests within what was in flight",
            s.duplicates_suppressed <= dup_bound,
        ),
        ("no delivery after an opt-out", after_optout == 0),
        (
            "no 1-s window over limit + burst",
            s.max_offered_in_1s <= limit_plus_burst,
        ),
        ("exit codes as documented", bad_exits.is_empty()),
        (
            "every SIGTERM'd worker exited within the grace period",
            slowest_stop.is_none_or(|s| s <= a.grace_s),
        ),
        ("run finished in time", !play.timed_out),
    ];
    if blackholed {
        checks.push(("the cut-off worker's late writes fenced", fenced_0 > 0));
    }
    if !play.dark_ms.is_empty() {
        checks.push((
            "back at >= 95 % of the limit within 10 s of each dark moment",
            after_dark.iter().all(|d| d.back_s <= 10.0),
        ));
    }
    let failed: Vec<&'static str> = checks.iter().filter(|c| !c.1).map(|c| c.0).collect();
    // Throughput between 10 % and 90 % of the campaign is not tracked here (see `drain`): the
    // average over the whole run is the honest figure for a run full of faults.
    let per_s = s.delivered as f64 / elapsed;
    let report = json!({
        "scenario": a.scenario,
        "targets": a.targets,
        "workers_at_start": start_workers,
        "processes_started": play.procs.len(),
        "most_running": most_running(events, start_workers),
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "delivered_per_s": per_s.round(),
        "events": play.log,
        "lost_or_stuck": r.lost,
        "final_states": r.states,
        "failed_by_class": r.failed_by_class,
        "failed_not_422": r.failed_not_422,
        "requests": s.requests,
        "delivered": s.delivered,
        "members_delivered_more_than_once": s.members_delivered_more_than_once,
        "sent_not_delivered": sent_not_delivered,
        "duplicates_suppressed": s.duplicates_suppressed,
        "duplicate_bound": dup_bound,
        "opted_out": opted_out,
        "opted_out_delivered_in_flight": raced,
        "delivered_after_optout": after_optout,
        "max_offered_in_1s": s.max_offered_in_1s,
        "max_accepted_in_1s": s.max_accepted_in_1s,
        "limit_plus_burst": limit_plus_burst,
        "throttled_429_by_limit": s.throttled_429,
        "chaos": {"429": s.chaos_429, "5xx": s.chaos_5xx, "stalled": s.chaos_stalled},
        "stale_writes_fenced": stale_writes(&play.procs, false),
        "stale_writes_fenced_worker_0": fenced_0,
        "pg_back_at_s": play.pg_back.iter().map(|t| play.at(*t)).collect::<Vec<_>>(),
        "at_95pct_after_pg_back_s": back_to_limit(&play.pg_back_ms, accepted_ms.clone(), a.provider_rate),
        "first_deliveries_at_95pct_after_pg_back_s": back_to_limit(
            &play.pg_back_ms,
            deliveries.iter().map(|d| d.first_ms).collect(),
            a.provider_rate
        ),
        "accepted_per_250ms_after_pg_back": climb(&play.pg_back_ms, &accepted_ms),
        "first_deliveries_per_250ms_after_pg_back": climb(
            &play.pg_back_ms,
            &deliveries.iter().map(|d| d.first_ms).collect::<Vec<_>>()
        ),
        "after_dark": after_dark,
        "slowest_stop_after_term_s": slowest_stop.map(|s| (s * 10.0).round() / 10.0),
        "exit_codes": play.procs.iter().map(|p| json!([p.index, p.signalled, p.code])).collect::<Vec<_>>(),
        "bad_exits": bad_exits,
        "checks_failed": failed,
    });
    println!("{report}");
    eprintln!(
        "\n| scenario | targets | workers | faults | elapsed | delivered/s | lost or stuck | mailed twice | duplicate requests (bound) | after opt-out (opted out, raced) | max in 1 s (limit+burst) | limit 429s | exits | checks |\n\
         | `{}` | {} | {}→{} procs | {} | {:.0} s | {:.0} | {} | {} | {} ({}) | {} ({}, {}) | {} ({}) | {} | {} | {} |",
        a.scenario, a.targets, start_workers, play.procs.len(), play.log.len(), elapsed, per_s,
        r.lost, s.members_delivered_more_than_once, s.duplicates_suppressed, dup_bound,
        after_optout, opted_out, raced, s.max_offered_in_1s, limit_plus_burst, s.throttled_429,
        exit_summary(&play.procs),
        if failed.is_empty() { "all pass".to_string() } else { format!("FAILED: {}", failed.join("; ")) },
    );
    Ok(failed)
}

/// For each time PostgreSQL came back (Unix ms): seconds until the first one-second window in
/// which ≥ 95 % of the limit of `arrivals` (Unix ms: accepted requests — what the limit counts —
/// or first deliveries) arrived began (0: the window starting at the return was already full;
/// "within 2 s" is ≤ 1). `None` if it never was (the campaign ran out).
fn back_to_limit(backs_ms: &[u64], mut t: Vec<u64>, limit: f64) -> Vec<Option<f64>> {
    t.sort_unstable();
    let need = (0.95 * limit).ceil() as usize;
    backs_ms
        .iter()
        .map(|back| {
            let from = t.partition_point(|x| x < back);
            // The window [x, x + 1 s) for x = back, then each arrival after it.
            let in_window =
                |x: u64| t.partition_point(|y| *y < x + 1000) - t.partition_point(|y| *y < x);
            std::iter::once(*back)
                .chain(t[from..].iter().copied())
                .find(|x| in_window(*x) >= need)
                .map(|x| ((x - back) as f64 / 100.0).round() / 10.0)
        })
        .collect()
}

/// The fleet after connections went dark at `dark_ms`.
#[derive(Debug, serde::Serialize)]
struct AfterDark {
    /// Seconds from the dark moment to the end of the last 1-s window (starting within 15 s
    /// of it, every 250 ms) with fewer than 95 % of the limit accepted: 0 if none was.
    back_s: f64,
    /// The fewest requests accepted in one of those windows.
    lowest_1s: usize,
    /// Accepted requests in each second of the 12 s from the dark moment.
    per_s: Vec<usize>,
}

fn after_dark(dark_ms: &[u64], mut t: Vec<u64>, limit: f64) -> Vec<AfterDark> {
    t.sort_unstable();
    let need = (0.95 * limit).ceil() as usize;
    let in_window = |x: u64| t.partition_point(|y| *y < x + 1000) - t.partition_point(|y| *y < x);
    dark_ms
        .iter()
        .map(|d| {
            let windows: Vec<(u64, usize)> = (0..=60u64)
                .map(|q| d + q * 250)
                .map(|x| (x, in_window(x)))
                .collect();
            let back_s = windows
                .iter()
                .filter(|(_, n)| *n < need)
                .map(|(x, _)| (x + 1000 - d) as f64 / 1000.0)
                .fold(0.0, f64::max);
            AfterDark {
                back_s,
                lowest_1s: windows.iter().map(|(_, n)| *n).min().unwrap_or(0),
                per_s: (0..12u64).map(|k| in_window(d + k * 1000)).collect(),
            }
        })
        .collect()
}

/// For each time PostgreSQL came back: `arrivals` (Unix ms) in each quarter second of the 4 s
/// after it (the climb back; 125 per quarter is 500/s).
fn climb(backs_ms: &[u64], arrivals: &[u64]) -> Vec<Vec<usize>> {
    backs_ms
        .iter()
        .map(|back| {
            (0..16u64)
                .map(|q| {
                    let (from, to) = (back + q * 250, back + (q + 1) * 250);
                    arrivals.iter().filter(|t| (from..to).contains(t)).count()
                })
                .collect()
        })
        .collect()
}

/// `3×0 2×killed 1×1`: how the workers ended.
fn exit_summary(procs: &[Proc]) -> String {
    let codes: BTreeMap<String, usize> = procs.iter().fold(BTreeMap::new(), |mut m, p| {
        let k = match (p.signalled, p.code) {
            (Some("KILL"), _) => "killed".to_string(),
            (_, Some(c)) => c.to_string(),
            _ => "?".to_string(),
        };
        *m.entry(k).or_default() += 1;
        m
    });
    codes
        .iter()
        .map(|(k, v)| format!("{v}×{k}"))
        .collect::<Vec<_>>()
        .join(" ")
}
