//! `MAIL_PROVIDER=ses`: Amazon SES v2 `SendEmail`, `POST {base}/v2/email/outbound-emails`
//! (base `https://email.{AWS_REGION}.amazonaws.com`), as `@aws-sdk/client-sesv2` sends it: a
//! stored template (`Content.Template.TemplateName`, or `TemplateArn` for an ARN) with its
//! `TemplateData` as a JSON **string**, our metadata as the `EmailTags` `campaign_id` and
//! `member_id` (charset `[A-Za-z0-9_-]`, checked at start; echoed as `mail.tags` in the
//! configuration set's events) and `SES_CONFIGURATION_SET`. Signed with SigV4 (service `ses`)
//! by `aws-sigv4` over the exact bytes sent, with the keys of [`super::aws`] (the environment's,
//! or web identity's, refreshed before they expire). No idempotency key.
//!
//! | answer (`X-Amzn-ErrorType`, else the body's `__type` / `code`) | means |
//! |---|---|
//! | 200 | sent, id from `MessageId` |
//! | 429 `TooManyRequestsException` "Maximum sending rate exceeded" | throttled |
//! | 429 `TooManyRequestsException` "Daily message quota exceeded" | the account's quota: the fleet stops |
//! | 400 `AccountSuspendedException`, `SendingPausedException`, `MailFromDomainNotVerifiedException` | account refused |
//! | 400 `MessageRejected` "… not verified …" | account refused (the sender identity is not verified) |
//! | 403 (`InvalidClientTokenId`, `SignatureDoesNotMatch`, `AccessDenied`, …), 401 | account refused |
//! | 404 `NotFoundException` (template or configuration set missing), 405 | endpoint refused |
//! | other 4xx | rejected (permanent) |
//! | 5xx | retried |

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use serde::Serialize;
use serde_json::Value;

use std::sync::Arc;

use super::answer;
use super::aws::Source;
use super::profile::{
    Answer, Body, BuildError, HeaderList, Mail, Outgoing, Profile, Text, Unlisted,
};
use super::unlist;
use crate::outcome::{Attempt, Refusal};

/// The longest value of a header SES v2 sets per message (`Content.Template.Headers[].Value`,
/// `MessageHeader`: 1 to 870 printable ASCII characters; its API reference).
pub const MAX_HEADER_VALUE: usize = 870;

pub const PATH: &str = "/v2/email/outbound-emails";

/// The account suppression list's addresses (`DeleteSuppressedDestination`: a `DELETE` of one).
pub const SUPPRESSED: &str = "/v2/email/suppression/addresses";

/// The public endpoint of `region`.
pub fn base(region: &str) -> String {
    format!("https://email.{region}.amazonaws.com")
}

pub struct Ses {
    pub region: String,
    /// `host[:port]` of the base URL, as signed (`host` is a signed header).
    pub host: String,
    /// The keys to sign with ([`super::aws`]: the environment's, or web identity's).
    pub credentials: Arc<Source>,
    pub configuration_set: Option<String>,
    /// `LIST_UNSUBSCRIBE=vendor`: SES list management (`SES_CONTACT_LIST`, `SES_CONTACT_TOPIC`):
    /// SES adds its own one-click headers and links, and blocks later sends to who left.
    pub list_management: Option<ListManagement>,
}

/// `ListManagementOptions`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListManagement {
    pub contact_list_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
}

/// `SendEmail`'s body, as `@aws-sdk/client-sesv2` sends it for a stored template.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Request<'a> {
    content: Content<'a>,
    from_email_address: &'a str,
    destination: Destination<'a>,
    email_tags: [Tag<'a>; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    configuration_set_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_to_addresses: Option<[&'a str; 1]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    list_management_options: Option<&'a ListManagement>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Content<'a> {
    template: Template<'a>,
}

/// A template named by its name, or by its ARN; its data a JSON **string**.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Template<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    template_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    template_arn: Option<&'a str>,
    template_data: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    headers: Option<HeaderList<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Destination<'a> {
    to_addresses: [&'a str; 1],
}

/// One of our metadata, echoed as `mail.tags` in the configuration set's events.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Tag<'a> {
    name: &'static str,
    value: Text<&'a dyn std::fmt::Display>,
}

impl Ses {
    fn body(&self, mail: &Mail<'_>) -> Body {
        let arn = mail.template.starts_with("arn:");
        Body::json(&Request {
            content: Content {
                template: Template {
                    template_name: (!arn).then_some(mail.template),
                    template_arn: arn.then_some(mail.template),
                    template_data: mail.data_text(),
                    headers: mail.headers().map(|h| h.as_name_value()),
                },
            },
            from_email_address: mail.from.unwrap_or_default(),
            destination: Destination {
                to_addresses: [mail.to],
            },
            email_tags: mail.tags().map(|(name, value)| Tag { name, value }),
            configuration_set_name: self.configuration_set.as_deref(),
            reply_to_addresses: mail.reply_to.map(|r| [r]),
            list_management_options: self.list_management.as_ref(),
        })
    }

