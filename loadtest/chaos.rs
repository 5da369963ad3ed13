//! `chaos`: a drain under faults, then the checks that say nothing was lost or duplicated.
//!
//! Given `DATABASE_URL` of a throwaway server and (for the PostgreSQL restart) its directory
//! from `scripts/pg.sh` (`--pg-dir`), it creates a fresh database, generates `--targets` rows,
//! starts the fake provider with the standard fault profile behind a loopback TCP proxy (so
//! connections can be reset), starts `--workers` `campaign-sender run` processes — worker
//! index 0 reaches PostgreSQL through a second proxy, so its connection can be blackholed —
//! and plays one scenario's schedule:
//!
//! | scenario | what happens |
//! |---|---|
//! | `kill` | every ~5 s a random worker gets SIGKILL; it is started again 1 s later (as a Job's pod would be) |
//! | `pg-restart` | PostgreSQL is stopped (fast) for 5 s, and again for 2 s, then started |
//! | `blackhole` | worker 0's database connection stops moving bytes for 3 × `LEASE_S`, then resumes (its held writes arrive late) |
//! | `provider` | a 429 storm with `Retry-After`, a 5xx burst, a stall past the read timeout, and connection resets |
//! | `scale` | 1 worker, then one more every 3 s up to 8, then SIGTERM one every 3 s down to 1 |
//! | `all` | all of the above in one run (kills spare worker 0, the partitioned one) |
//!
//! In every scenario, opt-outs are committed mid-run (on rows waiting and on rows in flight).
//! After the run it checks, and exits 1 if any check fails:
//! - **nothing lost**: every non-opted-out target is `sent` or `failed`, none left `sending`;
//! - **no row failed by a transient fault**: the only `failed` rows are the profile's 422s;
//! - **nobody mailed twice** (the provider's `members_delivered_more_than_once`), and no row
//!   recorded `sent` that the provider never delivered;
//! - **duplicate requests bounded**: suppressed duplicates ≤ the rows that were `sending` at
//!   each fault (a fault can only repeat what was in flight or not yet written) + requests the
//!   provider stalled past the timeout;
//! - **no mail after an opt-out**: no opted-out member's first delivery arrived later than
//!   `OPTOUT_RECHECK_MS` (+ 250 ms of scheduling) after the opt-out committed;
//! - **under the limit**: no 1-second window in which more than limit + burst requests
//!   arrived (offered load, whatever the answer);
//! - **exit codes as documented**: 0 for a worker that ran to the end, 0 or 1 for one we sent
//!   SIGTERM, killed ones aside; a 75 (database gone too long), 2 or 3 fails the run;
//! - `blackhole`: the cut-off worker's late writes were fenced (`stale_writes` > 0).
//!
//! It prints one JSON line and a Markdown table row (docs/RELIABILITY.md). Bounded: the run is
//! stopped after `--timeout-s`; everything talks to 127.0.0.1 only.

#[path = "harness.rs"]
mod harness;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use campaign_sender::fake_provider::{ChaosKind, ChaosRequest, Delivery, Stats};
use clap::Parser;
use harness::{sibling, unix_ms, with_port, Proxy};
use rand::Rng;
use serde_json::{json, Value};
use sqlx::PgPool;

#[derive(Parser, Debug)]
#[command(
    name = "chaos",
    about = "Drain a generated campaign under faults and check nothing was lost or duplicated"
)]
struct Args {
    /// PostgreSQL server to create the run's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// kill | pg-restart | blackhole | provider | scale | all
    #[arg(long)]
    scenario: String,
    /// The server's directory from `scripts/pg.sh start DIR` (needed by pg-restart and all).
    #[arg(long)]
    pg_dir: Option<PathBuf>,
    /// PostgreSQL binaries (default: the newest /usr/lib/postgresql/*/bin).
    #[arg(long, env = "PG_BIN")]
    pg_bin: Option<PathBuf>,
    #[arg(long, default_value_t = 50_000)]
    targets: i64,
    /// Workers at the start (`scale` starts with 1 and goes to 8).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    #[arg(long, default_value_t = 500.0)]
    provider_rate: f64,
    #[arg(long, default_value_t = 20)]
    burst: u32,
    #[arg(long, default_value_t = 80)]
    latency_ms: u64,
    #[arg(long, default_value_t = 20)]
    jitter_ms: u64,
    /// LEASE_S for the workers (short, so a killed worker's rows come back quickly).
    #[arg(long, default_value_t = 8)]
    lease_s: u64,
    /// Opt-outs committed at each of three moments (half on waiting rows, half on rows in flight).
    #[arg(long, default_value_t = 100)]
    optouts: i64,
    /// Seed for the random choices (which worker is killed, when).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Longest the run may take; then every worker is killed and the run fails.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
}

