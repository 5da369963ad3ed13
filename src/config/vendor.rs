//! The provider side of [`RunConfig`]: `MAIL_URL` or the vendor's endpoint, the idempotency
//! window the vendor allows, SES's credentials, and [`RunConfig::provider`], which checks the
//! chosen vendor's settings and builds the client from them once. The profiles themselves are
//! [`crate::provider`]'s and read no environment; this is what the environment says of them.

use std::sync::Arc;
use std::time::Duration;

use super::run::defaults;
use super::{ConfigError, RunConfig};
use crate::provider::aws::{AwsKeys, Source, WebIdentity};
use crate::provider::{self, host_of, Kind, Profile, Provider};

impl RunConfig {
    /// The provider client this configuration asks for, its vendor's settings checked: a
    /// missing or wrong one is a [`ConfigError`] naming the variable (exit 78). Called once, at
    /// the start of `run` and `serve`, before the database is touched.
    pub fn provider(&self) -> Result<Provider, ConfigError> {
        let settings = provider::Settings {
            profile: self.profile()?,
            base: self.mail_base()?,
            roots: self.mail_roots()?,
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            read_timeout: Duration::from_millis(self.read_timeout_ms),
            concurrency: self.send_concurrency as usize,
            worker: self.worker_name(),
            campaign_id: self.campaign_id.clone(),
            links: self.links()?,
            feedback_id: self.feedback_header()?,
        };
        Provider::new(settings)
            .map_err(|e| ConfigError::new("MAIL_URL", format!("no HTTP client for it: {e}")))
    }

    /// The vendor's settings as `run` reads them from `vars`, for an operator command that
    /// calls the vendor but sends no mail (`suppress --lift-at-vendor`): `CAMPAIGN_ID` is the
    /// campaign named on the command line, and what only a mail carries — our one-click links
    /// (`LIST_UNSUBSCRIBE`, `UNSUBSCRIBE_*`) and `FEEDBACK_ID` — is not read.
    pub fn for_vendor_calls(
        campaign: &str,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mail_only = |k: &str| {
            matches!(k, "CAMPAIGN_ID" | "LIST_UNSUBSCRIBE" | "FEEDBACK_ID")
                || k.starts_with("UNSUBSCRIBE_")
        };
        let kept = vars.into_iter().filter(|(k, _)| !mail_only(k));
        let ours = [
            ("CAMPAIGN_ID".to_string(), campaign.to_string()),
            ("LIST_UNSUBSCRIBE".to_string(), "none".to_string()),
        ];
        <Self as super::FromEnv>::from_vars(kept.chain(ours))
    }

    /// The CA certificates of `MAIL_CA_FILE` (none when unset), read and parsed: a file that
    /// cannot be read or holds no certificate is a configuration error, checked at start.
    pub fn mail_roots(&self) -> Result<Vec<reqwest::Certificate>, ConfigError> {
        let Some(path) = &self.mail_ca_file else {
            return Ok(Vec::new());
        };
        let bad = |why: String| ConfigError::new("MAIL_CA_FILE", format!("{why} ({path})"));
        let pem = std::fs::read(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| bad(format!("is not a PEM file of certificates: {e}")))?;
        if roots.is_empty() {
            return Err(bad("holds no PEM certificate".into()));
        }
        Ok(roots)
    }

