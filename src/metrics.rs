//! Prometheus metrics: every name in one place, with its unit in the name and bounded labels.
//!
//! Recorded through the `metrics` facade (a no-op until an exporter is installed), exported by
//! `metrics-exporter-prometheus` on `METRICS_ADDR` when it is set. No label ever carries a
//! member id, an email address or anything else per recipient: the only labels are `outcome`
//! (a fixed vocabulary) and `worker` (set once, as a global label, from the pod's name).

use std::net::SocketAddr;
use std::time::Duration;

use metrics::{counter, gauge, histogram};

/// Rows settled by this process, by `outcome`: sent, retry, failed, released, opted_out.
pub const SENDS_TOTAL: &str = "campaign_sender_sends_total";
/// One provider request, from start to answer (or timeout).
pub const SEND_DURATION_SECONDS: &str = "campaign_sender_send_duration_seconds";
/// HTTP attempts started (each took a pacer token).
pub const REQUESTS_TOTAL: &str = "campaign_sender_requests_total";
/// 429 answers from the provider.
pub const THROTTLED_TOTAL: &str = "campaign_sender_provider_throttled_total";
/// Time the gate waited for a pacer token (share, pause, spacing).
pub const PACER_WAIT_SECONDS: &str = "campaign_sender_pacer_wait_seconds";
/// This pod's current share of the fleet-wide limit.
pub const RATE_SHARE: &str = "campaign_sender_rate_share_per_second";
/// The key's effective (AIMD) limit as this pod last saw it.
pub const RATE_EFFECTIVE_LIMIT: &str = "campaign_sender_rate_effective_limit_per_second";
/// Live pods sharing the limit key, as this pod last saw them.
pub const RATE_LIVE_PODS: &str = "campaign_sender_rate_live_pods";

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
