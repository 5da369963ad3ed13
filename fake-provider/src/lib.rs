//! A fake email provider with the real providers' contracts, for tests and load runs.
//!
//! - Every vendor's send path, in its words ([`vendors`]): `POST /v1/send` (our JSON contract:
//!   `{"to", "member_id", "template"}` and `Idempotency-Key`), SendGrid `/v3/mail/send`, SES v2
//!   `/v2/email/outbound-emails`, Postmark `/email/withTemplate`, Mailgun
//!   `/v3/{domain}/messages` (multipart) and Resend `/emails`, each with its auth when a key is
//!   configured, its success body (and message id) and its error bodies. A key already
//!   delivered within the idempotency window (the key retention, 24 h unless configured)
//!   answers 200 and is not delivered again (`duplicates_suppressed`) — only where the vendor
//!   honours keys (ours, Resend): a repeat to the others is a second delivery.
//! - A GCRA rate limit (rate, burst) answers 429 with `Retry-After` (seconds, rounded up).
//! - The fault profile our users see: `member_id % 25 == 0` → 503 on the first attempt of that
//!   key (4 %); `member_id % 997 == 0` → 422 always (0.1 %). Optional latency (mean ± jitter),
//!   stalls (never answers) and "everything 503".
//! - `GET /stats` (JSON): requests, delivered, duplicates suppressed, 429s, members delivered
//!   more than once (under different keys: what a broken idempotency key would cause), the most
//!   requests accepted in any 1-second window, the most requests in flight.
//! - `GET /timeline`: requests per second since start, by worker (the part of `User-Agent` in
//!   parentheses) and by answer (`accepted`, `throttled`), for charts.
//! - `GET /deliveries`: every delivered member with its first delivery time (for checks such as
//!   "nothing delivered after an opt-out") and the distinct keys it was sent with.
//! - `GET /accepted`: the arrival time (Unix ms) of every request the rate limit accepted, repeats
//!   of a key included: what the account's limit counts.
//! - `GET /workers`: requests by worker (the `User-Agent`'s part in parentheses) and when the
//!   latest arrived.
//! - `GET /suppressions`: the suppression list as CSV (`email,reason`), what the provider
//!   exports; `POST /suppressions` `[{"email", "reason"}]` adds to it. A request for a listed
//!   address (any case) is not delivered: our contract answers `suppressed_status` (406, as an
//!   "inactive recipient"), Postmark 422 / ErrorCode 406, the others accept and drop it (as they
//!   do), after the idempotency check. Each vendor's API that takes an address off that list
//!   (`suppress --lift-at-vendor`) answers in its words ([`lists`]).
//! - Key retention (`idempotency_window`) and the "answered too late" fault
//!   (`late_per_million`, `late_ms`: delivered, then the answer held past the client's timeout).
//! - `POST /chaos` `{"kind": "storm429" | "burst5xx" | "stall" | "refuse" | "off", "seconds",
//!   "retry_after_s", "stall_ms", "status", "worker"}`: for the chaos harness and tests, a
//!   time-limited misbehaviour (of one worker's requests only, with `worker`) — `refuse`
//!   answers `status` (401 by default: a revoked API key) — on top of the profile — a
//!   429 storm with `Retry-After`, a burst of 500/502/503, or every request held `stall_ms`
//!   before it is processed (delivered late, after the client gave up). Counted apart from the
//!   rate limit's own 429s (`chaos_429`, `chaos_5xx`, `chaos_stalled`).
//!
//! Delivery time is when the request *arrived*, before any artificial latency.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::Value;

mod lists;
mod types;
pub mod vendors;
pub use types::*;
use vendors::{Contract, Mail};

