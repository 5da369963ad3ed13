//! The sender's brake (src/store/brake.rs `weigh_refusals`): refusals of our own domain at one
//! mailbox provider pause the campaign in the event's own transaction, with no minimum sent,
//! and suppress nobody; under the count, or under the share of that provider's mails, nothing
//! pauses. The provider families of SQL and Rust agree.

use std::time::{Duration, Instant};

use campaign_sender::store::event::Family;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;
use crate::vendors::{base_of, configure_sender, vendor_config};

/// `n` members of the campaign at Gmail.
async fn seed_gmail(pool: &PgPool, n: i64) {
    seed_at(pool, CAMPAIGN, n, "gmail.com").await;
}

/// Gmail refusing our domain as unauthenticated, for `member`, as SendGrid reports it.
fn unauthenticated(member: i64) -> Value {
    json!({"email": format!("member{member}@gmail.com"), "event": "bounce", "type": "bounce",
           "status": "5.7.26", "bounce_classification": "Technical",
           "reason": "550-5.7.26 Unauthenticated email from example.com is not accepted due to domain's DMARC policy",
           "sg_event_id": format!("auth-{member}"), "campaign_id": CAMPAIGN,
           "member_id": member.to_string(), "timestamp": now_s()})
}

async fn sendgrid(url: &str, events: Vec<Value>) -> u16 {
    let body = Value::Array(events).to_string();
    post(url, &sendgrid_signed(&body, &now_s().to_string()), &body).await
}

