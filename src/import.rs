//! `campaign-sender import`: load a campaign's recipients from CSV, atomically and idempotently.
//!
//! ```text
//!  file/stdin ─▶ reader thread (csv, validation) ─1 MiB chunks─▶ COPY into a temp table ─▶
//!     duplicate check ─▶ INSERT … ON CONFLICT DO NOTHING into campaign_targets ─▶ COMMIT
//! ```
//!
//! - **Input**: `member_id,email` per line, header optional. With a header the columns are found
//!   by name (`member_id`, `email`; others are ignored), so a rejects file can be fixed and fed
//!   back as it is. Fields are trimmed; blank lines are skipped.
//! - **Validation**: an integer member id, a plausible address (the same rule the worker uses),
//!   no member twice in the file. Reasons never quote an address (personal data): they name the
//!   line and what is wrong.
//! - **Atomic**: everything happens in one transaction. A bad line means nothing is imported,
//!   unless a rejects file was given (`--skip-invalid`): then bad lines and repeats (every
//!   occurrence after the first) go there and the rest is imported.
//! - **Idempotent**: rows already in the campaign are left exactly as they are — a `sent` row is
//!   never reset, a changed address is not applied (and counted, so the operator knows).
//! - **Memory flat in file size**: the reader streams through a bounded channel; duplicates are
//!   found by the database, not in a client-side set.
//!
//! Uses its own connection (not the pool) so that it can size `temp_buffers` for the session.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, Row};
use tokio::sync::mpsc;

use crate::outcome::plausible_email;

/// Line errors kept to show; the rest are only counted.
pub const ERRORS_SHOWN: usize = 20;
const CHUNK_BYTES: usize = 1 << 20;

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
    /// Rows the campaign had already; left exactly as they were.
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
    #[error("cannot read the input: {0}")]
    Input(#[source] std::io::Error),
    #[error("cannot write the rejects file: {0}")]
    Rejects(#[source] std::io::Error),
    #[error("database error; nothing was imported (a rerun is safe): {0}")]
    Database(#[from] sqlx::Error),
}

/// Where an import is, for a progress bar or periodic lines.
#[derive(Debug, Default)]
pub struct Progress {
    pub bytes: AtomicU64,
    pub records: AtomicU64,
    phase: AtomicU8,
}

/// The phases of an import, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Reading,
    CheckingDuplicates,
    Inserting,
    Committing,
    Done,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Reading => "reading",
            Phase::CheckingDuplicates => "checking duplicates",
            Phase::Inserting => "inserting",
            Phase::Committing => "committing",
            Phase::Done => "done",
        }
    }
}

impl Progress {
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            0 => Phase::Reading,
            1 => Phase::CheckingDuplicates,
            2 => Phase::Inserting,
            3 => Phase::Committing,
            _ => Phase::Done,
        }
    }
    fn set(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }
}

/// Where the two columns are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Columns {
    pub member_id: usize,
    pub email: usize,
    /// Fields every record must have.
    pub width: usize,
}

impl Columns {
    pub const POSITIONAL: Columns = Columns {
        member_id: 0,
        email: 1,
        width: 2,
    };

    /// `Some` if this first record is a header (it names `member_id`), with the columns it
    /// names; `Err` if it is a header without an `email` column.
    pub fn from_header(fields: &[&str]) -> Option<Result<Columns, String>> {
        let find = |name: &str| fields.iter().position(|f| f.eq_ignore_ascii_case(name));
        let member_id = find("member_id")?;
        Some(match find("email") {
            Some(email) => Ok(Columns {
                member_id,
                email,
                width: fields.len(),
            }),
            None => Err("the header names member_id but no email column".to_string()),
        })
    }
}

/// Validates one record: the member id and the address, or why not. Pure.
pub fn check_record(fields: &[&str], cols: Columns) -> Result<(i64, String), String> {
    if fields.len() != cols.width {
        return Err(format!(
            "expected {} fields, found {}",
            cols.width,
            fields.len()
        ));
    }
    let member = fields[cols.member_id];
    let email = fields[cols.email];
    if member.is_empty() {
        return Err("member_id is empty".into());
    }
    // The value is not quoted: with the columns swapped it would be an address.
    let id: i64 = member
        .parse()
        .map_err(|_| "member_id is not an integer (are the columns swapped?)".to_string())?;
    if email.is_empty() {
        return Err("email is empty".into());
    }
    if !plausible_email(Some(email)) {
        return Err("email is not a plausible address".into());
    }
    Ok((id, email.to_string()))
}

