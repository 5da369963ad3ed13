//! Mailgun's webhooks: `{"signature": {timestamp, token, signature}, "event-data": {…}}`, the
//! signature the hex HMAC-SHA256 of `timestamp` + `token` keyed with the webhook signing key
//! (`MAILGUN_WEBHOOK_SIGNING_KEY`). It does **not** cover the event data, so a captured
//! signature could carry forged data: the timestamp must be within [`MAX_AGE_S`] of our clock,
//! and a token is accepted for one event only, across every replica (the store keeps tokens,
//! `store::events`). Our data is in `event-data.user-variables`; `event-data.id` is the event's id.

use axum::http::HeaderMap;
use futures::future::BoxFuture;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::cause::{self, Hint};
use super::event::{mailbox_status, member_of, text_of, time_of};
use super::inbound::{field, form_fields, Mail, Received, Route};
use super::webhook::{Delivery, Webhook};
use super::{BadBody, Refused};
use super::{Event, What};
use crate::unsubscribe::Inbound;

/// The oldest (or furthest ahead) a signature's timestamp may be, seconds.
pub const MAX_AGE_S: i64 = 300;

/// The shortest signing key taken: the keys Mailgun issues are 32 hexadecimal characters
/// (older ones `key-` and 32), so a shorter one is a mistake or a guessable stand-in.
pub const MIN_KEY_CHARS: usize = 32;

pub struct Mailgun {
    key: Vec<u8>,
}

/// A verified body: its token (accepted once) and its event.
pub struct Signed {
    pub token: String,
    pub events: Vec<Event>,
}

impl Mailgun {
    /// From the HTTP webhook signing key; `Err` says what is wrong with it, never quoting it.
    pub fn new(signing_key: &str) -> Result<Self, String> {
        let key = signing_key.trim();
        if key.chars().count() < MIN_KEY_CHARS {
            return Err(format!(
                "is {} characters; Mailgun's HTTP webhook signing key has at least {MIN_KEY_CHARS} (Sending → Webhooks → HTTP webhook signing key)",
                key.chars().count()
            ));
        }
        Ok(Self {
            key: key.as_bytes().to_vec(),
        })
    }

    /// Checks the signature in the body at `now_s` (Unix seconds) and reads the event.
    pub fn verify(&self, body: &[u8], now_s: i64) -> Result<Signed, Refused> {
        let v: Value = serde_json::from_slice(body).map_err(|_| Refused::Unsigned)?;
        let s = v.get("signature").ok_or(Refused::Unsigned)?;
        let field = |k: &str| s.get(k).and_then(Value::as_str).ok_or(Refused::Unsigned);
        let (ts, token, sig) = (field("timestamp")?, field("token")?, field("signature")?);
        self.check(ts, token, sig, now_s)?;
        let events = v
            .get("event-data")
            .map(one)
            .transpose()
            .map_err(|_| Refused::Unsigned)?
            .into_iter()
            .collect();
        Ok(Signed {
            token: token.to_string(),
            events,
        })
    }
}

impl Mailgun {
    /// The signature of `timestamp` + `token` under the key, its timestamp within
    /// [`MAX_AGE_S`] of `now_s`: what Mailgun signs, in its webhooks and its routes' posts.
    fn check(&self, ts: &str, token: &str, sig: &str, now_s: i64) -> Result<(), Refused> {
        let at: i64 = ts.parse().map_err(|_| Refused::BadSignature)?;
        if (now_s - at).abs() > MAX_AGE_S {
            return Err(Refused::Stale);
        }
        let theirs = hex::decode(sig).map_err(|_| Refused::BadSignature)?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(ts.as_bytes());
        mac.update(token.as_bytes());
        mac.verify_slice(&theirs).map_err(|_| Refused::BadSignature)
    }
}

