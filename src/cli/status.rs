//! `campaign-sender status`, the terminal side: once, or `--watch` until the campaign is done
//! (a redrawn bar on a terminal, a line per interval otherwise), as text or `--json`. What it
//! shows is gathered by [`crate::status`].

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::CliResult;
use crate::status;

/// How `status` shows the campaign.
pub(super) struct Watch {
    /// Redraw every `interval` until done.
    pub(super) watch: bool,
    pub(super) json: bool,
    pub(super) interval: Duration,
}

pub(super) async fn status_cmd(
    pool: &PgPool,
    campaign_id: &str,
    how: Watch,
    defaults: status::Defaults,
    cancel: CancellationToken,
) -> CliResult {
    let Watch {
        watch,
        json,
        interval,
    } = how;
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
            None if json => println!("{}", serde_json::to_string(&s).expect("status serialises")),
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
