//! Pieces the load harnesses share (`drain`, `chaos`): sibling binaries, a fresh database per
//! run, the fake provider as a child process, and a loopback TCP proxy that can blackhole or
//! reset what passes through it. Everything listens on and talks to 127.0.0.1 only.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A binary built next to the running harness (`cargo build --release --bins`).
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let p = me.parent().context("exe dir")?.join(name);
    if !p.exists() {
        bail!(
            "{} not found next to this harness: build all binaries (cargo build --release --bins)",
            p.display()
        );
    }
    Ok(p)
}

/// `url` with its database name replaced by `db`.
pub fn with_db(url: &str, db: &str) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url).context("DATABASE_URL is not a URL")?;
    u.set_path(&format!("/{db}"));
    Ok(u.to_string())
}

/// `url` pointing at `127.0.0.1:port` instead (to route it through a [`Proxy`]).
pub fn with_port(url: &str, port: u16) -> anyhow::Result<String> {
    let mut u = reqwest::Url::parse(url).context("not a URL")?;
    u.set_host(Some("127.0.0.1"))?;
    u.set_port(Some(port))
        .map_err(|_| anyhow::anyhow!("cannot set port"))?;
    Ok(u.to_string())
}

pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// An HTTP client for the fake provider's control endpoints, trusting `ca` (a PEM file) besides
/// the public roots when the fake serves HTTPS.
pub fn http_client(ca: Option<&std::path::Path>) -> anyhow::Result<reqwest::Client> {
    let mut b = reqwest::Client::builder();
    if let Some(ca) = ca {
        for cert in reqwest::Certificate::from_pem_bundle(&std::fs::read(ca)?)? {
            b = b.add_root_certificate(cert);
        }
    }
    Ok(b.build()?)
}

/// The `fake-provider` binary as a child process, killed on drop.
pub struct Provider {
    child: Child,
    pub base: String,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `fake-provider --listen 127.0.0.1:0 ARGS…` and reads its address from the banner.
pub fn start_provider(args: &[String]) -> anyhow::Result<Provider> {
    use std::io::BufRead;
    let mut child = Command::new(sibling("fake-provider")?)
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("start fake-provider")?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("provider stdout")?)
        .read_line(&mut line)?;
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .context("unexpected fake-provider banner")?
        .to_string();
    Ok(Provider { child, base })
}

/// A TCP proxy on 127.0.0.1 in front of `upstream`, for fault injection:
/// - [`Proxy::blackhole`]: bytes stop moving both ways (held, not dropped) and new connections
///   are accepted but get nothing — what a network partition looks like to both ends; when it
///   ends, what was held is delivered late (so late writes really arrive);
/// - [`Proxy::reset`]: every open connection is closed with a TCP RST;
/// - [`Proxy::go_dark`]: every connection open now goes dark for good — what either end sends
///   is swallowed, nothing is closed (a dead NAT entry, a failover that leaves the old address
///   silent) — while new connections relay normally.
pub struct Proxy {
    pub port: u16,
    blackholed: Arc<AtomicBool>,
    resets: watch::Sender<u64>,
    darks: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    pub async fn start(upstream: std::net::SocketAddr) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let blackholed = Arc::new(AtomicBool::new(false));
        let (resets, _) = watch::channel(0u64);
        let (darks, _) = watch::channel(0u64);
        let (bh, rs, dk) = (blackholed.clone(), resets.clone(), darks.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (bh, mut reset, mut dark) = (bh.clone(), rs.subscribe(), dk.subscribe());
                tokio::spawn(async move {
                    let mut client = client;
                    let Some(mut server) = server_of(upstream).await else {
                        return;
                    };
                    let ended = {
                        let (cr, cw) = client.split();
                        let (sr, sw) = server.split();
                        tokio::select! {
                            _ = async { tokio::join!(pump(cr, sw, bh.clone()), pump(sr, cw, bh)) } => Ended::Closed,
                            _ = reset.changed() => Ended::Reset,
                            _ = dark.changed() => Ended::Dark,
                        }
                    };
                    match ended {
                        Ended::Closed => {}
                        Ended::Reset => {
                            // SO_LINGER 0: closing sends RST, not FIN — a reset connection.
                            let _ = client.set_zero_linger();
                            let _ = server.set_zero_linger();
                        }
                        Ended::Dark => swallow(client, server).await,
                    }
                });
            }
        });
        Ok(Proxy {
            port,
            blackholed,
            resets,
            darks,
            task,
        })
    }

    pub fn blackhole(&self, on: bool) {
        self.blackholed.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection abruptly.
    pub fn reset(&self) {
        self.resets.send_modify(|n| *n += 1);
    }

    /// Every connection open now goes dark for good; new ones relay normally.
    pub fn go_dark(&self) {
        self.darks.send_modify(|n| *n += 1);
    }
}

