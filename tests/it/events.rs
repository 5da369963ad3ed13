//! `campaign-sender events` (src/events/): each vendor's webhook signed exactly as the vendor
//! signs it (keys made here; SendGrid's published vector too) — accepted, tampered → refused
//! with nothing stored, replayed → stored once; what the events do (suppress, settle, the
//! funnel); the server's bounds (404, 413, 503). SES through SNS is in `events_sns.rs`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use campaign_sender::events::mailgun::Mailgun;
use campaign_sender::events::postmark::Postmark;
use campaign_sender::events::resend::Resend;
use campaign_sender::events::sendgrid::{SendGrid, SendGridInbound};
use campaign_sender::events::server::{router, Listeners};
use campaign_sender::http::Budget;
use hmac::{Hmac, Mac};
use p256::ecdsa::signature::Signer as _;
use serde_json::json;
use sha2::Sha256;
use sqlx::PgPool;

use crate::helpers::*;

/// SendGrid's own vector (`@sendgrid/eventwebhook`'s spec file, via
/// recorded from that package's test vectors): the body ends in CRLF.
const SG_OFFICIAL_KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+2fNNRaINXvVpiglSI8eNEc6wEA3F+g==";
const SG_OFFICIAL_SIG: &str = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM=";
const SG_OFFICIAL_TS: &str = "1600112502";
const SG_OFFICIAL_BODY: &str = "[{\"email\":\"hello@world.com\",\"event\":\"dropped\",\"reason\":\"Bounced Address\",\"sg_event_id\":\"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA\",\"sg_message_id\":\"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0\",\"smtp-id\":\"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>\",\"timestamp\":1600112492}]\r\n";

pub(crate) const MAILGUN_KEY: &str = "key-campaign-sender-test-signing-key";
/// The test listeners' inbound mail cap.
pub(crate) const INBOUND_MAX: usize = 256 * 1024;
pub(crate) const POSTMARK_USER: &str = "postmark-hook";
pub(crate) const POSTMARK_PASSWORD: &str = "s3cret-pass-0123456789";

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The test's SendGrid key pair (fixed bytes: no randomness needed).
pub(crate) fn sendgrid_key() -> (p256::ecdsa::SigningKey, String) {
    use p256::pkcs8::EncodePublicKey as _;
    let sk = p256::ecdsa::SigningKey::from_bytes(&[7u8; 32].into()).unwrap();
    let der = sk.verifying_key().to_public_key_der().unwrap();
    (sk, b64(der.as_bytes()))
}

fn resend_secret() -> (Vec<u8>, String) {
    let key = b"campaign-sender resend test key!".to_vec();
    let s = format!("whsec_{}", b64(&key));
    (key, s)
}

/// Every vendor but SES listened for, bodies of at most 64 KiB, and a 2 s database bound.
pub(crate) fn listeners(official_sendgrid: bool) -> Listeners {
    let (_, sg) = sendgrid_key();
    Listeners {
        webhooks: vec![
            Box::new(
                SendGrid::new(if official_sendgrid {
                    SG_OFFICIAL_KEY
                } else {
                    &sg
                })
                .unwrap(),
            ),
            Box::new(Resend::new(&resend_secret().1).unwrap()),
            Box::new(Mailgun::new(MAILGUN_KEY).unwrap()),
            Box::new(Postmark::new(POSTMARK_USER, POSTMARK_PASSWORD).unwrap()),
        ],
        bodies: Budget::new(64 * 1024, 16 * 1024 * 1024, Duration::from_secs(10)),
        inbound: vec![
            Box::new(Postmark::new(POSTMARK_USER, POSTMARK_PASSWORD).unwrap()),
            Box::new(Mailgun::new(MAILGUN_KEY).unwrap()),
            Box::new(SendGridInbound(SendGrid::new(&sg).unwrap())),
        ],
        inbound_bodies: Budget::new(INBOUND_MAX, 8 * INBOUND_MAX, Duration::from_secs(10)),
        db_timeout: Duration::from_secs(2),
        rules: campaign_sender::config::BrakeConfig::default().rules(),
        one_click: Some(campaign_sender::unsubscribe::Signer::new(ONE_CLICK[1].1).unwrap()),
        pages: Default::default(),
    }
}

