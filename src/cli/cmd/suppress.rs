//! `campaign-sender suppress`: the provider's suppression list in (`suppress FILE`, `--remove`)
//! and out (`--export`), and the vendor's own list lifted of our refusals
//! (`--lift-at-vendor`, [`super::lift`]). The work is [`crate::import::suppress`] and
//! [`crate::store::suppressions`]; output never contains an address but in the export file.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::import::{failed, open_input};
use super::{Needs, OperatorCommand};
use crate::cli::args::parse_since;
use crate::cli::{CliError, CliResult};
use crate::exit::Exit;
use crate::import::suppress::{suppress, Direction, SuppressReport};
use crate::import::{ImportError, ImportProgress};
use crate::store::suppressions::Reason;

/// Loads the provider's suppression list (CSV `email[,reason]`, header optional; reasons
/// such as hard_bounce, complaint, unsubscribe) in one transaction: any bad line and
/// nothing changes (exit 65). A listed address is never sent to, in any campaign; rows
/// already claimed are stopped before their send. An address is listed for each reason it is
/// given, one spelling per mailbox (case, Unicode form, a trailing dot, and an
/// internationalised domain's two forms do not matter). `--remove` lifts the file's
/// addresses' listings for `--reason` (default: every reason but unsubscribe and complaint).
#[derive(Args, Debug)]
pub struct Suppress {
    /// The CSV file; `-` or nothing reads standard input.
    file: Option<std::path::PathBuf>,
    /// Lift these addresses' listings for --reason (default: every reason but unsubscribe and
    /// complaint, which are the member's own word); suppressed rows of an address listed for
    /// no reason any more go back to pending.
    #[arg(long, conflicts_with = "export")]
    remove: bool,
    /// Write the list instead, `email,reason,source,suppressed_at`, one line per address and
    /// reason, to FILE (`-`: standard output): who left, for the system that feeds
    /// `campaign_targets`. FILE is created 0600 and never over an existing one.
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    export: Option<std::path::PathBuf>,
    /// With --export: only the listings made since (`2h`, `7d`, or an RFC 3339 time).
    #[arg(long, requires = "export", value_parser = parse_since)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// With --export or --remove: only these reasons, comma-separated
    /// (`unsubscribe,complaint`); an unknown one is refused.
    #[arg(long, value_delimiter = ',')]
    reason: Vec<String>,
    /// With --export: replace FILE if it is a regular file (never a symbolic link).
    #[arg(long, requires = "export")]
    force: bool,
    /// With --export: the addresses byte for byte, for a machine; without it a cell that
    /// begins with `=`, `+`, `-`, `@`, a tab or a CR is written after a `'`, so that no
    /// spreadsheet runs it as a formula (OWASP's CSV injection advice).
    #[arg(long, requires = "export")]
    raw: bool,
    /// Take the addresses of --campaign that the vendor (MAIL_PROVIDER, with its key) listed
    /// after refusing them for our domain's fault off the vendor's own suppression list,
    /// through its API; addresses on our list stay listed there too.
    #[arg(long, requires = "campaign", conflicts_with_all = ["file", "remove", "export", "reason"])]
    lift_at_vendor: bool,
    /// With --lift-at-vendor: the campaign whose refusals to lift.
    #[arg(long, requires = "lift_at_vendor")]
    campaign: Option<String>,
}

impl OperatorCommand for Suppress {
    fn needs(&self) -> Needs<'_> {
        match &self.campaign {
            Some(campaign) => Needs::Existing(campaign),
            None => Needs::Nothing,
        }
    }

    async fn run(self, pool: &PgPool, shutdown: CancellationToken) -> CliResult {
        if let (true, Some(campaign)) = (self.lift_at_vendor, &self.campaign) {
            return super::lift::lift_at_vendor(pool, campaign, shutdown).await;
        }
        let reasons = reasons(pool, &self.reason, self.export.is_some() || self.remove).await?;
        match self.export {
            Some(to) => {
                let out = Export {
                    to,
                    force: self.force,
                    raw: self.raw,
                };
                export(pool, &out, self.since, &reasons).await
            }
            None => {
                let direction = if self.remove {
                    Direction::Remove(reasons)
                } else {
                    Direction::Add
                };
                change(pool, self.file, direction).await
            }
        }
    }
}

/// `--reason` as typed, case folded; a reason neither this tool's nor listed for anybody is a
/// typo (64), never an empty export or a lift of nothing done silently.
async fn reasons(pool: &PgPool, typed: &[String], allowed: bool) -> Result<Vec<String>, CliError> {
    if typed.is_empty() {
        return Ok(Vec::new());
    }
    if !allowed {
        eprintln!("usage error: --reason goes with --export or --remove; nothing changed");
        return Err(Exit::Usage.into());
    }
    let folded: Vec<String> = typed.iter().map(|r| r.trim().to_lowercase()).collect();
    let unknown = crate::store::suppressions::unknown_reasons(pool, &folded).await?;
    if folded.iter().any(String::is_empty) || !unknown.is_empty() {
        let known: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        eprintln!(
            "usage error: --reason {} is not a reason anybody is listed for (ours: {}); nothing changed",
            unknown.iter().map(|r| crate::shown::quoted(r)).collect::<Vec<_>>().join(", "),
            known.join(", ")
        );
        return Err(Exit::Usage.into());
    }
    Ok(folded)
}

