//! SES events through an SNS HTTPS subscription. SNS signs each message with RSA —
//! `SignatureVersion` 1 SHA1withRSA, 2 SHA256withRSA — over `Key\nValue\n` lines of its fields
//! ([`string_to_sign`]), with the certificate at `SigningCertURL`. We trust a certificate only
//! from a URL matching `SNS_CERT_URL_PATTERN` (default: AWS's SNS hosts over HTTPS), fetch it
//! once and keep it; accept only the topics of `SNS_TOPIC_ARNS`; and confirm a subscription
//! ourselves by fetching its `SubscribeURL` (same pattern) once its signature holds. The SES
//! event is the JSON string in `Message`; our tags arrive as arrays (`mail.tags.campaign_id[0]`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use regex::Regex;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey as _;
use rsa::signature::Verifier as _;
use rsa::RsaPublicKey;
use serde::Deserialize;
use serde_json::Value;
use x509_cert::der::{DecodePem as _, Encode as _};
use x509_cert::Certificate;

use super::cause::{self, Hint};
use super::event::{member_of, text_of, time_of};
use super::inbound::{Mail, Received, Route};
use super::webhook::{Delivery, Webhook};
use super::{BadBody, Refused};
use super::{Event, What};
use crate::unsubscribe::Inbound;
use axum::http::{HeaderMap, StatusCode};
use futures::future::BoxFuture;
use tracing::{info, warn};

/// `SNS_CERT_URL_PATTERN`'s default: SNS's own hosts, over HTTPS, a `.pem` path.
pub const DEFAULT_CERT_URL_PATTERN: &str =
    r"^https://sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/[^?#]+\.pem$";

/// The certificates fetched so far are kept; at most this many (one per region and rotation).
const MAX_CERTS: usize = 32;

/// The SNS envelope (every field SNS signs, and the ones we read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Envelope {
    #[serde(rename = "Type")]
    pub kind: String,
    pub message_id: String,
    pub topic_arn: String,
    pub message: String,
    pub timestamp: String,
    pub signature_version: String,
    pub signature: String,
    #[serde(rename = "SigningCertURL")]
    pub signing_cert_url: String,
    pub subject: Option<String>,
    #[serde(rename = "SubscribeURL")]
    pub subscribe_url: Option<String>,
    pub token: Option<String>,
}

/// What a verified envelope asks of us.
pub enum Verified {
    /// Confirm the subscription: fetch this URL.
    Subscribe(String),
    /// SES events.
    Events(Vec<Event>),
    /// An unsubscribe confirmation: nothing to do.
    Nothing,
}

pub struct Sns {
    topics: Vec<String>,
    urls: Regex,
    certs: Mutex<HashMap<String, RsaPublicKey>>,
    http: reqwest::Client,
}