/// Appends `value` in COPY text format (backslash escapes).
fn push_copy_text(out: &mut Vec<u8>, value: &str) {
    for b in value.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

struct Counting<R> {
    inner: R,
    progress: Arc<Progress>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What the reader thread found.
struct ReadOutcome {
    records: u64,
    invalid: u64,
    errors: Vec<LineError>,
    rejects: Option<csv::Writer<Box<dyn Write + Send>>>,
}

/// Parses and validates the input, sending the valid records as COPY data in chunks (also
/// after a bad line, so that repeats can still be reported before nothing is imported).
fn read_input(
    input: Box<dyn Read + Send>,
    mut rejects: Option<csv::Writer<Box<dyn Write + Send>>>,
    tx: mpsc::Sender<Vec<u8>>,
    progress: Arc<Progress>,
) -> Result<ReadOutcome, ImportError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(Counting {
            inner: input,
            progress: progress.clone(),
        });
    let mut out = ReadOutcome {
        records: 0,
        invalid: 0,
        errors: Vec::new(),
        rejects: None,
    };
    let mut cols: Option<Columns> = None;
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 1024);
    let mut record = csv::StringRecord::new();
    let reject = |out: &mut ReadOutcome,
                  rejects: &mut Option<csv::Writer<Box<dyn Write + Send>>>,
                  line: u64,
                  reason: String,
                  fields: &[&str],
                  cols: Columns|
     -> Result<(), ImportError> {
        out.invalid += 1;
        if let Some(w) = rejects {
            let get = |i: usize| fields.get(i).copied().unwrap_or("");
            w.write_record([
                get(cols.member_id),
                get(cols.email),
                &line.to_string(),
                &reason,
            ])
            .map_err(|e| ImportError::Rejects(e.into()))?;
        }
        if out.errors.len() < ERRORS_SHOWN {
            out.errors.push(LineError { line, reason });
        }
        Ok(())
    };
    loop {
        let line = rdr.position().line();
        match rdr.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => match e.kind() {
                csv::ErrorKind::Utf8 { pos, .. } => {
                    let line = pos.as_ref().map_or(line, |p| p.line());
                    reject(
                        &mut out,
                        &mut rejects,
                        line,
                        "not valid UTF-8".into(),
                        &[],
                        Columns::POSITIONAL,
                    )?;
                    continue;
                }
                csv::ErrorKind::Io(_) => {
                    let csv::ErrorKind::Io(io) = e.into_kind() else {
                        unreachable!()
                    };
                    return Err(ImportError::Input(io));
                }
                _ => return Err(ImportError::Input(std::io::Error::other(e.to_string()))),
            },
        }
        let line = record.position().map_or(line, |p| p.line());
        let fields: Vec<&str> = record.iter().collect();
        if fields.iter().all(|f| f.is_empty()) {
            continue; // a blank line
        }
        let c = match cols {
            Some(c) => c,
            None => match Columns::from_header(&fields) {
                Some(Ok(c)) => {
                    cols = Some(c);
                    continue;
                }
                Some(Err(reason)) => {
                    return Err(ImportError::Rejected {
                        errors: vec![LineError { line, reason }],
                        report: ImportReport {
                            invalid: 1,
                            ..Default::default()
                        },
                    })
                }
                None => *cols.insert(Columns::POSITIONAL),
            },
        };
        out.records += 1;
        progress.records.fetch_add(1, Ordering::Relaxed);
        match check_record(&fields, c) {
            Ok((id, email)) => {
                chunk.extend_from_slice(line.to_string().as_bytes());
                chunk.push(b'\t');
                chunk.extend_from_slice(id.to_string().as_bytes());
                chunk.push(b'\t');
                push_copy_text(&mut chunk, &email);
                chunk.push(b'\n');
                if chunk.len() >= CHUNK_BYTES {
                    let full =
                        std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK_BYTES + 1024));
                    if tx.blocking_send(full).is_err() {
                        break; // the database side gave up; its error is reported
                    }
                }
            }
            Err(reason) => reject(&mut out, &mut rejects, line, reason, &fields, c)?,
        }
    }
    if !chunk.is_empty() {
        let _ = tx.blocking_send(chunk);
    }
    out.rejects = rejects;
    Ok(out)
}