/// How the fake behaves. Every field can be set from the `fake-provider` command line.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    /// Accepted requests per second (GCRA); `None` = unlimited.
    pub rate_per_s: Option<f64>,
    /// Requests that may arrive at once above the steady rate.
    pub burst: u32,
    /// The standard fault profile (%25 → one 503, %997 → 422).
    pub faults: bool,
    /// Every request answers 503 (an outage).
    pub always_unavailable: bool,
    pub latency_mean_ms: u64,
    pub latency_jitter_ms: u64,
    /// Requests per million that stall (never answer).
    pub stall_per_million: u32,
    /// When set, requests must carry `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// How long a delivered `Idempotency-Key` is remembered (the key retention): a repeat
    /// within it answers 200 undelivered, one after it is delivered again.
    pub idempotency_window: Duration,
    /// Requests per million answered too late: delivered, then the answer held `late_ms`
    /// (past the client's timeout: it never learns the mail went).
    pub late_per_million: u32,
    pub late_ms: u64,
    /// The answer to a request for an address on the fake's suppression list (not
    /// delivered): 406 "inactive recipient" by default; 200 accepts and drops it.
    pub suppressed_status: u16,
}

impl Default for FakeConfig {
    fn default() -> Self {
        Self {
            rate_per_s: None,
            burst: 20,
            faults: false,
            always_unavailable: false,
            latency_mean_ms: 0,
            latency_jitter_ms: 0,
            stall_per_million: 0,
            api_key: None,
            idempotency_window: Duration::from_secs(24 * 3600),
            late_per_million: 0,
            late_ms: 0,
            suppressed_status: 406,
        }
    }
}

#[derive(Default)]
struct Inner {
    /// (second since start, worker) → (accepted, throttled).
    timeline: HashMap<(u64, String), (u64, u64)>,
    /// Unix milliseconds of every request the rate limit accepted, in arrival order: what the
    /// account's limit counts, repeats of a key included.
    accepted_ms: Vec<u64>,
    stats: Stats,
    /// key → when it was delivered.
    delivered_keys: HashMap<String, Instant>,
    /// keys that have been attempted at least once (the 503 fault hits only the first).
    attempted_keys: HashSet<String>,
    by_member: HashMap<(String, i64), Delivery>,
    /// GCRA theoretical arrival time.
    tat: Option<Instant>,
    accepted_window: VecDeque<Instant>,
    offered_window: VecDeque<Instant>,
    /// The misbehaviour in force, and until when.
    chaos: Option<(ChaosRequest, Instant)>,
    /// Requests by worker.
    workers: HashMap<String, WorkerSeen>,
    /// The suppression list: lower-cased address → reason.
    suppressed: HashMap<String, String>,
}

/// Pushes `now` into a sliding 1-second window and returns how many are in it.
fn in_last_second(window: &mut VecDeque<Instant>, now: Instant) -> u64 {
    window.push_back(now);
    while window
        .front()
        .is_some_and(|f| now.duration_since(*f) >= Duration::from_secs(1))
    {
        window.pop_front();
    }
    window.len() as u64
}

/// Shared state; tests read statistics from it directly.
pub struct FakeProvider {
    cfg: FakeConfig,
    started: Instant,
    inner: Mutex<Inner>,
    in_flight: AtomicU64,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

struct InFlight<'a>(&'a FakeProvider);
impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Verdict {
    Throttled(Duration),
    Accepted,
}

