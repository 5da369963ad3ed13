//! `campaign-sender suppress --lift-at-vendor --campaign C`: the addresses of campaign C that
//! the vendor reported refused for our domain's fault, taken off the vendor's own suppression
//! list through its API ([`crate::provider::unlist`]: SES, SendGrid, Postmark, Mailgun,
//! Resend), so that a member refused because of our DKIM, not their mailbox, is mailed by the
//! next campaign. An address on our own list for any reason is left listed at the vendor too.
//!
//! The vendor is `MAIL_PROVIDER` with its settings as `run` reads them (the operator pod needs
//! the vendor's key: manifests/base/operator.yaml); the events kept are that vendor's only.
//! Addresses go one request at a time, each lift recorded as it is answered, so a rerun asks
//! only for what is left. A 429 or an unavailable vendor is retried under the run's retry
//! policy (`MAX_ATTEMPTS`, `BACKOFF_*`, `Retry-After`); past it the command stops and says to
//! run again. Output never contains an address.
//!
//! Exit: 0 every address lifted or not listed; 1 some stay listed (a vendor's refusal of one,
//! a wait outlasted, a signal): run again; 4 the key may not (401/403): nothing more tried;
//! 78 the vendor's settings are missing, or `MAIL_PROVIDER=json`, which has no such API.

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::cli::{config_failure, CliResult};
use crate::config::RunConfig;
use crate::exit::Exit;
use crate::outcome::{backoff, RetryPolicy};
use crate::provider::{Kind, Provider, Unlisted};
use crate::store::sender_refused::{self, Refused};

/// What the lift did, for the one line it prints.
#[derive(Debug, Default)]
struct Tally {
    lifted: u64,
    not_listed: u64,
    /// Answered otherwise, by status (0: no answer): these stay listed.
    failed: Vec<u16>,
    /// Not asked: the command stopped first.
    left: u64,
}

/// Lifts campaign `campaign`'s addresses at the vendor and prints what it did.
pub async fn lift_at_vendor(
    pool: &PgPool,
    campaign: &str,
    shutdown: CancellationToken,
) -> CliResult {
    let cfg = RunConfig::for_vendor_calls(campaign, std::env::vars()).map_err(config_failure)?;
    let kind = cfg.mail_provider;
    if kind == Kind::Json {
        eprintln!("configuration error: MAIL_PROVIDER: json (our own contract) has no suppression list to lift; set MAIL_PROVIDER to the vendor the campaign was sent through; nothing done");
        return Err(Exit::Config.into());
    }
    let provider = cfg.provider().map_err(config_failure)?;
    if let Err(e) = provider.prepare().await {
        eprintln!("configuration error: {e}; nothing done");
        return Err(Exit::Config.into());
    }
    let refused = sender_refused::of_campaign(pool, campaign, kind.as_str()).await?;
    let (ours, rest): (Vec<Refused>, Vec<Refused>) = refused.into_iter().partition(|r| r.ours);
    let (before, todo): (Vec<Refused>, Vec<Refused>) = rest.into_iter().partition(|r| r.lifted);
    let policy = cfg.retry_policy();
    let mut tally = Tally::default();
    let mut refusal = None;
    for (i, r) in todo.iter().enumerate() {
        if shutdown.is_cancelled() {
            tally.left = (todo.len() - i) as u64;
            break;
        }
        match patiently(&provider, &r.email, &policy, &shutdown).await {
            Unlisted::Lifted => tally.lifted += 1,
            Unlisted::NotListed => tally.not_listed += 1,
            Unlisted::Refused { status } => {
                refusal = Some(status);
                tally.left = (todo.len() - i) as u64;
                break;
            }
            Unlisted::Failed { status } => {
                tally.failed.push(status);
                continue;
            }
            Unlisted::Throttled { .. } | Unlisted::Unavailable { .. } | Unlisted::NoApi => {
                tally.left = (todo.len() - i) as u64;
                break;
            }
        }
        sender_refused::lifted(pool, &r.email).await?;
    }
    print(
        campaign,
        kind,
        (ours.len(), before.len(), todo.len()),
        &tally,
    );
    if let Some(status) = refusal {
        eprintln!("{} refused the key ({status}): it may not change the suppression list; give MAIL_API_KEY that permission (SES: ses:DeleteSuppressedDestination) and run again", kind.as_str());
        return Err(Exit::AccountRefused.into());
    }
    if !tally.failed.is_empty() || tally.left > 0 {
        return Err(Exit::Incomplete.into());
    }
    Ok(())
}

/// One address's lift, asked again under the run's retry policy while the vendor throttles or
/// does not answer (and no signal came).
async fn patiently(
    provider: &Provider,
    email: &str,
    policy: &RetryPolicy,
    shutdown: &CancellationToken,
) -> Unlisted {
    let mut attempt = 1;
    loop {
        let answer = provider.unlist(email).await;
        let wait = match answer {
            Unlisted::Throttled { retry_after } => retry_after,
            Unlisted::Unavailable { .. } => None,
            done => return done,
        };
        if attempt >= policy.max_attempts {
            return answer;
        }
        let pause = backoff(policy, attempt, wait, rand::random());
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => return answer,
        }
        attempt += 1;
    }
}

/// The one line of what was done, and a second of what is left, never an address.
fn print(campaign: &str, kind: Kind, (ours, before, todo): (usize, usize, usize), t: &Tally) {
    println!(
        "lift-at-vendor: campaign {} via {}: {} addresses refused for our domain's fault; lifted {}, not listed {}, failed {}, not asked {}; {before} lifted before; {ours} left listed (on our list too)",
        crate::shown::quoted(campaign),
        kind.as_str(),
        ours + before + todo,
        t.lifted,
        t.not_listed,
        t.failed.len(),
        t.left,
    );
    if !t.failed.is_empty() {
        let mut statuses = t.failed.clone();
        statuses.sort_unstable();
        statuses.dedup();
        let shown: Vec<String> = statuses.iter().map(u16::to_string).collect();
        println!(
            "lift-at-vendor: {} stay listed at {} (answered {}); run again, or lift them in its dashboard",
            t.failed.len(),
            kind.as_str(),
            shown.join(", ")
        );
    }
    if t.left > 0 {
        println!(
            "lift-at-vendor: {} not asked yet; run again to go on",
            t.left
        );
    }
}
