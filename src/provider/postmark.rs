//! `MAIL_PROVIDER=postmark`: `POST {base}/email/withTemplate` (base
//! `https://api.postmarkapp.com`), as the `postmark` SDK sends it: `X-Postmark-Server-Token`,
//! `TemplateAlias` (or `TemplateId` when the template is a number), `TemplateModel`, our
//! metadata in `Metadata` (echoed verbatim in every webhook) and the campaign as the `Tag`, on
//! the `POSTMARK_MESSAGE_STREAM` (default `broadcast`: marketing mail must not go out on the
//! transactional stream). No idempotency key.
//!
//! | answer | means |
//! |---|---|
//! | 200 | sent, id from `MessageID` |
//! | 422, ErrorCode 406 | the recipient is inactive at Postmark: row `suppressed`, address listed |
//! | 422, ErrorCode 10, 400, 401, 405, 412, 413 | account refused (token, sender signature, account state) |
//! | 401 | account refused (bad or missing server token) |
//! | 429 | throttled |
//! | 500, 503 (ErrorCode 100: maintenance) | retried |
//! | other 4xx | rejected (permanent) |

use std::time::SystemTime;

use serde::Serialize;
use serde_json::Value;

use super::answer;
use super::profile::{
    Answer, Body, BuildError, Data, HeaderList, Mail, Outgoing, Profile, Text, Unlisted,
};
use super::unlist;
use crate::outcome::{Attempt, Refusal};
use crate::secret::Secret;

pub const BASE: &str = "https://api.postmarkapp.com";

/// ErrorCodes of a 422 that are about the account or its sender, not the recipient.
const ACCOUNT_CODES: [i64; 6] = [10, 400, 401, 405, 412, 413];
/// "You tried to send to a recipient that has been marked as inactive."
const INACTIVE_RECIPIENT: i64 = 406;

pub struct Postmark {
    pub server_token: Secret,
    pub message_stream: String,
}

/// `POST /email/withTemplate`, as the `postmark` SDK's `sendEmailWithTemplate` sends it.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Request<'a> {
    from: &'a str,
    to: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    template_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    template_alias: Option<&'a str>,
    template_model: Data<'a>,
    tag: &'a str,
    metadata: Tags<'a>,
    message_stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderList<'a>>,
}

/// Our metadata, echoed as `Metadata` in every webhook.
#[derive(Serialize)]
struct Tags<'a> {
    campaign_id: &'a str,
    member_id: Text<i64>,
}

impl Profile for Postmark {
    fn request(&self, mail: &Mail<'_>, _now: SystemTime) -> Result<Outgoing, BuildError> {
        // A template is named by its numeric id or by its alias.
        let id = mail.template.parse::<i64>().ok();
        let body = Request {
            from: mail.from.unwrap_or_default(),
            to: mail.to,
            template_id: id,
            template_alias: id.is_none().then_some(mail.template),
            template_model: mail.data(),
            tag: mail.campaign_id,
            metadata: Tags {
                campaign_id: mail.campaign_id,
                member_id: mail.member(),
            },
            message_stream: &self.message_stream,
            reply_to: mail.reply_to,
            headers: mail.headers().map(|h| h.as_name_value()),
        };
        Ok(Outgoing::new("/email/withTemplate", Body::json(&body))
            .header("Accept", "application/json")
            .header("X-Postmark-Server-Token", self.server_token.expose()))
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        let body = a.json();
        let code = body
            .as_ref()
            .and_then(|b| b.get("ErrorCode"))
            .and_then(Value::as_i64);
        match (a.status, code) {
            (200..=299, _) => {
                answer::sent_with_id(a, answer::text(&body, "MessageID").map(str::to_string))
            }
            (422, Some(INACTIVE_RECIPIENT)) => Attempt::Suppressed { status: a.status },
            (422, Some(c)) if ACCOUNT_CODES.contains(&c) => answer::refused(a, Refusal::Account),
            _ => answer::generic(a),
        }
    }

    /// "Delete a suppression" on the stream we send in: `POST
    /// /message-streams/{stream}/suppressions/delete` (a `HardBounce` one's bounce reactivated).
    fn unlist(&self, email: &str, _now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        let path = format!(
            "/message-streams/{}/suppressions/delete",
            unlist::segment(&self.message_stream)
        );
        let body = serde_json::json!({"Suppressions": [{"EmailAddress": email}]});
        Some(Ok(Outgoing::new(path, Body::json(&body))
            .header("Accept", "application/json")
            .header(
                "X-Postmark-Server-Token",
                self.server_token.expose(),
            )))
    }

    /// A 200 says per address `Deleted` or `Failed` (a `SpamComplaint` suppression cannot be
    /// deleted); other statuses as the vendors' table.
    fn unlisted(&self, a: &Answer<'_>) -> Unlisted {
        if !(200..=299).contains(&a.status) {
            return answer::unlisted(a);
        }
        let status = a.json().and_then(|b| {
            b.pointer("/Suppressions/0/Status")
                .and_then(Value::as_str)
                .map(str::to_string)
        });
        match status.as_deref() {
            Some("Deleted") => Unlisted::Lifted,
            _ => Unlisted::Failed { status: a.status },
        }
    }
}
