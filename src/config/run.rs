//! `RunConfig`: what `campaign-sender run` and `serve` need besides the database, with every
//! default, the checks made at start, and the values in the units the code uses.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{at_most, positive, worker_id_problem, ConfigError, FromEnv, Secret, MAX_RATE_PER_S};
use crate::outcome::{Refusals, RetryPolicy};
use crate::provider::Kind;
use crate::unsubscribe::Mode;

/// What `campaign-sender run` needs besides the database.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct RunConfig {
    /// `CAMPAIGN_ID` (required): the campaign to send.
    pub campaign_id: String,
    /// `MAIL_PROVIDER` (default `json`): the vendor's API the workers speak — `json` (our own
    /// contract, `fake-provider`), `sendgrid`, `ses`, `postmark`, `mailgun`, `resend`
    /// ([`crate::provider`]).
    #[serde(default)]
    pub mail_provider: Kind,
    /// `MAIL_URL`: for `json` (required) the whole endpoint URL, `http://` or `https://`; for a
    /// vendor (optional) its base URL `scheme://host[:port]`, default the vendor's public
    /// endpoint (EU hosts: `https://api.eu.sendgrid.com`, `https://api.eu.mailgun.net`).
    #[serde(default)]
    pub mail_url: Option<String>,
    /// `MAIL_API_KEY`: `json`: sent as `Authorization: Bearer …` when set; required for
    /// SendGrid (Bearer), Postmark (the server token), Mailgun (basic `api:KEY`) and Resend
    /// (Bearer).
    #[serde(default)]
    pub mail_api_key: Option<Secret>,
    /// `MAILGUN_DOMAIN` (required with `mailgun`): the sending domain.
    #[serde(default)]
    pub mailgun_domain: Option<String>,
    /// `POSTMARK_MESSAGE_STREAM` (default `broadcast`: marketing mail; Postmark's default
    /// `outbound` stream is for transactional mail).
    #[serde(default = "defaults::postmark_message_stream")]
    pub postmark_message_stream: String,
    /// `AWS_REGION` (required with `ses`): the SES region, e.g. `eu-west-1`.
    #[serde(default)]
    pub aws_region: Option<String>,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (required with `ses`) and, for temporary
    /// credentials, `AWS_SESSION_TOKEN`: the SigV4 credentials.
    #[serde(default)]
    pub aws_access_key_id: Option<String>,
    #[serde(default)]
    pub aws_secret_access_key: Option<Secret>,
    #[serde(default)]
    pub aws_session_token: Option<Secret>,
    /// `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE` (`ses`, when no keys are set): web
    /// identity federation — the role to assume with the token in that file (GKE → AWS: a
    /// projected service-account token). `AWS_ROLE_SESSION_NAME` (default
    /// `campaign-sender-{WORKER_ID}`) and `AWS_ENDPOINT_URL_STS` (default the region's STS).
    #[serde(default)]
    pub aws_role_arn: Option<String>,
    #[serde(default)]
    pub aws_web_identity_token_file: Option<String>,
    #[serde(default)]
    pub aws_role_session_name: Option<String>,
    #[serde(default)]
    pub aws_endpoint_url_sts: Option<String>,
    /// `SES_CONFIGURATION_SET` (default unset): the configuration set every SES mail names; its
    /// event destination is what reports bounces, complaints and deliveries back.
    #[serde(default)]
    pub ses_configuration_set: Option<String>,
    /// `LIST_UNSUBSCRIBE` (default `ours`): whose RFC 8058 one-click unsubscribe every mail
    /// carries — `ours`, `vendor` or `none` ([`crate::unsubscribe::Mode`]).
    #[serde(default)]
    pub list_unsubscribe: Mode,
    /// `UNSUBSCRIBE_BASE_URL` (required with `ours`): the public HTTPS origin (and path prefix)
    /// where `events` answers `/unsubscribe/{token}`; `http://` only to a loopback host.
    #[serde(default)]
    pub unsubscribe_base_url: Option<String>,
    /// `FEEDBACK_ID` (default unset): Gmail's Feedback Loop SenderId, 5 to 15 of `A-Z a-z 0-9
    /// . _ -`; with it every mail carries `Feedback-ID: {campaign_id}:{vendor}:bulk:{FEEDBACK_ID}`
    /// ([`RunConfig::feedback_header`]), so Postmaster Tools shows each campaign's spam rate.
    #[serde(default)]
    pub feedback_id: Option<String>,
    /// `UNSUBSCRIBE_SECRET` (required with `ours`): one or more secrets, comma-separated; the
    /// first (it signs) at least 32 bytes, the others 16; all verify (rotation without breaking
    /// sent links).
    #[serde(default)]
    pub unsubscribe_secret: Option<Secret>,
    /// `UNSUBSCRIBE_MAILTO` (default unset): an address added as `<mailto:…>` after our link,
    /// the token in its subject and `+tag`; only with `UNSUBSCRIBE_MAILTO_INBOUND`.
    #[serde(default)]
    pub unsubscribe_mailto: Option<String>,
    /// `UNSUBSCRIBE_MAILTO_INBOUND` (required with `UNSUBSCRIBE_MAILTO`): `postmark`,
    /// `mailgun`, `sendgrid` or `ses`, the vendor whose inbound route delivers that mailbox to
    /// `events` ([`crate::unsubscribe::Inbound`]).
    #[serde(default)]
    pub unsubscribe_mailto_inbound: Option<String>,
    /// `SES_CONTACT_LIST` (required with `ses` and `LIST_UNSUBSCRIBE=vendor`) and
    /// `SES_CONTACT_TOPIC` (optional): SES list management's contact list and topic.
    #[serde(default)]
    pub ses_contact_list: Option<String>,
    #[serde(default)]
    pub ses_contact_topic: Option<String>,
    /// `MAIL_CA_FILE` (default unset: the public web roots only): a PEM file of CA
    /// certificates trusted for `MAIL_URL` besides the built-in public roots, for an endpoint
    /// behind a private CA (a staging fake provider, an egress proxy that re-signs TLS). Names
    /// are still checked; nothing turns verification off.
    #[serde(default)]
    pub mail_ca_file: Option<String>,
    /// `BATCH_SIZE` (default 200): rows per claim.
    #[serde(default = "defaults::batch_size")]
    pub batch_size: u32,
    /// `SEND_CONCURRENCY` (default 100): requests in flight per process. Little's law: a whole
    /// 500/s limit at 200 ms provider latency needs 100 in flight.
    #[serde(default = "defaults::send_concurrency")]
    pub send_concurrency: u32,
    /// `MAIL_RATE_PER_S` (default 500): requests per second **all pods together** may start
    /// under one `RATE_LIMIT_KEY`, every attempt included. Each pod paces at its share of it
    /// (see [`crate::rate`]); if pods disagree, the smallest value among live pods wins.
    #[serde(default = "defaults::mail_rate_per_s")]
    pub mail_rate_per_s: u32,
    /// `RATE_LIMIT_KEY` (default: the host, and port if given, of `MAIL_URL`): pods sharing
    /// this key share one limit. Give several campaigns on one provider account the same key.
    #[serde(default)]
    pub rate_limit_key: Option<String>,
    /// `RATE_SYNC_MS` (default 250): how often a pod renews its share and sees the others'.
    #[serde(default = "defaults::rate_sync_ms")]
    pub rate_sync_ms: u64,
    /// `RATE_SHARE_TTL_MS` (default 3000): a share not renewed for this long lapses; the pod
    /// stops sending by itself, and the others take its capacity shortly after
    /// ([`crate::rate::plan::HANDOVER`]).
    #[serde(default = "defaults::rate_share_ttl_ms")]
    pub rate_share_ttl_ms: u64,
    /// `MAIL_DAILY_QUOTA` (default unset: none): requests (every attempt) all pods of the
    /// `RATE_LIMIT_KEY` together may start in any rolling 24 h. Never exceeded: each pod sends
    /// only out of quota granted to it ([`crate::rate::quota`]); at the quota `run` exits 0
    /// ("done for now") and `serve` waits until usage ages out.
    #[serde(default)]
    pub mail_daily_quota: Option<u64>,
    /// `ACCOUNT_ERROR_STATUSES` (default `401,403`): answers that mean the provider refuses the
    /// account, not the recipient. The first one stops every pod of the key until
    /// `campaign-sender resume`; the row is released, never failed. Empty: none.
    #[serde(default = "defaults::account_error_statuses")]
    pub account_error_statuses: String,
    /// `ENDPOINT_ERROR_STATUSES` (default `404,405`): answers that mean `MAIL_URL` is not the
    /// mail API (a wrong path); handled as `ACCOUNT_ERROR_STATUSES`. Empty: none.
    #[serde(default = "defaults::endpoint_error_statuses")]
    pub endpoint_error_statuses: String,
    /// `METRICS_ADDR` (default unset: no listener): serve Prometheus `/metrics` here, e.g.
    /// `0.0.0.0:9090`.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// `LEASE_S` (default 30): how long a claim is ours without a heartbeat. A heartbeat every
    /// `LEASE_S / 3` keeps the rows of a live worker leased; a killed worker's rows are taken
    /// by others after this.
    #[serde(default = "defaults::lease_s")]
    pub lease_s: u64,
    /// `FLUSH_MAX_ROWS` (default 100): results are written (fenced) once this many are waiting...
    #[serde(default = "defaults::flush_max_rows")]
    pub flush_max_rows: u32,
    /// `FLUSH_INTERVAL_MS` (default 200): ...or this long after the oldest one came in. A crash
    /// re-sends at most what was in flight plus this much unwritten work.
    #[serde(default = "defaults::flush_interval_ms")]
    pub flush_interval_ms: u64,
    /// `DEADLINE_S` (default 3300): `run` stops claiming this long after its Job started (with
    /// `JOB_UID`; else after this process started) and exits 0 with the rest left for the next
    /// run; 0 means no deadline. `serve` has none.
    #[serde(default = "defaults::deadline_s")]
    pub deadline_s: u64,
    /// `MAX_ATTEMPTS` (default 5): a retryable failure on this attempt becomes `failed`.
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    /// `BACKOFF_BASE_MS` (default 1000): first retry wait; doubles per attempt, with jitter.
    #[serde(default = "defaults::backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// `BACKOFF_MAX_MS` (default 60000): cap on the exponential retry wait.
    #[serde(default = "defaults::backoff_max_ms")]
    pub backoff_max_ms: u64,
    /// `RETRY_AFTER_MAX_S` (default 600): a provider `Retry-After` is honoured up to this.
    #[serde(default = "defaults::retry_after_max_s")]
    pub retry_after_max_s: u64,
    /// `CONNECT_TIMEOUT_MS` (default 2000): TCP + TLS connect to the provider.
    #[serde(default = "defaults::connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// `READ_TIMEOUT_MS` (default 5000): waiting for the provider's response.
    #[serde(default = "defaults::read_timeout_ms")]
    pub read_timeout_ms: u64,
    /// `MAX_PERMANENT_FAILURE_RATIO` (default 0.01): above this share of the campaign in
    /// `failed`, the run stops with exit code 2.
    #[serde(default = "defaults::max_permanent_failure_ratio")]
    pub max_permanent_failure_ratio: f64,
    /// `OPTOUT_RECHECK_MS` (default 1000): a send starts only if a check made at most this long
    /// ago found the member not opted out (and the row still ours).
    #[serde(default = "defaults::optout_recheck_ms")]
    pub optout_recheck_ms: u64,
    /// `IDEMPOTENCY_WINDOW_S` (default 86400 for `json` and `resend`; a vendor without keys
    /// has none, and setting it there is an error): how long the provider suppresses a repeat
    /// of an `Idempotency-Key`. **Must not exceed the provider's retention** (Resend: 24 h). A
    /// row whose attempt had an unknown outcome (timeout, broken connection, crash mid-send) is
    /// sent again only while that attempt is younger than this less
    /// [`RunConfig::idempotency_margin`]; after that it becomes `unconfirmed` (`campaign-sender
    /// resolve` settles it). Without keys it becomes `unconfirmed` at once.
    #[serde(default)]
    pub idempotency_window_s: Option<u64>,
    /// `IDLE_POLL_MS` (default 1000): longest wait between claims when only retry-waiting or
    /// leased rows remain.
    #[serde(default = "defaults::idle_poll_ms")]
    pub idle_poll_ms: u64,
    /// `PAUSE_POLL_MS` (default 250, at most 1000): how often a running pod looks at the
    /// campaign's kill switch (`campaign-sender pause`), and the most a send's re-check may be
    /// old ([`crate::store::Store::recheck`] sees the pause too): no send starts later than this
    /// after a pause committed, however slow the poll; no claim after the next poll.
    #[serde(default = "defaults::pause_poll_ms")]
    pub pause_poll_ms: u64,
    /// `WORKER_ID` (default `worker-{JOB_COMPLETION_INDEX}`, else `$HOSTNAME`, else `worker`):
    /// names this process in logs and reports.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// `JOB_COMPLETION_INDEX` (set by an Indexed Job).
    #[serde(default)]
    pub job_completion_index: Option<u32>,
    /// `JOB_UID` (default unset; the manifests set it from the pod's
    /// `batch.kubernetes.io/controller-uid` label): the Job object this pod belongs to, in any
    /// spelling of a UUID ([`RunConfig::job`]). With it, `DEADLINE_S` counts from that Job's
    /// start for this campaign, shared by all its pods and their restarts, so a restarted pod
    /// gets no new time budget, and a new Job of the same name (or this Job sending another
    /// campaign) gets a whole one.
    #[serde(default)]
    pub job_uid: Option<String>,
    /// `JOB_NAME` (default unset; the manifests set it from the pod's `job-name` label): the Job's
    /// name, for logs and the budget's row; the budget is keyed by `JOB_UID` and the campaign.
    #[serde(default)]
    pub job_name: Option<String>,
    /// `HOSTNAME` (set by Kubernetes to the pod name).
    #[serde(default)]
    pub hostname: Option<String>,
}

