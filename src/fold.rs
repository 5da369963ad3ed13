//! One mailbox, one spelling: the fold that decides whether two addresses are the same
//! mailbox for the suppression list, and the listings an address takes there.
//!
//! **The fold** (`fold`, and the SQL `email_fold()` of
//! `migrations/20261207000015_one_spelling.sql`):
//! 1. Unicode NFC, so `a` + U+0308 and `ä` are one spelling;
//! 2. simple lower-casing, one character for one (UnicodeData's mapping: `İ` → `i`, `Σ` → `σ`
//!    wherever it stands, the Kelvin sign `K` → `k`, `ẞ` → `ß`): no NFKC and no full case
//!    folding (`ß` stays `ß`, not `ss`), which would join mailboxes a mail server may keep
//!    apart;
//! 3. NFC again (a lower-cased character may compose with its neighbour);
//! 4. no trailing dot: `carl@example.com.` is `carl@example.com` (a fully qualified domain is
//!    the same domain), so an opt-out is never refused, nor missed, for its spelling.
//!
//! **The SQL fold decides**: every listing is written through `email_fold()` and every row is
//! compared through it, so both sides of every comparison are the database's; this one
//! computes the forms an address is listed in ([`listings`]). The two agree on every character
//! the database's Unicode tables know (`tests/it/fold.rs`, over the hard characters and every
//! cased character of the BMP); a case pair newer than the database's tables (Unicode 16's and
//! 17's: 8 in the BMP against PostgreSQL 15's ICU) the database leaves as it is — on both sides
//! of its comparison, so a mailbox is still matched in that spelling, not across it.
//!
//! The `+tag` of a local part is kept: `ann+news@` and `ann@` are distinct mailboxes to us, as
//! to RFC 5321 (only the receiving server may join them, and many do not).
//!
//! **An internationalised domain is one mailbox in both forms** — `ann@bücher.de` and
//! `ann@xn--bcher-kva.de` — but SQL cannot compute UTS 46, so the claim's comparison
//! (`email_fold(row) = listing`) cannot join them; instead every listing of such an address
//! lists both ([`listings`], nontransitional UTS 46 by the `idna` crate), whichever spelling a
//! later campaign's row has. Unicode versions: Rust's tables and PostgreSQL's (ICU's on 15 and
//! 16, its own on 17 and later) may differ for characters added in the newest Unicode release;
//! the test covers every character in both.

use unicode_normalization::UnicodeNormalization as _;

/// The one spelling of `address` (see the module's steps). Idempotent: `fold(fold(a)) ==
/// fold(a)`.
pub fn fold(address: &str) -> String {
    let lowered: String = address.nfc().map(simple_lower).collect();
    let mut folded: String = lowered.nfc().collect();
    while folded.ends_with('.') {
        folded.pop();
    }
    folded
}

/// UnicodeData's simple lower-case mapping: one character for one. Rust's `to_lowercase` is
/// the full mapping, which differs from the simple one for one character only, `İ` (U+0130:
/// full `i` + U+0307, simple `i`), held by a test over every character; final sigma is a
/// rule of `str::to_lowercase` alone, so `char::to_lowercase` already gives `σ`.
fn simple_lower(c: char) -> char {
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(one), None) => one,
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// Every spelling a listing of `address` must hold: its fold and, when its domain is
/// internationalised (non-ASCII, or an `xn--` label), the fold with the domain in its other
/// form, then in the form UTS 46 maps it to. One entry for any other address, or for a domain
/// UTS 46 refuses.
pub fn listings(address: &str) -> Vec<String> {
    let primary = fold(address);
    let mut all = vec![primary.clone()];
    let Some((local, domain)) = primary.rsplit_once('@') else {
        return all;
    };
    if !internationalised(domain) {
        return all;
    }
    let Ok(ascii) = idna::domain_to_ascii(domain) else {
        return all;
    };
    let (unicode, errors) = idna::domain_to_unicode(&ascii);
    let mut forms = vec![ascii];
    if errors.is_ok() {
        forms.push(unicode);
    }
    for form in forms {
        let other = fold(&format!("{local}@{form}"));
        if !all.contains(&other) {
            all.push(other);
        }
    }
    all
}

/// A domain with a non-ASCII character or an A-label (`xn--`) anywhere.
fn internationalised(domain: &str) -> bool {
    !domain.is_ascii()
        || domain
            .split('.')
            .any(|label| label.len() >= 4 && label[..4].eq_ignore_ascii_case("xn--"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_mailbox_fold_to_one() {
        let one = |a: &str, b: &str| assert_eq!(fold(a), fold(b), "{a:?} vs {b:?}");
        one("änn@example.com", "a\u{308}nn@example.com");
        one("ÄNN@EXAMPLE.COM", "änn@example.com");
        one("carl@example.com.", "carl@example.com");
        one("İsmail@example.com", "ismail@example.com");
        one("ΟΔΟΣ@example.com", "οδοσ@example.com");
        one("\u{212a}im@example.com", "kim@example.com");
        one("ẞ@example.com", "ß@example.com");
        let apart = |a: &str, b: &str| assert_ne!(fold(a), fold(b), "{a:?} vs {b:?}");
        apart("ann+news@example.com", "ann@example.com");
        apart("straße@example.com", "strasse@example.com");
        apart("ı@example.com", "i@example.com");
        apart("ﬁ@example.com", "fi@example.com");
    }

    #[test]
    fn the_fold_is_idempotent() {
        for a in [
            "ÄNN@X.DE.",
            "a\u{308}\u{301}@x",
            "İΣ@x",
            "\u{1e9e}\u{212a}@x..",
        ] {
            assert_eq!(fold(&fold(a)), fold(a), "{a:?}");
        }
    }

    #[test]
    fn only_the_dotted_capital_i_lowers_to_more_than_one_character() {
        let multi: Vec<char> = (0..=0x10ffff)
            .filter_map(char::from_u32)
            .filter(|c| c.to_lowercase().count() > 1)
            .collect();
        assert_eq!(multi, ['\u{130}'], "simple_lower's one exception");
    }

    #[test]
    fn an_internationalised_domain_is_listed_in_both_forms() {
        assert_eq!(
            listings("Ann@Bücher.de"),
            ["ann@bücher.de", "ann@xn--bcher-kva.de"]
        );
        assert_eq!(
            listings("ann@XN--BCHER-KVA.DE."),
            ["ann@xn--bcher-kva.de", "ann@bücher.de"]
        );
        assert_eq!(listings("ann@example.com"), ["ann@example.com"]);
        // The local part is never touched, whatever it holds.
        assert_eq!(
            listings("Jörg@müller.de"),
            ["jörg@müller.de", "jörg@xn--mller-kva.de"]
        );
        // A domain UTS 46 refuses is listed as spelled.
        assert_eq!(listings("a@xn--zz.de"), ["a@xn--zz.de"]);
        assert_eq!(listings("no-at-sign"), ["no-at-sign"]);
    }
}
