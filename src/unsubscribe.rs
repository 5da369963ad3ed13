//! One-click unsubscribe (RFC 8058) with our own links: the token every mail's
//! `List-Unsubscribe` URL and its `unsubscribe_url` carry, and the headers' values.
//!
//! A token names the campaign and the member — no address — and cannot be forged or altered
//! without the secret: `{campaign_id}.{member_id}.{mac}`, the MAC an HMAC-SHA256 of both under
//! the first of `UNSUBSCRIBE_SECRET`'s secrets, its first 16 bytes in URL-safe base64 (22
//! characters: short, and 128 bits no one guesses). Every secret of the list verifies, so a
//! secret is rotated by putting the new one first and dropping the old one once the mails that
//! carry it are past caring. Tokens never expire: an unsubscribe link must work as long as the
//! mail is read. Verified in constant time (`hmac`'s `verify_truncated_left`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `LIST_UNSUBSCRIBE`: whose one-click unsubscribe every mail carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Our links (the default): `List-Unsubscribe` + `List-Unsubscribe-Post` on every mail
    /// through every vendor, `unsubscribe_url` in its template data, honoured by `events`.
    #[default]
    Ours,
    /// The vendor's own managed unsubscribe (SES list management, SendGrid subscription
    /// tracking, Mailgun's unsubscribe tracking, a Postmark broadcast stream); none of our
    /// headers. Resend and our JSON contract have none: refused.
    Vendor,
    /// No unsubscribe header: for mail that is not bulk marketing.
    None,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Ours, Mode::Vendor, Mode::None];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Ours => "ours",
            Mode::Vendor => "vendor",
            Mode::None => "none",
        }
    }

    /// What a run says once at its start in this mode, if anything.
    pub fn caution(self) -> Option<&'static str> {
        (self == Mode::None).then_some(
            "LIST_UNSUBSCRIBE=none: mails carry no one-click unsubscribe; only for mail that is not bulk marketing (Gmail and Yahoo require it of bulk senders)",
        )
    }
}

impl<'de> serde::Deserialize<'de> for Mode {
    /// Read as text, so a wrong value is refused naming the variable and the choices.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s.trim())
            .ok_or_else(|| {
                serde::de::Error::custom(
                    "is not ours, vendor or none while parsing value provided by LIST_UNSUBSCRIBE",
                )
            })
    }
}

/// `UNSUBSCRIBE_MAILTO_INBOUND`: the vendor whose inbound route delivers the mailto's mailbox
/// to `events` (`POST /inbound/{vendor}`), each authenticated as that vendor secures it
/// (docs/VENDORS.md "Inbound mail"). Without one, a mailto is refused: nothing would read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Inbound {
    /// Postmark's inbound webhook: the basic-auth credentials of its URL.
    Postmark,
    /// A Mailgun route's `forward()`: the HMAC of its `timestamp` and `token` fields.
    Mailgun,
    /// SendGrid's Inbound Parse with a security policy: ECDSA over the timestamp and the body.
    Sendgrid,
    /// SES receiving with an SNS action: the SNS signature, the topic pinned.
    Ses,
}

impl Inbound {
    pub const ALL: [Inbound; 4] = [
        Inbound::Postmark,
        Inbound::Mailgun,
        Inbound::Sendgrid,
        Inbound::Ses,
    ];

    /// Its path segment under `/inbound/`, and its label.
    pub fn as_str(self) -> &'static str {
        match self {
            Inbound::Postmark => "postmark",
            Inbound::Mailgun => "mailgun",
            Inbound::Sendgrid => "sendgrid",
            Inbound::Ses => "ses",
        }
    }

    /// The vendor named `s`, or why it cannot deliver the mailbox.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(v) = Inbound::ALL.into_iter().find(|v| v.as_str() == s) {
            return Ok(v);
        }
        Err(match s {
            "resend" => "is resend, whose receiving is not supported here (its inbound is not \
                         verified in docs/VENDORS.md); route the mailbox through postmark, \
                         mailgun, sendgrid or ses"
                .into(),
            "json" => {
                "is json: our contract has no inbound; use postmark, mailgun, sendgrid or ses"
                    .into()
            }
            _ => "is not postmark, mailgun, sendgrid or ses (the vendor whose inbound route \
                  delivers UNSUBSCRIBE_MAILTO's mailbox to `events`)"
                .into(),
        })
    }
}