/// How a relayed connection ended.
enum Ended {
    Closed,
    Reset,
    Dark,
}

/// A dark connection: what either end sends is read and dropped and neither end is closed,
/// until the client closes its end and the server its own (or 10 minutes pass: a session the
/// server keeps open is then closed, as TCP would at last give up on it).
async fn swallow(client: TcpStream, server: TcpStream) {
    async fn drain(mut s: TcpStream) {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(1..) = s.read(&mut buf).await {}
    }
    let bound = Duration::from_secs(600);
    let _ = tokio::join!(
        tokio::time::timeout(bound, drain(client)),
        tokio::time::timeout(bound, drain(server))
    );
}

async fn server_of(upstream: std::net::SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect(upstream).await.ok()?;
    let _ = s.set_nodelay(true);
    Some(s)
}

/// Copies one direction, holding bytes while blackholed.
async fn pump(
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    blackholed: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while blackholed.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while blackholed.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// `fake-provider` arguments for a limit, a burst, a latency and a fault profile.
pub fn provider_args(
    rate: f64,
    burst: u32,
    latency_ms: u64,
    jitter_ms: u64,
    faults: &str,
) -> Vec<String> {
    [
        "--rate",
        &rate.to_string(),
        "--burst",
        &burst.to_string(),
        "--latency-ms",
        &latency_ms.to_string(),
        "--jitter-ms",
        &jitter_ms.to_string(),
        "--faults",
        faults,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The workers' provider settings for `MAIL_PROVIDER=provider` against the fake at `base`
/// (`http://127.0.0.1:PORT`, which serves every vendor's path): `MAIL_URL` and what the profile
/// needs besides (a key, Mailgun's domain, SES's region and credentials). The fake checks no
/// key unless told to, so these stand-ins are never real secrets.
pub fn vendor_env(provider: &str, base: &str) -> anyhow::Result<Vec<(String, String)>> {
    let base = base.trim_end_matches('/');
    let mut env: Vec<(&str, String)> = vec![("MAIL_PROVIDER", provider.to_string())];
    env.extend(ONE_CLICK_ENV.map(|(k, v)| (k, v.to_string())));
    match provider {
        "json" => env.push(("MAIL_URL", format!("{base}/v1/send"))),
        "sendgrid" | "postmark" | "mailgun" | "resend" | "ses" => {
            env.push(("MAIL_URL", base.to_string()));
            env.push(("MAIL_API_KEY", "loadtest-key".to_string()));
        }
        other => anyhow::bail!(
            "--provider {other}: one of json, sendgrid, ses, postmark, mailgun, resend"
        ),
    }
    match provider {
        "mailgun" => env.push(("MAILGUN_DOMAIN", "mg.example.com".to_string())),
        "ses" => env.extend([
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", "AKIDLOADTEST".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "loadtest-secret".to_string()),
        ]),
        _ => {}
    }
    Ok(env.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// Our one-click links (`LIST_UNSUBSCRIBE=ours`, the default) as every harness's workers make
/// them: a loopback base (no `events` runs in a load run: the links only travel in the mails)
/// and a stand-in secret, never a real one.
pub const ONE_CLICK_ENV: [(&str, &str); 2] = [
    ("UNSUBSCRIBE_BASE_URL", "http://127.0.0.1:9/"),
    ("UNSUBSCRIBE_SECRET", "loadtest-one-click-secret-not-real"),
];

/// A Job's UID (`JOB_UID`) for a harness's Job named `job`: a UUID made from the name, so every
/// pod of that Job shares one time budget, as the Job controller's pods do.
pub fn job_uid(job: &str) -> String {
    let h = job.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    format!("00000000-0000-4000-8000-{:012x}", h & 0xffff_ffff_ffff)
}

/// What a vendor's mail needs of the campaign: a sender (harmless for the JSON contract).
pub async fn configure_sender(pool: &sqlx::PgPool, campaign: &str) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO campaigns (campaign_id, from_address) VALUES ($1, 'Load Test <news@example.com>')
         ON CONFLICT (campaign_id) DO UPDATE SET from_address = excluded.from_address",
    )
    .bind(campaign)
    .execute(pool)
    .await?;
    Ok(())
}

/// A fresh database `run_id` on the server of `admin_url`, migrated, with `targets` generated
/// rows (`member{N}@example.com`) in `campaign`. Returns its URL and a small pool on it.
pub async fn create_run_db(
    admin_url: &str,
    run_id: &str,
    campaign: &str,
    targets: i64,
) -> anyhow::Result<(String, sqlx::PgPool)> {
    use sqlx::{Connection, Executor};
    let mut admin = sqlx::PgConnection::connect(admin_url)
        .await
        .context("connect to DATABASE_URL")?;
    admin
        .execute(format!("CREATE DATABASE {run_id}").as_str())
        .await?;
    admin.close().await?;
    let db_url = with_db(admin_url, run_id)?;
    // Small, and quick to give up on a connection, so it rides out a PostgreSQL restart too.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&db_url)
        .await?;
    campaign_sender::store::MIGRATOR.run(&pool).await?;
    insert_targets(&pool, campaign, targets).await?;
    configure_sender(&pool, campaign).await?;
    Ok((db_url, pool))
}

/// `targets` generated rows (`member{N}@example.com`, members 1..=N) in `campaign`, then
/// `VACUUM ANALYZE` so the planner sees them.
pub async fn insert_targets(
    pool: &sqlx::PgPool,
    campaign: &str,
    targets: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email)
         SELECT $1, g, 'member' || g || '@example.com' FROM generate_series(1, $2) g",
    )
    .bind(campaign)
    .bind(targets)
    .execute(pool)
    .await?;
    sqlx::query("VACUUM ANALYZE campaign_targets")
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn drop_run_db(admin_url: &str, run_id: &str) -> anyhow::Result<()> {
    use sqlx::{Connection, Executor};
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    admin
        .execute(format!("DROP DATABASE {run_id} WITH (FORCE)").as_str())
        .await?;
    Ok(())
}

/// The last stdout line of an exited worker: its JSON run report.
pub fn report_of(child: &mut Child) -> anyhow::Result<Option<serde_json::Value>> {
    use std::io::Read;
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        o.read_to_string(&mut out)?;
    }
    Ok(out
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok()))
}

