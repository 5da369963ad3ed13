//! What every vendor's parser shares: reading our metadata, times and statuses out of a
//! vendor's JSON. The event itself, and the one table of what each kind does, are the store's
//! ([`crate::store::event`]): it is what `provider_events` holds.

use chrono::{DateTime, Utc};

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
/// RFC 3339 text. A time before the epoch is the epoch — long ago, so it counts in no window —
/// never "unknown", which would count as now.
pub fn time_of(v: Option<&serde_json::Value>) -> Option<DateTime<Utc>> {
    let secs = match v? {
        serde_json::Value::Number(n) => n.as_f64()?,
        serde_json::Value::String(s) => match s.parse::<f64>() {
            Ok(x) => x,
            Err(_) => {
                let t = DateTime::parse_from_rfc3339(s).ok()?.to_utc();
                return Some(t.max(DateTime::UNIX_EPOCH));
            }
        },
        _ => return None,
    };
    if !secs.is_finite() {
        return None;
    }
    let secs = secs.max(0.0);
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
        assert_eq!(time_of(Some(&json!(-1))), Some(DateTime::UNIX_EPOCH));
        assert_eq!(time_of(Some(&json!("-5"))), Some(DateTime::UNIX_EPOCH));
        assert_eq!(
            time_of(Some(&json!("1969-12-31T23:59:59Z"))),
            Some(DateTime::UNIX_EPOCH)
        );
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