/// `List-Unsubscribe-Post`'s one value.
pub const ONE_CLICK: &str = "List-Unsubscribe=One-Click";

/// The MAC's length in a token, in bytes.
const MAC_BYTES: usize = 16;

/// The shortest signing secret taken (the first of the list), in bytes: HMAC-SHA256's own
/// block of strength, 256 bits.
pub const MIN_SIGNING_SECRET_BYTES: usize = 32;

/// The shortest verify-only secret taken (the older ones of the list), in bytes: the floor
/// before the signing one was raised, kept so that the links of mails already sent still
/// verify; [`Signer::weak_verifiers`] counts those under [`MIN_SIGNING_SECRET_BYTES`].
pub const MIN_SECRET_BYTES: usize = 16;

/// What the MAC covers besides the campaign and the member: a token of another use or version
/// can never stand for this one.
const CONTEXT: &[u8] = b"campaign-sender one-click unsubscribe v1";

/// The secrets of `UNSUBSCRIBE_SECRET`: the first signs, all verify.
#[derive(Clone)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} secrets)", self.keys.len())
    }
}

impl Signer {
    /// From `UNSUBSCRIBE_SECRET`: one or more secrets, comma-separated; the first (it signs) at
    /// least [`MIN_SIGNING_SECRET_BYTES`] long, the others (they only verify) at least
    /// [`MIN_SECRET_BYTES`]. The problem never quotes a secret.
    pub fn new(secrets: &str) -> Result<Self, String> {
        let keys: Vec<Vec<u8>> = secrets
            .split(',')
            .map(|s| s.trim().as_bytes().to_vec())
            .collect();
        if keys[0].len() < MIN_SIGNING_SECRET_BYTES {
            return Err(format!(
                "secret 1 of {} (the one that signs) is shorter than {MIN_SIGNING_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`; keep the old one after it so its links still verify)",
                keys.len()
            ));
        }
        if let Some(i) = keys.iter().position(|k| k.len() < MIN_SECRET_BYTES) {
            return Err(format!(
                "secret {} of {} is shorter than {MIN_SECRET_BYTES} bytes (e.g. `openssl rand -hex 32`)",
                i + 1,
                keys.len()
            ));
        }
        Ok(Self { keys })
    }

    /// How many verify-only secrets are shorter than [`MIN_SIGNING_SECRET_BYTES`]: kept so
    /// the links of mails already sent still work, to be dropped once those are past caring.
    pub fn weak_verifiers(&self) -> usize {
        self.keys[1..]
            .iter()
            .filter(|k| k.len() < MIN_SIGNING_SECRET_BYTES)
            .count()
    }

    fn mac(key: &[u8], campaign_id: &str, member_id: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(CONTEXT);
        mac.update(b"\n");
        mac.update(campaign_id.as_bytes());
        mac.update(b"\n");
        mac.update(member_id.to_string().as_bytes());
        mac
    }

    /// The token of one member of one campaign (a campaign id's alphabet is URL-safe and holds
    /// no `.`: [`crate::campaign_id`]).
    pub fn token(&self, campaign_id: &str, member_id: i64) -> String {
        let tag = Self::mac(&self.keys[0], campaign_id, member_id)
            .finalize()
            .into_bytes();
        format!(
            "{campaign_id}.{member_id}.{}",
            URL_SAFE_NO_PAD.encode(&tag[..MAC_BYTES])
        )
    }

    /// The campaign and member a genuine token names; `None` for anything else (forged,
    /// altered, truncated, signed with a secret no longer listed).
    pub fn verify(&self, token: &str) -> Option<(String, i64)> {
        let mut parts = token.rsplitn(3, '.');
        let (tag, member, campaign) = (parts.next()?, parts.next()?, parts.next()?);
        let member_id: i64 = member.parse().ok()?;
        if crate::campaign_id::problem(campaign).is_some() || member_id.to_string() != member {
            return None;
        }
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != MAC_BYTES {
            return None;
        }
        self.keys
            .iter()
            .any(|k| {
                Self::mac(k, campaign, member_id)
                    .verify_truncated_left(&tag)
                    .is_ok()
            })
            .then(|| (campaign.to_string(), member_id))
    }
}