#[derive(Debug, Clone)]
enum Ev {
    /// SIGKILL a random running worker, start it again 1 s later.
    Kill,
    /// Start one more worker.
    Join,
    /// SIGTERM the newest running worker (not restarted).
    Term,
    /// Stop PostgreSQL (fast), start it again after this many seconds.
    PgRestart(f64),
    /// Blackhole worker 0's database connection for this many seconds.
    Blackhole(f64),
    /// A provider misbehaviour.
    Provider(ChaosRequest),
    /// Reset every open connection to the provider.
    Reset,
    /// Commit opt-outs.
    OptOut,
}

const CAMPAIGN: &str = "chaos-campaign";
const CONNECT_TIMEOUT_MS: u64 = 1000;
const READ_TIMEOUT_MS: u64 = 3000;
const OPTOUT_RECHECK_MS: u64 = 1000;

fn chaos(kind: ChaosKind, seconds: f64) -> Ev {
    Ev::Provider(ChaosRequest {
        kind,
        seconds,
        retry_after_s: 2,
        stall_ms: READ_TIMEOUT_MS + 2000,
    })
}

/// (seconds into the run, event), and how many workers start.
fn schedule(a: &Args, rng: &mut impl Rng) -> anyhow::Result<(usize, Vec<(f64, Ev)>)> {
    let mut ev = vec![(5.0, Ev::OptOut), (30.0, Ev::OptOut), (60.0, Ev::OptOut)];
    let kills = |ev: &mut Vec<(f64, Ev)>, rng: &mut dyn rand::RngCore, from: f64, every: f64| {
        let mut t = from;
        while t < 85.0 {
            ev.push((t, Ev::Kill));
            t += every + rng.random_range(0.0..2.0);
        }
    };
    let provider = |ev: &mut Vec<(f64, Ev)>, at: [f64; 4]| {
        ev.push((at[0], chaos(ChaosKind::Storm429, 5.0)));
        ev.push((at[1], chaos(ChaosKind::Burst5xx, 3.0)));
        ev.push((at[2], chaos(ChaosKind::Stall, 3.0)));
        for k in 0..3 {
            ev.push((at[3] + 2.0 * k as f64, Ev::Reset));
        }
    };
    let workers = match a.scenario.as_str() {
        "kill" => {
            kills(&mut ev, rng, 8.0, 4.0);
            a.workers
        }
        "pg-restart" => {
            ev.push((20.0, Ev::PgRestart(5.0)));
            ev.push((55.0, Ev::PgRestart(2.0)));
            a.workers
        }
        "blackhole" => {
            ev.push((15.0, Ev::Blackhole(3.0 * a.lease_s as f64)));
            a.workers
        }
        "provider" => {
            provider(&mut ev, [10.0, 25.0, 40.0, 55.0]);
            a.workers
        }
        "scale" => {
            for k in 0..7 {
                ev.push((5.0 + 3.0 * k as f64, Ev::Join));
                ev.push((50.0 + 3.0 * k as f64, Ev::Term));
            }
            1
        }
        "all" => {
            kills(&mut ev, rng, 12.0, 8.0);
            ev.push((20.0, Ev::Blackhole(3.0 * a.lease_s as f64)));
            ev.push((50.0, Ev::PgRestart(4.0)));
            provider(&mut ev, [28.0, 65.0, 80.0, 40.0]);
            for k in 0..4 {
                ev.push((8.0 + 2.0 * k as f64, Ev::Join));
                ev.push((90.0 + 3.0 * k as f64, Ev::Term));
            }
            a.workers
        }
        other => {
            bail!("--scenario {other:?}: expected kill, pg-restart, blackhole, provider, scale or all")
        }
    };
    ev.sort_by(|x, y| x.0.total_cmp(&y.0));
    Ok((workers, ev))
}

