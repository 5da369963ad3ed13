//! The operator commands' terminal side: `import`, `status`, `pause`, `resume`, `retry-failed`
//! and `configure`. The work is in [`crate::import`], [`crate::status`], [`crate::campaign`]
//! and [`crate::store`]; this module reads files, draws progress (indicatif on a terminal,
//! plain periodic lines otherwise), prints results and maps them to exit codes.
//!
//! Output never contains an address: import errors name lines and reasons, status shows counts.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use sqlx::PgPool;
use tracing::error;

use crate::campaign;
use crate::cli::{db_unavailable, Command};
use crate::import::{self, ImportError, Progress};
use crate::report::exit;
use crate::status;
use crate::store::{RetryFilter, Store};

/// How often progress is written when stderr is not a terminal.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(5);

pub async fn dispatch(cmd: Command, pool: &PgPool) -> ExitCode {
    let result = match cmd {
        Command::Import {
            campaign,
            file,
            skip_invalid,
        } => return import_cmd(pool, &campaign, file, skip_invalid).await,
        Command::Status {
            campaign,
            watch,
            json,
            interval_ms,
            max_permanent_failure_ratio,
        } => {
            return status_cmd(
                pool,
                &campaign,
                watch,
                json,
                Duration::from_millis(interval_ms.max(100)),
                max_permanent_failure_ratio,
            )
            .await
        }
        Command::Pause { campaign, reason } => {
            campaign::pause(pool, &campaign, campaign::BY_OPERATOR, reason.as_deref())
                .await
                .map(|p| {
                    println!(
                        "{campaign}: paused since {} by {}{}. Running pods stop within a second; `resume` lifts it.",
                        p.at.format("%Y-%m-%d %H:%M:%S UTC"),
                        p.by,
                        p.reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    );
                })
        }
        Command::Resume { campaign } => campaign::resume(pool, &campaign).await.map(|p| match p {
            Some(p) => println!(
                "{campaign}: resumed (was paused by {} since {}). `serve` pods continue by themselves; start the Job again for `run`.",
                p.by,
                p.at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
            None => println!("{campaign}: was not paused; nothing changed"),
        }),
        Command::RetryFailed {
            campaign,
            statuses,
            classes,
            since,
            dry_run,
        } => {
            let filter = RetryFilter {
                statuses: statuses.iter().map(|s| *s as i16).collect(),
                classes,
                since,
            };
            let store = Store::new(pool.clone(), campaign.clone());
            match store.retry_failed(&filter, dry_run).await {
                Ok(n) => {
                    if dry_run {
                        println!("{campaign}: {n} failed rows match; nothing changed (--dry-run)");
                    } else {
                        println!("{campaign}: {n} failed rows put back to pending with attempts reset");
                    }
                    if let Ok(Some(p)) = campaign::paused(pool, &campaign).await {
                        println!(
                            "{campaign}: still paused by {}; `campaign-sender resume --campaign {campaign}` to send them",
                            p.by
                        );
                    }
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Command::Configure {
            campaign,
            template,
            max_permanent_failure_ratio,
        } => {
            let set = campaign::set_settings(
                pool,
                &campaign,
                template.as_deref(),
                max_permanent_failure_ratio,
            )
            .await;
            match set {
                Ok(()) => campaign::settings(pool, &campaign).await.map(|s| {
                    println!(
                        "{campaign}: template {}, failure threshold {}",
                        s.template,
                        s.max_permanent_failure_ratio
                            .map(|r| r.to_string())
                            .unwrap_or_else(|| "MAX_PERMANENT_FAILURE_RATIO".into())
                    )
                }),
                Err(e) => Err(e),
            }
        }
        Command::Migrate | Command::Run | Command::Serve => unreachable!("not an operator command"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => db_unavailable(e),
    }
}

async fn import_cmd(
    pool: &PgPool,
    campaign_id: &str,
    file: Option<std::path::PathBuf>,
    skip_invalid: Option<std::path::PathBuf>,
) -> ExitCode {
    if campaign_id.trim().is_empty() {
        eprintln!("--campaign must not be empty");
        return ExitCode::from(exit::CONFIG);
    }
    let (input, total_bytes): (Box<dyn std::io::Read + Send>, Option<u64>) = match file {
        Some(path) if path.as_os_str() != "-" => match std::fs::File::open(&path) {
            Ok(f) => {
                let len = f.metadata().ok().map(|m| m.len());
                (Box::new(std::io::BufReader::with_capacity(1 << 16, f)), len)
            }
            Err(e) => {
                eprintln!("cannot open {}: {e}", path.display());
                return ExitCode::from(exit::NO_INPUT);
            }
        },
        _ => (Box::new(std::io::stdin()), None),
    };
    let rejects: Option<Box<dyn std::io::Write + Send>> = match &skip_invalid {
        Some(path) => match std::fs::File::create(path) {
            Ok(f) => Some(Box::new(std::io::BufWriter::new(f))),
            Err(e) => {
                eprintln!("cannot create the rejects file {}: {e}", path.display());
                return ExitCode::from(exit::NO_INPUT);
            }
        },
        None => None,
    };
    let progress = Arc::new(Progress::default());
    let shown = show_progress(progress.clone(), total_bytes);
    let opts = pool.connect_options().as_ref().clone();
    let result = import::import(&opts, campaign_id, input, rejects, progress).await;
    shown.abort();
    let _ = shown.await;
    match result {
        Ok(r) => {
            println!(
                "{campaign_id}: {} records read, {} imported as pending, {} already present (left as they were{}), {} invalid and {} repeated skipped{} in {:.1} s",
                r.records,
                r.inserted,
                r.already_present,
                if r.changed_email > 0 { format!("; {} with a different address in the file, not applied", r.changed_email) } else { String::new() },
                r.invalid,
                r.duplicates,
                skip_invalid.map(|p| format!(" (written to {})", p.display())).unwrap_or_default(),
                r.elapsed_ms as f64 / 1000.0
            );
            ExitCode::SUCCESS
        }
        Err(ImportError::Rejected { errors, report }) => {
            for e in &errors {
                eprintln!("{e}");
            }
            let shown = errors.len() as u64;
            let all = report.invalid + report.duplicates;
            if all > shown {
                eprintln!("… and {} more", all - shown);
            }
            eprintln!(
                "{}",
                ImportError::Rejected {
                    errors: vec![],
                    report
                }
            );
            ExitCode::from(exit::DATA_ERROR)
        }
        Err(e @ (ImportError::Input(_) | ImportError::Rejects(_))) => {
            eprintln!("{e}; nothing was imported");
            ExitCode::from(exit::NO_INPUT)
        }
        Err(e @ ImportError::Database(_)) => {
            error!(error = %e, "import failed");
            ExitCode::from(exit::DATABASE_UNAVAILABLE)
        }
    }
}

/// Draws import progress until aborted: a bar on a terminal, a line every few seconds
/// otherwise (a Job's log, a pipe).
fn show_progress(p: Arc<Progress>, total_bytes: Option<u64>) -> tokio::task::JoinHandle<()> {
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

async fn status_cmd(
    pool: &PgPool,
    campaign_id: &str,
    watch: bool,
    json: bool,
    interval: Duration,
    ratio: f64,
) -> ExitCode {
    let cancel = crate::shutdown::root_token();
    let tty = std::io::stdout().is_terminal() && !json;
    let bar = (watch && tty).then(|| {
        ProgressBar::new(0).with_style(
            ProgressStyle::with_template("{msg}\n{wide_bar} {pos}/{len} settled ({percent}%)")
                .expect("template"),
        )
    });
    loop {
        let s = match status::gather(pool, campaign_id, ratio).await {
            Ok(s) => s,
            Err(e) => return db_unavailable(e),
        };
        if !s.known {
            eprintln!("{campaign_id}: no such campaign (no targets and no settings row); `import` loads one");
            return ExitCode::FAILURE;
        }
        let c = &s.progress.counts;
        match &bar {
            Some(bar) => {
                bar.set_length(c.total as u64);
                bar.set_position((c.sent + c.failed + c.opted_out) as u64);
                bar.set_message(status::render(&s).trim_end().to_string());
            }
            None if json => println!("{}", serde_json::to_string(&s).expect("status serialises")),
            None if watch => println!("{} {}", s.at.format("%H:%M:%S"), status::one_line(&s)),
            None => print!("{}", status::render(&s)),
        }
        if !watch || s.done {
            if let Some(bar) = &bar {
                bar.finish();
            }
            return ExitCode::SUCCESS;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = cancel.cancelled() => {
                if let Some(bar) = &bar { bar.abandon(); }
                return ExitCode::SUCCESS;
            }
        }
    }
}
