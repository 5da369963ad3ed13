//! The five vendors' contracts, as far as a sender meets them (docs/VENDORS.md and the requests
//! recorded from the vendors' SDKs in `tests/fixtures/providers/`):
//! each one's path, auth, required fields, and its success and error bodies. Every route of the
//! fake speaks its vendor; what happens to a request (rate limit, faults, suppression, key
//! retention) is the same for all.
//!
//! Only the JSON contract and Resend honour an idempotency key; for the others a repeat is
//! delivered again (and counted in `members_delivered_more_than_once`), as the real vendor would.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// Which vendor a route speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// Ours: `POST /v1/send`.
    Json,
    Sendgrid,
    Ses,
    Postmark,
    Mailgun,
    Resend,
}

/// One request, read in its vendor's words.
#[derive(Debug, Clone)]
pub struct Mail {
    /// The idempotency key (where the vendor honours one); `campaign:member` from the metadata
    /// otherwise, for counting only.
    pub key: String,
    pub honour_key: bool,
    pub to: String,
    pub member_id: i64,
    pub template: String,
    /// Whether it carries one-click unsubscribe where the vendor takes headers.
    pub one_click: bool,
}

/// A request the vendor refuses before it gets to the mail: the answer, and what it counts as.
pub struct Refused {
    pub answer: Box<Response>,
    pub unauthorized: bool,
}

impl Contract {
    pub const ALL: [Contract; 6] = [
        Contract::Json,
        Contract::Sendgrid,
        Contract::Ses,
        Contract::Postmark,
        Contract::Mailgun,
        Contract::Resend,
    ];

