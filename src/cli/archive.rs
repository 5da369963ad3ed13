//! `campaign-sender archive`: a finished campaign's rows out of the work table, into the compact
//! `campaign_archive`, in batches that never block the campaigns still sending
//! ([`crate::store::archive`]). Run as the schema owner (it deletes rows the operator role may
//! not): `DATABASE_URL=$MIGRATE_DATABASE_URL campaign-sender archive …`.

use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::exit;
use crate::store::archive::{self, Archived};

/// Rows moved per transaction: ~0.1 s of locks each, so a worker of another campaign never waits
/// long, and an interruption loses nothing.
pub const BATCH: i64 = 5_000;
/// How long a batch waits for a row lock before it is tried again.
pub const LOCK_WAIT: Duration = Duration::from_secs(2);
/// Tries of one batch that met a lock (the rows of a finished campaign are rarely locked).
const TRIES: u32 = 10;

/// What the command was asked.
pub(super) enum Which {
    One(String),
    OlderThan(Duration),
}

pub(super) async fn archive_cmd(
    pool: &PgPool,
    which: Which,
    dry_run: bool,
) -> Result<u8, sqlx::Error> {
    let campaigns = match which {
        Which::One(c) => vec![c],
        Which::OlderThan(age) => {
            let cutoff = chrono::Utc::now() - chrono::Duration::from_std(age).unwrap_or_default();
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
    let mut code = exit::DONE;
    for c in campaigns {
        let one = archive_one(pool, &c, dry_run).await?;
        if one != exit::DONE {
            code = one;
        }
    }
    Ok(code)
}

async fn archive_one(pool: &PgPool, campaign: &str, dry_run: bool) -> Result<u8, sqlx::Error> {
    let (pending, sending) = archive::unfinished(pool, campaign).await?;
    if pending + sending > 0 {
        eprintln!(
            "{campaign}: not finished — {pending} pending and {sending} sending rows; nothing archived. Let it finish (or `pause` it and wait for its pods to stop, then `retry-failed`/`resolve` as needed) and archive again"
        );
        return Ok(exit::NOT_FINISHED);
    }
    if dry_run {
        let a = archive::archived(pool, campaign).await?;
        let rows = archive::rows_left(pool, campaign).await?;
        let resumed = if a.is_some() {
            " (resuming an interrupted archive)"
        } else {
            ""
        };
        println!("{campaign}: finished; {rows} rows would move to campaign_archive{resumed}; nothing changed (--dry-run)");
        return Ok(exit::DONE);
    }
    let started = Instant::now();
    let counts = archive::begin(pool, campaign).await?;
    let moved = move_all(pool, campaign).await?;
    archive::complete(pool, campaign).await?;
    print_done(campaign, &counts, moved, started.elapsed());
    let (pending, sending) = archive::unfinished(pool, campaign).await?;
    if pending + sending > 0 {
        println!("{campaign}: {} rows arrived while archiving and are still work; they were left in place", pending + sending);
    }
    Ok(exit::DONE)
}

/// Every finished row, batch by batch in member order; a batch that met a lock is tried again.
async fn move_all(pool: &PgPool, campaign: &str) -> Result<i64, sqlx::Error> {
    let (mut from, mut moved) = (i64::MIN, 0i64);
    loop {
        let mut tries = 0;
        let batch = loop {
            match archive::move_batch(pool, campaign, from, BATCH, LOCK_WAIT).await {
                Err(e) if archive::is_lock_timeout(&e) && tries + 1 < TRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => break other?,
            }
        };
        match batch {
            Some((n, last)) => {
                moved += n;
                // The next batch starts after the last member moved; none is after i64::MAX.
                match last.checked_add(1) {
                    Some(next) => from = next,
                    None => return Ok(moved),
                }
            }
            None => return Ok(moved),
        }
    }
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
