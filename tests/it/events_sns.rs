//! SES events through SNS: envelopes signed as SNS signs them (an RSA key and certificate made
//! here by openssl, the signature made by openssl too — an implementation other than ours),
//! the certificate served over HTTP on 127.0.0.1 (allowed by `SNS_CERT_URL_PATTERN`, as only a
//! test may), the subscription handshake against that local server.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use base64::Engine as _;
use campaign_sender::events::server::Listeners;
use campaign_sender::events::sns::{SesInbound, Sns};
use campaign_sender::http::Budget;
use serde_json::json;
use sqlx::PgPool;

use crate::events::{post, serve_events};
use crate::helpers::*;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:ses-events";

/// A key and a self-signed certificate (openssl), and a server on 127.0.0.1 that serves the
/// certificate at `/cert.pem` and counts the GETs of `/confirm` (the SubscribeURL).
struct Aws {
    key: std::path::PathBuf,
    base: String,
    confirmed: Arc<AtomicU32>,
}

async fn aws() -> Aws {
    let dir = temp_path("sns-cert");
    std::fs::create_dir_all(&dir).unwrap();
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=sns.amazonaws.com",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let pem = std::fs::read_to_string(&cert).unwrap();
    let confirmed = Arc::new(AtomicU32::new(0));
    let c = confirmed.clone();
    let app = Router::new()
        .route("/cert.pem", get(move || async move { pem }))
        .route(
            "/confirm",
            get(move || async move {
                c.fetch_add(1, Ordering::SeqCst);
                "<ConfirmSubscriptionResponse/>"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Aws {
        key,
        base: format!("http://{addr}"),
        confirmed,
    }
}

fn sns() -> Sns {
    Sns::new(vec![TOPIC.into()], r"^http://127\.0\.0\.1:\d+/[^?#]+\.pem$").unwrap()
}

fn listeners() -> Listeners {
    Listeners {
        webhooks: vec![Box::new(sns())],
        bodies: Budget::new(256 * 1024, 16 * 1024 * 1024, Duration::from_secs(10)),
        inbound: vec![Box::new(SesInbound(sns()))],
        inbound_bodies: Budget::new(256 * 1024, 2 * 1024 * 1024, Duration::from_secs(10)),
        db_timeout: Duration::from_secs(2),
        rules: campaign_sender::config::BrakeConfig::default().rules(),
        one_click: None,
        pages: Default::default(),
    }
}

/// `text` signed by openssl with the test key: SHA-256 (`SignatureVersion` 2) or SHA-1 (1).
fn openssl_sign(key: &std::path::Path, text: &str, version: &str) -> String {
    let input = temp_path("sns-to-sign");
    std::fs::write(&input, text).unwrap();
    let digest = if version == "1" { "-sha1" } else { "-sha256" };
    let out = Command::new("openssl")
        .args(["dgst", digest, "-sign"])
        .arg(key)
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success());
    base64::engine::general_purpose::STANDARD.encode(out.stdout)
}

/// An SNS envelope of `kind` around `message`, signed with `version`.
fn envelope(a: &Aws, kind: &str, id: &str, message: &str, version: &str, topic: &str) -> String {
    let ts = "2026-12-06T00:00:00.000Z";
    let mut env = json!({"Type": kind, "MessageId": id, "TopicArn": topic, "Message": message,
        "Timestamp": ts, "SignatureVersion": version,
        "SigningCertURL": format!("{}/cert.pem", a.base)});
    let text = if kind == "Notification" {
        format!("Message\n{message}\nMessageId\n{id}\nTimestamp\n{ts}\nTopicArn\n{topic}\nType\n{kind}\n")
    } else {
        let url = format!("{}/confirm?Token=abc", a.base);
        env["SubscribeURL"] = json!(url);
        env["Token"] = json!("abc");
        format!("Message\n{message}\nMessageId\n{id}\nSubscribeURL\n{url}\nTimestamp\n{ts}\nToken\nabc\nTopicArn\n{topic}\nType\n{kind}\n")
    };
    env["Signature"] = json!(openssl_sign(&a.key, &text, version));
    env.to_string()
}

fn ses_event(kind: &str, member: i64) -> String {
    let mut e = json!({"eventType": kind,
        "mail": {"messageId": format!("ses-{member}"), "destination": [format!("member{member}@example.com")],
                 "tags": {"ses:configuration-set": ["events"], "campaign_id": [CAMPAIGN],
                          "member_id": [member.to_string()]}}});
    if kind == "Bounce" {
        e["bounce"] = json!({"bounceType": "Permanent",
            "bouncedRecipients": [{"emailAddress": format!("member{member}@example.com")}]});
    }
    e.to_string()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn ses_events_through_sns_are_verified_with_the_certificate_and_the_topic_pinned(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 3).await;
    sqlx::query("UPDATE campaign_targets SET state = 'unconfirmed', unknown_since = now() WHERE member_id = 1")
        .execute(&pool)
        .await
        .unwrap();
    let a = aws().await;
    let url = format!(
        "{}/events/ses",
        serve_events(pool.clone(), listeners()).await
    );

    // The handshake: confirmed by GETting SubscribeURL, once its signature holds.
    let sub = envelope(&a, "SubscriptionConfirmation", "s-1", "confirm", "2", TOPIC);
    assert_eq!(post(&url, &[], &sub).await, 200);
    assert_eq!(a.confirmed.load(Ordering::SeqCst), 1);

    let bounce = envelope(
        &a,
        "Notification",
        "n-2",
        &ses_event("Bounce", 2),
        "2",
        TOPIC,
    );
    let tampered = bounce.replace("member2@", "member3@");
    assert_eq!(post(&url, &[], &tampered).await, 401);
    // The signature's edges: empty, a byte short, a byte long (the whole RSA signature or none).
    let mut env: serde_json::Value = serde_json::from_str(&bounce).unwrap();
    let sig = base64::engine::general_purpose::STANDARD
        .decode(env["Signature"].as_str().unwrap())
        .unwrap();
    let mut long = sig.clone();
    long.push(0);
    for wrong in [Vec::new(), sig[..sig.len() - 1].to_vec(), long] {
        env["Signature"] = json!(base64::engine::general_purpose::STANDARD.encode(&wrong));
        assert_eq!(
            post(&url, &[], &env.to_string()).await,
            401,
            "{} bytes",
            wrong.len()
        );
    }
    let foreign = envelope(
        &a,
        "Notification",
        "n-9",
        &ses_event("Bounce", 3),
        "2",
        "arn:aws:sns:us-east-1:999999999999:other",
    );
    assert_eq!(post(&url, &[], &foreign).await, 403);
    let elsewhere = bounce.replace(&a.base, "http://127.0.0.2:9");
    assert_eq!(
        post(&url, &[], &elsewhere).await,
        403,
        "a certificate from another host"
    );
    let stored = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM provider_events")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    assert_eq!(stored().await, 0);

    for _ in 0..2 {
        assert_eq!(post(&url, &[], &bounce).await, 200);
    }
    // SignatureVersion 1 (SHA1withRSA) too.
    let delivery = envelope(
        &a,
        "Notification",
        "n-1",
        &ses_event("Delivery", 1),
        "1",
        TOPIC,
    );
    assert_eq!(post(&url, &[], &delivery).await, 200);
    assert_eq!(stored().await, 2);
    let listed: Vec<(String, String)> = sqlx::query_as("SELECT email, reason FROM suppressions")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        listed,
        [("member2@example.com".to_string(), "hard_bounce".to_string())]
    );
    assert_eq!(state_of(&pool, 1).await.0, "sent");
}

/// SES receiving with an SNS action (the mailto's mailbox): the receiving topic's handshake, a
/// `Received` notification whose subject holds the token unsubscribes its member before the
/// 200, one whose signature does not hold changes nothing, one without a token is counted.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mailto_through_ses_receiving_unsubscribes_once_its_sns_signature_holds(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let a = aws().await;
    let signer = campaign_sender::unsubscribe::Signer::new(ONE_CLICK[1].1).unwrap();
    let mut l = listeners();
    l.one_click = Some(signer.clone());
    let url = format!("{}/inbound/ses", serve_events(pool.clone(), l).await);

    let sub = envelope(&a, "SubscriptionConfirmation", "s-1", "confirm", "2", TOPIC);
    assert_eq!(post(&url, &[], &sub).await, 200);
    assert_eq!(a.confirmed.load(Ordering::SeqCst), 1);

    let received = |subject: &str| {
        json!({"notificationType": "Received",
               "mail": {"destination": ["leave@example.com"], "messageId": "in-1",
                        "commonHeaders": {"subject": subject}},
               "receipt": {"recipients": ["leave@example.com"], "action": {"type": "SNS"}}})
        .to_string()
    };
    let token = signer.token(CAMPAIGN, 2);
    let mail = envelope(
        &a,
        "Notification",
        "r-1",
        &received(&format!("unsubscribe {token}")),
        "2",
        TOPIC,
    );
    let tampered = mail.replace(&token, &signer.token(CAMPAIGN, 3));
    assert_eq!(post(&url, &[], &tampered).await, 401);
    let opted = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT member_id FROM campaign_targets WHERE opted_out_at IS NOT NULL",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert!(
        opted().await.is_empty(),
        "a tampered mail unsubscribed someone"
    );
    assert_eq!(post(&url, &[], &mail).await, 200);
    assert_eq!(opted().await, [2]);
    let listed: Option<String> =
        sqlx::query_scalar("SELECT reason FROM suppressions WHERE email = 'member2@example.com'")
            .fetch_optional(&pool)
            .await
            .unwrap();
    assert_eq!(listed.as_deref(), Some("unsubscribe"));

    let by_hand = envelope(
        &a,
        "Notification",
        "r-2",
        &received("remove me"),
        "2",
        TOPIC,
    );
    assert_eq!(post(&url, &[], &by_hand).await, 200);
    let tally: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT vendor, outcome, mails FROM inbound_mail ORDER BY outcome")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        tally,
        [
            ("ses".into(), "no_token".into(), 1),
            ("ses".into(), "unsubscribed".into(), 1)
        ]
    );
}
