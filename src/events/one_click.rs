//! `/unsubscribe/{token}` on `events`: one-click unsubscribe (RFC 8058) with our links
//! ([`crate::unsubscribe`]).
//!
//! - `POST` (the mailbox provider's one click, or the button below): body
//!   `List-Unsubscribe=One-Click`, `application/x-www-form-urlencoded` or `multipart/form-data`;
//!   no cookie, no login, **no redirect**. 200 only after the commit that opts the row out and
//!   lists its address ([`crate::store::one_click`]); a repeat changes nothing and is 200 too.
//! - `GET` / `HEAD` (a person following the body's link, and every link scanner that prefetches
//!   it) **change nothing**: a small page with one button that POSTs.
//! - A forged, altered or truncated token: 404, nothing stored, counted in
//!   `campaign_sender_events_refused_total{vendor="one-click"}`. The database not answering within
//!   `EVENTS_DB_TIMEOUT_MS`: 503, nothing lost (the click can be repeated).
//!
//! Pages carry no address and load nothing but their stylesheet (their CSP: our `page.css` and a
//! form posted to ourselves, no script); what they say, in which language and naming whom is
//! [`super::pages`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics::counter;
use sqlx::PgPool;
use tracing::warn;

use super::inbound::field;
use super::pages::{self, Page, Pages};
use crate::http::Budget;
use crate::metrics::{EVENTS_REFUSED_TOTAL, EVENTS_TOTAL, EVENTS_UNAVAILABLE_TOTAL};
use crate::store::one_click::{unsubscribe, Unsubscribed};
use crate::unsubscribe::{Signer, ONE_CLICK};

/// The vendor label of one-click unsubscribes in the events' metrics and `provider_events`.
pub const VENDOR: &str = "one-click";

/// Sent with every page: no script, no frame, no style but ours; the one form posts to us.
const HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

/// The largest one-click body taken: RFC 8058's is `List-Unsubscribe=One-Click` (26 bytes),
/// a multipart one a few hundred.
pub const MAX_BODY: usize = 16 * 1024;
/// The one-click bodies' own memory budget (a thousand at once), which the vendors' bodies
/// never draw on, nor they on the vendors'.
pub const BODY_MEMORY: usize = 16 * 1024 * 1024;

/// What the one-click routes need.
pub struct OneClick {
    pub signer: Signer,
    pub pool: PgPool,
    pub bodies: Budget,
    pub db_timeout: Duration,
    /// The pages' texts, in every language.
    pub pages: Arc<Pages>,
    /// The senders' names read lately, by campaign ([`SENDER_TTL`]).
    pub senders: Senders,
}

/// How long a campaign's sender name is kept before it is read again (`configure --from`
/// shows on the pages within this).
pub const SENDER_TTL: Duration = Duration::from_secs(60);
/// The most campaigns whose sender is kept (only verified tokens name one).
const SENDERS_KEPT: usize = 1024;

/// The senders' names by campaign, each read at most once per [`SENDER_TTL`], so a click costs
/// the database its one read and one write and nothing more.
#[derive(Default)]
pub struct Senders(
    std::sync::Mutex<std::collections::HashMap<String, (tokio::time::Instant, Option<String>)>>,
);

impl Senders {
    fn get(&self, campaign: &str) -> Option<Option<String>> {
        let kept = self.0.lock().expect("senders lock");
        kept.get(campaign)
            .filter(|(at, _)| at.elapsed() < SENDER_TTL)
            .map(|(_, name)| name.clone())
    }

    fn put(&self, campaign: &str, name: Option<String>) {
        let mut kept = self.0.lock().expect("senders lock");
        if kept.len() >= SENDERS_KEPT {
            kept.clear();
        }
        kept.insert(campaign.to_string(), (tokio::time::Instant::now(), name));
    }
}

impl OneClick {
    /// `which` page for the reader who sent `headers`, naming `sender`.
    fn page(
        &self,
        headers: &HeaderMap,
        status: StatusCode,
        which: Page,
        sender: Option<&str>,
    ) -> Response {
        let accept = headers
            .get(header::ACCEPT_LANGUAGE)
            .and_then(|v| v.to_str().ok());
        let texts = self.pages.for_reader(accept);
        let lang = header::HeaderValue::from_str(&texts.lang)
            .unwrap_or(header::HeaderValue::from_static("en"));
        (
            status,
            [
                (
                    header::CONTENT_TYPE,
                    header::HeaderValue::from_static("text/html; charset=utf-8"),
                ),
                (header::CONTENT_LANGUAGE, lang),
                (
                    header::VARY,
                    header::HeaderValue::from_static("Accept-Language"),
                ),
            ],
            pages::render(texts, which, sender),
        )
            .into_response()
    }

    /// The display name (or domain) of the campaign's sender, read at most once per
    /// [`SENDER_TTL`]; none if the database does not answer within its bound (the page then
    /// says "this sender", and the next page asks again).
    async fn sender(&self, campaign: &str) -> Option<String> {
        if let Some(name) = self.senders.get(campaign) {
            return name;
        }
        let from = tokio::time::timeout(
            self.db_timeout,
            crate::store::campaigns::sender(&self.pool, campaign),
        )
        .await
        .ok()?
        .ok()?;
        let name = pages::sender_name(from.as_deref());
        self.senders.put(campaign, name.clone());
        name
    }
}

/// `GET /unsubscribe/page.css`: the pages' one stylesheet.
pub async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::CSS,
    )
        .into_response()
}