/// `MAIL_DAILY_QUOTA`'s bound: a trillion requests a day.
const MAX_DAILY_QUOTA: u64 = 1_000_000_000_000;
/// `IDEMPOTENCY_WINDOW_S`'s bound: no vendor keeps a key longer than 30 days.
const MAX_IDEMPOTENCY_WINDOW_S: u64 = 30 * 86_400;

/// The bounded number settings of [`RunConfig`], one row each: variable, field, type, default
/// and upper bound (the meaning is the field's rustdoc; the unit is in the name). The macro
/// makes each row the field's serde default (`defaults::FIELD`), an entry of [`BOUNDS`] and a
/// check at start, so a setting cannot get a bound checked against another's value.
///
/// The bounds are far beyond any sensible setting and keep the arithmetic on them exact: an
/// absurd value (a `u64::MAX` meant as "forever") is refused at start, exit 78 naming it,
/// instead of overflowing an instant, never sending, or never exiting.
macro_rules! knobs {
    ($($var:literal $field:ident: $ty:ty = $default:expr, at most $max:expr;)+) => {
        pub(super) mod defaults {
            $(pub fn $field() -> $ty {
                $default
            })+
            pub fn postmark_message_stream() -> String {
                "broadcast".into()
            }
            pub fn max_permanent_failure_ratio() -> f64 {
                0.01
            }
            pub fn idempotency_window_s() -> u64 {
                86_400
            }
            pub fn pause_poll_ms() -> u64 {
                250
            }
            pub fn account_error_statuses() -> String {
                "401,403".into()
            }
            pub fn endpoint_error_statuses() -> String {
                "404,405".into()
            }
        }

        /// Every bounded number setting and its upper bound (`DB_CONNECT_RETRY_S` and
        /// `DB_MAX_CONNECTIONS` are [`super::DbConfig`]'s: a day, 1000), from the rows of
        /// `knobs!`, with `MAIL_DAILY_QUOTA` and `IDEMPOTENCY_WINDOW_S`, which have no default.
        pub const BOUNDS: &[(&str, u64)] = &[
            $(($var, $max),)+
            ("MAIL_DAILY_QUOTA", MAX_DAILY_QUOTA),
            ("IDEMPOTENCY_WINDOW_S", MAX_IDEMPOTENCY_WINDOW_S),
        ];

        impl RunConfig {
            /// Each bounded setting: its variable, its value here, its bound.
            fn bounded(&self) -> Vec<(&'static str, u64, u64)> {
                vec![
                    $(($var, self.$field as u64, $max),)+
                    ("MAIL_DAILY_QUOTA", self.mail_daily_quota.unwrap_or(0), MAX_DAILY_QUOTA),
                    ("IDEMPOTENCY_WINDOW_S", self.idempotency_window_s.unwrap_or(0), MAX_IDEMPOTENCY_WINDOW_S),
                ]
            }
        }
    };
}

