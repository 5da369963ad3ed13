//! `EventsConfig`: what `campaign-sender events` needs besides the database. A vendor is
//! listened for when its secret is set; its path answers 404 otherwise.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{at_most, positive, ConfigError, FromEnv, Secret};
use crate::events::inbound::Route;
use crate::events::mailgun::Mailgun;
use crate::events::postmark::Postmark;
use crate::events::resend::Resend;
use crate::events::sendgrid::{SendGrid, SendGridInbound};
use crate::events::server::Listeners;
use crate::events::sns::{SesInbound, Sns, DEFAULT_CERT_URL_PATTERN};
use crate::events::webhook::Webhook;
use crate::http::{Budget, Doors};
use crate::store::events::Rules;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct EventsConfig {
    /// `EVENTS_ADDR` (default `0.0.0.0:8080`): where the vendors post.
    #[serde(default = "default_addr")]
    pub events_addr: String,
    /// `METRICS_ADDR` (default unset): Prometheus metrics.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// `EVENTS_MAX_BODY_BYTES` (default 4194304, at most 67108864): a larger body is refused
    /// with 413 (SendGrid batches up to 768 kB).
    #[serde(default = "default_max_body")]
    pub events_max_body_bytes: u64,
    /// `EVENTS_DB_TIMEOUT_MS` (default 5000, at most 60000): the longest a request waits for
    /// its commit before 503 (the vendor retries).
    #[serde(default = "default_db_timeout")]
    pub events_db_timeout_ms: u64,
    /// `EVENTS_READ_TIMEOUT_MS` (default 10000, at most 60000): how long a peer may take to send
    /// a request's head (and how long a kept-alive connection may sit idle), and again its body
    /// (waiting for the memory budget included: 503 then, 408 for a body not all there).
    #[serde(default = "default_read_timeout")]
    pub events_read_timeout_ms: u64,
    /// `EVENTS_BODY_MEMORY_BYTES` (default 67108864, at least twice `EVENTS_MAX_BODY_BYTES`, at
    /// most 1073741824): the most bytes of bodies held at once; bodies over 1 MiB share at most
    /// half of it (`crate::http::body`). The events overlay's memory limit is 256 MiB.
    #[serde(default = "default_body_memory")]
    pub events_body_memory_bytes: u64,
    /// `EVENTS_MAX_CONNECTIONS` (default 1024, at most 65536): connections open at once; more
    /// wait in the kernel's backlog.
    #[serde(default = "default_max_connections")]
    pub events_max_connections: u64,
    /// `UNSUBSCRIBE_SECRET` (default unset): the senders' secret of the one-click unsubscribe
    /// links (`LIST_UNSUBSCRIBE=ours`); with it, `/unsubscribe/{token}` is served.
    #[serde(default)]
    pub unsubscribe_secret: Option<Secret>,
    /// `UNSUBSCRIBE_PAGE_TEXTS` (default unset): a JSON file of texts over the built-in ones of
    /// the unsubscribe pages, `{"ja": {"done_body": "…"}}` (`crate::events::pages`: the keys,
    /// the checks), or a language of its own with every key.
    #[serde(default)]
    pub unsubscribe_page_texts: Option<String>,
    /// `UNSUBSCRIBE_PAGE_LANG` (default `en`): the pages' language for a reader who asks for
    /// none of theirs (`en`, `ja`, or one of `UNSUBSCRIBE_PAGE_TEXTS`).
    #[serde(default = "default_page_lang")]
    pub unsubscribe_page_lang: String,
    /// `EVENTS_INBOUND_MAX_BODY_BYTES` (default 2097152, at most 16777216): the largest
    /// inbound mail taken at `/inbound/{vendor}`; a larger one is answered so that its vendor
    /// stops posting it (`crate::events::inbound`). Its own memory budget: eight such bodies
    /// (128 MiB at most, within the events overlay's 256 MiB beside the vendors' budget).
    #[serde(default = "default_inbound_max_body")]
    pub events_inbound_max_body_bytes: u64,
    /// `SENDGRID_WEBHOOK_PUBLIC_KEY`: the Signed Event Webhook's verification key, base64 DER.
    #[serde(default)]
    pub sendgrid_webhook_public_key: Option<Secret>,
    /// `SENDGRID_INBOUND_PUBLIC_KEY`: the Inbound Parse security policy's signature key
    /// (`policy.signature.public_key`, base64 DER); with it (and `UNSUBSCRIBE_SECRET`),
    /// `/inbound/sendgrid` is served.
    #[serde(default)]
    pub sendgrid_inbound_public_key: Option<Secret>,
    /// `RESEND_WEBHOOK_SECRET`: `whsec_…`.
    #[serde(default)]
    pub resend_webhook_secret: Option<Secret>,
    /// `MAILGUN_WEBHOOK_SIGNING_KEY`: the HTTP webhook signing key.
    #[serde(default)]
    pub mailgun_webhook_signing_key: Option<Secret>,
    /// `POSTMARK_WEBHOOK_USER` and `POSTMARK_WEBHOOK_PASSWORD`: the basic auth of the webhook URL.
    #[serde(default)]
    pub postmark_webhook_user: Option<String>,
    #[serde(default)]
    pub postmark_webhook_password: Option<Secret>,
    /// `SNS_TOPIC_ARNS`: comma-separated topics SES publishes events to; SES is listened for
    /// when set.
    #[serde(default)]
    pub sns_topic_arns: Option<String>,
    /// `SNS_CERT_URL_PATTERN` (default: SNS's own hosts over HTTPS): the URLs a signing
    /// certificate and a subscription confirmation may come from.
    #[serde(default)]
    pub sns_cert_url_pattern: Option<String>,
}

