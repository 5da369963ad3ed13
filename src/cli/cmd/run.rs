//! `campaign-sender run` (a Job's pod: until done) and `serve` (a Deployment's: idles when
//! done): one worker of the fleet, configured by the environment ([`RunConfig`]).

use clap::Args;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::cli::problem::Patience;
use crate::cli::{config_failure, CliResult, Db};
use crate::config::{FromEnv, RunConfig};
use crate::exit::Exit;
use crate::store::connect::Session;
use crate::store::Store;
use crate::worker::Worker;

/// Send the campaign CAMPAIGN_ID until done, DEADLINE_S, too many failures or SIGTERM.
/// Prints a JSON report line on stdout. Configuration: environment (see README). A campaign
/// that does not exist is refused (exit 1, naming the closest).
#[derive(Args, Debug)]
pub struct Run {}

impl Run {
    pub async fn run(self, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
        work(db, None, shutdown).await
    }
}

/// Long-running mode (a Deployment): like `run` with no deadline; when the campaign is done
/// it idles (one backlog query per IDLE_POLL_MS) and resumes when rows arrive. SIGTERM exits
/// 0; too many permanent failures exit 2. A campaign that does not exist is refused (exit
/// 1, naming the closest) unless --wait-for-campaign.
#[derive(Args, Debug)]
pub struct Serve {
    /// Start even if CAMPAIGN_ID has no rows or settings yet, and send once it has.
    #[arg(long)]
    wait_for_campaign: bool,
}

impl Serve {
    pub async fn run(self, db: &Db<'_>, shutdown: CancellationToken) -> CliResult {
        work(db, Some(self.wait_for_campaign), shutdown).await
    }
}

/// `run` (`serve`: `None`) or `serve` (`Some(wait_for_campaign)`): the worker, until it is
/// done or told to stop. Prints the JSON report on stdout and a summary on stderr.
async fn work(db: &Db<'_>, serve: Option<bool>, shutdown: CancellationToken) -> CliResult {
    let (serve, wait_for_campaign) = (serve.is_some(), serve.unwrap_or(false));
    let cfg = RunConfig::from_env().map_err(config_failure)?;
    let provider = cfg.provider().map_err(config_failure)?;
    if let Some(addr) = cfg.metrics_socket() {
        if let Err(e) = crate::metrics::install(addr, &cfg.worker_name()) {
            eprintln!("configuration error: METRICS_ADDR: cannot serve metrics on {addr} ({e})");
            return Err(Exit::Config.into());
        }
        crate::metrics::start_worker_counters_at_zero();
    }
    let outage_limit = db.outage_limit();
    let session = Session::Worker { outage_limit };
    let pool = db
        .ready_pool(session, Patience::Worker, outage_limit)
        .await?;
    let said = shutdown.clone();
    tokio::spawn(async move {
        said.cancelled().await;
        info!(
            "shutdown requested: no new sends; finishing in-flight requests and releasing the rest"
        );
    });
    let campaign_id = cfg.campaign_id.clone();
    let store = Store::new(pool.clone(), cfg.campaign_id.clone());
    let worker = Worker::new(cfg, provider, store, outage_limit);
    // A typo in CAMPAIGN_ID would "succeed" with nothing sent (a Job) or idle forever (serve).
    if !wait_for_campaign {
        if let Some(refusal) = super::known(&pool, &campaign_id).await? {
            error!("CAMPAIGN_ID: {refusal}");
            return Err(Exit::Incomplete.into());
        }
    }
    let outcome = if serve {
        worker.serve(shutdown).await
    } else {
        worker.run(shutdown).await
    };
    match outcome {
        Ok(report) => {
            println!(
                "{}",
                serde_json::to_string(&report).expect("report serialises")
            );
            eprintln!("{}", report.human());
            match report.exit_code {
                Exit::Done => Ok(()),
                code => Err(code.into()),
            }
        }
        Err(crate::worker::RunError::Config(e)) => {
            error!(error = %e, "configuration error; nothing sent");
            Err(Exit::Config.into())
        }
        Err(crate::worker::RunError::Database(limit, e)) => {
            error!(
                limit_s = limit.as_secs(),
                "the database stayed away; rows this worker held are re-claimed after their lease"
            );
            Err(e.into())
        }
    }
}
