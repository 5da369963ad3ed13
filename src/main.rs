//! `campaign-sender`: parse the command line, set up logging and the runtime, turn SIGTERM and
//! SIGINT into the library's shutdown token, run, exit with the code the library returns. All
//! the work is in the library ([`campaign_sender`]).

use clap::Parser as _;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use campaign_sender::cli::{self, Cli};
use campaign_sender::exit::{self, Exit};

fn main() -> std::process::ExitCode {
    let args = match Cli::try_parse() {
        Ok(a) => a,
        Err(e) => return parse_failure(e),
    };
    campaign_sender::telemetry::init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let code = rt.block_on(async {
        let shutdown = shutdown_on_signals();
        cli::run(args, shutdown).await
    });
    std::process::ExitCode::from(code)
}

/// A command line that cannot be honoured: help and version print and exit 0; every mistake
/// in the command line — an unknown flag, a missing argument, a value missing or not what its
/// option takes (a malformed window, an age no date can be) — is a usage error, 64, as
/// sysexits puts bad command-line syntax under `EX_USAGE` (never clap's 2, which is our "too
/// many failures"; 78 is for the environment's variables).
fn parse_failure(e: clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    let code = match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
        _ => Exit::Usage.code(),
    };
    let _ = e.print();
    std::process::ExitCode::from(code)
}

/// The process's shutdown token: the first SIGTERM (Kubernetes) or SIGINT (a terminal) cancels
/// it — no new claims or sends; in-flight requests finish and their results are written — and a
/// second one exits at once (unwritten rows return after their lease).
fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        exit::note_signal(signal().await);
        t.cancel();
        signal().await;
        warn!("second signal: exiting now (a worker's unwritten rows return after their lease; an import is rolled back)");
        std::process::exit(Exit::Incomplete.code().into());
    });
    token
}

/// Waits for SIGTERM or SIGINT; returns its number.
async fn signal() -> u8 {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => 15,
        _ = tokio::signal::ctrl_c() => 2,
    }
}