impl Sns {
    /// `topics` from `SNS_TOPIC_ARNS`, `pattern` from `SNS_CERT_URL_PATTERN`.
    pub fn new(topics: Vec<String>, pattern: &str) -> Result<Self, String> {
        let urls = Regex::new(pattern).map_err(|e| format!("is not a regular expression: {e}"))?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("no HTTP client: {e}"))?;
        Ok(Self {
            topics,
            urls,
            certs: Mutex::new(HashMap::new()),
            http,
        })
    }

    /// The envelope of `body`, once its topic, certificate URL and signature hold.
    pub async fn envelope(&self, body: &[u8]) -> Result<Envelope, Refused> {
        let env: Envelope = serde_json::from_slice(body).map_err(|_| Refused::Unsigned)?;
        if !self.topics.iter().any(|t| t == &env.topic_arn) {
            return Err(Refused::Foreign("topic"));
        }
        if !self.urls.is_match(&env.signing_cert_url) {
            return Err(Refused::Foreign("SigningCertURL"));
        }
        let key = self.cert(&env.signing_cert_url).await?;
        check_signature(&env, &key)?;
        Ok(env)
    }

    /// Checks the envelope (topic, certificate URL, signature) and says what it asks.
    pub async fn verify(&self, body: &[u8]) -> Result<Verified, Refused> {
        let env = self.envelope(body).await?;
        match env.kind.as_str() {
            "SubscriptionConfirmation" => {
                let url = env.subscribe_url.clone().ok_or(Refused::Unsigned)?;
                // SNS's own host, as the certificate's (which matched the pattern).
                if !same_origin(&url, &env.signing_cert_url) {
                    return Err(Refused::Foreign("SubscribeURL"));
                }
                Ok(Verified::Subscribe(url))
            }
            "Notification" => Ok(Verified::Events(
                parse_ses(&env.message, &env.message_id).map_err(|_| Refused::Unsigned)?,
            )),
            _ => Ok(Verified::Nothing),
        }
    }

    /// Confirms a subscription (a GET of its `SubscribeURL`).
    pub async fn subscribe(&self, url: &str) -> Result<(), String> {
        let r = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("SubscribeURL unreachable: {e}"))?;
        if r.status().is_success() {
            Ok(())
        } else {
            Err(format!("SubscribeURL answered {}", r.status()))
        }
    }

    /// The key of the certificate at `url`: kept after the first fetch.
    async fn cert(&self, url: &str) -> Result<RsaPublicKey, Refused> {
        if let Some(k) = self.certs.lock().expect("not poisoned").get(url) {
            return Ok(k.clone());
        }
        let pem = async {
            let r = self.http.get(url).send().await.ok()?;
            r.status().is_success().then_some(())?;
            r.bytes().await.ok()
        }
        .await
        .ok_or(Refused::CertUnavailable)?;
        let key = key_of(&pem).ok_or(Refused::BadSignature)?;
        let mut certs = self.certs.lock().expect("not poisoned");
        if certs.len() >= MAX_CERTS {
            certs.clear();
        }
        certs.insert(url.to_string(), key.clone());
        Ok(key)
    }
}

/// SES receiving with an SNS action: the same envelope, topic and signature as the events
/// (the receiving topic listed in `SNS_TOPIC_ARNS` too), its own subscription handshake; the
/// `Received` notification's `receipt.recipients`, `mail.destination` and
/// `mail.commonHeaders.subject` are the mail.
pub struct SesInbound(pub Sns);

impl Route for SesInbound {
    fn vendor(&self) -> Inbound {
        Inbound::Ses
    }
    fn receive<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Received, Refused>> {
        Box::pin(async move {
            let env = self.0.envelope(body).await?;
            match env.kind.as_str() {
                "SubscriptionConfirmation" => Ok(Received::Answer(self.confirm(&env).await?)),
                "Notification" => Ok(received(&env.message)),
                _ => Ok(Received::Answer(StatusCode::OK)),
            }
        })
    }
}

impl SesInbound {
    /// Confirms the receiving topic's subscription (its URL on the certificate's host).
    async fn confirm(&self, env: &Envelope) -> Result<StatusCode, Refused> {
        let url = env.subscribe_url.as_deref().ok_or(Refused::Unsigned)?;
        if !same_origin(url, &env.signing_cert_url) {
            return Err(Refused::Foreign("SubscribeURL"));
        }
        Ok(match self.0.subscribe(url).await {
            Ok(()) => StatusCode::OK,
            Err(_) => StatusCode::BAD_GATEWAY,
        })
    }
}

/// The mail of a `Received` notification; any other is answered 200 and read no further.
fn received(message: &str) -> Received {
    let Ok(n) = serde_json::from_str::<Value>(message) else {
        return Received::Answer(StatusCode::BAD_REQUEST);
    };
    if n.get("notificationType").and_then(Value::as_str) != Some("Received") {
        return Received::Answer(StatusCode::OK);
    }
    let texts = |p: &str| {
        n.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect::<Vec<_>>()
    };
    let mut recipients = texts("/receipt/recipients");
    recipients.extend(texts("/mail/destination"));
    let subject = n
        .pointer("/mail/commonHeaders/subject")
        .and_then(Value::as_str)
        .map(str::to_string);
    Received::Mail(Mail {
        recipients,
        subject,
    })
}

