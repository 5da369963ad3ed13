//! Whose fault is a refusal: the one table that reads a bounce's codes and words as the
//! recipient's (no such mailbox or domain, disabled, full), the sender's (our domain's
//! authentication, its reputation or a block list, policy or content, TLS, our rate) or
//! unknown — so that only the recipient's causes suppress an address, and a refusal of our own
//! domain pauses the campaign instead (`docs/OPERATIONS.md` "Whose fault is a refusal").
//!
//! **How a refusal is read**, first match wins:
//! 1. [`ROWS`]: the mailbox provider's own code, and where it reuses one code for several
//!    causes its own words, per provider family ([`Family`]; Gmail, Outlook.com, Yahoo, Apple)
//!    or for all — each row with its source (`docs/VENDORS.md`, "Whose fault is a refusal":
//!    Google's, Microsoft's, Yahoo's and Apple's tables as sisimai keeps them, and RFC 3463);
//! 2. the vendor's own classification ([`Hint`]): SendGrid's `bounce_classification` (matched
//!    without case, by prefix: its spellings differ), Postmark's `Type`, Mailgun's `reason`;
//! 3. else **unknown**. RFC 3463 puts `X.7.X` under "either or both" parties, so an `x.7.x`
//!    code with no row of its provider is unknown, never the sender's by guess: the sender's
//!    fault must be shown by the answer.
//!
//! The enhanced code (`5.7.26`) is taken from the vendor's status field, else from the
//! server's text (`smtp; 550-5.7.26 …`). What is kept with the stored event is the cause, the
//! code and the family — never the server's text, which can hold an address.

use crate::store::event::What;
pub use crate::store::event::{Cause, Family, Refusal, Whose};