/// The most octets a local part may have (RFC 5321 §4.5.3.1.1): a `+tag` that would make the
/// mailto's local part longer is not added (the subject still carries the token).
pub const LOCAL_PART_MAX: usize = 64;

/// The subject every mailto asks for, before the token (RFC 6068's `?subject=`).
pub const MAILTO_SUBJECT: &str = "unsubscribe";

/// `mailto` with `+{token}` after its local part, if that local part stays within
/// [`LOCAL_PART_MAX`] octets: `leave@example.com` → `leave+{token}@example.com`. The token's
/// alphabet (a campaign id's, digits, `-`, `.` between them, URL-safe base64) is a dot-atom's.
pub fn tagged(mailto: &str, token: &str) -> Option<String> {
    let (local, domain) = mailto.rsplit_once('@')?;
    (local.len() + 1 + token.len() <= LOCAL_PART_MAX).then(|| format!("{local}+{token}@{domain}"))
}

/// Our links, as the senders make them: `UNSUBSCRIBE_BASE_URL`, the signer, and
/// `UNSUBSCRIBE_MAILTO` if set.
#[derive(Debug, Clone)]
pub struct Links {
    base: String,
    signer: Signer,
    mailto: Option<String>,
}

/// One mail's link and its `List-Unsubscribe` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// `{UNSUBSCRIBE_BASE_URL}/unsubscribe/{token}`: the header's HTTPS URI and the template
    /// data's `unsubscribe_url`.
    pub url: String,
    /// `<url>`, then `<mailto:…>` when `UNSUBSCRIBE_MAILTO` is set: the mail it asks for
    /// carries the token in its subject (`?subject=unsubscribe%20{token}`) and, where the local
    /// part stays within [`LOCAL_PART_MAX`], in the address's `+tag` — some clients drop the
    /// subject, some providers the tag; `events` reads both ([`crate::events::inbound`]).
    pub header: String,
}

