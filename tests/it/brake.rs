//! The mailbox providers' lines: the brake that pauses a campaign over its complaint or
//! hard-bounce line (src/store/brake.rs), and soft bounces that age into a suppression
//! (src/store/soft_bounces.rs), through the real `events` server and the real worker.

use std::time::{Duration, Instant};

use campaign_sender::store::campaigns;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;

/// A SendGrid batch of `events`, signed, posted; its answer.
async fn sendgrid(url: &str, events: Value) -> u16 {
    let body = events.to_string();
    post(url, &sendgrid_signed(&body, &now_s().to_string()), &body).await
}

fn complaint(id: &str, member: i64) -> Value {
    json!({"email": format!("member{member}@example.com"), "event": "spamreport",
           "sg_event_id": id, "campaign_id": CAMPAIGN, "member_id": member.to_string()})
}

fn hard_bounce(id: &str, member: i64) -> Value {
    json!({"email": format!("member{member}@example.com"), "event": "bounce", "type": "bounce",
           "sg_event_id": id, "campaign_id": CAMPAIGN, "member_id": member.to_string()})
}

/// A SendGrid `blocked` bounce of `email` for message `message`, `days_ago` by its timestamp.
fn blocked(id: &str, email: &str, message: &str, status: &str, days_ago: i64) -> Value {
    json!({"email": email, "event": "bounce", "type": "blocked", "status": status,
           "sg_event_id": id, "sg_message_id": format!("{message}.filter0001.1"),
           "timestamp": now_s() - days_ago * 86_400})
}

async fn pause_of(pool: &PgPool) -> Option<(String, String)> {
    sqlx::query_as("SELECT paused_by, pause_reason FROM campaigns WHERE campaign_id = $1 AND paused_at IS NOT NULL")
        .bind(CAMPAIGN)
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn tally_sent(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT coalesce(max(sent), 0) FROM campaign_tallies WHERE campaign_id = $1")
        .bind(CAMPAIGN)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn set_sent(pool: &PgPool, sent: i64) {
    sqlx::query(
        "INSERT INTO campaign_tallies (campaign_id, sent) VALUES ($1, $2)
         ON CONFLICT (campaign_id) DO UPDATE SET sent = excluded.sent",
    )
    .bind(CAMPAIGN)
    .bind(sent)
    .execute(pool)
    .await
    .unwrap();
}

/// The real worker sends; the complaint that puts the campaign over its line is answered 200
/// only once the pause is committed with it; the run stops with exit 3, no send starts after
/// `PAUSE_POLL_MS`, and the tally counted every row written `sent`.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_complaint_over_the_line_pauses_the_sending_campaign_at_once(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3000).await;
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let p = slow_provider(150).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 400;
    let pause_poll = Duration::from_millis(cfg.pause_poll_ms);
    let w = worker(&pool, cfg).await;
    let run = tokio::spawn(async move { w.run(Default::default()).await });
    until_some(Duration::from_secs(60), "1000 sent", || async {
        (tally_sent(&pool).await >= 1000).then_some(())
    })
    .await;
    assert_eq!(pause_of(&pool).await, None);

    // One complaint in 1000 and more is 0.1 % or less: over 0.08 %.
    let sent_at = Instant::now();
    assert_eq!(sendgrid(&url, json!([complaint("c-1", 1)])).await, 200);
    let paused_ms = unix_ms_now();
    assert!(sent_at.elapsed() < Duration::from_secs(2));
    let (by, reason) = pause_of(&pool).await.expect("not paused by the complaint");
    assert_eq!(by, "brake");
    assert!(
        reason.starts_with("complaint rate 0.") && reason.ends_with(" over 0.08 %"),
        "{reason}"
    );

    stopped_by_the_brake(run, &p, paused_ms, pause_poll).await;
    let sent = *states(&pool).await.get("sent").unwrap();
    assert!(sent < 3000);
    assert_eq!(
        tally_sent(&pool).await,
        sent,
        "the tally missed rows written sent"
    );
}

/// Nothing pauses below `BRAKE_MIN_SENT`, nor at the line itself; a member's repeated
/// complaint counts once; the one over the line pauses with the measured rate, the counts and
/// the line. After `resume`, a campaign's own lines (`configure`) hold it: a hard bounce over
/// its own bounce line pauses it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_brake_waits_for_its_minimum_counts_each_member_once_and_keeps_own_lines(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20).await;
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    set_sent(&pool, 999).await;
    let early: Vec<Value> = (1..=5).map(|m| complaint(&format!("a-{m}"), m)).collect();
    assert_eq!(sendgrid(&url, Value::Array(early)).await, 200);
    assert_eq!(pause_of(&pool).await, None, "paused below BRAKE_MIN_SENT");

    set_sent(&pool, 10_000).await;
    let at_line: Vec<Value> = (6..=8).map(|m| complaint(&format!("b-{m}"), m)).collect();
    assert_eq!(sendgrid(&url, Value::Array(at_line)).await, 200);
    assert_eq!(
        sendgrid(&url, json!([complaint("b-8-again", 8)])).await,
        200
    );
    assert_eq!(
        pause_of(&pool).await,
        None,
        "paused at the line, or counted a member twice"
    );

    assert_eq!(sendgrid(&url, json!([complaint("c-9", 9)])).await, 200);
    assert_eq!(
        pause_of(&pool).await,
        Some((
            "brake".into(),
            "complaint rate 0.09 % (9 of 10 000) over 0.08 %".into()
        ))
    );

    campaigns::resume(&pool, CAMPAIGN).await.unwrap().unwrap();
    let own = campaigns::SettingsChange {
        complaint_line: Some(0.005),
        bounce_line: Some(0.0001),
        ..Default::default()
    };
    campaigns::set_settings(&pool, CAMPAIGN, &own)
        .await
        .unwrap();
    assert_eq!(sendgrid(&url, json!([complaint("c-10", 10)])).await, 200);
    assert_eq!(
        pause_of(&pool).await,
        None,
        "the campaign's own line was ignored"
    );
    assert_eq!(sendgrid(&url, json!([hard_bounce("h-11", 11)])).await, 200);
    assert_eq!(pause_of(&pool).await, None, "one in 10 000 is at its line");
    assert_eq!(sendgrid(&url, json!([hard_bounce("h-12", 12)])).await, 200);
    assert_eq!(
        pause_of(&pool).await,
        Some((
            "brake".into(),
            "hard-bounce rate 0.02 % (2 of 10 000) over 0.01 %".into()
        ))
    );
}

