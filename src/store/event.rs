//! One event as every vendor's parser hands it over to be stored (`provider_events`), and **the
//! one table** of what each kind of
//! event does — for all vendors, in [`What::effect`]:
//!
//! | what | suppresses the address (reason) | settles an unknown attempt as `sent` | funnel |
//! |---|---|---|---|
//! | `Accepted` (processed, sent, queued) | — | yes | accepted |
//! | `Delivered` | — | yes | delivered |
//! | `Deferred` (a delay; a temporary failure that is not the recipient's) | — | yes | deferred |
//! | `SoftBounce` (the recipient's mailbox full or unavailable, the vendor's final word) | after `SOFT_BOUNCE_LIMIT` in the window: `soft_bounce` ([`super::soft_bounces`]) | yes | bounced_soft |
//! | `HardBounce` (a permanent refusal whose cause is the recipient's, or unknown) | `hard_bounce` | yes | bounced_hard |
//! | `Refused` (a permanent refusal whose cause is the sender's: our domain, our reputation) | — | yes | refused |
//! | `Complaint` | `complaint` | yes | complained |
//! | `Unsubscribe` | `unsubscribe` | yes | unsubscribed |
//! | `Dropped` (refused: already suppressed at the vendor) | `hard_bounce` | no | dropped |
//! | `Opened` / `Clicked` | — | yes | opened / clicked |
//! | `Other` (anything else) | — | no | — (counted, stored) |
//!
//! A `Complaint` and a `HardBounce` of a row of ours also count against its campaign's lines
//! ([`super::brake`]), each member once; a `Refused` never does, and never suppresses: whose
//! fault a refusal is, is read by `crate::events::cause` and kept with the event ([`Refusal`]).
//!
//! Every kind but `Dropped` and `Other` proves the vendor accepted the mail: an `unconfirmed`
//! row, or one whose unknown attempt waits to be retried, is `sent` and never mailed again. A
//! `Dropped` mail was never sent — the vendor refused it for an address on its own list — so
//! its address joins ours and its row stays as the send wrote it.

use chrono::{DateTime, Utc};

use super::suppressions::Reason;
use crate::text_enum::text_enum;

text_enum! {
    /// What happened to one mail, in the vendor's words mapped to ours; its text is
    /// `provider_events.what`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum What: "kind of event" {
        Accepted = "accepted",
        Delivered = "delivered",
        Deferred = "deferred",
        SoftBounce = "soft_bounce",
        HardBounce = "hard_bounce",
        Refused = "refused",
        Complaint = "complaint",
        Unsubscribe = "unsubscribe",
        Dropped = "dropped",
        Opened = "opened",
        Clicked = "clicked",
        Other = "other",
    }
}

text_enum! {
    /// Why a mail was refused (`provider_events.cause`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Cause: "refusal cause" {
        /// The recipient's: no such mailbox (`X.1.1`, `X.1.10`, moved `X.1.6`).
        NoMailbox = "no_mailbox",
        /// The recipient's: no such domain (`X.1.2`).
        NoDomain = "no_domain",
        /// The recipient's: the mailbox is disabled or inactive (`X.2.1`).
        Disabled = "disabled",
        /// The recipient's: the mailbox is full (`X.2.2`): a soft bounce, never at once.
        MailboxFull = "mailbox_full",
        /// The sender's: SPF, DKIM or DMARC of our domain, or our IP's PTR.
        Authentication = "authentication",
        /// The sender's: our domain's or IP's reputation, a block list.
        Reputation = "reputation",
        /// The sender's: the mail's content or the receiver's policy for it.
        Policy = "policy",
        /// The sender's: no TLS.
        Tls = "tls",
        /// The sender's: too much, too fast (always temporary).
        Rate = "rate",
        /// Neither shown: treated as today — a permanent one suppresses.
        Unknown = "unknown",
    }
}

