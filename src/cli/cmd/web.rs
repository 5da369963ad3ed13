//! `campaign-sender web`: the status page ([`crate::web`]), until `shutdown`.

use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::servers::{connect_and_listen, serve, WEB_DOORS};
use crate::cli::{config_failure, CliResult, Db};
use crate::config::{FromEnv, WebConfig};

/// The status page (WEB_ADDR, default 127.0.0.1:8081): every campaign, its progress, rate,
/// ETA, charts and the provider's events, refreshing itself; read-only. SIGTERM stops it.
#[derive(Args, Debug)]
pub struct Web {
    /// For the failure budget shown, unless the campaign's settings row has its own.
    #[arg(long, env = "MAX_PERMANENT_FAILURE_RATIO", default_value_t = 0.01)]
    max_permanent_failure_ratio: f64,
}

impl Web {
    /// `web`: the status page, until `shutdown`. It listens at once (`/healthz` answers 503 until
    /// the first round of reads is done) and reads the database in the background.
    pub async fn run(self, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
        let ratio = self.max_permanent_failure_ratio;
        let cfg = WebConfig::from_env().map_err(config_failure)?;
        let addr = cfg.socket().map_err(config_failure)?;
        let logins = cfg.logins().map_err(config_failure)?;
        let zone = cfg.zone().map_err(config_failure)?;
        let defaults = crate::status::Defaults::with_env_lines(ratio).map_err(config_failure)?;
        let (pool, listener) = connect_and_listen(db, addr, "WEB_ADDR").await?;
        let board = crate::web::board::Board::new(cfg.refresh(), cfg.db_timeout(), zone);
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
}
