//! Playing a chaos schedule: worker processes started, killed, stopped and restarted, the
//! database restarted or cut off, the provider misbehaving, opt-outs committed — all bounded by
//! `--timeout-s`, all on 127.0.0.1.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use loadtest::{unix_ms, Proxy};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};
use sqlx::PgPool;

use super::schedule::Ev;
use super::{Args, CAMPAIGN, CONNECT_TIMEOUT_MS, OPTOUT_RECHECK_MS, READ_TIMEOUT_MS};

/// How worker processes are started: `campaign-sender run`, worker 0 through the database proxy.
pub struct Spawner {
    pub sender: PathBuf,
    pub db_url: String,
    /// Worker 0's database URL (through the proxy that can blackhole it).
    pub db_url_0: String,
    /// `MAIL_PROVIDER`, `MAIL_URL` (through the proxy) and what the profile needs besides.
    pub provider_env: Vec<(String, String)>,
    pub logdir: PathBuf,
    pub rate_per_s: u32,
    pub lease_s: u64,
    pub deadline_s: u64,
    launches: usize,
}

impl Spawner {
    pub fn new(
        a: &Args,
        sender: PathBuf,
        db: (String, String),
        provider_env: Vec<(String, String)>,
        logdir: PathBuf,
    ) -> Self {
        Self {
            sender,
            db_url: db.0,
            db_url_0: db.1,
            provider_env,
            logdir,
            rate_per_s: a.provider_rate.floor() as u32,
            lease_s: a.lease_s,
            deadline_s: a.timeout_s,
            launches: 0,
        }
    }