async fn pause_of(pool: &PgPool) -> Option<(String, String)> {
    sqlx::query_as("SELECT paused_by, pause_reason FROM campaigns WHERE campaign_id = $1 AND paused_at IS NOT NULL")
        .bind(CAMPAIGN)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn sent_to_google(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce((SELECT sent FROM campaign_family_tallies
                           WHERE campaign_id = $1 AND family = 'google'), 0)",
    )
    .bind(CAMPAIGN)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn listed(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM suppressions")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The real worker sends to Gmail addresses through the SendGrid profile; at a few hundred sent (under `BRAKE_MIN_SENT`),
/// twelve Gmail 5.7.26 refusals of twelve members in one batch are answered 200 only after
/// the pause is committed; no send starts later than `PAUSE_POLL_MS` after it, the run exits
/// 3, nobody is suppressed, and the reason names Gmail, the cause and the code.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn twelve_refusals_of_our_domain_at_gmail_pause_the_campaign_and_list_nobody(pool: PgPool) {
    seed_gmail(&pool, 3000).await;
    configure_sender(&pool).await;
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let (code, _, err) = finish(
        spawn_sender(
            &[
                "configure",
                "--campaign",
                CAMPAIGN,
                "--max-sender-refusals",
                "10",
            ],
            &operator_url(&pool).await,
            &[],
        ),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    // Sending through the SendGrid profile, as the vendor's webhook reports back.
    let p = slow_provider(150).await;
    let mut cfg = vendor_config("sendgrid", &base_of(&p), &[]);
    cfg.mail_rate_per_s = 400;
    let pause_poll = Duration::from_millis(cfg.pause_poll_ms);
    let w = worker(&pool, cfg).await;
    let run = tokio::spawn(async move { w.run(Default::default()).await });
    until_some(Duration::from_secs(60), "300 sent to Gmail", || async {
        (sent_to_google(&pool).await >= 300).then_some(())
    })
    .await;
    assert_eq!(pause_of(&pool).await, None);

    let t0 = Instant::now();
    assert_eq!(
        sendgrid(&url, (1..=12).map(unauthenticated).collect()).await,
        200
    );
    let paused_ms = unix_ms_now();
    assert!(t0.elapsed() < Duration::from_secs(2));
    let (by, reason) = pause_of(&pool)
        .await
        .expect("answered 200 before the pause");
    assert_eq!(by, "brake");
    assert!(
        reason.starts_with("Gmail refuses our mail: authentication (5.7.26), 12 members of ")
            && reason.contains("check SPF, DKIM and DMARC"),
        "{reason}"
    );
    stopped_by_the_brake(run, &p, paused_ms, pause_poll).await;
    assert_eq!(
        listed(&pool).await,
        0,
        "a refusal of our domain listed a subscriber"
    );
    let status = spawn_sender(
        &["status", "--campaign", CAMPAIGN],
        &operator_url(&pool).await,
        &[],
    );
    let (_, out, _) = finish(status, Duration::from_secs(20)).await;
    assert!(
        out.contains("Gmail refuses our mail: authentication"),
        "{out}"
    );
    // The campaign by provider: Gmail's sent, its refusals by cause, and its complaint rate
    // as Gmail gives it (only in Postmaster Tools), never 0.00 %.
    let gmail = out
        .lines()
        .find(|l| l.starts_with("provider   Gmail:"))
        .unwrap_or_else(|| panic!("no Gmail line: {out}"));
    assert!(gmail.contains("refused 12 (authentication 12)"), "{gmail}");
    assert!(
        gmail.contains("complaints not reported — Postmaster Tools"),
        "{gmail}"
    );
    assert!(!gmail.contains("sent 0 "), "{gmail}");
    let json = spawn_sender(
        &["status", "--campaign", CAMPAIGN, "--json"],
        &operator_url(&pool).await,
        &[],
    );
    let (_, out, _) = finish(json, Duration::from_secs(20)).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    let providers = v["providers"].as_array().expect("providers in --json");
    assert_eq!(providers[0]["family"], "google");
    assert_eq!(providers[0]["complaint_rate"], Value::Null);
}

/// Under the line (5 of a line of 10), or at the line but under its share of the provider's
/// mails (10 refusals of 2 000 Gmail mails is 0.5 %), nothing pauses; a member's repeated
/// refusal counts once; the fleet's line, `MAX_SENDER_REFUSALS`, holds without `configure`.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn under_the_count_or_under_its_share_nothing_pauses(pool: PgPool) {
    seed_gmail(&pool, 3000).await;
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let set_sent = |n: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "INSERT INTO campaign_family_tallies (campaign_id, family, sent) VALUES ($1, 'google', $2)
                 ON CONFLICT (campaign_id, family) DO UPDATE SET sent = excluded.sent",
            )
            .bind(CAMPAIGN)
            .bind(n)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    set_sent(300).await;
    assert_eq!(
        sendgrid(&url, (1..=5).map(unauthenticated).collect()).await,
        200
    );
    assert_eq!(
        sendgrid(&url, (1..=5).map(unauthenticated).collect()).await,
        200,
        "a repeat"
    );
    let repeated: Vec<Value> = (1..=5)
        .map(|m| {
            let mut e = unauthenticated(m);
            e["sg_event_id"] = json!(format!("again-{m}"));
            e
        })
        .collect();
    assert_eq!(sendgrid(&url, repeated).await, 200);
    assert_eq!(
        pause_of(&pool).await,
        None,
        "five members are under the line of ten"
    );

    set_sent(2000).await;
    assert_eq!(
        sendgrid(&url, (6..=10).map(unauthenticated).collect()).await,
        200
    );
    assert_eq!(pause_of(&pool).await, None, "10 of 2 000 is under 1 %");
    assert_eq!(
        sendgrid(&url, (11..=20).map(unauthenticated).collect()).await,
        200
    );
    let (_, reason) = pause_of(&pool).await.expect("20 of 2 000 reaches 1 %");
    assert!(reason.contains("20 members of 2 000"), "{reason}");
    assert_eq!(listed(&pool).await, 0);
}

/// `mailbox_family()` (SQL: the finish counts mails per provider with it) and `Family::of`
/// (Rust: the cause table reads a provider's codes by it) agree on every kind of domain.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_sql_and_the_rust_provider_families_agree(pool: PgPool) {
    let addresses: Vec<String> = [
        "a@gmail.com",
        "a@GMAIL.COM.",
        "a@googlemail.com",
        "a@outlook.com",
        "a@hotmail.co.uk",
        "a@live.fr",
        "a@msn.com",
        "a@live.mycompany.com",
        "a@yahoo.com",
        "a@yahoo.co.jp",
        "a@aol.com",
        "a@ymail.com",
        "a@icloud.com",
        "a@me.com",
        "a@mac.com",
        "a@example.com",
        "a@gmail.com.evil.org",
        "no-at-sign",
        "gmail.com",
        "a@b@gmail.com",
        "a@hotmail.",
        "a@",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sql: Vec<String> = sqlx::query_scalar(
        "SELECT mailbox_family(a) FROM unnest($1::text[]) WITH ORDINALITY AS x(a, n) ORDER BY n",
    )
    .bind(&addresses)
    .fetch_all(&pool)
    .await
    .unwrap();
    for (a, s) in addresses.iter().zip(&sql) {
        assert_eq!(Family::of(a).as_str(), s, "{a}");
    }
}
