//! The provider client: one HTTP call per recipient. Touches only the provider, never the
//! database, and is never called inside a database transaction.
//!
//! Contract (the real provider's and `fake-provider`'s):
//! `POST {MAIL_URL}` with `{"to": email, "member_id": id, "template": template}` (the
//! template of the campaign's settings row, else the campaign id),
//! `Idempotency-Key: {campaign_id}:{member_id}` (the same on every attempt: the provider
//! suppresses repeats for 24 h, which is what makes a re-send after a crash harmless), and
//! `Authorization: Bearer {MAIL_API_KEY}` when a key is set.
//!
//! HTTPS is verified (rustls, the built-in Mozilla roots of webpki-roots plus the CAs of
//! `MAIL_CA_FILE` if set, names checked); there is deliberately no switch to accept an
//! unverified certificate: an endpoint that fails the handshake never sees an address or the
//! key, and counts as unreachable (rows deferred, not failed). Tested by
//! `tls::an_https_provider_whose_certificate_we_cannot_verify_gets_no_request` and
//! `tls::a_provider_behind_a_private_ca_is_trusted_only_with_mail_ca_file`.

use std::time::{Duration, SystemTime};

use crate::config::{ConfigError, RunConfig, Secret};
use crate::outcome::{classify, parse_retry_after, Attempt, ErrorClass, Refusals};

/// At most this much of a response body is read (and then dropped): enough to keep the
/// connection reusable for normal answers, bounded for a hostile one.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The idempotency key of one recipient of one campaign. Never includes the attempt.
pub fn idempotency_key(campaign_id: &str, member_id: i64) -> String {
    format!("{campaign_id}:{member_id}")
}

#[derive(serde::Serialize)]
struct SendBody<'a> {
    to: &'a str,
    member_id: i64,
    template: &'a str,
}

#[derive(Clone)]
pub struct Provider {
    client: reqwest::Client,
    /// The bound on a whole attempt (connect + read timeouts), set on each request in `send` so
    /// a slowly dribbling body cannot hold a slot.
    total: Duration,
    url: reqwest::Url,
    api_key: Option<Secret>,
    campaign_id: String,
    refusals: Refusals,
}

impl Provider {
    /// The client for `cfg`'s provider. Fails on a `MAIL_CA_FILE` that cannot be used, or if
    /// the TLS stack cannot be built.
    pub fn new(cfg: &RunConfig) -> Result<Self, ConfigError> {
        let connect = Duration::from_millis(cfg.connect_timeout_ms);
        let read = Duration::from_millis(cfg.read_timeout_ms);
        let mut builder = reqwest::Client::builder();
        for root in cfg.mail_roots()? {
            builder = builder.add_root_certificate(root);
        }
        let client = builder
            .connect_timeout(connect)
            .read_timeout(read)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(cfg.send_concurrency as usize)
            .tcp_nodelay(true)
            // The worker's name (never personal data) lets the provider side, and our fake,
            // tell pods apart.
            .user_agent(format!(
                "campaign-sender/{} ({})",
                env!("CARGO_PKG_VERSION"),
                cfg.worker_name()
            ))
            .build()
            .map_err(|e| ConfigError::new("MAIL_URL", format!("no HTTP client for it: {e}")))?;
        Ok(Self {
            total: cfg.request_timeout(),
            client,
            url: reqwest::Url::parse(&cfg.mail_url).expect("MAIL_URL validated at start"),
            api_key: cfg.mail_api_key.clone(),
            campaign_id: cfg.campaign_id.clone(),
            refusals: cfg.refusals().expect("refusal statuses validated at start"),
        })
    }

    /// One attempt for one recipient, over by `until` at the latest (the pass's time is up: a
    /// request cut there is a timeout, retried later under the same key). `attempt` is for
    /// tracing only: the key never changes.
    #[tracing::instrument(name = "send", skip_all, fields(member_id, attempt))]
    pub async fn send(
        &self,
        member_id: i64,
        attempt: i32,
        email: &str,
        template: &str,
        until: Option<tokio::time::Instant>,
    ) -> Attempt {
        let _ = attempt;
        let bound = until.map_or(self.total, |u| {
            self.total
                .min(u.saturating_duration_since(tokio::time::Instant::now()))
                .max(Duration::from_millis(1))
        });
        let mut req = self
            .client
            .post(self.url.clone())
            .timeout(bound)
            .header(
                "Idempotency-Key",
                idempotency_key(&self.campaign_id, member_id),
            )
            .json(&SendBody {
                to: email,
                member_id,
                template,
            });
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key.expose());
        }
        match req.send().await {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, SystemTime::now()));
                // Drain a bounded amount so the connection can be reused; the content is not
                // needed (and may echo personal data), so it is never kept or logged.
                let mut read = 0usize;
                while read < MAX_BODY_BYTES {
                    match resp.chunk().await {
                        Ok(Some(c)) => read += c.len(),
                        _ => break,
                    }
                }
                classify(status, retry_after, &self.refusals)
            }
            // No connection was made (refused, DNS, TLS handshake, connect timeout): the request
            // never left, so no attempt is spent. reqwest marks only connector errors this way;
            // a reused connection that breaks is a transport error below.
            Err(e) if e.is_connect() => Attempt::Undelivered {
                class: ErrorClass::Connect,
            },
            Err(e) => {
                let class = if e.is_timeout() {
                    ErrorClass::Timeout
                } else {
                    ErrorClass::Transport
                };
                // The request may or may not have reached the provider: retrying with the same
                // idempotency key is safe either way.
                Attempt::Retry {
                    status: None,
                    class,
                    retry_after: None,
                }
            }
        }
    }
}
