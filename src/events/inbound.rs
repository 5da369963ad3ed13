//! `POST /inbound/{vendor}` on `events`: the mailto of `List-Unsubscribe` (RFC 2369), honoured.
//!
//! Every mail's mailto carries its one-click token ([`crate::unsubscribe::Links`]) in the
//! subject (`unsubscribe {token}`) and, where the local part fits, in the address's `+tag`.
//! The vendor named by `UNSUBSCRIBE_MAILTO_INBOUND` receives the mail and posts it here; each
//! vendor's file authenticates its post as that vendor secures it and reads the recipients and
//! the subject ([`Route`]: [`super::postmark`] basic auth, [`super::mailgun`] the HMAC of the
//! route's `timestamp` + `token`, [`super::sendgrid`] the Inbound Parse security policy's
//! ECDSA signature, [`super::sns`] SES receiving through SNS). Then:
//!
//! - **a valid token** (in a recipient's `+tag` or a word of the subject) unsubscribes its
//!   member exactly as the one-click POST ([`crate::store::one_click::unsubscribe`]: the row
//!   opted out, the address listed, the same export), committed before the 2xx;
//! - **no valid token** (a mail sent before the mailto carried one, a person writing by hand,
//!   a provider that dropped both): 2xx so the vendor does not retry it, nothing of the mail
//!   stored, counted ([`crate::store::inbound`]) and shown by `status`, to be read by hand in
//!   the vendor's inbound log;
//! - **not authenticated**: 401 (403 for a foreign SNS topic), nothing stored;
//! - **over `EVENTS_INBOUND_MAX_BODY_BYTES`** (inbound mails carry attachments; its own memory
//!   budget, which the vendors' events never draw on): the answer after which the vendor does
//!   not post it again ([`not_again`]), counted as `too_large`;
//! - the database not answering within `EVENTS_DB_TIMEOUT_MS`: 503, the vendor retries.
//!
//! A replayed post is no threat the token does not already answer: the token alone decides
//! whom a mail unsubscribes, and a repeat changes nothing. So Mailgun's token is not taken once
//! here as its events' are (its signature does not cover the fields, but forged fields can
//! only name a member whose genuine token the forger holds — who could click the link).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use futures::future::BoxFuture;
use metrics::counter;
use sqlx::PgPool;
use tracing::{info, warn};

use super::{now_s, Refused};
use crate::http::{Budget, NotRead};
use crate::metrics::{EVENTS_REFUSED_TOTAL, EVENTS_UNAVAILABLE_TOTAL, INBOUND_MAIL_TOTAL};
use crate::store::inbound::{self, Outcome};
use crate::store::one_click::{unsubscribe, Unsubscribed};
use crate::unsubscribe::{Inbound, Signer, MAILTO_SUBJECT};

/// `EVENTS_INBOUND_MAX_BODY_BYTES`' default: a mail a client composes for a mailto is a few
/// kilobytes; one a person writes, quoting an HTML mail, a few hundred.
pub const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;
/// The inbound bodies' own memory budget (eight of the largest at once).
pub const BODY_MEMORY_BODIES: usize = 8;
/// The most tokens one mail is taken for (the `+tag` and the subject carry the same one; a
/// person forwarding a few mails may name a few).
pub const MAX_TOKENS: usize = 4;

/// The most words of a subject, or pieces of a recipient, tried as tokens (each costs an
/// HMAC: a hostile subject of a million words costs no more than this).
const MAX_WORDS: usize = 64;

/// What an authenticated post says of its mail: whom it was addressed to and its subject.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mail {
    /// The addresses it came to (envelope and header), as the vendor gives them.
    pub recipients: Vec<String>,
    pub subject: Option<String>,
}

/// What an authenticated post brings.
pub enum Received {
    Mail(Mail),
    /// An answer now, nothing to read: SNS's subscription handshake, or a body that
    /// authenticated but is not the vendor's inbound format (400).
    Answer(StatusCode),
}

/// A vendor's inbound route, as `POST /inbound/{vendor}` serves it: its file implements it.
pub trait Route: Send + Sync {
    fn vendor(&self) -> Inbound;

    /// What the head alone refuses, before the body is read (Postmark's credentials).
    fn check_head(&self, _headers: &HeaderMap) -> Result<(), Refused> {
        Ok(())
    }

    /// Authenticates the post on its raw body bytes and reads its mail.
    fn receive<'a>(
        &'a self,
        headers: &'a HeaderMap,
        body: &'a [u8],
        now_s: i64,
    ) -> BoxFuture<'a, Result<Received, Refused>>;
}

/// The answer after which each vendor posts a mail no more, from its docs (docs/VENDORS.md
/// "Inbound mail"): Postmark stops at 403 and Mailgun at 406, both showing the mail as refused
/// in their logs; SendGrid's Inbound Parse and SNS retry everything but a 2xx.
pub fn not_again(vendor: Inbound) -> StatusCode {
    match vendor {
        Inbound::Postmark => StatusCode::FORBIDDEN,
        Inbound::Mailgun => StatusCode::NOT_ACCEPTABLE,
        Inbound::Sendgrid | Inbound::Ses => StatusCode::OK,
    }
}