impl Links {
    /// `base` without a trailing `/` (checked by the configuration: an HTTPS origin).
    pub fn new(base: &str, signer: Signer, mailto: Option<String>) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            signer,
            mailto,
        }
    }

    pub fn for_member(&self, campaign_id: &str, member_id: i64) -> Link {
        let token = self.signer.token(campaign_id, member_id);
        let url = format!("{}/unsubscribe/{token}", self.base);
        let header = match &self.mailto {
            Some(m) => {
                let to = tagged(m, &token).unwrap_or_else(|| m.clone());
                format!("<{url}>, <mailto:{to}?subject={MAILTO_SUBJECT}%20{token}>")
            }
            None => format!("<{url}>"),
        };
        Link { url, header }
    }

    /// Whether every mail of `campaign_id` carries the token in its mailto's `+tag` too: the
    /// longest member id's token still fits the local part ([`tagged`]).
    pub fn every_mailto_tagged(&self, campaign_id: &str) -> bool {
        let longest = self.signer.token(campaign_id, i64::MIN);
        self.mailto
            .as_deref()
            .is_none_or(|m| tagged(m, &longest).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new("0123456789abcdef0123456789abcdef").unwrap()
    }

    #[test]
    fn a_token_names_its_campaign_and_member_and_nothing_else_verifies() {
        let s = signer();
        let t = s.token("spring-sale", 42);
        assert!(t.starts_with("spring-sale.42.") && t.len() < 50, "{t}");
        assert!(!t.contains('@'));
        assert_eq!(s.verify(&t), Some(("spring-sale".into(), 42)));
        let other = s.token("spring-sale", 43);
        let forged = format!("spring-sale.43.{}", t.rsplit('.').next().unwrap());
        for bad in [
            forged.as_str(),
            &t[..t.len() - 1],
            &format!("{t}A"),
            &t.replace("spring-sale", "autumn-sale"),
            "spring-sale.42.",
            "spring-sale.042.AAAAAAAAAAAAAAAAAAAAAA",
            "",
            "..",
        ] {
            assert_eq!(s.verify(bad), None, "{bad:?}");
        }
        assert_eq!(s.verify(&other), Some(("spring-sale".into(), 43)));
        let stranger = Signer::new("another secret of thirty-two bytes").unwrap();
        assert_eq!(stranger.verify(&t), None, "another secret's token");
    }

    #[test]
    fn a_rotated_secret_still_verifies_the_old_links_and_signs_with_the_new() {
        let old = signer();
        let t = old.token("c1", 7);
        let rotated =
            Signer::new("a brand new secret of 32 bytes!!, 0123456789abcdef0123456789abcdef")
                .unwrap();
        assert_eq!(rotated.verify(&t), Some(("c1".into(), 7)));
        assert_ne!(rotated.token("c1", 7), t);
        assert_eq!(old.verify(&rotated.token("c1", 7)), None);
    }

    #[test]
    fn only_mail_without_an_unsubscribe_is_cautioned_at_start() {
        assert!(Mode::None
            .caution()
            .is_some_and(|c| c.contains("not bulk marketing")));
        assert_eq!((Mode::Ours.caution(), Mode::Vendor.caution()), (None, None));
    }

    #[test]
    fn short_secrets_are_refused_without_being_shown() {
        let err = Signer::new("0123456789abcdef0123456789abcdef, tiny-key").unwrap_err();
        assert!(
            err.contains("secret 2 of 2") && !err.contains("tiny"),
            "{err}"
        );
        // The signing secret needs 32 bytes; 16 were enough before, and still are to verify.
        let err = Signer::new("sixteen-byte-key").unwrap_err();
        assert!(
            err.contains("secret 1 of 1") && err.contains("32") && !err.contains("sixteen"),
            "{err}"
        );
        assert!(Signer::new(&"k".repeat(31)).is_err());
        assert_eq!(Signer::new(&"k".repeat(32)).unwrap().weak_verifiers(), 0);
        let rotated = Signer::new(&format!("{}, sixteen-byte-key", "k".repeat(32))).unwrap();
        assert_eq!(
            rotated.weak_verifiers(),
            1,
            "an old short secret is kept, and counted"
        );
    }

    #[test]
    fn the_header_carries_the_https_link_first_and_the_mailto_after_it() {
        let l = Links::new("https://mail.example.com/", signer(), None).for_member("c1", 7);
        assert!(
            l.url
                .starts_with("https://mail.example.com/unsubscribe/c1.7."),
            "{}",
            l.url
        );
        assert_eq!(l.header, format!("<{}>", l.url));
        let m = Links::new(
            "https://mail.example.com",
            signer(),
            Some("leave@example.com".into()),
        )
        .for_member("c1", 7);
        let token = m.url.rsplit('/').next().unwrap();
        assert_eq!(
            m.header,
            format!(
                "<{}>, <mailto:leave+{token}@example.com?subject=unsubscribe%20{token}>",
                m.url
            )
        );
    }

    #[test]
    fn the_mailto_carries_the_token_in_its_tag_only_while_the_local_part_fits() {
        let links = |m: &str| Links::new("https://m.example.com", signer(), Some(m.into()));
        let token = signer().token("c1", 7);
        assert_eq!(
            tagged("leave@example.com", &token),
            Some(format!("leave+{token}@example.com"))
        );
        // 64 octets exactly fit; one more does not, and the subject alone carries it.
        let local = "l".repeat(LOCAL_PART_MAX - 1 - token.len());
        assert!(tagged(&format!("{local}@example.com"), &token).is_some());
        let long = format!("{local}x@example.com");
        assert_eq!(tagged(&long, &token), None);
        let header = links(&long).for_member("c1", 7).header;
        assert!(
            header.ends_with(&format!("<mailto:{long}?subject=unsubscribe%20{token}>")),
            "{header}"
        );
        assert!(links("leave@example.com").every_mailto_tagged("c1"));
        assert!(!links("leave@example.com").every_mailto_tagged(&"c".repeat(40)));
    }
}
