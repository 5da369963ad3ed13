//! The operator commands: `import`, `status`, `pause`, `resume`, `retry-failed`, `configure`,
//! `limit`, `resolve`, `suppress` and `archive`.
//! Each one does its work through the library ([`crate::store`], [`crate::import`],
//! [`crate::status`]), prints what happened and returns a [`CliResult`]; a database error is
//! said as the command ends ([`super::Db`]). Output never contains an address.
//!
//! Every command but `import` refuses a campaign that does not exist (no targets, no settings
//! row) and changes nothing: a typo in `pause --campaign` must not report success while the real
//! campaign keeps sending.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::args::WindowArg;
use super::problem::Patience;
use super::{CliError, CliResult, Command, Db};
use crate::exit::Exit;
use crate::store::campaigns::{self, Pause};
use crate::store::connect::Session;
use crate::store::{RetryFilter, Store};

/// Runs one operator command: connects (patient only with what waiting can heal), refuses a
/// campaign id that cannot travel or a campaign that does not exist, then does the work.
pub(super) async fn run(cmd: Command, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
    let pool = db
        .ready_pool(Session::Other, Patience::Interactive, Duration::ZERO)
        .await?;
    if let Some(refusal) = new_campaign(&cmd).and_then(invalid_id) {
        eprintln!("{refusal}");
        return Err(Exit::Config.into());
    }
    if let Some((campaign, create)) = named_campaign(&cmd) {
        if let Some(refusal) = known(&pool, campaign, create).await? {
            eprintln!("{refusal}");
            return Err(Exit::Incomplete.into());
        }
    }
    dispatch(cmd, &pool, shutdown).await
}

/// The operator command's own work, on a pool over a migrated database.
async fn dispatch(cmd: Command, pool: &PgPool, shutdown: CancellationToken) -> CliResult {
    match cmd {
        Command::Import {
            campaign,
            file,
            skip_invalid,
            delimiter,
            allow_empty,
        } => {
            let how = super::import::How {
                delimiter,
                allow_empty,
            };
            let files = (file, skip_invalid);
            super::import::import_cmd(pool, &campaign, files, how, shutdown).await
        }
        Command::Status {
            campaign,
            watch,
            json,
            interval_ms,
            max_permanent_failure_ratio,
        } => {
            let watch = super::status::Watch {
                watch,
                json,
                interval: Duration::from_millis(interval_ms.max(100)),
            };
            let defaults = crate::status::Defaults::with_env_lines(max_permanent_failure_ratio)
                .map_err(super::config_failure)?;
            super::status::status_cmd(pool, &campaign, watch, defaults, shutdown).await
        }
        Command::Pause { campaign, reason } => pause(pool, &campaign, reason.as_deref()).await,
        Command::Resume { campaign, key } => {
            super::account::resume(pool, campaign.as_deref(), key.as_deref()).await
        }
        Command::Limit { key, rate, clear } => super::account::limit(pool, &key, rate, clear).await,
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
            retry_failed(pool, &campaign, &filter, dry_run).await
        }
        Command::Configure {
            campaign,
            template,
            from,
            reply_to,
            max_permanent_failure_ratio,
            max_complaint_ratio,
            max_bounce_ratio,
            window,
            timezone,
            create: _,
        } => {
            let from = mailbox("--from", from.as_deref())?;
            let reply_to = mailbox("--reply-to", reply_to.as_deref())?;
            let settings = Settings {
                change: campaigns::SettingsChange {
                    template: template.as_deref(),
                    ratio: max_permanent_failure_ratio,
                    from: from.as_deref(),
                    reply_to: reply_to.as_deref(),
                    complaint_line: max_complaint_ratio,
                    bounce_line: max_bounce_ratio,
                },
                window,
                timezone,
            };
            configure(pool, &campaign, settings).await
        }
        Command::Resolve {
            campaign,
            assume_sent,
            resend: _,
            since,
            dry_run,
        } => super::suppress::resolve(pool, &campaign, assume_sent, since, dry_run).await,
        Command::Archive {
            campaign,
            older_than,
            dry_run,
        } => {
            let which = match (campaign, older_than) {
                (Some(c), _) => super::archive::Which::One(c),
                (None, Some(age)) => super::archive::Which::OlderThan(age),
                (None, None) => unreachable!("clap requires one"),
            };
            super::archive::archive_cmd(pool, which, dry_run).await
        }
        Command::Suppress {
            export: Some(to),
            since,
            reason,
            ..
        } => super::suppress::export(pool, &to, since, &reason).await,
        Command::Suppress { file, remove, .. } => {
            super::suppress::suppress_cmd(pool, file, remove).await
        }
        Command::Migrate
        | Command::Run
        | Command::Serve { .. }
        | Command::Events
        | Command::Web { .. } => {
            unreachable!("not an operator command")
        }
    }
}

