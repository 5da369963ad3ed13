//! `suppress`: the provider's suppression list — `email[,reason]` per line, header optional —
//! into `suppressions` ([`crate::store::suppressions`]), or off it with `--remove`.
//!
//! Streaming and atomic like `import`: a reader thread parses and validates, the database side
//! copies into a staging table, and everything happens in one transaction — any bad line means
//! nothing changes (its number and what is wrong are reported, never the address).

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use sqlx::postgres::PgConnectOptions;
use sqlx::Connection;
use tokio::sync::mpsc;

use super::csv::push_copy_text;
use super::{copy_from_reader, ImportError, ImportProgress, ImportReport, LineError, ERRORS_SHOWN};
use crate::store::import::session;
use crate::store::suppressions as sql;

const CHUNK_BYTES: usize = 1 << 20;
/// An address longer than this is not an address (RFC 5321's 64 + 1 + 255).
const MAX_ADDRESS: usize = 320;
/// The reason stored when a line gives none.
pub const NO_REASON: &str = "unspecified";

/// Add the file's addresses to the list, or take their listings for some reasons off it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Direction {
    Add,
    /// The reasons to lift; none: every reason but those kept by default
    /// ([`crate::store::suppressions::Reason::kept_by_default`]).
    Remove(Vec<String>),
}

/// What a `suppress` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SuppressReport {
    /// Records read (blank lines and the header not counted).
    pub records: u64,
    /// Listings (address and reason, every form of an internationalised domain counted) new to
    /// the list, and listed already as the file has them (not written).
    pub added: u64,
    pub unchanged: u64,
    /// `--remove`: listings taken off per reason, listings of the file's addresses that stay
    /// per reason, and rows back to `pending` because their address is listed no more.
    pub lifted: Vec<(String, i64)>,
    pub kept: Vec<(String, i64)>,
    pub restored: u64,
    /// Addresses on the list afterwards.
    pub listed: u64,
    pub elapsed_ms: u64,
}

/// One line's address (folded by [`crate::fold`], and by the database) and reason, or what is
/// wrong with it.
pub fn check_line<'a>(fields: &[&'a str]) -> Result<(&'a str, String), String> {
    let email = fields.first().copied().unwrap_or_default();
    if fields.len() > 2 {
        return Err(format!("{} fields; expected email[,reason]", fields.len()));
    }
    if email.is_empty() {
        return Err("empty address".into());
    }
    if email.len() > MAX_ADDRESS
        || !email.contains('@')
        || email.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("not an email address".into());
    }
    let reason = fields
        .get(1)
        .copied()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if reason.is_empty() {
        return Ok((email, NO_REASON.into()));
    }
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if reason.len() > 64 || !reason.chars().all(word) {
        return Err(format!(
            "reason {reason:?} is not a word (letters, digits, _ - .; e.g. hard_bounce, complaint, unsubscribe)"
        ));
    }
    Ok((email, reason))
}