/// Which waiting rows an opt-out picks: the next in line (`ORDER BY priority DESC,
/// member_id`, what a claim would take first) or any.
#[derive(Clone, Copy)]
pub enum Waiting {
    NextInLine,
    Random,
}

/// Opts out `n` rows of `campaign` as the other system does: half among the waiting rows, half
/// among the rows in flight (`sending`). Returns their ids and when (Unix ms).
pub async fn opt_out(
    pool: &sqlx::PgPool,
    campaign: &str,
    n: i64,
    waiting: Waiting,
) -> anyhow::Result<(Vec<i64>, u64)> {
    let order = match waiting {
        Waiting::NextInLine => "priority DESC, member_id",
        Waiting::Random => "random()",
    };
    let sql = format!(
        "WITH picked AS (
             (SELECT member_id FROM campaign_targets
               WHERE campaign_id = $1 AND opted_out_at IS NULL AND state = 'pending'
               ORDER BY {order} LIMIT $2)
             UNION ALL
             (SELECT member_id FROM campaign_targets
               WHERE campaign_id = $1 AND opted_out_at IS NULL AND state = 'sending'
               ORDER BY random() LIMIT $2))
         UPDATE campaign_targets t SET opted_out_at = now()
           FROM picked WHERE t.campaign_id = $1 AND t.member_id = picked.member_id
         RETURNING t.member_id"
    );
    let ids: Vec<i64> = sqlx::query_scalar(&sql)
        .bind(campaign)
        .bind(n / 2)
        .fetch_all(pool)
        .await?;
    Ok((ids, unix_ms()))
}