knobs! {
    "MAIL_RATE_PER_S" mail_rate_per_s: u32 = 500, at most MAX_RATE_PER_S as u64;
    "BATCH_SIZE" batch_size: u32 = 200, at most 10_000;
    "SEND_CONCURRENCY" send_concurrency: u32 = 100, at most 10_000;
    "RATE_SYNC_MS" rate_sync_ms: u64 = 250, at most 10_000;
    "RATE_SHARE_TTL_MS" rate_share_ttl_ms: u64 = 3000, at most 60_000;
    "LEASE_S" lease_s: u64 = 30, at most 86_400;
    "FLUSH_MAX_ROWS" flush_max_rows: u32 = 100, at most 10_000;
    "FLUSH_INTERVAL_MS" flush_interval_ms: u64 = 200, at most 60_000;
    "DEADLINE_S" deadline_s: u64 = 3300, at most 31 * 86_400;
    "MAX_ATTEMPTS" max_attempts: u32 = 5, at most 100;
    "BACKOFF_BASE_MS" backoff_base_ms: u64 = 1000, at most 3_600_000;
    "BACKOFF_MAX_MS" backoff_max_ms: u64 = 60_000, at most 86_400_000;
    "RETRY_AFTER_MAX_S" retry_after_max_s: u64 = 600, at most 86_400;
    "CONNECT_TIMEOUT_MS" connect_timeout_ms: u64 = 2000, at most 600_000;
    "READ_TIMEOUT_MS" read_timeout_ms: u64 = 5000, at most 600_000;
    "OPTOUT_RECHECK_MS" optout_recheck_ms: u64 = 1000, at most 60_000;
    "IDLE_POLL_MS" idle_poll_ms: u64 = 1000, at most 60_000;
}

