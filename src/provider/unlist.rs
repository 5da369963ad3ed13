//! `suppress --lift-at-vendor`: an address taken off the vendor's own suppression list, where
//! the vendor has an API for it. Each vendor lists an address after any hard bounce — ours
//! included: SES's account suppression list has no subtype for a policy refusal, SendGrid lists
//! every `bounce`, Postmark deactivates on a hard bounce, Mailgun lists every permanent failure
//! — so a member Gmail refused for *our* domain's fault would be dropped by the vendor in every
//! later campaign. The request is each profile's [`super::Profile::unlist`] (pure, like a
//! send's), its answer read by [`super::Profile::unlisted`] into a
//! [`super::profile::Unlisted`], by the vendors' shared table (`answer::unlisted`) unless the
//! vendor's own says more:
//!
//! | vendor | request | lifted | not listed | source |
//! |---|---|---|---|---|
//! | SES v2 | `DELETE /v2/email/suppression/addresses/{address}`, SigV4 | 200 | 404 `NotFoundException` | API reference, `DeleteSuppressedDestination` |
//! | SendGrid | `DELETE /v3/suppression/bounces/{email}`, Bearer | 204 | 404 | API reference, "Delete a bounce" |
//! | Postmark | `POST /message-streams/{stream}/suppressions/delete` `{"Suppressions": [{"EmailAddress"}]}` | 200, `Status` `Deleted` | — | Suppressions API: deleting a `HardBounce` suppression reactivates its bounce; a `SpamComplaint` one cannot be deleted (`Failed`) |
//! | Mailgun | `DELETE /v3/{domain}/bounces/{address}`, basic `api` | 200 | 404 | API reference, "Remove bounce" |
//! | Resend | `DELETE /suppressions/{email}`, Bearer | 200 | — (a 404 may also mean no access: private beta) | API reference, "Remove Suppression" |
//! | ours (`json`) | none | | | |
//!
//! Shared by all: 429 waits (`Retry-After`), 401/403 stop (the key may not), 5xx and a
//! connection that fails are tried again later; any other answer leaves that address listed.
//! The address goes in the path as one percent-encoded segment ([`segment`]); it is never
//! logged. docs/VENDORS.md keeps the sources.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// RFC 3986's unreserved characters stay; everything else of an address (`@`, `+`, `/`, `%`,
/// non-ASCII) is percent-encoded, so the address is exactly one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `email` as one path segment.
pub fn segment(email: &str) -> String {
    utf8_percent_encode(email, SEGMENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_exactly_one_path_segment() {
        assert_eq!(segment("ann.lee@example.com"), "ann.lee%40example.com");
        assert_eq!(segment("a+b/c%d@x.y"), "a%2Bb%2Fc%25d%40x.y");
        assert_eq!(segment("ü@bücher.de"), "%C3%BC%40b%C3%BCcher.de");
        assert_eq!(segment("A-z_0~9@x"), "A-z_0~9%40x");
    }
}
