//! The provider client: one HTTP call per recipient, in the words of the vendor chosen by
//! `MAIL_PROVIDER`. Touches only the provider, never the database, and is never called inside a
//! database transaction.
//!
//! - [`profile`]: the one small trait a vendor implements — build the request, read the answer —
//!   and what it works on ([`Mail`], [`Outgoing`], [`Answer`]); [`answer`]: what the answers of
//!   the vendors share;
//! - one file per vendor, each with its answer table in its rustdoc: [`json`] (our own contract,
//!   the default, spoken by `fake-provider`), [`sendgrid`], [`ses`], [`postmark`], [`mailgun`],
//!   [`resend`]; [`aws`]: SES's credentials (keys, or web identity through STS);
//! - [`unlist`]: an address off the vendor's own suppression list (`suppress
//!   --lift-at-vendor`), each vendor's request beside its send's.
//!
//! Adding a vendor takes: its file here (a [`Profile`]); a [`Kind`] (`kind.rs`: its name, its
//! public endpoint, whether it honours keys); the arm of `RunConfig::provider`
//! (`src/config/vendor.rs`) that builds it from its settings; for its webhooks, its file in
//! [`crate::events`] and one entry in `EventsConfig::listeners`; and the docs' tables.
//! [`Settings`] is everything the client is built from: the provider reads no environment.
//!
//! Here, what they share: the client (timeouts, TLS), the idempotency key and the rule that
//! only a vendor honouring one may have an unknown outcome sent again ([`Kind::idempotent`],
//! the one place that says which do; [`crate::outcome::RetryPolicy::resend_unknown`]).
//!
//! HTTPS is verified (rustls, the built-in Mozilla roots of webpki-roots plus the CAs of
//! `MAIL_CA_FILE` if set, names checked); there is deliberately no switch to accept an
//! unverified certificate: an endpoint that fails the handshake never sees an address or the
//! key, and counts as unreachable (rows deferred, not failed). Tested by
//! `tls::an_https_provider_whose_certificate_we_cannot_verify_gets_no_request` and
//! `tls::a_provider_behind_a_private_ca_is_trusted_only_with_mail_ca_file`.

mod answer;
#[cfg(test)]
mod answer_tests;
pub mod aws;
pub mod json;
mod kind;
pub mod mailgun;
#[cfg(test)]
mod one_click_tests;
pub mod postmark;
pub mod profile;
pub mod resend;
pub mod sendgrid;
pub mod ses;
#[cfg(test)]
mod tests;
pub mod unlist;
#[cfg(test)]
mod unlist_tests;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::outcome::{Attempt, ErrorClass};
pub use kind::{host_of, idempotency_key, Kind, Letter};
pub use profile::{Answer, Body, BuildError, Mail, Outgoing, Profile, Unlisted};

/// At most this much of a response body is read (and then dropped): enough to keep the
/// connection reusable for normal answers, bounded for a hostile one.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// Everything the client is built from, checked and typed once at start by the configuration
/// (`RunConfig::provider`, in `src/config/vendor.rs`, which names the variable of a setting it
/// cannot use: exit 78). Plain values: the provider reads no environment and no file.
pub struct Settings {
    /// The vendor's profile, its secrets and options in it.
    pub profile: Arc<dyn Profile>,
    /// `MAIL_URL` (the JSON contract: the whole URL) or the vendor's base URL.
    pub base: reqwest::Url,
    /// The CAs of `MAIL_CA_FILE`, trusted besides the built-in public roots.
    pub roots: Vec<reqwest::Certificate>,
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
    /// Requests in flight at most (`SEND_CONCURRENCY`): the idle connections kept.
    pub concurrency: usize,
    /// The worker's name, in the `User-Agent` (never personal data).
    pub worker: String,
    pub campaign_id: String,
    /// `LIST_UNSUBSCRIBE=ours`: every mail's one-click link.
    pub links: Option<crate::unsubscribe::Links>,
    /// `FEEDBACK_ID`: every mail's `Feedback-ID` value (the campaign's, whole).
    pub feedback_id: Option<String>,
}

#[derive(Clone)]
pub struct Provider {
    client: reqwest::Client,
    /// The bound on a whole attempt (connect + read timeouts), set on each request in `send` so
    /// a slowly dribbling body cannot hold a slot.
    total: Duration,
    /// `MAIL_URL` (the JSON contract: the whole URL) or the vendor's base URL.
    base: reqwest::Url,
    profile: Arc<dyn Profile>,
    campaign_id: String,
    /// `LIST_UNSUBSCRIBE=ours`: every mail's one-click link.
    links: Option<crate::unsubscribe::Links>,
    feedback_id: Option<String>,
}

impl Provider {
    /// The client for `s`. Fails only if the TLS stack cannot be built.
    pub fn new(s: Settings) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder();
        for root in s.roots {
            builder = builder.add_root_certificate(root);
        }
        let client = builder
            .connect_timeout(s.connect_timeout)
            .read_timeout(s.read_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(s.concurrency)
            .tcp_nodelay(true)
            // The worker's name (never personal data) lets the provider side, and our fake,
            // tell pods apart.
            .user_agent(format!(
                "campaign-sender/{} ({})",
                env!("CARGO_PKG_VERSION"),
                s.worker
            ))
            .build()?;
        Ok(Self {
            total: s.connect_timeout + s.read_timeout,
            client,
            base: s.base,
            profile: s.profile,
            campaign_id: s.campaign_id,
            links: s.links,
            feedback_id: s.feedback_id,
        })
    }

