//! `RunConfig`'s one-click unsubscribe settings (`LIST_UNSUBSCRIBE` and what each mode needs):
//! a part of `src/config/run.rs` kept in a file of its own.

use super::RunConfig;
use crate::config::ConfigError;
use crate::provider::Kind;
use crate::unsubscribe::{Inbound, Links, Mode, Signer};

impl RunConfig {
    /// `LIST_UNSUBSCRIBE` and what its mode needs: our links' settings for `ours`, a vendor
    /// that manages unsubscribes for `vendor` (and SES's contact list).
    pub(super) fn validate_unsubscribe(&self) -> Result<(), ConfigError> {
        match self.list_unsubscribe {
            Mode::Ours => self.links().map(|_| ()),
            Mode::None => Ok(()),
            Mode::Vendor => match self.mail_provider {
                Kind::Json | Kind::Resend => Err(ConfigError::new(
                    "LIST_UNSUBSCRIBE",
                    format!(
                        "is vendor, but MAIL_PROVIDER={} has no managed one-click unsubscribe; use ours",
                        self.mail_provider.as_str()
                    ),
                )),
                Kind::Ses if self.ses_contact_list.as_deref().is_none_or(str::is_empty) => {
                    Err(ConfigError::new(
                        "SES_CONTACT_LIST",
                        "is required with MAIL_PROVIDER=ses and LIST_UNSUBSCRIBE=vendor (SES list management's contact list)",
                    ))
                }
                _ => Ok(()),
            },
        }
    }

    /// Our one-click links (`LIST_UNSUBSCRIBE=ours`), from their settings; `None` in the other
    /// modes. A missing or unusable setting names its variable.
    pub fn links(&self) -> Result<Option<Links>, ConfigError> {
        if self.list_unsubscribe != Mode::Ours {
            return Ok(None);
        }
        let why = "is required with LIST_UNSUBSCRIBE=ours (the default); or set LIST_UNSUBSCRIBE=vendor, or none for mail that is not bulk marketing";
        let base = self
            .unsubscribe_base_url
            .as_deref()
            .ok_or_else(|| ConfigError::new("UNSUBSCRIBE_BASE_URL", why))?;
        let url = reqwest::Url::parse(base)
            .map_err(|e| ConfigError::new("UNSUBSCRIBE_BASE_URL", format!("is not a URL ({e})")))?;
        let loopback = matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
        if !(url.scheme() == "https" || url.scheme() == "http" && loopback)
            || url.query().is_some()
            || url.fragment().is_some()
            || !url.username().is_empty()
        {
            return Err(ConfigError::new(
                "UNSUBSCRIBE_BASE_URL",
                "must be an https:// origin (and path prefix) where `events` is reached, without query or credentials (RFC 8058 needs HTTPS)",
            ));
        }
        let secret = self
            .unsubscribe_secret
            .as_ref()
            .ok_or_else(|| ConfigError::new("UNSUBSCRIBE_SECRET", why))?;
        let signer =
            Signer::new(secret.expose()).map_err(|p| ConfigError::new("UNSUBSCRIBE_SECRET", p))?;
        self.mailto_inbound()?;
        if let Some(m) = &self.unsubscribe_mailto {
            mailto_problem(m).map_or(Ok(()), |p| Err(ConfigError::new("UNSUBSCRIBE_MAILTO", p)))?;
        }
        let links = Links::new(url.as_str(), signer, self.unsubscribe_mailto.clone());
        self.header_fits(&links)?;
        Ok(Some(links))
    }

