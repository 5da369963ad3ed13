//! SendGrid's Signed Event Webhook: ECDSA P-256 (SHA-256) over the
//! `X-Twilio-Email-Event-Webhook-Timestamp` header followed by the **raw body bytes** (its body
//! ends in CRLF: never re-serialised), the signature base64 DER in
//! `X-Twilio-Email-Event-Webhook-Signature`, the key base64 DER SPKI as SendGrid's console shows
//! it (`SENDGRID_WEBHOOK_PUBLIC_KEY`). The body is a JSON array of events; our `custom_args`
//! are top-level keys of each; `sg_event_id` is the event's id.

use axum::http::HeaderMap;
use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde_json::Value;

use super::cause::{self, Hint};
use super::event::{mailbox_status, member_of, text_of, time_of};
use super::inbound::{field, form_fields, Mail, Received, Route};
use super::webhook::{present, Delivery, Webhook};
use super::{header, BadBody, Refused};
use super::{Event, What};
use crate::unsubscribe::Inbound;
use futures::future::BoxFuture;

const SIGNATURE: &str = "x-twilio-email-event-webhook-signature";
const TIMESTAMP: &str = "x-twilio-email-event-webhook-timestamp";
/// The headers a signed request carries (checked with the head, before the body is read).
pub const SIGNED_BY: [&str; 2] = [SIGNATURE, TIMESTAMP];

/// The verifier of one account's webhook.
pub struct SendGrid {
    key: VerifyingKey,
}

impl SendGrid {
    /// From the base64 DER public key; `Err` says what is wrong with it.
    pub fn new(public_key_b64: &str) -> Result<Self, String> {
        let der = base64::engine::general_purpose::STANDARD
            .decode(public_key_b64.trim())
            .map_err(|_| "is not base64 (paste the key as SendGrid shows it)".to_string())?;
        let key = VerifyingKey::from_public_key_der(&der).map_err(|_| {
            "is not a P-256 public key (base64 DER, as SendGrid shows it)".to_string()
        })?;
        Ok(Self { key })
    }

    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), Refused> {
        let sig = header(headers, SIGNATURE).ok_or(Refused::Unsigned)?;
        let ts = header(headers, TIMESTAMP).ok_or(Refused::Unsigned)?;
        let der = base64::engine::general_purpose::STANDARD
            .decode(sig)
            .map_err(|_| Refused::BadSignature)?;
        let sig = Signature::from_der(&der).map_err(|_| Refused::BadSignature)?;
        let mut signed = Vec::with_capacity(ts.len() + body.len());
        signed.extend_from_slice(ts.as_bytes());
        signed.extend_from_slice(body);
        self.key
            .verify(&signed, &sig)
            .map_err(|_| Refused::BadSignature)
    }
}

/// SendGrid's Inbound Parse with a security policy whose signature is on: the same ECDSA
/// headers and scheme as the Event Webhook (the timestamp then the raw `multipart/form-data`
/// body), under the policy's own key (`SENDGRID_INBOUND_PUBLIC_KEY`); the mail in `envelope`
/// (JSON: `to`), `to` and `subject`, in the parsed and the raw format alike.
pub struct SendGridInbound(pub SendGrid);

impl Route for SendGridInbound {
    fn vendor(&self) -> Inbound {
        Inbound::Sendgrid
    }
    fn check_head(&self, headers: &HeaderMap) -> Result<(), Refused> {
        present(headers, &SIGNED_BY)
    }
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Received, Refused>> {
        Box::pin(async move {
            self.0.verify(headers, body)?;
            let Some(fields) = form_fields(headers, body).await else {
                return Ok(Received::Answer(axum::http::StatusCode::BAD_REQUEST));
            };
            let envelope = field(&fields, "envelope")
                .and_then(|e| serde_json::from_str::<Value>(e).ok())
                .and_then(|e| e.get("to").cloned());
            let recipients = envelope
                .iter()
                .flat_map(|to| match to {
                    Value::Array(a) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect(),
                    Value::String(s) => vec![s.clone()],
                    _ => vec![],
                })
                .chain(field(&fields, "to").map(str::to_string))
                .collect();
            let subject = field(&fields, "subject").map(str::to_string);
            Ok(Received::Mail(Mail {
                recipients,
                subject,
            }))
        })
    }
}

/// The events of a verified body.
pub fn parse(body: &[u8]) -> Result<Vec<Event>, BadBody> {
    let events: Vec<Value> = serde_json::from_slice(body).map_err(|_| BadBody)?;
    Ok(events.iter().filter_map(one).collect())
}

fn one(e: &Value) -> Option<Event> {
    let id = e.get("sg_event_id")?.as_str()?.to_string();
    let kind = e.get("event").and_then(Value::as_str).unwrap_or_default();
    let field = |k: &str| e.get(k).and_then(Value::as_str);
    let refusal = (kind == "bounce").then(|| {
        let hint = field("bounce_classification").map_or(Hint::None, Hint::SendGrid);
        cause::read(field("email"), field("status"), field("reason"), hint)
    });
    let what = match kind {
        "processed" => What::Accepted,
        "delivered" => What::Delivered,
        "deferred" => What::Deferred,
        // `blocked`: the receiving server refused for now; SendGrid does not suppress it. With a
        // mailbox status (4.2.x: full, disabled) it is the recipient's: a soft bounce; else a
        // block of our IP or content, which says nothing about the address.
        "bounce" if e.get("type").and_then(Value::as_str) == Some("blocked") => {
            if mailbox_status(e.get("status").and_then(Value::as_str)) {
                What::SoftBounce
            } else {
                What::Deferred
            }
        }
        // `bounce`: permanent; whose fault, read from its code, words and classification.
        "bounce" => cause::permanent(refusal.as_ref()?),
        "dropped" => match e.get("reason").and_then(Value::as_str) {
            Some(
                "Bounced Address" | "Unsubscribed Address" | "Spam Reporting Address" | "Invalid",
            ) => What::Dropped,
            _ => What::Other,
        },
        "spamreport" => What::Complaint,
        "unsubscribe" | "group_unsubscribe" => What::Unsubscribe,
        "open" => What::Opened,
        "click" => What::Clicked,
        _ => What::Other,
    };
    Some(Event {
        id,
        what,
        campaign_id: text_of(e.get("campaign_id")),
        member_id: member_of(e.get("member_id")),
        // The `X-Message-Id` of the 202 is the part before the first dot.
        message_id: e
            .get("sg_message_id")
            .and_then(Value::as_str)
            .and_then(|m| m.split('.').next())
            .map(str::to_string),
        email: text_of(e.get("email")),
        occurred_at: time_of(e.get("timestamp")),
        refusal,
    })
}

impl Webhook for SendGrid {
    fn vendor(&self) -> &'static str {
        "sendgrid"
    }
    fn check_head(&self, headers: &HeaderMap) -> Result<(), Refused> {
        present(headers, &SIGNED_BY)
    }
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>> {
        Box::pin(async move {
            self.verify(headers, body)?;
            Ok(Delivery::parsed(parse(body)))
        })
    }
}
