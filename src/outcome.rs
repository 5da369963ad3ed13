//! Deciding, without doing: what a provider answer means for a row.
//!
//! Pure functions, unit-tested without a network or a database:
//! - [`classify`]: one HTTP attempt → [`Attempt`] (sent, retry, permanent; a connection that
//!   never opened is [`Attempt::Undelivered`]);
//! - [`resolve`]: an attempt plus the row's attempt count → the [`Resolution`] that `finish`
//!   writes (sent, retry at a time, failed, deferred or released without counting the attempt);
//! - [`backoff`]: exponential wait with a cap and jitter, never shorter than `Retry-After`;
//! - [`unreachable_pause`]: how long a pod stops sending while the provider cannot be reached;
//! - [`failure_check_due`]: when a worker counts the campaign's failures against the threshold.

use std::time::Duration;

use crate::store::{RowState, Written};
use crate::text_enum::text_enum;

text_enum! {
    /// Why a row was not delivered on this attempt. Stored in `last_error`; a short, fixed
    /// vocabulary (never a response body, which may echo personal data).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ErrorClass: "error class" {
        /// 429 Too Many Requests.
        Throttled = "throttled",
        /// 5xx.
        ServerError = "server_error",
        /// No response within `READ_TIMEOUT_MS` (or connect within `CONNECT_TIMEOUT_MS`).
        Timeout = "timeout",
        /// Could not connect (refused, DNS, TLS handshake, connect timeout): the request never left,
        /// so the row is deferred without spending an attempt.
        Connect = "connect",
        /// The connection broke in another way mid-request.
        Transport = "transport",
        /// A 4xx other than 429: the provider refuses this request; retrying will not help.
        Rejected = "rejected",
        /// 1xx/3xx or a code outside 100..=599: the endpoint is not the mail API we expect.
        UnexpectedStatus = "unexpected_status",
        /// The row's address is empty, absurdly long or not an address: failed without a request.
        InvalidEmail = "invalid_email",
        /// Opted out after the claim: released, never sent.
        OptedOut = "opted_out",
        /// Not attempted before the batch ran out of time or the process was stopped.
        Released = "released",
        /// The provider refused the account (401/403): released, the fleet paused.
        AccountRefused = "account_refused",
        /// The endpoint is not the mail API (404/405: `MAIL_URL` or its path): released, the fleet
        /// paused.
        EndpointRefused = "endpoint_refused",
        /// The vendor's own daily or monthly quota is used up: released, the fleet stops until the
        /// vendor's quota frees ([`Attempt::Quota`]).
        VendorQuota = "vendor_quota",
        /// The vendor refuses this recipient as inactive (bounced, complained, unsubscribed at the
        /// vendor: Postmark's 422 / ErrorCode 406): the row is `suppressed`, the address listed.
        Inactive = "inactive",
    }
}

impl ErrorClass {
    /// The request may have reached the provider and been delivered although we got no answer:
    /// a timeout, or a connection broken after the request was written. (A connection that
    /// never opened, and any HTTP answer, are definite.) Such an attempt starts the row's
    /// idempotency window ([`crate::store::Store::finish`]).
    pub fn outcome_unknown(self) -> bool {
        matches!(self, ErrorClass::Timeout | ErrorClass::Transport)
    }
}

/// An answer that is not about the recipient (the vocabulary is stored, so it is declared with
/// the statements that store it).
pub use crate::store::account::Refusal;

impl Refusal {
    /// What an operator reads (`status`, the log line): what happened and what to check.
    pub fn advice(self, status: u16) -> String {
        match self {
            Refusal::Account => format!(
                "the provider refused the account: {status}; check its credentials — MAIL_API_KEY for json, SendGrid, Postmark (the server token), Mailgun and Resend (revoked, rotated, without the send permission); for SES the keys or the web-identity role (ses:SendEmail), the account's sending status and that the From identity is verified — then `campaign-sender resume`"
            ),
            Refusal::Endpoint => format!(
                "the endpoint answered {status}: check MAIL_URL (json: the whole URL with its path, …/v1/send — a vendor: its base URL, or unset); with SES a 404 is a template (`configure --template`) or a configuration set (SES_CONFIGURATION_SET) missing in AWS_REGION, with Mailgun a MAILGUN_DOMAIN it does not know — then `campaign-sender resume`"
            ),
        }
    }

