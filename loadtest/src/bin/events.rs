//! `events`: how many vendor events a second `campaign-sender events` records, with PostgreSQL
//! beside it on this machine — SendGrid-style signed batches (ECDSA per request) and Resend-style
//! single events (Svix HMAC per request), and one-click unsubscribes (RFC 8058 POSTs to our own
//! signed links, each opting a row out and listing its address). Starts the real binary on 127.0.0.1 against a fresh
//! migrated database with `--targets` rows; each phase posts for `--seconds` from `--concurrency`
//! clients, every event new (unique ids; 5 % bounces that list an address, the rest deliveries
//! and opens of real rows; each click a different member); then checks that every event
//! answered 200 is stored exactly once, and every click committed.
//! Prints one JSON line per phase and a summary; exits 1 if an event was lost or doubled.
//!   DATABASE_URL=… events [--seconds 20] [--batch 500] [--targets 200000]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use base64::Engine as _;
use clap::Parser;
use hmac::{Hmac, Mac};
use p256::ecdsa::signature::Signer as _;
use p256::pkcs8::EncodePublicKey as _;
use serde_json::json;
use sha2::Sha256;

const CAMPAIGN: &str = "events_bench";
/// The one-click links' secret of this run.
const UNSUBSCRIBE_SECRET: &str = "campaign-sender events bench unsubscribe secret";

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Seconds each phase posts for (at most 300).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=300))]
    seconds: u64,
    /// Events per SendGrid batch.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Clients posting batches at once.
    #[arg(long, default_value_t = 4)]
    batch_concurrency: usize,
    /// Clients posting single events at once (and one-click unsubscribes).
    #[arg(long, default_value_t = 32)]
    single_concurrency: usize,
    /// Rows of the campaign the events are about.
    #[arg(long, default_value_t = 200_000)]
    targets: i64,
    #[arg(long, default_value_t = 18_080)]
    port: u16,
}

/// What one phase did.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    events_ok: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    latency_us: std::sync::Mutex<Vec<u64>>,
}

struct Keys {
    sendgrid: p256::ecdsa::SigningKey,
    resend: Vec<u8>,
    one_click: campaign_sender::unsubscribe::Signer,
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Event `n` of `phase`: a delivery, an open, or (one in twenty) a hard bounce.
fn what(n: u64) -> &'static str {
    match n % 20 {
        0 => "bounce",
        1..=3 => "open",
        _ => "delivered",
    }
}

fn sendgrid_batch(phase: &str, first: u64, size: usize, targets: i64) -> String {
    let events: Vec<_> = (first..first + size as u64)
        .map(|n| {
            let member = (n as i64 % targets) + 1;
            json!({"email": format!("member{member}@example.com"), "event": what(n),
                   "type": "bounce", "sg_event_id": format!("{phase}-{n}"),
                   "sg_message_id": format!("x{member}.filter.0"),
                   "campaign_id": CAMPAIGN, "member_id": member.to_string()})
        })
        .collect();
    serde_json::to_string(&events).unwrap() + "\r\n"
}

