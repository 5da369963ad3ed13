//! `MAIL_PROVIDER=sendgrid`: v3 Mail Send, as `@sendgrid/mail` sends it.
//! `POST {base}/v3/mail/send` (base `https://api.sendgrid.com`; EU subusers
//! `https://api.eu.sendgrid.com`), `Authorization: Bearer {MAIL_API_KEY}`, a dynamic template
//! (`template_id`, `personalizations[0].dynamic_template_data`), our metadata as `custom_args`
//! (string values; echoed as top-level keys of every event) and the campaign as a category.
//! No idempotency key. The message id comes in the `X-Message-Id` header of the 202.
//!
//! | answer | means |
//! |---|---|
//! | 2xx | sent, id from `X-Message-Id` |
//! | 429 | throttled until `X-RateLimit-Reset` (epoch seconds) |
//! | 401 "Maximum credits exceeded" | the plan's quota: the fleet stops |
//! | 401, 403 (key revoked, no send scope, unverified sender, temporary block) | account refused |
//! | 404, 405 | endpoint refused (`MAIL_URL`) |
//! | other 4xx | rejected (permanent) |
//! | 5xx | retried |

use std::borrow::Cow;
use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::answer;
use super::profile::{
    Answer, Body, BuildError, Data, HeaderObject, Mail, Outgoing, Profile, Text, Unlisted,
};
use super::unlist;
use crate::mailbox::Mailbox;
use crate::outcome::Attempt;
use crate::secret::Secret;

pub const BASE: &str = "https://api.sendgrid.com";

pub struct SendGrid {
    pub api_key: Secret,
    /// `LIST_UNSUBSCRIBE=vendor`: subscription tracking on, so SendGrid adds its own one-click
    /// `List-Unsubscribe` headers and footer link and manages the unsubscribes.
    pub subscription_tracking: bool,
}

/// `POST /v3/mail/send`, as `@sendgrid/mail` sends it for a dynamic template.
#[derive(Serialize)]
struct Request<'a> {
    from: Address<'a>,
    personalizations: [Personalization<'a>; 1],
    categories: [String; 1],
    custom_args: Tags<'a>,
    template_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<Address<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracking_settings: Option<Tracking>,
}

#[derive(Serialize)]
struct Personalization<'a> {
    to: [Address<'a>; 1],
    dynamic_template_data: Data<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderObject<'a>>,
}

/// `tracking_settings.subscription_tracking.enable` (`LIST_UNSUBSCRIBE=vendor`).
#[derive(Serialize)]
struct Tracking {
    subscription_tracking: Enable,
}

#[derive(Serialize)]
struct Enable {
    enable: bool,
}

/// Our metadata, echoed by the event webhook as top-level fields of each event.
#[derive(Serialize)]
struct Tags<'a> {
    campaign_id: &'a str,
    member_id: Text<i64>,
}

#[derive(Serialize)]
struct Address<'a> {
    email: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Cow<'a, str>>,
}

/// SendGrid takes the sender as `{email, name}`: the stored mailbox ([`Mailbox`], one by
/// `configure`'s check) split as RFC 5322 reads it, the name exactly as given. A value
/// stored before that check that is no one mailbox goes as it is, for SendGrid to refuse.
fn address(a: &str) -> Address<'_> {
    match Mailbox::parse(a) {
        Ok(m) => Address {
            email: Cow::Owned(m.addr),
            name: m.name.map(Cow::Owned),
        },
        Err(_) => Address {
            email: Cow::Borrowed(a),
            name: None,
        },
    }
}

impl Profile for SendGrid {
    fn request(&self, mail: &Mail<'_>, _now: SystemTime) -> Result<Outgoing, BuildError> {
        let body = Request {
            from: address(mail.from.unwrap_or_default()),
            personalizations: [Personalization {
                to: [Address {
                    email: Cow::Borrowed(mail.to),
                    name: None,
                }],
                dynamic_template_data: mail.data(),
                headers: mail.headers().map(|h| h.as_object()),
            }],
            categories: [format!("campaign-{}", mail.campaign_id)],
            custom_args: Tags {
                campaign_id: mail.campaign_id,
                member_id: mail.member(),
            },
            template_id: mail.template,
            reply_to: mail.reply_to.map(address),
            tracking_settings: self.subscription_tracking.then_some(Tracking {
                subscription_tracking: Enable { enable: true },
            }),
        };
        Ok(Outgoing::new("/v3/mail/send", Body::json(&body))
            .header("Accept", "application/json")
            .header("Authorization", format!("Bearer {}", self.api_key.expose())))
    }

    /// "Delete a bounce": `DELETE /v3/suppression/bounces/{email}`.
    fn unlist(&self, email: &str, _now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        let path = format!("/v3/suppression/bounces/{}", unlist::segment(email));
        Some(Ok(Outgoing::delete(path)
            .header("Accept", "application/json")
            .header(
                "Authorization",
                format!("Bearer {}", self.api_key.expose()),
            )))
    }

    fn unlisted(&self, a: &Answer<'_>) -> Unlisted {
        answer::unlisted(a)
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        match a.status {
            200..=299 => answer::sent_with_id(a, a.header("x-message-id").map(str::to_string)),
            429 => answer::throttled(
                a,
                answer::retry_after(a).or_else(|| answer::until_epoch(a, "x-ratelimit-reset")),
            ),
            401 if message_has(a, "maximum credits exceeded") => answer::quota(a, None),
            _ => answer::generic(a),
        }
    }
}

/// Whether one of `{"errors":[{"message"}]}` contains `needle` (lower case).
fn message_has(a: &Answer<'_>, needle: &str) -> bool {
    a.json()
        .and_then(|b| b.get("errors").cloned())
        .and_then(|e| e.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.get("message").and_then(Value::as_str))
        .any(|m| m.to_ascii_lowercase().contains(needle))
}