/// Whose fault a cause is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Recipient,
    Sender,
    Unknown,
}

impl Cause {
    pub fn whose(self) -> Whose {
        match self {
            Cause::NoMailbox | Cause::NoDomain | Cause::Disabled | Cause::MailboxFull => {
                Whose::Recipient
            }
            Cause::Authentication
            | Cause::Reputation
            | Cause::Policy
            | Cause::Tls
            | Cause::Rate => Whose::Sender,
            Cause::Unknown => Whose::Unknown,
        }
    }
}

text_enum! {
    /// The mailbox provider an address belongs to, by its domain (`provider_events.family`, a
    /// bounded metric label). A Google Workspace or Microsoft 365 domain of a business is
    /// `other`: only its MX would tell, and this reads no DNS.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Family: "mailbox provider" {
        Google = "google",
        Microsoft = "microsoft",
        Yahoo = "yahoo",
        Apple = "apple",
        Other = "other",
    }
}

impl Family {
    /// How an operator names the provider: `Gmail`, `Outlook.com`, `Yahoo`, `Apple`.
    pub fn provider_name(self) -> &'static str {
        match self {
            Family::Google => "Gmail",
            Family::Microsoft => "Outlook.com",
            Family::Yahoo => "Yahoo",
            Family::Apple => "Apple",
            Family::Other => "A mailbox provider",
        }
    }

    /// The family of `address`'s domain (case and a trailing dot do not matter).
    pub fn of(address: &str) -> Family {
        let domain = address
            .rsplit_once('@')
            .map_or("", |(_, d)| d)
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let d = domain.as_str();
        match d {
            "gmail.com" | "googlemail.com" => Family::Google,
            "outlook.com" | "hotmail.com" | "live.com" | "msn.com" => Family::Microsoft,
            "yahoo.com" | "ymail.com" | "rocketmail.com" | "aol.com" => Family::Yahoo,
            "icloud.com" | "me.com" | "mac.com" => Family::Apple,
            _ if country_variant(d, &["hotmail", "outlook", "live"]) => Family::Microsoft,
            _ if country_variant(d, &["yahoo", "aol"]) => Family::Yahoo,
            _ => Family::Other,
        }
    }
}

/// `hotmail.co.uk`, `yahoo.fr`: one of `names` under a country's suffix (one or two labels of
/// two or three letters) — inferred from the providers' own, never a business's subdomain.
fn country_variant(domain: &str, names: &[&str]) -> bool {
    let Some((name, suffix)) = domain.split_once('.') else {
        return false;
    };
    let labels: Vec<&str> = suffix.split('.').collect();
    names.contains(&name)
        && labels.len() <= 2
        && labels
            .iter()
            .all(|l| (2..=3).contains(&l.len()) && l.bytes().all(|b| b.is_ascii_lowercase()))
}

/// A refusal read: its cause, the enhanced code it carried, the recipient's family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cause: Cause,
    /// `5.7.26`; `None` when the answer had none.
    pub code: Option<String>,
    pub family: Family,
}

/// What an event does (the table in this module's rustdoc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Effect {
    pub suppress: Option<Reason>,
    pub settles: bool,
    /// The funnel column it counts in, if any.
    pub funnel: Option<&'static str>,
}

impl What {
    /// The one table of what each kind of event does.
    pub fn effect(self) -> Effect {
        let (suppress, settles, funnel) = match self {
            What::Accepted => (None, true, Some("accepted")),
            What::Delivered => (None, true, Some("delivered")),
            What::Deferred => (None, true, Some("deferred")),
            What::SoftBounce => (None, true, Some("bounced_soft")),
            What::HardBounce => (Some(Reason::HardBounce), true, Some("bounced_hard")),
            What::Refused => (None, true, Some("refused")),
            What::Complaint => (Some(Reason::Complaint), true, Some("complained")),
            What::Unsubscribe => (Some(Reason::Unsubscribe), true, Some("unsubscribed")),
            What::Dropped => (Some(Reason::HardBounce), false, Some("dropped")),
            What::Opened => (None, true, Some("opened")),
            What::Clicked => (None, true, Some("clicked")),
            What::Other => (None, false, None),
        };
        Effect {
            suppress,
            settles,
            funnel,
        }
    }
}

