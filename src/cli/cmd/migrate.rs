//! `campaign-sender migrate`: the embedded migrations, then the roles of docs/roles.sql.

use clap::Args;
use tracing::{error, info};

use crate::cli::problem::Patience;
use crate::cli::{CliResult, Db};
use crate::exit::Exit;
use crate::store::connect::{self, Session};
use crate::store::MIGRATOR;

/// Apply the embedded migrations (safe when several pods run it at once: an advisory lock
/// serialises them, and the second finds nothing left to do). Needs DATABASE_URL.
#[derive(Args, Debug)]
pub struct Migrate {}

impl Migrate {
    pub async fn run(self, db: &Db<'_>) -> CliResult {
        let pool = connect::connect(db.reach(), Session::Other, |e| {
            Patience::Worker.waits_for(e)
        })
        .await?;
        if let Err(e) = MIGRATOR.run(&pool).await {
            error!(error = %e, "migration failed; the database is unchanged past the last applied migration");
            return Err(Exit::Incomplete.into());
        }
        info!("migrations applied");
        if let Err(e) = crate::store::roles::grant(&pool).await {
            let denied = connect::sqlstate(&e).as_deref() == Some("42501");
            error!(error = %connect::error_text(&e), "the migrations are applied, but granting the roles of docs/roles.sql failed: the owner needs CREATEROLE, or create the roles first; then run migrate again");
            return Err(if denied {
                Exit::NoPermission
            } else {
                Exit::Incomplete
            }
            .into());
        }
        info!("the roles of docs/roles.sql are granted");
        // What SQL cannot do: the other form of every internationalised address listed.
        match crate::store::suppressions::complete_forms(&pool).await {
            Ok(added) => info!(
                added,
                "every internationalised address is listed in both forms"
            ),
            Err(e) => {
                error!(error = %connect::error_text(&e), "listing the other form of internationalised addresses failed; run migrate again");
                return Err(Exit::Incomplete.into());
            }
        }
        Ok(())
    }
}
