//! Prometheus metrics: every name in one place, with its unit in the name and bounded labels.
//!
//! Recorded through the `metrics` facade (a no-op until an exporter is installed), exported by
//! `metrics-exporter-prometheus` on `METRICS_ADDR` when it is set. No label ever carries a
//! member id, an email address or anything else per recipient: the only labels are `outcome`
//! or `state` (fixed vocabularies) and `worker` (set once, as a global label, from the pod's
//! name).

use std::net::SocketAddr;
use std::time::Duration;

use metrics::{counter, gauge, histogram};

/// Vendor events recorded (`events`), new ones only, by `vendor`, `campaign` and `what` (the
/// funnel: delivered, hard_bounce, complaint, …) for events naming a row of ours; under
/// `campaign="unknown"`, `unmatched` for those naming none and `malformed` for those that could
/// not be stored (the label set stays bounded whatever a vendor echoes).
pub const EVENTS_TOTAL: &str = "campaign_sender_events_total";
/// Refusals the vendors reported (bounces and blocks, new ones only), by the recipient's
/// mailbox `provider` (google, microsoft, yahoo, apple, other) and the `cause` it was read as
/// (`events::cause`: no_mailbox … authentication, reputation … unknown) — 50 series at most.
pub const REFUSALS_TOTAL: &str = "campaign_sender_refusals_total";
/// Webhook requests refused before anything was stored, by `vendor` and `reason` (unsigned,
/// bad_signature, stale, replayed, foreign, cert_unavailable).
pub const EVENTS_REFUSED_TOTAL: &str = "campaign_sender_events_refused_total";
/// Webhook bodies not read, by `vendor` and `reason`: too_large (413), busy (503: the body
/// memory budget stayed spent), too_slow (408: not all there by `EVENTS_READ_TIMEOUT_MS`),
/// broken (400).
pub const EVENTS_UNREAD_TOTAL: &str = "campaign_sender_events_unread_total";
/// Mails the mailto brought through a vendor's inbound route (`/inbound/{vendor}`), by
/// `vendor` and `outcome`: `unsubscribed`, `unmatched`, `no_token` (to read by hand),
/// `too_large` (over `EVENTS_INBOUND_MAX_BODY_BYTES`, refused so the vendor stops retrying).
pub const INBOUND_MAIL_TOTAL: &str = "campaign_sender_inbound_mail_total";
/// Webhook requests answered 503 because the database did not record them in time.
pub const EVENTS_UNAVAILABLE_TOTAL: &str = "campaign_sender_events_unavailable_total";
/// Campaigns `events` paused over a mailbox provider's line, by `campaign` and `line`
/// (`complaint`, `hard_bounce`): the brake ([`crate::store::brake`]).
pub const BRAKES_TOTAL: &str = "campaign_sender_brakes_total";
/// Addresses `events` listed for `SOFT_BOUNCE_LIMIT` soft bounces within the window.
pub const SOFT_BOUNCE_SUPPRESSIONS_TOTAL: &str = "campaign_sender_soft_bounce_suppressions_total";
/// Rows settled by this process, by `outcome`: sent, retry, failed, released, opted_out, deferred.
pub const SENDS_TOTAL: &str = "campaign_sender_sends_total";
/// One provider request, from start to answer (or timeout).
pub const SEND_DURATION_SECONDS: &str = "campaign_sender_send_duration_seconds";
/// HTTP attempts started (each took a pacer token).
pub const REQUESTS_TOTAL: &str = "campaign_sender_requests_total";
/// 429 answers from the provider.
pub const THROTTLED_TOTAL: &str = "campaign_sender_provider_throttled_total";
/// Attempts that could not connect to the provider (the row is deferred, no attempt spent).
pub const UNREACHABLE_TOTAL: &str = "campaign_sender_provider_unreachable_total";
/// Time the gate waited for a pacer token (share, pause, spacing).
pub const PACER_WAIT_SECONDS: &str = "campaign_sender_pacer_wait_seconds";
/// This pod's current share of the fleet-wide limit.
pub const RATE_SHARE: &str = "campaign_sender_rate_share_per_second";
/// The key's effective (AIMD) limit as this pod last saw it.
pub const RATE_EFFECTIVE_LIMIT: &str = "campaign_sender_rate_effective_limit_per_second";
/// Live pods sharing the limit key, as this pod last saw them.
pub const RATE_LIVE_PODS: &str = "campaign_sender_rate_live_pods";