/// The funnel columns, in the order `status` shows them.
pub const FUNNEL: [&str; 11] = [
    "accepted",
    "delivered",
    "deferred",
    "bounced_soft",
    "bounced_hard",
    "refused",
    "complained",
    "unsubscribed",
    "dropped",
    "opened",
    "clicked",
];

/// One vendor event, normalised. `email` is personal data: it goes to `suppressions` and
/// nowhere else (never a log line, never a metric label).
#[derive(Clone, PartialEq)]
pub struct Event {
    /// The vendor's id of this event (its retries repeat it): stored once per vendor.
    pub id: String,
    pub what: What,
    /// Our metadata as the vendor echoed it; `None` when it did not (a mail sent by another
    /// tool on the same account).
    pub campaign_id: Option<String>,
    pub member_id: Option<i64>,
    /// The vendor's message id, as kept on the row (`provider_message_id`).
    pub message_id: Option<String>,
    /// The recipient the event is about, lower-cased by the store.
    pub email: Option<String>,
    /// When the vendor says it happened (vendors batch and retry: not when it reached us);
    /// `None` when the event does not say.
    pub occurred_at: Option<DateTime<Utc>>,
    /// For a bounce or a block: whose fault, as `crate::events::cause` read it.
    pub refusal: Option<Refusal>,
}

impl Event {
    /// Whether PostgreSQL can store it: an id (`provider_events.event_id <> ''`) and no NUL
    /// byte in any text (PostgreSQL's `text` has none). The vendor's signature covered it, so
    /// it is the vendor's odd event, not a forgery: counted and skipped, never a 503 that makes
    /// the vendor retry its whole batch for ever.
    pub fn storable(&self) -> bool {
        let texts = [
            Some(self.id.as_str()),
            self.campaign_id.as_deref(),
            self.message_id.as_deref(),
            self.email.as_deref(),
        ];
        !self.id.is_empty() && texts.into_iter().flatten().all(|t| !t.contains('\0'))
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("id", &self.id)
            .field("what", &self.what)
            .field("campaign_id", &self.campaign_id)
            .field("member_id", &self.member_id)
            .field("message_id", &self.message_id)
            .field("email", &self.email.as_ref().map(|_| "[personal data]"))
            .field("occurred_at", &self.occurred_at)
            .field("refusal", &self.refusal)
            .finish()
    }
}

/// The funnel column of a stored event kind (`provider_events.what`).
pub fn funnel_of(what: &str) -> Option<&'static str> {
    what.parse::<What>().ok().and_then(|w| w.effect().funnel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounces_complaints_unsubscribes_and_drops_suppress() {
        let suppressing: Vec<_> = What::ALL
            .into_iter()
            .filter(|w| w.effect().suppress.is_some())
            .collect();
        assert_eq!(
            suppressing,
            [
                What::HardBounce,
                What::Complaint,
                What::Unsubscribe,
                What::Dropped
            ]
        );
    }

    #[test]
    fn a_dropped_mail_and_an_unknown_event_settle_nothing() {
        assert!(!What::Dropped.effect().settles);
        assert!(!What::Other.effect().settles);
        assert!(What::Delivered.effect().settles && What::HardBounce.effect().settles);
    }

    #[test]
    fn every_funnel_column_is_listed() {
        for w in What::ALL.into_iter().filter(|w| *w != What::Other) {
            assert!(FUNNEL.contains(&w.effect().funnel.unwrap()), "{w:?}");
            assert_eq!(w.as_str().parse::<What>(), Ok(w));
        }
    }
}