    /// The SigV4 headers (`authorization`, `x-amz-date`, `x-amz-security-token`) for a
    /// `method` of `bytes` with `headers` to `path` on this host, at `now`.
    fn signature(
        &self,
        (method, path): (&str, &str),
        headers: &[(&'static str, String)],
        bytes: &[u8],
        now: SystemTime,
    ) -> Result<Vec<(&'static str, String)>, BuildError> {
        let keys = self.credentials.current(now).ok_or(BuildError::Unsigned)?;
        let identity = Credentials::new(
            &keys.access_key_id,
            keys.secret_access_key.expose(),
            keys.session_token.as_ref().map(|t| t.expose().to_string()),
            None,
            "campaign-sender",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("ses")
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|_| BuildError::Unsigned)?
            .into();
        let url = format!("https://{}{path}", self.host);
        let signable = SignableRequest::new(
            method,
            &url,
            headers.iter().map(|(n, v)| (*n, v.as_str())),
            SignableBody::Bytes(bytes),
        )
        .map_err(|_| BuildError::Unsigned)?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|_| BuildError::Unsigned)?
            .into_parts();
        Ok(instructions
            .headers()
            .filter_map(|(n, v)| signed_name(n).map(|n| (n, v.to_string())))
            .collect())
    }
}

/// The headers the signer adds, as static names.
fn signed_name(name: &str) -> Option<&'static str> {
    ["authorization", "x-amz-date", "x-amz-security-token"]
        .into_iter()
        .find(|n| n.eq_ignore_ascii_case(name))
}

impl Profile for Ses {
    fn aws_credentials(&self) -> Option<&Source> {
        Some(&self.credentials)
    }

    fn request(&self, mail: &Mail<'_>, now: SystemTime) -> Result<Outgoing, BuildError> {
        let Body::Json(bytes) = self.body(mail) else {
            unreachable!("Body::json is JSON")
        };
        let headers = vec![
            ("content-type", "application/json".to_string()),
            ("host", self.host.clone()),
        ];
        let signed = self.signature(("POST", PATH), &headers, &bytes, now)?;
        let mut out = Outgoing::new(PATH, Body::Json(bytes)).header("host", self.host.clone());
        out.headers.extend(signed);
        Ok(out)
    }

    /// `DeleteSuppressedDestination`, signed like a send (no body: the hash of none).
    fn unlist(&self, email: &str, now: SystemTime) -> Option<Result<Outgoing, BuildError>> {
        let path = format!("{SUPPRESSED}/{}", unlist::segment(email));
        let headers = vec![("host", self.host.clone())];
        Some(
            self.signature(("DELETE", &path), &headers, &[], now)
                .map(|signed| {
                    let mut out = Outgoing::delete(path).header("host", self.host.clone());
                    out.headers.extend(signed);
                    out
                }),
        )
    }

    fn unlisted(&self, a: &Answer<'_>) -> Unlisted {
        answer::unlisted(a)
    }

    fn read(&self, a: &Answer<'_>) -> Attempt {
        let body = a.json();
        let kind = error_type(a, &body);
        let message = answer::text(&body, "message")
            .or_else(|| answer::text(&body, "Message"))
            .unwrap_or_default()
            .to_ascii_lowercase();
        match (a.status, kind.as_str()) {
            (200..=299, _) => {
                answer::sent_with_id(a, answer::text(&body, "MessageId").map(str::to_string))
            }
            (_, "TooManyRequestsException") | (429, _)
                if message.contains("daily message quota") =>
            {
                answer::quota(a, None)
            }
            (
                _,
                "AccountSuspendedException"
                | "SendingPausedException"
                | "MailFromDomainNotVerifiedException",
            ) => answer::refused(a, Refusal::Account),
            (_, "MessageRejected") if message.contains("not verified") => {
                answer::refused(a, Refusal::Account)
            }
            _ => answer::generic(a),
        }
    }
}

/// The error's type as the SDK reads it: `X-Amzn-ErrorType`, else the body's `code`, else its
/// `__type`; anything after `:` and before `#` dropped.
fn error_type(a: &Answer<'_>, body: &Option<Value>) -> String {
    let raw = a
        .header("x-amzn-errortype")
        .or_else(|| answer::text(body, "code"))
        .or_else(|| answer::text(body, "__type"))
        .unwrap_or_default();
    let raw = raw.split(':').next().unwrap_or_default();
    raw.rsplit('#').next().unwrap_or_default().to_string()
}
