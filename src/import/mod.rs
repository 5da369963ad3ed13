//! `campaign-sender import`: load a campaign's recipients from CSV, atomically and idempotently.
//!
//! ```text
//!  file/stdin ─▶ reader thread (csv.rs: parse, validate) ─1 MiB chunks─▶ COPY into a temp table
//!     ─▶ duplicate check ─▶ insert of the members the campaign lacks (anti-join; ON CONFLICT DO
//!        NOTHING only if another writer races it) ─▶ COMMIT
//! ```
//!
//! - **Validation** ([`csv`]): an integer member id, a plausible address (the same rule the
//!   worker uses), no member twice in the file. Reasons never quote an address (personal data).
//! - **Atomic**: everything happens in one transaction ([`crate::store::import`]). A bad line
//!   means nothing is imported, unless a rejects file was given (`--skip-invalid`): then bad
//!   lines and repeats (every occurrence after the first) go there and the rest is imported.
//! - **Idempotent**: rows already in the campaign are left exactly as they are — a `sent` row is
//!   never reset, a changed address is not applied (and counted, so the operator knows).
//! - **The suppression list** ([`suppress`]): `campaign-sender suppress`, the same reader and
//!   the same atomicity for `email[,reason]` lines.
//! - **Memory flat in file size**: the reader streams through a bounded channel; duplicates are
//!   found by the database, not in a client-side set.

pub mod csv;
pub mod suppress;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::sync::mpsc;

use self::csv::{read_input, ReadOutcome, Rejects};
use crate::store::import as sql;
use crate::text_enum::text_enum;

/// Line errors kept to show; the rest are only counted.
pub const ERRORS_SHOWN: usize = 20;