/// The campaign id a command may make (`import`, `configure --create`): it must be one that can
/// travel ([`crate::campaign_id`]). The other commands take any existing id, so a campaign made
/// before the rule can still be seen, paused and archived.
fn new_campaign(cmd: &Command) -> Option<&str> {
    match cmd {
        Command::Import { campaign, .. } => Some(campaign),
        Command::Configure {
            campaign,
            create: true,
            ..
        } => Some(campaign),
        _ => None,
    }
}

/// The refusal of a campaign id that cannot travel, if `id` is one.
fn invalid_id(id: &str) -> Option<String> {
    crate::campaign_id::problem(id)
        .map(|p| format!("--campaign '{}' {p}; nothing changed", shown_name(id)))
}

/// The campaign a command names and must find (with `configure --create`, may create); `None`
/// for `import`, which loads new campaigns.
fn named_campaign(cmd: &Command) -> Option<(&str, bool)> {
    match cmd {
        Command::Import { .. } | Command::Suppress { .. } => None,
        Command::Status { campaign, .. }
        | Command::Pause { campaign, .. }
        | Command::RetryFailed { campaign, .. }
        | Command::Resolve { campaign, .. } => Some((campaign, false)),
        Command::Resume { campaign, .. } | Command::Archive { campaign, .. } => {
            campaign.as_deref().map(|c| (c, false))
        }
        Command::Limit { .. } => None,
        Command::Configure {
            campaign, create, ..
        } => Some((campaign, *create)),
        Command::Migrate
        | Command::Run
        | Command::Serve { .. }
        | Command::Events
        | Command::Web { .. } => None,
    }
}

/// `None` if the campaign exists (or may be created); else what to tell the operator: "no
/// campaign 'sprng-sale' (known: spring-sale, …; did you mean spring-sale?)".
pub(super) async fn known(
    pool: &PgPool,
    campaign: &str,
    create: bool,
) -> Result<Option<String>, sqlx::Error> {
    if create || campaigns::exists(pool, campaign).await? {
        return Ok(None);
    }
    let names = campaigns::names(pool).await?;
    Ok(Some(unknown_campaign(campaign, &names)))
}

/// A campaign's name as a refusal lists it: escaped, at most 40 characters (the other system
/// may have inserted any text as a campaign id).
fn shown_name(name: &str) -> String {
    crate::import::csv::escaped_cut(name, 40)
}

/// The refusal of an unknown campaign, with the known ones and the closest of them.
pub fn unknown_campaign(campaign: &str, names: &[String]) -> String {
    const SHOWN: usize = 10;
    let known = if names.is_empty() {
        "none yet: `import` loads one".to_string()
    } else {
        let mut k = names
            .iter()
            .take(SHOWN)
            .map(|n| shown_name(n))
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > SHOWN {
            k += &format!(", … {} more", names.len() - SHOWN);
        }
        format!("known: {k}")
    };
    let closest = names
        .iter()
        .map(|n| (strsim::levenshtein(campaign, n), n))
        .filter(|(d, n)| *d <= (n.chars().count() / 3).max(2))
        .min();
    let hint = closest
        .map(|(_, n)| format!("; did you mean {}?", shown_name(n)))
        .unwrap_or_default();
    format!(
        "no campaign '{}' ({known}{hint}); nothing changed",
        shown_name(campaign)
    )
}

