//! `campaign-sender import`: its arguments, and the terminal side: opens the input and the
//! rejects file, draws progress (a bar on a terminal, a line every few seconds otherwise: a
//! Job's log, a pipe), prints the result and maps it to an exit code ([`failed`], which
//! `suppress` shares). The work is [`crate::import`].
//!
//! Output never contains an address: errors name lines and reasons.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::{Needs, OperatorCommand};
use crate::cli::args::parse_delimiter;
use crate::cli::{CliError, CliResult};
use crate::exit::Exit;
use crate::import::{self, ImportError, ImportProgress, ImportReport, LineError};

/// Load recipients from CSV (`member_id,email`, header optional) into a campaign, in one
/// transaction: any invalid or repeated line and nothing is imported (exit 65), unless
/// --skip-invalid names a file for the rejects. Rows the campaign already has are left
/// exactly as they are, so importing twice changes nothing.
#[derive(Args, Debug)]
pub struct Import {
    #[arg(long)]
    campaign: String,
    /// The CSV file; `-` or nothing reads standard input.
    file: Option<std::path::PathBuf>,
    /// Import the valid lines and write every rejected one here (CSV:
    /// member_id,email,line,reason; fix it and import it again as it is).
    #[arg(long, value_name = "FILE")]
    skip_invalid: Option<std::path::PathBuf>,
    /// The field separator: `,` (default), `;` or `tab`.
    #[arg(long, default_value = ",", value_parser = parse_delimiter)]
    delimiter: u8,
    /// Accept a file with no records (otherwise an empty file is an error: exit 65).
    #[arg(long)]
    allow_empty: bool,
}

impl OperatorCommand for Import {
    fn needs(&self) -> Needs<'_> {
        Needs::New(&self.campaign)
    }

    async fn run(self, pool: &PgPool, shutdown: CancellationToken) -> CliResult {
        let (campaign_id, skip_invalid) = (self.campaign.as_str(), self.skip_invalid);
        let (input, total_bytes) = open_input(self.file)?;
        let rejects = open_rejects(skip_invalid.as_deref())?;
        let progress = Arc::new(ImportProgress::default());
        let shown = show_progress(progress.clone(), total_bytes);
        let opts = pool.connect_options().as_ref().clone();
        let source = import::Source {
            input,
            delimiter: self.delimiter,
            allow_empty: self.allow_empty,
            stream: total_bytes.is_none(),
        };
        // Asked to stop (Ctrl-C, SIGTERM): the import is dropped, its transaction rolled back —
        // never committed with what was read so far (the producer of a pipe dies with the same
        // Ctrl-C, and its end of input would look like the end of the file).
        let result = tokio::select! {
            r = import::import(&opts, campaign_id, source, rejects, progress) => r,
            _ = shutdown.cancelled() => {
                shown.abort();
                eprintln!("interrupted: the import was rolled back, nothing was imported; run it again");
                return Err(CliError::Interrupted);
            }
        };
        shown.abort();
        let _ = shown.await;
        match result {
            Ok(r) => {
                print_imported(campaign_id, &r, skip_invalid.as_deref());
                Ok(())
            }
            Err(e) => {
                match &e {
                    ImportError::Rejected { errors, report } => print_rejected(errors, report),
                    ImportError::NoRecords => eprintln!("{e}"),
                    _ => {}
                }
                Err(failed(e, "nothing was imported"))
            }
        }
    }
}

/// How often progress is written when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(5);

type Input = (Box<dyn std::io::Read + Send>, Option<u64>);

/// The file (buffered, with its size for the progress bar), or standard input for `-` or none.
pub(super) fn open_input(file: Option<PathBuf>) -> Result<Input, CliError> {
    match file {
        Some(path) if path.as_os_str() != "-" => match std::fs::File::open(&path) {
            Ok(f) => {
                // A regular file's size; none for a pipe or a process substitution (a stream).
                let len = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
                Ok((Box::new(std::io::BufReader::with_capacity(1 << 16, f)), len))
            }
            Err(e) => {
                eprintln!("cannot open {}: {e}", path.display());
                Err(Exit::NoInput.into())
            }
        },
        _ => Ok((Box::new(std::io::stdin()), None)),
    }
}