fn resend_event(n: u64, targets: i64) -> String {
    let member = (n as i64 % targets) + 1;
    let kind = match what(n) {
        "bounce" => "email.bounced",
        "open" => "email.opened",
        _ => "email.delivered",
    };
    json!({"type": kind, "data": {"email_id": format!("e{n}"),
        "to": [format!("member{member}@example.com")], "bounce": {"type": "Permanent"},
        "tags": {"campaign_id": CAMPAIGN, "member_id": member.to_string()}}})
    .to_string()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let run = format!("events_bench_{}", std::process::id());
    let (db_url, pool) =
        loadtest::create_run_db(&a.database_url, &run, CAMPAIGN, a.targets).await?;
    let keys = Arc::new(Keys {
        sendgrid: p256::ecdsa::SigningKey::from_bytes(&[9u8; 32].into())?,
        resend: b"campaign-sender events bench key".to_vec(),
        one_click: campaign_sender::unsubscribe::Signer::new(UNSUBSCRIBE_SECRET)
            .map_err(anyhow::Error::msg)?,
    });
    let spki = keys.sendgrid.verifying_key().to_public_key_der()?;
    let addr = format!("127.0.0.1:{}", a.port);
    let mut server = Command::new(loadtest::sibling("campaign-sender")?)
        .arg("events")
        .env_clear()
        .env("DATABASE_URL", &db_url)
        .env("DB_MAX_CONNECTIONS", "8")
        .env("EVENTS_ADDR", &addr)
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "warn")
        .env("SENDGRID_WEBHOOK_PUBLIC_KEY", b64(spki.as_bytes()))
        .env(
            "RESEND_WEBHOOK_SECRET",
            format!("whsec_{}", b64(&keys.resend)),
        )
        .env("UNSUBSCRIBE_SECRET", UNSUBSCRIBE_SECRET)
        .stdout(Stdio::null())
        .spawn()
        .context("start campaign-sender events")?;
    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    let t0 = Instant::now();
    while http.get(format!("{base}/healthz")).send().await.is_err() {
        anyhow::ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "events did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut ok = true;
    for phase in ["batched", "single", "one-click"] {
        let tally = Arc::new(Tally::default());
        let next = Arc::new(AtomicU64::new(0));
        let (clients, per) = match phase {
            "batched" => (a.batch_concurrency, a.batch),
            _ => (a.single_concurrency, 1),
        };
        let until = Instant::now() + Duration::from_secs(a.seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..clients {
            let (http, base, keys, tally, next) = (
                http.clone(),
                base.clone(),
                keys.clone(),
                tally.clone(),
                next.clone(),
            );
            let targets = a.targets;
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    let first = next.fetch_add(per as u64, Ordering::Relaxed);
                    if phase == "one-click" && first >= targets as u64 {
                        break; // every member clicked once
                    }
                    let req = if phase == "one-click" {
                        let token = keys.one_click.token(CAMPAIGN, first as i64 + 1);
                        http.post(format!("{base}/unsubscribe/{token}"))
                            .header("Content-Type", "application/x-www-form-urlencoded")
                            .body("List-Unsubscribe=One-Click")
                    } else if phase == "batched" {
                        let body = sendgrid_batch(phase, first, per, targets);
                        let ts = loadtest::unix_ms() / 1000;
                        let sig: p256::ecdsa::Signature =
                            keys.sendgrid.sign(format!("{ts}{body}").as_bytes());
                        http.post(format!("{base}/events/sendgrid"))
                            .header(
                                "X-Twilio-Email-Event-Webhook-Signature",
                                b64(sig.to_der().as_bytes()),
                            )
                            .header("X-Twilio-Email-Event-Webhook-Timestamp", ts.to_string())
                            .body(body)
                    } else {
                        let body = resend_event(first, targets);
                        let (id, ts) = (format!("msg_{first}"), loadtest::unix_ms() / 1000);
                        let mut mac = Hmac::<Sha256>::new_from_slice(&keys.resend).unwrap();
                        mac.update(format!("{id}.{ts}.{body}").as_bytes());
                        http.post(format!("{base}/events/resend"))
                            .header("svix-id", id)
                            .header("svix-timestamp", ts.to_string())
                            .header(
                                "svix-signature",
                                format!("v1,{}", b64(&mac.finalize().into_bytes())),
                            )
                            .body(body)
                    };
                    let t = Instant::now();
                    let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
                    tally
                        .latency_us
                        .lock()
                        .unwrap()
                        .push(t.elapsed().as_micros() as u64);
                    tally.requests.fetch_add(1, Ordering::Relaxed);
                    match status {
                        200 => tally.events_ok.fetch_add(per as u64, Ordering::Relaxed),
                        401 | 403 => tally.refused.fetch_add(1, Ordering::Relaxed),
                        _ => tally.failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let vendor = match phase {
            "batched" => "sendgrid",
            "single" => "resend",
            _ => "one-click",
        };
        // A click is committed when its row is opted out (and its address listed, same
        // transaction); an event when it is stored.
        let stored: i64 = if phase == "one-click" {
            sqlx::query_scalar(
                "SELECT count(*) FROM campaign_targets WHERE opted_out_at IS NOT NULL",
            )
            .fetch_one(&pool)
            .await?
        } else {
            sqlx::query_scalar("SELECT count(*) FROM provider_events WHERE vendor = $1")
                .bind(vendor)
                .fetch_one(&pool)
                .await?
        };
        let events_ok = tally.events_ok.load(Ordering::Relaxed);
        let mut lat = tally.latency_us.lock().unwrap().clone();
        lat.sort_unstable();
        let pct = |p: f64| {
            lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0) as f64
                / 1000.0
        };
        let line = json!({"phase": phase, "vendor": vendor, "clients": clients, "events_per_request": per,
            "seconds": (elapsed * 10.0).round() / 10.0, "requests": tally.requests.load(Ordering::Relaxed),
            "events_recorded": events_ok, "events_per_s": (events_ok as f64 / elapsed).round(),
            "latency_ms_p50": pct(0.5), "latency_ms_p99": pct(0.99),
            "refused": tally.refused.load(Ordering::Relaxed), "failed": tally.failed.load(Ordering::Relaxed),
            "stored": stored});
        println!("{line}");
        if stored as u64 != events_ok || tally.refused.load(Ordering::Relaxed) > 0 {
            eprintln!("{phase}: {events_ok} events answered 200 but {stored} stored");
            ok = false;
        }
    }
    let suppressed: i64 = sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(&pool)
        .await?;
    eprintln!("addresses listed by the bounces: {suppressed}");
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    pool.close().await;
    loadtest::drop_run_db(&a.database_url, &run).await?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
