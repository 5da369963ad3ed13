//! The one small trait every vendor profile implements, and what it works on: a [`Mail`] in,
//! an [`Outgoing`] request out; an [`Answer`] in, an [`Attempt`] out. Both directions are pure
//! (the clock is passed in), so each vendor's request and answer table is unit-tested without a
//! network (`src/provider/tests.rs`, against the requests recorded from the vendors' own SDKs in
//! `tests/fixtures/providers/`).

use std::fmt;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::outcome::Attempt;

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

impl Mail<'_> {
    /// The template data, `{}` when the row has none.
    pub fn data_object(&self) -> Value {
        Value::Object(self.data.cloned().unwrap_or_default())
    }

    /// The member id as the vendors' metadata carries it (a string everywhere).
    pub fn member(&self) -> String {
        self.member_id.to_string()
    }
}

/// A request body: bytes with their content type, or form fields the client sends as
/// `multipart/form-data` (Mailgun's SDK does; the boundary is the client's).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Json(Vec<u8>),
    Form(Vec<(String, String)>),
}

impl Body {
    /// `value` as JSON bytes.
    pub fn json(value: &Value) -> Self {
        Body::Json(serde_json::to_vec(value).expect("a JSON value serializes"))
    }
}

/// A request as a profile builds it: the path appended to the base URL, the headers (auth
/// included), the body.
#[derive(Clone, PartialEq)]
pub struct Outgoing {
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
            .field("path", &self.path)
            .field("headers", &names)
            .finish_non_exhaustive()
    }
}

impl Outgoing {
    pub fn new(path: impl Into<String>, body: Body) -> Self {
        Self {
            path: path.into(),
            headers: Vec::new(),
            body,
            basic: None,
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

/// One vendor: how to ask, how to read the answer. Adding a vendor is one file implementing
/// this, one [`super::Kind`] variant, and the docs.
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
}

/// `Name <addr>` → (`Some(Name)`, `addr`); a bare address → (`None`, addr).
pub fn split_address(from: &str) -> (Option<&str>, &str) {
    match (from.rfind('<'), from.ends_with('>')) {
        (Some(i), true) => {
            let name = from[..i].trim().trim_matches('"').trim();
            let addr = from[i + 1..from.len() - 1].trim();
            ((!name.is_empty()).then_some(name), addr)
        }
        _ => (None, from.trim()),
    }
}
