//! One scenario of `forget`: a fresh database and provider, the days, and what they came to.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use fake_provider::{Delivery, Stats, Suppression};
use serde::Serialize;

use super::Args;

const CAMPAIGN: &str = "forget-campaign";
/// Off, in effect: a re-send is allowed whatever the age of the unknown outcome.
const NO_WINDOW_S: u64 = 315_360_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    A,
    B,
    C,
}

impl Scenario {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "a" => Ok(Scenario::A),
            "b" => Ok(Scenario::B),
            "c" => Ok(Scenario::C),
            _ => anyhow::bail!("--scenario {s:?}: expected a, b, c or all"),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Scenario::A => "(a)",
            Scenario::B => "(b)",
            Scenario::C => "(c)",
        }
    }
    pub fn what(self) -> &'static str {
        match self {
            Scenario::A => "the provider's own suppression only",
            Scenario::B => "its list imported before each run",
            Scenario::C => "(b) + the idempotency window",
        }
    }
    fn imports(self) -> bool {
        self != Scenario::A
    }
}

#[derive(Debug, Default, Serialize)]
pub struct Outcome {
    pub scenario: &'static str,
    pub mailed_twice: u64,
    pub misses: u64,
    pub listed_requests: u64,
    pub failed: i64,
    pub unconfirmed: u64,
    pub unconfirmed_delivered: u64,
    pub paused: bool,
    pub answered_late: u64,
    pub exit_codes: Vec<Vec<Option<i32>>>,
}

/// Where a member falls in the provider's list: a fixed pseudo-random slot in 0..100 000.
fn slot(member: i64) -> u64 {
    (member as u64).wrapping_mul(2_654_435_761) % 100_000
}

/// The members listed in the slot range `[from, to)` (in thousandths of a percent).
fn listed_between(targets: i64, from: f64, to: f64) -> Vec<i64> {
    (1..=targets)
        .filter(|m| (from..to).contains(&(slot(*m) as f64)))
        .collect()
}

/// How far the provider's list has grown (a slot bound, see [`slot`]).
struct Growth(f64);

impl Growth {
    /// The members newly listed when the list grows to `to`.
    fn to(&mut self, targets: i64, to: f64) -> Vec<i64> {
        let ids = listed_between(targets, self.0, to);
        self.0 = to;
        ids
    }
}

pub async fn play(a: &Args, s: Scenario) -> anyhow::Result<Outcome> {
    let run_id = format!(
        "forget_{}_{}",
        std::process::id(),
        s.name().trim_matches(['(', ')'])
    );
    let (db_url, pool) =
        loadtest::create_run_db(&a.database_url, &run_id, CAMPAIGN, a.targets).await?;
    let logdir = a.logs.join(&run_id);
    std::fs::create_dir_all(&logdir)?;
    let mut args = loadtest::provider_args(a.provider_rate, 10, 20, 10, "none");
    args.extend(
        [
            "--key-retention-s",
            &a.retention_s.to_string(),
            "--late-ppm",
            &a.late_ppm.to_string(),
            "--late-ms",
            &a.late_ms.to_string(),
        ]
        .map(String::from),
    );
    let provider = loadtest::start_provider(&args)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let sender = loadtest::sibling("campaign-sender")?;
    // Thousandths of a percent: the list grows from 0 to `listed` and by `step` twice a day.
    let (listed, step) = (a.listed_pct * 1000.0, a.new_pct * 1000.0);
    let mut list = Growth(0.0);
    let mut out = Outcome {
        scenario: s.name(),
        ..Default::default()
    };
    for day in 0..a.days {
        let last = day + 1 == a.days;
        let before = if day == 0 {
            listed + step
        } else {
            list.0 + step
        };
        add_to_list(&http, &provider.base, &list.to(a.targets, before)).await?;
        if s.imports() {
            import_list(&http, &provider.base, &sender, &db_url, &logdir, day).await?;
        }
        let mut pods: Vec<Child> = (0..a.workers)
            .map(|i| spawn(a, s, &sender, &db_url, &provider.base, &logdir, day, i))
            .collect::<anyhow::Result<_>>()?;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(a.stop_at_s / 2.0)).await;
        let mid = list.0 + step;
        add_to_list(&http, &provider.base, &list.to(a.targets, mid)).await?;
        if !last {
            tokio::time::sleep_until((started + Duration::from_secs_f64(a.stop_at_s)).into()).await;
            for (i, p) in pods.iter().enumerate() {
                let sig = if i < 2 { "KILL" } else { "TERM" };
                Command::new("kill")
                    .args([format!("-{sig}"), p.id().to_string()])
                    .status()?;
            }
        }
        let codes = wait_all(&mut pods, Duration::from_secs(if last { 600 } else { 30 })).await?;
        out.paused |= codes.contains(&Some(2)) || codes.contains(&Some(3));
        out.exit_codes.push(codes);
        if !last {
            tokio::time::sleep(Duration::from_secs(a.gap_s)).await;
        }
    }
    let deliveries: Vec<Delivery> =
        get_json(&http, &format!("{}/deliveries", provider.base)).await?;
    let stats: Stats = get_json(&http, &format!("{}/stats", provider.base)).await?;
    let delivered: HashMap<i64, u64> = deliveries
        .iter()
        .map(|d| (d.member_id, d.deliveries))
        .collect();
    let on_list: HashSet<i64> = listed_between(a.targets, 0.0, list.0).into_iter().collect();
    out.mailed_twice = delivered.values().filter(|n| **n >= 2).count() as u64;
    out.misses = (1..=a.targets)
        .filter(|m| !on_list.contains(m) && !delivered.contains_key(m))
        .count() as u64;
    out.listed_requests = stats.suppressed_requests;
    out.answered_late = stats.answered_late;
    let unconfirmed: Vec<i64> = sqlx::query_scalar(
        "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'unconfirmed'",
    )
    .bind(CAMPAIGN)
    .fetch_all(&pool)
    .await?;
    out.unconfirmed = unconfirmed.len() as u64;
    out.unconfirmed_delivered = unconfirmed
        .iter()
        .filter(|m| delivered.contains_key(m))
        .count() as u64;
    out.failed = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND state = 'failed'",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await?;
    pool.close().await;
    drop(provider);
    loadtest::drop_run_db(&a.database_url, &run_id).await?;
    Ok(out)
}