/// One rejected line: where and why (never the address itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LineError {
    pub line: u64,
    pub reason: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// Records read (blank lines and the header not counted).
    pub records: u64,
    /// Invalid lines (written to the rejects file, or the reason nothing was imported).
    pub invalid: u64,
    /// Repeated member ids after their first line.
    pub duplicates: u64,
    /// New rows in `campaign_targets` (state `pending`).
    pub inserted: u64,
    /// Rows the campaign had already (in the work table, or in its archive after `archive`);
    /// left exactly as they were.
    pub already_present: u64,
    /// Of those, how many have a different address in the file (not applied).
    pub changed_email: u64,
    pub elapsed_ms: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{} invalid and {} repeated lines; nothing was imported. Fix them, or pass --skip-invalid FILE to import the rest and write the rejects there", .report.invalid, .report.duplicates)]
    Rejected {
        /// The first [`ERRORS_SHOWN`] problems, by line.
        errors: Vec<LineError>,
        report: ImportReport,
    },
    #[error("no records in the input (an empty file, or only a header); nothing was imported. Pass --allow-empty if that is what you meant")]
    NoRecords,
    #[error("the input ended in the middle of a line: the program writing it may have died; nothing was imported. If it is complete, end it with a newline")]
    EndsMidLine,
    #[error("cannot read the input: {0}")]
    Input(#[source] std::io::Error),
    #[error("cannot write the rejects file: {0}")]
    Rejects(#[source] std::io::Error),
    #[error("database error; nothing was imported (a rerun is safe): {0}")]
    Database(#[from] sqlx::Error),
}

/// What to import: the CSV and how it is written.
pub struct Source {
    pub input: Box<dyn Read + Send>,
    /// The field separator (`,` unless `--delimiter` says otherwise).
    pub delimiter: u8,
    /// An input with no records is accepted (`--allow-empty`) instead of refused.
    pub allow_empty: bool,
    /// The input is a stream (standard input, a pipe), whose producer may die mid-line: one
    /// that does not end with a newline is refused ([`ImportError::EndsMidLine`]). A named file
    /// is complete as it is, final newline or not.
    pub stream: bool,
}

/// Where an import is, for a progress bar or periodic lines.
#[derive(Debug, Default)]
pub struct ImportProgress {
    pub bytes: AtomicU64,
    pub records: AtomicU64,
    phase: AtomicU8,
}

text_enum! {
    /// The phases of an import, in order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Phase: "import phase" {
        Reading = "reading",
        CheckingDuplicates = "checking duplicates",
        Inserting = "inserting",
        Committing = "committing",
        Done = "done",
    }
}

impl ImportProgress {
    pub fn phase(&self) -> Phase {
        let stored = self.phase.load(Ordering::Relaxed) as usize;
        Phase::ALL[stored.min(Phase::ALL.len() - 1)]
    }
    fn set(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }
}

/// Imports `input` into campaign `campaign_id`. `rejects`, if given, receives every bad or
/// repeated line (as `member_id,email,line,reason` with a header) and the rest is imported;
/// without it any bad line means nothing is imported ([`ImportError::Rejected`]).
pub async fn import(
    opts: &PgConnectOptions,
    campaign_id: &str,
    source: Source,
    rejects: Option<Box<dyn Write + Send>>,
    progress: Arc<ImportProgress>,
) -> Result<ImportReport, ImportError> {
    let started = Instant::now();
    let mut conn = sql::session(opts).await?;
    let mut tx = conn.begin().await?;
    sql::create_staging(&mut tx).await?;
    let skipping = rejects.is_some();
    let (allow_empty, stream) = (source.allow_empty, source.stream);
    let mut read = stage(&mut tx, source, rejects_writer(rejects)?, &progress).await?;
    if stream && read.ends_mid_line {
        return Err(ImportError::EndsMidLine);
    }
    if read.records == 0 && !allow_empty {
        return Err(ImportError::NoRecords);
    }
    let mut report = ImportReport {
        records: read.records,
        invalid: read.invalid,
        ..Default::default()
    };
    progress.set(Phase::CheckingDuplicates);
    let mut errors = std::mem::take(&mut read.errors);
    report.duplicates = reject_repeats(&mut tx, &mut read.rejects, &mut errors).await?;
    if (report.invalid > 0 || report.duplicates > 0) && !skipping {
        // Dropping the transaction rolls it back: nothing was imported.
        errors.sort_by_key(|e| e.line);
        return Err(ImportError::Rejected { errors, report });
    }
    if report.duplicates > 0 {
        sql::drop_repeats(&mut tx).await?;
    }
    if let Some(mut w) = read.rejects.take() {
        w.flush().map_err(ImportError::Rejects)?;
    }
    progress.set(Phase::Inserting);
    report.inserted = sql::insert_new(&mut tx, campaign_id).await?;
    let valid = report.records - report.invalid - report.duplicates;
    report.already_present = valid - report.inserted;
    if report.already_present > 0 {
        report.changed_email = sql::changed_emails(&mut tx, campaign_id).await?;
    }
    progress.set(Phase::Committing);
    tx.commit().await?;
    progress.set(Phase::Done);
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The rejects file with its header, if one was asked for.
fn rejects_writer(rejects: Option<Box<dyn Write + Send>>) -> Result<Option<Rejects>, ImportError> {
    let mut rejects = rejects.map(::csv::Writer::from_writer);
    if let Some(w) = &mut rejects {
        w.write_record(["member_id", "email", "line", "reason"])
            .map_err(|e| ImportError::Rejects(e.into()))?;
    }
    Ok(rejects)
}

/// Streams the input into the staging table: the reader thread parses and validates, this task
/// copies its chunks. Returns what the reader found.
async fn stage(
    tx: &mut PgConnection,
    source: Source,
    rejects: Option<Rejects>,
    progress: &Arc<ImportProgress>,
) -> Result<ReadOutcome, ImportError> {
    let p = progress.clone();
    let Source {
        input, delimiter, ..
    } = source;
    let read = copy_from_reader(tx, sql::COPY_STAGING, move |chunks| {
        read_input(input, delimiter, rejects, chunks, p)
    })
    .await?;
    sql::analyze_staging(tx).await?;
    Ok(read)
}

/// The one way an input reaches a staging table (`import`'s and `suppress`'s): `read` runs on a
/// blocking thread and sends COPY-text chunks, this task copies them with `copy` as they come.
/// A reader that fails aborts the COPY (the transaction then rolls back); its result otherwise.
pub(crate) async fn copy_from_reader<T: Send + 'static>(
    tx: &mut PgConnection,
    copy: &str,
    read: impl FnOnce(mpsc::Sender<Vec<u8>>) -> Result<T, ImportError> + Send + 'static,
) -> Result<T, ImportError> {
    let (tx_data, mut rx_data) = mpsc::channel::<Vec<u8>>(4);
    let reader = tokio::task::spawn_blocking(move || read(tx_data));
    let mut copy = tx.copy_in_raw(copy).await?;
    let mut copy_error = None;
    while let Some(chunk) = rx_data.recv().await {
        if let Err(e) = copy.send(chunk).await {
            copy_error = Some(e);
            break;
        }
    }
    drop(rx_data);
    let read = reader.await.expect("reader thread");
    if let Some(e) = copy_error {
        return Err(e.into());
    }
    match read {
        Ok(r) => {
            copy.finish().await?;
            Ok(r)
        }
        Err(e) => {
            let _ = copy.abort("input rejected").await;
            Err(e)
        }
    }
}

/// Every repeated line goes to the rejects and the shown errors; returns how many there were.
async fn reject_repeats(
    tx: &mut PgConnection,
    rejects: &mut Option<Rejects>,
    errors: &mut Vec<LineError>,
) -> Result<u64, ImportError> {
    let mut n = 0;
    let mut rows = sql::repeats(tx);
    while let Some(r) = rows.try_next().await? {
        n += 1;
        let reason = format!("member_id repeats line {}", r.first_line);
        if let Some(w) = rejects {
            w.write_record([
                r.member_id.to_string().as_str(),
                &r.email,
                &r.line.to_string(),
                &reason,
            ])
            .map_err(|e| ImportError::Rejects(e.into()))?;
        }
        if errors.len() < ERRORS_SHOWN {
            errors.push(LineError {
                line: r.line as u64,
                reason,
            });
        }
    }
    Ok(n)
}

/// A progress line for logs and pipes (no terminal): `import: 400000 records, 33% of 52 MB, 3.1 s`.
pub fn progress_line(p: &ImportProgress, total_bytes: Option<u64>, elapsed: Duration) -> String {
    let records = p.records.load(Ordering::Relaxed);
    let bytes = p.bytes.load(Ordering::Relaxed);
    let of = match total_bytes {
        Some(t) if t > 0 => format!(
            ", {:.0}% of {:.1} MB",
            100.0 * bytes as f64 / t as f64,
            t as f64 / 1e6
        ),
        _ => format!(", {:.1} MB", bytes as f64 / 1e6),
    };
    format!(
        "import: {} — {records} records{of}, {:.1} s",
        p.phase().as_str(),
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_progress_line_says_phase_records_share_and_time() {
        let p = ImportProgress::default();
        p.records.store(400_000, Ordering::Relaxed);
        p.bytes.store(13_000_000, Ordering::Relaxed);
        p.set(Phase::Inserting);
        assert_eq!(
            progress_line(&p, Some(39_000_000), Duration::from_millis(3100)),
            "import: inserting — 400000 records, 33% of 39.0 MB, 3.1 s"
        );
        // From stdin the size is unknown: bytes read instead of a share.
        assert_eq!(
            progress_line(&p, None, Duration::from_secs(5)),
            "import: inserting — 400000 records, 13.0 MB, 5.0 s"
        );
    }
}
