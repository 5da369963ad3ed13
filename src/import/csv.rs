//! Reading an import's input: CSV records → validated `member_id`, `email` → COPY text in 1-MiB
//! chunks for the database side, bad lines to the rejects file. Runs on a blocking thread;
//! memory stays flat in file size (duplicates are found by the database, not here).
//!
//! Input: `member_id,email` per line, header optional. With a header the columns are found by
//! name (`member_id`, `email`, and the optional `priority` — an integer, higher sent first — and
//! `send_after` — an RFC 3339 time before which the row is not sent; others are ignored), so a
//! rejects file can be fixed and fed back as it is. Fields are trimmed; blank lines are skipped.
//! Reasons never quote an address (personal data): they name the line and what is wrong.

use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{ImportError, ImportProgress, ImportReport, LineError, ERRORS_SHOWN};
use crate::shown::{plausible_email, quoted};

const CHUNK_BYTES: usize = 1 << 20;

/// The rejects file: `member_id,email,line,reason`.
pub(super) type Rejects = csv::Writer<Box<dyn Write + Send>>;

/// Where the columns are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    pub member_id: usize,
    pub email: usize,
    /// Optional: higher is sent first (empty or absent: 0).
    pub priority: Option<usize>,
    /// Optional: not sent before this time (empty or absent: no schedule).
    pub send_after: Option<usize>,
    /// Fields every record must have.
    pub width: usize,
    /// Every other column of the header (position, name): the recipient's template data.
    pub data: Vec<(usize, String)>,
}

/// The longest template-data value (characters): Resend's limit on a variable, the strictest
/// of the vendors, so a file imported once can be sent through any of them.
pub const MAX_DATA_VALUE_CHARS: usize = 2000;

/// The longest template-data column name (Resend's variables; every vendor takes it).
pub const MAX_DATA_NAME_CHARS: usize = 50;

/// The columns with a meaning of their own; every other one is template data.
const NAMED: [&str; 4] = ["member_id", "email", "priority", "send_after"];

/// Why a header column cannot be a template-data name (`[A-Za-z0-9_]{1,50}`), if it cannot.
fn data_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.chars().count() > MAX_DATA_NAME_CHARS {
        return Some("must be 1 to 50 characters");
    }
    (!name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some("may hold only A-Z a-z 0-9 _ (the vendors' template variables)")
}

/// One valid record, as it is staged.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub member_id: i64,
    pub email: String,
    pub priority: i32,
    pub send_after: Option<chrono::DateTime<chrono::FixedOffset>>,
    /// The template data, a flat JSON object of strings (`None`: the file has no data column).
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Columns {
    pub const POSITIONAL: Columns = Columns {
        member_id: 0,
        email: 1,
        priority: None,
        send_after: None,
        width: 2,
        data: Vec::new(),
    };

    /// `Some` if this first record is a header (it names `member_id`), with the columns it
    /// names; `Err` if it is a header without an `email` column, or with a data column whose
    /// name the vendors cannot carry or that is named twice.
    pub fn from_header(fields: &[&str]) -> Option<Result<Columns, String>> {
        let find = |name: &str| fields.iter().position(|f| f.eq_ignore_ascii_case(name));
        let member_id = find("member_id")?;
        let Some(email) = find("email") else {
            return Some(Err(
                "the header names member_id but no email column".to_string()
            ));
        };
        let mut data: Vec<(usize, String)> = Vec::new();
        for (i, name) in fields.iter().enumerate() {
            if NAMED.iter().any(|n| name.eq_ignore_ascii_case(n)) {
                continue;
            }
            let column = i + 1;
            if let Some(problem) = data_name_problem(name) {
                return Some(Err(format!(
                    "column {column}'s name {problem} (it is template data: every column but member_id, email, priority, send_after)"
                )));
            }
            if data.iter().any(|(_, n)| n == name) {
                return Some(Err(format!(
                    "column {column}'s name is also an earlier column's"
                )));
            }
            data.push((i, name.to_string()));
        }
        Some(Ok(Columns {
            member_id,
            email,
            priority: find("priority"),
            send_after: find("send_after"),
            width: fields.len(),
            data,
        }))
    }
}

