//! The public door under attack: `campaign-sender events` as a process, faced with peers that
//! stall a huge body, hold a body open through SIGTERM, never finish a head, or send what the
//! head alone refuses. Each holds within its bound (src/http/), and a signed neighbour's event
//! is stored meanwhile.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::events::*;
use crate::helpers::*;

/// An `events` process for Postmark and SendGrid, with `extra` settings; its address.
async fn events(pool: &PgPool, extra: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let db = role_url(pool, "campaign_sender_events").await;
    let addr = refused_addr().to_string();
    let (_, sendgrid_key) = sendgrid_key();
    let mut env = vec![
        ("EVENTS_ADDR", addr.as_str()),
        ("POSTMARK_WEBHOOK_USER", POSTMARK_USER),
        ("POSTMARK_WEBHOOK_PASSWORD", POSTMARK_PASSWORD),
        ("SENDGRID_WEBHOOK_PUBLIC_KEY", sendgrid_key.as_str()),
    ];
    env.extend_from_slice(extra);
    let child = spawn_sender(&["events"], &db, &env);
    let base = format!("http://{addr}");
    until_healthy(&base, "events").await;
    (child, addr)
}

fn postmark_auth() -> Vec<(&'static str, String)> {
    let basic = b64(format!("{POSTMARK_USER}:{POSTMARK_PASSWORD}").as_bytes());
    vec![("Authorization", format!("Basic {basic}"))]
}

/// A Postmark hard bounce for `member`: one signed neighbour's event.
fn bounce(member: i64) -> String {
    json!({"RecordType": "Bounce", "Type": "HardBounce", "ID": member, "MessageID": format!("pm-{member}"),
        "Email": format!("member{member}@example.com"),
        "Metadata": {"campaign_id": CAMPAIGN, "member_id": member.to_string()}})
    .to_string()
}

/// The peak resident memory of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A peer that announces `len` bytes on `path` with `head` and sends all but the last byte,
/// then holds the connection; returns when the server has answered or closed it, with how long
/// that took.
async fn stall(addr: String, path: &'static str, head: String, len: usize) -> Duration {
    let t0 = Instant::now();
    // The peer's own kernel buffers are the peer's: kept small here, where both ends share one
    // kernel, so that 300 peers' unsent megabytes do not put this machine's TCP under memory
    // pressure (dropped packets, retransmits) and time the neighbour's request instead of ours.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(64 * 1024).unwrap();
    let stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    let (mut r, mut w) = stream.into_split();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}Content-Length: {len}\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        w.write_all(request.as_bytes()).await.ok()?;
        let chunk = vec![b'['; 64 * 1024];
        let mut left = len - 1;
        while left > 0 {
            let n = left.min(chunk.len());
            w.write_all(&chunk[..n]).await.ok()?;
            left -= n;
        }
        // Stalled one byte short: the connection is held until the server ends it.
        std::future::pending::<()>().await;
        Some(w)
    });
    let mut buf = [0u8; 1024];
    while matches!(r.read(&mut buf).await, Ok(n) if n > 0) {}
    writer.abort();
    t0.elapsed()
}