/// What `/inbound/{vendor}` needs.
pub struct Inbox {
    /// One per vendor whose authentication is configured.
    pub routes: Vec<Box<dyn Route>>,
    /// `UNSUBSCRIBE_SECRET`: the tokens the mails carry.
    pub signer: Signer,
    pub pool: PgPool,
    /// `EVENTS_INBOUND_MAX_BODY_BYTES`, its own memory budget, `EVENTS_READ_TIMEOUT_MS`.
    pub bodies: Budget,
    pub db_timeout: Duration,
}

impl Inbox {
    fn route(&self, vendor: &str) -> Option<&dyn Route> {
        self.routes
            .iter()
            .find(|r| r.vendor().as_str() == vendor)
            .map(|r| r.as_ref())
    }

    /// Unsubscribes the members the mail's tokens name and counts the mail, within the
    /// database's bound.
    async fn honour(&self, vendor: Inbound, mail: &Mail) -> Result<Outcome, sqlx::Error> {
        let named = tokens(mail, &self.signer);
        let mut outcome = match named.is_empty() {
            true => Outcome::NoToken,
            false => Outcome::Unmatched,
        };
        for (campaign, member) in named {
            if unsubscribe(&self.pool, &campaign, member).await? != Unsubscribed::NoSuchRow {
                outcome = Outcome::Unsubscribed;
            }
        }
        inbound::count(&self.pool, vendor.as_str(), outcome).await?;
        Ok(outcome)
    }
}

/// The campaigns and members named by the valid tokens of `mail` — in a recipient's `+tag`
/// (after the local part's last `+`) or a word of the subject — at most [`MAX_TOKENS`], each
/// once. A token a provider lower-cased, cut or altered does not verify and names nobody.
pub fn tokens(mail: &Mail, signer: &Signer) -> Vec<(String, i64)> {
    let stops = |c: char| c.is_whitespace() || "<>()[]\"',;:".contains(c);
    let tags = mail.recipients.iter().flat_map(|r| {
        r.split(stops)
            .filter_map(|a| a.rsplit_once('@')?.0.rsplit_once('+').map(|(_, t)| t))
            .take(MAX_WORDS)
    });
    let words = mail
        .subject
        .iter()
        .flat_map(|s| s.split(stops))
        .filter(|w| !w.eq_ignore_ascii_case(MAILTO_SUBJECT))
        .map(|w| w.trim_end_matches(['.', '?', '!']))
        .take(MAX_WORDS);
    let mut found = BTreeSet::new();
    for named in tags
        .chain(words)
        .filter(|t| t.len() <= 256)
        .filter_map(|t| signer.verify(t))
    {
        found.insert(named);
        if found.len() == MAX_TOKENS {
            break;
        }
    }
    found.into_iter().collect()
}

/// The text fields of a form a vendor posts, `multipart/form-data` or
/// `application/x-www-form-urlencoded` as its `Content-Type` says (file parts, the mail's
/// attachments, skipped unread); `None` for a body that is neither.
pub async fn form_fields(headers: &HeaderMap, body: &[u8]) -> Option<Vec<(String, String)>> {
    let kind = super::header(headers, "content-type")?;
    if kind
        .to_ascii_lowercase()
        .starts_with("application/x-www-form-urlencoded")
    {
        return Some(form_urlencoded::parse(body).into_owned().collect());
    }
    let boundary = multer::parse_boundary(kind).ok()?;
    let bytes = axum::body::Bytes::copy_from_slice(body);
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(bytes) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut fields = Vec::new();
    loop {
        match parts.next_field().await {
            Ok(Some(part)) if part.file_name().is_some() => continue,
            Ok(Some(part)) => {
                let name = part.name().unwrap_or_default().to_string();
                fields.push((name, part.text().await.ok()?));
            }
            Ok(None) => return Some(fields),
            Err(_) => return None,
        }
    }
}

/// The value of the form field `name`, if present.
pub fn field<'f>(fields: &'f [(String, String)], name: &str) -> Option<&'f str> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// `POST /inbound/{vendor}` (see the module docs).
pub async fn receive(
    State(app): State<Arc<Inbox>>,
    Path(vendor): Path<String>,
    request: Request,
) -> StatusCode {
    let Some(route) = app.route(&vendor) else {
        return StatusCode::NOT_FOUND;
    };
    let vendor = route.vendor();
    let (head, body) = request.into_parts();
    if app.bodies.declared_too_large(&head.headers) {
        return too_large(vendor);
    }
    if let Err(why) = route.check_head(&head.headers) {
        return refuse(vendor, why);
    }
    let body = match app.bodies.read(&head.headers, body).await {
        Ok(held) => held,
        Err(NotRead::TooLarge) => return too_large(vendor),
        Err(other) => {
            warn!(
                vendor = vendor.as_str(),
                reason = other.label(),
                "an inbound mail was not read; nothing stored"
            );
            return other.status();
        }
    };
    let mail = match route.receive(&head.headers, &body.bytes, now_s()).await {
        Ok(Received::Mail(mail)) => mail,
        Ok(Received::Answer(code)) => return code,
        Err(why) => return refuse(vendor, why),
    };
    match tokio::time::timeout(app.db_timeout, app.honour(vendor, &mail)).await {
        Ok(Ok(outcome)) => answered(vendor, outcome),
        Ok(Err(e)) => unavailable(vendor, Some(e)),
        Err(_) => unavailable(vendor, None),
    }
}