pub(super) fn at(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

fn said(p: &Pause) -> String {
    p.reason
        .as_ref()
        .map(|r| format!(" ({r})"))
        .unwrap_or_default()
}

async fn pause(pool: &PgPool, campaign: &str, reason: Option<&str>) -> CliResult {
    let p = campaigns::pause(pool, campaign, campaigns::BY_OPERATOR, reason).await?;
    let ours = p.by == campaigns::BY_OPERATOR && p.reason.as_deref() == reason;
    if ours {
        println!(
            "{campaign}: paused since {} by {}{}. Running pods stop within a second; `resume` lifts it.",
            at(&p.at),
            p.by,
            said(&p)
        );
    } else {
        // The first pause wins: its reason is the one `status` shows.
        println!(
            "{campaign}: already paused since {} by {}{}; that pause stays, your reason was not recorded. `resume` lifts it.",
            at(&p.at),
            p.by,
            said(&p)
        );
    }
    Ok(())
}

async fn retry_failed(
    pool: &PgPool,
    campaign: &str,
    filter: &RetryFilter,
    dry_run: bool,
) -> CliResult {
    let n = Store::new(pool.clone(), campaign)
        .retry_failed(filter, dry_run)
        .await?;
    if dry_run {
        println!("{campaign}: {n} failed rows match; nothing changed (--dry-run)");
    } else {
        println!("{campaign}: {n} failed rows put back to pending with attempts reset");
    }
    if n == 0 {
        return Ok(());
    }
    // (The rows are back either way: a failed look at the pause only leaves the hint out.)
    if let Ok(Some(p)) = campaigns::paused(pool, campaign).await {
        println!(
            "{campaign}: still paused by {}; `campaign-sender resume --campaign {campaign}` to send them",
            p.by
        );
    }
    Ok(())
}

/// `--from` / `--reply-to` as stored: exactly one mailbox in its canonical form
/// ([`crate::mailbox`]); anything else exits 78 naming `flag`, never showing the value.
fn mailbox(flag: &str, value: Option<&str>) -> Result<Option<String>, CliError> {
    value
        .map(|v| {
            crate::mailbox::Mailbox::parse(v)
                .map(|m| m.header())
                .map_err(|problem| {
                    eprintln!(
                        "configuration error: {flag} {problem} (the value is not shown: it is an address); nothing changed"
                    );
                    CliError::Exit(Exit::Config)
                })
        })
        .transpose()
}

/// What `configure` was asked to change (`None`: keep it).
struct Settings<'a> {
    change: campaigns::SettingsChange<'a>,
    window: Option<WindowArg>,
    timezone: Option<chrono_tz::Tz>,
}

/// Writes the settings asked for; a request that cannot be honoured (a window without a time
/// zone) changes nothing and exits 78.
async fn configure(pool: &PgPool, campaign: &str, asked: Settings<'_>) -> CliResult {
    let before = campaigns::settings(pool, campaign).await?;
    let window =
        crate::window::change(asked.window, asked.timezone, before.window).map_err(|problem| {
            eprintln!("configuration error: {problem}; nothing changed");
            CliError::Exit(Exit::Config)
        })?;
    let c = &asked.change;
    let lines = c.complaint_line.is_some() || c.bounce_line.is_some();
    let changes = c.template.is_some() || c.ratio.is_some() || c.from.is_some() || lines;
    if changes || c.reply_to.is_some() || !before.stored {
        campaigns::set_settings(pool, campaign, c).await?;
    }
    if let Some(w) = window {
        campaigns::set_window(pool, campaign, w).await?;
    }
    let s = campaigns::settings(pool, campaign).await?;
    println!(
        "{campaign}: template {}, sender {}, failure threshold {}, send window {}",
        s.template,
        if s.from_address.is_some() {
            "set"
        } else {
            "none"
        },
        s.max_permanent_failure_ratio
            .map(|r| r.to_string())
            .unwrap_or_else(|| "MAX_PERMANENT_FAILURE_RATIO".into()),
        s.window
            .map(|w| w.to_string())
            .unwrap_or_else(|| "none (any time)".into())
    );
    if lines {
        let line = |r: Option<f64>, var: &str| {
            r.map(crate::store::brake::percent)
                .unwrap_or_else(|| format!("unchanged ({var} unless set before)"))
        };
        println!(
            "{campaign}: the brake pauses it over complaints {}, hard bounces {} of mails sent",
            line(c.complaint_line, "MAX_COMPLAINT_RATIO"),
            line(c.bounce_line, "MAX_BOUNCE_RATIO")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_campaign_is_refused_with_the_known_ones_and_the_closest() {
        let names: Vec<String> = ["autumn-sale", "spring-sale", "winter-sale"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            unknown_campaign("sprng-sale", &names),
            "no campaign 'sprng-sale' (known: autumn-sale, spring-sale, winter-sale; did you mean spring-sale?); nothing changed"
        );
        let far = unknown_campaign("newsletter", &names);
        assert!(!far.contains("did you mean"), "{far}");
        assert!(unknown_campaign("x", &[]).contains("none yet"));
        let many: Vec<String> = (0..15).map(|i| format!("c{i:02}")).collect();
        assert!(unknown_campaign("zzz", &many).contains("… 5 more"));
        let odd = vec!["x".repeat(10_000), "evil\ncampaign".to_string()];
        let said = unknown_campaign("zzz", &odd);
        assert!(said.len() < 200 && !said.contains('\n'), "{said}");
    }
}