    fn spawn(&mut self, index: usize) -> anyhow::Result<Proc> {
        self.launches += 1;
        let log = self
            .logdir
            .join(format!("worker-{index}-{}.log", self.launches));
        let child = Command::new(&self.sender)
            .arg("run")
            .env(
                "DATABASE_URL",
                if index == 0 {
                    &self.db_url_0
                } else {
                    &self.db_url
                },
            )
            .env("CAMPAIGN_ID", CAMPAIGN)
            .envs(self.provider_env.iter().map(|(k, v)| (k, v)))
            .env("JOB_COMPLETION_INDEX", index.to_string())
            .env("MAIL_RATE_PER_S", self.rate_per_s.to_string())
            .env("LEASE_S", self.lease_s.to_string())
            .env("CONNECT_TIMEOUT_MS", CONNECT_TIMEOUT_MS.to_string())
            .env("READ_TIMEOUT_MS", READ_TIMEOUT_MS.to_string())
            .env("OPTOUT_RECHECK_MS", OPTOUT_RECHECK_MS.to_string())
            .env("BACKOFF_BASE_MS", "500")
            .env("DEADLINE_S", self.deadline_s.to_string())
            .env("LOG_FORMAT", "json")
            .env(
                "RUST_LOG",
                std::env::var("CHAOS_WORKER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .context("start campaign-sender")?;
        Ok(Proc {
            index,
            child,
            signalled: None,
            signalled_at: None,
            stopped_after_term: None,
            code: None,
            report: None,
        })
    }
}

/// What the run touches to make its faults.
pub struct Levers {
    pub pool: PgPool,
    pub pg: Option<Pg>,
    pub http: reqwest::Client,
    pub provider_base: String,
    pub provider_proxy: Proxy,
    pub pg_proxy: Proxy,
    /// The other workers' database proxy (used only when their connections go dark).
    pub pg_fleet_proxy: Proxy,
}

/// A chaos run in progress, and what it recorded.
pub struct Play {
    levers: Levers,
    spawner: Spawner,
    rng: StdRng,
    /// Worker 0 is the partition's subject: kills spare it.
    blackholed: bool,
    optouts_per_event: i64,
    timeout: Duration,
    pending: Vec<(f64, Ev)>,
    next_index: usize,
    /// Restarts due: (at, worker index).
    restarts: Vec<(Instant, usize)>,
    pg_start_at: Option<Instant>,
    blackhole_end: Option<Instant>,
    pub procs: Vec<Proc>,
    pub log: Vec<Value>,
    /// Rows that were `sending` at each fault: all it could make a worker repeat.
    pub dup_bound_rows: i64,
    /// Opted-out members, and the Unix ms by which each opt-out had committed.
    pub optouts: Vec<(Vec<i64>, u64)>,
    pub pg_back: Vec<Instant>,
    /// The same, in Unix ms (to compare with the provider's arrival times).
    pub pg_back_ms: Vec<u64>,
    /// When connections went dark, in Unix ms.
    pub dark_ms: Vec<u64>,
    pub started: Instant,
    pub timed_out: bool,
}

impl Play {
    pub fn start(
        a: &Args,
        levers: Levers,
        mut spawner: Spawner,
        rng: StdRng,
        start_workers: usize,
        events: &[(f64, Ev)],
    ) -> anyhow::Result<Self> {
        let procs = (0..start_workers)
            .map(|i| spawner.spawn(i))
            .collect::<anyhow::Result<_>>()?;
        let mut pending = events.to_vec();
        pending.reverse();
        Ok(Self {
            levers,
            spawner,
            rng,
            blackholed: events.iter().any(|(_, e)| matches!(e, Ev::Blackhole(_))),
            optouts_per_event: a.optouts,
            timeout: Duration::from_secs(a.timeout_s),
            pending,
            next_index: start_workers,
            restarts: Vec::new(),
            pg_start_at: None,
            blackhole_end: None,
            procs,
            log: Vec::new(),
            dup_bound_rows: 0,
            optouts: Vec::new(),
            pg_back: Vec::new(),
            pg_back_ms: Vec::new(),
            dark_ms: Vec::new(),
            started: Instant::now(),
            timed_out: false,
        })
    }

    pub fn levers(&self) -> &Levers {
        &self.levers
    }

    /// Seconds since the start, to a tenth.
    pub fn at(&self, t: Instant) -> f64 {
        (t.duration_since(self.started).as_secs_f64() * 10.0).round() / 10.0
    }

    /// Plays the schedule until every worker has exited and every fault has ended (or the
    /// timeout killed them).
    pub async fn run(&mut self) -> anyhow::Result<()> {
        loop {
            self.play_due_events().await?;
            self.end_due_faults()?;
            self.restart_due()?;
            self.reap()?;
            if self.done() {
                return Ok(());
            }
            if self.started.elapsed() > self.timeout {
                self.abort()?;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn play_due_events(&mut self) -> anyhow::Result<()> {
        let t = self.started.elapsed().as_secs_f64();
        while self.pending.last().is_some_and(|(at_s, _)| t >= *at_s) {
            let (_, ev) = self.pending.pop().expect("checked");
            // A fault "in flight": rows `sending` now are all it could make us repeat.
            let held = if self.pg_start_at.is_none() {
                sending_now(&self.levers.pool).await
            } else {
                0
            };
            let now = Instant::now();
            let mut note = json!({"at_s": self.at(now), "event": format!("{ev:?}")});
            if self.apply(ev, held, now, &mut note).await? {
                eprintln!("  {note}");
                self.log.push(note);
            }
        }
        Ok(())
    }

    /// Makes one event happen; false if it had nothing to act on.
    async fn apply(
        &mut self,
        ev: Ev,
        held: i64,
        now: Instant,
        note: &mut Value,
    ) -> anyhow::Result<bool> {
        match ev {
            Ev::Kill => {
                let Some(i) = self.pick_kill() else {
                    return Ok(false);
                };
                self.procs[i].signal("KILL")?;
                self.restarts
                    .push((now + Duration::from_secs(1), self.procs[i].index));
                self.dup_bound_rows += held;
                note["worker"] = json!(self.procs[i].index);
                note["sending"] = json!(held);
            }
            Ev::Join => {
                let p = self.spawner.spawn(self.next_index)?;
                self.procs.push(p);
                note["worker"] = json!(self.next_index);
                self.next_index += 1;
            }
            Ev::Term => {
                if let Some(i) = (0..self.procs.len())
                    .rev()
                    .find(|i| self.procs[*i].untouched())
                {
                    self.procs[i].signal("TERM")?;
                    note["worker"] = json!(self.procs[i].index);
                }
            }
            Ev::PgRestart(down) => {
                self.levers.pg.as_ref().expect("checked at start").stop()?;
                self.pg_start_at = Some(Instant::now() + Duration::from_secs_f64(down));
                self.dup_bound_rows += held;
                note["sending"] = json!(held);
            }
            Ev::Blackhole(secs) => {
                self.levers.pg_proxy.blackhole(true);
                self.blackhole_end = Some(now + Duration::from_secs_f64(secs));
                self.dup_bound_rows += held;
                note["sending"] = json!(held);
            }
            Ev::Dark { all } => {
                // Statements in flight when it happens, as in a real failover: the work table
                // is locked for half a second first, so every statement on it then waits in
                // the server; its answer goes into the dark.
                let mut lock = self.levers.pool.begin().await?;
                sqlx::query("LOCK TABLE campaign_targets IN ACCESS EXCLUSIVE MODE")
                    .execute(&mut *lock)
                    .await?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                self.levers.pg_proxy.go_dark();
                if all {
                    self.levers.pg_fleet_proxy.go_dark();
                }
                lock.commit().await?;
                self.dark_ms.push(unix_ms());
                self.dup_bound_rows += held;
                note["sending"] = json!(held);
            }
            Ev::TermWorker0 => {
                let Some(i) = (0..self.procs.len())
                    .find(|i| self.procs[*i].index == 0 && self.procs[*i].untouched())
                else {
                    return Ok(false);
                };
                self.procs[i].signal("TERM")?;
                note["worker"] = json!(0);
            }
            Ev::Provider(c) => {
                let url = format!("{}/chaos", self.levers.provider_base);
                self.levers
                    .http
                    .post(url)
                    .json(&c)
                    .send()
                    .await?
                    .error_for_status()?;
            }
            Ev::Reset => {
                self.levers.provider_proxy.reset();
                self.dup_bound_rows += held;
                note["sending"] = json!(held);
            }
            Ev::OptOut => {
                if self.pg_start_at.is_some() {
                    return Ok(false);
                }
                let (ids, committed) = opt_out(&self.levers.pool, self.optouts_per_event).await?;
                note["opted_out"] = json!(ids.len());
                self.optouts.push((ids, committed));
            }
        }
        Ok(true)
    }

    /// A random running worker to kill (never worker 0 of a partition: killing it would throw
    /// away the evidence, its report of fenced writes).
    fn pick_kill(&mut self) -> Option<usize> {
        let live: Vec<usize> = (0..self.procs.len())
            .filter(|i| self.procs[*i].untouched())
            .filter(|i| !(self.blackholed && self.procs[*i].index == 0))
            .collect();
        (!live.is_empty()).then(|| live[self.rng.random_range(0..live.len())])
    }

    /// A stopped PostgreSQL started again, a blackhole lifted, when their time has come.
    fn end_due_faults(&mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        if self.pg_start_at.is_some_and(|d| now >= d) {
            self.levers.pg.as_ref().expect("set").start()?;
            self.pg_start_at = None;
            self.pg_back.push(Instant::now());
            self.pg_back_ms.push(unix_ms());
            eprintln!("  t={:.1}s PostgreSQL back", self.at(Instant::now()));
        }
        if self.blackhole_end.is_some_and(|d| now >= d) {
            self.levers.pg_proxy.blackhole(false);
            self.blackhole_end = None;
            eprintln!("  t={:.1}s blackhole lifted", self.at(now));
        }
        Ok(())
    }

    /// Killed workers come back a second later, as a Job's pod would.
    fn restart_due(&mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        let due: Vec<usize> = self
            .restarts
            .iter()
            .filter(|(when, _)| now >= *when)
            .map(|(_, i)| *i)
            .collect();
        self.restarts.retain(|(when, _)| now < *when);
        for index in due {
            let p = self.spawner.spawn(index)?;
            self.procs.push(p);
        }
        Ok(())
    }

    /// Exit codes and reports of the workers that have exited.
    fn reap(&mut self) -> anyhow::Result<()> {
        for p in self.procs.iter_mut().filter(|p| p.running()) {
            if let Some(st) = p.child.try_wait()? {
                p.code = Some(st.code().unwrap_or(-1));
                if p.signalled == Some("TERM") {
                    p.stopped_after_term = p.signalled_at.map(|t| t.elapsed());
                }
                p.report = loadtest::report_of(&mut p.child)?;
            }
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.procs.iter().all(|p| !p.running())
            && self.restarts.is_empty()
            && self.pg_start_at.is_none()
            && self.blackhole_end.is_none()
    }

    /// Out of time: every worker killed, every fault ended (the run then fails its checks).
    fn abort(&mut self) -> anyhow::Result<()> {
        eprintln!("chaos: timeout; killing every worker");
        self.timed_out = true;
        for p in self.procs.iter_mut().filter(|p| p.running()) {
            let _ = p.child.kill();
        }
        self.restarts.clear();
        if self.pg_start_at.take().is_some() {
            self.levers.pg.as_ref().expect("set").start()?;
        }
        self.levers.pg_proxy.blackhole(false);
        self.blackhole_end = None;
        Ok(())
    }
}

/// One worker process.
pub struct Proc {
    pub index: usize,
    child: Child,
    /// The signal we sent it, if any, and when.
    pub signalled: Option<&'static str>,
    signalled_at: Option<Instant>,
    /// How long after its SIGTERM it exited.
    pub stopped_after_term: Option<Duration>,
    pub code: Option<i32>,
    pub report: Option<Value>,
}

impl Proc {
    fn running(&self) -> bool {
        self.code.is_none()
    }

    /// Running and not told to stop: a target for the next kill or SIGTERM.
    fn untouched(&self) -> bool {
        self.code.is_none() && self.signalled.is_none()
    }

    fn signal(&mut self, sig: &'static str) -> anyhow::Result<()> {
        Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()?;
        self.signalled = Some(sig);
        self.signalled_at = Some(Instant::now());
        Ok(())
    }
}

/// The PostgreSQL server the run uses, for the restart.
pub struct Pg {
    pub data: PathBuf,
    pub bin: PathBuf,
    pub log: PathBuf,
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

    pub fn stop(&self) -> anyhow::Result<()> {
        self.ctl(&["-m", "fast", "-w", "stop"])
    }

    /// Starts it with the options it last ran with (`postmaster.opts`, as `pg_ctl restart`).
    pub fn start(&self) -> anyhow::Result<()> {
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

pub async fn sending_now(pool: &PgPool) -> i64 {
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
pub async fn opt_out(pool: &PgPool, n: i64) -> anyhow::Result<(Vec<i64>, u64)> {
    // Another system writes opt-outs; this is what it does: one committed UPDATE, retried if
    // PostgreSQL picks it as a deadlock victim against a worker's write.
    let mut tries = 0;
    loop {
        match loadtest::opt_out(pool, CAMPAIGN, n, loadtest::Waiting::Random).await {
            Err(e) if tries < 5 => {
                tries += 1;
                eprintln!("  opt-out retried: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            r => return r,
        }
    }
}

/// The newest `/usr/lib/postgresql/*/bin` (for the restart, unless `--pg-bin` says otherwise).
pub fn newest_pg_bin() -> anyhow::Result<PathBuf> {
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
