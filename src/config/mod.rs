//! Typed configuration, read once from the environment (envy) and validated at start.
//!
//! Every knob has a documented default and its unit in its name (`LEASE_S`, `READ_TIMEOUT_MS`).
//! A bad value stops the process with exit code 78 and one line naming the variable, before
//! anything touches the database. Secrets (`DATABASE_URL`, `MAIL_API_KEY`) live in [`Secret`],
//! whose `Debug` and `Display` print `[redacted]`.
//!
//! - [`DbConfig`] (`db.rs`): how to reach PostgreSQL, for every subcommand;
//! - [`RunConfig`] (`run.rs`): what `run` and `serve` need besides the database;
//!   `run_unsubscribe.rs` its one-click unsubscribe settings.
//!   `vendor.rs` holds its provider side: the endpoint, the idempotency window the vendor
//!   allows, SES's credentials.
//! - [`EventsConfig`] (`events.rs`): the webhook server's address, bounds and vendor secrets.
//! - [`BrakeConfig`] (`brake.rs`): the complaint and bounce lines and the soft-bounce rule, for
//!   `events`, `status` and the page alike.
//! - [`WebConfig`] (`web.rs`): the status page's address, login file and refresh.

mod brake;
mod db;
mod events;
mod run;
mod vendor;
mod web;

use crate::secret::Secret;
pub use brake::BrakeConfig;
pub use db::DbConfig;
pub use events::EventsConfig;
pub use run::{RunConfig, BOUNDS};
pub use web::WebConfig;

/// A configuration read once from environment variables (envy: each field is the variable of
/// its name, upper-cased) and checked before anything uses it.
pub trait FromEnv: serde::de::DeserializeOwned {
    /// Every check made at start; the first problem found names its variable.
    fn validate(&self) -> Result<(), ConfigError>;

    fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, ConfigError> {
        let cfg: Self = envy::from_iter(vars).map_err(ConfigError::from_envy)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn from_env() -> Result<Self, ConfigError> {
        Self::from_vars(std::env::vars())
    }
}

/// A configuration problem: which variable, and what is wrong with it. Exit code 78.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{var}: {problem}")]
pub struct ConfigError {
    pub var: String,
    pub problem: String,
}

impl ConfigError {
    pub(crate) fn new(var: &str, problem: impl Into<String>) -> Self {
        Self {
            var: var.to_string(),
            problem: problem.into(),
        }
    }

    pub(crate) fn from_envy(err: envy::Error) -> Self {
        match err {
            envy::Error::MissingValue(field) => {
                Self::new(&field.to_ascii_uppercase(), "is required but not set")
            }
            envy::Error::Custom(msg) => {
                // envy says "... while parsing value '…' provided by NAME"; keep NAME up front.
                let var = msg
                    .rsplit("provided by ")
                    .next()
                    .unwrap_or("environment")
                    .to_string();
                let problem = msg
                    .split(" while parsing")
                    .next()
                    .unwrap_or(&msg)
                    .to_string();
                Self::new(&var, format!("cannot be parsed ({problem})"))
            }
        }
    }
}

/// Every environment variable the binary reads: the fields of [`DbConfig`], [`RunConfig`],
/// [`EventsConfig`], [`BrakeConfig`] and [`WebConfig`]
/// (their names upper-cased, as envy reads them) and the logging ones of [`crate::telemetry`].
/// The manifests' ConfigMap may only set these (tests/it/manifests.rs).
pub fn known_variables() -> Vec<String> {
    let db = DbConfig::from_vars([("DATABASE_URL".to_string(), "postgres://x".to_string())])
        .expect("defaults are valid");
    let run = RunConfig::with_defaults("c", "http://127.0.0.1/");
    let events: EventsConfig =
        envy::from_iter(std::iter::empty::<(String, String)>()).expect("every field has a default");
    let web: WebConfig =
        envy::from_iter(std::iter::empty::<(String, String)>()).expect("every field has a default");
    let mut vars: Vec<String> = [
        serde_json::to_value(db),
        serde_json::to_value(run),
        serde_json::to_value(events),
        serde_json::to_value(web),
        serde_json::to_value(BrakeConfig::default()),
    ]
    .into_iter()
    .filter_map(|v| v.ok())
    .filter_map(|v| v.as_object().cloned())
    .flat_map(|o| o.keys().map(|k| k.to_ascii_uppercase()).collect::<Vec<_>>())
    .collect();
    vars.extend(["LOG_FORMAT".to_string(), "RUST_LOG".to_string()]);
    vars.sort();
    vars
}

/// The most a rate may be, in requests per second (`MAIL_RATE_PER_S`, `limit --rate`): far
/// above any vendor's limit, low enough that the pacer's arithmetic stays exact.
pub const MAX_RATE_PER_S: u32 = 100_000;

/// `value` is at most `max` (the documented upper bound of `var`): an absurd value is refused
/// at start instead of overflowing a time or a counter later.
pub(crate) fn at_most(var: &str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::new(var, format!("must be at most {max}")));
    }
    Ok(())
}

pub(crate) fn positive(var: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::new(var, "must be greater than 0"));
    }
    Ok(())
}

/// Why `WORKER_ID` cannot name this process, if it cannot: it goes into the `User-Agent` header,
/// the STS session name and `status`, so it is a pod name's alphabet (`[A-Za-z0-9._-]`, at most
/// 253 characters, a DNS subdomain's bound).
pub(crate) fn worker_id_problem(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("is set but empty; unset it or give a name".into());
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "holds {}; a worker id is a pod name: only A-Z a-z 0-9 . _ -",
            crate::shown::shown_char(c)
        ));
    }
    (id.len() > 253).then(|| format!("is {} characters long; at most 253", id.len()))
}