impl FakeProvider {
    pub fn new(cfg: FakeConfig) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            started: Instant::now(),
            inner: Mutex::new(Inner::default()),
            in_flight: AtomicU64::new(0),
        })
    }

    pub fn stats(&self) -> Stats {
        let mut s = self.inner.lock().expect("fake lock").stats.clone();
        s.in_flight = self.in_flight.load(Ordering::SeqCst);
        s
    }

    /// Starts (or, with `Off`, ends) a misbehaviour for `seconds`.
    pub fn set_chaos(&self, c: ChaosRequest) {
        let mut inner = self.inner.lock().expect("fake lock");
        inner.chaos = (c.kind != ChaosKind::Off).then(|| {
            (
                c.clone(),
                Instant::now() + Duration::from_secs_f64(c.seconds.max(0.0)),
            )
        });
    }

    /// Requests by worker: how many, and when the latest arrived.
    pub fn workers(&self) -> HashMap<String, WorkerSeen> {
        self.with(|i| i.workers.clone())
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        let inner = self.inner.lock().expect("fake lock");
        let mut v: Vec<Delivery> = inner.by_member.values().cloned().collect();
        v.sort_by_key(|d| (d.template.clone(), d.member_id));
        v
    }

    /// When each accepted request arrived (Unix ms), in arrival order.
    pub fn accepted_ms(&self) -> Vec<u64> {
        self.with(|i| i.accepted_ms.clone())
    }

    pub fn timeline(&self) -> Vec<TimelinePoint> {
        let inner = self.inner.lock().expect("fake lock");
        let mut v: Vec<TimelinePoint> = inner
            .timeline
            .iter()
            .map(|((second, worker), (accepted, throttled))| TimelinePoint {
                second: *second,
                worker: worker.clone(),
                accepted: *accepted,
                throttled: *throttled,
            })
            .collect();
        v.sort_by(|a, b| (a.second, &a.worker).cmp(&(b.second, &b.worker)));
        v
    }

    /// GCRA: admit if the theoretical arrival time is at most `burst - 1` intervals ahead.
    fn admit(&self, inner: &mut Inner, now: Instant) -> Verdict {
        if let Some(rate) = self.cfg.rate_per_s {
            let t = Duration::from_secs_f64(1.0 / rate);
            let tolerance = t * self.cfg.burst.saturating_sub(1);
            let tat = inner.tat.unwrap_or(now).max(now);
            if tat > now + tolerance {
                return Verdict::Throttled(tat - (now + tolerance));
            }
            inner.tat = Some(tat + t);
        }
        let n = in_last_second(&mut inner.accepted_window, now);
        inner.stats.max_accepted_in_1s = inner.stats.max_accepted_in_1s.max(n);
        Verdict::Accepted
    }

    async fn handle(&self, contract: Contract, headers: HeaderMap, fields: Value) -> Response {
        let arrived = Instant::now();
        let arrived_wall = SystemTime::now();
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _guard = InFlight(self);
        self.with(|i| {
            i.stats.requests += 1;
            i.stats.max_in_flight = i.stats.max_in_flight.max(n);
        });
        let req = match self.check_request(contract, &headers, &fields) {
            Ok(r) => r,
            Err(refusal) => return *refusal,
        };
        let worker = worker_of(&headers);
        self.with(|i| {
            let w = i.workers.entry(worker.clone()).or_default();
            w.requests += 1;
            w.last_ms = unix_ms(arrived_wall);
        });
        let second = arrived.duration_since(self.started).as_secs();
        if let Some(answer) = self.misbehave(contract, arrived, &worker).await {
            return answer;
        }
        if let Verdict::Throttled(wait) = self.admit_counted(arrived, second, worker) {
            self.with(|i| i.stats.throttled_429 += 1);
            let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            return contract.throttled(secs, unix_ms(arrived_wall) / 1000);
        }
        self.simulate_latency().await;
        let (answer, delivered) = self.deliver(contract, req, arrived, arrived_wall);
        if delivered && self.answers_late() {
            tokio::time::sleep(Duration::from_millis(self.cfg.late_ms)).await;
        }
        answer
    }

    /// The "answered too late" fault: this fresh delivery's answer is held back (a repeat the
    /// key retention suppressed is answered at once).
    fn answers_late(&self) -> bool {
        let late = self.cfg.late_per_million > 0
            && rand::random_range(0..1_000_000) < self.cfg.late_per_million;
        if late {
            self.with(|i| i.stats.answered_late += 1);
        }
        late
    }

    /// Adds addresses (any case) to the suppression list, with their reason.
    pub fn suppress(&self, entries: impl IntoIterator<Item = Suppression>) {
        self.with(|i| {
            for e in entries {
                i.suppressed.insert(e.email.to_lowercase(), e.reason);
            }
        });
    }

    /// The suppression list, sorted by address.
    pub fn suppressions(&self) -> Vec<Suppression> {
        let mut v: Vec<Suppression> = self.with(|i| {
            i.suppressed
                .iter()
                .map(|(email, reason)| Suppression {
                    email: email.clone(),
                    reason: reason.clone(),
                })
                .collect()
        });
        v.sort_by(|a, b| a.email.cmp(&b.email));
        v
    }

    /// Takes an address (any case) off the suppression list; whether it was on it.
    pub fn unsuppress(&self, email: &str) -> bool {
        self.with(|i| i.suppressed.remove(&email.to_lowercase()).is_some())
    }

    /// The reason an address (any case) is listed for, if it is.
    pub fn listed_for(&self, email: &str) -> Option<String> {
        self.with(|i| i.suppressed.get(&email.to_lowercase()).cloned())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().expect("fake lock"))
    }

    /// The vendor's contract ([`Contract::read`]): its auth (when a key is configured), its
    /// fields. Else the vendor's answer, counted.
    fn check_request(
        &self,
        contract: Contract,
        headers: &HeaderMap,
        fields: &Value,
    ) -> Result<Mail, Box<Response>> {
        contract
            .read(headers, fields, self.cfg.api_key.as_deref())
            .map_err(|refused| {
                self.with(|i| {
                    if refused.unauthorized {
                        i.stats.unauthorized += 1;
                    } else {
                        i.stats.bad_requests += 1;
                    }
                });
                refused.answer
            })
    }

    /// The offered-load window, then the `POST /chaos` misbehaviour in force, if any: an answer
    /// instead of processing (a 429 storm, a 5xx burst), or a stall before processing.
    async fn misbehave(
        &self,
        contract: Contract,
        arrived: Instant,
        worker: &str,
    ) -> Option<Response> {
        let chaos = self.with(|i| {
            let offered = in_last_second(&mut i.offered_window, arrived);
            i.stats.max_offered_in_1s = i.stats.max_offered_in_1s.max(offered);
            match &i.chaos {
                Some((c, until))
                    if arrived < *until && c.worker.as_deref().is_none_or(|w| w == worker) =>
                {
                    Some(c.clone())
                }
                _ => None,
            }
        })?;
        match chaos.kind {
            ChaosKind::Storm429 => {
                self.with(|i| i.stats.chaos_429 += 1);
                Some(contract.throttled(chaos.retry_after_s, unix_ms(SystemTime::now()) / 1000))
            }
            ChaosKind::Burst5xx => {
                let status = self.with(|i| {
                    i.stats.chaos_5xx += 1;
                    [
                        StatusCode::INTERNAL_SERVER_ERROR,
                        StatusCode::BAD_GATEWAY,
                        StatusCode::SERVICE_UNAVAILABLE,
                    ][(i.stats.chaos_5xx % 3) as usize]
                });
                Some((status, "upstream trouble").into_response())
            }
            ChaosKind::Stall => {
                self.with(|i| i.stats.chaos_stalled += 1);
                tokio::time::sleep(Duration::from_millis(chaos.stall_ms)).await;
                None
            }
            ChaosKind::Quota => {
                self.with(|i| i.stats.chaos_429 += 1);
                Some(contract.quota_used_up(chaos.retry_after_s))
            }
            ChaosKind::Refuse => {
                self.with(|i| i.stats.chaos_refused += 1);
                Some(contract.refused(chaos.status))
            }
            ChaosKind::Off => None,
        }
    }

    /// The rate limit's verdict, counted in the timeline by worker.
    fn admit_counted(&self, arrived: Instant, second: u64, worker: String) -> Verdict {
        self.with(|i| {
            let v = self.admit(i, arrived);
            let slot = i.timeline.entry((second, worker)).or_default();
            match v {
                Verdict::Accepted => {
                    slot.0 += 1;
                    i.accepted_ms.push(unix_ms(SystemTime::now()));
                }
                Verdict::Throttled(_) => slot.1 += 1,
            }
            v
        })
    }

    /// The configured stalls (never answered) and latency (mean ± jitter).
    async fn simulate_latency(&self) {
        if self.cfg.stall_per_million > 0
            && rand::random_range(0..1_000_000) < self.cfg.stall_per_million
        {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        if self.cfg.latency_mean_ms > 0 || self.cfg.latency_jitter_ms > 0 {
            let j = self.cfg.latency_jitter_ms as i64;
            let ms = (self.cfg.latency_mean_ms as i64
                + if j > 0 { rand::random_range(-j..=j) } else { 0 })
            .max(0);
            tokio::time::sleep(Duration::from_millis(ms as u64)).await;
        }
    }

    /// An admitted request (and whether it was delivered now): suppressed as a repeat of a key delivered within the idempotency
    /// window, failed by the fault profile, or delivered (and recorded by member).
    fn deliver(
        &self,
        contract: Contract,
        req: Mail,
        arrived: Instant,
        arrived_wall: SystemTime,
    ) -> (Response, bool) {
        let mut inner = self.inner.lock().expect("fake lock");
        let key = req.key.clone();
        if let Some(at) = inner.delivered_keys.get(&key) {
            if req.honour_key && arrived.duration_since(*at) < self.cfg.idempotency_window {
                inner.stats.duplicates_suppressed += 1;
                let n = inner.stats.delivered;
                return (contract.duplicate(n), false);
            }
        }
        if inner.suppressed.contains_key(&req.to.to_lowercase()) {
            inner.stats.suppressed_requests += 1;
            let n = inner.stats.requests;
            let answer = contract
                .suppressed(self.cfg.suppressed_status)
                .unwrap_or_else(|| contract.accepted(n));
            return (answer, false);
        }
        if self.cfg.always_unavailable {
            inner.stats.faults_503 += 1;
            return (contract.unavailable(), false);
        }
        let first_attempt = inner.attempted_keys.insert(key.clone());
        if self.cfg.faults && req.member_id % 997 == 0 {
            inner.stats.rejected_422 += 1;
            return (contract.invalid("recipient rejected"), false);
        }
        if self.cfg.faults && req.member_id % 25 == 0 && first_attempt {
            inner.stats.faults_503 += 1;
            return (contract.unavailable(), false);
        }
        inner.delivered_keys.insert(key.clone(), arrived);
        inner.stats.delivered += 1;
        if !req.one_click {
            inner.stats.delivered_without_one_click += 1;
        }
        let n = inner.stats.delivered;
        let rec = inner
            .by_member
            .entry((req.template.clone(), req.member_id))
            .or_insert_with(|| Delivery {
                template: req.template.clone(),
                member_id: req.member_id,
                first_ms: unix_ms(arrived_wall),
                deliveries: 0,
                keys: Vec::new(),
            });
        rec.deliveries += 1;
        if !rec.keys.contains(&key) {
            rec.keys.push(key.clone());
        }
        if rec.deliveries == 2 {
            inner.stats.members_delivered_more_than_once += 1;
        }
        (contract.accepted(n), true)
    }
}