fn default_addr() -> String {
    "0.0.0.0:8080".into()
}
fn default_page_lang() -> String {
    "en".into()
}
fn default_max_body() -> u64 {
    4 * 1024 * 1024
}
fn default_inbound_max_body() -> u64 {
    crate::events::inbound::DEFAULT_MAX_BODY as u64
}
fn default_db_timeout() -> u64 {
    5000
}
fn default_read_timeout() -> u64 {
    10_000
}
fn default_body_memory() -> u64 {
    64 * 1024 * 1024
}
fn default_max_connections() -> u64 {
    1024
}

/// How long the requests in flight get to finish after SIGTERM; the rest are cut (their
/// vendors retry: nothing is answered 2xx before its commit).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

impl FromEnv for EventsConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.socket()?;
        if let Some(a) = &self.metrics_addr {
            a.parse::<std::net::SocketAddr>().map_err(|e| {
                ConfigError::new("METRICS_ADDR", format!("must be host:port ({e})"))
            })?;
        }
        positive("EVENTS_MAX_BODY_BYTES", self.events_max_body_bytes)?;
        at_most(
            "EVENTS_MAX_BODY_BYTES",
            self.events_max_body_bytes,
            64 * 1024 * 1024,
        )?;
        positive(
            "EVENTS_INBOUND_MAX_BODY_BYTES",
            self.events_inbound_max_body_bytes,
        )?;
        at_most(
            "EVENTS_INBOUND_MAX_BODY_BYTES",
            self.events_inbound_max_body_bytes,
            16 * 1024 * 1024,
        )?;
        positive("EVENTS_DB_TIMEOUT_MS", self.events_db_timeout_ms)?;
        at_most("EVENTS_DB_TIMEOUT_MS", self.events_db_timeout_ms, 60_000)?;
        positive("EVENTS_READ_TIMEOUT_MS", self.events_read_timeout_ms)?;
        at_most(
            "EVENTS_READ_TIMEOUT_MS",
            self.events_read_timeout_ms,
            60_000,
        )?;
        positive("EVENTS_MAX_CONNECTIONS", self.events_max_connections)?;
        at_most(
            "EVENTS_MAX_CONNECTIONS",
            self.events_max_connections,
            65_536,
        )?;
        at_most(
            "EVENTS_BODY_MEMORY_BYTES",
            self.events_body_memory_bytes,
            1024 * 1024 * 1024,
        )?;
        if self.events_body_memory_bytes < 2 * self.events_max_body_bytes {
            return Err(ConfigError::new(
                "EVENTS_BODY_MEMORY_BYTES",
                "must hold two bodies of EVENTS_MAX_BODY_BYTES; raise it or lower that",
            ));
        }
        let l = self.listeners(super::BrakeConfig::default().rules())?;
        if l.webhooks.is_empty() && l.one_click.is_none() {
            return Err(ConfigError::new(
                "SENDGRID_WEBHOOK_PUBLIC_KEY",
                "no vendor is configured: set the webhook secret of yours (SENDGRID_WEBHOOK_PUBLIC_KEY, \
                 SNS_TOPIC_ARNS, POSTMARK_WEBHOOK_USER/PASSWORD, MAILGUN_WEBHOOK_SIGNING_KEY or RESEND_WEBHOOK_SECRET), or UNSUBSCRIBE_SECRET for one-click unsubscribes",
            ));
        }
        Ok(())
    }
}

