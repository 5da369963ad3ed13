//! `campaign-sender limit`: shows a limit key, or sets its rate live
//! ([`crate::store::account`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{at, Needs, OperatorCommand};
use crate::cli::args::parse_rate;
use crate::cli::CliResult;
use crate::store::account::{self, KeyState};

/// Shows or sets the provider's limit for a `RATE_LIMIT_KEY` while pods run: `--rate R`
/// overrides every pod's MAIL_RATE_PER_S, lower or higher, within a second; `--clear`
/// returns to it. Without either, shows the key: limit, pods, refusal, daily quota.
#[derive(Args, Debug)]
pub struct Limit {
    /// The `RATE_LIMIT_KEY` (default: MAIL_URL's `host[:port]`, e.g. `api.mail.example`).
    #[arg(long)]
    key: String,
    /// Requests per second for the whole fleet of the key.
    #[arg(long, value_parser = parse_rate, conflicts_with = "clear")]
    rate: Option<f64>,
    /// Back to the pods' own MAIL_RATE_PER_S.
    #[arg(long)]
    clear: bool,
}

impl OperatorCommand for Limit {
    fn needs(&self) -> Needs<'_> {
        Needs::Nothing
    }

    /// `limit --key K [--rate R | --clear]`: sets or clears the live limit, then shows the key.
    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let (key, rate, clear) = (self.key.as_str(), self.rate, self.clear);
        if rate.is_some() || clear {
            account::set_limit(pool, key, rate).await?;
        }
        match account::key_state(pool, key).await? {
            Some(k) => print!("{}", render(&k)),
            None => println!("{key}: no pod has used this limit key and no limit was set"),
        }
        if let Some(r) = rate {
            println!("{key}: {r}/s for every pod of the key from their next round (within a second); `--clear` returns to MAIL_RATE_PER_S");
        } else if clear {
            println!("{key}: back to the pods' MAIL_RATE_PER_S from their next round");
        }
        Ok(())
    }
}

/// A key in a few lines: its limit and where it comes from, a refusal, the quota, the pods.
fn render(k: &KeyState) -> String {
    let mut o = format!("{}\n", k.limit_line());
    if let Some(r) = &k.refused {
        o += &format!(
            "  REFUSED since {}: {}\n",
            at(&r.since),
            r.kind.advice(r.status)
        );
    }
    if let Some(q) = &k.quota {
        o += &format!(
            "  daily quota: {} of {} used in the last 24 h\n",
            q.used, q.daily
        );
    }
    for m in &k.members {
        o += &format!(
            "  {:<24} {:>7.1}/s (campaign {})\n",
            m.worker, m.share_per_s, m.campaign_id
        );
    }
    o
}
