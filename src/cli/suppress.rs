//! `suppress` (the provider's suppression list) and `resolve` (rows whose delivery is unknown
//! past the idempotency window). The work is [`crate::import::suppress`] and
//! [`crate::store::suppressions`]; output never contains an address.

use std::path::PathBuf;
use std::sync::Arc;

use sqlx::PgPool;
use tracing::error;

use super::import::open_input;
use super::CliResult;
use crate::exit::Exit;
use crate::import::suppress::{suppress, Direction, SuppressReport};
use crate::import::{ImportError, ImportProgress};
use crate::store::suppressions::Settle;
use crate::store::Store;

/// `suppress --export FILE`: the list as `email,reason,source,suppressed_at`, oldest first,
/// streamed (a list of millions never sits in memory). The file is the operator's to keep: it
/// holds addresses, which this command never prints anywhere else.
pub(super) async fn export(
    pool: &PgPool,
    to: &std::path::Path,
    since: Option<chrono::DateTime<chrono::Utc>>,
    reasons: &[String],
) -> CliResult {
    use futures::TryStreamExt;
    let out: Box<dyn std::io::Write> = if to.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(to).map_err(|e| {
            eprintln!("cannot write {}: {e}", to.display());
            Exit::Incomplete
        })?)
    };
    let mut csv = csv::Writer::from_writer(out);
    let failed = |e: csv::Error| {
        eprintln!("writing the export failed: {e}");
        Exit::Incomplete
    };
    csv.write_record(["email", "reason", "source", "suppressed_at"])
        .map_err(failed)?;
    let mut rows = crate::store::suppressions::export(pool, since, reasons);
    let mut n = 0u64;
    while let Some(r) = rows.try_next().await? {
        let at = r
            .suppressed_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        csv.write_record([&r.email, &r.reason, r.source.as_deref().unwrap_or(""), &at])
            .map_err(failed)?;
        n += 1;
    }
    csv.flush().map_err(|e| failed(e.into()))?;
    eprintln!("{n} listed addresses exported");
    Ok(())
}

pub(super) async fn suppress_cmd(pool: &PgPool, file: Option<PathBuf>, remove: bool) -> CliResult {
    let (input, _) = open_input(file)?;
    let direction = if remove {
        Direction::Remove
    } else {
        Direction::Add
    };
    let opts = pool.connect_options().as_ref().clone();
    let progress = Arc::new(ImportProgress::default());
    match suppress(&opts, input, direction, progress).await {
        Ok(r) => {
            print_done(direction, &r);
            Ok(())
        }
        Err(ImportError::Rejected { errors, report }) => {
            for e in &errors {
                eprintln!("{e}");
            }
            if report.invalid > errors.len() as u64 {
                eprintln!("… and {} more", report.invalid - errors.len() as u64);
            }
            eprintln!(
                "{} of {} lines are invalid; nothing was changed. Fix them and run again",
                report.invalid, report.records
            );
            Err(Exit::DataError.into())
        }
        Err(ImportError::NoRecords) => {
            eprintln!("no addresses in the input; nothing was changed");
            Err(Exit::DataError.into())
        }
        Err(e @ ImportError::EndsMidLine) => {
            eprintln!("{e}");
            Err(Exit::DataError.into())
        }
        Err(e @ (ImportError::Input(_) | ImportError::Rejects(_))) => {
            eprintln!("{e}; nothing was changed");
            Err(Exit::NoInput.into())
        }
        Err(ImportError::Database(e)) => {
            error!("rolled back: the suppression list is unchanged (a rerun is safe)");
            Err(e.into())
        }
    }
}

fn print_done(direction: Direction, r: &SuppressReport) {
    let secs = r.elapsed_ms as f64 / 1000.0;
    match direction {
        Direction::Add => println!(
            "suppressions: {} lines read, {} addresses added, {} with a new reason, {} already listed as they were; {} listed in all, in {secs:.1} s",
            r.records, r.added, r.updated, r.unchanged, r.listed
        ),
        Direction::Remove => println!(
            "suppressions: {} lines read, {} addresses removed, {} suppressed rows back to pending; {} listed in all, in {secs:.1} s",
            r.records, r.removed, r.restored, r.listed
        ),
    }
}

pub(super) async fn resolve(
    pool: &PgPool,
    campaign: &str,
    assume_sent: bool,
    since: Option<chrono::DateTime<chrono::Utc>>,
    dry_run: bool,
) -> CliResult {
    let how = if assume_sent {
        Settle::AssumeSent
    } else {
        Settle::Resend
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
