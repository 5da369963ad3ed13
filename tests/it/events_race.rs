//! The vendors' events when requests race or a batch holds an odd event: a Mailgun retry
//! reaching two replicas at once is a retry on both (never a false `replayed`), and an event
//! the database cannot store costs none of its neighbours.

use std::time::Duration;

use campaign_sender::events::{Event, What};
use campaign_sender::store::events::{record, NotRecorded};
use serde_json::json;
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;

fn bounce(id: &str, member: i64) -> Event {
    Event {
        id: id.into(),
        what: What::HardBounce,
        campaign_id: Some(CAMPAIGN.into()),
        member_id: Some(member),
        message_id: None,
        email: Some(format!("member{member}@example.com")),
        occurred_at: None,
        refusal: None,
    }
}

/// Replica A has taken the token and not yet committed when replica B, given the same retry,
/// takes it too: B waits for A's commit and then sees a retry of the same event, not a replay.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mailgun_retry_reaching_two_replicas_at_once_is_a_retry_on_both(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2).await;
    let events = [bounce("mg-1", 1)];
    let mut a = pool.begin().await.unwrap();
    sqlx::query("INSERT INTO webhook_tokens (token, event_id) VALUES ('tok-1', 'mg-1')")
        .execute(&mut *a)
        .await
        .unwrap();
    let b = {
        let (pool, events) = (pool.clone(), events.clone());
        tokio::spawn(async move {
            record(
                &pool,
                "mailgun",
                &events,
                Some("tok-1"),
                &campaign_sender::config::BrakeConfig::default().rules(),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!b.is_finished(), "B did not wait for A's uncommitted token");
    a.commit().await.unwrap();
    let got = b.await.unwrap();
    assert!(
        got.is_ok(),
        "a retry racing another replica was refused: {got:?}"
    );
    // The same token for another event is still a replay.
    let other = record(
        &pool,
        "mailgun",
        &[bounce("mg-2", 2)],
        Some("tok-1"),
        &campaign_sender::config::BrakeConfig::default().rules(),
    )
    .await;
    assert!(matches!(other, Err(NotRecorded::TokenReused)), "{other:?}");
}

/// A signed SendGrid batch with an empty `sg_event_id` and an email holding a NUL next to a
/// valid hard bounce: the bounce is stored and the batch answered 200, once and on retry; a
/// Resend event with an empty `svix-id` is answered 200 with nothing stored.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_event_that_cannot_be_stored_costs_none_of_its_neighbours(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let body = json!([
        {"email": "member1@example.com", "event": "bounce", "type": "bounce", "sg_event_id": "",
         "campaign_id": CAMPAIGN, "member_id": "1"},
        {"email": "member2\u{0}@example.com", "event": "bounce", "type": "bounce",
         "sg_event_id": "ev-nul", "campaign_id": CAMPAIGN, "member_id": "2"},
        {"email": "member3@example.com", "event": "bounce", "type": "bounce", "sg_event_id": "ev-3",
         "campaign_id": CAMPAIGN, "member_id": "3"}
    ])
    .to_string();
    let url = format!("{base}/events/sendgrid");
    let signed = sendgrid_signed(&body, &now_s().to_string());
    for attempt in ["first", "the vendor's retry"] {
        assert_eq!(post(&url, &signed, &body).await, 200, "{attempt}");
    }
    assert_eq!(stored(&pool).await, 1);
    assert_eq!(
        listed(&pool).await,
        [(
            "member3@example.com".into(),
            "hard_bounce".into(),
            Some("sendgrid".into())
        )]
    );

    let delivered = json!({"type": "email.delivered", "data": {"email_id": "e-1",
        "to": ["member1@example.com"], "tags": {"campaign_id": CAMPAIGN, "member_id": "1"}}})
    .to_string();
    let url = format!("{base}/events/resend");
    let code = post(&url, &resend_signed("", now_s(), &delivered), &delivered).await;
    assert_eq!(code, 200);
    assert_eq!(stored(&pool).await, 1);
}