fn open_rejects(path: Option<&Path>) -> Result<Option<Box<dyn std::io::Write + Send>>, CliError> {
    let Some(path) = path else { return Ok(None) };
    match std::fs::File::create(path) {
        Ok(f) => Ok(Some(Box::new(std::io::BufWriter::new(f)))),
        Err(e) => {
            eprintln!("cannot create the rejects file {}: {e}", path.display());
            Err(Exit::NoInput.into())
        }
    }
}

fn print_imported(campaign_id: &str, r: &ImportReport, rejects: Option<&Path>) {
    let changed = if r.changed_email > 0 {
        format!(
            "; {} with a different address in the file, not applied",
            r.changed_email
        )
    } else {
        String::new()
    };
    let written = rejects
        .map(|p| format!(" (written to {})", p.display()))
        .unwrap_or_default();
    println!(
        "{campaign_id}: {} records read, {} imported as pending, {} already present (left as they were{changed}), {} invalid and {} repeated skipped{written} in {:.1} s",
        r.records,
        r.inserted,
        r.already_present,
        r.invalid,
        r.duplicates,
        r.elapsed_ms as f64 / 1000.0
    );
}

/// The first lines' reasons, how many more, and what to do.
fn print_rejected(errors: &[LineError], report: &ImportReport) {
    for e in errors {
        eprintln!("{e}");
    }
    let shown = errors.len() as u64;
    let all = report.invalid + report.duplicates;
    if all > shown {
        eprintln!("… and {} more", all - shown);
    }
    let summary = ImportError::Rejected {
        errors: vec![],
        report: report.clone(),
    };
    eprintln!("{summary}");
}

/// Draws import progress until aborted: a bar on a terminal, a line every few seconds
/// otherwise (a Job's log, a pipe).
fn show_progress(p: Arc<ImportProgress>, total_bytes: Option<u64>) -> tokio::task::JoinHandle<()> {
    let started = Instant::now();
    if std::io::stderr().is_terminal() {
        let bar = match total_bytes {
            Some(t) => ProgressBar::new(t).with_style(
                ProgressStyle::with_template(
                    "{spinner} {msg:<20} {wide_bar} {bytes}/{total_bytes} ({eta})",
                )
                .expect("template"),
            ),
            None => ProgressBar::new_spinner().with_style(
                ProgressStyle::with_template("{spinner} {msg:<20} {bytes} read").expect("template"),
            ),
        };
        tokio::spawn(async move {
            let _clear = ClearOnDrop(bar.clone());
            loop {
                bar.set_position(p.bytes.load(std::sync::atomic::Ordering::Relaxed));
                bar.set_message(format!(
                    "{} ({} records)",
                    p.phase().as_str(),
                    p.records.load(std::sync::atomic::Ordering::Relaxed)
                ));
                bar.tick();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    } else {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PLAIN_PROGRESS_EVERY).await;
                eprintln!(
                    "{}",
                    import::progress_line(&p, total_bytes, started.elapsed())
                );
            }
        })
    }
}

struct ClearOnDrop(ProgressBar);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// The one rule from an import's failure to how the command ends, for `import` and
/// `suppress`: a refused input (its lines, no records: each command says those in its own
/// words first) or one cut mid-line exits 65, an input or rejects file that cannot be opened
/// 66, and a database error is said with what to do. `unchanged` says what stayed as it was.
pub(super) fn failed(e: ImportError, unchanged: &str) -> CliError {
    match e {
        ImportError::Rejected { .. } | ImportError::NoRecords => Exit::DataError.into(),
        ImportError::EndsMidLine => {
            eprintln!("{e}");
            Exit::DataError.into()
        }
        ImportError::Input(_) | ImportError::Rejects(_) => {
            eprintln!("{e}; {unchanged}");
            Exit::NoInput.into()
        }
        ImportError::Database(e) => {
            error!("rolled back: {unchanged} (a rerun is safe)");
            e.into()
        }
    }
}
