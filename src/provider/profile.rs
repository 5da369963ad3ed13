//! The one small trait every vendor profile implements, and what it works on: a [`Mail`] in,
//! an [`Outgoing`] request out; an [`Answer`] in, an [`Attempt`] out. Both directions are pure
//! (the clock is passed in), so each vendor's request and answer table is unit-tested without a
//! network (`src/provider/tests.rs`, against the requests recorded from the vendors' own SDKs in
//! `tests/fixtures/providers/`).

use std::fmt;
use std::time::SystemTime;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

use crate::outcome::Attempt;
use crate::unsubscribe::Link;

/// One mail to one recipient, as every profile sees it. `to`, `data` and the addresses are
/// personal data: they go into the request body and nowhere else.
#[derive(Clone, Copy)]
pub struct Mail<'a> {
    pub campaign_id: &'a str,
    pub member_id: i64,
    pub to: &'a str,
    /// `configure --from`: `addr` or `Name <addr>`.
    pub from: Option<&'a str>,
    /// `configure --reply-to`.
    pub reply_to: Option<&'a str>,
    /// The vendor's stored template (`configure --template`, else the campaign id).
    pub template: &'a str,
    /// The recipient's template data: a flat object of strings (`import`'s extra columns).
    pub data: Option<&'a Map<String, Value>>,
    /// With `LIST_UNSUBSCRIBE=ours`: this mail's one-click link, sent as the two RFC 8058
    /// headers and as the template data's `unsubscribe_url` ([`crate::unsubscribe`]).
    pub unsubscribe: Option<&'a Link>,
    /// With `FEEDBACK_ID`: Gmail's Feedback Loop header value, `campaign:vendor:bulk:SenderId`
    /// (no address, no member id: `RunConfig::feedback_id`).
    pub feedback_id: Option<&'a str>,
}

impl fmt::Debug for Mail<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mail")
            .field("campaign_id", &self.campaign_id)
            .field("member_id", &self.member_id)
            .field("to", &"[personal data]")
            .field("template", &self.template)
            .finish_non_exhaustive()
    }
}

impl<'a> Mail<'a> {
    /// The template data as a JSON object, `{}` when the row has none, serialized in place;
    /// with our one-click link, `unsubscribe_url` too (the body's visible link).
    pub fn data(&self) -> Data<'a> {
        Data {
            row: self.data,
            unsubscribe_url: self.unsubscribe.map(|l| l.url.as_str()),
        }
    }

    /// Whether the mail carries template data at all (the row's, or our link).
    pub fn has_data(&self) -> bool {
        self.data.is_some() || self.unsubscribe.is_some()
    }

    /// The headers of ours the mail carries — the RFC 8058 pair of our one-click link, Gmail's
    /// `Feedback-ID` — if any.
    pub fn headers(&self) -> Option<Headers<'a>> {
        let h = Headers {
            list_unsubscribe: self.unsubscribe.map(|l| l.header.as_str()),
            feedback_id: self.feedback_id,
        };
        (h.list_unsubscribe.is_some() || h.feedback_id.is_some()).then_some(h)
    }

    /// The template data as a JSON string (SES's `TemplateData`, Mailgun's `t:variables`).
    pub fn data_text(&self) -> String {
        serde_json::to_string(&self.data()).expect("a JSON object serializes")
    }

    /// The member id as the vendors' metadata carries it: a string everywhere.
    pub fn member(&self) -> Text<i64> {
        Text(self.member_id)
    }

    /// Our metadata as (name, value) pairs, for the vendors that take a list of tags (SES's
    /// `EmailTags`, Resend's `tags`).
    pub fn tags(&self) -> [(&'static str, Text<&dyn fmt::Display>); 2] {
        [
            ("campaign_id", Text(&self.campaign_id)),
            ("member_id", Text(&self.member_id)),
        ]
    }
}

/// A row's template data in a request body: the object itself, or `{}`, plus our
/// `unsubscribe_url` (which wins over a column of that name). Serialized from the row's map
/// without copying it.
#[derive(Clone, Copy)]
pub struct Data<'a> {
    row: Option<&'a Map<String, Value>>,
    unsubscribe_url: Option<&'a str>,
}

/// The template variable our one-click link is given under, for the body's visible link.
pub const UNSUBSCRIBE_URL: &str = "unsubscribe_url";

impl Serialize for Data<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ours = self.unsubscribe_url;
        let row = self.row.into_iter().flatten();
        let mut m = s.serialize_map(None)?;
        for (k, v) in row.filter(|(k, _)| ours.is_none() || k.as_str() != UNSUBSCRIBE_URL) {
            m.serialize_entry(k, v)?;
        }
        if let Some(url) = ours {
            m.serialize_entry(UNSUBSCRIBE_URL, url)?;
        }
        m.end()
    }
}

