//! `campaign-sender pause`: the campaign's kill switch ([`crate::store::campaigns::pause`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{at, Needs, OperatorCommand};
use crate::cli::CliResult;
use crate::store::campaigns;

/// The kill switch: every running pod stops claiming and sending within a second, lets
/// in-flight requests finish and releases the rest; `run` exits 3 while it is on, `serve`
/// idles.
#[derive(Args, Debug)]
pub struct Pause {
    #[arg(long)]
    campaign: String,
    /// Shown by `status`.
    #[arg(long)]
    reason: Option<String>,
}

impl OperatorCommand for Pause {
    fn needs(&self) -> Needs<'_> {
        Needs::Existing(&self.campaign)
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let (campaign, reason) = (self.campaign.as_str(), self.reason.as_deref());
        let p = campaigns::pause(pool, campaign, campaigns::BY_OPERATOR, reason).await?;
        let ours = p.by == campaigns::BY_OPERATOR && p.reason.as_deref() == reason;
        if ours {
            println!(
                "{campaign}: paused since {} by {}{}. Running pods stop within a second; `resume` lifts it.",
                at(&p.at),
                p.by,
                said(&p)
            );
        } else {
            // The first pause wins: its reason is the one `status` shows.
            println!(
                "{campaign}: already paused since {} by {}{}; that pause stays, your reason was not recorded. `resume` lifts it.",
                at(&p.at),
                p.by,
                said(&p)
            );
        }
        Ok(())
    }
}

fn said(p: &campaigns::Pause) -> String {
    p.reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default()
}
