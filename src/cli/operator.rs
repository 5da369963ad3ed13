//! The operator commands: `import`, `status`, `pause`, `resume`, `retry-failed` and `configure`.
//! Each one does its work through the library ([`crate::store`], [`crate::import`],
//! [`crate::status`]), prints what happened and returns the exit code; a database error ends it
//! through [`connect::report`]. Output never contains an address.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::Command;
use crate::exit;
use crate::store::campaigns;
use crate::store::connect;
use crate::store::{RetryFilter, Store};

/// Runs one operator command on a pool over a migrated database.
pub async fn dispatch(cmd: Command, pool: &PgPool, shutdown: CancellationToken) -> u8 {
    let result = match cmd {
        Command::Import {
            campaign,
            file,
            skip_invalid,
        } => return super::import::import_cmd(pool, &campaign, file, skip_invalid).await,
        Command::Status {
            campaign,
            watch,
            json,
            interval_ms,
            max_permanent_failure_ratio,
        } => {
            let interval = Duration::from_millis(interval_ms.max(100));
            let ratio = max_permanent_failure_ratio;
            return super::status::status_cmd(
                pool, &campaign, watch, json, interval, ratio, shutdown,
            )
            .await;
        }
        Command::Pause { campaign, reason } => pause(pool, &campaign, reason.as_deref()).await,
        Command::Resume { campaign } => resume(pool, &campaign).await,
        Command::RetryFailed {
            campaign,
            statuses,
            classes,
            since,
            dry_run,
        } => {
            let filter = RetryFilter {
                statuses: statuses.iter().map(|s| *s as i16).collect(),
                classes,
                since,
            };
            retry_failed(pool, &campaign, &filter, dry_run).await
        }
        Command::Configure {
            campaign,
            template,
            max_permanent_failure_ratio,
        } => {
            configure(
                pool,
                &campaign,
                template.as_deref(),
                max_permanent_failure_ratio,
            )
            .await
        }
        Command::Migrate | Command::Run | Command::Serve => unreachable!("not an operator command"),
    };
    match result {
        Ok(()) => exit::DONE,
        Err(e) => connect::report(&e),
    }
}

fn at(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

async fn pause(pool: &PgPool, campaign: &str, reason: Option<&str>) -> Result<(), sqlx::Error> {
    let p = campaigns::pause(pool, campaign, campaigns::BY_OPERATOR, reason).await?;
    println!(
        "{campaign}: paused since {} by {}{}. Running pods stop within a second; `resume` lifts it.",
        at(&p.at),
        p.by,
        p.reason.map(|r| format!(" ({r})")).unwrap_or_default()
    );
    Ok(())
}

async fn resume(pool: &PgPool, campaign: &str) -> Result<(), sqlx::Error> {
    match campaigns::resume(pool, campaign).await? {
        Some(p) => println!(
            "{campaign}: resumed (was paused by {} since {}). `serve` pods continue by themselves; start the Job again for `run`.",
            p.by,
            at(&p.at)
        ),
        None => println!("{campaign}: was not paused; nothing changed"),
    }
    Ok(())
}

async fn retry_failed(
    pool: &PgPool,
    campaign: &str,
    filter: &RetryFilter,
    dry_run: bool,
) -> Result<(), sqlx::Error> {
    let n = Store::new(pool.clone(), campaign)
        .retry_failed(filter, dry_run)
        .await?;
    if dry_run {
        println!("{campaign}: {n} failed rows match; nothing changed (--dry-run)");
    } else {
        println!("{campaign}: {n} failed rows put back to pending with attempts reset");
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

async fn configure(
    pool: &PgPool,
    campaign: &str,
    template: Option<&str>,
    ratio: Option<f64>,
) -> Result<(), sqlx::Error> {
    campaigns::set_settings(pool, campaign, template, ratio).await?;
    let s = campaigns::settings(pool, campaign).await?;
    println!(
        "{campaign}: template {}, failure threshold {}",
        s.template,
        s.max_permanent_failure_ratio
            .map(|r| r.to_string())
            .unwrap_or_else(|| "MAX_PERMANENT_FAILURE_RATIO".into())
    );
    Ok(())
}
