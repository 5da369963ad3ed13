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
//! Pages carry no address and load nothing (their CSP: nothing but a form posted to ourselves).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{html, Markup, DOCTYPE};
use metrics::counter;
use sqlx::PgPool;
use tracing::warn;

use crate::http::Budget;
use crate::metrics::{EVENTS_REFUSED_TOTAL, EVENTS_TOTAL, EVENTS_UNAVAILABLE_TOTAL};
use crate::store::one_click::{unsubscribe, Unsubscribed};
use crate::unsubscribe::{Signer, ONE_CLICK};

/// The vendor label of one-click unsubscribes in the events' metrics and `provider_events`.
pub const VENDOR: &str = "one-click";

/// Sent with every page: no script, no style, no frame; the one form posts to us.
const HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
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
}

fn page(status: StatusCode, title: &str, body: Markup) -> Response {
    let html = html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; meta name="viewport" content="width=device-width, initial-scale=1"; title { (title) } }
            body { main { h1 { (title) } (body) } }
        }
    };
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html.into_string(),
    )
        .into_response()
}

fn not_found() -> Response {
    counter!(EVENTS_REFUSED_TOTAL, "vendor" => VENDOR, "reason" => "bad_signature").increment(1);
    warn!(
        vendor = VENDOR,
        "an unsubscribe link that does not verify; nothing stored"
    );
    page(
        StatusCode::NOT_FOUND,
        "This link is not valid",
        html! { p { "Nothing was changed. Use the unsubscribe link of the mail itself." } },
    )
}

/// `GET` (and `HEAD`): the page with the one button; nothing changes.
pub async fn confirm(State(app): State<Arc<OneClick>>, Path(token): Path<String>) -> Response {
    if app.signer.verify(&token).is_none() {
        return not_found();
    }
    page(
        StatusCode::OK,
        "Unsubscribe",
        html! {
            p { "Stop receiving these mails? One click, and no other mail of ours reaches this address." }
            form method="post" {
                input type="hidden" name="List-Unsubscribe" value="One-Click";
                button type="submit" { "Unsubscribe" }
            }
        },
    )
}

/// `POST`: the one click (see the module docs).
pub async fn one_click(
    State(app): State<Arc<OneClick>>,
    Path(token): Path<String>,
    request: Request,
) -> Response {
    let Some((campaign, member)) = app.signer.verify(&token) else {
        return not_found();
    };
    let (head, body) = request.into_parts();
    let body = match app.bodies.read(&head.headers, body).await {
        Ok(b) => b,
        Err(e) => return e.status().into_response(),
    };
    if !asks_one_click(&head.headers, &body.bytes).await {
        return page(
            StatusCode::BAD_REQUEST,
            "Nothing was changed",
            html! { p { "This address takes one-click unsubscribes (List-Unsubscribe=One-Click)." } },
        );
    }
    let done =
        tokio::time::timeout(app.db_timeout, unsubscribe(&app.pool, &campaign, member)).await;
    match done {
        Ok(Ok(Unsubscribed::Done | Unsubscribed::Archived)) => {
            counter!(EVENTS_TOTAL, "vendor" => VENDOR, "campaign" => campaign, "what" => "unsubscribe")
                .increment(1);
            page(
                StatusCode::OK,
                "You are unsubscribed",
                html! { p { "No other mail of ours will reach this address." } },
            )
        }
        Ok(Ok(Unsubscribed::NoSuchRow)) => {
            counter!(EVENTS_TOTAL, "vendor" => VENDOR, "campaign" => "unknown", "what" => "unmatched")
                .increment(1);
            warn!(
                vendor = VENDOR,
                "a genuine unsubscribe link names no row in the work table nor an address in the archive (archived before it kept them?); nothing stored"
            );
            page(
                StatusCode::NOT_FOUND,
                "This mail is too old",
                html! { p { "Its list is archived. Nothing was changed; reply to the mail to be removed." } },
            )
        }
        Ok(Err(e)) => unavailable(Some(e)),
        Err(_) => unavailable(None),
    }
}

fn unavailable(e: Option<sqlx::Error>) -> Response {
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
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Please try again",
        html! { p { "Nothing was changed yet. Try again in a minute." } },
    )
}

/// Whether the body is RFC 8058's `List-Unsubscribe=One-Click`: form-encoded, or as the one
/// `multipart/form-data` field of that name.
async fn asks_one_click(headers: &HeaderMap, body: &Bytes) -> bool {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if kind.to_ascii_lowercase().starts_with("multipart/form-data") {
        return multipart_asks(kind, body.clone()).await;
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
/// value is `One-Click` (multer parses it: the name of another part, or text that merely holds
/// the words, does not count; a malformed body asks nothing).
async fn multipart_asks(content_type: &str, body: Bytes) -> bool {
    let Ok(boundary) = multer::parse_boundary(content_type) else {
        return false;
    };
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let (name, value) = ONE_CLICK
        .split_once('=')
        .expect("the one-click value is a pair");
    while let Ok(Some(part)) = parts.next_field().await {
        if part.name() == Some(name) {
            return part.text().await.is_ok_and(|v| v.trim() == value);
        }
    }
    false
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