/// Applies the file to the suppression list in one transaction.
pub async fn suppress(
    opts: &PgConnectOptions,
    input: Box<dyn Read + Send>,
    direction: Direction,
    progress: Arc<ImportProgress>,
) -> Result<SuppressReport, ImportError> {
    let started = Instant::now();
    let mut conn = session(opts).await?;
    let mut tx = conn.begin().await?;
    sql::create_staging(&mut tx).await?;
    let p = progress.clone();
    let (records, invalid, errors) = copy_from_reader(&mut tx, sql::COPY_STAGING, move |chunks| {
        read(input, chunks, p)
    })
    .await?;
    if invalid > 0 {
        // Dropping the transaction rolls it back: nothing changed.
        let report = ImportReport {
            records,
            invalid,
            ..Default::default()
        };
        return Err(ImportError::Rejected { errors, report });
    }
    if records == 0 {
        return Err(ImportError::NoRecords);
    }
    let mut report = SuppressReport {
        records,
        ..Default::default()
    };
    match &direction {
        Direction::Add => {
            let a = sql::add(&mut tx).await?;
            report.added = a.added as u64;
            report.unchanged = (a.listings - a.added) as u64;
        }
        Direction::Remove(reasons) => {
            let l = sql::lift(&mut tx, reasons).await?;
            (report.lifted, report.kept, report.restored) = (l.lifted, l.kept, l.restored);
        }
    }
    tx.commit().await?;
    report.listed = sql::listed_on(&mut conn).await? as u64;
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The reader thread: records → COPY text (`line \t email \t reason`) in 1-MiB chunks.
/// Returns the records read, the bad lines and the first [`ERRORS_SHOWN`] of them.
fn read(
    input: Box<dyn Read + Send>,
    tx: mpsc::Sender<Vec<u8>>,
    progress: Arc<ImportProgress>,
) -> Result<(u64, u64, Vec<LineError>), ImportError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(input);
    let (mut records, mut invalid, mut errors) = (0u64, 0u64, Vec::new());
    let mut header_possible = true;
    let mut chunk = Vec::with_capacity(CHUNK_BYTES + 1024);
    let mut record = csv::StringRecord::new();
    loop {
        let line = rdr.position().line();
        let reason = match rdr.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(line, |p| p.line());
                let fields: Vec<&str> = record.iter().collect();
                if fields.iter().all(|f| f.is_empty()) {
                    continue;
                }
                if std::mem::take(&mut header_possible) && fields[0].eq_ignore_ascii_case("email") {
                    continue;
                }
                records += 1;
                progress.records.fetch_add(1, Ordering::Relaxed);
                match check_line(&fields) {
                    Ok((email, reason)) => {
                        // Every form of the address: an internationalised domain is one
                        // mailbox in both (crate::fold::listings).
                        for form in crate::fold::listings(email) {
                            chunk.extend_from_slice(line.to_string().as_bytes());
                            chunk.push(b'\t');
                            push_copy_text(&mut chunk, &form);
                            chunk.push(b'\t');
                            push_copy_text(&mut chunk, &reason);
                            chunk.push(b'\n');
                        }
                        if chunk.len() >= CHUNK_BYTES {
                            let full = std::mem::replace(
                                &mut chunk,
                                Vec::with_capacity(CHUNK_BYTES + 1024),
                            );
                            if tx.blocking_send(full).is_err() {
                                break;
                            }
                        }
                        continue;
                    }
                    Err(reason) => LineError { line, reason },
                }
            }
            Err(e) => match e.kind() {
                csv::ErrorKind::Utf8 { pos, .. } => {
                    records += 1;
                    LineError {
                        line: pos.as_ref().map_or(line, |p| p.line()),
                        reason: "not valid UTF-8".into(),
                    }
                }
                _ => return Err(ImportError::Input(std::io::Error::other(e.to_string()))),
            },
        };
        invalid += 1;
        if errors.len() < ERRORS_SHOWN {
            errors.push(reason);
        }
    }
    if !chunk.is_empty() {
        let _ = tx.blocking_send(chunk);
    }
    Ok((records, invalid, errors))
}

#[cfg(test)]
mod tests {
    use super::check_line;

    #[test]
    fn a_line_is_an_address_and_an_optional_reason_word() {
        assert_eq!(
            check_line(&["A@Example.com", "Hard_Bounce"]),
            Ok(("A@Example.com", "hard_bounce".into()))
        );
        assert_eq!(
            check_line(&["a@example.com"]),
            Ok(("a@example.com", "unspecified".into()))
        );
        assert_eq!(check_line(&["a@example.com", ""]).unwrap().1, "unspecified");
        for bad in [
            vec![""],
            vec!["no-at-sign"],
            vec!["a b@example.com"],
            vec!["a@example.com", "two words"],
            vec!["a@example.com", "complaint", "extra"],
        ] {
            let err = check_line(&bad).expect_err("rejected");
            assert!(
                !err.contains("example.com"),
                "never quotes the address: {err}"
            );
        }
    }
}
