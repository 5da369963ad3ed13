//! What the client needs to know of a vendor besides its [`super::Profile`], pure: which one
//! (`MAIL_PROVIDER`, [`Kind`]) and whether it honours idempotency keys, its public endpoint, the
//! campaign's part of every mail ([`Letter`]), the key, and the tags' charset. Judged by the
//! unit tests (`scripts/mutants-cargo.sh`).

use serde::Deserialize;

use crate::text_enum::text_enum;

use super::{mailgun, postmark, resend, sendgrid, ses};

text_enum! {
    /// `MAIL_PROVIDER`: which vendor's API the workers speak.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Kind: "provider profile" {
        /// Our own JSON contract (`fake-provider`, an in-house relay): `MAIL_URL` is the whole
        /// URL.
        #[default]
        Json = "json",
        Sendgrid = "sendgrid",
        Ses = "ses",
        Postmark = "postmark",
        Mailgun = "mailgun",
        Resend = "resend",
    }
}

impl Kind {
    /// Whether the vendor honours an idempotency key for a repeat of the same mail (the JSON
    /// contract and Resend). Only then may an attempt with an unknown outcome be sent again.
    pub fn idempotent(self) -> bool {
        matches!(self, Kind::Json | Kind::Resend)
    }

    /// The longest header value the vendor takes, where it says (SES v2's `MessageHeader`:
    /// `Value` of 1 to 870 printable ASCII characters; the others name none short of the
    /// RFC 5322 line, which they fold).
    pub fn header_value_limit(self) -> Option<usize> {
        match self {
            Kind::Ses => Some(ses::MAX_HEADER_VALUE),
            _ => None,
        }
    }

    /// The vendor's public endpoint, when `MAIL_URL` is not set (SES: in `region`).
    pub fn default_base(self, region: Option<&str>) -> Option<String> {
        match self {
            Kind::Json => None,
            Kind::Sendgrid => Some(sendgrid::BASE.into()),
            Kind::Ses => region.map(ses::base),
            Kind::Postmark => Some(postmark::BASE.into()),
            Kind::Mailgun => Some(mailgun::BASE.into()),
            Kind::Resend => Some(resend::BASE.into()),
        }
    }
}

impl<'de> Deserialize<'de> for Kind {
    /// Read as text, so a wrong value is refused naming the variable and the choices.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.trim().parse().map_err(|why| {
            let all: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
            serde::de::Error::custom(format!(
                "{why} (one of {}) while parsing value provided by MAIL_PROVIDER",
                all.join(", ")
            ))
        })
    }
}

/// The campaign's part of every mail: its settings row's template, sender and reply-to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Letter {
    pub template: String,
    pub from: Option<String>,
    pub reply_to: Option<String>,
}

/// The idempotency key of one recipient of one campaign. Never includes the attempt.
pub fn idempotency_key(campaign_id: &str, member_id: i64) -> String {
    format!("{campaign_id}:{member_id}")
}

/// `host[:port]` of a URL, as the `Host` header carries it.
pub fn host_of(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}