    /// The vendor that delivers `UNSUBSCRIBE_MAILTO`'s mailbox to `events`: a mailto needs one
    /// (else its unsubscribes would be lost: 78 before any mail), and one without a mailto is
    /// a mistake too.
    pub fn mailto_inbound(&self) -> Result<Option<Inbound>, ConfigError> {
        let inbound = self
            .unsubscribe_mailto_inbound
            .as_deref()
            .filter(|s| !s.trim().is_empty());
        match (self.unsubscribe_mailto.as_deref(), inbound) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(ConfigError::new(
                "UNSUBSCRIBE_MAILTO",
                "is set, but nothing reads that mailbox: set UNSUBSCRIBE_MAILTO_INBOUND to the vendor whose inbound route delivers it to `events` (postmark, mailgun, sendgrid or ses; docs/OPERATIONS.md \"The mailto\"), or unset UNSUBSCRIBE_MAILTO (the HTTPS link is what Gmail and Yahoo require)",
            )),
            (None, Some(_)) => Err(ConfigError::new(
                "UNSUBSCRIBE_MAILTO_INBOUND",
                "is set without UNSUBSCRIBE_MAILTO: set the mailbox too, or unset this",
            )),
            (Some(_), Some(v)) => Inbound::parse(v)
                .map(Some)
                .map_err(|p| ConfigError::new("UNSUBSCRIBE_MAILTO_INBOUND", p)),
        }
    }

    /// Every mail's `Feedback-ID` value with `FEEDBACK_ID` set: `{campaign_id}:{vendor}:bulk:
    /// {FEEDBACK_ID}` — Gmail's `a:b:c:SenderId`, its three identifiers the campaign (Postmaster
    /// Tools' spam rate per campaign), the vendor profile (per sending account) and the mail's
    /// kind; no address and no member id, which Gmail neither needs nor should see. A campaign
    /// id's alphabet has no `:` ([`crate::campaign_id`]). A SenderId that is not 5 to 15 of
    /// `A-Z a-z 0-9 . _ -` names `FEEDBACK_ID` (78), never showing the value.
    pub fn feedback_header(&self) -> Result<Option<String>, ConfigError> {
        let Some(id) = self.feedback_id.as_deref() else {
            return Ok(None);
        };
        let alphabet = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if !(5..=15).contains(&id.len()) || !id.chars().all(alphabet) {
            return Err(ConfigError::new(
                "FEEDBACK_ID",
                "must be Gmail's SenderId: 5 to 15 of A-Z a-z 0-9 . _ - (the value is not shown)",
            ));
        }
        Ok(Some(format!(
            "{}:{}:bulk:{id}",
            self.campaign_id,
            self.mail_provider.as_str()
        )))
    }

    /// The longest `List-Unsubscribe` the ids allow — a campaign id of
    /// [`crate::campaign_id::MAX_LEN`] characters, the longest member id — is printable ASCII
    /// and within the vendor's limit ([`Kind::header_value_limit`]), so no mail is refused for
    /// it after the first has gone.
    fn header_fits(&self, links: &Links) -> Result<(), ConfigError> {
        let longest = "c".repeat(crate::campaign_id::MAX_LEN);
        let header = links.for_member(&longest, i64::MIN).header;
        if !header.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            return Err(ConfigError::new(
                "UNSUBSCRIBE_BASE_URL",
                "makes a List-Unsubscribe that is not printable ASCII",
            ));
        }
        match self.mail_provider.header_value_limit() {
            Some(limit) if header.len() > limit => Err(ConfigError::new(
                "UNSUBSCRIBE_BASE_URL",
                format!(
                    "makes a List-Unsubscribe of up to {} characters with the longest ids; MAIL_PROVIDER={} takes {limit} at most: shorten UNSUBSCRIBE_BASE_URL (or UNSUBSCRIBE_MAILTO)",
                    header.len(),
                    self.mail_provider.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// What is wrong with `UNSUBSCRIBE_MAILTO` for a `mailto:` URI (RFC 6068: an `addr-spec`
/// whose local part is a dot-atom; ASCII, since a header carries it as it is), if anything.
/// The problem never quotes the address.
fn mailto_problem(m: &str) -> Option<&'static str> {
    if !m.is_ascii() {
        return Some("is not ASCII: a mailto in a header must be, so give the domain as its A-label (xn--…) and an ASCII mailbox (the value is not shown)");
    }
    let domain_ok = m.rsplit_once('@').is_some_and(|(_, d)| {
        d.split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    });
    if !crate::shown::plausible_email(Some(m)) || !domain_ok || m.contains(['?', '%', '/']) {
        return Some("is not a plain address for a mailto: URI (a dot-atom mailbox at a host name; the value is not shown)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::mailto_problem;

    #[test]
    fn a_mailto_is_a_plain_ascii_address() {
        assert_eq!(mailto_problem("unsubscribe@example.com"), None);
        assert_eq!(mailto_problem("unsub+list@mail.example.com"), None);
        for bad in [
            "ünsub@exämple.de",
            "a\"b;c@example.com",
            "a@exa_mple.com",
            "a?subject=x@example.com",
            "a@example.com?cc=x",
            "a%20b@example.com",
            "no-at-sign",
        ] {
            assert!(mailto_problem(bad).is_some(), "{bad:?}");
        }
    }
}