    fn class(self) -> ErrorClass {
        match self {
            Refusal::Account => ErrorClass::AccountRefused,
            Refusal::Endpoint => ErrorClass::EndpointRefused,
        }
    }
}

/// Which statuses are refusals (`ACCOUNT_ERROR_STATUSES`, `ENDPOINT_ERROR_STATUSES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    pub account: Vec<u16>,
    pub endpoint: Vec<u16>,
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            account: vec![401, 403],
            endpoint: vec![404, 405],
        }
    }
}

impl Refusals {
    pub fn of(&self, status: u16) -> Option<Refusal> {
        if self.account.contains(&status) {
            Some(Refusal::Account)
        } else if self.endpoint.contains(&status) {
            Some(Refusal::Endpoint)
        } else {
            None
        }
    }
}

/// What one HTTP attempt amounted to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Accepted. `message_id` is the vendor's id of the message (kept on the row: the vendor's
    /// events name it), when the answer carries one.
    Sent {
        status: u16,
        message_id: Option<String>,
    },
    Retry {
        status: Option<u16>,
        class: ErrorClass,
        retry_after: Option<Duration>,
    },
    Permanent {
        status: Option<u16>,
        class: ErrorClass,
    },
    /// No connection was ever made, so the provider cannot have seen the request: an outage of
    /// the provider (or of the way to it) is not the row's fault and spends none of its attempts.
    Undelivered { class: ErrorClass },
    /// A [`Refusal`]: not the row's fault either; the row is released with its attempt given
    /// back and the fleet stops.
    Refused { status: u16, refusal: Refusal },
    /// The vendor's own daily or monthly quota is used up (not its rate): nothing can be sent
    /// under this account until `frees_in` (unknown: the vendor did not say). Not the row's
    /// fault: released with its attempt given back, and the fleet stops sending.
    Quota {
        status: u16,
        frees_in: Option<Duration>,
    },
    /// The vendor refuses this recipient for good (inactive: an earlier hard bounce, complaint
    /// or unsubscribe at the vendor). The row becomes `suppressed` and its address is listed,
    /// so no campaign mails it again; not a failure.
    Suppressed { status: u16 },
}

/// Classifies a provider response: 2xx → sent; a [`Refusals`] status → refused (the account
/// or the endpoint, not the recipient); 429, 5xx → retry (keeping `Retry-After`); any other
/// 4xx → permanent; anything else (1xx, 3xx, nonsense) → permanent, because a mail API that
/// redirects or answers oddly is misconfigured, and retrying every row five times would only
/// hide that. The run's failure threshold stops it quickly instead.
pub fn classify(status: u16, retry_after: Option<Duration>, refusals: &Refusals) -> Attempt {
    if let Some(refusal) = refusals.of(status) {
        return Attempt::Refused { status, refusal };
    }
    match status {
        200..=299 => Attempt::Sent {
            status,
            message_id: None,
        },
        429 => Attempt::Retry {
            status: Some(status),
            class: ErrorClass::Throttled,
            retry_after,
        },
        500..=599 => Attempt::Retry {
            status: Some(status),
            class: ErrorClass::ServerError,
            retry_after,
        },
        400..=499 => Attempt::Permanent {
            status: Some(status),
            class: ErrorClass::Rejected,
        },
        _ => Attempt::Permanent {
            status: Some(status),
            class: ErrorClass::UnexpectedStatus,
        },
    }
}

