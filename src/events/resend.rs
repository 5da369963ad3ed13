//! Resend's webhooks, signed as Svix / Standard Webhooks sign them: HMAC-SHA256 keyed with the
//! base64-decoded part of `whsec_…` (`RESEND_WEBHOOK_SECRET`) over `{svix-id}.{svix-timestamp}.{raw
//! body}`, base64, in `svix-signature` as a space-separated list of `v1,<sig>` (one match
//! suffices: a secret mid-rotation signs twice); `svix-timestamp` within five minutes of our
//! clock either way. One event per POST; `svix-id` is its id (Svix's retries repeat it).

use axum::http::HeaderMap;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::cause::{self, Hint};
use super::event::{member_of, text_of, time_of};
use super::webhook::{present, Delivery, Webhook};
use super::{header, BadBody, Refused};
use super::{Event, What};
use futures::future::BoxFuture;

/// The Standard Webhooks tolerance: a timestamp further than this from our clock is refused.
pub const TOLERANCE_S: i64 = 300;
/// The headers a signed request carries (checked with the head, before the body is read).
pub const SIGNED_BY: [&str; 3] = ["svix-id", "svix-timestamp", "svix-signature"];

/// The shortest key taken, decoded: Standard Webhooks asks for 24 to 64 random bytes, and
/// the secrets Resend (Svix) issues are 24.
pub const MIN_KEY_BYTES: usize = 24;

pub struct Resend {
    key: Vec<u8>,
}

impl Resend {
    /// From `whsec_<base64>`; `Err` says what is wrong with it.
    pub fn new(secret: &str) -> Result<Self, String> {
        let b64 = secret
            .trim()
            .strip_prefix("whsec_")
            .ok_or("must start with whsec_ (the signing secret Resend shows for the webhook)")?;
        let key = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| "is not whsec_ followed by base64".to_string())?;
        if key.len() < MIN_KEY_BYTES {
            return Err(format!(
                "decodes to {} bytes; a secret Resend issues has at least {MIN_KEY_BYTES} (copy the webhook's signing secret whole)",
                key.len()
            ));
        }
        Ok(Self { key })
    }

    /// Checks the signature over the raw body at `now_s` (Unix seconds); returns the event id.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<String, Refused> {
        let id = header(headers, "svix-id").ok_or(Refused::Unsigned)?;
        let ts = header(headers, "svix-timestamp").ok_or(Refused::Unsigned)?;
        let sigs = header(headers, "svix-signature").ok_or(Refused::Unsigned)?;
        let at: i64 = ts.parse().map_err(|_| Refused::BadSignature)?;
        if (now_s - at).abs() > TOLERANCE_S {
            return Err(Refused::Stale);
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(ts.as_bytes());
        mac.update(b".");
        mac.update(body);
        // Constant time: `verify_slice` compares without an early exit.
        let matches = sigs
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .any(|theirs| mac.clone().verify_slice(&theirs).is_ok());
        if matches {
            Ok(id.to_string())
        } else {
            Err(Refused::BadSignature)
        }
    }
}

/// The event of a verified body; `id` is its `svix-id`.
pub fn parse(body: &[u8], id: String) -> Result<Vec<Event>, BadBody> {
    let e: Value = serde_json::from_slice(body).map_err(|_| BadBody)?;
    let data = e.get("data").ok_or(BadBody)?;
    let kind = e.get("type").and_then(Value::as_str).unwrap_or_default();
    // Resend keeps SES's words and no status: whose fault, read from its message.
    let refusal = (kind == "email.bounced").then(|| {
        let bounce = |k: &str| {
            data.pointer(&format!("/bounce/{k}"))
                .and_then(Value::as_str)
        };
        let to = text_of(data.get("to"));
        let hint = bounce("subType").map_or(Hint::None, Hint::Ses);
        cause::read(to.as_deref(), None, bounce("message"), hint)
    });
    let what = match kind {
        "email.sent" => What::Accepted,
        "email.delivered" => What::Delivered,
        "email.delivery_delayed" => What::Deferred,
        "email.bounced" => match (
            data.pointer("/bounce/type").and_then(Value::as_str),
            data.pointer("/bounce/subType").and_then(Value::as_str),
        ) {
            (Some("Permanent"), _) => cause::permanent(refusal.as_ref().ok_or(BadBody)?),
            // Resend sends through SES and keeps its words: see `sns::transient`.
            (Some("Transient"), sub) if super::sns::recipients_transient(sub) => What::SoftBounce,
            _ => What::Deferred,
        },
        "email.complained" => What::Complaint,
        "email.suppressed" => What::Dropped,
        "email.opened" => What::Opened,
        "email.clicked" => What::Clicked,
        // `email.failed` (e.g. reached_daily_quota): not sent, settles nothing.
        _ => What::Other,
    };
    let tags = data.get("tags");
    let tag = |name: &str| match tags {
        // An object, as Resend sends them back…
        Some(Value::Object(m)) => m.get(name).cloned(),
        // …or the array of {name, value} they were sent as.
        Some(Value::Array(a)) => a
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|t| t.get("value").cloned()),
        _ => None,
    };
    Ok(vec![Event {
        id,
        what,
        campaign_id: text_of(tag("campaign_id").as_ref()),
        member_id: member_of(tag("member_id").as_ref()),
        message_id: text_of(data.get("email_id")),
        email: text_of(data.get("to")),
        occurred_at: time_of(e.get("created_at")),
        refusal,
    }])
}

impl Webhook for Resend {
    fn vendor(&self) -> &'static str {
        "resend"
    }
    fn check_head(&self, headers: &HeaderMap) -> Result<(), Refused> {
        present(headers, &SIGNED_BY)
    }
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>> {
        Box::pin(async move {
            let id = self.verify(headers, body, now_s)?;
            Ok(Delivery::parsed(parse(body, id)))
        })
    }
}
