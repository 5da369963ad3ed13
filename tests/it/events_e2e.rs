//! `campaign-sender events` end to end: a timed-out send settled by its delivery event with the
//! real worker, the binary as its own database role, and a database that stops answering or
//! restarts mid-stream. The per-vendor signature tests are in `events.rs`.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;

/// End to end: the real worker sends through the SendGrid profile (no idempotency key), the
/// fake delivers but answers after the client gave up, so the row is `unconfirmed` (never sent
/// again blindly); SendGrid's `delivered` event settles it `sent`, and a second run sends
/// nothing.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_delivery_event_settles_the_row_whose_send_timed_out(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    sqlx::query(
        "INSERT INTO campaigns (campaign_id, from_address) VALUES ($1, 'news@example.com')",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let p = provider(fake_provider::FakeConfig {
        late_per_million: 1_000_000,
        late_ms: 3000,
        ..Default::default()
    })
    .await;
    let base = p.url.trim_end_matches("/v1/send").to_string();
    let cfg = || {
        let mut c = config(&p.url);
        c.mail_provider = "sendgrid".parse().unwrap();
        c.mail_url = Some(base.clone());
        c.mail_api_key = Some(campaign_sender::secret::Secret::new("test-key"));
        c.read_timeout_ms = 1000;
        c
    };
    run_to_end(&pool, cfg()).await;
    assert_eq!(state_of(&pool, 1).await.0, "unconfirmed");
    assert_eq!(p.fake.stats().delivered, 1);

    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let body = json!([{"email": "member1@example.com", "event": "delivered",
        "sg_event_id": "d-1", "campaign_id": CAMPAIGN, "member_id": "1"}])
    .to_string();
    let ts = now_s().to_string();
    assert_eq!(post(&url, &sendgrid_signed(&body, &ts), &body).await, 200);
    assert_eq!(state_of(&pool, 1).await.0, "sent");
    run_to_end(&pool, cfg()).await;
    assert_eq!(p.fake.stats().delivered, 1, "mailed twice");
}

/// The database stops answering mid-stream: the vendor hears 503 within the bound (never a
/// hang), nothing of that request is stored; when it answers again the vendor's retries are
/// recorded, each event once, none lost.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_database_that_stops_answering_is_503_and_the_retries_lose_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let db = std::env::var("DATABASE_URL").unwrap();
    let proxy = FrozenDb::in_front_of(&db).await;
    let through = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&proxy.url(&database_url(&pool).await))
        .await
        .unwrap();
    let url = format!(
        "{}/events/postmark",
        serve_events(through, listeners(false)).await
    );
    let auth = vec![(
        "Authorization",
        format!(
            "Basic {}",
            b64(format!("{POSTMARK_USER}:{POSTMARK_PASSWORD}").as_bytes())
        ),
    )];
    let bounce = |m: i64| {
        json!({"RecordType": "Bounce", "Type": "HardBounce", "ID": m, "MessageID": format!("pm-{m}"),
               "Email": format!("member{m}@example.com"),
               "Metadata": {"campaign_id": CAMPAIGN, "member_id": m.to_string()}})
        .to_string()
    };
    assert_eq!(post(&url, &auth, &bounce(1)).await, 200);
    proxy.freeze();
    let t0 = std::time::Instant::now();
    assert_eq!(post(&url, &auth, &bounce(2)).await, 503);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(
        stored(&pool).await,
        1,
        "a request answered 503 stored something"
    );
    proxy.thaw();
    // The vendor retries both (it never heard about the first one, say), until they are taken.
    let t0 = std::time::Instant::now();
    while post(&url, &auth, &bounce(2)).await != 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the database never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(post(&url, &auth, &bounce(1)).await, 200);
    assert_eq!(stored(&pool).await, 2);
    assert_eq!(listed(&pool).await.len(), 2);
}

