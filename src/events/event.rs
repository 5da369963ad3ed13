//! One event as every vendor's parser hands it over, and **the one table** of what each kind of
//! event does — for all vendors, in [`What::effect`]:
//!
//! | what | suppresses the address (reason) | settles an unknown attempt as `sent` | funnel |
//! |---|---|---|---|
//! | `Accepted` (processed, sent, queued) | — | yes | accepted |
//! | `Delivered` | — | yes | delivered |
//! | `Deferred` (a delay, a soft bounce) | — | yes | bounced_soft |
//! | `HardBounce` | `hard_bounce` | yes | bounced_hard |
//! | `Complaint` | `complaint` | yes | complained |
//! | `Unsubscribe` | `unsubscribe` | yes | unsubscribed |
//! | `Dropped` (refused: already suppressed at the vendor) | `hard_bounce` | no | dropped |
//! | `Opened` / `Clicked` | — | yes | opened / clicked |
//! | `Other` (anything else) | — | no | — (counted, stored) |
//!
//! Every kind but `Dropped` and `Other` proves the vendor accepted the mail: an `unconfirmed`
//! row, or one whose unknown attempt waits to be retried, is `sent` and never mailed again. A
//! `Dropped` mail was never sent — the vendor refused it for an address on its own list — so
//! its address joins ours and its row stays as the send wrote it.

use serde::Serialize;

/// What happened to one mail, in the vendor's words mapped to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    Accepted,
    Delivered,
    Deferred,
    HardBounce,
    Complaint,
    Unsubscribe,
    Dropped,
    Opened,
    Clicked,
    Other,
}

/// Why an address goes onto `suppressions` (its `reason` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    HardBounce,
    Complaint,
    Unsubscribe,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::HardBounce => "hard_bounce",
            Reason::Complaint => "complaint",
            Reason::Unsubscribe => "unsubscribe",
        }
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
            What::Deferred => (None, true, Some("bounced_soft")),
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

    /// The kind stored as `s` ([`What::as_str`]).
    pub fn parse(s: &str) -> Option<What> {
        ALL.into_iter().find(|w| w.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            What::Accepted => "accepted",
            What::Delivered => "delivered",
            What::Deferred => "deferred",
            What::HardBounce => "hard_bounce",
            What::Complaint => "complaint",
            What::Unsubscribe => "unsubscribe",
            What::Dropped => "dropped",
            What::Opened => "opened",
            What::Clicked => "clicked",
            What::Other => "other",
        }
    }
}

/// Every kind.
pub const ALL: [What; 10] = [
    What::Accepted,
    What::Delivered,
    What::Deferred,
    What::HardBounce,
    What::Complaint,
    What::Unsubscribe,
    What::Dropped,
    What::Opened,
    What::Clicked,
    What::Other,
];

/// The funnel columns, in the order `status` shows them.
pub const FUNNEL: [&str; 9] = [
    "accepted",
    "delivered",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bounces_complaints_unsubscribes_and_drops_suppress() {
        let suppressing: Vec<_> = ALL
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
        for w in ALL.into_iter().filter(|w| *w != What::Other) {
            assert!(FUNNEL.contains(&w.effect().funnel.unwrap()), "{w:?}");
            assert_eq!(What::parse(w.as_str()), Some(w));
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
}