    /// Ready to sign: fetches the vendor's credentials now if it needs some (SES with web
    /// identity), so a role that cannot be assumed stops the run at its start (exit 78).
    pub async fn prepare(&self) -> Result<(), String> {
        match self.profile.aws_credentials() {
            Some(creds) => creds.ensure_fresh(&self.client).await,
            None => Ok(()),
        }
    }

    /// Whether the vendor needs a sender (`configure --from`): all but our JSON contract.
    pub fn needs_sender(&self) -> bool {
        self.profile.needs_sender()
    }

    /// The URL a request with `path` goes to: `MAIL_URL` itself for the JSON contract (empty
    /// path), else the base URL with the vendor's path.
    fn url(&self, path: &str) -> reqwest::Url {
        if path.is_empty() {
            return self.base.clone();
        }
        let mut url = self.base.clone();
        url.set_path(path);
        url
    }

    /// One attempt for one recipient, over by `until` at the latest (the pass's time is up: a
    /// request cut there is a timeout). `attempt` is for tracing only: the key never changes.
    #[tracing::instrument(name = "send", skip_all, fields(member_id, attempt))]
    pub async fn send(
        &self,
        member_id: i64,
        attempt: i32,
        to: &str,
        letter: &Letter,
        data: Option<&serde_json::Map<String, serde_json::Value>>,
        until: Option<tokio::time::Instant>,
    ) -> Attempt {
        let _ = attempt;
        let bound = until.map_or(self.total, |u| {
            self.total
                .min(u.saturating_duration_since(tokio::time::Instant::now()))
                .max(Duration::from_millis(1))
        });
        let link = self
            .links
            .as_ref()
            .map(|l| l.for_member(&self.campaign_id, member_id));
        let mail = Mail {
            campaign_id: &self.campaign_id,
            member_id,
            to,
            from: letter.from.as_deref(),
            reply_to: letter.reply_to.as_deref(),
            template: &letter.template,
            data,
            unsubscribe: link.as_ref(),
            feedback_id: self.feedback_id.as_deref(),
        };
        if let Some(creds) = self.profile.aws_credentials() {
            if let Err(e) = creds.ensure_fresh(&self.client).await {
                // No request left: deferred like an unreachable provider, no attempt spent.
                tracing::warn!(error = %e, "no fresh AWS credentials; the row is deferred");
                return Attempt::Undelivered {
                    class: ErrorClass::Connect,
                };
            }
        }
        let out = match self.profile.request(&mail, SystemTime::now()) {
            Ok(out) => out,
            Err(e) => {
                tracing::error!(error = %e, "no request can be built; stopping as for a refused account");
                return Attempt::Refused {
                    status: 0,
                    refusal: crate::outcome::Refusal::Account,
                };
            }
        };
        match self.request(out, bound).send().await {
            Ok(resp) => self.read(resp).await,
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
                // The request may or may not have reached the provider: its outcome is unknown
                // (retried under the same key only where the vendor honours one).
                Attempt::Retry {
                    status: None,
                    class,
                    retry_after: None,
                }
            }
        }
    }

    /// `out` as a request, bounded by `bound`.
    fn request(&self, out: Outgoing, bound: Duration) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .request(out.method, self.url(&out.path))
            .timeout(bound);
        for (name, value) in &out.headers {
            req = req.header(*name, value);
        }
        if let Some((user, password)) = &out.basic {
            req = req.basic_auth(user, Some(password));
        }
        let (content_type, bytes) = out.body.encode();
        if let Some(content_type) = content_type {
            req = req.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        req.body(bytes)
    }

    /// Takes `email` off the vendor's own suppression list (`suppress --lift-at-vendor`): one
    /// request, its answer read by the profile ([`unlist`]'s table). Never logs the address.
    pub async fn unlist(&self, email: &str) -> Unlisted {
        let out = match self.profile.unlist(email, SystemTime::now()) {
            None => return Unlisted::NoApi,
            Some(Ok(out)) => out,
            Some(Err(_)) => return Unlisted::Refused { status: 0 },
        };
        if let Some(creds) = self.profile.aws_credentials() {
            if creds.ensure_fresh(&self.client).await.is_err() {
                return Unlisted::Unavailable { status: None };
            }
        }
        match self.request(out, self.total).send().await {
            Ok(resp) => {
                let (status, headers, body) = read_bounded(resp).await;
                self.profile.unlisted(&Answer {
                    status,
                    headers: &headers,
                    body: &body,
                    now: SystemTime::now(),
                })
            }
            Err(_) => Unlisted::Unavailable { status: None },
        }
    }

    /// Reads a bounded amount of the answer (so the connection can be reused) and lets the
    /// profile judge it. The body is never kept or logged: it may echo personal data.
    async fn read(&self, resp: reqwest::Response) -> Attempt {
        let (status, headers, body) = read_bounded(resp).await;
        self.profile.read(&Answer {
            status,
            headers: &headers,
            body: &body,
            now: SystemTime::now(),
        })
    }
}

/// The status, the headers and at most [`MAX_BODY_BYTES`] of the body of `resp`.
async fn read_bounded(mut resp: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = Vec::new();
    while body.len() < MAX_BODY_BYTES {
        match resp.chunk().await {
            Ok(Some(c)) => body.extend_from_slice(&c[..c.len().min(MAX_BODY_BYTES - body.len())]),
            _ => break,
        }
    }
    (status, headers, body)
}
