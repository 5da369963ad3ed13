//! The drain's worker processes: started, joined, stopped and killed on schedule, sampled every
//! 250 ms (deliveries, peak RSS, exit codes) until every one has exited — bounded by
//! `--timeout-s` + 30 s, after which the rest are killed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use fake_provider::Stats;
use sqlx::PgPool;

use super::{Args, CAMPAIGN};

/// The workers of one drain run.
pub struct Fleet {
    sender: PathBuf,
    env: Vec<(String, String)>,
    logdir: PathBuf,
    pool: PgPool,
    stats_url: String,
    callgrind: bool,
    pub workers: Vec<Child>,
}

/// What the run recorded.
pub struct Run {
    /// (seconds since the workers started, deliveries so far).
    pub timeline: Vec<(f64, u64)>,
    /// Peak RSS per worker, KiB.
    pub rss: Vec<u64>,
    /// CPU time (user + system) per worker, clock ticks of 1/100 s, as last sampled.
    pub cpu_ticks: Vec<u64>,
    pub codes: Vec<Option<i32>>,
    /// Workers we sent a signal.
    pub signalled: Vec<bool>,
    /// (seconds since the provider started, `join`/`term`/`kill`, worker index).
    pub happened: Vec<(f64, String, usize)>,
    /// The kill experiment: rows `sending` at the kill, and how long until all were settled.
    pub killed_rows: Option<usize>,
    pub recovery_s: Option<f64>,
    pub elapsed: f64,
    /// Each worker's JSON report (its last stdout line).
    pub reports: Vec<Option<serde_json::Value>>,
}

/// `MAIL_RATE_PER_S` for every worker: the provider's whole limit (they share it), or a
/// generous one when the provider has none.
pub fn worker_rate(a: &Args) -> u32 {
    a.worker_rate.unwrap_or_else(|| {
        if a.provider_rate > 0.0 {
            a.provider_rate.floor().max(1.0) as u32
        } else {
            100_000
        }
    })
}

/// utime + stime of /proc/PID/stat, in USER_HZ ticks (1/100 s on Linux).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest: Vec<&str> = s.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
}

/// Where worker `i`'s callgrind counts are written (`--callgrind`).
fn callgrind_file(logdir: &std::path::Path, i: usize) -> PathBuf {
    logdir.join(format!("callgrind-{i}.out"))
}

