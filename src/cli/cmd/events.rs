//! `campaign-sender events`: the vendors' signed webhooks and our one-click unsubscribes
//! ([`crate::events`]), until `shutdown`.

use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::servers::{connect_and_listen, serve};
use crate::cli::{config_failure, CliResult, Db};
use crate::config::{BrakeConfig, EventsConfig, FromEnv};
use crate::exit::Exit;

/// Listen for the vendors' signed webhooks (EVENTS_ADDR, default 0.0.0.0:8080): bounces,
/// complaints and unsubscribes suppress the address, deliveries settle unconfirmed rows.
/// SIGTERM stops it after the requests in flight.
#[derive(Args, Debug)]
pub struct Events {}

impl Events {
    /// `events`: the webhook server, until `shutdown`.
    pub async fn run(self, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
        let cfg = EventsConfig::from_env().map_err(config_failure)?;
        let addr = cfg.socket().map_err(config_failure)?;
        let rules = BrakeConfig::from_env().map_err(config_failure)?.rules();
        let listeners = cfg.listeners(rules).map_err(config_failure)?;
        if let Some(weak) = listeners.one_click.as_ref().map(|s| s.weak_verifiers()) {
            if weak > 0 {
                tracing::warn!(
                    weak,
                    "UNSUBSCRIBE_SECRET keeps {weak} verify-only secret(s) shorter than 32 bytes: \
                     drop them once the mails that carry their links are past caring (OPERATIONS: one-click)"
                );
            }
        }
        if let Some(m) = cfg.metrics_addr.as_ref().and_then(|a| a.parse().ok()) {
            // The pod's name labels every series; held to a worker id's alphabet, like a worker's.
            let name = std::env::var("HOSTNAME").unwrap_or_else(|_| "events".into());
            if let Some(problem) = crate::config::worker_id_problem(&name) {
                eprintln!("configuration error: HOSTNAME {problem}");
                return Err(Exit::Config.into());
            }
            if let Err(e) = crate::metrics::install(m, &name) {
                eprintln!("configuration error: METRICS_ADDR: cannot serve metrics on {m} ({e})");
                return Err(Exit::Config.into());
            }
        }
        let (pool, listener) = connect_and_listen(db, addr, "EVENTS_ADDR").await?;
        crate::events::server::start_counters_at_zero(&listeners);
        info!(%addr, vendors = ?listeners.vendors(), "listening for the vendors' events");
        tokio::spawn(crate::events::server::prune(
            pool.clone(),
            listeners.rules.soft_bounce_window_s,
            shutdown.clone(),
        ));
        let app = crate::events::server::router(pool, listeners);
        serve(listener, app, cfg.doors(), shutdown, "events").await
    }
}