/// The events server on a port of its own; its base URL.
pub async fn serve_events(pool: PgPool, l: Listeners) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let doors = campaign_sender::http::Doors {
        max_connections: 64,
        head_timeout: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(10),
    };
    let never = tokio_util::sync::CancellationToken::new();
    tokio::spawn(async move {
        campaign_sender::http::serve(listener, router(pool, l), doors, never)
            .await
            .unwrap()
    });
    format!("http://{addr}")
}

pub async fn post(url: &str, headers: &[(&str, String)], body: &str) -> u16 {
    let mut r = reqwest::Client::new().post(url).body(body.to_string());
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.send().await.unwrap().status().as_u16()
}

pub(crate) fn sendgrid_signed(body: &str, ts: &str) -> Vec<(&'static str, String)> {
    let (sk, _) = sendgrid_key();
    let sig: p256::ecdsa::Signature = sk.sign(format!("{ts}{body}").as_bytes());
    vec![
        (
            "X-Twilio-Email-Event-Webhook-Signature",
            b64(sig.to_der().as_bytes()),
        ),
        ("X-Twilio-Email-Event-Webhook-Timestamp", ts.to_string()),
    ]
}

pub(crate) fn resend_signed(id: &str, ts: i64, body: &str) -> Vec<(&'static str, String)> {
    let (key, _) = resend_secret();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    vec![
        ("svix-id", id.to_string()),
        ("svix-timestamp", ts.to_string()),
        // A secret mid-rotation: one signature of two matches.
        (
            "svix-signature",
            format!("v1,AAAA v1,{}", b64(&mac.finalize().into_bytes())),
        ),
    ]
}

pub(crate) fn mailgun_body(ts: i64, token: &str, event: serde_json::Value) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(MAILGUN_KEY.as_bytes()).unwrap();
    mac.update(format!("{ts}{token}").as_bytes());
    json!({"signature": {"timestamp": ts.to_string(), "token": token,
                         "signature": hex::encode(mac.finalize().into_bytes())},
           "event-data": event})
    .to_string()
}

/// A row whose attempt had an unknown outcome, as the worker leaves it (`unconfirmed`).
pub(crate) async fn unconfirmed(pool: &PgPool, member: i64) {
    sqlx::query("UPDATE campaign_targets SET state = 'unconfirmed', attempts = 1, unknown_since = now() WHERE campaign_id = $1 AND member_id = $2")
        .bind(CAMPAIGN)
        .bind(member)
        .execute(pool)
        .await
        .unwrap();
}

pub(crate) async fn listed(pool: &PgPool) -> Vec<(String, String, Option<String>)> {
    sqlx::query_as("SELECT email, reason, source FROM suppressions ORDER BY email")
        .fetch_all(pool)
        .await
        .unwrap()
}