/// The headers of ours a mail carries: the two of RFC 8058 one-click unsubscribe —
/// `List-Unsubscribe` (our HTTPS link, a mailto after it if set) and `List-Unsubscribe-Post:
/// List-Unsubscribe=One-Click` — with our link, and Gmail's `Feedback-ID` with `FEEDBACK_ID`
/// (one such header per mail). Serialized as the vendors take headers: an object of name →
/// value ([`Headers::as_object`]) or a list of `{"Name", "Value"}` ([`Headers::as_name_value`]).
#[derive(Clone, Copy)]
pub struct Headers<'a> {
    pub list_unsubscribe: Option<&'a str>,
    pub feedback_id: Option<&'a str>,
}

impl<'a> Headers<'a> {
    pub const ONE_CLICK: [&'static str; 2] = ["List-Unsubscribe", "List-Unsubscribe-Post"];
    pub const FEEDBACK_ID: &'static str = "Feedback-ID";

    /// (name, value), the RFC 8058 pair in the order it writes them, then `Feedback-ID`.
    pub fn pairs(self) -> impl Iterator<Item = (&'static str, &'a str)> {
        let one_click = self.list_unsubscribe.into_iter().flat_map(|l| {
            [
                (Self::ONE_CLICK[0], l),
                (Self::ONE_CLICK[1], crate::unsubscribe::ONE_CLICK),
            ]
        });
        one_click.chain(self.feedback_id.map(|f| (Self::FEEDBACK_ID, f)))
    }

    /// `{"List-Unsubscribe": …, "List-Unsubscribe-Post": …, "Feedback-ID": …}` (SendGrid,
    /// Resend, our contract).
    pub fn as_object(self) -> HeaderObject<'a> {
        HeaderObject(self)
    }

    /// `[{"Name": …, "Value": …}, …]` (SES v2, Postmark).
    pub fn as_name_value(self) -> HeaderList<'a> {
        HeaderList(self)
    }
}

#[derive(Clone, Copy)]
pub struct HeaderObject<'a>(Headers<'a>);

impl Serialize for HeaderObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.0.pairs() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Clone, Copy)]
pub struct HeaderList<'a>(Headers<'a>);

impl Serialize for HeaderList<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        #[derive(serde::Serialize)]
        #[serde(rename_all = "PascalCase")]
        struct NameValue<'a> {
            name: &'a str,
            value: &'a str,
        }
        let mut seq = s.serialize_seq(None)?;
        for (name, value) in self.0.pairs() {
            seq.serialize_element(&NameValue { name, value })?;
        }
        seq.end()
    }
}

/// A value sent as a JSON string (`"42"`) whatever its type: the vendors' metadata fields take
/// strings only.
#[derive(Clone, Copy)]
pub struct Text<T>(pub T);

