//! `MAIL_PROVIDER=resend`: `POST {base}/emails` (base `https://api.resend.com`) as the `resend`
//! SDK sends it: `Authorization: Bearer {MAIL_API_KEY}`, a published template by id or alias
//! with its `variables`, our metadata as the tags `campaign_id` and `member_id` (charset
//! `[A-Za-z0-9_-]`, checked at start), and `Idempotency-Key: {campaign_id}:{member_id}`: the
//! only one of the five vendors with a key (24 h), so the only one whose unknown outcomes are
//! sent again within `IDEMPOTENCY_WINDOW_S`.
//!
//! | answer | means |
//! |---|---|
//! | 200 | sent, id from `id` |
//! | 429 `rate_limit_exceeded` | throttled (`retry-after`, else `ratelimit-reset`, seconds) |
//! | 429 `daily_quota_exceeded`, `monthly_quota_exceeded` | the account's quota: the fleet stops |
//! | 401, 403 (missing, invalid, restricted or suspended key; unverified domain) | account refused |
//! | 409 `concurrent_idempotent_requests` | the same key is in flight: retried later |
//! | 409 `invalid_idempotent_request`, other 4xx | rejected (permanent) |
//! | 404, 405 | endpoint refused |
//! | 5xx | retried |

use std::time::SystemTime;

use serde::Serialize;

use super::answer;
use super::idempotency_key;
use super::profile::{
    Answer, Body, BuildError, Data, HeaderObject, Mail, Outgoing, Profile, Text, Unlisted,
};
use super::unlist;
use crate::outcome::{Attempt, ErrorClass};
use crate::secret::Secret;

pub const BASE: &str = "https://api.resend.com";

pub struct Resend {
    pub api_key: Secret,
}

/// `POST /emails` with a stored template, as the `resend` SDK sends it.
#[derive(Serialize)]
struct Request<'a> {
    from: &'a str,
    to: &'a str,
    tags: [Tag<'a>; 2],
    template: Template<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderObject<'a>>,
}

/// One of our metadata, echoed as `data.tags` in every webhook.
#[derive(Serialize)]
struct Tag<'a> {
    name: &'static str,
    value: Text<&'a dyn std::fmt::Display>,
}

#[derive(Serialize)]
struct Template<'a> {
    id: &'a str,
    variables: Data<'a>,
}

impl Profile for Resend {
    fn request(&self, mail: &Mail<'_>, _now: SystemTime) -> Result<Outgoing, BuildError> {
        let body = Request {
            from: mail.from.unwrap_or_default(),
            to: mail.to,
            tags: mail.tags().map(|(name, value)| Tag { name, value }),
            template: Template {
                id: mail.template,
                variables: mail.data(),
            },
            reply_to: mail.reply_to,
            headers: mail.headers().map(|h| h.as_object()),
        };
        Ok(Outgoing::new("/emails", Body::json(&body))
            .header("Authorization", format!("Bearer {}", self.api_key.expose()))
            .header(
                "Idempotency-Key",
                idempotency_key(mail.campaign_id, mail.member_id),
            ))
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        let body = a.json();
        let name = answer::text(&body, "name").unwrap_or_default();
        let wait = answer::retry_after(a).or_else(|| answer::delta_seconds(a, "ratelimit-reset"));
        match (a.status, name) {
            (200..=299, _) => {
                answer::sent_with_id(a, answer::text(&body, "id").map(str::to_string))
            }
            (429, "daily_quota_exceeded" | "monthly_quota_exceeded") => answer::quota(a, wait),
            (429, _) => answer::throttled(a, wait),
            (409, "concurrent_idempotent_requests") => Attempt::Retry {
                status: Some(a.status),
                class: ErrorClass::ServerError,
                retry_after: wait,
            },
            _ => answer::generic(a),
        }
    }

    /// "Remove Suppression": `DELETE /suppressions/{email}` (a private beta of Resend's).
    fn unlist(&self, email: &str, _now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        let path = format!("/suppressions/{}", unlist::segment(email));
        Some(Ok(Outgoing::delete(path).header(
            "Authorization",
            format!("Bearer {}", self.api_key.expose()),
        )))
    }

    /// As the vendors' table, but a 404 is not "not listed": an account outside the beta
    /// may get it too, so the address counts as not lifted.
    fn unlisted(&self, a: &Answer<'_>) -> Unlisted {
        match answer::unlisted(a) {
            Unlisted::NotListed => Unlisted::Failed { status: a.status },
            read => read,
        }
    }
}