/// The worker that sent a request: the part of `User-Agent` in parentheses (never personal
/// data), at most 32 characters.
fn worker_of(headers: &HeaderMap) -> String {
    headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.rsplit_once('(').and_then(|(_, w)| w.strip_suffix(')')))
        .map(|w| w.chars().take(32).collect::<String>())
        .unwrap_or_else(|| "unknown".to_string())
}

/// A JSON vendor's route: the body as JSON (not JSON: the vendor's 400).
async fn send_json(
    contract: Contract,
    p: Arc<FakeProvider>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    match serde_json::from_slice::<Value>(&body) {
        Ok(fields) => p.handle(contract, headers, fields).await,
        Err(_) => {
            p.with(|i| {
                i.stats.requests += 1;
                i.stats.bad_requests += 1;
            });
            contract.invalid("the body is not JSON")
        }
    }
}

/// Mailgun's route: `multipart/form-data`.
async fn send_form(
    State(p): State<Arc<FakeProvider>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let ct = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    match vendors::form_fields(&ct, body).await {
        Some(fields) => p.handle(Contract::Mailgun, headers, fields).await,
        None => {
            p.with(|i| {
                i.stats.requests += 1;
                i.stats.bad_requests += 1;
            });
            Contract::Mailgun.invalid("the body is not multipart/form-data")
        }
    }
}