/// Whether two URLs have the same scheme, host and port.
fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// The RSA key of a PEM certificate.
fn key_of(pem: &[u8]) -> Option<RsaPublicKey> {
    let cert = Certificate::from_pem(pem).ok()?;
    let spki = cert.tbs_certificate.subject_public_key_info.to_der().ok()?;
    RsaPublicKey::from_public_key_der(&spki).ok()
}

/// The text SNS signs: `Key\nValue\n` for each field it covers, in this order.
pub fn string_to_sign(env: &Envelope) -> String {
    let mut fields: Vec<(&str, &str)> =
        vec![("Message", &env.message), ("MessageId", &env.message_id)];
    if env.kind == "Notification" {
        if let Some(s) = &env.subject {
            fields.push(("Subject", s));
        }
    } else {
        fields.push((
            "SubscribeURL",
            env.subscribe_url.as_deref().unwrap_or_default(),
        ));
    }
    fields.push(("Timestamp", &env.timestamp));
    if env.kind != "Notification" {
        fields.push(("Token", env.token.as_deref().unwrap_or_default()));
    }
    fields.push(("TopicArn", &env.topic_arn));
    fields.push(("Type", &env.kind));
    fields.iter().map(|(k, v)| format!("{k}\n{v}\n")).collect()
}

fn check_signature(env: &Envelope, key: &RsaPublicKey) -> Result<(), Refused> {
    let sig = base64::engine::general_purpose::STANDARD
        .decode(&env.signature)
        .map_err(|_| Refused::BadSignature)?;
    let sig = Signature::try_from(sig.as_slice()).map_err(|_| Refused::BadSignature)?;
    let text = string_to_sign(env);
    let ok = match env.signature_version.as_str() {
        "1" => VerifyingKey::<sha1::Sha1>::new(key.clone())
            .verify(text.as_bytes(), &sig)
            .is_ok(),
        "2" => VerifyingKey::<sha2::Sha256>::new(key.clone())
            .verify(text.as_bytes(), &sig)
            .is_ok(),
        _ => false,
    };
    ok.then_some(()).ok_or(Refused::BadSignature)
}