/// What `finish` writes for one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Delivered (2xx): `state = 'sent'`, the vendor's message id kept.
    Sent {
        status: u16,
        message_id: Option<String>,
    },
    /// The vendor refused the recipient as inactive: `state = 'suppressed'` and the address
    /// onto `suppressions` (reason `inactive`), never mailed again in any campaign.
    Suppressed { status: u16 },
    /// The attempt's outcome is unknown and the vendor has no idempotency key, so sending again
    /// could mail the member twice: `state = 'unconfirmed'` at once, settled by `resolve` or the
    /// vendor's events ([`RetryPolicy::resend_unknown`]).
    Unconfirmed { class: ErrorClass },
    /// Back to `pending`, claimable again after `delay`.
    RetryAfter {
        delay: Duration,
        status: Option<u16>,
        class: ErrorClass,
    },
    /// `state = 'failed'`: permanent, or retryable with no attempts left.
    Failed {
        status: Option<u16>,
        class: ErrorClass,
    },
    /// Not attempted: back to `pending` at once, and the claim's attempt is given back.
    Released { class: ErrorClass },
    /// The request never reached the provider (it was unreachable): back to `pending` after
    /// `delay`, and the claim's attempt is given back, so an outage of any length fails no row.
    Deferred { delay: Duration, class: ErrorClass },
}

impl Resolution {
    /// The attempt behind this resolution may have been delivered although no answer said so
    /// ([`ErrorClass::outcome_unknown`]).
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Resolution::RetryAfter {
                status: None,
                class,
                ..
            }
            | Resolution::Failed {
                status: None,
                class,
            }
            | Resolution::Unconfirmed { class } => class.outcome_unknown(),
            _ => false,
        }
    }

    /// The row as `finish` writes it ([`Store::finish`](crate::store::Store::finish)).
    pub fn written(&self) -> Written {
        let ms = |d: &Duration| Some(d.as_millis() as i64);
        let row =
            |state, attempted, delay_ms, status: Option<u16>, class: Option<ErrorClass>| Written {
                state,
                attempted,
                unknown: self.outcome_unknown(),
                delay_ms,
                status: status.map(|s| s as i16),
                error: class.map(ErrorClass::as_str),
                message_id: None,
            };
        match self {
            Resolution::Sent { status, message_id } => Written {
                message_id: message_id.clone(),
                ..row(RowState::Sent, true, None, Some(*status), None)
            },
            Resolution::Suppressed { status } => row(
                RowState::Suppressed,
                true,
                None,
                Some(*status),
                Some(ErrorClass::Inactive),
            ),
            Resolution::Unconfirmed { class } => {
                row(RowState::Unconfirmed, true, None, None, Some(*class))
            }
            Resolution::RetryAfter {
                delay,
                status,
                class,
            } => row(RowState::Pending, true, ms(delay), *status, Some(*class)),
            Resolution::Failed { status, class } => {
                row(RowState::Failed, true, None, *status, Some(*class))
            }
            Resolution::Released { class } => {
                row(RowState::Pending, false, None, None, Some(*class))
            }
            Resolution::Deferred { delay, class } => {
                row(RowState::Pending, false, ms(delay), None, Some(*class))
            }
        }
    }

    /// The `outcome` label of `campaign_sender_sends_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Resolution::Sent { .. } => "sent",
            Resolution::Suppressed { .. } => "suppressed",
            Resolution::Unconfirmed { .. } => "unconfirmed",
            Resolution::RetryAfter { .. } => "retry",
            Resolution::Failed { .. } => "failed",
            Resolution::Released {
                class: ErrorClass::OptedOut,
            } => "opted_out",
            Resolution::Released {
                class:
                    ErrorClass::AccountRefused | ErrorClass::EndpointRefused | ErrorClass::VendorQuota,
            } => "refused",
            Resolution::Released { .. } => "released",
            Resolution::Deferred { .. } => "deferred",
        }
    }
}