/// 300 peers each stall a 4 MB body: the process stays under 128 MiB, every one of them is cut
/// within 30 s, and a signed event posted meanwhile is stored and answered within 2 s.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn stalled_huge_bodies_cost_neither_the_memory_nor_a_neighbours_event(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let (child, addr) = events(&pool, &[]).await;
    let pid = child.id().unwrap();
    let signed = sendgrid_signed("[]", &now_s().to_string())
        .into_iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect::<String>();
    let stalled: Vec<_> = (0..300)
        .map(|_| {
            tokio::spawn(stall(
                addr.clone(),
                "/events/sendgrid",
                signed.clone(),
                4_194_000,
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let t0 = Instant::now();
    let code = post(
        &format!("http://{addr}/events/postmark"),
        &postmark_auth(),
        &bounce(1),
    )
    .await;
    let answered = t0.elapsed();
    assert_eq!(code, 200);
    assert!(
        answered < Duration::from_secs(2),
        "the neighbour waited {answered:?}"
    );
    assert_eq!(
        listed(&pool).await.len(),
        1,
        "the neighbour's bounce was not stored"
    );

    let mut slowest = Duration::ZERO;
    for s in stalled {
        slowest = slowest.max(s.await.unwrap());
    }
    assert!(
        slowest < Duration::from_secs(30),
        "a stalled body held on for {slowest:?}"
    );
    let peak = peak_rss(pid);
    assert!(peak < 128 * 1024 * 1024, "peak RSS {} MiB", peak >> 20);
    drop(child);
}

/// SIGTERM while a peer holds a body open (and the body deadline is far away): the process
/// ends within its shutdown grace, not when the peer gives up.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn sigterm_ends_the_server_within_its_grace_while_a_peer_holds_a_body(pool: PgPool) {
    let (child, addr) = events(&pool, &[("EVENTS_READ_TIMEOUT_MS", "60000")]).await;
    let mut peer = TcpStream::connect(&addr).await.unwrap();
    let head = postmark_auth()
        .into_iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect::<String>();
    peer.write_all(
        format!(
            "POST /events/postmark HTTP/1.1\r\nHost: x\r\n{head}Content-Length: 100\r\n\r\nabc"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    let (code, _, err) = finish(child, Duration::from_secs(30)).await;
    let took = t0.elapsed();
    assert_eq!(code, 0, "{err}");
    assert!(
        took < Duration::from_secs(15),
        "exited {took:?} after SIGTERM"
    );
    drop(peer);
}

/// A head that never ends is cut at `EVENTS_READ_TIMEOUT_MS`; so is a connection kept alive
/// and left idle.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_head_never_finished_and_an_idle_connection_are_cut_at_the_read_timeout(pool: PgPool) {
    let (child, addr) = events(&pool, &[("EVENTS_READ_TIMEOUT_MS", "1000")]).await;
    let closed_after = |first: &'static [u8]| {
        let addr = addr.clone();
        async move {
            let mut s = TcpStream::connect(&addr).await.unwrap();
            s.write_all(first).await.unwrap();
            let t0 = Instant::now();
            let mut buf = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
            assert!(read.is_ok(), "still open after 10 s");
            t0.elapsed()
        }
    };
    let half_head = closed_after(b"POST /events/postmark HTTP/1.1\r\nHost: x\r\n").await;
    assert!(half_head < Duration::from_secs(3), "{half_head:?}");
    let idle = closed_after(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(idle < Duration::from_secs(3), "{idle:?}");
    drop(child);
}

/// What the head alone refuses is answered before the body is sent: a vendor not configured,
/// a declared size over the bound, Postmark's wrong credentials, a SendGrid request without its
/// signature headers.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn what_the_head_refuses_is_answered_without_waiting_for_the_body(pool: PgPool) {
    let (child, addr) = events(&pool, &[]).await;
    let wrong = format!("Authorization: Basic {}\r\n", b64(b"postmark-hook:guess"));
    for (path, head, len, want) in [
        ("/events/mailgun", String::new(), 1_000, "404"),
        ("/events/postmark", wrong.clone(), 1_000, "401"),
        ("/events/sendgrid", String::new(), 1_000, "401"),
        ("/events/postmark", wrong, 100_000_000, "413"),
    ] {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(
            format!("POST {path} HTTP/1.1\r\nHost: x\r\n{head}Content-Length: {len}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer before the body"))
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {want}")),
            "{path}: {answer}"
        );
    }
    assert!(listed(&pool).await.is_empty());
    drop(child);
}

/// A peer that announces `len` bytes on `path` and sends one byte every `every` (never, with
/// `None`, after the first) until the server answers or closes; returns when it has.
async fn announce(addr: String, path: String, head: String, len: usize, every: Option<Duration>) {
    let stream = TcpStream::connect(&addr).await.unwrap();
    let (mut r, mut w) = stream.into_split();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}Content-Length: {len}\r\n\r\n["
    );
    let writer = tokio::spawn(async move {
        w.write_all(request.as_bytes()).await.ok()?;
        let Some(every) = every else {
            std::future::pending::<()>().await;
            return Some(());
        };
        for _ in 1..len {
            tokio::time::sleep(every).await;
            w.write_all(b" ").await.ok()?;
        }
        Some(())
    });
    let mut buf = [0u8; 1024];
    while matches!(r.read(&mut buf).await, Ok(n) if n > 0) {}
    writer.abort();
}

/// The budget is charged for bytes received: 70 strangers that announce 1 MiB each (more
/// than the 64 MiB budget between them) and send one byte, and 70 that trickle real bytes
/// inside the read timeout, delay neither a signed SendGrid post nor a one-click POST past 1 s.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn announced_bodies_cost_nothing_and_delay_no_signed_post_or_one_click(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let (child, addr) = events(&pool, &[ONE_CLICK[1]]).await;
    let signed = sendgrid_signed("[]", &now_s().to_string())
        .into_iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect::<String>();
    let mut peers = Vec::new();
    for i in 0..140 {
        let (path, every) = if i % 2 == 0 {
            ("/events/sendgrid", None)
        } else {
            (
                "/unsubscribe/x.1.AAAAAAAAAAAAAAAAAAAAAA",
                Some(Duration::from_millis(200)),
            )
        };
        let head = if i % 2 == 0 {
            signed.clone()
        } else {
            String::new()
        };
        peers.push(tokio::spawn(announce(
            addr.clone(),
            path.into(),
            head,
            1 << 20,
            every,
        )));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    let body = json!([{"event": "bounce", "type": "bounce", "email": "member1@example.com",
        "sg_event_id": "sg-1", "campaign_id": CAMPAIGN, "member_id": "1"}])
    .to_string();
    let t0 = Instant::now();
    let code = post(
        &format!("http://{addr}/events/sendgrid"),
        &sendgrid_signed(&body, &now_s().to_string()),
        &body,
    )
    .await;
    let signed_took = t0.elapsed();
    assert_eq!(code, 200);
    let signer = campaign_sender::unsubscribe::Signer::new(ONE_CLICK[1].1).unwrap();
    let t0 = Instant::now();
    let r = reqwest::Client::new()
        .post(format!(
            "http://{addr}/unsubscribe/{}",
            signer.token(CAMPAIGN, 2)
        ))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    let click_took = t0.elapsed();
    assert_eq!(r.status(), 200);
    assert!(
        signed_took < Duration::from_secs(1),
        "the signed post waited {signed_took:?}"
    );
    assert!(
        click_took < Duration::from_secs(1),
        "the one-click waited {click_took:?}"
    );
    assert_eq!(listed(&pool).await.len(), 2, "both were stored");
    for p in peers {
        p.abort();
    }
    drop(child);
}
