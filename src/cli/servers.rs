//! The two HTTP servers: `events` (the vendors' webhooks) and `web` (the status page). Each
//! reads its config, connects as its own role, listens, and serves until `shutdown`, letting
//! the requests in flight finish.

use std::net::SocketAddr;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::problem::Patience;
use super::{config_failure, CliError, CliResult, Db};
use crate::config::{BrakeConfig, EventsConfig, FromEnv, WebConfig};
use crate::exit::Exit;
use crate::http::Doors;
use crate::store::connect::Session;

/// The status page's door: people and Prometheus, a few at a time, and no request bodies.
const WEB_DOORS: Doors = Doors {
    max_connections: 256,
    head_timeout: Duration::from_secs(10),
    shutdown_grace: Duration::from_secs(10),
};

/// The database, waiting for the schema like a worker, and a listener on `addr` (`var` names
/// the setting a busy address is blamed on).
async fn connect_and_listen(
    db: &Db<'_>,
    addr: SocketAddr,
    var: &str,
) -> Result<(PgPool, tokio::net::TcpListener), CliError> {
    let pool = db
        .ready_pool(Session::Other, Patience::Worker, db.outage_limit())
        .await?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        eprintln!("configuration error: {var}: cannot listen on {addr} ({e})");
        CliError::Exit(Exit::Config)
    })?;
    Ok((pool, listener))
}

/// Serves `app` within `doors` until `shutdown`; the requests in flight get the grace to finish.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    doors: Doors,
    shutdown: CancellationToken,
    what: &str,
) -> CliResult {
    crate::http::serve(listener, app, doors, shutdown)
        .await
        .map_err(|e| {
            error!(error = %e, "the {what} server failed");
            CliError::Exit(Exit::Incomplete)
        })
}

/// `events`: the webhook server, until `shutdown`.
pub(super) async fn events(db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
    let cfg = EventsConfig::from_env().map_err(config_failure)?;
    let addr = cfg.socket().map_err(config_failure)?;
    let rules = BrakeConfig::from_env().map_err(config_failure)?.rules();
    let listeners = cfg.listeners(rules).map_err(config_failure)?;
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

/// `web`: the status page, until `shutdown`. It listens at once (`/healthz` answers 503 until
/// the first round of reads is done) and reads the database in the background.
pub(super) async fn web(db: &Db<'_>, ratio: f64, shutdown: CancellationToken) -> CliResult {
    let cfg = WebConfig::from_env().map_err(config_failure)?;
    let addr = cfg.socket().map_err(config_failure)?;
    let logins = cfg.logins().map_err(config_failure)?;
    let zone = cfg.zone().map_err(config_failure)?;
    let defaults = crate::status::Defaults::with_env_lines(ratio).map_err(config_failure)?;
    let (pool, listener) = connect_and_listen(db, addr, "WEB_ADDR").await?;
    let board = crate::web::board::Board::new(
        Duration::from_secs(cfg.web_refresh_s),
        Duration::from_millis(cfg.web_db_timeout_ms),
        zone,
    );
    tokio::spawn(crate::web::board::refresh(
        pool,
        board.clone(),
        defaults,
        shutdown.clone(),
    ));
    info!(%addr, login = !logins.is_empty(), "serving the status page");
    serve(
        listener,
        crate::web::router(board, logins),
        WEB_DOORS,
        shutdown,
        "status page",
    )
    .await
}
