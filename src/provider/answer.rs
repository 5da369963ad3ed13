//! What the vendors' answers share: the rate-limit headers in their three forms (delta seconds,
//! an epoch, an HTTP date), the error body's fields, and the generic table every profile falls
//! back on for the statuses its own table does not name.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::profile::{Answer, Unlisted};
use crate::outcome::{classify, parse_retry_after, Attempt, ErrorClass, Refusal, Refusals};

/// The generic table (2xx sent, 429 throttled, 5xx retried, other 4xx permanent; 401/403 the
/// account's, 404/405 the endpoint's: every vendor's, and the JSON contract's defaults), with
/// `Retry-After` read.
pub fn generic(a: &Answer<'_>) -> Attempt {
    classify(a.status, retry_after(a), &Refusals::default())
}

/// `Retry-After` (delta seconds or an HTTP date).
pub fn retry_after(a: &Answer<'_>) -> Option<Duration> {
    a.header("retry-after")
        .and_then(|v| parse_retry_after(v, a.now))
}

/// A header of delta seconds (Resend's `ratelimit-reset`).
pub fn delta_seconds(a: &Answer<'_>, name: &str) -> Option<Duration> {
    let v = a.header(name)?.trim().parse::<f64>().ok()?;
    (v.is_finite() && v >= 0.0).then(|| Duration::from_secs_f64(v.min(86_400.0)))
}

/// A header holding an epoch in seconds (SendGrid's `X-RateLimit-Reset`): the time until then.
pub fn until_epoch(a: &Answer<'_>, name: &str) -> Option<Duration> {
    let at = a.header(name)?.trim().parse::<u64>().ok()?;
    let at = UNIX_EPOCH + Duration::from_secs(at);
    Some(at.duration_since(a.now).unwrap_or_default())
}

/// The time until an HTTP date written inside a message ("… try again after Mon, 20 Dec 2021
/// 20:33:21 UTC", Mailgun): the 29 characters after `after `, with `UTC` read as `GMT`.
pub fn until_date_in(message: &str, now: SystemTime) -> Option<Duration> {
    let i = message.rfind("after ")? + "after ".len();
    let date = message
        .get(i..)?
        .trim()
        .trim_end_matches('.')
        .replace("UTC", "GMT");
    let at = httpdate::parse_http_date(&date).ok()?;
    Some(at.duration_since(now).unwrap_or_default())
}

/// A string field of a JSON body.
pub fn text<'v>(body: &'v Option<Value>, field: &str) -> Option<&'v str> {
    body.as_ref()?.get(field)?.as_str()
}

/// The vendor's message id of a 2xx answer, from a JSON body field.
pub fn sent_with_id(a: &Answer<'_>, id: Option<String>) -> Attempt {
    Attempt::Sent {
        status: a.status,
        message_id: id
            .filter(|s| !s.is_empty())
            .map(|s| s.chars().take(200).collect()),
    }
}

pub fn refused(a: &Answer<'_>, refusal: Refusal) -> Attempt {
    Attempt::Refused {
        status: a.status,
        refusal,
    }
}

pub fn throttled(a: &Answer<'_>, wait: Option<Duration>) -> Attempt {
    Attempt::Retry {
        status: Some(a.status),
        class: ErrorClass::Throttled,
        retry_after: wait,
    }
}

pub fn quota(a: &Answer<'_>, frees_in: Option<Duration>) -> Attempt {
    Attempt::Quota {
        status: a.status,
        frees_in,
    }
}

/// The table the vendors share for a lift off their own list (`suppress --lift-at-vendor`):
/// 2xx lifted, 404 not listed, 429 throttled (`Retry-After`), 401/403 refused, 5xx
/// unavailable, anything else failed.
pub fn unlisted(a: &Answer<'_>) -> Unlisted {
    match a.status {
        200..=299 => Unlisted::Lifted,
        404 => Unlisted::NotListed,
        429 => Unlisted::Throttled {
            retry_after: retry_after(a),
        },
        401 | 403 => Unlisted::Refused { status: a.status },
        500..=599 => Unlisted::Unavailable {
            status: Some(a.status),
        },
        status => Unlisted::Failed { status },
    }
}
