//! The campaign's sender and reply-to (`configure --from`, `--reply-to`): exactly one RFC 5322
//! mailbox, parsed by `mailparse` (a list, a group or a second address is refused: a `From`
//! with several senders is spoofing's oldest trick, and every vendor passes it on as given),
//! and written back in one canonical form that every vendor reads the same way.
//!
//! The display name is kept exactly: [`Mailbox::header`] quotes it when RFC 5322 needs it,
//! escaping `"` and `\`, and [`Mailbox::parse`] of that form gives the same name back.

use mailparse::{addrparse, MailAddr};

/// One mailbox: an optional display name and an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mailbox {
    pub name: Option<String>,
    pub addr: String,
}

/// The longest `--from` / `--reply-to` taken (an address is at most 254; a name takes the rest).
pub const MAX_CHARS: usize = 320;

impl Mailbox {
    /// `addr` or `Name <addr>` (the name quoted where it needs to be): exactly one mailbox with a
    /// plausible address, no control characters. The problem never quotes the value (it is an
    /// address).
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        if value.chars().count() > MAX_CHARS {
            return Err("is longer than 320 characters");
        }
        if value.chars().any(char::is_control) {
            return Err("holds a control character (a line break, a tab)");
        }
        let list = addrparse(value).map_err(|_| "is not an RFC 5322 mailbox")?;
        let single = match list.as_slice() {
            [MailAddr::Single(one)] => one,
            [MailAddr::Group(_)] => return Err("is a group; give one mailbox"),
            [] => return Err("is empty"),
            _ => return Err("names several mailboxes; give exactly one"),
        };
        if !crate::shown::plausible_email(Some(&single.addr)) {
            return Err("has no plausible address (`addr` or `Name <addr>`)");
        }
        Ok(Self {
            name: single.display_name.clone().filter(|n| !n.is_empty()),
            addr: single.addr.clone(),
        })
    }

    /// The mailbox as a header value: `addr`, `Name <addr>`, or `"Name, Inc." <addr>` when the
    /// name holds anything but atoms and spaces.
    pub fn header(&self) -> String {
        match &self.name {
            None => self.addr.clone(),
            Some(n) if n.chars().all(is_phrase_char) => format!("{n} <{}>", self.addr),
            Some(n) => {
                let quoted: String = n
                    .chars()
                    .flat_map(|c| match c {
                        '"' | '\\' => vec!['\\', c],
                        c => vec![c],
                    })
                    .collect();
                format!("\"{quoted}\" <{}>", self.addr)
            }
        }
    }
}

/// A character that may stand unquoted in a display name (RFC 5322 `atext` and a space).
fn is_phrase_char(c: char) -> bool {
    c.is_alphanumeric() || c == ' ' || "!#$%&'*+-/=?^_`{|}~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mailbox_is_taken_and_written_back_the_same() {
        for (given, name, addr) in [
            ("news@example.com", None, "news@example.com"),
            ("News <news@example.com>", Some("News"), "news@example.com"),
            (
                r#""Ann \"Q\"" <reply@example.com>"#,
                Some(r#"Ann "Q""#),
                "reply@example.com",
            ),
            (
                r#""Shop, Inc." <shop@example.com>"#,
                Some("Shop, Inc."),
                "shop@example.com",
            ),
        ] {
            let m = Mailbox::parse(given).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!(
                (m.name.as_deref(), m.addr.as_str()),
                (name, addr),
                "{given}"
            );
            assert_eq!(Mailbox::parse(&m.header()).unwrap(), m, "{given}");
        }
    }

    #[test]
    fn several_senders_a_group_or_no_address_are_refused_without_the_value() {
        for bad in [
            "evil@attacker.com, News <news@example.com>",
            "a@x.com,b@y.com",
            "undisclosed:a@x.com,b@y.com;",
            "undisclosed:a@x.com,b@y.com;<c@z.com>",
            "News <not-an-address>",
            "a@b.c\r\nBcc: x@y.z",
            "nobody",
            "",
        ] {
            let problem = Mailbox::parse(bad).expect_err(bad);
            assert!(!problem.contains('@'), "{bad}: {problem}");
        }
    }
}
