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
//! | `pg-restart` | PostgreSQL is stopped (fast) for `--pg-down-s` (8 s), and again for 2 s, then started; how soon after each return the fleet is at 95 % of the limit again is reported |
//! | `blackhole` | worker 0's database connection stops moving bytes for 3 × `LEASE_S`, then resumes (its held writes arrive late) |
//! | `dark` | at 10 s every worker's database connections open at that moment go dark for good (new ones relay normally), with statements in flight on them (the work table is locked for the half second before); again at 30 s, and worker 0 gets SIGTERM half a second later |
//! | `dark-one` | the same, worker 0's connections only |
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
//! - `blackhole`: the cut-off worker's late writes were fenced (`stale_writes` > 0);
//! - **a stopping pod goes within its grace**: every worker sent SIGTERM exited within
//!   `--grace-s` (the manifests' `terminationGracePeriodSeconds`);
//! - `dark`, `dark-one`: after each dark moment, the fleet was back at ≥ 95 % of the limit
//!   within 10 s (accepted requests, every 1-s window from then to 15 s after).
//!
//! It prints one JSON line and a Markdown table row (docs/RELIABILITY.md). Bounded: the run is
//! stopped after `--timeout-s`; everything talks to 127.0.0.1 only.

mod play;
mod schedule;
mod verdict;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use loadtest::{sibling, with_port, Proxy};

use play::{newest_pg_bin, Levers, Pg, Play, Spawner};
use schedule::{schedule, Ev};

#[derive(Parser, Debug)]
#[command(
    name = "chaos",
    about = "Drain a generated campaign under faults and check nothing was lost or duplicated"
)]
pub struct Args {
    /// PostgreSQL server to create the run's database on (a throwaway one).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    /// kill | pg-restart | blackhole | dark | dark-one | provider | scale | all
    #[arg(long)]
    scenario: String,
    /// The contract the workers speak (`MAIL_PROVIDER`): json | sendgrid | ses | postmark |
    /// mailgun | resend. The fake serves them all.
    #[arg(long, default_value = "json")]
    provider: String,
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
    /// How long PostgreSQL stays down in `pg-restart`'s first restart (the second is 2 s).
    #[arg(long, default_value_t = 8.0)]
    pub pg_down_s: f64,
    /// The grace period a SIGTERM'd worker must exit within (the manifests'
    /// `terminationGracePeriodSeconds`).
    #[arg(long, default_value_t = 30.0)]
    pub grace_s: f64,
    /// Seed for the random choices (which worker is killed, when).
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// The workers' logs go to a directory of the run's name under this one.
    #[arg(long, default_value = "target/chaos-logs")]
    pub logs: PathBuf,
    /// Longest the run may take; then every worker is killed and the run fails.
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
}

pub const CAMPAIGN: &str = "chaos-campaign";
pub const CONNECT_TIMEOUT_MS: u64 = 1000;
pub const READ_TIMEOUT_MS: u64 = 3000;
pub const OPTOUT_RECHECK_MS: u64 = 1000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(a.seed);
    let (start_workers, events) = schedule(&a, &mut rng)?;
    let pg = the_server(&a, &events)?;
    let run_id = format!(
        "chaos_{}_{}",
        std::process::id(),
        chrono::Utc::now().format("%H%M%S")
    );
    let (db_url, pool) =
        loadtest::create_run_db(&a.database_url, &run_id, CAMPAIGN, a.targets).await?;
    let provider = loadtest::start_provider(&loadtest::provider_args(
        a.provider_rate,
        a.burst,
        a.latency_ms,
        a.jitter_ms,
        "standard",
    ))?;
    // The provider behind a proxy that can reset connections; worker 0's database behind one
    // that can blackhole it.
    let provider_proxy = Proxy::start(socket_of(&provider.base)?).await?;
    let provider_env = loadtest::vendor_env(
        &a.provider,
        &with_port(&provider.base, provider_proxy.port)?,
    )?;
    let pg_proxy = Proxy::start(socket_of(&db_url)?).await?;
    let db_url_0 = with_port(&db_url, pg_proxy.port)?;
    // The other workers reach it directly, or through a proxy of their own when their
    // connections are to go dark.
    let pg_fleet_proxy = Proxy::start(socket_of(&db_url)?).await?;
    let fleet_dark = events
        .iter()
        .any(|(_, e)| matches!(e, Ev::Dark { all: true }));
    let db_url_fleet = if fleet_dark {
        with_port(&db_url, pg_fleet_proxy.port)?
    } else {
        db_url.clone()
    };
    let logdir = a.logs.join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let spawner = Spawner::new(
        &a,
        sibling("campaign-sender")?,
        (db_url_fleet, db_url_0),
        provider_env,
        logdir.clone(),
    );
    let levers = Levers {
        pool: pool.clone(),
        pg,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
        provider_base: provider.base.clone(),
        provider_proxy,
        pg_proxy,
        pg_fleet_proxy,
    };
    let mut play = Play::start(&a, levers, spawner, rng, start_workers, &events)?;
    play.run().await?;
    let elapsed = play.started.elapsed().as_secs_f64();
    let failed = verdict::judge(&a, &play, &events, start_workers, elapsed).await?;
    eprintln!("worker logs: {}", logdir.display());
    pool.close().await;
    drop(provider);
    loadtest::drop_run_db(&a.database_url, &run_id).await?;
    if !failed.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

/// The PostgreSQL server to restart, if the scenario restarts it.
fn the_server(a: &Args, events: &[(f64, Ev)]) -> anyhow::Result<Option<Pg>> {
    let needs_pg = events.iter().any(|(_, e)| matches!(e, Ev::PgRestart(_)));
    Ok(match (&a.pg_dir, needs_pg) {
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
    })
}

/// The address a URL's host and port resolve to.
fn socket_of(url: &str) -> anyhow::Result<std::net::SocketAddr> {
    reqwest::Url::parse(url)?
        .socket_addrs(|| None)?
        .into_iter()
        .next()
        .context("no address for the URL")
}
