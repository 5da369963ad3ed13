//! Serving a router on a public door with every wait bounded: what `axum::serve` leaves open
//! (no cap on connections, no deadline on a request's head, a graceful shutdown that waits
//! for ever on a peer that never finishes) is closed here with what hyper already gives.
//!
//! - **At most [`Doors::max_connections`] connections.** The accept loop takes a permit before
//!   each `accept`; past the cap new peers wait in the kernel's backlog, costing us nothing.
//! - **A request's head within [`Doors::head_timeout`]**, and an idle keep-alive connection
//!   closed after it too: hyper's `header_read_timeout`, which runs from the moment hyper waits
//!   for a head (a fresh connection or one kept alive), with tokio's timer.
//! - **A body within its own deadline**: the handler's ([`super::body`]); hyper reads a body
//!   only as the handler asks for it, so an unread body costs one read buffer.
//! - **Shutdown within [`Doors::shutdown_grace`]**: on `shutdown` the listener closes, every
//!   connection is told to finish its request in flight and close; those still open when the
//!   grace is over are dropped with the runtime. A vendor whose request was cut gets no 2xx and
//!   retries: nothing is lost (2xx only after the commit).

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, warn};

/// The bounds of one public door (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct Doors {
    /// The most connections open at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// How long a request's head may take, and how long a kept-alive connection may sit idle.
    pub head_timeout: Duration,
    /// How long requests in flight get to finish after `shutdown`.
    pub shutdown_grace: Duration,
}

/// Serves `app` on `listener` until `shutdown`, then lets the requests in flight finish for at
/// most [`Doors::shutdown_grace`]. Returns once the listener is closed and every connection has
/// ended or the grace is over.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    doors: Doors,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let slots = std::sync::Arc::new(Semaphore::new(doors.max_connections));
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    loop {
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let (tcp, _) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and the like: wait a moment rather than spin.
                    warn!(error = %e, "accepting a connection failed; trying again in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let closing = closing.child_token();
        connections.spawn(async move {
            connection(tcp, app, doors.head_timeout, closing).await;
            drop(slot);
        });
    }
    drop(listener);
    connections.close();
    closing.cancel();
    if tokio::time::timeout(doors.shutdown_grace, connections.wait())
        .await
        .is_err()
    {
        warn!(
            open = connections.len(),
            grace_s = doors.shutdown_grace.as_secs(),
            "connections still open after the shutdown grace are dropped; their peers retry"
        );
    }
    Ok(())
}

/// One connection, HTTP/1.1, until it closes or `closing` asks it to finish.
async fn connection(
    tcp: tokio::net::TcpStream,
    app: Router,
    head_timeout: Duration,
    closing: CancellationToken,
) {
    let service =
        TowerToHyperService::new(app.map_request(|r: Request<Incoming>| r.map(Body::new)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    let conn = builder.serve_connection(TokioIo::new(tcp), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        _ = closing.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        debug!(error = %e, "a connection ended with an error");
    }
}
