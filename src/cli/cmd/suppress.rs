//! `campaign-sender suppress`: the provider's suppression list in (`suppress FILE`, `--remove`)
//! and out (`--export`). The work is [`crate::import::suppress`] and
//! [`crate::store::suppressions`]; output never contains an address but in the export file.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::import::{failed, open_input};
use super::{Needs, OperatorCommand};
use crate::cli::args::parse_since;
use crate::cli::CliResult;
use crate::exit::Exit;
use crate::import::suppress::{suppress, Direction, SuppressReport};
use crate::import::{ImportError, ImportProgress};

/// Loads the provider's suppression list (CSV `email[,reason]`, header optional; reasons
/// such as hard_bounce, complaint, unsubscribe) in one transaction: any bad line and
/// nothing changes (exit 65). A listed address is never sent to, in any campaign; rows
/// already claimed are stopped before their send. Matching is on the whole address,
/// case-insensitive. `--remove` takes the file's addresses off the list again.
#[derive(Args, Debug)]
pub struct Suppress {
    /// The CSV file; `-` or nothing reads standard input.
    file: Option<std::path::PathBuf>,
    /// Take these addresses off the list; their suppressed rows go back to pending.
    #[arg(long, conflicts_with = "export")]
    remove: bool,
    /// Write the list instead, `email,reason,source,suppressed_at`, to FILE (`-`: standard
    /// output): who left, for the system that feeds `campaign_targets`.
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    export: Option<std::path::PathBuf>,
    /// With --export: only those listed since (`2h`, `7d`, or an RFC 3339 time).
    #[arg(long, requires = "export", value_parser = parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// With --export: only these reasons, comma-separated (`unsubscribe,complaint`).
    #[arg(long, requires = "export", value_delimiter = ',')]
    reason: Vec<String>,
}

impl OperatorCommand for Suppress {
    fn needs(&self) -> Needs<'_> {
        Needs::Nothing
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        match self.export {
            Some(to) => export(pool, &to, self.since, &self.reason).await,
            None => change(pool, self.file, self.remove).await,
        }
    }
}

/// `suppress --export FILE`: the list as `email,reason,source,suppressed_at`, oldest first,
/// streamed (a list of millions never sits in memory). The file is the operator's to keep: it
/// holds addresses, which this command never prints anywhere else.
async fn export(
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

async fn change(pool: &PgPool, file: Option<PathBuf>, remove: bool) -> CliResult {
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
        Err(e) => {
            match &e {
                ImportError::Rejected { errors, report } => {
                    for e in errors {
                        eprintln!("{e}");
                    }
                    if report.invalid > errors.len() as u64 {
                        eprintln!("… and {} more", report.invalid - errors.len() as u64);
                    }
                    eprintln!(
                        "{} of {} lines are invalid; nothing was changed. Fix them and run again",
                        report.invalid, report.records
                    );
                }
                ImportError::NoRecords => {
                    eprintln!("no addresses in the input; nothing was changed")
                }
                _ => {}
            }
            Err(failed(e, "the suppression list is unchanged"))
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