impl EventsConfig {
    pub fn socket(&self) -> Result<std::net::SocketAddr, ConfigError> {
        self.events_addr.parse().map_err(|e| {
            ConfigError::new(
                "EVENTS_ADDR",
                format!("must be host:port, e.g. 0.0.0.0:8080 ({e})"),
            )
        })
    }

    /// A verifier for every vendor whose secret is set, weighing events by `rules`
    /// ([`super::BrakeConfig::rules`]), and the inbound routes of those that have one; a
    /// secret that cannot be one names its variable.
    pub fn listeners(&self, rules: Rules) -> Result<Listeners, ConfigError> {
        let webhooks: Vec<Box<dyn Webhook>> = [
            self.sendgrid(
                &self.sendgrid_webhook_public_key,
                "SENDGRID_WEBHOOK_PUBLIC_KEY",
            )?
            .map(|w| Box::new(w) as Box<dyn Webhook>),
            self.sns()?.map(|w| Box::new(w) as Box<dyn Webhook>),
            self.postmark()?.map(|w| Box::new(w) as Box<dyn Webhook>),
            self.mailgun()?.map(|w| Box::new(w) as Box<dyn Webhook>),
            self.resend()?.map(|w| Box::new(w) as Box<dyn Webhook>),
        ]
        .into_iter()
        .flatten()
        .collect();
        let inbound: Vec<Box<dyn Route>> = [
            self.postmark()?.map(|r| Box::new(r) as Box<dyn Route>),
            self.mailgun()?.map(|r| Box::new(r) as Box<dyn Route>),
            self.sendgrid(
                &self.sendgrid_inbound_public_key,
                "SENDGRID_INBOUND_PUBLIC_KEY",
            )?
            .map(|r| Box::new(SendGridInbound(r)) as Box<dyn Route>),
            self.sns()?
                .map(|r| Box::new(SesInbound(r)) as Box<dyn Route>),
        ]
        .into_iter()
        .flatten()
        .collect();
        let inbound_max = self.events_inbound_max_body_bytes as usize;
        Ok(Listeners {
            webhooks,
            bodies: Budget::new(
                self.events_max_body_bytes as usize,
                self.events_body_memory_bytes as usize,
                self.read_timeout(),
            ),
            inbound,
            inbound_bodies: Budget::new(
                inbound_max,
                inbound_max * crate::events::inbound::BODY_MEMORY_BODIES,
                self.read_timeout(),
            ),
            db_timeout: Duration::from_millis(self.events_db_timeout_ms),
            rules,
            pages: self.pages()?,
            one_click: self
                .unsubscribe_secret
                .as_ref()
                .map(|s| crate::unsubscribe::Signer::new(s.expose()))
                .transpose()
                .map_err(|p| ConfigError::new("UNSUBSCRIBE_SECRET", p))?,
        })
    }

