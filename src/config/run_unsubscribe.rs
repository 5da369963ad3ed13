//! `RunConfig`'s one-click unsubscribe settings (`LIST_UNSUBSCRIBE` and what each mode needs):
//! a part of `src/config/run.rs` kept in a file of its own.

use super::RunConfig;
use crate::config::ConfigError;
use crate::provider::Kind;
use crate::unsubscribe::{Links, Mode, Signer};

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
        if let Some(m) = &self.unsubscribe_mailto {
            if !crate::shown::plausible_email(Some(m)) || m.contains(['<', '>', '?', ',']) {
                return Err(ConfigError::new(
                    "UNSUBSCRIBE_MAILTO",
                    "is not a plain address (the value is not shown)",
                ));
            }
        }
        Ok(Some(Links::new(
            url.as_str(),
            signer,
            self.unsubscribe_mailto.clone(),
        )))
    }
}
