//! The Kubernetes side of a scaled multi-day run: Jobs of `campaign-sender run` pods, the Job
//! controller restarting a killed pod with the same `JOB_NAME`, and the operator's commands.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::Rng;

use super::{Args, CAMPAIGN, OPTOUT_RECHECK_MS};

/// One pod of a Job.
pub struct Pod {
    pub job: String,
    pub index: usize,
    child: Child,
    pub started: Instant,
    pub killed: bool,
    pub exited_at: Option<Instant>,
    pub code: Option<i32>,
    /// The run report's `reason`.
    pub reason: Option<String>,
}

pub struct Fleet {
    sender: PathBuf,
    db_url: String,
    mail_url: String,
    logdir: PathBuf,
    rate_per_s: u32,
    lease_s: u64,
    deadline_s: u64,
    workers: usize,
    batch_size: u32,
    launches: usize,
    pub pods: Vec<Pod>,
    /// Restarts due: (at, job, index).
    restarts: Vec<(Instant, String, usize)>,
    pub jobs_started: Vec<String>,
    pub jobs_skipped: Vec<String>,
}

impl Fleet {
    pub fn new(
        a: &Args,
        sender: PathBuf,
        db_url: String,
        mail_url: String,
        logdir: PathBuf,
    ) -> Self {
        Self {
            sender,
            db_url,
            mail_url,
            logdir,
            rate_per_s: a.provider_rate.floor() as u32,
            lease_s: a.lease_s,
            deadline_s: a.deadline_s,
            workers: a.workers,
            batch_size: a.batch_size,
            launches: 0,
            pods: Vec::new(),
            restarts: Vec::new(),
            jobs_started: Vec::new(),
            jobs_skipped: Vec::new(),
        }
    }

    /// The CronJob fires: a Job of `workers` pods, unless the previous one still runs
    /// (`concurrencyPolicy: Forbid`).
    pub fn fire(&mut self, job: &str) -> anyhow::Result<()> {
        self.reap()?;
        if self.pods.iter().any(|p| p.exited_at.is_none()) || !self.restarts.is_empty() {
            self.jobs_skipped.push(job.to_string());
            return Ok(());
        }
        self.jobs_started.push(job.to_string());
        for index in 0..self.workers {
            self.spawn(job, index)?;
        }
        Ok(())
    }

    fn spawn(&mut self, job: &str, index: usize) -> anyhow::Result<()> {
        self.launches += 1;
        let log = self
            .logdir
            .join(format!("{job}-{index}-{}.log", self.launches));
        let child = Command::new(&self.sender)
            .arg("run")
            .env("DATABASE_URL", &self.db_url)
            .env("CAMPAIGN_ID", CAMPAIGN)
            .env("MAIL_URL", &self.mail_url)
            .env("JOB_NAME", job)
            .env("JOB_UID", loadtest::job_uid(job))
            .envs(loadtest::ONE_CLICK_ENV)
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("WORKER_ID", format!("{job}-{index}-{}", self.launches))
            .env("MAIL_RATE_PER_S", self.rate_per_s.to_string())
            .env("LEASE_S", self.lease_s.to_string())
            .env("BATCH_SIZE", self.batch_size.to_string())
            .env("DEADLINE_S", self.deadline_s.to_string())
            .env("OPTOUT_RECHECK_MS", OPTOUT_RECHECK_MS.to_string())
            .env("BACKOFF_BASE_MS", "500")
            .env("LOG_FORMAT", "json")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .context("start campaign-sender run")?;
        self.pods.push(Pod {
            job: job.to_string(),
            index,
            child,
            started: Instant::now(),
            killed: false,
            exited_at: None,
            code: None,
            reason: None,
        });
        Ok(())
    }

    /// SIGKILL to a random running pod; its Job restarts it `after` later. Returns whether one ran.
    pub fn kill_one(&mut self, rng: &mut impl Rng, after: Duration) -> anyhow::Result<bool> {
        self.reap()?;
        let running: Vec<usize> = (0..self.pods.len())
            .filter(|&i| self.pods[i].exited_at.is_none())
            .collect();
        if running.is_empty() {
            return Ok(false);
        }
        let i = running[rng.random_range(0..running.len())];
        let p = &mut self.pods[i];
        p.child.kill()?;
        p.child.wait()?;
        p.killed = true;
        p.exited_at = Some(Instant::now());
        self.restarts
            .push((Instant::now() + after, p.job.clone(), p.index));
        Ok(true)
    }

    /// Reaps exited pods and starts the restarts that are due.
    pub fn tick(&mut self) -> anyhow::Result<()> {
        self.reap()?;
        let now = Instant::now();
        let due: Vec<_> = self
            .restarts
            .iter()
            .filter(|r| r.0 <= now)
            .cloned()
            .collect();
        self.restarts.retain(|r| r.0 > now);
        for (_, job, index) in due {
            self.spawn(&job, index)?;
        }
        Ok(())
    }

    fn reap(&mut self) -> anyhow::Result<()> {
        for p in self.pods.iter_mut().filter(|p| p.exited_at.is_none()) {
            if let Some(status) = p.child.try_wait()? {
                p.exited_at = Some(Instant::now());
                p.code = status.code();
                p.reason = loadtest::report_of(&mut p.child)?
                    .and_then(|r| r["reason"].as_str().map(String::from));
            }
        }
        Ok(())
    }

    /// `campaign-sender ARGS` as an operator would run it.
    pub fn operator(&self, args: &[&str]) -> anyhow::Result<()> {
        let out = Command::new(&self.sender)
            .args(args)
            .env("DATABASE_URL", &self.db_url)
            .output()
            .context("campaign-sender")?;
        anyhow::ensure!(
            out.status.success(),
            "campaign-sender {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Kills what still runs (bounded end of the run).
    pub fn stop_all(&mut self) -> anyhow::Result<()> {
        self.restarts.clear();
        for p in self.pods.iter_mut().filter(|p| p.exited_at.is_none()) {
            let _ = p.child.kill();
            let _ = p.child.wait();
            p.exited_at = Some(Instant::now());
            p.killed = true;
        }
        Ok(())
    }
}
