//! `campaign-sender events`: the HTTP server the vendors post their events to.
//!
//! `POST /events/{sendgrid,ses,postmark,mailgun,resend}`, `GET /healthz`. Each answer keeps a
//! promise to the vendor, whose retries are our only way not to lose an event:
//! - **2xx only after the commit** ([`crate::store::events::record`]); a vendor's retry of a
//!   committed request changes nothing (event ids);
//! - **503 within [`Listeners::db_timeout`]** when the database does not answer: never a hang,
//!   and the vendor retries;
//! - **401** for a request that does not authenticate (a missing, wrong or stale signature, a
//!   reused Mailgun token), **403** for a foreign SNS topic or certificate host: nothing stored,
//!   counted in `campaign_sender_events_refused_total`, no body in the log;
//! - **413** over `EVENTS_MAX_BODY_BYTES`; **404** for a vendor whose secret is not configured.
//!
//! **What the head alone decides, it decides before the body is read** ([`check_head`]): a
//! vendor not configured, a declared size over the bound, Postmark's credentials, a signature
//! header missing. Only then is the body read, within the memory budget and the deadline of
//! [`crate::http::body`] (503 when the budget stays spent, 408 for a body too slow), and the
//! connections themselves are bounded by [`crate::http::listen`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use metrics::counter;
use sqlx::PgPool;
use tracing::warn;

use super::webhook::{Delivery, Webhook};
use super::{mailgun, now_s, Event, Refused};
use crate::http::{Budget, NotRead};
use crate::metrics::{BRAKES_TOTAL, SOFT_BOUNCE_SUPPRESSIONS_TOTAL};
use crate::metrics::{
    EVENTS_REFUSED_TOTAL, EVENTS_TOTAL, EVENTS_UNAVAILABLE_TOTAL, EVENTS_UNREAD_TOTAL,
    REFUSALS_TOTAL,
};
use crate::store::events::{self, NotRecorded, Recorded};
use crate::store::{soft_bounces, suppressions};

/// The vendors this server listens for (those whose secret is configured), and its bounds.
pub struct Listeners {
    /// One per vendor configured, each at `/events/{vendor}` ([`Webhook::vendor`]).
    pub webhooks: Vec<Box<dyn Webhook>>,
    /// How bodies are read: `EVENTS_MAX_BODY_BYTES` (413 over it),
    /// `EVENTS_BODY_MEMORY_BYTES`, `EVENTS_READ_TIMEOUT_MS`.
    pub bodies: Budget,
    /// The vendors' inbound routes for the mailto, each at `/inbound/{vendor}` with
    /// `UNSUBSCRIBE_SECRET` ([`super::inbound`]), and how their bodies are read
    /// (`EVENTS_INBOUND_MAX_BODY_BYTES`, a budget of their own).
    pub inbound: Vec<Box<dyn super::inbound::Route>>,
    pub inbound_bodies: Budget,
    /// `EVENTS_DB_TIMEOUT_MS`: how long a request waits for the database before 503.
    pub db_timeout: Duration,
    /// The brake's lines and the soft-bounce rule.
    pub rules: events::Rules,
    /// `UNSUBSCRIBE_SECRET`: one-click unsubscribes with our links are honoured
    /// (`/unsubscribe/{token}`, [`super::one_click`]); 404 there without it.
    pub one_click: Option<crate::unsubscribe::Signer>,
    /// The pages a recipient sees there, in every language (`UNSUBSCRIBE_PAGE_TEXTS`,
    /// `UNSUBSCRIBE_PAGE_LANG`; [`super::pages`]).
    pub pages: super::pages::Pages,
}

struct App {
    pool: PgPool,
    listeners: Listeners,
}

/// The router, for `events` and for tests.
pub fn router(pool: PgPool, listeners: Listeners) -> Router {
    let one_click = listeners.one_click.clone().map(|signer| {
        Arc::new(super::one_click::OneClick {
            signer,
            pool: pool.clone(),
            bodies: Budget::new(
                super::one_click::MAX_BODY,
                super::one_click::BODY_MEMORY,
                listeners.bodies.deadline(),
            ),
            db_timeout: listeners.db_timeout,
            pages: Arc::new(listeners.pages.clone()),
            senders: Default::default(),
        })
    });
    let mut listeners = listeners;
    let routes = std::mem::take(&mut listeners.inbound);
    let inbox = match (listeners.one_click.clone(), routes.is_empty()) {
        (Some(signer), false) => Some(Arc::new(super::inbound::Inbox {
            routes,
            signer,
            pool: pool.clone(),
            bodies: listeners.inbound_bodies.clone(),
            db_timeout: listeners.db_timeout,
        })),
        _ => None,
    };
    let app = Arc::new(App { pool, listeners });
    let mut router = Router::new()
        .route("/events/{vendor}", post(receive))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(app);
    if let Some(inbox) = inbox {
        router = router.merge(
            Router::new()
                .route("/inbound/{vendor}", post(super::inbound::receive))
                .with_state(inbox),
        );
    }
    match one_click {
        Some(state) => router.merge(
            Router::new()
                .route("/unsubscribe/page.css", get(super::one_click::stylesheet))
                .route(
                    "/unsubscribe/{token}",
                    get(super::one_click::confirm).post(super::one_click::one_click),
                )
                .layer(axum::middleware::map_response(
                    super::one_click::with_page_headers,
                ))
                .with_state(state),
        ),
        None => router,
    }
}

