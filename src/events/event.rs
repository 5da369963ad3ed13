//! One event as every vendor's parser hands it over, and **the one table** of what each kind of
//! event does — for all vendors, in [`What::effect`]:
//!
//! | what | suppresses the address (reason) | settles an unknown attempt as `sent` | funnel |
//! |---|---|---|---|
//! | `Accepted` (processed, sent, queued) | — | yes | accepted |
//! | `Delivered` | — | yes | delivered |
//! | `Deferred` (a delay; a temporary failure that is not the recipient's) | — | yes | deferred |
//! | `SoftBounce` (the recipient's mailbox full or unavailable, the vendor's final word) | after `SOFT_BOUNCE_LIMIT` in the window: `soft_bounce` ([`crate::store::soft_bounces`]) | yes | bounced_soft |
//! | `HardBounce` | `hard_bounce` | yes | bounced_hard |
//! | `Complaint` | `complaint` | yes | complained |
//! | `Unsubscribe` | `unsubscribe` | yes | unsubscribed |
//! | `Dropped` (refused: already suppressed at the vendor) | `hard_bounce` | no | dropped |
//! | `Opened` / `Clicked` | — | yes | opened / clicked |
//! | `Other` (anything else) | — | no | — (counted, stored) |
//!
//! A `Complaint` and a `HardBounce` of a row of ours also count against its campaign's lines
//! ([`crate::store::brake`]), each member once.
//!
//! Every kind but `Dropped` and `Other` proves the vendor accepted the mail: an `unconfirmed`
//! row, or one whose unknown attempt waits to be retried, is `sent` and never mailed again. A
//! `Dropped` mail was never sent — the vendor refused it for an address on its own list — so
//! its address joins ours and its row stays as the send wrote it.

use chrono::{DateTime, Utc};

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
        Complaint = "complaint",
        Unsubscribe = "unsubscribe",
        Dropped = "dropped",
        Opened = "opened",
        Clicked = "clicked",
        Other = "other",
    }
}

text_enum! {
    /// Why an address goes onto `suppressions` (its `reason` column).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Reason: "suppression reason" {
        HardBounce = "hard_bounce",
        Complaint = "complaint",
        Unsubscribe = "unsubscribe",
    }
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
pub const FUNNEL: [&str; 10] = [
    "accepted",
    "delivered",
    "deferred",
    "bounced_soft",
    "bounced_hard",
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
            .finish()
    }
}

/// A member id as the vendors echo it: a string (or a JSON number) of an i64.
pub fn member_of(v: Option<&serde_json::Value>) -> Option<i64> {
    match v? {
        serde_json::Value::String(s) => s.parse().ok(),
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::Array(a) => member_of(a.first()),
        _ => None,
    }
}

/// A string field, or the first element of an array of strings (SES tags).
pub fn text_of(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(a) => text_of(a.first()),
        _ => None,
    }
}

/// A vendor's time of an event: seconds since the epoch (a number, or a string of one), or an
/// RFC 3339 text.
pub fn time_of(v: Option<&serde_json::Value>) -> Option<DateTime<Utc>> {
    let secs = match v? {
        serde_json::Value::Number(n) => n.as_f64()?,
        serde_json::Value::String(s) => match s.parse::<f64>() {
            Ok(x) => x,
            Err(_) => return DateTime::parse_from_rfc3339(s).ok().map(|t| t.to_utc()),
        },
        _ => return None,
    };
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    DateTime::from_timestamp(secs.trunc() as i64, (secs.fract() * 1e9) as u32)
}

/// Whether an enhanced status code (RFC 3463) is about the recipient's mailbox: `4.2.x` or
/// `5.2.x` — full, disabled, unavailable — rather than the sender's address, IP or content
/// (`x.7.x` policy, `x.6.x` content, `x.4.x` the network).
pub fn mailbox_status(status: Option<&str>) -> bool {
    status.is_some_and(|s| {
        let mut parts = s.trim().split('.');
        matches!(parts.next(), Some("4" | "5")) && parts.next() == Some("2")
    })
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

    #[test]
    fn member_ids_come_as_strings_numbers_or_tag_arrays() {
        use serde_json::json;
        assert_eq!(member_of(Some(&json!("42"))), Some(42));
        assert_eq!(member_of(Some(&json!(42))), Some(42));
        assert_eq!(member_of(Some(&json!(["42"]))), Some(42));
        assert_eq!(member_of(Some(&json!("x"))), None);
        assert_eq!(text_of(Some(&json!(["c1"]))), Some("c1".into()));
    }

    #[test]
    fn a_vendors_time_comes_as_epoch_seconds_or_rfc_3339() {
        use serde_json::json;
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert_eq!(time_of(Some(&json!(1_700_000_000))), Some(t));
        assert_eq!(time_of(Some(&json!("1700000000"))), Some(t));
        assert_eq!(time_of(Some(&json!("2023-11-14T22:13:20Z"))), Some(t));
        assert_eq!(
            time_of(Some(&json!(1_700_000_000.5))),
            Some(t + chrono::Duration::milliseconds(500))
        );
        assert_eq!(time_of(Some(&json!("yesterday"))), None);
        assert_eq!(time_of(Some(&json!(-1))), None);
    }

    #[test]
    fn only_a_mailbox_status_is_the_recipients() {
        assert!(mailbox_status(Some("4.2.2")));
        assert!(mailbox_status(Some("5.2.1")));
        assert!(!mailbox_status(Some("4.7.1")), "a block of the sender");
        assert!(!mailbox_status(Some("4.4.7")), "the network");
        assert!(!mailbox_status(Some("42.2")));
        assert!(!mailbox_status(None));
    }
}