/// PostgreSQL restarted mid-stream (every connection cut, the server away for a moment): a
/// request waits for it at most its bound, then hears 503 and is retried, as the vendor does;
/// every event is stored, each once.
#[tokio::test]
async fn a_database_restart_mid_stream_loses_no_event_and_stores_each_once() {
    let server = std::sync::Arc::new(OwnServer::start(false));
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .unwrap();
    campaign_sender::store::MIGRATOR.run(&pool).await.unwrap();
    seed(&pool, CAMPAIGN, 200).await;
    let url = format!(
        "{}/events/postmark",
        serve_events(pool.clone(), listeners(false)).await
    );
    let auth = vec![(
        "Authorization",
        format!(
            "Basic {}",
            b64(format!("{POSTMARK_USER}:{POSTMARK_PASSWORD}").as_bytes())
        ),
    )];
    let delivery = |m: i64| {
        json!({"RecordType": "Delivery", "MessageID": format!("pm-{m}"), "DeliveredAt": "t",
               "Recipient": format!("member{m}@example.com"),
               "Metadata": {"campaign_id": CAMPAIGN, "member_id": m.to_string()}})
        .to_string()
    };
    let before: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT pg_postmaster_start_time()")
            .fetch_one(&pool)
            .await
            .unwrap();
    let restarting = server.clone();
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        restarting.restart();
    });
    let (mut unavailable, t0, mut m) = (0, std::time::Instant::now(), 0);
    let mut slowest = Duration::ZERO;
    // Events until the server is back and a few more: the stream spans the restart.
    while m < 20 || !restart.is_finished() {
        m += 1;
        // As a vendor does: again until it is taken (bounded).
        loop {
            let asked = std::time::Instant::now();
            let status = post(&url, &auth, &delivery(m)).await;
            slowest = slowest.max(asked.elapsed());
            match status {
                200 => break,
                503 => unavailable += 1,
                other => panic!("member {m}: {other}"),
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the database never came back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    restart.join().unwrap();
    // The stream spanned the restart (the loop ran until it was done); the server did restart.
    let started: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT pg_postmaster_start_time()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(started > before, "the server was not restarted");
    assert!(
        slowest < Duration::from_secs(5),
        "a request waited {slowest:?}"
    );
    eprintln!("{m} events, {unavailable} answers 503 while the server was away");
    assert_eq!(stored(&pool).await, m);
}

/// `campaign-sender events` as a process, logged in as its own role (docs/roles.sql): refuses to
/// start with no vendor configured (78); serves /healthz, 404 for a vendor without a secret,
/// records an event with exactly the grants it has, its alerted counters start at 0, and it
/// serves no sender's counters.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_events_command_runs_as_its_role_and_says_what_is_missing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2).await;
    unconfirmed(&pool, 1).await;
    let db = role_url(&pool, "campaign_sender_events").await;
    let (code, _, err) = finish(spawn_sender(&["events"], &db, &[]), Duration::from_secs(30)).await;
    assert_eq!(code, campaign_sender::exit::Exit::Config as i32, "{err}");
    assert!(err.contains("no vendor is configured"), "{err}");

    let (events, metrics) = (refused_addr(), refused_addr());
    let (events, metrics) = (events.to_string(), metrics.to_string());
    let child = spawn_sender(
        &["events"],
        &db,
        &[
            ("EVENTS_ADDR", &events),
            ("METRICS_ADDR", &metrics),
            ("POSTMARK_WEBHOOK_USER", POSTMARK_USER),
            ("POSTMARK_WEBHOOK_PASSWORD", POSTMARK_PASSWORD),
        ],
    );
    let base = format!("http://{events}");
    until_healthy(&base, "events").await;
    assert_eq!(
        post(&format!("{base}/events/sendgrid"), &[], "[]").await,
        404
    );
    let auth = vec![(
        "Authorization",
        format!(
            "Basic {}",
            b64(format!("{POSTMARK_USER}:{POSTMARK_PASSWORD}").as_bytes())
        ),
    )];
    let delivered = json!({"RecordType": "Delivery", "MessageID": "pm-1", "DeliveredAt": "t",
        "Recipient": "member1@example.com", "Metadata": {"campaign_id": CAMPAIGN, "member_id": "1"}});
    let bounced = json!({"RecordType": "Bounce", "Type": "HardBounce", "ID": 7, "MessageID": "pm-2",
        "Email": "member2@example.com", "Metadata": {"campaign_id": CAMPAIGN, "member_id": "2"}});
    // A campaign we do not have: counted as unmatched, never as a label of its own.
    let foreign = json!({"RecordType": "Bounce", "Type": "HardBounce", "ID": 8, "MessageID": "pm-3",
        "Email": "someone@example.org", "Metadata": {"campaign_id": "nope", "member_id": "1"}});
    for body in [delivered, bounced, foreign] {
        assert_eq!(
            post(&format!("{base}/events/postmark"), &auth, &body.to_string()).await,
            200
        );
    }
    assert_eq!(state_of(&pool, 1).await.0, "sent");
    assert_eq!(listed(&pool).await.len(), 2);
    let text = metrics_text(&metrics).await.unwrap();
    for line in [
        "campaign_sender_events_unavailable_total{worker=",
        "campaign_sender_events_refused_total{worker=",
        "campaign_sender_events_total{",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    assert!(!text.contains("@example.com"), "an address in the metrics");
    assert!(
        !text.contains("nope"),
        "a foreign campaign became a label:\n{text}"
    );
    assert!(text.contains(r#"what="unmatched""#), "{text}");
    // Only the webhook server's own series: a sender's counters here would show a webhook pod
    // as a sender that never sends.
    assert!(!text.contains("campaign_sender_sends_total"), "{text}");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().unwrap().to_string()])
        .status()
        .unwrap();
    let (code, _, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{err}");
}