    fn sendgrid(
        &self,
        key: &Option<Secret>,
        variable: &'static str,
    ) -> Result<Option<SendGrid>, ConfigError> {
        key.as_ref()
            .map(|k| SendGrid::new(k.expose()))
            .transpose()
            .map_err(|p| ConfigError::new(variable, p))
    }

    fn resend(&self) -> Result<Option<Resend>, ConfigError> {
        self.resend_webhook_secret
            .as_ref()
            .map(|k| Resend::new(k.expose()))
            .transpose()
            .map_err(|p| ConfigError::new("RESEND_WEBHOOK_SECRET", p))
    }

    fn mailgun(&self) -> Result<Option<Mailgun>, ConfigError> {
        self.mailgun_webhook_signing_key
            .as_ref()
            .map(|k| Mailgun::new(k.expose()))
            .transpose()
            .map_err(|p| ConfigError::new("MAILGUN_WEBHOOK_SIGNING_KEY", p))
    }

    fn postmark(&self) -> Result<Option<Postmark>, ConfigError> {
        match (&self.postmark_webhook_user, &self.postmark_webhook_password) {
            (Some(u), Some(p)) => Postmark::new(u, p.expose())
                .map(Some)
                .map_err(|p| ConfigError::new("POSTMARK_WEBHOOK_PASSWORD", p)),
            (None, None) => Ok(None),
            _ => Err(ConfigError::new(
                "POSTMARK_WEBHOOK_PASSWORD",
                "POSTMARK_WEBHOOK_USER and POSTMARK_WEBHOOK_PASSWORD go together",
            )),
        }
    }

    fn sns(&self) -> Result<Option<Sns>, ConfigError> {
        let Some(t) = &self.sns_topic_arns else {
            return Ok(None);
        };
        let topics: Vec<String> = t
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if topics.iter().any(|t| !t.starts_with("arn:aws")) || topics.is_empty() {
            return Err(ConfigError::new(
                "SNS_TOPIC_ARNS",
                "must be topic ARNs (arn:aws:sns:REGION:ACCOUNT:NAME), comma-separated",
            ));
        }
        let pattern = self
            .sns_cert_url_pattern
            .as_deref()
            .unwrap_or(DEFAULT_CERT_URL_PATTERN);
        Sns::new(topics, pattern)
            .map(Some)
            .map_err(|p| ConfigError::new("SNS_CERT_URL_PATTERN", p))
    }

    /// The unsubscribe pages' texts: the built-in ones, `UNSUBSCRIBE_PAGE_TEXTS` over them,
    /// `UNSUBSCRIBE_PAGE_LANG` the default, each checked (78 naming the variable).
    pub fn pages(&self) -> Result<crate::events::pages::Pages, ConfigError> {
        let file = match &self.unsubscribe_page_texts {
            Some(path) if !path.trim().is_empty() => {
                Some(std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(
                        "UNSUBSCRIBE_PAGE_TEXTS",
                        format!("cannot be read: {e} ({path})"),
                    )
                })?)
            }
            _ => None,
        };
        crate::events::pages::Pages::new(file.as_deref())
            .map_err(|p| ConfigError::new("UNSUBSCRIBE_PAGE_TEXTS", p))?
            .with_default(&self.unsubscribe_page_lang)
            .map_err(|p| ConfigError::new("UNSUBSCRIBE_PAGE_LANG", p))
    }

    fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.events_read_timeout_ms)
    }

    /// The bounds of the door the vendors post through.
    pub fn doors(&self) -> Doors {
        Doors {
            max_connections: self.events_max_connections as usize,
            head_timeout: self.read_timeout(),
            shutdown_grace: SHUTDOWN_GRACE,
        }
    }
}
