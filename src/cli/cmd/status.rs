//! `campaign-sender status`: its arguments and the terminal side: once, or `--watch` until the campaign is done
//! (a redrawn bar on a terminal, a line per interval otherwise), as text or `--json`. What it
//! shows is gathered by [`crate::status`].

use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Needs, OperatorCommand};
use crate::cli::{config_failure, CliResult};
use crate::status;

/// Where a campaign is: counts by state, rate and ETA, pause, live pods and their rate
/// shares, top failure reasons.
#[derive(Args, Debug)]
pub struct Status {
    #[arg(long)]
    campaign: String,
    /// Redraw every --interval-ms until the campaign is done (Ctrl-C stops watching).
    #[arg(long)]
    watch: bool,
    /// JSON (one object per line with --watch) instead of text.
    #[arg(long)]
    json: bool,
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    interval_ms: u64,
    /// For the failure budget shown, unless the campaign's settings row has its own.
    #[arg(long, env = "MAX_PERMANENT_FAILURE_RATIO", default_value_t = 0.01)]
    max_permanent_failure_ratio: f64,
}

impl OperatorCommand for Status {
    fn needs(&self) -> Needs<'_> {
        Needs::Existing(&self.campaign)
    }

    async fn run(self, pool: &PgPool, cancel: CancellationToken) -> CliResult {
        let (campaign_id, watch, json) = (self.campaign.as_str(), self.watch, self.json);
        let interval = Duration::from_millis(self.interval_ms.max(100));
        let defaults = status::Defaults::with_env_lines(self.max_permanent_failure_ratio)
            .map_err(config_failure)?;
        let tty = std::io::stdout().is_terminal() && !json;
        let bar = (watch && tty).then(|| {
            ProgressBar::new(0).with_style(
                ProgressStyle::with_template("{msg}\n{wide_bar} {pos}/{len} settled ({percent}%)")
                    .expect("template"),
            )
        });
        loop {
            let s = status::gather(pool, campaign_id, defaults).await?;
            let c = &s.progress.counts;
            match &bar {
                Some(bar) => {
                    bar.set_length(c.total as u64);
                    bar.set_position(c.settled() as u64);
                    bar.set_message(status::render(&s).trim_end().to_string());
                }
                None if json => {
                    println!("{}", serde_json::to_string(&s).expect("status serialises"))
                }
                None if watch => println!("{} {}", s.at.format("%H:%M:%S"), status::one_line(&s)),
                None => print!("{}", status::render(&s)),
            }
            if !watch || s.done {
                if let Some(bar) = &bar {
                    bar.finish();
                }
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = cancel.cancelled() => {
                    if let Some(bar) = &bar { bar.abandon(); }
                    return Ok(());
                }
            }
        }
    }
}