impl<T: fmt::Display> Serialize for Text<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<T: fmt::Display> fmt::Display for Text<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A request body: JSON bytes, or form fields sent as `multipart/form-data` (Mailgun's SDK
/// does), in the order given, or none (a `DELETE` of [`Profile::unlist`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Json(Vec<u8>),
    Form(Vec<(&'static str, String)>),
    Empty,
}

impl Body {
    /// `value` as JSON bytes: a vendor's typed body, serialized straight into the buffer sent.
    pub fn json(value: &impl Serialize) -> Self {
        Body::Json(serde_json::to_vec(value).expect("a request body serializes"))
    }

    /// The content type and the bytes sent (no content type for no body). A form is encoded
    /// here as `multipart/form-data`, in one buffer (see [`multipart`]).
    pub fn encode(self) -> (Option<String>, Vec<u8>) {
        match self {
            Body::Json(bytes) => (Some("application/json".to_string()), bytes),
            Body::Form(fields) => {
                let (boundary, bytes) = multipart(&fields);
                (
                    Some(format!("multipart/form-data; boundary={boundary}")),
                    bytes,
                )
            }
            Body::Empty => (None, Vec::new()),
        }
    }
}

/// `fields` as a `multipart/form-data` body of text parts (RFC 7578), as the `form-data`
/// package under Mailgun's SDK writes it: per part a `Content-Disposition: form-data;
/// name="…"` line, a blank line and the value, then the closing delimiter. Written into one
/// buffer rather than through `reqwest::multipart`: that streams every part as several chunks
/// through nested stream adapters, which cost a Mailgun mail ~85 000 instructions more than a
/// JSON one (docs/BENCHMARKS.md "Each vendor's contract"). The boundary is random and never
/// occurs in a value (a value holding it gets another); the names are ours, plain ASCII.
pub fn multipart(fields: &[(&'static str, String)]) -> (String, Vec<u8>) {
    let boundary = loop {
        let b = format!("----campaign-sender-{}", uuid::Uuid::new_v4().simple());
        if !fields.iter().any(|(_, v)| v.contains(&b)) {
            break b;
        }
    };
    // A Mailgun form is well under this; a larger one grows the buffer once or twice.
    let mut bytes = Vec::with_capacity(2048);
    for (name, value) in fields {
        debug_assert!(
            !name.contains(['"', '\r', '\n']),
            "a form field name of ours"
        );
        bytes.extend_from_slice(b"--");
        bytes.extend_from_slice(boundary.as_bytes());
        bytes.extend_from_slice(b"\r\nContent-Disposition: form-data; name=\"");
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(b"\"\r\n\r\n");
        bytes.extend_from_slice(value.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"--");
    bytes.extend_from_slice(boundary.as_bytes());
    bytes.extend_from_slice(b"--\r\n");
    (boundary, bytes)
}

/// A request as a profile builds it: the method (a send is a `POST`), the path appended to the
/// base URL, the headers (auth included), the body.
#[derive(Clone, PartialEq)]
pub struct Outgoing {
    pub method: reqwest::Method,
    pub path: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: Body,
    /// HTTP basic auth (Mailgun: user `api`); kept apart so the client encodes it.
    pub basic: Option<(String, String)>,
}

impl fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| *n).collect();
        f.debug_struct("Outgoing")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("headers", &names)
            .finish_non_exhaustive()
    }
}

impl Outgoing {
    /// A `POST` of `body` to `path`.
    pub fn new(path: impl Into<String>, body: Body) -> Self {
        Self {
            method: reqwest::Method::POST,
            path: path.into(),
            headers: Vec::new(),
            body,
            basic: None,
        }
    }

    /// A `DELETE` of `path`, with no body.
    pub fn delete(path: impl Into<String>) -> Self {
        Self {
            method: reqwest::Method::DELETE,
            ..Self::new(path, Body::Empty)
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The value of header `name` (case-insensitive), for tests and the signer.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A vendor's answer, as read (the body bounded, never logged: it may echo an address).
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub status: u16,
    pub headers: &'a reqwest::header::HeaderMap,
    pub body: &'a [u8],
    pub now: SystemTime,
}

impl Answer<'_> {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON, if it is JSON.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(self.body).ok()
    }
}

/// A request that cannot be built: nothing is sent, and the pod stops as for a refused account
/// (every row would meet the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The request could not be signed (SigV4): the credentials or the region are unusable.
    #[error("the request could not be signed")]
    Unsigned,
}

/// One vendor: how to ask, how to read the answer (what else adding a vendor takes:
/// [`crate::provider`]'s map).
pub trait Profile: Send + Sync + 'static {
    /// The AWS credentials the requests are signed with (SES), to refresh before a send.
    fn aws_credentials(&self) -> Option<&super::aws::Source> {
        None
    }

    /// Whether a mail needs a sender (`configure --from`): every vendor's does.
    fn needs_sender(&self) -> bool {
        true
    }

    /// The request for `mail`, at `now` (SigV4 signs the time).
    fn request(&self, mail: &Mail<'_>, now: SystemTime) -> Result<Outgoing, BuildError>;

    /// What the vendor's answer means: the vendor's own table of statuses, error codes and
    /// rate-limit headers, and the message id of an accepted mail.
    fn read(&self, answer: &Answer<'_>) -> Attempt;

    /// The request that takes `email` off the vendor's own suppression list (`suppress
    /// --lift-at-vendor`, [`super::unlist`]), at `now`; `None` where the vendor has no API
    /// for it (our JSON contract).
    fn unlist(&self, email: &str, now: SystemTime) -> Option<Result<Outgoing, BuildError>>;

    /// What the vendor's answer to [`Profile::unlist`] means (most: the table the vendors
    /// share, `answer::unlisted`).
    fn unlisted(&self, answer: &Answer<'_>) -> Unlisted;
}

/// What a vendor said to one lift of an address off its own list ([`Profile::unlisted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlisted {
    /// Off the vendor's list: its next campaign reaches the address.
    Lifted,
    /// The vendor had not listed it (it never bounced there, or was lifted before).
    NotListed,
    /// Too many requests: try again after the wait (the vendor's, when it says).
    Throttled {
        retry_after: Option<std::time::Duration>,
    },
    /// 401/403: the key may not change the list; nothing more is tried.
    Refused { status: u16 },
    /// 5xx, or no answer: the vendor may do it later; try again.
    Unavailable { status: Option<u16> },
    /// Any other answer: this address stays listed (printed with its status).
    Failed { status: u16 },
    /// The vendor has no API for it.
    NoApi,
}
