//! The one alphabet of campaign ids: `[A-Za-z0-9_-]`, 1 to [`MAX_LEN`] characters.
//!
//! A campaign id travels further than any other text we hold: in the `Idempotency-Key` header
//! (`{campaign_id}:{member_id}`), in every vendor's metadata (SES and Resend tags allow only
//! `[A-Za-z0-9_-]`, docs/VENDORS.md "The mailbox providers' rules"), as a Prometheus label and
//! in log lines. An id outside this alphabet fails somewhere on the way — a control character cannot be a header,
//! a non-ASCII one is refused by the vendor for every row — so it is refused where it is made
//! (`import`, `configure --create`: exit 65) and where it is sent (`CAMPAIGN_ID` at worker start:
//! exit 78), naming the first character that cannot travel, before any row is claimed.
//!
//! Campaigns made before this rule (or written into the table by another system) stay readable
//! by `status`, `pause`, `archive`…; they cannot be sent until re-imported under a valid id.

/// The longest campaign id: far below the tags' 256, short enough for a label and a log line.
pub const MAX_LEN: usize = 128;

/// Why `id` cannot be a campaign id, or `None` if it can. Never quotes more than the one
/// offending character (escaped), so the message is safe for a terminal and a log.
pub fn problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("must not be empty".into());
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Some(format!(
            "holds {}, which a campaign id cannot carry: only A-Z a-z 0-9 _ - travel in every \
             vendor's metadata and the idempotency key",
            crate::shown::shown_char(c)
        ));
    }
    if id.len() > MAX_LEN {
        return Some(format!(
            "is {} characters long; at most {MAX_LEN}",
            id.len()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_is_letters_digits_underscore_and_dash() {
        assert_eq!(problem("Spring_sale-2026"), None);
        assert_eq!(problem(&"a".repeat(MAX_LEN)), None);
        for bad in ["a b", "a:b", "a.b", "a\nb", "é", "a/b", "a\u{1b}[31m"] {
            assert!(problem(bad).is_some(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn the_refusal_names_the_character_escaped() {
        assert!(problem("a\nb").unwrap().contains(r"'\n' (U+000A)"));
        assert!(problem("a:b").unwrap().contains("':' (U+003A)"));
        assert!(problem("café").unwrap().contains("'é' (U+00E9)"));
        assert!(problem("").unwrap().contains("empty"));
    }

    #[test]
    fn an_id_longer_than_the_bound_is_refused() {
        assert!(problem(&"a".repeat(MAX_LEN + 1))
            .unwrap()
            .contains("at most 128"));
    }
}
