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
    let mut res = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        html.into_string(),
    )
        .into_response();
    for (name, value) in HEADERS {
        res.headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    res
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
    if !asks_one_click(&head.headers, &body.bytes) {
        return page(
            StatusCode::BAD_REQUEST,
            "Nothing was changed",
            html! { p { "This address takes one-click unsubscribes (List-Unsubscribe=One-Click)." } },
        );
    }
    let done =
        tokio::time::timeout(app.db_timeout, unsubscribe(&app.pool, &campaign, member)).await;
    match done {
        Ok(Ok(Unsubscribed::Done)) => {
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
                "a genuine unsubscribe link names no row in the work table (archived?); nothing stored"
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
fn asks_one_click(headers: &HeaderMap, body: &[u8]) -> bool {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let text = String::from_utf8_lossy(body);
    if kind.starts_with("multipart/form-data") {
        return multipart_field(&text, "List-Unsubscribe").as_deref() == Some("One-Click");
    }
    text.trim().split('&').any(|pair| {
        let decoded = percent_encoding::percent_decode_str(&pair.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned();
        decoded == ONE_CLICK
    })
}

/// The value of the multipart field `name` (its part's body, the trailing line break cut).
fn multipart_field(body: &str, name: &str) -> Option<String> {
    let marker = format!("name=\"{name}\"");
    let after = &body[body.find(&marker)? + marker.len()..];
    let value = &after[after.find("\r\n\r\n")? + 4..];
    let end = value.find("\r\n--").unwrap_or(value.len());
    Some(value[..end].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, kind.parse().unwrap());
        h
    }

    #[test]
    fn the_one_click_body_is_read_in_both_encodings_and_nothing_else_passes() {
        let form = head("application/x-www-form-urlencoded");
        assert!(asks_one_click(&form, b"List-Unsubscribe=One-Click"));
        assert!(asks_one_click(&form, b"List-Unsubscribe%3DOne-Click"));
        assert!(!asks_one_click(&form, b"List-Unsubscribe=Two-Clicks"));
        assert!(!asks_one_click(&form, b""));
        let multi = head("multipart/form-data; boundary=XyZ");
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n";
        assert!(asks_one_click(&multi, body.as_bytes()));
        let other = body.replace("One-Click", "no");
        assert!(!asks_one_click(&multi, other.as_bytes()));
    }
}