    /// The profile of `MAIL_PROVIDER`, with the settings it needs.
    fn profile(&self) -> Result<Arc<dyn Profile>, ConfigError> {
        let key = |what: &str| {
            self.mail_api_key.clone().ok_or_else(|| {
                ConfigError::new(
                    "MAIL_API_KEY",
                    format!(
                        "is required with MAIL_PROVIDER={} ({what})",
                        self.mail_provider.as_str()
                    ),
                )
            })
        };
        // `LIST_UNSUBSCRIBE=vendor`: what turns the vendor's own on is in its request (SES,
        // SendGrid) or in its account (Mailgun's unsubscribe tracking, a Postmark broadcast stream).
        let vendor_managed = self.list_unsubscribe == crate::unsubscribe::Mode::Vendor;
        Ok(match self.mail_provider {
            Kind::Json => Arc::new(provider::json::Json {
                api_key: self.mail_api_key.clone(),
                refusals: self.refusals()?,
            }),
            Kind::Sendgrid => Arc::new(provider::sendgrid::SendGrid {
                api_key: key("the API key, sent as Bearer")?,
                subscription_tracking: vendor_managed,
            }),
            Kind::Postmark => Arc::new(provider::postmark::Postmark {
                server_token: key("the server token")?,
                message_stream: self.postmark_message_stream.clone(),
            }),
            Kind::Mailgun => Arc::new(provider::mailgun::Mailgun {
                api_key: key("the sending API key")?,
                domain: self.mailgun_domain.clone().ok_or_else(|| {
                    ConfigError::new("MAILGUN_DOMAIN", "is required with MAIL_PROVIDER=mailgun (the sending domain, e.g. mg.example.com)")
                })?,
            }),
            Kind::Resend => Arc::new(provider::resend::Resend {
                api_key: key("the API key, sent as Bearer")?,
            }),
            Kind::Ses => Arc::new(provider::ses::Ses {
                region: self.aws_region.clone().ok_or_else(|| {
                    ConfigError::new("AWS_REGION", "is required with MAIL_PROVIDER=ses (e.g. eu-west-1)")
                })?,
                host: host_of(&self.mail_base()?),
                credentials: Arc::new(self.aws_credentials()?),
                configuration_set: self.ses_configuration_set.clone(),
                list_management: vendor_managed
                    .then(|| self.ses_contact_list.clone())
                    .flatten()
                    .map(|contact_list_name| provider::ses::ListManagement {
                        contact_list_name,
                        topic_name: self.ses_contact_topic.clone(),
                    }),
            }),
        })
    }

    /// `IDEMPOTENCY_WINDOW_S` fits the vendor: only one with keys has a window, longer than
    /// the safety margin (and Resend's at most its 24 h retention).
    pub(super) fn validate_idempotency_window(&self) -> Result<(), ConfigError> {
        let kind = self.mail_provider;
        match (kind.idempotent(), self.idempotency_window_s) {
            (false, Some(_)) => Err(ConfigError::new(
                "IDEMPOTENCY_WINDOW_S",
                format!("must not be set with MAIL_PROVIDER={}: the vendor has no idempotency key, so an attempt with an unknown outcome is never sent again (its row becomes unconfirmed)", kind.as_str()),
            )),
            (true, Some(w)) if kind == Kind::Resend && w > 86_400 => Err(ConfigError::new(
                "IDEMPOTENCY_WINDOW_S",
                "must be at most 86400 with MAIL_PROVIDER=resend (Resend keeps a key for 24 h)",
            )),
            (true, _) if self.idempotency_window() <= self.idempotency_margin() => Err(ConfigError::new(
                "IDEMPOTENCY_WINDOW_S",
                "must exceed CONNECT_TIMEOUT_MS + READ_TIMEOUT_MS + OPTOUT_RECHECK_MS + 1 s (the safety margin); set it to the provider's key retention",
            )),
            _ => Ok(()),
        }
    }

    /// How long the vendor suppresses a repeated key: `IDEMPOTENCY_WINDOW_S` (default 24 h)
    /// for a vendor with keys, zero for one without.
    pub fn idempotency_window(&self) -> Duration {
        if !self.mail_provider.idempotent() {
            return Duration::ZERO;
        }
        Duration::from_secs(
            self.idempotency_window_s
                .unwrap_or_else(defaults::idempotency_window_s),
        )
    }

    /// The base URL requests go to: `MAIL_URL` (checked: for `json` the whole URL; for a
    /// vendor a base URL without a path), else — unset or empty, as a vendor's component of the
    /// manifests sets it over the base's — the vendor's public endpoint.
    pub fn mail_base(&self) -> Result<reqwest::Url, ConfigError> {
        let kind = self.mail_provider;
        let set = self.mail_url.clone().filter(|u| !u.trim().is_empty());
        let url = match (set, kind.default_base(self.aws_region.as_deref())) {
            (Some(u), _) => u,
            (None, Some(base)) => base,
            (None, None) if kind == Kind::Ses => {
                return Err(ConfigError::new(
                    "AWS_REGION",
                    "is required with MAIL_PROVIDER=ses (e.g. eu-west-1)",
                ))
            }
            (None, None) => {
                return Err(ConfigError::new(
                    "MAIL_URL",
                    "is required but not set (with MAIL_PROVIDER=json: the whole endpoint URL)",
                ))
            }
        };
        let parsed = check_mail_url(&url)?;
        if kind != Kind::Json && !matches!(parsed.path(), "" | "/") {
            return Err(ConfigError::new(
                "MAIL_URL",
                format!(
                    "must be a base URL scheme://host[:port] with MAIL_PROVIDER={}: the profile appends its own path (got '{}')",
                    kind.as_str(),
                    masked_url(&url)
                ),
            ));
        }
        Ok(parsed)
    }

