//! The root [`CancellationToken`]: SIGTERM (Kubernetes) or SIGINT (a terminal) cancels it once;
//! everything that must stop (claiming, starting sends, idle waits) listens to it. In-flight
//! requests are not cut: they finish within the request timeout and their results are written.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// Spawns the signal listener and returns the root token.
pub fn root_token() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!(
            "shutdown requested: no new sends; finishing in-flight requests and releasing the rest"
        );
        t.cancel();
        wait_for_signal().await;
        warn!("second signal: exiting now; unwritten rows return after their lease");
        std::process::exit(crate::report::exit::INCOMPLETE as i32);
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