/// What a vendor says of a refusal besides the server's code and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Hint<'a> {
    #[default]
    None,
    /// SendGrid's `bounce_classification`.
    SendGrid(&'a str),
    /// Postmark's bounce `Type`.
    Postmark(&'a str),
    /// Mailgun's `reason`.
    Mailgun(&'a str),
    /// SES's (and Resend's) `bounceSubType`.
    Ses(&'a str),
}

/// One row of the table: a provider family (`None`: any), the enhanced code (empty: any;
/// `5.7.6` stands for Microsoft's 5.7.606–649), words the text must hold (lower case; empty:
/// none), the cause, and where the row comes from.
type Row = (
    Option<Family>,
    &'static str,
    &'static str,
    Cause,
    &'static str,
);

use Cause::*;
use Family::{Apple, Google, Microsoft, Yahoo};

/// The table (see the module docs). Provider rows first: a code a provider gives a meaning of
/// its own is read so before the general class.
#[rustfmt::skip]
pub const ROWS: &[Row] = &[
    (Some(Google), "5.7.26", "", Authentication, "Gmail: unauthenticated (DMARC, or neither SPF nor DKIM)"),
    (Some(Google), "4.7.26", "", Authentication, "Gmail: unauthenticated, deferred"),
    (Some(Google), "5.7.27", "", Authentication, "Gmail: SPF did not pass"),
    (Some(Google), "4.7.27", "", Authentication, "Gmail: SPF did not pass, deferred"),
    (Some(Google), "5.7.25", "", Authentication, "Gmail: the sending IP has no PTR record"),
    (Some(Google), "4.7.23", "", Authentication, "Gmail: the sending IP has no PTR record, deferred"),
    (Some(Google), "5.7.28", "", Reputation, "Gmail: an unusual rate of unsolicited mail, blocked"),
    (Some(Google), "4.7.28", "", Rate, "Gmail: an unusual rate of unsolicited mail, rate limited"),
    (Some(Google), "4.7.29", "", Tls, "Gmail: TLS not used"),
    (Some(Google), "5.7.29", "", Tls, "Gmail: TLS not used"),
    (Some(Google), "5.7.30", "", Authentication, "Gmail: DKIM did not pass (third-party tables)"),
    (Some(Google), "4.7.30", "", Authentication, "Gmail: DKIM did not pass (third-party tables)"),
    (Some(Google), "5.7.32", "", Authentication, "Gmail: From not aligned (third-party tables)"),
    (Some(Google), "4.7.32", "", Authentication, "Gmail: From not aligned (third-party tables)"),
    (Some(Google), "5.7.40", "", Authentication, "Gmail: no usable DMARC record (third-party tables)"),
    (Some(Google), "4.7.40", "", Authentication, "Gmail: no usable DMARC record (third-party tables)"),
    (Some(Google), "5.7.1", "", Reputation, "Gmail: likely unsolicited, very low reputation"),
    (Some(Microsoft), "5.7.515", "", Authentication, "Outlook.com: the domain is not authenticated enough"),
    (Some(Microsoft), "5.7.509", "", Authentication, "Outlook.com: fails DMARC"),
    (Some(Microsoft), "5.7.511", "", Reputation, "Outlook.com: banned sender"),
    (Some(Microsoft), "5.7.6", "", Reputation, "Outlook.com: 5.7.606-649, banned sending IP"),
    (Some(Microsoft), "5.7.1", "s3150", Reputation, "Outlook.com: the sending network is on a block list"),
    (Some(Microsoft), "5.7.1", "s3140", Reputation, "Outlook.com: the sending network is on a block list"),
    (Some(Microsoft), "5.7.1", "block list", Reputation, "Outlook.com: a block list"),
    (Some(Microsoft), "4.7.650", "", Rate, "Outlook.com: rate limited for IP reputation"),
    (Some(Microsoft), "5.1.10", "", NoMailbox, "Outlook.com: RecipientNotFound (third-party tables)"),
    (Some(Yahoo), "4.7.0", "tss04", Rate, "Yahoo: deferred, unexpected volume or complaints"),
    (Some(Yahoo), "5.7.9", "", Authentication, "Yahoo: senders must authenticate"),
    (Some(Yahoo), "5.7.1", "bl21", Reputation, "Yahoo: block list"),
    (Some(Yahoo), "5.7.1", "bl23", Reputation, "Yahoo: block list"),
    (Some(Yahoo), "5.7.2", "tss09", Reputation, "Yahoo: permanently deferred"),
    (Some(Yahoo), "5.7.2", "tss11", Reputation, "Yahoo: permanently deferred"),
    (Some(Yahoo), "", "doesn't have a yahoo.com account", NoMailbox, "Yahoo: no such account"),
    (Some(Yahoo), "", "mailbox is disabled", Disabled, "Yahoo: the mailbox is disabled"),
    (Some(Apple), "5.7.1", "hme1", Authentication, "Apple: SPF and DKIM fail"),
    (Some(Apple), "5.7.1", "dmarc", Authentication, "Apple: DMARC"),
    (Some(Apple), "5.7.1", "cs01", Policy, "Apple: local policy"),
    (Some(Apple), "4.7.1", "", Rate, "Apple: excessive volume"),
    (Some(Apple), "5.1.1", "", Disabled, "Apple: inactive"),
    (Some(Apple), "5.1.6", "", NoMailbox, "Apple: no longer on the server"),
    (None, "5.1.1", "", NoMailbox, "RFC 3463: bad destination mailbox address"),
    (None, "5.1.10", "", NoMailbox, "RFC 3463 (RFC 7505): recipient address has null MX"),
    (None, "5.1.6", "", NoMailbox, "RFC 3463: destination mailbox has moved"),
    (None, "5.1.3", "", NoMailbox, "RFC 3463: bad destination mailbox address syntax"),
    (None, "5.1.2", "", NoDomain, "RFC 3463: bad destination system address"),
    (None, "4.2.2", "", MailboxFull, "RFC 3463: mailbox full"),
    (None, "5.2.2", "", MailboxFull, "RFC 3463: mailbox full"),
    (None, "4.2.1", "", Disabled, "RFC 3463: mailbox disabled, not accepting messages"),
    (None, "5.2.1", "", Disabled, "RFC 3463: mailbox disabled, not accepting messages"),
];

/// The kind of a permanent refusal: the sender's cause is [`What::Refused`] (it suppresses
/// nobody and counts in no bounce line), the recipient's or an unknown one [`What::HardBounce`].
pub fn permanent(r: &Refusal) -> What {
    if r.cause.whose() == Whose::Sender {
        What::Refused
    } else {
        What::HardBounce
    }
}

/// Reads one refusal of `address` (see the module docs): `status` is the vendor's field with
/// the enhanced code, `text` the server's words (read, never kept).
pub fn read(
    address: Option<&str>,
    status: Option<&str>,
    text: Option<&str>,
    hint: Hint,
) -> Refusal {
    let family = address.map_or(Family::Other, Family::of);
    // The vendor's field, unless it is only the class (`5.0.0`, SES's usual) and the server's
    // words say more.
    let given = status.and_then(enhanced_code);
    let said = text.and_then(enhanced_code);
    let code = match (given, said) {
        (Some(g), Some(s)) if g.ends_with(".0.0") => Some(s),
        (g, s) => g.or(s),
    };
    let words = text.unwrap_or_default().to_lowercase();
    let by_row = ROWS.iter().find(|(f, prefix, needle, _, _)| {
        f.is_none_or(|f| f == family)
            && (prefix.is_empty() || code.as_deref().is_some_and(|c| matches_code(c, prefix)))
            && (needle.is_empty() || words.contains(needle))
    });
    let cause = by_row
        .map(|row| row.3)
        .or_else(|| by_hint(hint))
        .unwrap_or(Cause::Unknown);
    Refusal {
        cause,
        code,
        family,
    }
}

/// A row's code matches `code` exactly, or as its prefix when the row's code is shorter and
/// `code` continues it digit by digit (`5.7.6` matches `5.7.606`, never `5.7.1` `5.7.16`).
fn matches_code(code: &str, prefix: &str) -> bool {
    code == prefix
        || prefix == "5.7.6" && code.starts_with("5.7.6") && code.len() == "5.7.606".len()
}

/// The vendor's own word, when no row decided.
fn by_hint(hint: Hint) -> Option<Cause> {
    let starts = |s: &str, p: &str| s.trim().to_ascii_lowercase().starts_with(p);
    match hint {
        Hint::None => None,
        Hint::SendGrid(c) if starts(c, "invalid") => Some(NoMailbox),
        Hint::SendGrid(c) if starts(c, "mailbox unavailable") => Some(Disabled),
        Hint::SendGrid(c) if starts(c, "reputation") => Some(Reputation),
        Hint::SendGrid(c) if starts(c, "content") => Some(Policy),
        Hint::SendGrid(c) if starts(c, "frequency") => Some(Rate),
        Hint::SendGrid(_) => None, // Technical, Unclassified: either party
        Hint::Postmark("DMARCPolicy") => Some(Authentication),
        Hint::Postmark("Blocked") => Some(Reputation),
        Hint::Postmark("BadEmailAddress") => Some(NoMailbox),
        Hint::Postmark(_) => None,
        Hint::Mailgun("espblock" | "blacklisted") => Some(Reputation),
        Hint::Mailgun(_) => None,
        Hint::Ses("NoEmail") => Some(NoMailbox),
        Hint::Ses("MailboxFull") => Some(MailboxFull),
        Hint::Ses("ContentRejected" | "AttachmentRejected") => Some(Policy),
        Hint::Ses(_) => None,
    }
}

/// The first RFC 3463 enhanced code in `text` (`class.subject.detail`, class 2, 4 or 5).
fn enhanced_code(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    (0..bytes.len()).find_map(|i| {
        let before_ok = i == 0 || !(bytes[i - 1].is_ascii_digit() || bytes[i - 1] == b'.');
        if !before_ok || !matches!(bytes[i], b'2' | b'4' | b'5') {
            return None;
        }
        let rest = &text[i..];
        let mut parts = rest.splitn(3, '.');
        let class = parts.next()?;
        let subject = parts.next()?;
        let tail = parts.next()?;
        let detail: String = tail.chars().take_while(char::is_ascii_digit).collect();
        let after = tail[detail.len()..].chars().next();
        let ok = class.len() == 1
            && (1..=3).contains(&subject.len())
            && subject.bytes().all(|b| b.is_ascii_digit())
            && (1..=3).contains(&detail.len())
            && !after.is_some_and(|c| c.is_ascii_digit() || c == '.');
        ok.then(|| format!("{class}.{subject}.{detail}"))
    })
}
