//! [`Webhook`]: what every vendor's webhook is to the server — a name, what its head alone
//! decides, and how its raw request becomes events. Each vendor's file implements it; the
//! server is built from the list of those configured ([`crate::config::EventsConfig`]), so a
//! vendor is added in its own file and one entry of that list.

use axum::http::{HeaderMap, StatusCode};
use futures::future::BoxFuture;

use super::{header, BadBody, Event, Refused};

/// What an authenticated request brings.
pub enum Delivery {
    /// Events to record in one transaction; Mailgun's token, taken for them.
    Events {
        events: Vec<Event>,
        token: Option<String>,
    },
    /// An answer now, nothing to record: SNS's subscription handshake, or a body that
    /// authenticated but is not the vendor's format (400).
    Answer(StatusCode),
}

impl Delivery {
    /// The events of a body the vendor signed, or 400 for one that is not its format.
    pub(super) fn parsed(events: Result<Vec<Event>, BadBody>) -> Self {
        match events {
            Ok(events) => Delivery::Events {
                events,
                token: None,
            },
            Err(BadBody) => Delivery::Answer(StatusCode::BAD_REQUEST),
        }
    }
}

/// A vendor's webhook, as `POST /events/{vendor}` serves it.
pub trait Webhook: Send + Sync {
    /// Its path segment, and its label in metrics and logs.
    fn vendor(&self) -> &'static str;

    /// What the head alone refuses, before the body is read: a signature header missing, or
    /// credentials (all Postmark signs) that do not match. Nothing, for a vendor that signs
    /// inside the body (Mailgun, SNS).
    fn check_head(&self, _headers: &HeaderMap) -> Result<(), Refused> {
        Ok(())
    }

    /// Authenticates the request on its raw body bytes (`now_s`: our clock, for a signature's
    /// age) and gives what it brings.
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now_s: i64,
    ) -> BoxFuture<'a, Result<Delivery, Refused>>;
}

/// The headers named here must all be present.
pub(super) fn present(headers: &HeaderMap, names: &[&str]) -> Result<(), Refused> {
    match names.iter().all(|h| header(headers, h).is_some()) {
        true => Ok(()),
        false => Err(Refused::Unsigned),
    }
}