/// Imports `input` into campaign `campaign_id`. `rejects`, if given, receives every bad or
/// repeated line (as `member_id,email,line,reason` with a header) and the rest is imported;
/// without it any bad line means nothing is imported ([`ImportError::Rejected`]).
pub async fn import(
    opts: &PgConnectOptions,
    campaign_id: &str,
    input: Box<dyn Read + Send>,
    rejects: Option<Box<dyn Write + Send>>,
    progress: Arc<Progress>,
) -> Result<ImportReport, ImportError> {
    let started = Instant::now();
    // Its statements are slow by design (seconds for a million rows): no slow-statement warnings.
    let opts = opts.clone().disable_statement_logging();
    let mut conn = PgConnection::connect_with(&opts).await?;
    // The staging table of 1.2 M rows is ~80 MB: keep it in session memory, not spilled.
    // language=PostgreSQL
    sqlx::query("SET temp_buffers = '256MB'")
        .execute(&mut conn)
        .await?;
    let mut tx = conn.begin().await?;
    // language=PostgreSQL
    sqlx::query("SET LOCAL work_mem = '64MB'")
        .execute(&mut *tx)
        .await?;
    // Invariant: the staging rows vanish with the transaction, committed or not.
    // language=PostgreSQL
    sqlx::query(
        "CREATE TEMP TABLE import_rows (line bigint NOT NULL, member_id bigint NOT NULL, email text NOT NULL) ON COMMIT DROP",
    )
    .execute(&mut *tx)
    .await?;

    let mut rejects = rejects.map(csv::Writer::from_writer);
    if let Some(w) = &mut rejects {
        w.write_record(["member_id", "email", "line", "reason"])
            .map_err(|e| ImportError::Rejects(e.into()))?;
    }
    let skipping = rejects.is_some();
    let (tx_data, mut rx_data) = mpsc::channel::<Vec<u8>>(4);
    let p = progress.clone();
    let reader = tokio::task::spawn_blocking(move || read_input(input, rejects, tx_data, p));

    // language=PostgreSQL
    let mut copy = tx
        .copy_in_raw("COPY import_rows (line, member_id, email) FROM STDIN")
        .await?;
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
    let mut read = match read {
        Ok(r) => r,
        Err(e) => {
            let _ = copy.abort("input rejected").await;
            return Err(e);
        }
    };
    let mut report = ImportReport {
        records: read.records,
        invalid: read.invalid,
        ..Default::default()
    };
    copy.finish().await?;
    // Statistics for the planner (a temp table has none): hash/merge plans for the checks.
    // language=PostgreSQL
    sqlx::query("ANALYZE import_rows").execute(&mut *tx).await?;

    progress.set(Phase::CheckingDuplicates);
    // Invariant: a member appears at most once per file; the first line wins, later ones are
    // the rejects. Found by the database (hash aggregate), so the client holds no id set.
    // language=PostgreSQL
    const REPEATS: &str = r#"
        SELECT d.line, d.member_id, d.email, d.first_line
          FROM (SELECT line, member_id, email,
                       min(line) OVER (PARTITION BY member_id) AS first_line
                  FROM import_rows
                 WHERE member_id IN (SELECT member_id FROM import_rows
                                      GROUP BY member_id HAVING count(*) > 1)) d
         WHERE d.line > d.first_line
         ORDER BY d.line
    "#;
    let mut errors = read.errors;
    {
        let mut rows = sqlx::query(REPEATS).fetch(&mut *tx);
        while let Some(r) = rows.try_next().await? {
            let (line, member_id, email, first): (i64, i64, String, i64) =
                (r.get(0), r.get(1), r.get(2), r.get(3));
            report.duplicates += 1;
            let reason = format!("member_id repeats line {first}");
            if let Some(w) = &mut read.rejects {
                w.write_record([
                    member_id.to_string().as_str(),
                    &email,
                    &line.to_string(),
                    &reason,
                ])
                .map_err(|e| ImportError::Rejects(e.into()))?;
            }
            if errors.len() < ERRORS_SHOWN {
                errors.push(LineError {
                    line: line as u64,
                    reason,
                });
            }
        }
    }
    if (report.invalid > 0 || report.duplicates > 0) && !skipping {
        // Dropping the transaction rolls it back: nothing was imported.
        errors.sort_by_key(|e| e.line);
        return Err(ImportError::Rejected { errors, report });
    }
    if report.duplicates > 0 {
        // language=PostgreSQL
        sqlx::query(
            r#"
            DELETE FROM import_rows i
             USING (SELECT member_id, min(line) AS first_line FROM import_rows
                     GROUP BY member_id HAVING count(*) > 1) d
             WHERE i.member_id = d.member_id AND i.line > d.first_line
            "#,
        )
        .execute(&mut *tx)
        .await?;
    }
    if let Some(mut w) = read.rejects.take() {
        w.flush().map_err(ImportError::Rejects)?;
    }

    progress.set(Phase::Inserting);
    report.inserted = insert_new(&mut tx, campaign_id).await?;
    let valid = report.records - report.invalid - report.duplicates;
    report.already_present = valid - report.inserted;
    if report.already_present > 0 {
        // language=PostgreSQL
        let changed: i64 = sqlx::query_scalar(
            r#"
            SELECT count(*)
              FROM import_rows i
              JOIN campaign_targets t ON t.campaign_id = $1 AND t.member_id = i.member_id
             WHERE t.email IS DISTINCT FROM i.email
            "#,
        )
        .bind(campaign_id)
        .fetch_one(&mut *tx)
        .await?;
        report.changed_email = changed as u64;
    }
    progress.set(Phase::Committing);
    tx.commit().await?;
    progress.set(Phase::Done);
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Inserts the staged rows the campaign does not have yet; returns how many.
///
/// Invariants:
/// - idempotent: a row the campaign already has is left exactly as it is (its state, its
///   attempts, its address): a `sent` row is never reset, a running worker's lease never
///   disturbed;
/// - new rows enter as `pending` with every other column at its default;
/// - inserted in key order, so the primary-key index is filled sequentially.
///
/// The fast path skips existing rows with an anti-join and inserts plainly (`ON CONFLICT`'s
/// speculative insertion took 60–80 % longer at 1.2 M rows, docs/BENCHMARKS.md). If another writer
/// inserts one of the same members meanwhile, the fast path meets a unique violation: it is
/// rolled back to a savepoint and the same rows go in with `ON CONFLICT DO NOTHING`.
async fn insert_new(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    campaign_id: &str,
) -> Result<u64, sqlx::Error> {
    // language=PostgreSQL
    const FAST: &str = r#"
        INSERT INTO campaign_targets (campaign_id, member_id, email)
        SELECT $1, i.member_id, i.email
          FROM import_rows i
         WHERE NOT EXISTS (SELECT 1 FROM campaign_targets t
                            WHERE t.campaign_id = $1 AND t.member_id = i.member_id)
         ORDER BY i.member_id
    "#;
    let mut sp = tx.begin().await?;
    match sqlx::query(FAST).bind(campaign_id).execute(&mut *sp).await {
        Ok(r) => {
            sp.commit().await?;
            Ok(r.rows_affected())
        }
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            sp.rollback().await?;
            tracing::info!("members were inserted concurrently; importing around them");
            // language=PostgreSQL
            let racing = format!("{FAST} ON CONFLICT (campaign_id, member_id) DO NOTHING");
            Ok(sqlx::query(&racing)
                .bind(campaign_id)
                .execute(&mut **tx)
                .await?
                .rows_affected())
        }
        Err(e) => Err(e),
    }
}

