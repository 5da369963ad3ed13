//! What the fake answers about itself: statistics, the chaos switch, deliveries, the timeline.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    pub requests: u64,
    pub delivered: u64,
    pub duplicates_suppressed: u64,
    pub throttled_429: u64,
    pub faults_503: u64,
    pub rejected_422: u64,
    pub bad_requests: u64,
    pub unauthorized: u64,
    pub members_delivered_more_than_once: u64,
    pub max_accepted_in_1s: u64,
    pub max_in_flight: u64,
    /// The most requests that *arrived* in any 1-second window, whatever they were answered:
    /// the load the senders offered, which must stay under the limit + burst.
    #[serde(default)]
    pub max_offered_in_1s: u64,
    /// Requests in flight right now.
    #[serde(default)]
    pub in_flight: u64,
    /// Mails delivered without RFC 8058 one-click unsubscribe as their vendor takes it (an
    /// HTTP(S) `List-Unsubscribe` and `List-Unsubscribe-Post: List-Unsubscribe=One-Click`).
    #[serde(default)]
    pub delivered_without_one_click: u64,
    /// Answers forced by `POST /chaos`.
    #[serde(default)]
    pub chaos_429: u64,
    #[serde(default)]
    pub chaos_5xx: u64,
    #[serde(default)]
    pub chaos_stalled: u64,
    #[serde(default)]
    pub chaos_refused: u64,
    /// Requests delivered whose answer was held past the client's timeout (`late_per_million`).
    #[serde(default)]
    pub answered_late: u64,
    /// Requests for an address on the suppression list (not delivered).
    #[serde(default)]
    pub suppressed_requests: u64,
}

/// One entry of the suppression list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Suppression {
    pub email: String,
    #[serde(default = "unspecified")]
    pub reason: String,
}

fn unspecified() -> String {
    "unspecified".into()
}

/// A time-limited misbehaviour, set with `POST /chaos`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChaosKind {
    /// Every request answers 429 with `Retry-After: retry_after_s`.
    Storm429,
    /// Every request answers 500, 502 or 503 in turn.
    Burst5xx,
    /// Every request is held `stall_ms` before it is processed.
    Stall,
    /// Every request answers `status` (default 401: the API key was revoked or rotated).
    Refuse,
    /// Every request answers the vendor's "your own quota is used up" (`retry_after_s` until
    /// it frees, where the vendor says so): SendGrid's credits, SES's daily quota, Mailgun's
    /// sending limit, Resend's daily quota. Postmark and our contract have none: a 429.
    Quota,
    /// Back to normal at once.
    Off,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChaosRequest {
    pub kind: ChaosKind,
    #[serde(default)]
    pub seconds: f64,
    #[serde(default = "one")]
    pub retry_after_s: u64,
    #[serde(default)]
    pub stall_ms: u64,
    /// For `refuse`: the status to answer.
    #[serde(default = "unauthorized")]
    pub status: u16,
    /// Only requests from this worker (the `User-Agent`'s part in parentheses) misbehave.
    #[serde(default)]
    pub worker: Option<String>,
}

impl Default for ChaosRequest {
    fn default() -> Self {
        Self {
            kind: ChaosKind::Off,
            seconds: 0.0,
            retry_after_s: 1,
            stall_ms: 0,
            status: 401,
            worker: None,
        }
    }
}

fn one() -> u64 {
    1
}

fn unauthorized() -> u16 {
    401
}

/// One worker's requests as the fake saw them (`GET /workers`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerSeen {
    pub requests: u64,
    /// Unix milliseconds of its latest request.
    pub last_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Delivery {
    pub template: String,
    pub member_id: i64,
    /// Unix milliseconds of the first delivery.
    pub first_ms: u64,
    pub deliveries: u64,
    pub keys: Vec<String>,
}

/// Requests in one second of the fake's life, from one worker.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TimelinePoint {
    pub second: u64,
    pub worker: String,
    pub accepted: u64,
    pub throttled: u64,
}
