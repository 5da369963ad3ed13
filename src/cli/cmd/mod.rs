//! One file per subcommand, each its arguments (a clap `Args` struct, its doc the command's
//! help) beside its work:
//!
//! - the long-running ones and `migrate`, which read their own config: [`migrate`], [`run`]
//!   (`run` and `serve`), [`events`], [`web`];
//! - the operator commands, which need only `DATABASE_URL`: [`import`], [`status`], [`pause`],
//!   [`resume`], [`limit`], [`retry_failed`], [`resolve`], [`suppress`], [`archive`],
//!   [`configure`] ([`lift`]: `suppress --lift-at-vendor`, which calls the vendor). Each is
//!   an [`OperatorCommand`]: it says what it needs of the campaign it
//!   names ([`Needs`]), checked here before it runs on a pool over a migrated database.
//!
//! Output never contains an address. Every command but `import` (and `configure --create`)
//! refuses a campaign that does not exist and changes nothing: a typo in `pause --campaign`
//! must not report success while the real campaign keeps sending.

pub mod archive;
pub mod configure;
pub mod events;
pub mod import;
pub mod lift;
pub mod limit;
pub mod migrate;
pub mod pause;
pub mod resolve;
pub mod resume;
pub mod retry_failed;
pub mod run;
pub mod status;
pub mod suppress;
pub mod web;

use std::time::Duration;

use clap::Subcommand;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::problem::Patience;
use super::{CliResult, Db};
use crate::exit::Exit;
use crate::store::campaigns;
use crate::store::connect::Session;

/// The operator commands, one line each.
#[derive(Subcommand, Debug)]
pub enum Operator {
    Import(import::Import),
    Status(status::Status),
    Pause(pause::Pause),
    Resume(resume::Resume),
    Limit(limit::Limit),
    RetryFailed(retry_failed::RetryFailed),
    Resolve(resolve::Resolve),
    Suppress(suppress::Suppress),
    Archive(archive::Archive),
    Configure(configure::Configure),
}

impl Operator {
    /// Runs the command, one line each ([`checked`]).
    pub async fn run(self, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
        match self {
            Operator::Import(c) => checked(c, db, shutdown).await,
            Operator::Status(c) => checked(c, db, shutdown).await,
            Operator::Pause(c) => checked(c, db, shutdown).await,
            Operator::Resume(c) => checked(c, db, shutdown).await,
            Operator::Limit(c) => checked(c, db, shutdown).await,
            Operator::RetryFailed(c) => checked(c, db, shutdown).await,
            Operator::Resolve(c) => checked(c, db, shutdown).await,
            Operator::Suppress(c) => checked(c, db, shutdown).await,
            Operator::Archive(c) => checked(c, db, shutdown).await,
            Operator::Configure(c) => checked(c, db, shutdown).await,
        }
    }
}

/// An operator command: what it needs of the campaign it names, and its work.
pub(crate) trait OperatorCommand {
    fn needs(&self) -> Needs<'_>;
    /// The work, on a pool over a migrated database, the campaign checked.
    async fn run(self, pool: &PgPool, shutdown: CancellationToken) -> CliResult;
}

/// What a command needs of the campaign it names, checked before it runs.
pub enum Needs<'a> {
    /// It names none (`limit`, `suppress`; `resume --key`, `archive --older-than`).
    Nothing,
    /// One that exists: an unknown one is refused naming the closest (exit 1).
    Existing(&'a str),
    /// One it may make (`import`, `configure --create`): its id must be one that can travel
    /// ([`crate::campaign_id`]; exit 64). The other commands take any existing id, so a
    /// campaign made before the rule can still be seen, paused and archived.
    New(&'a str),
}

/// Connects (patient only with what waiting can heal), refuses a campaign id that cannot
/// travel or a campaign that does not exist, then runs `cmd`.
async fn checked<C: OperatorCommand>(
    cmd: C,
    db: &Db<'_>,
    shutdown: CancellationToken,
) -> CliResult {
    let pool = db
        .ready_pool(Session::Other, Patience::Interactive, Duration::ZERO)
        .await?;
    match cmd.needs() {
        Needs::Nothing => {}
        Needs::New(id) => {
            if let Some(refusal) = invalid_id(id) {
                eprintln!("{refusal}");
                return Err(Exit::Usage.into());
            }
        }
        Needs::Existing(id) => {
            if let Some(refusal) = known(&pool, id).await? {
                eprintln!("{refusal}");
                return Err(Exit::Incomplete.into());
            }
        }
    }
    cmd.run(&pool, shutdown).await
}

/// The refusal of a campaign id that cannot travel, if `id` is one.
fn invalid_id(id: &str) -> Option<String> {
    crate::campaign_id::problem(id)
        .map(|p| format!("--campaign '{}' {p}; nothing changed", shown_name(id)))
}

/// `None` if the campaign exists; else what to tell the operator: "no campaign 'sprng-sale'
/// (known: spring-sale, …; did you mean spring-sale?)".
pub(super) async fn known(pool: &PgPool, campaign: &str) -> Result<Option<String>, sqlx::Error> {
    if campaigns::exists(pool, campaign).await? {
        return Ok(None);
    }
    let names = campaigns::names(pool).await?;
    Ok(Some(unknown_campaign(campaign, &names)))
}

/// A campaign's name as a refusal lists it: escaped, at most 40 characters (the other system
/// may have inserted any text as a campaign id).
fn shown_name(name: &str) -> String {
    crate::shown::escaped_cut(name, 40)
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

/// A moment as the commands print it: `2026-12-07 02:00:00 UTC`.
pub(super) fn at(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
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
