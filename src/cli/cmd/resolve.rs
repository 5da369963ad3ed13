//! `campaign-sender resolve`: settles `unconfirmed` rows — maybe delivered, past the provider's
//! idempotency window — as sent or to be sent again ([`crate::store::suppressions`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Needs, OperatorCommand};
use crate::cli::args::parse_since;
use crate::cli::CliResult;
use crate::exit::Exit;
use crate::store::suppressions::Settle;
use crate::store::Store;

/// Settles the campaign's `unconfirmed` rows — maybe delivered, past the provider's
/// idempotency window (IDEMPOTENCY_WINDOW_S), so not re-sent by themselves — and prints
/// how many. `--assume-sent` risks a member missing the mail; `--resend` risks a member
/// getting it twice (opted-out rows are never resent).
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("how").required(true).args(["assume_sent", "resend"]))]
pub struct Resolve {
    #[arg(long)]
    campaign: String,
    /// Count them as sent (`sent_at` = when the unknown attempt began).
    #[arg(long)]
    assume_sent: bool,
    /// Send them again under the same idempotency key.
    #[arg(long)]
    resend: bool,
    /// Only rows whose unknown attempt began at or after this: RFC 3339 or a time ago
    /// (`90m`, `2h`).
    #[arg(long, value_parser = parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Count, change nothing.
    #[arg(long)]
    dry_run: bool,
}

impl OperatorCommand for Resolve {
    fn needs(&self) -> Needs<'_> {
        Needs::Existing(&self.campaign)
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let (campaign, since, dry_run) = (self.campaign.as_str(), self.since, self.dry_run);
        let how = match (self.assume_sent, self.resend) {
            (true, _) => Settle::AssumeSent,
            (false, true) => Settle::Resend,
            (false, false) => {
                eprintln!("resolve: say how, --assume-sent or --resend; nothing changed");
                return Err(Exit::Usage.into());
            }
        };
        let store = Store::new(pool.clone(), campaign);
        let n = store.resolve(how, since, dry_run).await?;
        let done = match (dry_run, how) {
            (true, _) => "match; nothing changed (--dry-run)",
            (false, Settle::AssumeSent) => "counted as sent (a member may have missed the mail)",
            (false, Settle::Resend) => {
                "put back to pending, to be sent again under the same key (a member may get it twice)"
            }
        };
        println!("{campaign}: {n} unconfirmed rows {done}");
        let left = store.unconfirmed().await?;
        if left.count > 0 && !dry_run {
            println!(
                "{campaign}: {} unconfirmed rows left (opted out, or outside --since)",
                left.count
            );
        }
        Ok(())
    }
}
