//! Logging: tracing to stderr, JSON when stderr is not a terminal (a pod), text otherwise;
//! `LOG_FORMAT=json|text` overrides, `RUST_LOG` filters (default `info`).
//!
//! Nothing logged anywhere in this crate carries an email address or a secret: rows are
//! named by member id, and secrets are [`crate::secret::Secret`].

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let json = match std::env::var("LOG_FORMAT").as_deref() {
        Ok("json") => true,
        Ok("text") => false,
        _ => !std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