async fn stats(State(p): State<Arc<FakeProvider>>) -> Json<Stats> {
    Json(p.stats())
}

async fn timeline(State(p): State<Arc<FakeProvider>>) -> Json<Vec<TimelinePoint>> {
    Json(p.timeline())
}

async fn accepted(State(p): State<Arc<FakeProvider>>) -> Json<Vec<u64>> {
    Json(p.accepted_ms())
}

async fn deliveries(State(p): State<Arc<FakeProvider>>) -> Json<Vec<Delivery>> {
    Json(p.deliveries())
}

async fn workers(State(p): State<Arc<FakeProvider>>) -> Json<HashMap<String, WorkerSeen>> {
    Json(p.workers())
}

async fn add_suppressions(
    State(p): State<Arc<FakeProvider>>,
    Json(entries): Json<Vec<Suppression>>,
) -> StatusCode {
    p.suppress(entries);
    StatusCode::NO_CONTENT
}

/// The suppression list as the provider exports it: CSV `email,reason` with a header.
async fn export_suppressions(State(p): State<Arc<FakeProvider>>) -> String {
    let mut out = String::from("email,reason\n");
    for s in p.suppressions() {
        out += &format!("{},{}\n", s.email, s.reason);
    }
    out
}

async fn chaos(State(p): State<Arc<FakeProvider>>, Json(c): Json<ChaosRequest>) -> StatusCode {
    p.set_chaos(c);
    StatusCode::NO_CONTENT
}