pub(crate) async fn stored(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM provider_events")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn sendgrid_events_as_sendgrid_signs_them_suppress_and_settle_and_tampering_is_refused(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 5).await;
    unconfirmed(&pool, 1).await;
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let body = json!([
        {"email": "member1@example.com", "event": "delivered", "sg_event_id": "ev-1",
         "sg_message_id": "xid1.filter0001.1", "campaign_id": CAMPAIGN, "member_id": "1"},
        {"email": "Member2@Example.com", "event": "bounce", "type": "bounce", "sg_event_id": "ev-2",
         "sg_message_id": "xid2.filter0001.1", "campaign_id": CAMPAIGN, "member_id": "2"},
        {"email": "member3@example.com", "event": "bounce", "type": "blocked", "sg_event_id": "ev-3",
         "campaign_id": CAMPAIGN, "member_id": "3"}
    ])
    .to_string()
        + "\r\n";
    let ts = now_s().to_string();

    let tampered = body
        .replace("member2@", "member4@")
        .replace("Member2@", "member4@");
    assert_eq!(
        post(&url, &sendgrid_signed(&body, &ts), &tampered).await,
        401
    );
    let mut moved = sendgrid_signed(&body, &ts);
    moved[1].1 = "1".into();
    assert_eq!(
        post(&url, &moved, &body).await,
        401,
        "the timestamp is signed too"
    );
    assert_eq!(post(&url, &[], &body).await, 401, "unsigned");
    assert_eq!(stored(&pool).await, 0, "a refused request stored something");

    for _ in 0..2 {
        assert_eq!(post(&url, &sendgrid_signed(&body, &ts), &body).await, 200);
    }
    assert_eq!(stored(&pool).await, 3, "a retried batch is stored once");
    assert_eq!(
        listed(&pool).await,
        [(
            "member2@example.com".into(),
            "hard_bounce".into(),
            Some("sendgrid".into())
        )],
        "a blocked (soft) bounce suppresses nobody"
    );
    let (state, ..) = state_of(&pool, 1).await;
    assert_eq!(state, "sent", "the delivery settles the unconfirmed row");
    assert_eq!(
        state_of(&pool, 2).await.0,
        "pending",
        "no unknown attempt: nothing to settle"
    );
    let message: Option<String> =
        sqlx::query_scalar("SELECT provider_message_id FROM campaign_targets WHERE member_id = 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(message.as_deref(), Some("xid1"));
    let funnel = campaign_sender::store::events::funnel(&pool, CAMPAIGN)
        .await
        .unwrap();
    let n = |c: &str| funnel.iter().find(|(k, _)| k == c).unwrap().1;
    assert_eq!(
        (
            n("delivered"),
            n("bounced_hard"),
            n("deferred"),
            n("bounced_soft")
        ),
        (1, 1, 1, 0),
        "a block without a mailbox status is not the recipient's: deferred, no soft bounce"
    );
    // `status`, as the operator role runs it, shows the funnel.
    let db = operator_url(&pool).await;
    let (code, out, err) = finish(
        spawn_sender(&["status", "--campaign", CAMPAIGN], &db, &[]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "events     accepted 0 · delivered 1 · deferred 1 · bounced soft 0 · bounced hard 1"
        ),
        "{out}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn sendgrids_published_vector_verifies_and_without_its_crlf_does_not(pool: PgPool) {
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(true)).await
    );
    let headers = [
        (
            "X-Twilio-Email-Event-Webhook-Signature",
            SG_OFFICIAL_SIG.to_string(),
        ),
        (
            "X-Twilio-Email-Event-Webhook-Timestamp",
            SG_OFFICIAL_TS.to_string(),
        ),
    ];
    assert_eq!(post(&url, &headers, SG_OFFICIAL_BODY.trim_end()).await, 401);
    assert_eq!(post(&url, &headers, SG_OFFICIAL_BODY).await, 200);
    // A drop for a bounced address: listed, though it names no campaign of ours.
    assert_eq!(listed(&pool).await.len(), 1);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn resend_events_signed_as_svix_signs_them_are_taken_once_and_stale_ones_refused(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 3).await;
    unconfirmed(&pool, 1).await;
    let url = format!(
        "{}/events/resend",
        serve_events(pool.clone(), listeners(false)).await
    );
    let complained = json!({"type": "email.complained", "created_at": "2026-12-06T00:00:00Z",
        "data": {"email_id": "e-2", "to": ["member2@example.com"],
                 "tags": {"campaign_id": CAMPAIGN, "member_id": "2"}}})
    .to_string();
    let delivered = json!({"type": "email.delivered", "data": {"email_id": "e-1",
        "to": ["member1@example.com"], "tags": [{"name": "campaign_id", "value": CAMPAIGN},
                                                 {"name": "member_id", "value": "1"}]}})
    .to_string();
    let now = now_s();
    let tampered = complained.replace("member2@", "member3@");
    assert_eq!(
        post(&url, &resend_signed("msg_2", now, &complained), &tampered).await,
        401
    );
    let old = now - 600;
    assert_eq!(
        post(&url, &resend_signed("msg_2", old, &complained), &complained).await,
        401
    );
    assert_eq!(stored(&pool).await, 0);

    for _ in 0..2 {
        assert_eq!(
            post(&url, &resend_signed("msg_2", now, &complained), &complained).await,
            200
        );
    }
    assert_eq!(
        post(&url, &resend_signed("msg_1", now, &delivered), &delivered).await,
        200
    );
    assert_eq!(stored(&pool).await, 2);
    assert_eq!(
        listed(&pool).await,
        [(
            "member2@example.com".into(),
            "complaint".into(),
            Some("resend".into())
        )]
    );
    assert_eq!(state_of(&pool, 1).await.0, "sent");
    // Out of order: a delivery reported after the complaint lifts nothing.
    let late = json!({"type": "email.delivered", "data": {"email_id": "e-2",
        "to": ["member2@example.com"], "tags": {"campaign_id": CAMPAIGN, "member_id": "2"}}})
    .to_string();
    assert_eq!(
        post(&url, &resend_signed("msg_3", now, &late), &late).await,
        200
    );
    assert_eq!(
        listed(&pool).await.len(),
        1,
        "a late delivery lifted the complaint"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mailgun_token_carries_one_event_and_a_stale_signature_is_refused(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let url = format!(
        "{}/events/mailgun",
        serve_events(pool.clone(), listeners(false)).await
    );
    let failed = |id: &str, member: &str| {
        json!({"event": "failed", "severity": "permanent", "reason": "bounce", "id": id,
               "recipient": format!("member{member}@example.com"),
               "message": {"headers": {"message-id": "m@mg.example.com"}},
               "user-variables": {"campaign_id": CAMPAIGN, "member_id": member}})
    };
    let now = now_s();
    let body = mailgun_body(now, "tok-1", failed("mg-1", "1"));
    let mut bad: serde_json::Value = serde_json::from_str(&body).unwrap();
    bad["signature"]["signature"] = json!("00".repeat(32));
    let bad = bad.to_string();
    assert_eq!(post(&url, &[], &bad).await, 401, "a wrong signature");
    assert_eq!(
        post(
            &url,
            &[],
            &mailgun_body(now - 600, "tok-0", failed("mg-0", "1"))
        )
        .await,
        401
    );
    assert_eq!(stored(&pool).await, 0);

    assert_eq!(post(&url, &[], &body).await, 200);
    assert_eq!(
        post(&url, &[], &body).await,
        200,
        "Mailgun's retry of the same request"
    );
    // The signature does not cover the event: the same token with other data is a forgery.
    let forged = mailgun_body(now, "tok-1", failed("mg-9", "2"));
    assert_eq!(post(&url, &[], &forged).await, 401);
    assert_eq!(stored(&pool).await, 1);
    assert_eq!(
        listed(&pool).await,
        [(
            "member1@example.com".into(),
            "hard_bounce".into(),
            Some("mailgun".into())
        )]
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn postmark_is_taken_only_with_its_basic_auth(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2).await;
    let url = format!(
        "{}/events/postmark",
        serve_events(pool.clone(), listeners(false)).await
    );
    let body = json!({"RecordType": "SubscriptionChange", "MessageID": "pm-1",
        "Recipient": "member1@example.com", "SuppressSending": true,
        "SuppressionReason": "ManualSuppression", "ChangedAt": "2026-12-06T00:00:00Z",
        "Metadata": {"campaign_id": CAMPAIGN, "member_id": "1"}})
    .to_string();
    let basic = |u: &str, p: &str| {
        vec![(
            "Authorization",
            format!("Basic {}", b64(format!("{u}:{p}").as_bytes())),
        )]
    };
    assert_eq!(post(&url, &[], &body).await, 401);
    assert_eq!(post(&url, &basic(POSTMARK_USER, "wrong"), &body).await, 401);
    assert_eq!(stored(&pool).await, 0);
    assert_eq!(
        post(&url, &basic(POSTMARK_USER, POSTMARK_PASSWORD), &body).await,
        200
    );
    assert_eq!(
        post(&url, &basic(POSTMARK_USER, POSTMARK_PASSWORD), &body).await,
        200
    );
    assert_eq!(stored(&pool).await, 1);
    assert_eq!(
        listed(&pool).await,
        [(
            "member1@example.com".into(),
            "unsubscribe".into(),
            Some("postmark".into())
        )]
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_unconfigured_vendor_is_404_a_large_body_413_and_an_absent_database_503(pool: PgPool) {
    let base = serve_events(pool.clone(), listeners(false)).await;
    assert_eq!(post(&format!("{base}/events/ses"), &[], "{}").await, 404);
    assert_eq!(post(&format!("{base}/events/other"), &[], "{}").await, 404);
    let big = "x".repeat(65 * 1024);
    assert_eq!(
        post(&format!("{base}/events/postmark"), &[], &big).await,
        413
    );

    // A database that does not answer: 503 within the bound, so the vendor retries.
    let dead = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(30))
        .connect_lazy(&format!("postgres://x@{}/x", refused_addr()))
        .unwrap();
    let base = serve_events(dead, listeners(false)).await;
    let body =
        json!({"RecordType": "Delivery", "MessageID": "pm-1", "DeliveredAt": "t"}).to_string();
    let auth = vec![(
        "Authorization",
        format!(
            "Basic {}",
            b64(format!("{POSTMARK_USER}:{POSTMARK_PASSWORD}").as_bytes())
        ),
    )];
    let t0 = std::time::Instant::now();
    assert_eq!(
        post(&format!("{base}/events/postmark"), &auth, &body).await,
        503
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// Whose fault a refusal is, through the real server and store: Gmail refusing our domain as
/// unauthenticated (5.7.26, SendGrid's "Technical") suppresses nobody, counts in no bounce
/// line, settles its unknown attempt (the vendor took the mail) and is kept with its cause,
/// code and provider — never the server's words; the recipient's 5.1.1 suppresses as before.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_refusal_of_our_domain_suppresses_nobody_and_is_kept_with_its_cause(pool: PgPool) {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state, unknown_since)
         VALUES ($1, 1, 'ann@gmail.com', 'unconfirmed', now()), ($1, 2, 'bo@gmail.com', 'sent', NULL)",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let body = serde_json::json!([
        {"email": "ann@gmail.com", "event": "bounce", "type": "bounce", "status": "5.7.26",
         "reason": "550-5.7.26 Unauthenticated email from example.com is not accepted due to domain's DMARC policy. ann@gmail.com",
         "bounce_classification": "Technical", "sg_event_id": "sg-auth", "sg_message_id": "m1.f",
         "timestamp": now_s(), "campaign_id": CAMPAIGN, "member_id": "1"},
        {"email": "bo@gmail.com", "event": "bounce", "type": "bounce", "status": "5.1.1",
         "reason": "550 5.1.1 The email account that you tried to reach does not exist",
         "bounce_classification": "Invalid Address", "sg_event_id": "sg-gone", "sg_message_id": "m2.f",
         "timestamp": now_s(), "campaign_id": CAMPAIGN, "member_id": "2"}
    ])
    .to_string();
    let ts = now_s().to_string();
    assert_eq!(post(&url, &sendgrid_signed(&body, &ts), &body).await, 200);
    assert_eq!(
        listed(&pool).await,
        [(
            "bo@gmail.com".into(),
            "hard_bounce".into(),
            Some("sendgrid".into())
        )],
        "only the recipient's refusal suppresses"
    );
    assert_eq!(
        state_of(&pool, 1).await.0,
        "sent",
        "the vendor took the mail: settled"
    );
    type Kept = (
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    );
    let kept: Vec<Kept> = sqlx::query_as(
        "SELECT event_id, what, cause, code, family FROM provider_events ORDER BY event_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        kept,
        [
            (
                "sg-auth".into(),
                "refused".into(),
                Some("authentication".into()),
                Some("5.7.26".into()),
                Some("google".into())
            ),
            (
                "sg-gone".into(),
                "hard_bounce".into(),
                Some("no_mailbox".into()),
                Some("5.1.1".into()),
                Some("google".into())
            ),
        ]
    );
    let strikes: i64 =
        sqlx::query_scalar("SELECT count(*) FROM campaign_strikes WHERE kind = 'hard_bounce'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(strikes, 1, "the sender's refusal counts in no bounce line");

    // SendGrid then lists ann on its own bounce list, after our refusal: its next drop of ann
    // lists nobody; a drop of an address never refused for our fault lists it as before.
    let drops = serde_json::json!([
        {"email": "ANN@gmail.com", "event": "dropped", "reason": "Bounced Address",
         "sg_event_id": "sg-drop-ann", "timestamp": now_s(), "campaign_id": "next", "member_id": "1"},
        {"email": "cy@example.org", "event": "dropped", "reason": "Bounced Address",
         "sg_event_id": "sg-drop-cy", "timestamp": now_s(), "campaign_id": "next", "member_id": "3"}
    ])
    .to_string();
    assert_eq!(post(&url, &sendgrid_signed(&drops, &ts), &drops).await, 200);
    let emails: Vec<String> = listed(&pool).await.into_iter().map(|(e, _, _)| e).collect();
    assert_eq!(
        emails,
        ["bo@gmail.com", "cy@example.org"],
        "ann's drop is our refusal's"
    );
}