impl Listeners {
    /// The vendors listened for, as their paths name them.
    pub fn vendors(&self) -> Vec<&'static str> {
        self.webhooks.iter().map(|w| w.vendor()).collect()
    }

    /// The webhook at `/events/{vendor}`, if that vendor is configured.
    pub fn webhook(&self, vendor: &str) -> Option<&dyn Webhook> {
        self.webhooks
            .iter()
            .find(|w| w.vendor() == vendor)
            .map(|w| w.as_ref())
    }
}

/// Puts the counters the alerts take `increase` of on `/metrics` at 0 for every vendor
/// listened for: Prometheus cannot see the first increment of a series that appears with it.
pub fn start_counters_at_zero(l: &Listeners) {
    for vendor in l.vendors() {
        counter!(EVENTS_UNAVAILABLE_TOTAL, "vendor" => vendor).increment(0);
        for reason in [
            "unsigned",
            "bad_signature",
            "stale",
            "replayed",
            "foreign",
            "cert_unavailable",
        ] {
            counter!(EVENTS_REFUSED_TOTAL, "vendor" => vendor, "reason" => reason).increment(0);
        }
    }
}

/// Until `stop`: every minute, prunes Mailgun tokens past their age bound and soft bounces past
/// `soft_bounce_window_s` (they count no more); at start and every hour, lists the other form
/// of internationalised addresses listed without it.
pub async fn prune(
    pool: PgPool,
    soft_bounce_window_s: u64,
    stop: tokio_util::sync::CancellationToken,
) {
    for minute in 0u64.. {
        if minute % 60 == 0 {
            // The other form of an address only SQL listed (the workers' finish, another
            // system): within the hour (store::suppressions::complete_forms).
            if let Err(e) = suppressions::complete_forms(&pool).await {
                warn!(error = %e, "listing the other forms of internationalised addresses failed; the next hour tries again");
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        }
        if let Err(e) = events::prune_tokens(&pool, mailgun::MAX_AGE_S).await {
            warn!(error = %e, "pruning webhook tokens failed; the next minute tries again");
        }
        if let Err(e) = soft_bounces::prune(&pool, soft_bounce_window_s).await {
            warn!(error = %e, "pruning old soft bounces failed; the next minute tries again");
        }
    }
}

async fn receive(
    State(app): State<Arc<App>>,
    Path(vendor): Path<String>,
    request: Request,
) -> StatusCode {
    let (head, body) = request.into_parts();
    let headers = head.headers;
    let webhook = match check_head(&app.listeners, &vendor, &headers) {
        Ok(w) => w,
        Err(Early::Answer(code)) => return code,
        Err(Early::Refused(refused)) => return refuse(&vendor, refused),
    };
    let vendor = webhook.vendor();
    let body = match app.listeners.bodies.read(&headers, body).await {
        Ok(held) => held,
        Err(not_read) => return unread(vendor, not_read),
    };
    let (events, token) = match webhook.receive(&headers, &body.bytes, now_s()).await {
        Ok(Delivery::Events { events, token }) => (events, token),
        Ok(Delivery::Answer(code)) => return code,
        Err(refused) => return refuse(vendor, refused),
    };
    let events = storable(vendor, events);
    let recorded = tokio::time::timeout(
        app.listeners.db_timeout,
        events::record(
            &app.pool,
            vendor,
            &events,
            token.as_deref(),
            &app.listeners.rules,
        ),
    )
    .await;
    match recorded {
        Ok(Ok(r)) => {
            count(vendor, &events, &r);
            StatusCode::OK
        }
        Ok(Err(NotRecorded::TokenReused)) => refuse(vendor, Refused::Replayed),
        Ok(Err(NotRecorded::Database(e))) => {
            warn!(vendor, error = %e, "an event could not be recorded; answered 503, the vendor retries");
            counter!(EVENTS_UNAVAILABLE_TOTAL, "vendor" => vendor).increment(1);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Err(_) => {
            warn!(
                vendor,
                timeout_ms = app.listeners.db_timeout.as_millis() as u64,
                "the database did not answer in time; answered 503, the vendor retries"
            );
            counter!(EVENTS_UNAVAILABLE_TOTAL, "vendor" => vendor).increment(1);
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

/// What [`check_head`] answers without reading the body.
enum Early {
    Answer(StatusCode),
    Refused(Refused),
}

/// What the head alone decides (see the module docs): 404 for a vendor not configured, 413 for
/// a declared size over the bound, and the vendor's own check of the head
/// ([`Webhook::check_head`]). Gives the vendor's webhook.
fn check_head<'l>(
    l: &'l Listeners,
    vendor: &str,
    headers: &HeaderMap,
) -> Result<&'l dyn Webhook, Early> {
    let webhook = l
        .webhook(vendor)
        .ok_or(Early::Answer(StatusCode::NOT_FOUND))?;
    if l.bodies.declared_too_large(headers) {
        return Err(Early::Answer(StatusCode::PAYLOAD_TOO_LARGE));
    }
    webhook.check_head(headers).map_err(Early::Refused)?;
    Ok(webhook)
}

/// The answer to a body that was not read: counted by why, logged without it.
fn unread(vendor: &str, why: NotRead) -> StatusCode {
    counter!(EVENTS_UNREAD_TOTAL, "vendor" => vendor.to_string(), "reason" => why.label())
        .increment(1);
    warn!(
        vendor,
        reason = why.label(),
        "a webhook body was not read; nothing stored"
    );
    why.status()
}

/// The answer to a request that does not authenticate: counted, logged without its body.
fn refuse(vendor: &str, why: Refused) -> StatusCode {
    counter!(EVENTS_REFUSED_TOTAL, "vendor" => vendor.to_string(), "reason" => why.label())
        .increment(1);
    let code = why.status();
    let what = match why {
        Refused::Foreign(field) => field,
        other => other.label(),
    };
    warn!(
        vendor,
        refused = what,
        status = code.as_u16(),
        "a webhook request was refused; nothing stored"
    );
    code
}

/// The events a request's transaction can store; each other one (an empty id, a NUL byte
/// PostgreSQL's text refuses) is counted as `malformed` and logged without its content, so it
/// never costs its neighbours: the rest are committed and the vendor hears 2xx.
fn storable(vendor: &str, events: Vec<Event>) -> Vec<Event> {
    let total = events.len();
    let kept: Vec<Event> = events.into_iter().filter(Event::storable).collect();
    let malformed = (total - kept.len()) as u64;
    if malformed > 0 {
        counter!(EVENTS_TOTAL, "vendor" => vendor.to_string(), "campaign" => "unknown", "what" => "malformed")
            .increment(malformed);
        warn!(
            vendor,
            malformed,
            of = total,
            "events that cannot be stored (an empty id, a NUL byte) were skipped; the rest are recorded"
        );
    }
    kept
}

/// Counts the new events: by campaign and kind when they name a row of ours, else as
/// `unmatched` under `unknown` (a vendor echoes whatever it was given: a label per value
/// would grow without bound).
fn count(vendor: &str, events: &[Event], r: &Recorded) {
    for f in r.fresh.iter().filter(|f| f.ours) {
        let e = &events[f.at];
        let campaign = e.campaign_id.clone().unwrap_or_default();
        counter!(EVENTS_TOTAL, "vendor" => vendor.to_string(), "campaign" => campaign, "what" => e.what.as_str())
            .increment(1);
    }
    for refusal in r.fresh.iter().filter_map(|f| events[f.at].refusal.as_ref()) {
        counter!(REFUSALS_TOTAL, "provider" => refusal.family.as_str(), "cause" => refusal.cause.as_str())
            .increment(1);
    }
    for b in &r.braked {
        let line = b.line.kind();
        counter!(BRAKES_TOTAL, "campaign" => b.campaign_id.clone(), "line" => line).increment(1);
        warn!(
            campaign = %b.campaign_id,
            line,
            reason = %b.reason,
            "the brake paused the campaign: its rate crossed the line; every worker stops \
             within PAUSE_POLL_MS. Find the cause, then `campaign-sender resume` (docs/OPERATIONS.md)"
        );
    }
    if r.soft_listed > 0 {
        counter!(SOFT_BOUNCE_SUPPRESSIONS_TOTAL, "vendor" => vendor.to_string())
            .increment(r.soft_listed);
    }
    let unmatched = r.unmatched();
    if unmatched > 0 {
        counter!(EVENTS_TOTAL, "vendor" => vendor.to_string(), "campaign" => "unknown", "what" => "unmatched")
            .increment(unmatched);
    }
}
