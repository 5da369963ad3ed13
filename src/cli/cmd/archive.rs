//! `campaign-sender archive`: a finished campaign's rows out of the work table, into the compact
//! `campaign_archive`, in batches that never block the campaigns still sending
//! ([`crate::store::archive`]). Run as the schema owner (it deletes rows the operator role may
//! not): `DATABASE_URL=$MIGRATE_DATABASE_URL campaign-sender archive …`.

use std::time::{Duration, Instant};

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Needs, OperatorCommand};
use crate::cli::args::parse_age;
use crate::cli::{CliError, CliResult};
use crate::exit::Exit;
use crate::store::archive::{self, Archived};

/// Moves a finished campaign's rows out of the work table, in small batches that never
/// block the campaigns still sending: per recipient into `campaign_archive` (member, outcome,
/// when sent, last status, attempts; no address), its final counts into
/// `archived_campaigns`, which `status` keeps showing. Refuses a campaign with pending or
/// sending rows (exit 1). Run as the schema owner (it deletes rows): `DATABASE_URL` =
/// the migrate URL. Interrupted, it resumes where it stopped.
#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["campaign", "older_than"]))]
pub struct Archive {
    #[arg(long)]
    campaign: Option<String>,
    /// Every finished campaign unchanged for this long (`30d`, `12h`); under a day needs
    /// `--yes` (it takes campaigns that finished moments ago, and their one-click links).
    #[arg(long, value_parser = parse_age, value_name = "AGE")]
    older_than: Option<chrono::TimeDelta>,
    /// Say what would move, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// With --older-than under a day: yes, archive campaigns that recent.
    #[arg(long, requires = "older_than")]
    yes: bool,
}

/// The youngest `--older-than` taken without `--yes`.
const AGE_FLOOR: chrono::TimeDelta = chrono::TimeDelta::days(1);

impl OperatorCommand for Archive {
    fn needs(&self) -> Needs<'_> {
        self.campaign
            .as_deref()
            .map_or(Needs::Nothing, Needs::Existing)
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let which = match (self.campaign, self.older_than) {
            (Some(c), _) => Which::One(c),
            (None, Some(age)) if age < AGE_FLOOR && !self.yes && !self.dry_run => {
                eprintln!(
                    "archive: an --older-than under a day takes campaigns that finished moments ago. Look with --dry-run, then add --yes; nothing archived"
                );
                return Err(Exit::Usage.into());
            }
            (None, Some(age)) => Which::OlderThan(age),
            (None, None) => {
                eprintln!("archive: name a campaign (--campaign) or an age (--older-than); nothing archived");
                return Err(Exit::Usage.into());
            }
        };
        archive(pool, which, self.dry_run).await
    }
}

enum Which {
    One(String),
    OlderThan(chrono::TimeDelta),
}

async fn archive(pool: &PgPool, which: Which, dry_run: bool) -> CliResult {
    let campaigns = match which {
        Which::One(c) => vec![c],
        Which::OlderThan(age) => {
            // parse_age took only an age a date can be ago.
            let cutoff = chrono::Utc::now() - age;
            let found = archive::finished_before(pool, cutoff).await?;
            println!(
                "{} finished campaigns unchanged since {}: {}",
                found.len(),
                cutoff.format("%Y-%m-%d %H:%M UTC"),
                found.join(", ")
            );
            found
        }
    };
    // Every campaign is tried; one that is not finished makes the whole command exit 1.
    let mut result = Ok(());
    for c in campaigns {
        match archive_one(pool, &c, dry_run).await {
            Err(CliError::Exit(code)) => result = Err(code.into()),
            other => other?,
        }
    }
    result
}

async fn archive_one(pool: &PgPool, campaign: &str, dry_run: bool) -> CliResult {
    let (pending, sending) = archive::unfinished(pool, campaign).await?;
    if pending + sending > 0 {
        eprintln!(
            "{campaign}: not finished — {pending} pending and {sending} sending rows; nothing archived. Let it finish (or `pause` it and wait for its pods to stop, then `retry-failed`/`resolve` as needed) and archive again"
        );
        return Err(Exit::Incomplete.into());
    }
    if dry_run {
        let a = archive::archived(pool, campaign).await?;
        let rows = archive::rows_left(pool, campaign).await?;
        let resumed = if a.is_some_and(|a| a.archived_at.is_none()) {
            " (resuming an interrupted archive)"
        } else {
            ""
        };
        println!("{campaign}: finished; {rows} rows would move to campaign_archive{resumed}; nothing changed (--dry-run)");
        return Ok(());
    }
    let started = Instant::now();
    archive::begin(pool, campaign).await?;
    let moved = archive::move_all(pool, campaign, archive::LockRetry::ARCHIVE).await?;
    archive::complete(pool, campaign).await?;
    // The counts of the rows as they moved: what `status` shows from now on.
    let counts = archive::archived(pool, campaign).await?.unwrap_or_default();
    print_done(campaign, &counts, moved, started.elapsed());
    let (pending, sending) = archive::unfinished(pool, campaign).await?;
    if pending + sending > 0 {
        println!("{campaign}: {} rows arrived while archiving and are still work; they were left in place", pending + sending);
    }
    Ok(())
}

fn print_done(campaign: &str, a: &Archived, moved: i64, took: Duration) {
    println!(
        "{campaign}: archived {moved} rows in {:.1} s — {} total: {} sent, {} failed, {} opted out, {} unconfirmed, {} suppressed (per recipient in campaign_archive; `status` keeps these counts)",
        took.as_secs_f64(),
        a.total,
        a.sent,
        a.failed,
        a.opted_out,
        a.unconfirmed,
        a.suppressed
    );
    if a.unconfirmed > 0 {
        println!("{campaign}: {} rows were archived as unconfirmed (maybe delivered): `resolve` before archiving settles them", a.unconfirmed);
    }
}
