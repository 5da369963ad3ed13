//! `campaign-sender web`: the status page, read-only.
//!
//! - `GET /`: every campaign, those stopped by something first (state, progress, rate, ETA);
//! - `GET /campaigns/{id}`: one campaign ([`page::campaign`]);
//! - `GET /api/campaigns/{id}`: what `status --json` prints;
//! - `GET /healthz`: 200 once the first round of reads is done and the last one succeeded;
//! - `GET /static/{web.css,live.js,icon.svg}`: the page's only style, script and icon, compiled
//!   in.
//!
//! [`board`] reads the database in the background and the pages are drawn from its last read
//! ([`page`], [`chart`]; where a campaign stands is [`crate::status::state`]). Every answer carries [`SECURITY_HEADERS`]; an unknown
//! campaign is a 404 page, a database that does not answer a 503 page that says so; nothing
//! shows a stack trace. With `WEB_BASIC_AUTH_FILE` set every path but `/healthz` needs a login.

pub mod board;
pub mod chart;
pub mod page;

use std::sync::Arc;

use axum::extract::{Path, Request, State as AxumState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine as _;
use chrono::Utc;
use maud::{html, Markup};
use subtle::ConstantTimeEq;

use board::{Board, Health};

/// Sent with every answer. The CSP allows only our own script and style (no inline code, no
/// other origin), no framing, no form posts.
pub const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
];

const CSS: &str = include_str!("assets/web.css");
const JS: &str = include_str!("assets/live.js");
const ICON: &str = include_str!("assets/icon.svg");

struct App {
    board: Arc<Board>,
    /// `user:password` lines of `WEB_BASIC_AUTH_FILE`; empty: no login.
    logins: Vec<String>,
}

/// `1 200 000`: digits in groups of three, thin-spaced, as the page and its charts show
/// counts.
pub fn grouped(n: i64) -> String {
    crate::shown::grouped(n, '\u{2009}')
}

/// The router, for `web` and for tests.
pub fn router(board: Arc<Board>, logins: Vec<String>) -> Router {
    let app = Arc::new(App { board, logins });
    Router::new()
        .route("/", get(index))
        .route("/campaigns/{id}", get(campaign))
        .route("/api/campaigns/{id}", get(api))
        .route(
            "/static/web.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/static/live.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(
            "/static/icon.svg",
            get(|| async { asset("image/svg+xml", ICON) }),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), login))
        .route("/healthz", get(healthz))
        .layer(middleware::from_fn(secure))
        .with_state(app)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn html_page(code: StatusCode, m: Markup) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        m.into_string(),
    )
        .into_response()
}

async fn secure(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    for (name, value) in SECURITY_HEADERS {
        res.headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    res
}

/// HTTP basic auth against `WEB_BASIC_AUTH_FILE`, compared in constant time.
async fn login(AxumState(app): AxumState<Arc<App>>, req: Request, next: Next) -> Response {
    if app.logins.is_empty() || logged_in(&app.logins, req.headers()) {
        return next.run(req).await;
    }
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            r#"Basic realm="campaign-sender", charset="UTF-8""#,
        )],
        "a login is needed (WEB_BASIC_AUTH_FILE)\n",
    )
        .into_response()
}

fn logged_in(logins: &[String], headers: &HeaderMap) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| {
            base64::engine::general_purpose::STANDARD
                .decode(b.trim())
                .ok()
        })
    else {
        return false;
    };
    // Every line is compared, so the time taken does not tell which one nearly matched.
    logins.iter().fold(false, |ok, l| {
        ok | bool::from(l.as_bytes().ct_eq(given.as_slice()))
    })
}

/// The page for a board that cannot be shown: starting, or the database not answering.
fn unavailable(board: &Board) -> Option<Response> {
    let (title, what) = match board.health() {
        Health::Ok => return None,
        Health::Starting => (
            "Starting",
            html! { p { "The first read of the campaigns is under way; this page shows them in a few seconds." } },
        ),
        Health::Unavailable { since, problem } => (
            "The database is not answering",
            html! {
                p { "campaign-sender web cannot read the database since " (page::local(since, board.zone))
                    ", so no figure here would be current. It keeps trying every second; this page recovers by itself." }
                p { "What the database said: " code { (problem) } }
                p { "The workers ride out a database outage of up to DB_CONNECT_RETRY_S on their own (README \"Running it\")." }
            },
        ),
    };
    let mut res = html_page(
        StatusCode::SERVICE_UNAVAILABLE,
        page::error(board, title, what),
    );
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    Some(res)
}

async fn index(AxumState(app): AxumState<Arc<App>>) -> Response {
    if let Some(r) = unavailable(&app.board) {
        return r;
    }
    let views = app.board.views();
    html_page(StatusCode::OK, page::index(&app.board, &views, Utc::now()))
}

async fn campaign(AxumState(app): AxumState<Arc<App>>, Path(id): Path<String>) -> Response {
    if let Some(r) = unavailable(&app.board) {
        return r;
    }
    match app.board.view(&id) {
        Some(v) => html_page(StatusCode::OK, page::campaign(&app.board, &v, Utc::now())),
        None => unknown(&app.board, &id),
    }
}

fn unknown(board: &Board, id: &str) -> Response {
    let shown = page::typed(id, 64);
    html_page(
        StatusCode::NOT_FOUND,
        page::error(
            board,
            "No such campaign",
            html! { p { "There is no campaign named “" (shown) "”. " a href="/" { "Every campaign" } " is listed on the first page." } },
        ),
    )
}

async fn api(AxumState(app): AxumState<Arc<App>>, Path(id): Path<String>) -> Response {
    let json = |code: StatusCode, body: String| {
        (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    match app.board.health() {
        Health::Ok => {}
        Health::Starting => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"error":"starting"}"#.into(),
            )
        }
        Health::Unavailable { since, .. } => {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"error": "database unavailable", "since": since}).to_string(),
            )
        }
    }
    match app.board.view(&id) {
        Some(v) => json(
            StatusCode::OK,
            serde_json::to_string(&v.status).expect("status serialises"),
        ),
        None => json(
            StatusCode::NOT_FOUND,
            r#"{"error":"no such campaign"}"#.into(),
        ),
    }
}

async fn not_found(AxumState(app): AxumState<Arc<App>>) -> Response {
    html_page(
        StatusCode::NOT_FOUND,
        page::error(
            &app.board,
            "Not found",
            html! { p { "Nothing here. " a href="/" { "Every campaign" } " is listed on the first page." } },
        ),
    )
}

/// 200 with the last round's figures once the board reads the database; 503 before the first
/// round and while reads fail.
async fn healthz(AxumState(app): AxumState<Arc<App>>) -> Response {
    let round = app.board.last_round();
    let body = serde_json::json!({
        "health": app.board.health().word(),
        "campaigns": app.board.views().len(),
        "last_round_at": round.map(|(at, _)| at),
        "last_round_ms": round.map(|(_, d)| d.as_millis() as u64),
    })
    .to_string();
    let code = match app.board.health() {
        Health::Ok => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