async fn add_to_list(http: &reqwest::Client, base: &str, ids: &[i64]) -> anyhow::Result<()> {
    // Mixed case, as providers export what they were given: matching must ignore it.
    let entries: Vec<Suppression> = ids
        .iter()
        .map(|m| Suppression {
            email: format!("Member{m}@Example.com"),
            reason: if m % 2 == 0 {
                "hard_bounce"
            } else {
                "complaint"
            }
            .into(),
        })
        .collect();
    http.post(format!("{base}/suppressions"))
        .json(&entries)
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}

/// The operator's step before each run: the provider's export into `campaign-sender suppress`.
async fn import_list(
    http: &reqwest::Client,
    base: &str,
    sender: &std::path::Path,
    db_url: &str,
    logdir: &std::path::Path,
    day: u32,
) -> anyhow::Result<()> {
    let csv = http
        .get(format!("{base}/suppressions"))
        .send()
        .await?
        .text()
        .await?;
    let path = logdir.join(format!("suppressions-day{day}.csv"));
    std::fs::write(&path, csv)?;
    let out = Command::new(sender)
        .arg("suppress")
        .arg(&path)
        .env("DATABASE_URL", db_url)
        .output()
        .context("campaign-sender suppress")?;
    anyhow::ensure!(
        out.status.success(),
        "suppress failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn spawn(
    a: &Args,
    s: Scenario,
    sender: &std::path::Path,
    db_url: &str,
    base: &str,
    logdir: &std::path::Path,
    day: u32,
    index: usize,
) -> anyhow::Result<Child> {
    let window = if s == Scenario::C {
        a.retention_s
    } else {
        NO_WINDOW_S
    };
    let log = std::fs::File::create(logdir.join(format!("day{day}-{index}.log")))?;
    Command::new(sender)
        .arg("run")
        .env("DATABASE_URL", db_url)
        .env("CAMPAIGN_ID", CAMPAIGN)
        .env("MAIL_URL", format!("{base}/v1/send"))
        .env("JOB_NAME", format!("day{day}"))
        .env("JOB_UID", loadtest::job_uid(&format!("day{day}")))
        .envs(loadtest::ONE_CLICK_ENV)
        .env("WORKER_ID", format!("day{day}-{index}"))
        .env("MAIL_RATE_PER_S", a.provider_rate.floor().to_string())
        .env("BATCH_SIZE", "40")
        .env("LEASE_S", "5")
        .env("DEADLINE_S", "600")
        .env("READ_TIMEOUT_MS", a.read_timeout_ms.to_string())
        .env("CONNECT_TIMEOUT_MS", "1000")
        .env("BACKOFF_BASE_MS", "500")
        .env("IDEMPOTENCY_WINDOW_S", window.to_string())
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("start campaign-sender run")
}

/// Waits for every pod (bounded); their exit codes (`None`: killed by a signal).
async fn wait_all(pods: &mut [Child], limit: Duration) -> anyhow::Result<Vec<Option<i32>>> {
    let t0 = Instant::now();
    let mut codes = vec![None; pods.len()];
    let mut done = vec![false; pods.len()];
    while done.iter().any(|d| !d) {
        anyhow::ensure!(t0.elapsed() < limit, "pods did not exit within {limit:?}");
        for (i, p) in pods.iter_mut().enumerate() {
            if !done[i] {
                if let Some(st) = p.try_wait()? {
                    codes[i] = st.code();
                    done[i] = true;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(codes)
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<T> {
    Ok(http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}