impl RunConfig {
    fn validate_bounds(&self) -> Result<(), ConfigError> {
        for (var, value, max) in self.bounded() {
            at_most(var, value, max)?;
        }
        Ok(())
    }

    /// A config with every default, for tests and tools that build one in code, but
    /// `LIST_UNSUBSCRIBE=none` (our links' base URL and secret have no default).
    pub fn with_defaults(campaign_id: &str, mail_url: &str) -> Self {
        let vars = [
            ("CAMPAIGN_ID".to_string(), campaign_id.to_string()),
            ("MAIL_URL".to_string(), mail_url.to_string()),
            ("LIST_UNSUBSCRIBE".to_string(), "none".to_string()),
        ];
        Self::from_vars(vars).expect("defaults are valid")
    }

    /// The statuses that are refusals (`ACCOUNT_ERROR_STATUSES`, `ENDPOINT_ERROR_STATUSES`):
    /// comma-separated 4xx codes, not 429, in one list at most.
    pub fn refusals(&self) -> Result<Refusals, ConfigError> {
        let list = |var: &'static str, v: &str| -> Result<Vec<u16>, ConfigError> {
            v.split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(|c| match c.parse::<u16>() {
                    Ok(n) if (400..=499).contains(&n) && n != 429 => Ok(n),
                    _ => Err(ConfigError::new(
                        var,
                        format!("'{c}' is not a 4xx status other than 429 (e.g. 401,403)"),
                    )),
                })
                .collect()
        };
        let r = Refusals {
            account: list("ACCOUNT_ERROR_STATUSES", &self.account_error_statuses)?,
            endpoint: list("ENDPOINT_ERROR_STATUSES", &self.endpoint_error_statuses)?,
        };
        if let Some(both) = r.account.iter().find(|s| r.endpoint.contains(s)) {
            return Err(ConfigError::new(
                "ENDPOINT_ERROR_STATUSES",
                format!("{both} is in ACCOUNT_ERROR_STATUSES too; give each status one meaning"),
            ));
        }
        Ok(r)
    }

    fn validate_campaign_and_provider(&self) -> Result<(), ConfigError> {
        if let Some(problem) = crate::campaign_id::problem(&self.campaign_id) {
            return Err(ConfigError::new("CAMPAIGN_ID", problem));
        }
        self.validate_names()?;
        self.mail_base()?;
        if self
            .mail_api_key
            .as_ref()
            .is_some_and(|k| k.expose().trim().is_empty())
        {
            return Err(ConfigError::new(
                "MAIL_API_KEY",
                "is set but empty; unset it or give the key",
            ));
        }
        self.validate_unsubscribe()?;
        self.feedback_header()?;
        positive("CONNECT_TIMEOUT_MS", self.connect_timeout_ms)?;
        positive("READ_TIMEOUT_MS", self.read_timeout_ms)
    }

    /// The names this process goes by: `WORKER_ID`, or the fallback it takes from `HOSTNAME`
    /// (held to the same alphabet: it goes into headers, logs and metric labels), and the Job's.
    /// `JOB_UID` as a UUID, whatever its spelling (braces, capitals, no hyphens, `urn:uuid:`
    /// all name one Job); `None` when unset.
    pub fn job(&self) -> Result<Option<uuid::Uuid>, ConfigError> {
        self.job_uid
            .as_deref()
            .map(|uid| {
                uuid::Uuid::try_parse(uid.trim()).map_err(|_| {
                    ConfigError::new(
                        "JOB_UID",
                        "is not a Job's UID (a UUID); set it from the pod's \
                         batch.kubernetes.io/controller-uid label, or unset it",
                    )
                })
            })
            .transpose()
    }

    fn validate_names(&self) -> Result<(), ConfigError> {
        let id = match (&self.worker_id, self.job_completion_index, &self.hostname) {
            (Some(id), _, _) => Some(("WORKER_ID", id)),
            (None, None, Some(host)) => Some(("HOSTNAME", host)),
            _ => None,
        };
        if let Some((var, id)) = id {
            worker_id_problem(id).map_or(Ok(()), |p| Err(ConfigError::new(var, p)))?;
        }
        self.job()?;
        if let Some(name) = &self.job_name {
            worker_id_problem(name).map_or(Ok(()), |p| Err(ConfigError::new("JOB_NAME", p)))?;
        }
        Ok(())
    }

    fn validate_sizes(&self) -> Result<(), ConfigError> {
        // Its upper bound is its row of `knobs!` (`validate_bounds`).
        positive("BATCH_SIZE", self.batch_size as u64)?;
        positive("SEND_CONCURRENCY", self.send_concurrency as u64)?;
        positive("FLUSH_MAX_ROWS", self.flush_max_rows as u64)?;
        positive("FLUSH_INTERVAL_MS", self.flush_interval_ms)?;
        if let Some(a) = &self.metrics_addr {
            a.parse::<std::net::SocketAddr>().map_err(|e| {
                ConfigError::new(
                    "METRICS_ADDR",
                    format!("must be host:port, e.g. 0.0.0.0:9090 ({e})"),
                )
            })?;
        }
        Ok(())
    }

    fn validate_rate(&self) -> Result<(), ConfigError> {
        positive("MAIL_RATE_PER_S", self.mail_rate_per_s as u64)?;
        if self.rate_sync_ms < 10 {
            return Err(ConfigError::new("RATE_SYNC_MS", "must be at least 10"));
        }
        if self.rate_share_ttl_ms < 3 * self.rate_sync_ms {
            return Err(ConfigError::new(
                "RATE_SHARE_TTL_MS",
                "must be at least 3 × RATE_SYNC_MS, so one slow round does not stop sending",
            ));
        }
        if self.mail_daily_quota == Some(0) {
            return Err(ConfigError::new(
                "MAIL_DAILY_QUOTA",
                "must be at least 1; unset it for no quota",
            ));
        }
        self.refusals()?;
        if self
            .rate_limit_key
            .as_ref()
            .is_some_and(|k| k.trim().is_empty())
        {
            return Err(ConfigError::new(
                "RATE_LIMIT_KEY",
                "is set but empty; unset it to use the MAIL_URL host",
            ));
        }
        Ok(())
    }

    fn validate_timing(&self) -> Result<(), ConfigError> {
        positive("LEASE_S", self.lease_s)?;
        positive("MAX_ATTEMPTS", self.max_attempts as u64)?;
        positive("BACKOFF_BASE_MS", self.backoff_base_ms)?;
        positive("OPTOUT_RECHECK_MS", self.optout_recheck_ms)?;
        self.validate_idempotency_window()?;
        positive("IDLE_POLL_MS", self.idle_poll_ms)?;
        positive("PAUSE_POLL_MS", self.pause_poll_ms)?;
        if self.pause_poll_ms > 1000 {
            return Err(ConfigError::new(
                "PAUSE_POLL_MS",
                "must be at most 1000: a pause must be obeyed within a second",
            ));
        }
        if self.backoff_max_ms < self.backoff_base_ms {
            return Err(ConfigError::new(
                "BACKOFF_MAX_MS",
                "must be at least BACKOFF_BASE_MS",
            ));
        }
        if !(0.0..=1.0).contains(&self.max_permanent_failure_ratio) {
            return Err(ConfigError::new(
                "MAX_PERMANENT_FAILURE_RATIO",
                "must be between 0 and 1",
            ));
        }
        // A request that started under a fresh ownership check must end well inside the lease,
        // even if the heartbeats around it fail; and a heartbeat must fit three times in it.
        let request_ms = self.connect_timeout_ms + self.read_timeout_ms;
        if self.lease_s < 3 || self.lease_s * 1000 < request_ms + 2000 {
            return Err(ConfigError::new(
                "LEASE_S",
                format!("must be at least 3 and at least CONNECT_TIMEOUT_MS + READ_TIMEOUT_MS + 2 s = {} s", (request_ms + 2000).div_ceil(1000)),
            ));
        }
        Ok(())
    }

    pub fn worker_name(&self) -> String {
        if let Some(id) = &self.worker_id {
            return id.clone();
        }
        if let Some(i) = self.job_completion_index {
            return format!("worker-{i}");
        }
        self.hostname
            .clone()
            .unwrap_or_else(|| "worker".to_string())
    }

    /// The key pods share one limit under: `RATE_LIMIT_KEY`, else `host[:port]` of the
    /// provider's URL ([`RunConfig::mail_base`]).
    pub fn limit_key(&self) -> String {
        if let Some(k) = &self.rate_limit_key {
            return k.clone();
        }
        let u = self.mail_base().expect("MAIL_URL validated");
        let host = u.host_str().unwrap_or_default();
        match u.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_string(),
        }
    }

    /// `METRICS_ADDR`, parsed (validated at start).
    pub fn metrics_socket(&self) -> Option<std::net::SocketAddr> {
        self.metrics_addr.as_ref().and_then(|a| a.parse().ok())
    }

    /// The bound on one attempt: connect plus read timeout (the provider client sets it on
    /// every request).
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms + self.read_timeout_ms)
    }
    /// What is kept back from `IDEMPOTENCY_WINDOW_S`: a send starts at most
    /// `OPTOUT_RECHECK_MS` after the re-check that allowed it and arrives at most the request
    /// timeout later, plus a second for the clocks. A repeat that arrives within the window
    /// is then suppressed by the provider even when it left at the last allowed moment.
    pub fn idempotency_margin(&self) -> Duration {
        self.request_timeout() + self.optout_recheck() + Duration::from_secs(1)
    }

    /// How long after an attempt with an unknown outcome began its row may still be sent
    /// (`IDEMPOTENCY_WINDOW_S` less [`RunConfig::idempotency_margin`]).
    pub fn resend_within(&self) -> Duration {
        self.idempotency_window()
            .saturating_sub(self.idempotency_margin())
    }

    pub fn rate_sync(&self) -> Duration {
        Duration::from_millis(self.rate_sync_ms)
    }
    pub fn rate_share_ttl(&self) -> Duration {
        Duration::from_millis(self.rate_share_ttl_ms)
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_s)
    }
    pub fn heartbeat(&self) -> Duration {
        self.lease() / 3
    }
    pub fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_ms)
    }
    /// `DEADLINE_S` as a duration; `None` for 0 (no deadline).
    pub fn deadline(&self) -> Option<Duration> {
        (self.deadline_s > 0).then(|| Duration::from_secs(self.deadline_s))
    }
    pub fn optout_recheck(&self) -> Duration {
        Duration::from_millis(self.optout_recheck_ms)
    }
    pub fn idle_poll(&self) -> Duration {
        Duration::from_millis(self.idle_poll_ms)
    }

    pub fn pause_poll(&self) -> Duration {
        Duration::from_millis(self.pause_poll_ms)
    }

    /// The provider retry timing: `MAX_ATTEMPTS`, `BACKOFF_BASE_MS`, `BACKOFF_MAX_MS`,
    /// `RETRY_AFTER_MAX_S`.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            base: Duration::from_millis(self.backoff_base_ms),
            cap: Duration::from_millis(self.backoff_max_ms),
            retry_after_cap: Duration::from_secs(self.retry_after_max_s),
            resend_unknown: self.mail_provider.idempotent(),
        }
    }
}

impl FromEnv for RunConfig {
    /// Every check made at start; the first problem found names its variable.
    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_bounds()?;
        self.validate_campaign_and_provider()?;
        self.validate_sizes()?;
        self.validate_rate()?;
        self.validate_timing()
    }
}

#[path = "run_unsubscribe.rs"]
mod unsubscribe;

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
