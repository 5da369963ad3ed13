//! `MAIL_PROVIDER=mailgun`: `POST {base}/v3/{MAILGUN_DOMAIN}/messages` (base
//! `https://api.mailgun.net`; EU domains `https://api.eu.mailgun.net`) as `multipart/form-data`,
//! as `mailgun.js` sends it: basic auth `api:{MAIL_API_KEY}`, `template`, `t:variables` (the
//! template data as a JSON string), the campaign as `o:tag`, our metadata as `v:campaign_id` and
//! `v:member_id` (echoed in every event's `user-variables`). No idempotency key. The message id
//! comes back as `<…>`; the events carry it without the brackets, and so does the row.
//!
//! | answer | means |
//! |---|---|
//! | 200 | sent, id from `id` |
//! | 429 "… limit exceeded, try again after {date}" | throttled until then; a wait over [`QUOTA_WAIT`] is the account's sending limit: the fleet stops |
//! | 400 "… is not allowed to send …" | account refused (sandbox, free plan, unverified domain, inactive account) |
//! | 401, 403 | account refused |
//! | 404 (domain not found), 405 | endpoint refused (`MAILGUN_DOMAIN`, `MAIL_URL`) |
//! | other 4xx | rejected (permanent) |
//! | 5xx | retried |

use std::time::{Duration, SystemTime};

use super::answer;
use super::profile::{Answer, Body, BuildError, Mail, Outgoing, Profile, Unlisted};
use super::unlist;
use crate::outcome::{Attempt, Refusal};
use crate::secret::Secret;

pub const BASE: &str = "https://api.mailgun.net";

/// A 429 that asks for a longer wait than this is a sending limit of the account (per hour,
/// day or month), not a rate: waiting it out is the quota's stop, not a retry.
pub const QUOTA_WAIT: Duration = Duration::from_secs(600);

pub struct Mailgun {
    pub api_key: Secret,
    pub domain: String,
}

impl Profile for Mailgun {
    fn request(&self, mail: &Mail<'_>, _now: SystemTime) -> Result<Outgoing, BuildError> {
        let mut form = vec![
            ("from", mail.from.unwrap_or_default().to_string()),
            ("to", mail.to.to_string()),
            ("template", mail.template.to_string()),
            ("t:variables", mail.data_text()),
            ("o:tag", mail.campaign_id.to_string()),
            ("v:campaign_id", mail.campaign_id.to_string()),
            ("v:member_id", mail.member().to_string()),
        ];
        if let Some(r) = mail.reply_to {
            form.push(("h:Reply-To", r.to_string()));
        }
        for (name, value) in mail.headers().into_iter().flat_map(|h| h.pairs()) {
            form.push((mailgun_header(name), value.to_string()));
        }
        let mut out = Outgoing::new(format!("/v3/{}/messages", self.domain), Body::Form(form))
            .header("Accept", "application/json");
        out.basic = Some(("api".to_string(), self.api_key.expose().to_string()));
        Ok(out)
    }

    /// "Remove bounce": `DELETE /v3/{domain}/bounces/{address}`.
    fn unlist(&self, email: &str, _now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        let path = format!("/v3/{}/bounces/{}", self.domain, unlist::segment(email));
        let mut out = Outgoing::delete(path).header("Accept", "application/json");
        out.basic = Some(("api".to_string(), self.api_key.expose().to_string()));
        Some(Ok(out))
    }

    fn unlisted(&self, a: &Answer<'_>) -> Unlisted {
        answer::unlisted(a)
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        let body = a.json();
        let message = answer::text(&body, "message").unwrap_or_default();
        match a.status {
            200..=299 => {
                let id = answer::text(&body, "id")
                    .map(|id| id.trim_start_matches('<').trim_end_matches('>').to_string());
                answer::sent_with_id(a, id)
            }
            429 => match answer::until_date_in(message, a.now).or_else(|| answer::retry_after(a)) {
                Some(wait) if wait > QUOTA_WAIT => answer::quota(a, Some(wait)),
                wait => answer::throttled(a, wait),
            },
            400 if message.contains("is not allowed to send") => {
                answer::refused(a, Refusal::Account)
            }
            _ => answer::generic(a),
        }
    }
}

/// Mailgun's form field of one of our headers (`h:` and its name).
fn mailgun_header(name: &'static str) -> &'static str {
    match name {
        "List-Unsubscribe" => "h:List-Unsubscribe",
        "List-Unsubscribe-Post" => "h:List-Unsubscribe-Post",
        _ => "h:Feedback-ID",
    }
}