/// 2xx for a mail honoured or counted: the vendor posts it no more.
fn answered(vendor: Inbound, outcome: Outcome) -> StatusCode {
    counter!(INBOUND_MAIL_TOTAL, "vendor" => vendor.as_str(), "outcome" => outcome.as_str())
        .increment(1);
    match outcome {
        Outcome::Unsubscribed => {}
        Outcome::Unmatched => warn!(
            vendor = vendor.as_str(),
            "an inbound unsubscribe's genuine token names no row in the work table or the archive; nothing stored"
        ),
        Outcome::NoToken => info!(
            vendor = vendor.as_str(),
            "an inbound mail to the unsubscribe mailbox holds no valid token; nothing done: read it in the vendor's inbound log (`status` counts them)"
        ),
    }
    StatusCode::OK
}

fn too_large(vendor: Inbound) -> StatusCode {
    counter!(INBOUND_MAIL_TOTAL, "vendor" => vendor.as_str(), "outcome" => "too_large")
        .increment(1);
    warn!(
        vendor = vendor.as_str(),
        "an inbound mail over EVENTS_INBOUND_MAX_BODY_BYTES was refused so that the vendor stops posting it; read it in the vendor's inbound log"
    );
    not_again(vendor)
}

fn refuse(vendor: Inbound, why: Refused) -> StatusCode {
    let label = format!("inbound-{}", vendor.as_str());
    counter!(EVENTS_REFUSED_TOTAL, "vendor" => label, "reason" => why.label()).increment(1);
    warn!(
        vendor = vendor.as_str(),
        refused = why.label(),
        "an inbound mail post was refused; nothing stored"
    );
    why.status()
}

fn unavailable(vendor: Inbound, e: Option<sqlx::Error>) -> StatusCode {
    let label = format!("inbound-{}", vendor.as_str());
    counter!(EVENTS_UNAVAILABLE_TOTAL, "vendor" => label).increment(1);
    match e {
        Some(e) => warn!(vendor = vendor.as_str(), error = %e, "an inbound unsubscribe could not be recorded; answered 503, the vendor retries"),
        None => warn!(vendor = vendor.as_str(), "the database did not answer an inbound unsubscribe in time; answered 503, the vendor retries"),
    }
    StatusCode::SERVICE_UNAVAILABLE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new("0123456789abcdef0123456789abcdef").unwrap()
    }

    #[test]
    fn a_token_is_found_in_the_tag_or_the_subject_and_nothing_else_names_anyone() {
        let s = signer();
        let t = s.token("spring-sale", 42);
        let u = s.token("spring-sale", 43);
        let mail = |to: &str, subject: Option<&str>| Mail {
            recipients: vec![to.to_string()],
            subject: subject.map(str::to_string),
        };
        let one = vec![("spring-sale".to_string(), 42)];
        let tagged = format!("Leave <leave+{t}@example.com>, other@example.com");
        assert_eq!(tokens(&mail(&tagged, None), &s), one);
        let subject = format!("Re: unsubscribe {t}.");
        assert_eq!(tokens(&mail("leave@example.com", Some(&subject)), &s), one);
        // Both carry it: one member, once.
        assert_eq!(tokens(&mail(&tagged, Some(&subject)), &s), one);
        // A provider that lower-cased the tag: the subject still names the member.
        let lowered = format!("leave+{}@example.com", t.to_lowercase());
        assert_eq!(tokens(&mail(&lowered, Some(&subject)), &s), one);
        assert!(tokens(&mail(&lowered, None), &s).is_empty());
        // By hand, forged, or another member's tag in a word: nobody, or exactly whom it names.
        assert!(tokens(&mail("leave@example.com", Some("please remove me")), &s).is_empty());
        let forged = format!(
            "unsubscribe spring-sale.43.{}",
            t.rsplit('.').next().unwrap()
        );
        assert!(tokens(&mail("leave@example.com", Some(&forged)), &s).is_empty());
        let two = format!("unsubscribe {t} {u}");
        assert_eq!(tokens(&mail("x@example.com", Some(&two)), &s).len(), 2);
        let many: Vec<String> = (0..10).map(|m| s.token("c", m)).collect();
        let all = many.join(" ");
        assert_eq!(
            tokens(&mail("x@example.com", Some(&all)), &s).len(),
            MAX_TOKENS
        );
    }
}