    /// The route (axum path syntax).
    pub fn path(self) -> &'static str {
        match self {
            Contract::Json => "/v1/send",
            Contract::Sendgrid => "/v3/mail/send",
            Contract::Ses => "/v2/email/outbound-emails",
            Contract::Postmark => "/email/withTemplate",
            Contract::Mailgun => "/v3/{domain}/messages",
            Contract::Resend => "/emails",
        }
    }

    /// Whether the auth header carries `key` in this vendor's way.
    pub(crate) fn authorized(self, headers: &HeaderMap, key: &str) -> bool {
        let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        match self {
            Contract::Json | Contract::Sendgrid | Contract::Resend => {
                h("authorization") == format!("Bearer {key}")
            }
            Contract::Postmark => h("x-postmark-server-token") == key,
            Contract::Mailgun => {
                use base64::Engine;
                let basic = base64::engine::general_purpose::STANDARD.encode(format!("api:{key}"));
                h("authorization") == format!("Basic {basic}")
            }
            // The signature itself is checked by scripts/capture/verify_sigv4.py and moto; the
            // fake checks the scheme and the access key id.
            Contract::Ses => {
                h("authorization").starts_with(&format!("AWS4-HMAC-SHA256 Credential={key}/"))
            }
        }
    }

    /// The request's meaning, or the vendor's answer to a request it will not take.
    pub fn read(
        self,
        headers: &HeaderMap,
        fields: &Value,
        api_key: Option<&str>,
    ) -> Result<Mail, Refused> {
        if let Some(key) = api_key {
            if !self.authorized(headers, key) {
                return Err(Refused {
                    answer: Box::new(self.refused(401)),
                    unauthorized: true,
                });
            }
        }
        let s = |v: &Value| v.as_str().map(str::to_string);
        let (to, member, template, campaign) = match self {
            Contract::Json => (
                s(&fields["to"]),
                fields["member_id"].as_i64().map(|m| m.to_string()),
                s(&fields["template"]),
                None,
            ),
            Contract::Sendgrid => (
                s(&fields["personalizations"][0]["to"][0]["email"]),
                s(&fields["custom_args"]["member_id"]),
                s(&fields["template_id"]),
                s(&fields["custom_args"]["campaign_id"]),
            ),
            Contract::Ses => (
                s(&fields["Destination"]["ToAddresses"][0]),
                tag(&fields["EmailTags"], "Name", "Value", "member_id"),
                s(&fields["Content"]["Template"]["TemplateName"])
                    .or_else(|| s(&fields["Content"]["Template"]["TemplateArn"])),
                tag(&fields["EmailTags"], "Name", "Value", "campaign_id"),
            ),
            Contract::Postmark => (
                s(&fields["To"]),
                s(&fields["Metadata"]["member_id"]),
                s(&fields["TemplateAlias"])
                    .or_else(|| fields["TemplateId"].as_i64().map(|i| i.to_string())),
                s(&fields["Metadata"]["campaign_id"]),
            ),
            Contract::Mailgun => (
                s(&fields["to"]),
                s(&fields["v:member_id"]),
                s(&fields["template"]),
                s(&fields["v:campaign_id"]),
            ),
            Contract::Resend => (
                s(&fields["to"]),
                tag(&fields["tags"], "name", "value", "member_id"),
                s(&fields["template"]["id"]),
                tag(&fields["tags"], "name", "value", "campaign_id"),
            ),
        };
        let member_id = member.and_then(|m| m.parse::<i64>().ok());
        let (Some(to), Some(member_id), Some(template)) = (to, member_id, template) else {
            return Err(Refused {
                answer: Box::new(self.invalid("a required field is missing")),
                unauthorized: false,
            });
        };
        if !to.contains('@') {
            return Err(Refused {
                answer: Box::new(self.invalid("invalid recipient")),
                unauthorized: false,
            });
        }
        let header_key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        let honour_key = matches!(self, Contract::Json | Contract::Resend);
        let key = match (self, header_key) {
            (Contract::Json, None) => {
                return Err(Refused {
                    answer: Box::new(
                        (StatusCode::BAD_REQUEST, "Idempotency-Key header required")
                            .into_response(),
                    ),
                    unauthorized: false,
                })
            }
            (_, Some(k)) if honour_key => k,
            _ => format!("{}:{member_id}", campaign.unwrap_or_default()),
        };
        Ok(Mail {
            key,
            honour_key,
            to,
            member_id,
            template,
            one_click: self.one_click(fields),
        })
    }

    /// Whether the request carries both RFC 8058 headers where this vendor takes headers: an
    /// object (our contract, SendGrid's personalization, Resend), a `{Name, Value}` list (SES's
    /// template, Postmark) or `h:` form fields (Mailgun).
    fn one_click(self, fields: &Value) -> bool {
        let named = |list: &Value, name: &str| {
            list.as_array()?
                .iter()
                .find(|h| h["Name"] == name)
                .and_then(|h| h["Value"].as_str().map(str::to_string))
        };
        let get = |name: &str| -> Option<String> {
            let s = |v: &Value| v.as_str().map(str::to_string);
            match self {
                Contract::Json => s(&fields["headers"][name]),
                Contract::Sendgrid => s(&fields["personalizations"][0]["headers"][name]),
                Contract::Ses => named(&fields["Content"]["Template"]["Headers"], name),
                Contract::Postmark => named(&fields["Headers"], name),
                Contract::Mailgun => s(&fields[format!("h:{name}")]),
                Contract::Resend => s(&fields["headers"][name]),
            }
        };
        get("List-Unsubscribe").is_some_and(|v| v.starts_with("<http"))
            && get("List-Unsubscribe-Post").as_deref() == Some("List-Unsubscribe=One-Click")
    }

    /// The vendor's success answer, with a message id made from `n`.
    pub fn accepted(self, n: u64) -> Response {
        match self {
            Contract::Json => Json(json!({"status": "queued"})).into_response(),
            Contract::Sendgrid => {
                (StatusCode::ACCEPTED, [("x-message-id", format!("fakesg{n:012}"))]).into_response()
            }
            Contract::Ses => Json(json!({"MessageId": format!("0100fake{n:012}-000000")})).into_response(),
            Contract::Postmark => Json(json!({
                "To": "[recipient]", "SubmittedAt": "2026-12-06T00:00:00Z",
                "MessageID": format!("fake-{n:012}"), "ErrorCode": 0, "Message": "OK"
            }))
            .into_response(),
            Contract::Mailgun => Json(json!({"id": format!("<fake.{n:012}@mg.example.com>"), "message": "Queued. Thank you."})).into_response(),
            Contract::Resend => Json(json!({"id": format!("fake-{n:012}")})).into_response(),
        }
    }

    /// A repeat the key retention suppressed: the vendor's original answer shape.
    pub fn duplicate(self, n: u64) -> Response {
        self.accepted(n)
    }

    /// The rate limit's answer, with the vendor's own headers for the wait.
    pub fn throttled(self, wait_s: u64, now_epoch_s: u64) -> Response {
        let status = StatusCode::TOO_MANY_REQUESTS;
        match self {
            Contract::Json | Contract::Postmark => (
                status,
                [("retry-after", wait_s.to_string())],
                Json(json!({"ErrorCode": 429, "Message": "Rate Limit Exceeded"})),
            )
                .into_response(),
            Contract::Sendgrid => (
                status,
                [("x-ratelimit-reset", (now_epoch_s + wait_s).to_string())],
                Json(json!({"errors": [{"field": null, "message": "too many requests"}]})),
            )
                .into_response(),
            Contract::Ses => (
                status,
                [("x-amzn-errortype", "TooManyRequestsException".to_string())],
                Json(json!({"message": "Maximum sending rate exceeded."})),
            )
                .into_response(),
            Contract::Mailgun => (
                status,
                Json(json!({"message": format!("Domain mg.example.com is not allowed to send: request limit exceeded, try again after {}", http_date_in(wait_s))})),
            )
                .into_response(),
            Contract::Resend => (
                status,
                [("retry-after", wait_s.to_string()), ("ratelimit-reset", wait_s.to_string())],
                Json(json!({"statusCode": 429, "message": "Too many requests", "name": "rate_limit_exceeded"})),
            )
                .into_response(),
        }
    }

    /// The vendor's own quota is used up, freeing in `wait_s` where the vendor says when.
    pub fn quota_used_up(self, wait_s: u64) -> Response {
        let status = StatusCode::TOO_MANY_REQUESTS;
        match self {
            Contract::Sendgrid => (
                StatusCode::UNAUTHORIZED,
                Json(json!({"errors": [{"message": "Maximum credits exceeded", "field": null}]})),
            )
                .into_response(),
            Contract::Ses => (
                status,
                [("x-amzn-errortype", "TooManyRequestsException")],
                Json(json!({"message": "Daily message quota exceeded."})),
            )
                .into_response(),
            Contract::Mailgun => (
                status,
                Json(json!({"message": format!("Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after {}", http_date_in(wait_s))})),
            )
                .into_response(),
            Contract::Resend => (
                status,
                [("retry-after", wait_s.to_string())],
                Json(json!({"statusCode": 429, "message": "You have reached your daily email sending quota.", "name": "daily_quota_exceeded"})),
            )
                .into_response(),
            Contract::Json | Contract::Postmark => self.throttled(wait_s, 0),
        }
    }

    /// A transient failure (503).
    pub fn unavailable(self) -> Response {
        let body = match self {
            Contract::Ses => {
                json!({"__type": "InternalServiceErrorException", "message": "try again"})
            }
            Contract::Postmark => json!({"ErrorCode": 100, "Message": "Maintenance"}),
            Contract::Resend => {
                json!({"statusCode": 503, "message": "try again", "name": "service_unavailable"})
            }
            _ => json!({"message": "try again"}),
        };
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }

    /// The vendor's answer to a request it rejects for good (this recipient or field).
    pub fn invalid(self, why: &str) -> Response {
        match self {
            Contract::Json => (StatusCode::UNPROCESSABLE_ENTITY, why.to_string()).into_response(),
            Contract::Sendgrid => (
                StatusCode::BAD_REQUEST,
                Json(json!({"errors": [{"message": why, "field": "personalizations.0.to"}]})),
            )
                .into_response(),
            Contract::Ses => (
                StatusCode::BAD_REQUEST,
                [("x-amzn-errortype", "BadRequestException")],
                Json(json!({"message": why})),
            )
                .into_response(),
            Contract::Postmark => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"ErrorCode": 300, "Message": why})),
            )
                .into_response(),
            Contract::Mailgun => {
                (StatusCode::BAD_REQUEST, Json(json!({"message": why}))).into_response()
            }
            Contract::Resend => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"statusCode": 422, "message": why, "name": "invalid_parameter"})),
            )
                .into_response(),
        }
    }

    /// A listed (inactive) recipient: refused at send only by Postmark (422, ErrorCode 406)
    /// and by our contract (`status`); the others accept the mail and drop it. `None`: the
    /// vendor answers as for a success.
    pub fn suppressed(self, status: u16) -> Option<Response> {
        match self {
            Contract::Json => Some(
                (
                    StatusCode::from_u16(status).unwrap_or(StatusCode::NOT_ACCEPTABLE),
                    "inactive recipient (suppressed)",
                )
                    .into_response(),
            ),
            Contract::Postmark => Some(
                (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"ErrorCode": 406, "Message": "You tried to send to a recipient that has been marked as inactive."})),
                )
                    .into_response(),
            ),
            _ => None,
        }
    }

    /// The vendor refusing the account (`status` 401 by default, as a revoked key).
    pub fn refused(self, status: u16) -> Response {
        let code = StatusCode::from_u16(status).unwrap_or(StatusCode::UNAUTHORIZED);
        let body = match self {
            Contract::Json => json!({"message": "refused"}),
            Contract::Sendgrid => {
                json!({"errors": [{"message": "The provided authorization grant is invalid, expired, or revoked"}]})
            }
            Contract::Ses => json!({"__type": "AccountSuspendedException", "message": "refused"}),
            Contract::Postmark => json!({"ErrorCode": 10, "Message": "Bad or missing API token"}),
            Contract::Mailgun => json!({"message": "Forbidden"}),
            Contract::Resend => {
                json!({"statusCode": status, "message": "API key is invalid", "name": "invalid_api_key"})
            }
        };
        let typed = if self == Contract::Ses {
            "AccountSuspendedException"
        } else {
            ""
        };
        let mut r = (code, Json(body)).into_response();
        if !typed.is_empty() {
            r.headers_mut()
                .insert("x-amzn-errortype", typed.parse().expect("a header value"));
        }
        r
    }
}

/// The value of the `{name_key: name, value_key: value}` entry named `name` in a tag list.
fn tag(list: &Value, name_key: &str, value_key: &str, name: &str) -> Option<String> {
    list.as_array()?
        .iter()
        .find(|t| t[name_key] == name)
        .and_then(|t| t[value_key].as_str())
        .map(str::to_string)
}

/// An HTTP date `wait_s` from now, with `UTC` as Mailgun writes it.
fn http_date_in(wait_s: u64) -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now() + std::time::Duration::from_secs(wait_s))
        .replace("GMT", "UTC")
}

/// A multipart/form-data body as `{name: value}` (Mailgun's; text fields only), read by
/// `multer`.
pub async fn form_fields(content_type: &str, body: axum::body::Bytes) -> Option<Value> {
    let boundary = multer::parse_boundary(content_type).ok()?;
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(body) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut out = serde_json::Map::new();
    while let Ok(Some(field)) = parts.next_field().await {
        let name = field.name()?.to_string();
        let value = field.text().await.ok()?;
        out.insert(name, Value::String(value));
    }
    Some(Value::Object(out))
}
