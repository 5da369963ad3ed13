//! Hostile input: a provider that answers garbage, and rows that are not deliverable. Each case
//! is classified as documented (docs/RELIABILITY.md "A hostile or unreachable provider"),
//! bounded in time, and the run goes on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use campaign_sender::{exit, report::StopReason};
use fake_provider::FakeConfig;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// What the hostile provider does for a member (by `member_id` in the body).
#[derive(Clone, Copy, Debug)]
enum Answer {
    GarbageBody,
    Html,
    EmptyBody,
    HugeBody,
    SlowBody,
    Redirect,
    Teapot,
    Status600,
    Always503,
    NotHttp,
    CloseSilently,
    RetryAfterGarbageThenOk,
    HeadersTooLate,
}

/// A raw TCP provider: one request per connection, answered byte for byte as `answer` says.
/// Returns its URL and the number of requests per member.
async fn hostile_provider(
    answers: HashMap<i64, Answer>,
) -> (String, Arc<Mutex<HashMap<i64, u32>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let answers = answers.clone();
            let seen = s.clone();
            tokio::spawn(async move {
                let _ = serve_one(sock, &answers, &seen).await;
            });
        }
    });
    (format!("http://{addr}/v1/send"), seen)
}

async fn serve_one(
    mut sock: TcpStream,
    answers: &HashMap<i64, Answer>,
    seen: &Mutex<HashMap<i64, u32>>,
) -> std::io::Result<()> {
    // Read the head, then the body by Content-Length (bounded).
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 64 * 1024 {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len.min(64 * 1024) {
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: serde_json::Value =
        serde_json::from_slice(&buf[head_end..]).unwrap_or(serde_json::Value::Null);
    let member = body["member_id"].as_i64().unwrap_or(-1);
    let n = {
        let mut seen = seen.lock().unwrap();
        let n = seen.entry(member).or_default();
        *n += 1;
        *n
    };
    let ok = |body: &[u8]| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let status = |code: u16, extra: &str| {
        format!("HTTP/1.1 {code} Whatever\r\nContent-Length: 0\r\nConnection: close\r\n{extra}\r\n")
            .into_bytes()
    };
    let answer = answers.get(&member).copied();
    let out: Vec<u8> = match answer {
        None => ok(br#"{"status":"queued"}"#),
        Some(Answer::GarbageBody) => ok(&[0x00, 0xff, 0xfe, b'{', 0x80, b'"']),
        Some(Answer::Html) => ok(b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
        Some(Answer::EmptyBody) => ok(b""),
        Some(Answer::HugeBody) => ok(&vec![b'x'; 8 << 20]),
        Some(Answer::SlowBody) => {
            // Headers at once, then one byte every 100 ms of a 300-byte body: 30 s to finish,
            // never idle long enough for the read timeout; only the attempt's total bound ends it.
            sock.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 300\r\nConnection: close\r\n\r\n")
                .await?;
            for _ in 0..300 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                sock.write_all(b"x").await?;
            }
            return Ok(());
        }
        Some(Answer::Redirect) => status(302, "Location: /elsewhere\r\n"),
        Some(Answer::Teapot) => status(418, ""),
        Some(Answer::Status600) => status(600, ""),
        Some(Answer::Always503) => status(503, "Retry-After: 0\r\n"),
        Some(Answer::NotHttp) => b"SMTP 220 mail.example ready\r\n".to_vec(),
        Some(Answer::CloseSilently) => return Ok(()),
        Some(Answer::RetryAfterGarbageThenOk) if n == 1 => {
            status(429, "Retry-After: soon, maybe\r\n")
        }
        Some(Answer::RetryAfterGarbageThenOk) => ok(b"{}"),
        Some(Answer::HeadersTooLate) => {
            tokio::time::sleep(Duration::from_secs(4)).await;
            ok(b"{}")
        }
    };
    sock.write_all(&out).await?;
    sock.shutdown().await
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_hostile_provider_is_classified_as_documented_and_never_stalls_the_run(pool: PgPool) {
    use Answer::*;
    let cases = [
        (1, GarbageBody, "sent", Some(200), None),
        (2, Html, "sent", Some(200), None),
        (3, EmptyBody, "sent", Some(200), None),
        (4, HugeBody, "sent", Some(200), None),
        (5, SlowBody, "sent", Some(200), None),
        (6, Redirect, "failed", Some(302), Some("unexpected_status")),
        (7, Teapot, "failed", Some(418), Some("rejected")),
        (8, Status600, "failed", Some(600), Some("unexpected_status")),
        (9, Always503, "failed", Some(503), Some("server_error")),
        (10, NotHttp, "failed", None, Some("transport")),
        (11, CloseSilently, "failed", None, Some("transport")),
        (12, RetryAfterGarbageThenOk, "sent", Some(200), None),
        (13, HeadersTooLate, "failed", None, Some("timeout")),
    ];
    seed(&pool, CAMPAIGN, 40).await;
    let answers: HashMap<i64, Answer> = cases.iter().map(|c| (c.0, c.1)).collect();
    let (url, seen) = hostile_provider(answers).await;
    let mut cfg = config(&url);
    cfg.max_attempts = 2;
    cfg.connect_timeout_ms = 500;
    cfg.read_timeout_ms = 1500;
    // Failures are the point here; the threshold is not.
    cfg.max_permanent_failure_ratio = 1.0;
    let t0 = Instant::now();
    let report = run_to_end(&pool, cfg).await;
    let took = t0.elapsed();
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    // Two attempts of the slowest case (a 1.5 s read timeout each) plus backoff; the 30-s body
    // is cut at the attempt's bound (connect + read timeouts); nothing hangs.
    assert!(took < Duration::from_secs(15), "{took:?}");
    for (member, answer, state, status, class) in cases {
        let (s, attempts, last_status, last_error) = state_of(&pool, member).await;
        assert_eq!(
            (s.as_str(), last_status, last_error.as_deref()),
            (state, status, class),
            "member {member} ({answer:?}), {attempts} attempts"
        );
    }
    let seen = seen.lock().unwrap().clone();
    // Permanent answers are not retried; retryable ones are, up to MAX_ATTEMPTS.
    assert_eq!(seen[&7], 1, "a 418 was retried");
    assert_eq!(seen[&6], 1, "a redirect was retried or followed");
    assert_eq!(seen[&9], 2);
    assert_eq!(seen[&12], 2);
    assert_eq!(states(&pool).await.get("sent"), Some(&(40 - 7)));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn undeliverable_rows_fail_without_a_request_and_the_run_goes_on(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    let long = format!("{}@example.com", "a".repeat(10_000));
    let rows: [(i64, Option<&str>); 7] = [
        (1, None),
        (2, Some("")),
        (3, Some("   ")),
        (4, Some("no-at-sign.example.com")),
        (5, Some(long.as_str())),
        (6, Some("two@@example.com")),
        (7, Some("a b@example.com")),
    ];
    for (id, email) in &rows {
        sqlx::query(
            "UPDATE campaign_targets SET email = $2 WHERE campaign_id = $1 AND member_id = $3",
        )
        .bind(CAMPAIGN)
        .bind(email)
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    }
    // Unicode addresses are addresses (RFC 6531): sent.
    sqlx::query("UPDATE campaign_targets SET email = 'ユーザー@例え.jp' WHERE member_id = 8")
        .execute(&pool)
        .await
        .unwrap();
    let p = provider(Default::default()).await;
    let mut cfg = config(&p.url);
    cfg.max_permanent_failure_ratio = 1.0;
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    for (id, _) in &rows {
        let (s, attempts, status, class) = state_of(&pool, *id).await;
        assert_eq!(
            (s.as_str(), status, class.as_deref()),
            ("failed", None, Some("invalid_email")),
            "member {id}"
        );
        assert!(attempts <= 1, "member {id}: {attempts} attempts");
    }
    assert_eq!(state_of(&pool, 8).await.0, "sent");
    let delivered: Vec<i64> = p.fake.deliveries().iter().map(|d| d.member_id).collect();
    assert!(
        rows.iter().all(|(id, _)| !delivered.contains(id)),
        "a request was made for an undeliverable row"
    );
    assert_eq!(states(&pool).await.get("sent"), Some(&93));
}

/// An unreachable provider is an outage, not a property of the rows: no row fails or spends an
/// attempt however long it lasts (here far more tries than MAX_ATTEMPTS), the pod pauses its
/// sends instead of trying every row, and the run delivers everything once the provider is back.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_unreachable_provider_fails_no_row_and_the_run_delivers_when_it_returns(pool: PgPool) {
    const N: i64 = 50;
    seed(&pool, CAMPAIGN, N).await;
    let addr = refused_addr();
    let url = format!("http://{addr}/v1/send");
    let mut cfg = config(&url);
    cfg.max_attempts = 2;
    cfg.deadline_s = 3;
    let down = run_to_end(&pool, cfg.clone()).await;
    // Out of time is "done for now" (0); the report's reason and counts say what is left.
    assert_eq!(down.exit_code, exit::Exit::Done, "{down:?}");
    assert_eq!(down.reason, StopReason::Deadline, "{down:?}");
    assert_eq!(down.stats.failed, 0, "{down:?}");
    assert!(down.stats.deferred >= 2, "never tried: {down:?}");
    // Paused while unreachable (the pause grows from BACKOFF_BASE_MS 20 ms to BACKOFF_MAX_MS
    // 200 ms) and one request at a time: ~70 here; ~320-380 without the one-at-a-time probing,
    // thousands without the pause (every row every backoff).
    assert!(down.stats.requests <= 150, "kept hammering: {down:?}");
    let (attempts, failed, connect, sending): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(attempts), 0)::bigint,
                count(*) FILTER (WHERE state = 'failed'),
                count(*) FILTER (WHERE last_error = 'connect'),
                count(*) FILTER (WHERE state = 'sending')
           FROM campaign_targets WHERE campaign_id = $1",
    )
    .bind(CAMPAIGN)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (attempts, failed, sending),
        (0, 0, 0),
        "an attempt was spent"
    );
    assert!(connect >= 1, "the outage is not visible in last_error");

    // The provider comes back on the same address.
    let (_, fake, _task) = fake_provider::spawn(Default::default(), addr)
        .await
        .unwrap();
    let up = run_to_end(&pool, cfg).await;
    assert_eq!(up.exit_code, exit::Exit::Done, "{up:?}");
    assert_eq!(states(&pool).await.get("sent"), Some(&N));
    let s = fake.stats();
    assert_eq!(
        (s.delivered, s.members_delivered_more_than_once),
        (N as u64, 0)
    );
}

/// A pod that found the provider unreachable sends one request at a time only until one is
/// answered: once the provider is back, in the same run, requests overlap again. (A pod that
/// stayed in probe mode would deliver the rest of the campaign at one request per round trip.)
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_pod_sends_concurrently_again_as_soon_as_the_provider_answers_after_an_outage(
    pool: PgPool,
) {
    const N: i64 = 400;
    seed(&pool, CAMPAIGN, N).await;
    let addr = refused_addr();
    let mut cfg = config(&format!("http://{addr}/v1/send"));
    cfg.send_concurrency = 16;
    cfg.deadline_s = 60;
    let worker = std::sync::Arc::new(worker(&pool, cfg).await);
    let run = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.run(Default::default()).await.unwrap() })
    };
    // Refused until the pod has deferred a row (it pauses and probes), then the provider is back.
    until_some(Duration::from_secs(30), "a row deferred", || async {
        (worker.stats().deferred >= 1).then_some(())
    })
    .await;
    let (_, fake, _task) = fake_provider::spawn(
        FakeConfig {
            latency_mean_ms: 50,
            ..Default::default()
        },
        addr,
    )
    .await
    .unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    assert!(
        report.stats.deferred >= 1,
        "never saw the outage: {report:?}"
    );
    let s = fake.stats();
    assert_eq!(
        (s.delivered, s.members_delivered_more_than_once),
        (N as u64, 0)
    );
    assert!(
        s.max_in_flight >= 8,
        "still one request at a time after the provider answered: {s:?}"
    );
}
