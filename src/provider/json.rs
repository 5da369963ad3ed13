//! `MAIL_PROVIDER=json` (the default): our own contract, spoken by `fake-provider` and by any
//! in-house relay. `POST {MAIL_URL}` (the whole URL, path included) with
//! `{"to", "member_id", "template"}` (and `"data"`, the recipient's template data, when the row
//! has some), `Idempotency-Key: {campaign_id}:{member_id}` (the same on every attempt: the
//! provider suppresses repeats for `IDEMPOTENCY_WINDOW_S`, which is what makes a re-send after
//! a crash harmless) and `Authorization: Bearer {MAIL_API_KEY}` when a key is set. Answers by
//! status alone, with `ACCOUNT_ERROR_STATUSES` / `ENDPOINT_ERROR_STATUSES` as the refusals.

use std::time::SystemTime;

use serde::Serialize;

use super::answer;
use super::idempotency_key;
use super::profile::{
    Answer, Body, BuildError, Data, HeaderObject, Mail, Outgoing, Profile, Unlisted,
};
use crate::outcome::{classify, Attempt, Refusals};
use crate::secret::Secret;

pub struct Json {
    pub api_key: Option<Secret>,
    pub refusals: Refusals,
}

/// Our contract's body; `data` only when the row has template data or our one-click link
/// (`unsubscribe_url`), `headers` (the two RFC 8058 headers) only with our link.
#[derive(Serialize)]
struct Request<'a> {
    to: &'a str,
    member_id: i64,
    template: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Data<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderObject<'a>>,
}

impl Profile for Json {
    /// Our contract keeps no suppression list of its own to lift.
    fn unlist(&self, _email: &str, _now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        None
    }

    fn unlisted(&self, _: &Answer<'_>) -> Unlisted {
        Unlisted::NoApi
    }

    /// Our contract has no sender field: the relay behind it knows its own.
    fn needs_sender(&self) -> bool {
        false
    }

    fn request(&self, mail: &Mail<'_>, _now: SystemTime) -> Result<Outgoing, BuildError> {
        let body = Request {
            to: mail.to,
            member_id: mail.member_id,
            template: mail.template,
            data: mail.has_data().then(|| mail.data()),
            headers: mail.headers().map(|h| h.as_object()),
        };
        let mut out = Outgoing::new("", Body::json(&body)).header(
            "Idempotency-Key",
            idempotency_key(mail.campaign_id, mail.member_id),
        );
        if let Some(key) = &self.api_key {
            out = out.header("Authorization", format!("Bearer {}", key.expose()));
        }
        Ok(out)
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        classify(a.status, answer::retry_after(a), &self.refusals)
    }
}