/// One worker process.
struct Proc {
    index: usize,
    child: Child,
    /// The signal we sent it, if any.
    signalled: Option<&'static str>,
    code: Option<i32>,
    report: Option<Value>,
}

/// The PostgreSQL server the run uses, for the restart.
struct Pg {
    data: PathBuf,
    bin: PathBuf,
    log: PathBuf,
}

impl Pg {
    fn ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let pg_ctl = self.bin.join("pg_ctl");
        let root = Command::new("id").arg("-u").output()?.stdout == b"0\n";
        let mut c = if root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
            c
        } else {
            Command::new(&pg_ctl)
        };
        let st = c
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("pg_ctl {args:?} failed: see {}", self.log.display());
        }
        Ok(())
    }

    fn stop(&self) -> anyhow::Result<()> {
        self.ctl(&["-m", "fast", "-w", "stop"])
    }

    /// Starts it with the options it last ran with (`postmaster.opts`, as `pg_ctl restart`).
    fn start(&self) -> anyhow::Result<()> {
        let opts = std::fs::read_to_string(self.data.join("postmaster.opts"))?;
        let opts = opts
            .trim()
            .split_once(' ')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default();
        let log = self.log.display().to_string();
        self.ctl(&["-w", "-t", "60", "-l", &log, "start", "-o", &opts])
    }
}

async fn sending_now(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND state = 'sending'",
    )
    .bind(CAMPAIGN)
    .fetch_one(pool)
    .await
    .unwrap_or(0)
}