/// The instructions worker `i` executed, from its callgrind file's `totals:` line (written
/// when it exits); `None` without `--callgrind` or before it exited.
pub fn instructions(logdir: &std::path::Path, i: usize) -> Option<u64> {
    let text = std::fs::read_to_string(callgrind_file(logdir, i)).ok()?;
    let line = text
        .lines()
        .find(|l| l.starts_with("totals:") || l.starts_with("summary:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
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

impl Fleet {
    /// Starts `--workers` `campaign-sender run` processes against the provider at `base`.
    pub fn start(
        a: &Args,
        db_url: &str,
        base: &str,
        pool: PgPool,
        logdir: PathBuf,
    ) -> anyhow::Result<Self> {
        let env = [
            ("DATABASE_URL", db_url.to_string()),
            ("CAMPAIGN_ID", CAMPAIGN.to_string()),
            ("MAIL_RATE_PER_S", worker_rate(a).to_string()),
            ("SEND_CONCURRENCY", a.send_concurrency.to_string()),
            ("BATCH_SIZE", a.batch_size.to_string()),
            ("LEASE_S", a.lease_s.to_string()),
            ("DEADLINE_S", a.timeout_s.to_string()),
            ("BACKOFF_BASE_MS", "500".to_string()),
            ("LOG_FORMAT", "json".to_string()),
            ("RUST_LOG", "warn".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(
            a.ca_file
                .iter()
                .map(|f| ("MAIL_CA_FILE".to_string(), f.display().to_string())),
        )
        .chain(loadtest::vendor_env(&a.provider, base)?)
        .collect();
        let mut f = Self {
            sender: loadtest::sibling("campaign-sender")?,
            env,
            logdir,
            pool,
            stats_url: format!("{base}/stats"),
            callgrind: a.callgrind,
            workers: Vec::new(),
        };
        for _ in 0..a.workers {
            f.spawn()?;
        }
        Ok(f)
    }

    /// One more worker, `JOB_COMPLETION_INDEX` = its index (as an Indexed Job gives it).
    fn spawn(&mut self) -> anyhow::Result<usize> {
        let i = self.workers.len();
        let mut cmd = if self.callgrind {
            let mut c = Command::new("valgrind");
            c.arg("--tool=callgrind")
                .arg(format!(
                    "--callgrind-out-file={}",
                    callgrind_file(&self.logdir, i).display()
                ))
                .arg(&self.sender);
            c
        } else {
            Command::new(&self.sender)
        };
        let child = cmd
            .arg("run")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("JOB_COMPLETION_INDEX", i.to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(
                self.logdir.join(format!("worker-{i}.log")),
            )?)
            .spawn()
            .context("start campaign-sender")?;
        self.workers.push(child);
        Ok(i)
    }

    /// Plays the events and samples until every worker has exited.
    pub async fn run(&mut self, a: &Args, provider_t0: Instant) -> anyhow::Result<Run> {
        let started = Instant::now();
        let n = self.workers.len();
        let mut run = Run {
            timeline: Vec::new(),
            rss: vec![0; n],
            cpu_ticks: vec![0; n],
            codes: vec![None; n],
            signalled: vec![false; n],
            happened: Vec::new(),
            killed_rows: None,
            recovery_s: None,
            elapsed: 0.0,
            reports: Vec::new(),
        };
        let mut pending = a.events.clone();
        pending.sort_by(|x, y| x.0.total_cmp(&y.0));
        pending.reverse();
        let mut killed: Option<(Instant, Vec<i64>)> = None;
        let hard_stop = started + Duration::from_secs(a.timeout_s + 30);
        let http = loadtest::http_client(a.ca_file.as_deref())?;
        while run.codes.iter().any(Option::is_none) {
            self.play_due(&mut pending, &mut run, started, provider_t0)?;
            self.kill_experiment(a, &mut killed, &mut run, started)
                .await?;
            self.sample(&mut run)?;
            if let Ok(s) = self.stats(&http).await {
                run.timeline
                    .push((started.elapsed().as_secs_f64(), s.delivered));
                if a.targets >= 10_000 && run.timeline.len().is_multiple_of(40) {
                    eprintln!(
                        "  t={:>4.0}s delivered {:>8}",
                        started.elapsed().as_secs_f64(),
                        s.delivered
                    );
                }
            }
            if Instant::now() > hard_stop {
                eprintln!("drain: timeout; killing workers");
                for w in self.workers.iter_mut() {
                    let _ = w.kill();
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        run.elapsed = started.elapsed().as_secs_f64();
        for w in self.workers.iter_mut() {
            run.reports.push(loadtest::report_of(w)?);
        }
        Ok(run)
    }

    async fn stats(&self, http: &reqwest::Client) -> reqwest::Result<Stats> {
        http.get(&self.stats_url)
            .send()
            .await?
            .json::<Stats>()
            .await
    }

    /// `--event`s whose time has come: a worker joins, or the oldest one still running that we
    /// have not signalled gets SIGTERM or SIGKILL.
    fn play_due(
        &mut self,
        pending: &mut Vec<(f64, String)>,
        run: &mut Run,
        started: Instant,
        provider_t0: Instant,
    ) -> anyhow::Result<()> {
        while pending
            .last()
            .is_some_and(|(t, _)| started.elapsed().as_secs_f64() >= *t)
        {
            let (_, what) = pending.pop().expect("checked");
            let at = provider_t0.elapsed().as_secs_f64();
            let t = started.elapsed().as_secs_f64();
            if what == "join" {
                let i = self.spawn()?;
                run.rss.push(0);
                run.cpu_ticks.push(0);
                run.codes.push(None);
                run.signalled.push(false);
                eprintln!("  t={t:.1}s: worker-{i} joins");
                run.happened.push((at, what, i));
            } else if let Some(i) =
                (0..self.workers.len()).find(|i| run.codes[*i].is_none() && !run.signalled[*i])
            {
                let sig = if what == "term" { "-TERM" } else { "-KILL" };
                Command::new("kill")
                    .args([sig, &self.workers[i].id().to_string()])
                    .status()?;
                run.signalled[i] = true;
                eprintln!("  t={t:.1}s: SIG{} to worker-{i}", &sig[1..]);
                run.happened.push((at, what, i));
            }
        }
        Ok(())
    }

    /// `--kill-after-s`: signals worker 0 once, notes the rows `sending` at that moment, and
    /// measures how long until every one of them is settled.
    async fn kill_experiment(
        &self,
        a: &Args,
        killed: &mut Option<(Instant, Vec<i64>)>,
        run: &mut Run,
        started: Instant,
    ) -> anyhow::Result<()> {
        if let (Some(after), None) = (a.kill_after_s, &killed) {
            if started.elapsed() >= Duration::from_secs(after) && run.codes[0].is_none() {
                let pid = self.workers[0].id().to_string();
                Command::new("kill")
                    .args([format!("-{}", a.kill_signal), pid])
                    .status()?;
                let at = Instant::now();
                let held: Vec<i64> = sqlx::query_scalar(
                    "SELECT member_id FROM campaign_targets WHERE campaign_id = $1 AND state = 'sending'",
                )
                .bind(CAMPAIGN)
                .fetch_all(&self.pool)
                .await?;
                eprintln!(
                    "  t={:.0}s: SIG{} to worker-0; {} rows were sending",
                    started.elapsed().as_secs_f64(),
                    a.kill_signal,
                    held.len()
                );
                run.killed_rows = Some(held.len());
                *killed = Some((at, held));
            }
        }
        if let (Some((at, held)), None) = (&killed, run.recovery_s) {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND member_id = ANY($2) AND state NOT IN ('sent', 'failed')",
            )
            .bind(CAMPAIGN)
            .bind(held)
            .fetch_one(&self.pool)
            .await?;
            if open == 0 {
                run.recovery_s = Some(at.elapsed().as_secs_f64());
            }
        }
        Ok(())
    }

    /// Peak RSS and exit codes of the workers still running.
    fn sample(&mut self, run: &mut Run) -> anyhow::Result<()> {
        for (i, w) in self.workers.iter_mut().enumerate() {
            if run.codes[i].is_none() {
                if let Some(k) = peak_rss_kib(w.id()) {
                    run.rss[i] = run.rss[i].max(k);
                }
                if let Some(t) = cpu_ticks(w.id()) {
                    run.cpu_ticks[i] = run.cpu_ticks[i].max(t);
                }
                if let Some(st) = w.try_wait()? {
                    run.codes[i] = Some(st.code().unwrap_or(-1));
                }
            }
        }
        Ok(())
    }
}