async fn listed_for(pool: &PgPool, email: &str) -> Option<(String, Option<String>)> {
    sqlx::query_as("SELECT reason, source FROM suppressions WHERE email = $1")
        .bind(email)
        .fetch_optional(pool)
        .await
        .unwrap()
}

/// The third soft bounce within the window suppresses (reason `soft_bounce`); a vendor's
/// retries of one message count once; soft bounces older than the window count no more; a
/// block of our IP or content (4.7.x) is never the address's.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn soft_bounces_suppress_at_the_third_within_the_window_and_age_out(pool: PgPool) {
    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let full = "full@example.com";
    let first_two = json!([
        blocked("s-1", full, "m1", "4.2.2", 3),
        blocked("s-2", full, "m2", "4.2.2", 2),
        // SendGrid's retry of m2 under another event id: the same message.
        blocked("s-2b", full, "m2", "4.2.2", 2),
    ]);
    assert_eq!(sendgrid(&url, first_two).await, 200);
    assert_eq!(
        listed_for(&pool, full).await,
        None,
        "two messages listed it"
    );
    assert_eq!(
        sendgrid(
            &url,
            json!([blocked("s-3", "FULL@example.com", "m3", "4.2.2", 1)])
        )
        .await,
        200
    );
    assert_eq!(
        listed_for(&pool, full).await,
        Some(("soft_bounce".into(), Some("sendgrid".into())))
    );

    let spread = "spread@example.com";
    let wide = json!([
        blocked("w-1", spread, "n1", "4.2.2", 20),
        blocked("w-2", spread, "n2", "4.2.2", 10),
        blocked("w-3", spread, "n3", "4.2.2", 0),
    ]);
    assert_eq!(sendgrid(&url, wide).await, 200);
    assert_eq!(
        listed_for(&pool, spread).await,
        None,
        "old soft bounces counted"
    );

    let ours = "blocked@example.com";
    let blocks: Vec<Value> = (1..=4)
        .map(|i| blocked(&format!("k-{i}"), ours, &format!("k{i}"), "4.7.1", 0))
        .collect();
    assert_eq!(sendgrid(&url, Value::Array(blocks)).await, 200);
    assert_eq!(
        listed_for(&pool, ours).await,
        None,
        "a block of the sender listed the address"
    );

    // A time before the epoch is long ago, never now: three of them list nobody.
    let early = "early@example.com";
    let negative: Vec<Value> = (1..=3)
        .map(|i| {
            let mut e = blocked(&format!("n-{i}"), early, &format!("e{i}"), "4.2.2", 0);
            e["timestamp"] = json!(-i * 1000);
            e
        })
        .collect();
    assert_eq!(sendgrid(&url, Value::Array(negative)).await, 200);
    assert_eq!(
        listed_for(&pool, early).await,
        None,
        "a time before 1970 counted as now"
    );

    // Pruned past the window: only the two recent ones of `spread` and the three of `full`.
    campaign_sender::store::soft_bounces::prune(&pool, 7 * 86_400)
        .await
        .unwrap();
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM soft_bounces")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 4, "3 of full, 1 of spread");
}

/// The upgrade's repair: a tally that drifted from the rows (`resolve --assume-sent` once added
/// nothing) is set to the sent rows, in the work table and archived; a right one is not written.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_drifted_tally_is_repaired_from_the_sent_rows_and_the_archive(pool: PgPool) {
    seed(&pool, "drifted", 20).await;
    seed(&pool, "right", 5).await;
    sqlx::query(
        "UPDATE campaign_targets SET state = 'sent', sent_at = now()
          WHERE campaign_id = 'right' OR member_id <= 12",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO campaign_archive (campaign_id, member_id, outcome, attempts)
         SELECT 'drifted', 100 + g, CASE WHEN g <= 8 THEN 'sent' ELSE 'failed' END, 1
           FROM generate_series(1, 10) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO campaign_tallies (campaign_id, sent) VALUES ('drifted', 12), ('right', 5)
         ON CONFLICT (campaign_id) DO UPDATE SET sent = excluded.sent",
    )
    .execute(&pool)
    .await
    .unwrap();
    let repair = include_str!("../../migrations/20261207000014_tallies_are_the_rows.sql");
    let done = sqlx::raw_sql(repair).execute(&pool).await.unwrap();
    assert_eq!(done.rows_affected(), 1, "only the drifted tally is written");
    let tallies: Vec<(String, i64)> =
        sqlx::query_as("SELECT campaign_id, sent FROM campaign_tallies ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(tallies, [("drifted".into(), 20), ("right".into(), 5)]);
}