/// Retry timing.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
    pub retry_after_cap: Duration,
    /// An attempt whose outcome is unknown may be sent again: only under an idempotency key
    /// the vendor honours (`MAIL_PROVIDER` `json` and `resend`). Without one, such a row is
    /// `unconfirmed` at once instead of retried blindly.
    pub resend_unknown: bool,
}

/// The wait before attempt `attempt + 1`: `base · 2^(attempt-1)` capped at `cap`, with "equal
/// jitter" (half fixed, half random, so retries of one batch spread out but never come back
/// sooner than half the step), and never sooner than the provider's `Retry-After`
/// (itself capped at `retry_after_cap`). `jitter` is in `[0, 1)`.
pub fn backoff(
    policy: &RetryPolicy,
    attempt: u32,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    let exp = attempt.saturating_sub(1).min(30);
    let step = policy.base.saturating_mul(1u32 << exp).min(policy.cap);
    let half = step / 2;
    let jittered = half + half.mul_f64(jitter.clamp(0.0, 1.0));
    let floor = retry_after
        .map(|r| r.min(policy.retry_after_cap))
        .unwrap_or_default();
    jittered.max(floor)
}

/// An attempt plus the row's attempt number (1 for the first) → what to write.
pub fn resolve(attempt: Attempt, attempt_no: u32, policy: &RetryPolicy, jitter: f64) -> Resolution {
    match attempt {
        Attempt::Sent { status, message_id } => Resolution::Sent { status, message_id },
        Attempt::Suppressed { status } => Resolution::Suppressed { status },
        Attempt::Permanent { status, class } => Resolution::Failed { status, class },
        Attempt::Refused { refusal, .. } => Resolution::Released {
            class: refusal.class(),
        },
        Attempt::Quota { .. } => Resolution::Released {
            class: ErrorClass::VendorQuota,
        },
        Attempt::Retry {
            status: None,
            class,
            ..
        } if class.outcome_unknown() && !policy.resend_unknown => Resolution::Unconfirmed { class },
        Attempt::Undelivered { class } => Resolution::Deferred {
            delay: backoff(policy, attempt_no, None, jitter),
            class,
        },
        Attempt::Retry { status, class, .. } if attempt_no >= policy.max_attempts => {
            Resolution::Failed { status, class }
        }
        Attempt::Retry {
            status,
            class,
            retry_after,
        } => Resolution::RetryAfter {
            delay: backoff(policy, attempt_no, retry_after, jitter),
            status,
            class,
        },
    }
}

/// Whether a worker should count the campaign's `failed` rows now (the failure threshold),
/// having written `new_failures` more of its own since it last did: at once if they could take
/// the campaign over `budget` (it counted `known_failed` then), else at most once a second
/// (`since_last_check`; `None`: never checked), when the other pods' failures are seen too —
/// and never while it has no new failures of its own (the pods that have them look).
pub fn failure_check_due(
    new_failures: i64,
    known_failed: i64,
    budget: i64,
    since_last_check: Option<Duration>,
) -> bool {
    new_failures > 0
        && (known_failed + new_failures > budget
            || since_last_check.is_none_or(|d| d >= Duration::from_secs(1)))
}

/// How long a pod sends nothing after an attempt found the provider unreachable, when it has
/// been unreachable for `down_for` (since the first such attempt): as long again, at least
/// `BACKOFF_BASE_MS` and at most `BACKOFF_MAX_MS`, with equal jitter — so a blip costs a second
/// and a long outage a probe a minute, instead of every claimed row trying (and the whole
/// campaign churning through claims) against a closed port. `jitter` is in `[0, 1)`.
pub fn unreachable_pause(policy: &RetryPolicy, down_for: Duration, jitter: f64) -> Duration {
    let step = down_for.max(policy.base).min(policy.cap);
    let half = step / 2;
    half + half.mul_f64(jitter.clamp(0.0, 1.0))
}

/// Parses `Retry-After`: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
