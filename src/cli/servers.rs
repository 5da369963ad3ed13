//! What the two HTTP servers share (`events`, `web`: [`super::cmd`]): connecting and listening,
//! and serving until `shutdown` while the requests in flight finish.

use std::net::SocketAddr;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::problem::Patience;
use super::{CliError, CliResult, Db};
use crate::exit::Exit;
use crate::http::Doors;
use crate::store::connect::Session;

/// The status page's door: people and Prometheus, a few at a time, and no request bodies.
pub(super) const WEB_DOORS: Doors = Doors {
    max_connections: 256,
    head_timeout: Duration::from_secs(10),
    shutdown_grace: Duration::from_secs(10),
};

/// The database, waiting for the schema like a worker, and a listener on `addr` (`var` names
/// the setting a busy address is blamed on).
pub(super) async fn connect_and_listen(
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
pub(super) async fn serve(
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