/// Validates one record: the member id, the address, and the optional priority and schedule,
/// or why not. Pure.
pub fn check_record(fields: &[&str], cols: &Columns) -> Result<Record, String> {
    if let Some(i) = fields.iter().position(|f| f.contains('\0')) {
        return Err(format!(
            "column {} holds a NUL byte, which PostgreSQL's text cannot store",
            i + 1
        ));
    }
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
    let optional = |i: Option<usize>| i.map(|i| fields[i]).filter(|v| !v.is_empty());
    let priority = match optional(cols.priority) {
        None => 0,
        Some(v) => v
            .parse::<i32>()
            .map_err(|_| format!("priority {} is not an integer", quoted(v)))?,
    };
    let send_after = match optional(cols.send_after) {
        None => None,
        Some(v) => Some(chrono::DateTime::parse_from_rfc3339(v).map_err(|_| {
            format!(
                "send_after {} is not an RFC 3339 time (e.g. 2026-12-06T08:00:00+09:00)",
                quoted(v)
            )
        })?),
    };
    Ok(Record {
        member_id: id,
        email: email.to_string(),
        priority,
        send_after,
        data: template_data(fields, cols)?,
    })
}

/// The record's template data; a value longer than [`MAX_DATA_VALUE_CHARS`] names its column
/// (never its value: personal data).
fn template_data(
    fields: &[&str],
    cols: &Columns,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, String> {
    if cols.data.is_empty() {
        return Ok(None);
    }
    let mut data = serde_json::Map::new();
    for (i, name) in &cols.data {
        let value = fields[*i];
        if value.chars().count() > MAX_DATA_VALUE_CHARS {
            return Err(format!(
                "column {} ({name}) is longer than {MAX_DATA_VALUE_CHARS} characters (the vendors' limit on a template variable)",
                i + 1
            ));
        }
        data.insert(name.clone(), serde_json::Value::String(value.to_string()));
    }
    Ok(Some(data))
}

/// Appends `value` in COPY text format (backslash escapes).
pub(super) fn push_copy_text(out: &mut Vec<u8>, value: &str) {
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

/// Counts the bytes read, for the progress bar.
/// and keeps the last byte read (did the input end with its line?).
struct Counting<R> {
    inner: R,
    progress: Arc<ImportProgress>,
    last: Option<u8>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

/// What the reader thread found.
pub(super) struct ReadOutcome {
    /// The input's last byte was not a newline: it ended in the middle of a line.
    pub(super) ends_mid_line: bool,
    pub(super) records: u64,
    pub(super) invalid: u64,
    pub(super) errors: Vec<LineError>,
    pub(super) rejects: Option<Rejects>,
}

impl ReadOutcome {
    /// Counts a bad line, shows it (the first [`ERRORS_SHOWN`]) and writes it to the rejects.
    fn reject(
        &mut self,
        line: u64,
        reason: String,
        fields: &[&str],
        cols: &Columns,
    ) -> Result<(), ImportError> {
        self.invalid += 1;
        if let Some(w) = &mut self.rejects {
            let get = |i: usize| fields.get(i).copied().unwrap_or("");
            w.write_record([
                get(cols.member_id),
                get(cols.email),
                &line.to_string(),
                &reason,
            ])
            .map_err(|e| ImportError::Rejects(e.into()))?;
        }
        if self.errors.len() < ERRORS_SHOWN {
            self.errors.push(LineError { line, reason });
        }
        Ok(())
    }
}

/// Valid records as COPY text (`line \t member_id \t email \t priority \t send_after \t
/// data`), sent
/// on in 1-MiB chunks.
struct Chunks {
    chunk: Vec<u8>,
    tx: mpsc::Sender<Vec<u8>>,
}

impl Chunks {
    /// False once the database side has gone away (its error is reported).
    fn push(&mut self, line: u64, r: &Record) -> bool {
        let c = &mut self.chunk;
        c.extend_from_slice(line.to_string().as_bytes());
        c.push(b'\t');
        c.extend_from_slice(r.member_id.to_string().as_bytes());
        c.push(b'\t');
        push_copy_text(c, &r.email);
        c.push(b'\t');
        c.extend_from_slice(r.priority.to_string().as_bytes());
        c.push(b'\t');
        match &r.send_after {
            Some(t) => c.extend_from_slice(t.to_rfc3339().as_bytes()),
            None => c.extend_from_slice(b"\\N"),
        }
        c.push(b'\t');
        match &r.data {
            Some(d) => push_copy_text(c, &serde_json::Value::Object(d.clone()).to_string()),
            None => c.extend_from_slice(b"\\N"),
        }
        c.push(b'\n');
        if c.len() < CHUNK_BYTES {
            return true;
        }
        let full = std::mem::replace(c, Vec::with_capacity(CHUNK_BYTES + 1024));
        self.tx.blocking_send(full).is_ok()
    }

    fn finish(self) {
        if !self.chunk.is_empty() {
            let _ = self.tx.blocking_send(self.chunk);
        }
    }
}

/// One record read: its line and fields, or a line to skip or reject.
enum Next {
    Record(u64),
    End,
    /// Not UTF-8: rejected, reading goes on.
    NotUtf8(u64),
}

/// Parses and validates the input, sending the valid records as COPY data in chunks (also
/// after a bad line, so that repeats can still be reported before nothing is imported).
pub(super) fn read_input(
    input: Box<dyn Read + Send>,
    delimiter: u8,
    rejects: Option<Rejects>,
    tx: mpsc::Sender<Vec<u8>>,
    progress: Arc<ImportProgress>,
) -> Result<ReadOutcome, ImportError> {
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .trim(csv::Trim::All)
        .from_reader(Counting {
            inner: input,
            progress: progress.clone(),
            last: None,
        });
    let mut out = ReadOutcome {
        ends_mid_line: false,
        records: 0,
        invalid: 0,
        errors: Vec::new(),
        rejects,
    };
    let mut cols: Option<Columns> = None;
    let mut chunks = Chunks {
        chunk: Vec::with_capacity(CHUNK_BYTES + 1024),
        tx,
    };
    let mut record = csv::StringRecord::new();
    loop {
        let line = match next_record(&mut rdr, &mut record)? {
            Next::End => break,
            Next::NotUtf8(line) => {
                // A record all the same: a file of nothing else is refused for its bad lines,
                // not taken for an empty one.
                out.records += 1;
                progress.records.fetch_add(1, Ordering::Relaxed);
                out.reject(
                    line,
                    "not valid UTF-8 (save the file as UTF-8)".into(),
                    &[],
                    &Columns::POSITIONAL,
                )?;
                continue;
            }
            Next::Record(line) => line,
        };
        let fields: Vec<&str> = record.iter().collect();
        if fields.iter().all(|f| f.is_empty()) {
            continue; // a blank line
        }
        let c = match &cols {
            Some(c) => c,
            None => match first_record(&fields, line, delimiter)? {
                Some(header) => {
                    cols = Some(header);
                    continue;
                }
                None => cols.insert(Columns::POSITIONAL),
            },
        };
        out.records += 1;
        progress.records.fetch_add(1, Ordering::Relaxed);
        match check_record(&fields, c) {
            Ok(record) => {
                if !chunks.push(line, &record) {
                    break;
                }
            }
            Err(reason) => out.reject(line, reason, &fields, c)?,
        }
    }
    chunks.finish();
    out.ends_mid_line = rdr.get_ref().last.is_some_and(|b| b != b'\n');
    Ok(out)
}

/// Reads the next record into `record`: its line, the end, or a line that is not UTF-8. Any
/// other read error ends the import.
fn next_record<R: Read>(
    rdr: &mut csv::Reader<R>,
    record: &mut csv::StringRecord,
) -> Result<Next, ImportError> {
    let line = rdr.position().line();
    match rdr.read_record(record) {
        Ok(false) => Ok(Next::End),
        Ok(true) => Ok(Next::Record(record.position().map_or(line, |p| p.line()))),
        Err(e) => match e.kind() {
            csv::ErrorKind::Utf8 { pos, .. } => {
                Ok(Next::NotUtf8(pos.as_ref().map_or(line, |p| p.line())))
            }
            csv::ErrorKind::Io(_) => match e.into_kind() {
                csv::ErrorKind::Io(io) => Err(ImportError::Input(io)),
                _ => unreachable!("matched Io above"),
            },
            _ => Err(ImportError::Input(std::io::Error::other(e.to_string()))),
        },
    }
}

/// The first non-blank record: a header (its columns), or data (`None`: positional columns).
/// The whole file is refused, naming what was expected, when the first record shows it cannot
/// be read: fields separated by another character than `delimiter`, or a header without a
/// `member_id` or `email` column.
fn first_record(fields: &[&str], line: u64, delimiter: u8) -> Result<Option<Columns>, ImportError> {
    let refuse = |reason: String| {
        Err(ImportError::Rejected {
            errors: vec![LineError { line, reason }],
            report: ImportReport {
                invalid: 1,
                ..Default::default()
            },
        })
    };
    if let Some(other) = other_separator(fields, delimiter) {
        return refuse(format!(
            "the fields are separated by {}, not {}: pass --delimiter {}",
            shown_separator(other),
            shown_separator(delimiter),
            flag_separator(other)
        ));
    }
    match Columns::from_header(fields) {
        Some(Ok(c)) => Ok(Some(c)),
        Some(Err(reason)) => refuse(reason),
        None if looks_like_a_header(fields) => refuse(format!(
            "a header without a member_id column: expected member_id,email (found {})",
            quoted(&fields.join(&char::from(delimiter).to_string()))
        )),
        None => Ok(None),
    }
}

/// The separator a one-field record was really written with, if it holds one of the usual
/// others (`;`, a tab, `,`).
fn other_separator(fields: &[&str], delimiter: u8) -> Option<u8> {
    let [only] = fields else { return None };
    [b';', b'\t', b',', b'|']
        .into_iter()
        .find(|c| *c != delimiter && only.as_bytes().contains(c))
}

fn shown_separator(c: u8) -> String {
    match c {
        b'\t' => "tabs".into(),
        c => format!("'{}'", char::from(c)),
    }
}

fn flag_separator(c: u8) -> String {
    match c {
        b'\t' => "tab".into(),
        c => format!("'{}'", char::from(c)),
    }
}

/// Words, not data: no field is a number or an address (so echoing them shows no personal data).
fn looks_like_a_header(fields: &[&str]) -> bool {
    fields.len() > 1
        && fields
            .iter()
            .all(|f| !f.contains('@') && f.parse::<i64>().is_err() && !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_record_gives_its_id_and_address() {
        assert_eq!(
            check_record(&["42", "a@example.com"], &Columns::POSITIONAL),
            Ok(Record {
                member_id: 42,
                email: "a@example.com".to_string(),
                priority: 0,
                send_after: None,
                data: None,
            })
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
            let err = check_record(fields, &Columns::POSITIONAL).unwrap_err();
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
                priority: None,
                send_after: None,
                width: 3,
                data: vec![(2, "reason".to_string())],
            }))
        );
        assert_eq!(Columns::from_header(&["1", "a@example.com"]), None);
        assert!(matches!(
            Columns::from_header(&["member_id", "mail"]),
            Some(Err(_))
        ));
    }

    fn refusal(fields: &[&str], delimiter: u8) -> String {
        match first_record(fields, 1, delimiter) {
            Err(ImportError::Rejected { errors, .. }) => errors[0].reason.clone(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn another_separator_is_named_with_the_flag_that_reads_it() {
        assert_eq!(
            refusal(&["member_id;email"], b','),
            "the fields are separated by ';', not ',': pass --delimiter ';'"
        );
        assert_eq!(
            refusal(&["1\ta@example.com"], b','),
            "the fields are separated by tabs, not ',': pass --delimiter tab"
        );
        assert!(refusal(&["1,a@example.com"], b';').contains("pass --delimiter ','"));
        // Read with the right one, the same lines are fine.
        assert!(matches!(
            first_record(&["member_id", "email"], 1, b';'),
            Ok(Some(_))
        ));
    }

    #[test]
    fn a_header_without_member_id_names_the_header_expected_but_data_is_not_a_header() {
        assert_eq!(
            refusal(&["id", "email"], b','),
            "a header without a member_id column: expected member_id,email (found 'id,email')"
        );
        // Data whose id is not a number is a bad line (reported by check_record), and an
        // address is never echoed as if it were a header.
        assert!(matches!(
            first_record(&["x", "a@example.com"], 1, b','),
            Ok(None)
        ));
        assert!(matches!(
            first_record(&["7", "a@example.com"], 1, b','),
            Ok(None)
        ));
    }

    #[test]
    fn priority_and_schedule_columns_are_read_by_name_and_checked() {
        let cols = Columns::from_header(&["send_after", "email", "priority", "member_id"])
            .unwrap()
            .unwrap();
        let r = check_record(
            &["2026-12-06T08:00:00+09:00", "a@example.com", "7", "1"],
            &cols,
        )
        .unwrap();
        assert_eq!((r.member_id, r.priority), (1, 7));
        assert_eq!(
            r.send_after.unwrap().to_rfc3339(),
            "2026-12-06T08:00:00+09:00"
        );
        let empty = check_record(&["", "a@example.com", "", "2"], &cols).unwrap();
        assert_eq!((empty.priority, empty.send_after), (0, None));
        assert_eq!(
            check_record(&["", "a@example.com", "high", "3"], &cols).unwrap_err(),
            "priority 'high' is not an integer"
        );
        assert!(
            check_record(&["tomorrow", "a@example.com", "1", "4"], &cols)
                .unwrap_err()
                .starts_with("send_after 'tomorrow' is not an RFC 3339 time")
        );
    }

    #[test]
    fn every_other_column_is_template_data_with_a_name_the_vendors_take() {
        let cols = Columns::from_header(&["member_id", "first_name", "email", "plan_2"])
            .unwrap()
            .unwrap();
        let r = check_record(&["1", "Ann", "a@example.com", "gold"], &cols).unwrap();
        let data = serde_json::Value::Object(r.data.unwrap());
        assert_eq!(
            data,
            serde_json::json!({"first_name": "Ann", "plan_2": "gold"})
        );
        for (header, want) in [
            (
                ["member_id", "first name", "email"],
                "column 2's name may hold only",
            ),
            (
                ["member_id", "", "email"],
                "column 2's name must be 1 to 50",
            ),
            (
                ["member_id", &"x".repeat(51), "email"],
                "column 2's name must be 1 to 50",
            ),
            (["x", "email", "x"], "column 3's name is also"),
        ] {
            let mut header = header.to_vec();
            header.push("member_id");
            let err = Columns::from_header(&header).unwrap().unwrap_err();
            assert!(err.contains(want), "{header:?}: {err}");
        }
        let long = "é".repeat(MAX_DATA_VALUE_CHARS + 1);
        let err = check_record(&["1", &long, "a@example.com", "gold"], &cols).unwrap_err();
        assert!(
            err.starts_with("column 2 (first_name) is longer than 2000"),
            "{err}"
        );
        assert!(!err.contains('é'), "the value is never quoted: {err}");
        let fits = "é".repeat(MAX_DATA_VALUE_CHARS);
        assert!(check_record(&["1", &fits, "a@example.com", "gold"], &cols).is_ok());
    }

    #[test]
    fn a_record_error_never_quotes_an_address() {
        let err = check_record(
            &["1", "a@example.com", "h@example.com"],
            &Columns {
                priority: Some(2),
                width: 3,
                ..Columns::POSITIONAL
            },
        )
        .unwrap_err();
        assert!(!err.contains('@'), "{err}");
    }

    #[test]
    fn copy_text_escapes_backslashes_and_separators() {
        let mut out = Vec::new();
        push_copy_text(&mut out, "a\\b\tc\nd");
        assert_eq!(out, b"a\\\\b\\tc\\nd");
    }
}