pub fn router(p: Arc<FakeProvider>) -> Router {
    let mut r = Router::new().route(Contract::Mailgun.path(), post(send_form));
    for contract in Contract::ALL {
        if contract == Contract::Mailgun {
            continue;
        }
        r = r.route(
            contract.path(),
            post(
                move |State(p): State<Arc<FakeProvider>>,
                      headers: HeaderMap,
                      body: axum::body::Bytes| {
                    send_json(contract, p, headers, body)
                },
            ),
        );
    }
    r.route("/stats", get(stats))
        .route("/deliveries", get(deliveries))
        .route("/timeline", get(timeline))
        .route("/accepted", get(accepted))
        .route("/chaos", post(chaos))
        .route(
            "/suppressions",
            post(add_suppressions).get(export_suppressions),
        )
        .route("/workers", get(workers))
        .route("/healthz", get(|| async { "ok" }))
        .merge(lists::routes())
        .with_state(p)
}

/// Serves on `addr` (port 0 picks a free one) until `shutdown` resolves; returns the bound
/// address at once and the server task.
pub async fn spawn(
    cfg: FakeConfig,
    addr: SocketAddr,
) -> std::io::Result<(SocketAddr, Arc<FakeProvider>, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let p = FakeProvider::new(cfg);
    let app = router(p.clone());
    let handle = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((bound, p, handle))
}

/// [`spawn`] over HTTPS: the certificate chain and key are PEM files (`scripts/tls-certs.sh`
/// makes a pair for `localhost`).
pub async fn spawn_tls(
    cfg: FakeConfig,
    addr: SocketAddr,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> std::io::Result<(SocketAddr, Arc<FakeProvider>, tokio::task::JoinHandle<()>)> {
    // ring, the provider reqwest's rustls uses too (a second call finds it installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(cert, key).await?;
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let p = FakeProvider::new(cfg);
    let app = router(p.clone());
    let handle = tokio::spawn(async move {
        let _ = axum_server::from_tcp_rustls(listener, tls)
            .serve(app.into_make_service())
            .await;
    });
    Ok((bound, p, handle))
}

#[cfg(test)]
mod tests;
