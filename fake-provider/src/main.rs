//! `fake-provider`: the fake email provider as a standalone server (see
//! `campaign_sender::fake_provider`). Prints `listening on http://ADDR` as its first stdout
//! line, so a harness can start it on port 0 and read the port.

use std::time::Duration;

use clap::Parser;
use fake_provider::{spawn, spawn_tls, FakeConfig};

#[derive(Parser, Debug)]
#[command(
    name = "fake-provider",
    about = "A fake email provider with the real provider's contract"
)]
struct Args {
    /// Address to listen on (loopback; port 0 picks a free port).
    #[arg(long, env = "FAKE_LISTEN", default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Accepted requests per second (GCRA); 0 = unlimited.
    #[arg(long, env = "FAKE_RATE_PER_S", default_value_t = 0.0)]
    rate: f64,
    /// Burst allowed above the steady rate.
    #[arg(long, env = "FAKE_BURST", default_value_t = 20)]
    burst: u32,
    /// Fault profile: `standard` (%25 → one 503, %997 → 422), `none`, or `outage` (all 503).
    #[arg(long, env = "FAKE_FAULTS", default_value = "standard")]
    faults: String,
    /// Mean response latency in milliseconds.
    #[arg(long, env = "FAKE_LATENCY_MS", default_value_t = 0)]
    latency_ms: u64,
    /// Latency jitter (±) in milliseconds.
    #[arg(long, env = "FAKE_JITTER_MS", default_value_t = 0)]
    jitter_ms: u64,
    /// Requests per million that never answer.
    #[arg(long, env = "FAKE_STALL_PPM", default_value_t = 0)]
    stall_ppm: u32,
    /// Require `Authorization: Bearer <key>`.
    #[arg(long, env = "FAKE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// How long a delivered Idempotency-Key is remembered, in seconds (the key retention).
    #[arg(long, env = "FAKE_KEY_RETENTION_S", default_value_t = 86_400.0)]
    key_retention_s: f64,
    /// Delivered requests per million whose answer is held --late-ms (past the client's timeout).
    #[arg(long, env = "FAKE_LATE_PPM", default_value_t = 0)]
    late_ppm: u32,
    #[arg(long, env = "FAKE_LATE_MS", default_value_t = 10_000)]
    late_ms: u64,
    /// The answer to a request for a suppressed address (406; 200 accepts and drops it).
    #[arg(long, env = "FAKE_SUPPRESSED_STATUS", default_value_t = 406)]
    suppressed_status: u16,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key), for the name `localhost`
    /// (`scripts/tls-certs.sh`); the banner then gives an https://localhost URL.
    #[arg(long, env = "FAKE_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, env = "FAKE_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let (faults, outage) = match a.faults.as_str() {
        "standard" => (true, false),
        "none" => (false, false),
        "outage" => (false, true),
        other => anyhow::bail!("--faults {other:?}: expected standard, none or outage"),
    };
    let cfg = FakeConfig {
        rate_per_s: (a.rate > 0.0).then_some(a.rate),
        burst: a.burst.max(1),
        faults,
        always_unavailable: outage,
        latency_mean_ms: a.latency_ms,
        latency_jitter_ms: a.jitter_ms,
        stall_per_million: a.stall_ppm,
        api_key: a.api_key,
        idempotency_window: Duration::from_secs_f64(a.key_retention_s.max(0.0)),
        late_per_million: a.late_ppm,
        late_ms: a.late_ms,
        suppressed_status: a.suppressed_status,
    };
    let server = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => {
            let (addr, _state, server) = spawn_tls(cfg, a.listen, cert, key).await?;
            println!("listening on https://localhost:{}", addr.port());
            server
        }
        _ => {
            let (addr, _state, server) = spawn(cfg, a.listen).await?;
            println!("listening on http://{addr}");
            server
        }
    };
    tokio::select! {
        _ = server => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            #[cfg(unix)]
            {
                let mut t = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
                t.recv().await;
            }
        } => {}
    }
    Ok(())
}
