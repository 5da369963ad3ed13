//! The vendors' events come back: `campaign-sender events` takes each vendor's signed webhook,
//! checks it on the raw body bytes, and turns bounces, complaints and unsubscribes into
//! suppressions and proofs of acceptance into settled rows ([`crate::store::event`] has the one
//! table, [`crate::store::events`] the statements; [`event`] what the vendors' parsers share).
//!
//! - one file per vendor, each its authentication and its events: [`sendgrid`] (ECDSA P-256),
//!   [`resend`] (Svix HMAC), [`mailgun`] (HMAC of timestamp + token), [`postmark`] (basic auth),
//!   [`sns`] (SES through SNS: RSA with the certificate from `SigningCertURL`, the topic pinned,
//!   the subscription handshake); each is a [`webhook::Webhook`] to the server, which is built
//!   from the list of those configured (`EventsConfig::listeners`): a vendor is its file and one
//!   entry there;
//! - [`cause`]: whose fault a refusal is — the one table every vendor's parser reads a bounce
//!   or a block by (the recipient's, the sender's, unknown);
//! - [`one_click`]: `/unsubscribe/{token}`, one-click unsubscribe (RFC 8058) with our links;
//!   [`pages`]: what a recipient reads there, in their language, naming the sender;
//!   [`inbound`]: `/inbound/{vendor}`, the mailto's mails through a vendor's inbound route,
//!   each vendor's half in its own file;
//! - [`server`]: the HTTP server (`POST /events/{vendor}`, `GET /healthz`), its bounds and its
//!   answers: 2xx only after the commit, 401/403 for a request that does not authenticate
//!   (nothing stored, no body logged), 413 over the size bound, 503 when the database does not
//!   answer in time (the vendor retries), 404 for a vendor not configured.

pub mod cause;
pub mod event;
pub mod inbound;
pub mod mailgun;
pub mod one_click;
pub mod pages;
pub mod postmark;
pub mod resend;
pub mod sendgrid;
pub mod server;
pub mod sns;
pub mod webhook;

use axum::http::HeaderMap;

pub use crate::store::event::{Event, What, FUNNEL};

/// Why a request is refused before anything is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No signature (or credentials) where the vendor puts them.
    Unsigned,
    /// A signature (or credentials) that does not verify.
    BadSignature,
    /// A signature's timestamp outside the tolerance.
    Stale,
    /// A Mailgun token already used for another event.
    Replayed,
    /// Not ours: an SNS topic not in `SNS_TOPIC_ARNS`, a certificate or subscribe URL not
    /// matching `SNS_CERT_URL_PATTERN`.
    Foreign(&'static str),
    /// The signing certificate could not be fetched (the vendor retries).
    CertUnavailable,
}

impl Refused {
    /// The metric label and the log's word for it.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Unsigned => "unsigned",
            Refused::BadSignature => "bad_signature",
            Refused::Stale => "stale",
            Refused::Replayed => "replayed",
            Refused::Foreign(_) => "foreign",
            Refused::CertUnavailable => "cert_unavailable",
        }
    }

    /// The answer: 403 for a foreign topic or certificate host, 503 for a certificate we could
    /// not fetch (the vendor retries), 401 for the rest.
    pub fn status(self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            Refused::Foreign(_) => StatusCode::FORBIDDEN,
            Refused::CertUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        }
    }
}

/// A body that authenticated but is not the vendor's event format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadBody;

/// Our clock in Unix seconds, for a signature's age.
pub fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// A header as text, if present and visible ASCII.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name)?.to_str().ok()
}

#[cfg(test)]
mod cause_tests;
#[cfg(test)]
mod soft_bounce_tests;
#[cfg(test)]
mod verify_tests;
