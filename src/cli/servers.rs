//! The two HTTP servers: `events` (the vendors' webhooks) and `web` (the status page). Each
//! reads its config, connects as its own role, listens, and serves until `shutdown`, letting
//! the requests in flight finish.

use std::net::SocketAddr;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::problem::{Patience, Who};
use super::{config_failure, Db};
use crate::config::{DbConfig, EventsConfig, FromEnv, WebConfig};
use crate::exit;

/// The database as `who`, waiting for the schema like a worker, and a listener on `addr`
/// (`var` names the setting a busy address is blamed on); else the exit code, said once.
async fn connect_and_listen(
    db: &DbConfig,
    who: Who,
    addr: SocketAddr,
    var: &str,
) -> Result<(PgPool, tokio::net::TcpListener), u8> {
    let db = Db::new(db, who);
    let pool = db
        .ready_pool(
            Patience::Worker,
            Duration::from_secs(db.cfg.db_connect_retry_s),
        )
        .await?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        eprintln!("configuration error: {var}: cannot listen on {addr} ({e})");
        exit::CONFIG
    })?;
    Ok((pool, listener))
}

/// Serves `app` until `shutdown`; the requests in flight finish first.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: CancellationToken,
    what: &str,
) -> u8 {
    match axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
    {
        Ok(()) => exit::DONE,
        Err(e) => {
            error!(error = %e, "the {what} server failed");
            1
        }
    }
}

/// `events`: the webhook server, until `shutdown`.
pub(super) async fn events(db: &DbConfig, shutdown: CancellationToken) -> u8 {
    let cfg = match EventsConfig::from_env() {
        Ok(c) => c,
        Err(e) => return config_failure(e),
    };
    let (addr, listeners) = match cfg.socket().and_then(|a| Ok((a, cfg.listeners()?))) {
        Ok(x) => x,
        Err(e) => return config_failure(e),
    };
    if let Some(m) = cfg.metrics_addr.as_ref().and_then(|a| a.parse().ok()) {
        let name = std::env::var("HOSTNAME").unwrap_or_else(|_| "events".into());
        if let Err(e) = crate::metrics::install(m, &name) {
            eprintln!("configuration error: METRICS_ADDR: cannot serve metrics on {m} ({e})");
            return exit::CONFIG;
        }
    }
    let (pool, listener) = match connect_and_listen(db, Who::Events, addr, "EVENTS_ADDR").await {
        Ok(x) => x,
        Err(code) => return code,
    };
    crate::events::server::start_counters_at_zero(&listeners);
    info!(%addr, vendors = ?listeners.vendors(), "listening for the vendors' events");
    tokio::spawn(crate::events::server::prune_tokens(
        pool.clone(),
        shutdown.clone(),
    ));
    let app = crate::events::server::router(pool, listeners);
    serve(listener, app, shutdown, "events").await
}

/// `web`: the status page, until `shutdown`. It listens at once (`/healthz` answers 503 until
/// the first round of reads is done) and reads the database in the background.
pub(super) async fn web(db: &DbConfig, ratio: f64, shutdown: CancellationToken) -> u8 {
    let cfg = match WebConfig::from_env() {
        Ok(c) => c,
        Err(e) => return config_failure(e),
    };
    let (addr, logins) = match cfg.socket().and_then(|a| Ok((a, cfg.logins()?))) {
        Ok(x) => x,
        Err(e) => return config_failure(e),
    };
    let (pool, listener) = match connect_and_listen(db, Who::Web, addr, "WEB_ADDR").await {
        Ok(x) => x,
        Err(code) => return code,
    };
    let board = crate::web::board::Board::new(
        Duration::from_secs(cfg.web_refresh_s),
        Duration::from_millis(cfg.web_db_timeout_ms),
    );
    tokio::spawn(crate::web::board::refresh(
        pool,
        board.clone(),
        ratio,
        shutdown.clone(),
    ));
    info!(%addr, login = !logins.is_empty(), "serving the status page");
    serve(
        listener,
        crate::web::router(board, logins),
        shutdown,
        "status page",
    )
    .await
}