/// Opts out `n` rows: half that wait (`pending`), half in flight (`sending`). Returns the
/// members and the Unix ms by which the opt-out had committed.
async fn opt_out(pool: &PgPool, n: i64) -> anyhow::Result<(Vec<i64>, u64)> {
    // Another system writes opt-outs; this is what it does: one committed UPDATE, retried if
    // PostgreSQL picks it as a deadlock victim against a worker's write.
    let mut tries = 0;
    loop {
        match opt_out_once(pool, n).await {
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("  opt-out retried: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}

async fn opt_out_once(pool: &PgPool, n: i64) -> anyhow::Result<(Vec<i64>, u64)> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "WITH picked AS (
             (SELECT member_id FROM campaign_targets
               WHERE campaign_id = $1 AND opted_out_at IS NULL AND state = 'pending'
               ORDER BY random() LIMIT $2)
             UNION ALL
             (SELECT member_id FROM campaign_targets
               WHERE campaign_id = $1 AND opted_out_at IS NULL AND state = 'sending'
               ORDER BY random() LIMIT $2))
         UPDATE campaign_targets t SET opted_out_at = now()
           FROM picked WHERE t.campaign_id = $1 AND t.member_id = picked.member_id
         RETURNING t.member_id",
    )
    .bind(CAMPAIGN)
    .bind(n / 2)
    .fetch_all(pool)
    .await?;
    Ok((ids, unix_ms()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(a.seed);
    let (start_workers, events) = schedule(&a, &mut rng)?;
    let needs_pg = events.iter().any(|(_, e)| matches!(e, Ev::PgRestart(_)));
    let pg = match (&a.pg_dir, needs_pg) {
        (Some(dir), _) => Some(Pg {
            data: dir.join("data"),
            log: dir.join("server.log"),
            bin: match &a.pg_bin {
                Some(b) => b.clone(),
                None => newest_pg_bin()?,
            },
        }),
        (None, true) => bail!("--scenario {} restarts PostgreSQL: give --pg-dir (the directory of scripts/pg.sh start DIR)", a.scenario),
        (None, false) => None,
    };

    let run_id = format!(
        "chaos_{}_{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    );
    let (db_url, pool) =
        harness::create_run_db(&a.database_url, &run_id, CAMPAIGN, a.targets).await?;

    let provider = harness::start_provider(&harness::provider_args(
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        "standard",
    ))?;
    let provider_addr: std::net::SocketAddr = reqwest::Url::parse(&provider.base)?
        .socket_addrs(|| None)?
        .into_iter()
        .next()
        .context("provider address")?;
    let provider_proxy = Proxy::start(provider_addr).await?;
    let mail_url = format!("{}v1/send", with_port(&provider.base, provider_proxy.port)?);
    let pg_addr: std::net::SocketAddr = reqwest::Url::parse(&db_url)?
        .socket_addrs(|| None)?
        .into_iter()
        .next()
        .context("database address")?;
    let pg_proxy = Proxy::start(pg_addr).await?;
    let db_url_0 = with_port(&db_url, pg_proxy.port)?;

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let stats = || async {
        http.get(format!("{}/stats", provider.base))
            .send()
            .await?
            .json::<Stats>()
            .await
    };

    let sender = sibling("campaign-sender")?;
    let logdir = std::env::temp_dir().join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let mut launches = 0usize;
    let mut spawn = |index: usize| -> anyhow::Result<Proc> {
        launches += 1;
        let child = Command::new(&sender)
            .arg("run")
            .env("DATABASE_URL", if index == 0 { &db_url_0 } else { &db_url })
            .env("CAMPAIGN_ID", CAMPAIGN)
            .env("MAIL_URL", &mail_url)
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env(
                "MAIL_RATE_PER_S",
                (a.provider_rate.floor() as u32).to_string(),
            )
            .env("LEASE_S", a.lease_s.to_string())
            .env("CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT_MS.to_string())
            .env("READ_TIMEOUT_MS", READ_TIMEOUT_MS.to_string())
            .env("OPTOUT_RECHECK_MS", OPTOUT_RECHECK_MS.to_string())
            .env("BACKOFF_BASE_MS", "500")
            .env("DEADLINE_S", a.timeout_s.to_string())
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(
                logdir.join(format!("worker-{index}-{launches}.log")),
            )?)
            .spawn()
            .context("start campaign-sender")?;
        Ok(Proc {
            index,
            child,
            signalled: None,
            code: None,
            report: None,
        })
    };

    let blackholed = events.iter().any(|(_, e)| matches!(e, Ev::Blackhole(_)));
    let mut procs: Vec<Proc> = (0..start_workers)
        .map(&mut spawn)
        .collect::<anyhow::Result<_>>()?;
    let mut next_index = start_workers;
    let mut pending: Vec<(f64, Ev)> = events.clone();
    pending.reverse();
    // Restarts due: (at, index); PostgreSQL start due; blackhole end due.
    let mut restarts: Vec<(Instant, usize)> = Vec::new();
    let mut pg_start_at: Option<Instant> = None;
    let mut blackhole_end: Option<Instant> = None;
    let mut log: Vec<Value> = Vec::new();
    let mut dup_bound_rows: i64 = 0;
    let mut optouts: Vec<(Vec<i64>, u64)> = Vec::new();
    let mut pg_back: Vec<Instant> = Vec::new();
    let started = Instant::now();
    let hard_stop = started + Duration::from_secs(a.timeout_s);
    let mut timed_out = false;
    let at = |t: Instant| (t.duration_since(started).as_secs_f64() * 10.0).round() / 10.0;

    loop {
        let now = Instant::now();
        let running = procs.iter().filter(|p| p.code.is_none()).count();
        let t = now.duration_since(started).as_secs_f64();
        while pending.last().is_some_and(|(at_s, _)| t >= *at_s) {
            let (_, ev) = pending.pop().expect("checked");
            // A fault "in flight": rows `sending` now are all it could make us repeat.
            let held = if pg_start_at.is_none() {
                sending_now(&pool).await
            } else {
                0
            };
            let mut note = json!({"at_s": at(now), "event": format!("{ev:?}")});
            match ev {
                Ev::Kill => {
                    // Worker 0 is the partition's subject where there is one: killing it
                    // would throw away the evidence (its report of fenced writes).
                    let live: Vec<usize> = (0..procs.len())
                        .filter(|i| procs[*i].code.is_none() && procs[*i].signalled.is_none())
                        .filter(|i| !(blackholed && procs[*i].index == 0))
                        .collect();
                    if live.is_empty() {
                        continue;
                    }
                    let i = live[rng.random_range(0..live.len())];
                    signal(&procs[i], "KILL")?;
                    procs[i].signalled = Some("KILL");
                    restarts.push((now + Duration::from_secs(1), procs[i].index));
                    dup_bound_rows += held;
                    note["worker"] = json!(procs[i].index);
                    note["sending"] = json!(held);
                }
                Ev::Join => {
                    procs.push(spawn(next_index)?);
                    note["worker"] = json!(next_index);
                    next_index += 1;
                }
                Ev::Term => {
                    if let Some(i) = (0..procs.len())
                        .rev()
                        .find(|i| procs[*i].code.is_none() && procs[*i].signalled.is_none())
                    {
                        signal(&procs[i], "TERM")?;
                        procs[i].signalled = Some("TERM");
                        note["worker"] = json!(procs[i].index);
                    }
                }
                Ev::PgRestart(down) => {
                    let pg = pg.as_ref().expect("checked at start");
                    dup_bound_rows += held;
                    pg.stop()?;
                    pg_start_at = Some(Instant::now() + Duration::from_secs_f64(down));
                    note["sending"] = json!(held);
                }
                Ev::Blackhole(secs) => {
                    pg_proxy.blackhole(true);
                    blackhole_end = Some(now + Duration::from_secs_f64(secs));
                    dup_bound_rows += held;
                    note["sending"] = json!(held);
                }
                Ev::Provider(c) => {
                    http.post(format!("{}/chaos", provider.base))
                        .json(&c)
                        .send()
                        .await?
                        .error_for_status()?;
                }
                Ev::Reset => {
                    provider_proxy.reset();
                    dup_bound_rows += held;
                    note["sending"] = json!(held);
                }
                Ev::OptOut => {
                    if pg_start_at.is_some() {
                        continue;
                    }
                    let (ids, committed) = opt_out(&pool, a.optouts).await?;
                    note["opted_out"] = json!(ids.len());
                    optouts.push((ids, committed));
                }
            }
            eprintln!("  {note}");
            log.push(note);
        }
        if pg_start_at.is_some_and(|d| now >= d) {
            pg.as_ref().expect("set").start()?;
            pg_start_at = None;
            pg_back.push(Instant::now());
            eprintln!("  t={:.1}s PostgreSQL back", at(Instant::now()));
        }
        if blackhole_end.is_some_and(|d| now >= d) {
            pg_proxy.blackhole(false);
            blackhole_end = None;
            eprintln!("  t={:.1}s blackhole lifted", at(now));
        }
        let due: Vec<usize> = restarts
            .iter()
            .filter(|(when, _)| now >= *when)
            .map(|(_, i)| *i)
            .collect();
        restarts.retain(|(when, _)| now < *when);
        for index in due {
            procs.push(spawn(index)?);
        }
        for p in procs.iter_mut().filter(|p| p.code.is_none()) {
            if let Some(st) = p.child.try_wait()? {
                p.code = Some(st.code().unwrap_or(-1));
                p.report = harness::report_of(&mut p.child)?;
            }
        }
        let done = running == 0
            && procs.iter().all(|p| p.code.is_some())
            && restarts.is_empty()
            && pg_start_at.is_none()
            && blackhole_end.is_none();
        if done {
            break;
        }
        if now > hard_stop {
            eprintln!("chaos: timeout; killing every worker");
            timed_out = true;
            for p in procs.iter_mut().filter(|p| p.code.is_none()) {
                let _ = p.child.kill();
            }
            restarts.clear();
            if pg_start_at.take().is_some() {
                pg.as_ref().expect("set").start()?;
            }
            pg_proxy.blackhole(false);
            blackhole_end = None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();

    // ---- The checks ----
    let s = stats().await?;
    let deliveries: Vec<Delivery> = http
        .get(format!("{}/deliveries", provider.base))
        .send()
        .await?
        .json()
        .await?;
    let delivered: HashMap<i64, u64> = deliveries
        .iter()
        .map(|d| (d.member_id, d.first_ms))
        .collect();
    let states: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT state || CASE WHEN opted_out_at IS NULL THEN '' ELSE ' (opted out)' END, count(*)
           FROM campaign_targets WHERE campaign_id = $1 GROUP BY 1 ORDER BY 1",
    )
    .bind(CAMPAIGN)
    .fetch_all(&pool)
    .await?
    .into_iter()
    .collect();
    let lost: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets
          WHERE campaign_id = $1 AND opted_out_at IS NULL AND state NOT IN ('sent', 'failed')",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await?;
    let sent_ids: Vec<i64> = sqlx::query_scalar(
        "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'sent'",
    )
    .bind(CAMPAIGN)
    .fetch_all(&pool)
    .await?;
    let sent_not_delivered = sent_ids
        .iter()
        .filter(|m| !delivered.contains_key(m))
        .count();
    let failed_by_class: BTreeMap<String, i64> = sqlx::query_as::<_, (String, i64)>(
        "SELECT coalesce(last_error, '?') || ' ' || coalesce(last_status::text, '-'), count(*)
           FROM campaign_targets WHERE campaign_id = $1 AND state = 'failed' GROUP BY 1",
    )
    .bind(CAMPAIGN)
    .fetch_all(&pool)
    .await?
    .into_iter()
    .collect();
    // Failed for another reason than the provider's permanent 422 (member_id % 997 == 0).
    let failed_not_422: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets
          WHERE campaign_id = $1 AND state = 'failed' AND last_status IS DISTINCT FROM 422",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await?;
    let window_ms = OPTOUT_RECHECK_MS + 250;
    let (mut opted_out, mut raced_in_flight, mut after_optout) = (0usize, 0usize, 0usize);
    let mut opted_out_set = HashSet::new();
    for (ids, committed) in &optouts {
        for m in ids {
            opted_out += 1;
            opted_out_set.insert(*m);
            match delivered.get(m) {
                Some(first) if *first > committed + window_ms => after_optout += 1,
                Some(_) => raced_in_flight += 1,
                None => {}
            }
        }
    }
    let dup_bound = dup_bound_rows as u64 + s.chaos_stalled;
    let limit_plus_burst = a.provider_rate as u64 + a.burst as u64;
    let mut bad_exits = Vec::new();
    for p in &procs {
        let ok = matches!(
            (p.signalled, p.code),
            (Some("KILL"), _) | (Some("TERM"), Some(0 | 1)) | (_, Some(0))
        );
        if !ok {
            bad_exits.push(json!({"worker": p.index, "code": p.code, "signalled": p.signalled}));
        }
    }
    let stat = |p: &Proc, k: &str| p.report.as_ref().and_then(|r| r["stats"][k].as_u64());
    let fenced_0: u64 = procs
        .iter()
        .filter(|p| p.index == 0)
        .filter_map(|p| stat(p, "stale_writes"))
        .sum();
    let stale_writes: u64 = procs.iter().filter_map(|p| stat(p, "stale_writes")).sum();
    let mut checks = vec![
        (
            "every target sent or failed (none lost or stuck)",
            lost == 0,
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
        ("run finished in time", !timed_out),
    ];
    if blackholed {
        checks.push(("the cut-off worker's late writes fenced", fenced_0 > 0));
    }
    let failed_checks: Vec<&str> = checks.iter().filter(|c| !c.1).map(|c| c.0).collect();
    // Throughput between 10 % and 90 % of the campaign is not tracked here (see `drain`):
    // the average over the whole run is the honest figure for a run full of faults.
    let per_s = s.delivered as f64 / elapsed;
    let report = json!({
        "scenario": a.scenario,
        "targets": a.targets,
        "workers_at_start": start_workers,
        "processes_started": procs.len(),
        "most_running": most_running(&events, start_workers),
        "elapsed_s": (elapsed * 10.0).round() / 10.0,
        "delivered_per_s": per_s.round(),
        "events": log,
        "lost_or_stuck": lost,
        "final_states": states,
        "failed_by_class": failed_by_class,
        "failed_not_422": failed_not_422,
        "requests": s.requests,
        "delivered": s.delivered,
        "members_delivered_more_than_once": s.members_delivered_more_than_once,
        "sent_not_delivered": sent_not_delivered,
        "duplicates_suppressed": s.duplicates_suppressed,
        "duplicate_bound": dup_bound,
        "opted_out": opted_out,
        "opted_out_delivered_in_flight": raced_in_flight,
        "delivered_after_optout": after_optout,
        "max_offered_in_1s": s.max_offered_in_1s,
        "max_accepted_in_1s": s.max_accepted_in_1s,
        "limit_plus_burst": limit_plus_burst,
        "throttled_429_by_limit": s.throttled_429,
        "chaos": {"429": s.chaos_429, "5xx": s.chaos_5xx, "stalled": s.chaos_stalled},
        "stale_writes_fenced": stale_writes,
        "stale_writes_fenced_worker_0": fenced_0,
        "pg_back_at_s": pg_back.iter().map(|t| at(*t)).collect::<Vec<_>>(),
        "exit_codes": procs.iter().map(|p| json!([p.index, p.signalled, p.code])).collect::<Vec<_>>(),
        "bad_exits": bad_exits,
        "checks_failed": failed_checks,
        "worker_logs": logdir.display().to_string(),
    });
    println!("{report}");
    let codes: BTreeMap<String, usize> = procs.iter().fold(BTreeMap::new(), |mut m, p| {
        let k = match (p.signalled, p.code) {
            (Some("KILL"), _) => "killed".to_string(),
            (_, Some(c)) => c.to_string(),
            _ => "?".to_string(),
        };
        *m.entry(k).or_default() += 1;
        m
    });
    eprintln!(
        "\n| scenario | targets | workers | faults | elapsed | delivered/s | lost or stuck | mailed twice | duplicate requests (bound) | after opt-out (opted out, raced) | max in 1 s (limit+burst) | limit 429s | exits | checks |\n\
         | `{}` | {} | {}→{} procs | {} | {:.0} s | {:.0} | {} | {} | {} ({}) | {} ({}, {}) | {} ({}) | {} | {} | {} |",
        a.scenario,
        a.targets,
        start_workers,
        procs.len(),
        log.len(),
        elapsed,
        per_s,
        lost,
        s.members_delivered_more_than_once,
        s.duplicates_suppressed,
        dup_bound,
        after_optout,
        opted_out,
        raced_in_flight,
        s.max_offered_in_1s,
        limit_plus_burst,
        s.throttled_429,
        codes
            .iter()
            .map(|(k, v)| format!("{v}×{k}"))
            .collect::<Vec<_>>()
            .join(" "),
        if failed_checks.is_empty() {
            "all pass".to_string()
        } else {
            format!("FAILED: {}", failed_checks.join("; "))
        },
    );
    pool.close().await;
    drop(provider);
    harness::drop_run_db(&a.database_url, &run_id).await?;
    if !failed_checks.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

fn most_running(events: &[(f64, Ev)], start: usize) -> usize {
    let (mut n, mut most) = (start as i64, start as i64);
    for (_, e) in events {
        match e {
            Ev::Join => n += 1,
            Ev::Term => n -= 1,
            _ => {}
        }
        most = most.max(n);
    }
    most as usize
}

fn signal(p: &Proc, sig: &str) -> anyhow::Result<()> {
    Command::new("kill")
        .args([format!("-{sig}"), p.child.id().to_string()])
        .status()?;
    Ok(())
}

fn newest_pg_bin() -> anyhow::Result<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")?
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("pg_ctl").exists())
        .collect();
    v.sort_by_key(|p| {
        p.parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
    });
    v.pop()
        .context("no /usr/lib/postgresql/*/bin: set PG_BIN or --pg-bin")
}