/// Where the export goes, and how.
struct Export {
    to: std::path::PathBuf,
    force: bool,
    raw: bool,
}

/// `suppress --export FILE`: the list as `email,reason,source,suppressed_at`, oldest first,
/// streamed (a list of millions never sits in memory). The file is the operator's to keep: it
/// holds addresses, which this command never prints anywhere else — so it is created 0600,
/// never over an existing file nor through a symbolic link, and its cells cannot run as a
/// spreadsheet's formulas unless `--raw` asks for the bytes.
async fn export(
    pool: &PgPool,
    out: &Export,
    since: Option<chrono::DateTime<chrono::Utc>>,
    reasons: &[String],
) -> CliResult {
    use futures::TryStreamExt;
    let sink: Box<dyn std::io::Write> = if out.to.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(create_private(&out.to, out.force)?)
    };
    let mut csv = csv::Writer::from_writer(sink);
    let failed = |e: csv::Error| {
        eprintln!("writing the export failed: {e}");
        Exit::Incomplete
    };
    csv.write_record(["email", "reason", "source", "suppressed_at"])
        .map_err(failed)?;
    let mut rows = crate::store::suppressions::export(pool, since, reasons);
    let mut n = 0u64;
    let cell = |v: &str| {
        if out.raw {
            v.to_string()
        } else {
            inert_cell(v)
        }
    };
    while let Some(r) = rows.try_next().await? {
        let at = r
            .suppressed_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let source = r.source.as_deref().unwrap_or("");
        csv.write_record([cell(&r.email), cell(&r.reason), cell(source), at])
            .map_err(failed)?;
        n += 1;
    }
    csv.flush().map_err(|e| failed(e.into()))?;
    eprintln!("{n} listings exported");
    Ok(())
}

/// A new file only its owner may read (0600), created exclusively: an existing file is refused
/// (with `force`, a regular one is replaced), a symbolic link always is — `O_EXCL` does not
/// follow one, so nothing is written through a link planted at the path.
fn create_private(path: &std::path::Path, force: bool) -> Result<std::fs::File, CliError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            eprintln!(
                "{} is a symbolic link: the export never writes through one; nothing written",
                path.display()
            );
            return Err(Exit::Incomplete.into());
        }
        Ok(m) if force && m.file_type().is_file() => {
            std::fs::remove_file(path).map_err(|e| {
                eprintln!("cannot replace {}: {e}", path.display());
                Exit::Incomplete
            })?;
        }
        Ok(_) => {
            eprintln!("{} exists: the export never overwrites a file (--force replaces a regular one); nothing written", path.display());
            return Err(Exit::Incomplete.into());
        }
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            eprintln!("cannot create {}: {e}; nothing written", path.display());
            Exit::Incomplete.into()
        })
}

/// A cell no spreadsheet runs: one beginning with `=`, `+`, `-`, `@`, a tab or a CR gets a
/// leading `'` (OWASP, CSV injection).
pub fn inert_cell(v: &str) -> String {
    if v.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{v}")
    } else {
        v.to_string()
    }
}

async fn change(pool: &PgPool, file: Option<PathBuf>, direction: Direction) -> CliResult {
    let (input, _) = open_input(file)?;
    let opts = pool.connect_options().as_ref().clone();
    let progress = Arc::new(ImportProgress::default());
    let removing = direction != Direction::Add;
    match suppress(&opts, input, direction, progress).await {
        Ok(r) => {
            print_done(removing, &r);
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

fn print_done(removing: bool, r: &SuppressReport) {
    let secs = r.elapsed_ms as f64 / 1000.0;
    let each = |per: &[(String, i64)]| {
        if per.is_empty() {
            return "none".to_string();
        }
        per.iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !removing {
        println!(
            "suppressions: {} lines read, {} listings added, {} already listed as they were; {} addresses listed in all, in {secs:.1} s",
            r.records, r.added, r.unchanged, r.listed
        );
        return;
    }
    println!(
        "suppressions: {} lines read; lifted {}; kept {}; {} suppressed rows back to pending; {} addresses listed in all, in {secs:.1} s",
        r.records,
        each(&r.lifted),
        each(&r.kept),
        r.restored,
        r.listed
    );
    let protected: Vec<&str> = r
        .kept
        .iter()
        .map(|(reason, _)| reason.as_str())
        .filter(|reason| Reason::kept_by_default(reason))
        .collect();
    if !protected.is_empty() {
        println!(
            "suppressions: {} listings are the member's own word and stay unless named: --reason {}",
            protected.join(" and "),
            protected.join(",")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::inert_cell;

    #[test]
    fn a_cell_a_spreadsheet_would_run_is_written_inert() {
        for formula in ["=1+1@x.y", "+x@y.z", "-x@y.z", "@x", "\tx@y.z", "\rx@y.z"] {
            assert!(inert_cell(formula).starts_with('\''), "{formula:?}");
        }
        assert_eq!(inert_cell("ann@example.com"), "ann@example.com");
        assert_eq!(inert_cell("o'brien@example.com"), "o'brien@example.com");
    }
}
