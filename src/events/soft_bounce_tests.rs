//! Which of each vendor's failures is a soft bounce (the recipient's, after the vendor's
//! retries), which a mere deferral, and the time each vendor says it happened
//! (docs/OPERATIONS.md, "Soft bounces").

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{mailgun, postmark, resend, sendgrid, sns, What};

const T: i64 = 1_765_000_000;

fn at() -> DateTime<Utc> {
    DateTime::from_timestamp(T, 0).unwrap()
}

fn one(events: Vec<super::Event>) -> (What, Option<DateTime<Utc>>) {
    assert_eq!(events.len(), 1);
    (events[0].what, events[0].occurred_at)
}

fn ses(bounce_type: &str, sub: &str) -> What {
    let m = json!({"eventType": "Bounce",
        "bounce": {"bounceType": bounce_type, "bounceSubType": sub, "timestamp": "2025-12-06T05:46:40Z",
                   "bouncedRecipients": [{"emailAddress": "a@example.com"}]},
        "mail": {"messageId": "m", "timestamp": "2025-12-06T05:40:00Z"}});
    let (what, when) = one(sns::parse_ses(&m.to_string(), "sns-1").unwrap());
    assert_eq!(when, Some(at()), "the bounce's own time, not the mail's");
    what
}

#[test]
fn ses_counts_a_final_transient_bounce_of_the_mailbox_only() {
    assert_eq!(ses("Transient", "MailboxFull"), What::SoftBounce);
    assert_eq!(ses("Transient", "General"), What::SoftBounce);
    assert_eq!(ses("Transient", "ContentRejected"), What::Deferred);
    assert_eq!(ses("Transient", "MessageTooLarge"), What::Deferred);
    assert_eq!(ses("Permanent", "General"), What::HardBounce);
    let delay = json!({"eventType": "DeliveryDelay", "deliveryDelay": {"delayType": "MailboxFull"},
                       "mail": {"messageId": "m"}});
    assert_eq!(
        one(sns::parse_ses(&delay.to_string(), "sns-2").unwrap()).0,
        What::Deferred,
        "a delay is one of SES's retries"
    );
}

fn resend_bounce(bounce_type: &str, sub: &str) -> (What, Option<DateTime<Utc>>) {
    let b = json!({"type": "email.bounced", "created_at": "2025-12-06T05:46:40.000Z",
        "data": {"email_id": "e", "to": ["a@example.com"],
                 "bounce": {"type": bounce_type, "subType": sub}}});
    one(resend::parse(b.to_string().as_bytes(), "msg_1".into()).unwrap())
}

#[test]
fn resend_keeps_ses_words_and_its_created_at() {
    assert_eq!(
        resend_bounce("Transient", "MailboxFull"),
        (What::SoftBounce, Some(at()))
    );
    assert_eq!(
        resend_bounce("Transient", "ContentRejected").0,
        What::Deferred
    );
    assert_eq!(resend_bounce("Permanent", "General").0, What::HardBounce);
}

fn postmark_bounce(kind: &str) -> (What, Option<DateTime<Utc>>) {
    let b = json!({"RecordType": "Bounce", "Type": kind, "MessageID": "pm-1", "ID": 42,
                   "Email": "a@example.com", "BouncedAt": "2025-12-06T05:46:40Z"});
    one(postmark::parse(b.to_string().as_bytes()).unwrap())
}

#[test]
fn postmark_counts_its_soft_bounce_type_only() {
    assert_eq!(
        postmark_bounce("SoftBounce"),
        (What::SoftBounce, Some(at()))
    );
    for not in ["Transient", "DnsError", "Blocked", "AutoResponder"] {
        assert_eq!(postmark_bounce(not).0, What::Deferred, "{not}");
    }
}

fn sendgrid_event(e: Value) -> (What, Option<DateTime<Utc>>) {
    one(sendgrid::parse(json!([e]).to_string().as_bytes()).unwrap())
}

#[test]
fn sendgrid_counts_a_block_with_a_mailbox_status_only() {
    let blocked = |status: &str| {
        sendgrid_event(
            json!({"event": "bounce", "type": "blocked", "status": status,
                              "sg_event_id": "e", "email": "a@example.com", "timestamp": T}),
        )
    };
    assert_eq!(blocked("4.2.2"), (What::SoftBounce, Some(at())));
    assert_eq!(blocked("4.7.1").0, What::Deferred, "our IP or content");
    let deferred = sendgrid_event(json!({"event": "deferred", "sg_event_id": "d",
                                         "email": "a@example.com", "timestamp": T}));
    assert_eq!(deferred.0, What::Deferred);
}

fn mailgun_failed(severity: &str, reason: &str, status: Value) -> What {
    let body = json!({"signature": {}, "event-data": {"id": "mg-1", "event": "failed",
        "severity": severity, "reason": reason, "timestamp": T as f64 + 0.25,
        "recipient": "a@example.com", "delivery-status": status}});
    let (what, when) = one(mailgun::parse(body.to_string().as_bytes()).unwrap());
    assert_eq!(when, Some(at() + chrono::Duration::milliseconds(250)));
    what
}

#[test]
fn mailgun_counts_its_final_give_up_on_a_mailbox_answer_only() {
    assert_eq!(
        mailgun_failed("permanent", "old", json!({"code": 452})),
        What::SoftBounce
    );
    assert_eq!(
        mailgun_failed(
            "permanent",
            "old",
            json!({"code": 421, "enhanced-code": "4.2.2"})
        ),
        What::SoftBounce
    );
    assert_eq!(
        mailgun_failed(
            "permanent",
            "old",
            json!({"code": 421, "enhanced-code": "4.7.0"})
        ),
        What::Deferred
    );
    assert_eq!(
        mailgun_failed("temporary", "generic", json!({"code": 452})),
        What::Deferred,
        "Mailgun retries it"
    );
    assert_eq!(
        mailgun_failed("permanent", "bounce", json!({"code": 550})),
        What::HardBounce
    );
}