/// The configured fleet-wide limit (`MAIL_RATE_PER_S`).
pub const RATE_LIMIT: &str = "campaign_sender_rate_limit_per_second";
/// Batches claimed, and the rows in them.
pub const BATCHES_CLAIMED_TOTAL: &str = "campaign_sender_batches_claimed_total";
pub const ROWS_CLAIMED_TOTAL: &str = "campaign_sender_rows_claimed_total";
/// Claimed rows whose previous holder's lease had expired (it was killed or stalled).
pub const LEASES_EXPIRED_TOTAL: &str = "campaign_sender_leases_expired_total";
/// Row leases extended by the heartbeat.
pub const LEASES_RENEWED_TOTAL: &str = "campaign_sender_leases_renewed_total";
/// Results the fence refused (the row was re-claimed by someone else), and rows found lost.
pub const STALE_WRITES_TOTAL: &str = "campaign_sender_stale_writes_total";
/// Claimed rows given back unsent when this process stopped (deadline, SIGTERM, threshold).
pub const ROWS_RELEASED_TOTAL: &str = "campaign_sender_rows_released_total";
/// Rows moved out of the work set unsent, by `reason`: `suppressed` (the address is on the
/// suppression list) or `unconfirmed` (maybe delivered, past the idempotency window: an
/// operator must `resolve` them).
pub const ROWS_DIVERTED_TOTAL: &str = "campaign_sender_rows_diverted_total";
/// Rows written `sent` whose member had opted out by the time of the write.
pub const SENT_AFTER_OPTOUT_TOTAL: &str = "campaign_sender_sent_after_optout_total";
/// Results whose fenced write was given up after the database kept refusing it (the rows
/// return after their lease and are sent again under the same idempotency key).
pub const RESULT_WRITES_FAILED_TOTAL: &str = "campaign_sender_result_writes_failed_total";
/// The campaign's rows by `state` (ready, waiting, leased, failed), sampled by each pod.
pub const BACKLOG_ROWS: &str = "campaign_sender_backlog_rows";
/// 1 while the campaign's send window is open (or it has none), 0 while it is closed: what the
/// no-progress alert leaves alone.
pub const SEND_WINDOW_OPEN: &str = "campaign_sender_send_window_open";
/// 1 while the campaign is paused (the kill switch, by an operator or automatically), 0
/// otherwise: the backlog gauges are not refreshed while paused, so the no-progress alert
/// leaves a paused campaign alone by this.
pub const CAMPAIGN_PAUSED: &str = "campaign_sender_campaign_paused";
/// 1 while the provider refuses the limit key's account or endpoint (until `resume`).
pub const ACCOUNT_REFUSED: &str = "campaign_sender_account_refused";
/// Requests used or granted of the daily quota in the last 24 h, and the quota, as this pod's
/// last round saw them (only with `MAIL_DAILY_QUOTA`).
pub const QUOTA_USED: &str = "campaign_sender_daily_quota_used";
pub const QUOTA_LIMIT: &str = "campaign_sender_daily_quota";

/// Every metric this crate records (the manifests' alerts and dashboard may use only these).
pub const ALL: &[&str] = &[
    SENDS_TOTAL,
    SEND_DURATION_SECONDS,
    REQUESTS_TOTAL,
    THROTTLED_TOTAL,
    UNREACHABLE_TOTAL,
    PACER_WAIT_SECONDS,
    RATE_SHARE,
    RATE_EFFECTIVE_LIMIT,
    RATE_LIVE_PODS,
    RATE_LIMIT,
    BATCHES_CLAIMED_TOTAL,
    ROWS_CLAIMED_TOTAL,
    LEASES_EXPIRED_TOTAL,
    LEASES_RENEWED_TOTAL,
    STALE_WRITES_TOTAL,
    ROWS_RELEASED_TOTAL,
    ROWS_DIVERTED_TOTAL,
    SENT_AFTER_OPTOUT_TOTAL,
    RESULT_WRITES_FAILED_TOTAL,
    BACKLOG_ROWS,
    SEND_WINDOW_OPEN,
    CAMPAIGN_PAUSED,
    ACCOUNT_REFUSED,
    QUOTA_USED,
    QUOTA_LIMIT,
    EVENTS_TOTAL,
    EVENTS_REFUSED_TOTAL,
    EVENTS_UNREAD_TOTAL,
    EVENTS_UNAVAILABLE_TOTAL,
    INBOUND_MAIL_TOTAL,
    BRAKES_TOTAL,
    SOFT_BOUNCE_SUPPRESSIONS_TOTAL,
    REFUSALS_TOTAL,
];

/// Serves `/metrics` on `addr` (every path answers with the exposition). Must run inside the
/// tokio runtime.
pub fn install(addr: SocketAddr, worker: &str) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .add_global_label("worker", worker)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(SEND_DURATION_SECONDS.into()),
            &[0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4],
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                metrics_exporter_prometheus::Matcher::Full(PACER_WAIT_SECONDS.into()),
                &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0],
            )
        })
        .and_then(|b| b.install())
        .map_err(|e| e.to_string())
}

