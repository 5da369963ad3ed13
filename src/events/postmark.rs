//! Postmark's webhooks carry no signature: Postmark sends the basic-auth credentials of the
//! webhook URL (`https://user:pass@host/events/postmark`), checked against
//! `POSTMARK_WEBHOOK_USER` / `POSTMARK_WEBHOOK_PASSWORD` in constant time. One event per POST;
//! our data is in `Metadata`. Postmark gives no event id: the id is the record type, the
//! message and the event's own id or time (its retries repeat all three).

use axum::http::HeaderMap;
use base64::Engine as _;
use serde_json::Value;
use subtle::ConstantTimeEq as _;

use super::cause::{self, Hint};
use super::event::{member_of, text_of, time_of};
use super::inbound::{Mail, Received, Route};
use super::webhook::{Delivery, Webhook};
use super::{header, BadBody, Refused};
use super::{Event, What};
use crate::unsubscribe::Inbound;
use futures::future::BoxFuture;

/// The shortest password taken: it is the webhook's only secret (Postmark signs nothing), so
/// it must not be guessable: 16 characters at least (`openssl rand -hex 16` gives 32).
pub const MIN_PASSWORD_CHARS: usize = 16;

pub struct Postmark {
    /// `user:password`, as the Authorization header carries it after `Basic `.
    expected: Vec<u8>,
}

impl Postmark {
    /// From the webhook URL's basic-auth user and password; `Err` says what is wrong, never
    /// quoting the password.
    pub fn new(user: &str, password: &str) -> Result<Self, String> {
        if user.is_empty() || user.contains(':') {
            return Err("POSTMARK_WEBHOOK_USER must be set, without a colon".into());
        }
        if password.chars().count() < MIN_PASSWORD_CHARS {
            return Err(format!(
                "is {} characters; the webhook's only secret needs at least {MIN_PASSWORD_CHARS} (e.g. `openssl rand -hex 16`)",
                password.chars().count()
            ));
        }
        Ok(Self {
            expected: format!("{user}:{password}").into_bytes(),
        })
    }

    pub fn verify(&self, headers: &HeaderMap) -> Result<(), Refused> {
        let auth = header(headers, "authorization").ok_or(Refused::Unsigned)?;
        let b64 = auth
            .strip_prefix("Basic ")
            .or_else(|| auth.strip_prefix("basic "))
            .ok_or(Refused::Unsigned)?;
        let given = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| Refused::BadSignature)?;
        if bool::from(given.ct_eq(&self.expected)) {
            Ok(())
        } else {
            Err(Refused::BadSignature)
        }
    }
}

/// Postmark's inbound webhook: the same basic-auth credentials in the URL
/// (`https://user:pass@host/inbound/postmark`), checked before the body; the mail as JSON, its
/// recipients in `OriginalRecipient`, `ToFull[].Email` and `To`, its `Subject`.
impl Route for Postmark {
    fn vendor(&self) -> Inbound {
        Inbound::Postmark
    }
    fn check_head(&self, headers: &HeaderMap) -> Result<(), Refused> {
        self.verify(headers)
    }
    fn receive<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Received, Refused>> {
        Box::pin(async move {
            let Ok(v) = serde_json::from_slice::<Value>(body) else {
                return Ok(Received::Answer(axum::http::StatusCode::BAD_REQUEST));
            };
            let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            let full = v
                .get("ToFull")
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            let recipients = ["OriginalRecipient", "To"]
                .iter()
                .filter_map(|k| text(k))
                .chain(full.filter_map(|t| t.get("Email")?.as_str().map(str::to_string)))
                .collect();
            Ok(Received::Mail(Mail {
                recipients,
                subject: text("Subject"),
            }))
        })
    }
}

/// The event of an authenticated body.
pub fn parse(body: &[u8]) -> Result<Vec<Event>, BadBody> {
    let e: Value = serde_json::from_slice(body).map_err(|_| BadBody)?;
    let record = e.get("RecordType").and_then(Value::as_str).ok_or(BadBody)?;
    let bounce_type = e.get("Type").and_then(Value::as_str).unwrap_or_default();
    let words = e
        .get("Details")
        .or_else(|| e.get("Description"))
        .and_then(Value::as_str);
    let email = text_of(e.get("Email").or_else(|| e.get("Recipient")));
    let refusal = (record == "Bounce")
        .then(|| cause::read(email.as_deref(), None, words, Hint::Postmark(bounce_type)));
    let what = match record {
        "Delivery" => What::Delivered,
        "Bounce" => match bounce_type {
            // Whose fault, read from the server's words: the sender's refuses nobody.
            "HardBounce" | "BadEmailAddress" | "DMARCPolicy" => {
                cause::permanent(refusal.as_ref().ok_or(BadBody)?)
            }
            "ManuallyDeactivated" => What::HardBounce,
            "SpamComplaint" => What::Complaint,
            "Unsubscribe" => What::Unsubscribe,
            // "Unable to temporarily deliver": a full or unavailable mailbox, after Postmark's
            // retries. `Transient` (a delay), `DnsError`, `Blocked` (the sender's IP or
            // content) and the rest say nothing about the address.
            "SoftBounce" => What::SoftBounce,
            _ => What::Deferred,
        },
        "SpamComplaint" => What::Complaint,
        "SubscriptionChange" => {
            if e.get("SuppressSending").and_then(Value::as_bool) == Some(true) {
                match e.get("SuppressionReason").and_then(Value::as_str) {
                    Some("HardBounce") => What::HardBounce,
                    Some("SpamComplaint") => What::Complaint,
                    _ => What::Unsubscribe,
                }
            } else {
                What::Other
            }
        }
        "Open" => What::Opened,
        "Click" => What::Clicked,
        _ => What::Other,
    };
    let message = text_of(e.get("MessageID"));
    let instant = ["ID", "DeliveredAt", "BouncedAt", "ReceivedAt", "ChangedAt"]
        .iter()
        .find_map(|k| e.get(*k).filter(|v| !v.is_null()))
        .map(|v| v.to_string())
        .unwrap_or_default();
    let meta = e.get("Metadata");
    Ok(vec![Event {
        id: format!(
            "{record}:{}:{instant}",
            message.as_deref().unwrap_or_default()
        ),
        what,
        campaign_id: text_of(meta.and_then(|m| m.get("campaign_id"))),
        member_id: member_of(meta.and_then(|m| m.get("member_id"))),
        message_id: message,
        email,
        occurred_at: ["BouncedAt", "DeliveredAt", "ReceivedAt", "ChangedAt"]
            .iter()
            .find_map(|k| time_of(e.get(*k))),
        refusal,
    }])
}

impl Webhook for Postmark {
    fn vendor(&self) -> &'static str {
        "postmark"
    }
    /// Its credentials are all it signs: checked before the body.
    fn check_head(&self, headers: &HeaderMap) -> Result<(), Refused> {
        self.verify(headers)
    }
    fn receive<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>> {
        Box::pin(async move { Ok(Delivery::parsed(parse(body))) })
    }
}