/// The events of one SES event (the `Message` of a notification); `sns_id` makes their ids.
pub fn parse_ses(message: &str, sns_id: &str) -> Result<Vec<Event>, BadBody> {
    let e: Value = serde_json::from_str(message).map_err(|_| BadBody)?;
    let kind = e
        .get("eventType")
        .or_else(|| e.get("notificationType"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mail = e.get("mail");
    let tag = |k: &str| mail.and_then(|m| m.get("tags")).and_then(|t| t.get(k));
    let (what, recipients): (What, Option<&Value>) = match kind {
        "Send" => (What::Accepted, None),
        "Delivery" => (What::Delivered, None),
        "DeliveryDelay" => (What::Deferred, None),
        "Bounce" => (
            match (
                e.pointer("/bounce/bounceType").and_then(Value::as_str),
                e.pointer("/bounce/bounceSubType").and_then(Value::as_str),
            ) {
                // Not sent: the address is on SES's own list (a drop, as the others say it).
                (Some("Permanent"), Some("Suppressed" | "OnAccountSuppressionList")) => {
                    What::Dropped
                }
                (Some("Permanent"), _) => What::HardBounce,
                (Some("Transient"), sub) if recipients_transient(sub) => What::SoftBounce,
                _ => What::Deferred,
            },
            e.pointer("/bounce/bouncedRecipients"),
        ),
        "Complaint" => (
            What::Complaint,
            e.pointer("/complaint/complainedRecipients"),
        ),
        "Subscription" => (
            if e.pointer("/subscription/newTopicPreferences/unsubscribeAll")
                .and_then(Value::as_bool)
                == Some(true)
            {
                What::Unsubscribe
            } else {
                What::Other
            },
            None,
        ),
        "Open" => (What::Opened, None),
        "Click" => (What::Clicked, None),
        _ => (What::Other, None),
    };
    // One event per recipient the vendor names (ours have one), else the mail's destination.
    let emails: Vec<Option<String>> = match recipients.and_then(Value::as_array) {
        Some(r) if !r.is_empty() => r.iter().map(|x| text_of(x.get("emailAddress"))).collect(),
        _ => vec![text_of(mail.and_then(|m| m.get("destination")))],
    };
    let many = emails.len() > 1;
    // The event's own time, else the mail's.
    let occurred_at = [
        "bounce",
        "complaint",
        "delivery",
        "deliveryDelay",
        "open",
        "click",
    ]
    .iter()
    .find_map(|k| time_of(e.get(*k).and_then(|v| v.get("timestamp"))))
    .or_else(|| time_of(mail.and_then(|m| m.get("timestamp"))));
    // A bounce is read per recipient: SES's `status` and `diagnosticCode` over its
    // `bounceType`, which can be wrong (a policy refusal of our domain is `Permanent/General`).
    let sub = e.pointer("/bounce/bounceSubType").and_then(Value::as_str);
    let recipient = |i: usize, k: &str| {
        recipients
            .and_then(|r| r.get(i))
            .and_then(|r| r.get(k))
            .and_then(Value::as_str)
    };
    Ok(emails
        .into_iter()
        .enumerate()
        .map(|(i, email)| {
            let refusal = (kind == "Bounce").then(|| {
                let hint = sub.map_or(Hint::None, Hint::Ses);
                let (status, text) = (recipient(i, "status"), recipient(i, "diagnosticCode"));
                cause::read(email.as_deref(), status, text, hint)
            });
            let what = match (what, &refusal) {
                (What::HardBounce, Some(r)) => cause::permanent(r),
                _ => what,
            };
            Event {
                id: if many {
                    format!("{sns_id}/{i}")
                } else {
                    sns_id.to_string()
                },
                what,
                campaign_id: text_of(tag("campaign_id")),
                member_id: member_of(tag("member_id")),
                message_id: text_of(mail.and_then(|m| m.get("messageId"))),
                email,
                occurred_at,
                refusal,
            }
        })
        .collect())
}

/// Whether an SES `Transient` bounce (SES's last word, after its retries; a `DeliveryDelay` is
/// one of those retries) is the recipient's: `MailboxFull`, or `General` (the recipient's server
/// refused for now). `MessageTooLarge`, `ContentRejected` and `AttachmentRejected` are about our
/// mail, not the address.
pub fn recipients_transient(sub_type: Option<&str>) -> bool {
    matches!(sub_type, Some("MailboxFull" | "General"))
}

impl Webhook for Sns {
    /// SES, through SNS.
    fn vendor(&self) -> &'static str {
        "ses"
    }
    fn receive<'a>(
        &'a self,
        _headers: &'a HeaderMap,
        body: &'a [u8],
        _now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>> {
        Box::pin(async move {
            Ok(match self.verify(body).await? {
                Verified::Events(events) => Delivery::Events {
                    events,
                    token: None,
                },
                Verified::Nothing => Delivery::Answer(StatusCode::OK),
                Verified::Subscribe(url) => match self.subscribe(&url).await {
                    Ok(()) => {
                        info!("the SNS subscription is confirmed");
                        Delivery::Answer(StatusCode::OK)
                    }
                    Err(e) => {
                        warn!(error = %e, "confirming the SNS subscription failed; SNS asks again");
                        Delivery::Answer(StatusCode::BAD_GATEWAY)
                    }
                },
            })
        })
    }
}