/// Puts every worker counter an alert takes `increase`/`rate` of on `/metrics` at 0 from the
/// start (`run`, `serve`; the webhook server starts its own:
/// `events::server::start_counters_at_zero`). Prometheus cannot see the first increment of a
/// series that appears with it (a counter first scraped at 1 has no earlier sample to increase
/// from), so without this a pod's first stale write, expired lease or mail sent after an opt-out
/// would never fire its alert (manifests/monitoring/prometheusrule.yaml). Only a worker: a
/// webhook pod showing `sends_total 0` would be a sender that never sends.
pub fn start_worker_counters_at_zero() {
    for outcome in ["sent", "failed"] {
        counter!(SENDS_TOTAL, "outcome" => outcome).increment(0);
    }
    for reason in ["suppressed", "unconfirmed"] {
        counter!(ROWS_DIVERTED_TOTAL, "reason" => reason).increment(0);
    }
    for name in [
        THROTTLED_TOTAL,
        UNREACHABLE_TOTAL,
        LEASES_EXPIRED_TOTAL,
        STALE_WRITES_TOTAL,
        SENT_AFTER_OPTOUT_TOTAL,
        RESULT_WRITES_FAILED_TOTAL,
    ] {
        counter!(name).increment(0);
    }
}

pub fn settled(outcome: &'static str) {
    counter!(SENDS_TOTAL, "outcome" => outcome).increment(1);
}

pub fn request(took: Duration) {
    counter!(REQUESTS_TOTAL).increment(1);
    histogram!(SEND_DURATION_SECONDS).record(took.as_secs_f64());
}

pub fn throttled() {
    counter!(THROTTLED_TOTAL).increment(1);
}

pub fn unreachable() {
    counter!(UNREACHABLE_TOTAL).increment(1);
}

pub fn pacer_wait(waited: Duration) {
    histogram!(PACER_WAIT_SECONDS).record(waited.as_secs_f64());
}

pub fn rate_share(per_s: f64) {
    gauge!(RATE_SHARE).set(per_s);
}

pub fn rate_effective_limit(per_s: f64) {
    gauge!(RATE_EFFECTIVE_LIMIT).set(per_s);
}

pub fn rate_live_pods(n: usize) {
    gauge!(RATE_LIVE_PODS).set(n as f64);
}

pub fn rate_limit(per_s: f64) {
    gauge!(RATE_LIMIT).set(per_s);
}

pub fn claimed(rows: usize, reclaimed: usize) {
    counter!(BATCHES_CLAIMED_TOTAL).increment(1);
    counter!(ROWS_CLAIMED_TOTAL).increment(rows as u64);
    if reclaimed > 0 {
        counter!(LEASES_EXPIRED_TOTAL).increment(reclaimed as u64);
    }
}

pub fn leases_renewed(n: u64) {
    counter!(LEASES_RENEWED_TOTAL).increment(n);
}

pub fn stale_writes(n: u64) {
    if n > 0 {
        counter!(STALE_WRITES_TOTAL).increment(n);
    }
}

pub fn released(n: u64) {
    counter!(ROWS_RELEASED_TOTAL).increment(n);
}

pub fn diverted(suppressed: usize, unconfirmed: usize) {
    counter!(ROWS_DIVERTED_TOTAL, "reason" => "suppressed").increment(suppressed as u64);
    counter!(ROWS_DIVERTED_TOTAL, "reason" => "unconfirmed").increment(unconfirmed as u64);
}

pub fn sent_after_optout(n: u64) {
    counter!(SENT_AFTER_OPTOUT_TOTAL).increment(n);
}

pub fn result_writes_failed(n: u64) {
    counter!(RESULT_WRITES_FAILED_TOTAL).increment(n);
}

pub fn account_refused(refused: bool) {
    gauge!(ACCOUNT_REFUSED).set(if refused { 1.0 } else { 0.0 });
}

pub fn quota(used: i64, daily: i64) {
    gauge!(QUOTA_USED).set(used as f64);
    gauge!(QUOTA_LIMIT).set(daily as f64);
}

pub fn campaign_paused(paused: bool) {
    gauge!(CAMPAIGN_PAUSED).set(if paused { 1.0 } else { 0.0 });
}

pub fn window_open(open: bool) {
    gauge!(SEND_WINDOW_OPEN).set(if open { 1.0 } else { 0.0 });
}

/// The work left (and, when known, the failed rows), as gauges by state.
pub fn backlog(rem: &crate::store::Remaining, failed: Option<i64>) {
    gauge!(BACKLOG_ROWS, "state" => "ready").set(rem.ready as f64);
    gauge!(BACKLOG_ROWS, "state" => "waiting").set(rem.waiting as f64);
    gauge!(BACKLOG_ROWS, "state" => "leased").set(rem.leased as f64);
    if let Some(f) = failed {
        gauge!(BACKLOG_ROWS, "state" => "failed").set(f as f64);
    }
}
