//! `campaign-sender resume`: lifts a campaign's pause and the refusals that stop it, or one
//! limit key's refusal ([`crate::store::account`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{at, Needs, OperatorCommand};
use crate::cli::CliResult;
use crate::store::account;
use crate::store::campaigns;

/// Lifts a pause (an operator's or an automatic one) and a provider refusal (401/403/404/405
/// stopped every pod of the limit key: after fixing the key or the URL). `--key` lifts only
/// a limit key's refusal, for every campaign on it. Pods in `serve` continue by themselves;
/// a Job must be started again.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["campaign", "key"]))]
pub struct Resume {
    #[arg(long)]
    campaign: Option<String>,
    /// A `RATE_LIMIT_KEY` (default: MAIL_URL's `host[:port]`).
    #[arg(long)]
    key: Option<String>,
}

impl OperatorCommand for Resume {
    fn needs(&self) -> Needs<'_> {
        self.campaign
            .as_deref()
            .map_or(Needs::Nothing, Needs::Existing)
    }

    /// `resume --campaign C` lifts the campaign's pause and every refusal that stops it;
    /// `resume --key K` lifts the key's refusal only.
    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let (campaign, key) = (self.campaign.as_deref(), self.key.as_deref());
        if let Some(c) = campaign {
            match campaigns::resume(pool, c).await? {
                Some(p) => println!(
                    "{c}: resumed (was paused by {} since {}). `serve` pods continue by themselves; start the Job again for `run`.",
                    p.by,
                    at(&p.at)
                ),
                None => println!("{c}: was not paused"),
            }
            for (k, r) in account::lift_refusals_of(pool, c).await? {
                println!(
                    "{k}: refusal lifted (was: {}, since {}). Pods of every campaign on this key send again.",
                    r.kind.advice(r.status).split(';').next().unwrap_or_default(),
                    at(&r.since)
                );
            }
        }
        if let Some(k) = key {
            match account::lift_refusal(pool, k).await? {
                Some(r) => println!(
                    "{k}: refusal lifted (was: the provider answered {} since {}). Pods of every campaign on this key send again.",
                    r.status,
                    at(&r.since)
                ),
                None => println!("{k}: was not refused; nothing changed"),
            }
        }
        Ok(())
    }
}