/// A route's `forward()` (inbound mail): a form, `application/x-www-form-urlencoded` or
/// `multipart/form-data` with attachments, whose `timestamp`, `token` and `signature` fields
/// are signed as the webhooks' are; the mail in `recipient`, `To` and `subject`.
impl Route for Mailgun {
    fn vendor(&self) -> Inbound {
        Inbound::Mailgun
    }
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now_s: i64,
    ) -> BoxFuture<'a, Result<Received, Refused>> {
        Box::pin(async move {
            let fields = form_fields(headers, body).await.ok_or(Refused::Unsigned)?;
            let signed = |k: &str| field(&fields, k).ok_or(Refused::Unsigned);
            let (ts, token, sig) = (signed("timestamp")?, signed("token")?, signed("signature")?);
            self.check(ts, token, sig, now_s)?;
            let recipients = ["recipient", "To"]
                .iter()
                .filter_map(|k| field(&fields, k).map(str::to_string))
                .collect();
            let subject = field(&fields, "subject").map(str::to_string);
            Ok(Received::Mail(Mail {
                recipients,
                subject,
            }))
        })
    }
}

/// Parses a body whose signature is already checked (the benchmark and the tests use it).
pub fn parse(body: &[u8]) -> Result<Vec<Event>, BadBody> {
    let v: Value = serde_json::from_slice(body).map_err(|_| BadBody)?;
    Ok(vec![one(v.get("event-data").ok_or(BadBody)?)?])
}

fn one(e: &Value) -> Result<Event, BadBody> {
    let id = e
        .get("id")
        .and_then(Value::as_str)
        .ok_or(BadBody)?
        .to_string();
    let kind = e.get("event").and_then(Value::as_str).unwrap_or_default();
    let reason = e.get("reason").and_then(Value::as_str).unwrap_or_default();
    let refusal = (kind == "failed").then(|| {
        let status = e.get("delivery-status");
        let words = |k: &str| status.and_then(|s| s.get(k)).and_then(Value::as_str);
        let code = words("enhanced-code");
        let text = [words("message"), words("description")]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        let email = e.get("recipient").and_then(Value::as_str);
        cause::read(email, code, Some(&text), Hint::Mailgun(reason))
    });
    let what = match kind {
        "accepted" => What::Accepted,
        "delivered" => What::Delivered,
        "failed" => match (
            e.get("severity").and_then(Value::as_str),
            e.get("reason").and_then(Value::as_str),
        ) {
            // Not sent: the address is on Mailgun's own lists.
            (_, Some("suppress-bounce" | "suppress-unsubscribe" | "suppress-complaint")) => {
                What::Dropped
            }
            // `old`: Mailgun gave up retrying temporary failures — its final word on the
            // message, the recipient's when the last answer was about the mailbox.
            (Some("permanent"), Some("old")) if recipients_mailbox(e) => What::SoftBounce,
            (Some("permanent"), Some("old")) => What::Deferred,
            (Some("permanent"), _) => cause::permanent(refusal.as_ref().ok_or(BadBody)?),
            // A temporary failure: Mailgun retries the message (each retry is one of these).
            _ => What::Deferred,
        },
        "opened" => What::Opened,
        "clicked" => What::Clicked,
        "unsubscribed" => What::Unsubscribe,
        "complained" => What::Complaint,
        _ => What::Other,
    };
    let vars = e.get("user-variables");
    Ok(Event {
        id,
        what,
        campaign_id: text_of(vars.and_then(|v| v.get("campaign_id"))),
        member_id: member_of(vars.and_then(|v| v.get("member_id"))),
        // Events name the message without the `<>` the send's answer had; so does the row.
        message_id: text_of(e.pointer("/message/headers/message-id")),
        email: text_of(e.get("recipient")),
        occurred_at: time_of(e.get("timestamp")),
        refusal,
    })
}

/// Whether Mailgun's last answer for the message was about the recipient's mailbox: its
/// enhanced code 4.2.x / 5.2.x, or without one the SMTP codes of a mailbox unavailable or full
/// (450, 452, 552).
fn recipients_mailbox(e: &Value) -> bool {
    let status = e.get("delivery-status");
    match status
        .and_then(|s| s.get("enhanced-code"))
        .and_then(Value::as_str)
    {
        Some(code) => mailbox_status(Some(code)),
        None => matches!(
            status.and_then(|s| s.get("code")).and_then(Value::as_i64),
            Some(450 | 452 | 552)
        ),
    }
}

impl Webhook for Mailgun {
    fn vendor(&self) -> &'static str {
        "mailgun"
    }
    fn receive<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        body: &'a [u8],
        now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>> {
        Box::pin(async move {
            let Signed { token, events } = self.verify(body, now_s)?;
            Ok(Delivery::Events {
                events,
                token: Some(token),
            })
        })
    }
}