/// A progress line for logs and pipes (no terminal): `import: 400000 records, 33% of 52 MB, 3.1 s`.
pub fn progress_line(p: &Progress, total_bytes: Option<u64>, elapsed: Duration) -> String {
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
    fn a_valid_record_gives_its_id_and_address() {
        assert_eq!(
            check_record(&["42", "a@example.com"], Columns::POSITIONAL),
            Ok((42, "a@example.com".to_string()))
        );
    }

    #[test]
    fn reasons_name_the_problem_and_never_quote_the_address() {
        let cases: &[(&[&str], &str)] = &[
            (&["x@example.com", "7"], "member_id is not an integer"),
            (&["", "a@example.com"], "member_id is empty"),
            (&["1.5", "a@example.com"], "member_id is not an integer"),
            (&["7", ""], "email is empty"),
            (&["7", "not-an-address"], "not a plausible address"),
            (&["7", "a@b.com", "extra"], "expected 2 fields, found 3"),
            (&["7"], "expected 2 fields, found 1"),
        ];
        for (fields, want) in cases {
            let err = check_record(fields, Columns::POSITIONAL).unwrap_err();
            assert!(err.contains(want), "{fields:?}: {err}");
            assert!(!err.contains('@'), "a reason quoted an address: {err}");
        }
    }

    #[test]
    fn a_header_is_recognised_by_name_and_columns_may_be_reordered() {
        assert_eq!(
            Columns::from_header(&["email", "Member_ID", "reason"]),
            Some(Ok(Columns {
                member_id: 1,
                email: 0,
                width: 3
            }))
        );
        assert_eq!(Columns::from_header(&["1", "a@example.com"]), None);
        assert!(matches!(
            Columns::from_header(&["member_id", "mail"]),
            Some(Err(_))
        ));
    }

    #[test]
    fn the_plain_progress_line_says_phase_records_share_and_time() {
        let p = Progress::default();
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

    #[test]
    fn copy_text_escapes_backslashes_and_separators() {
        let mut out = Vec::new();
        push_copy_text(&mut out, "a\\b\tc\nd");
        assert_eq!(out, b"a\\\\b\\tc\\nd");
    }
}
