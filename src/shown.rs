//! How text from outside — a file's value, a name someone typed, a vendor's reason — may be
//! shown in an error line or on the status page: never one that may be an address (personal
//! data), control characters escaped, cut to a bound.

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