    /// The SigV4 credentials (`ses`), as the standard AWS chain finds them: `AWS_ACCESS_KEY_ID`
    /// and `AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN` for temporary ones) first, else web
    /// identity (`AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE`).
    pub fn aws_credentials(&self) -> Result<Source, ConfigError> {
        let set = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let secret = self
            .aws_secret_access_key
            .clone()
            .filter(|k| !k.expose().trim().is_empty());
        match (set(&self.aws_access_key_id), secret) {
            (Some(access_key_id), Some(secret_access_key)) => {
                return Ok(Source::Static(AwsKeys {
                    access_key_id,
                    secret_access_key,
                    session_token: self.aws_session_token.clone(),
                }))
            }
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "AWS_SECRET_ACCESS_KEY",
                    "is required with AWS_ACCESS_KEY_ID (MAIL_PROVIDER=ses)",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "AWS_ACCESS_KEY_ID",
                    "is required with AWS_SECRET_ACCESS_KEY (MAIL_PROVIDER=ses)",
                ))
            }
            (None, None) => {}
        }
        match (set(&self.aws_role_arn), set(&self.aws_web_identity_token_file)) {
            (Some(role), Some(file)) => {
                let region = self.aws_region.clone().unwrap_or_default();
                let sts = set(&self.aws_endpoint_url_sts)
                    .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"));
                reqwest::Url::parse(&sts).map_err(|e| {
                    ConfigError::new("AWS_ENDPOINT_URL_STS", format!("is not a URL: {e}"))
                })?;
                let session = set(&self.aws_role_session_name)
                    .unwrap_or_else(|| format!("campaign-sender-{}", self.worker_name()));
                Ok(Source::WebIdentity(WebIdentity::new(role, file, session, sts)))
            }
            (Some(_), None) => Err(ConfigError::new(
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "is required with AWS_ROLE_ARN (web identity; MAIL_PROVIDER=ses)",
            )),
            (None, Some(_)) => Err(ConfigError::new(
                "AWS_ROLE_ARN",
                "is required with AWS_WEB_IDENTITY_TOKEN_FILE (web identity; MAIL_PROVIDER=ses)",
            )),
            (None, None) => Err(ConfigError::new(
                "AWS_ACCESS_KEY_ID",
                "is required with MAIL_PROVIDER=ses, or AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE for web identity (docs/OPERATIONS.md)",
            )),
        }
    }
}

/// `MAIL_URL` is an `http://` or `https://` URL with a host. A value without a scheme
/// (`127.0.0.1:18080/v1/send`, `localhost:18080/v1/send`) is the common mistake: the message
/// says what to add, quoting the value with any credentials in it masked.
fn check_mail_url(url: &str) -> Result<reqwest::Url, ConfigError> {
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    if !scheme_ok {
        return Err(ConfigError::new(
            "MAIL_URL",
            format!(
                "must start with http:// or https:// (got '{}')",
                masked_url(url)
            ),
        ));
    }
    match reqwest::Url::parse(url) {
        Ok(u) if u.host().is_some() => Ok(u),
        Ok(_) => Err(ConfigError::new(
            "MAIL_URL",
            format!("has no host (got '{}')", masked_url(url)),
        )),
        Err(e) => Err(ConfigError::new(
            "MAIL_URL",
            format!("is not a URL: {e} (got '{}')", masked_url(url)),
        )),
    }
}

/// `url` with anything before an `@` in its authority (a user and password) replaced.
fn masked_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    let end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match authority.rfind('@') {
        Some(i) => format!("{scheme}[redacted]@{}{path}", &authority[i + 1..]),
        None => url.to_string(),
    }
}
