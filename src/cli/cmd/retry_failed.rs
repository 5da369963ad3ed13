//! `campaign-sender retry-failed`: failed rows back to `pending` ([`crate::store::failed`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Needs, OperatorCommand};
use crate::cli::args::parse_since;
use crate::cli::CliResult;
use crate::store::campaigns;
use crate::store::{RetryFilter, Store};

/// Puts failed rows back to `pending` with their attempts reset, and prints how many.
/// Filters narrow the selection; opted-out rows are never selected.
#[derive(Args, Debug)]
pub struct RetryFailed {
    #[arg(long)]
    campaign: String,
    /// Only rows whose last provider status is one of these (e.g. `--status 422,400`).
    #[arg(long = "status", value_delimiter = ',', value_name = "CODE")]
    statuses: Vec<u16>,
    /// Only rows of these error classes (e.g. `rejected`, `invalid_email`, `timeout`).
    #[arg(long = "class", value_delimiter = ',', value_name = "CLASS")]
    classes: Vec<String>,
    /// Only rows that failed at or after this: RFC 3339 (`2026-12-02T02:00:00+09:00`) or
    /// a time ago (`90m`, `2h`).
    #[arg(long, value_parser = parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Count, change nothing.
    #[arg(long)]
    dry_run: bool,
}

impl OperatorCommand for RetryFailed {
    fn needs(&self) -> Needs<'_> {
        Needs::Existing(&self.campaign)
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let (campaign, dry_run) = (self.campaign.as_str(), self.dry_run);
        let filter = RetryFilter {
            statuses: self.statuses.iter().map(|s| *s as i16).collect(),
            classes: self.classes,
            since: self.since,
        };
        let n = Store::new(pool.clone(), campaign)
            .retry_failed(&filter, dry_run)
            .await?;
        if dry_run {
            println!("{campaign}: {n} failed rows match; nothing changed (--dry-run)");
        } else {
            println!("{campaign}: {n} failed rows put back to pending with attempts reset");
        }
        if n == 0 {
            return Ok(());
        }
        // (The rows are back either way: a failed look at the pause only leaves the hint out.)
        if let Ok(Some(p)) = campaigns::paused(pool, campaign).await {
            println!(
                "{campaign}: still paused by {}; `campaign-sender resume --campaign {campaign}` to send them",
                p.by
            );
        }
        Ok(())
    }
}