fn not_found(app: &OneClick, headers: &HeaderMap) -> Response {
    counter!(EVENTS_REFUSED_TOTAL, "vendor" => VENDOR, "reason" => "bad_signature").increment(1);
    warn!(
        vendor = VENDOR,
        "an unsubscribe link that does not verify; nothing stored"
    );
    app.page(headers, StatusCode::NOT_FOUND, Page::Invalid, None)
}

/// `GET` (and `HEAD`): the page with the one button; nothing changes.
pub async fn confirm(
    State(app): State<Arc<OneClick>>,
    Path(token): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some((campaign, _)) = app.signer.verify(&token) else {
        return not_found(&app, &headers);
    };
    let sender = app.sender(&campaign).await;
    app.page(&headers, StatusCode::OK, Page::Confirm, sender.as_deref())
}

/// `POST`: the one click (see the module docs).
pub async fn one_click(
    State(app): State<Arc<OneClick>>,
    Path(token): Path<String>,
    request: Request,
) -> Response {
    let Some((campaign, member)) = app.signer.verify(&token) else {
        return not_found(&app, request.headers());
    };
    let (head, body) = request.into_parts();
    let body = match app.bodies.read(&head.headers, body).await {
        Ok(b) => b,
        Err(e) => return e.status().into_response(),
    };
    if !asks_one_click(&head.headers, &body.bytes).await {
        return app.page(&head.headers, StatusCode::BAD_REQUEST, Page::Refused, None);
    }
    let done =
        tokio::time::timeout(app.db_timeout, unsubscribe(&app.pool, &campaign, member)).await;
    match done {
        Ok(Ok(Unsubscribed::Done | Unsubscribed::Archived)) => {
            let sender = app.sender(&campaign).await;
            counter!(EVENTS_TOTAL, "vendor" => VENDOR, "campaign" => campaign, "what" => "unsubscribe")
                .increment(1);
            app.page(&head.headers, StatusCode::OK, Page::Done, sender.as_deref())
        }
        Ok(Ok(Unsubscribed::NoSuchRow)) => {
            counter!(EVENTS_TOTAL, "vendor" => VENDOR, "campaign" => "unknown", "what" => "unmatched")
                .increment(1);
            warn!(
                vendor = VENDOR,
                "a genuine unsubscribe link names no row in the work table nor an address in the archive (archived before it kept them?); nothing stored"
            );
            app.page(&head.headers, StatusCode::NOT_FOUND, Page::Archived, None)
        }
        Ok(Err(e)) => unavailable(&app, &head.headers, Some(e)),
        Err(_) => unavailable(&app, &head.headers, None),
    }
}

fn unavailable(app: &OneClick, headers: &HeaderMap, e: Option<sqlx::Error>) -> Response {
    counter!(EVENTS_UNAVAILABLE_TOTAL, "vendor" => VENDOR).increment(1);
    match e {
        Some(e) => {
            warn!(vendor = VENDOR, error = %e, "an unsubscribe could not be recorded; answered 503")
        }
        None => warn!(
            vendor = VENDOR,
            "the database did not answer an unsubscribe in time; answered 503"
        ),
    }
    app.page(headers, StatusCode::SERVICE_UNAVAILABLE, Page::Retry, None)
}

/// Whether the body is RFC 8058's `List-Unsubscribe=One-Click`: form-encoded, or as the one
/// `multipart/form-data` field of that name.
async fn asks_one_click(headers: &HeaderMap, body: &Bytes) -> bool {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if kind.to_ascii_lowercase().starts_with("multipart/form-data") {
        return multipart_asks(headers, body).await;
    }
    let text = String::from_utf8_lossy(body);
    text.trim().split('&').any(|pair| {
        let decoded = percent_encoding::percent_decode_str(&pair.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        decoded == ONE_CLICK
    })
}

/// Whether a multipart body has a part whose name is exactly `List-Unsubscribe` and whose
/// value is `One-Click` (multer parses it, as it does the inbound mails' forms: the name of
/// another part, or text that merely holds the words, does not count; a malformed body asks
/// nothing).
async fn multipart_asks(headers: &HeaderMap, body: &Bytes) -> bool {
    let (name, value) = ONE_CLICK
        .split_once('=')
        .expect("the one-click value is a pair");
    super::inbound::form_fields(headers, body)
        .await
        .is_some_and(|fields| field(&fields, name).is_some_and(|v| v.trim() == value))
}

/// Every answer of the one-click routes carries the pages' headers — the router's own 405,
/// a 413 or 400 of the body's read, as much as a page (hyper's own 414 for an over-long URI,
/// written before any route sees the request, has no body to protect).
pub async fn with_page_headers(mut res: Response) -> Response {
    for (name, value) in HEADERS {
        res.headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, kind.parse().unwrap());
        h
    }

    #[tokio::test]
    async fn the_one_click_body_is_read_in_both_encodings_and_nothing_else_passes() {
        let form = head("application/x-www-form-urlencoded");
        let asks = |h: &HeaderMap, b: &str| {
            let (h, b) = (h.clone(), Bytes::from(b.to_string()));
            async move { asks_one_click(&h, &b).await }
        };
        assert!(asks(&form, "List-Unsubscribe=One-Click").await);
        assert!(asks(&form, "List-Unsubscribe%3DOne-Click").await);
        assert!(!asks(&form, "List-Unsubscribe=Two-Clicks").await);
        assert!(!asks(&form, "").await);
        let multi = head("multipart/form-data; boundary=XyZ");
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n";
        assert!(asks(&multi, body).await);
        let other = body.replace("One-Click", "no");
        assert!(!asks(&multi, &other).await);
        // A part named otherwise that merely holds the words passes no more.
        let smuggled = "--XyZ\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nname=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n";
        assert!(!asks(&multi, smuggled).await);
        assert!(!asks(&multi, "not multipart at all").await);
    }
}
