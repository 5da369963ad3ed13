//! How a worker lives: [`Worker::run`] (a Job's pod: until done, `DEADLINE_S`, the failure
//! budget, a pause or SIGTERM), [`Worker::serve`] (a Deployment's pod: pass after pass, idling
//! between them without a share of the rate limit), and [`Worker::step`] (one batch, for tests
//! and tools that drive the queue step by step instead of sleeping).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::pipeline::Pipeline;
use super::{RunError, Step, Worker};
use crate::exit::Mode;
use crate::metrics as m;
use crate::report::{RunReport, StopReason};
use crate::store::campaigns::{self, CampaignSettings};
use crate::store::CampaignCounts;

/// What a pass starts from: the campaign's settings and its size.
struct PassStart {
    settings: CampaignSettings,
    counts: CampaignCounts,
    failure_budget: i64,
}

impl Worker {
    /// Claims one batch and settles it: sends, writes results, releases what was not sent by
    /// `stop_at` (or on `cancel`). For tests and tools that want to drive the queue step by step.
    pub async fn step(
        &self,
        stop_at: Instant,
        cancel: &CancellationToken,
    ) -> Result<Step, RunError> {
        self.start_coordinator();
        let settings = self
            .retrying("reading the campaign's settings", || {
                campaigns::settings(self.store.pool(), self.store.campaign_id())
            })
            .await?;
        let p = Pipeline::new(self, settings.template.into(), cancel, true, i64::MAX);
        let _deadline = p.stop.at(stop_at);
        let empty = p.drive().await;
        if let Some(e) = p.stop.take_fatal() {
            return Err(e);
        }
        Ok(match empty {
            Some(rem) => Step::Empty(rem),
            None => Step::Worked {
                claimed: p.claimed.load(Ordering::SeqCst),
            },
        })
    }

    /// Runs until done, deadline, failure threshold, pause or cancellation; always returns a
    /// report unless the database stayed unreachable longer than the outage limit.
    pub async fn run(&self, cancel: CancellationToken) -> Result<RunReport, RunError> {
        self.start_coordinator();
        let report = self.pass(&cancel, self.cfg.deadline(), Mode::Run).await;
        self.stop_coordinator().await;
        report
    }

    /// The long-running mode (`campaign-sender serve`, a Deployment): no deadline; when the
    /// campaign is done it idles — one backlog query per `IDLE_POLL_MS`, no share of the rate
    /// limit held — and starts again when rows appear; while it is paused (also automatically,
    /// over the failure budget) it idles until `resume`. Ends on `cancel` (exit 0: a pod being
    /// scaled in is not a failure) or when this pod's failures cross the budget (exit 2).
    pub async fn serve(&self, cancel: CancellationToken) -> Result<RunReport, RunError> {
        self.start_coordinator();
        let result = self.serve_passes(&cancel).await;
        self.stop_coordinator().await;
        result
    }

    async fn serve_passes(&self, cancel: &CancellationToken) -> Result<RunReport, RunError> {
        loop {
            let report = self.pass(cancel, None, Mode::Serve).await?;
            let resumed = match report.reason {
                StopReason::Done => {
                    info!(worker = %self.name, sent = report.campaign.sent,
                          failed = report.campaign.failed,
                          "campaign done; idling until new rows arrive");
                    // The claimer already gave the share back (nothing claimable, nothing held),
                    // so idling holds no capacity.
                    self.idle_until_work(cancel).await?
                }
                // A Deployment's pod must not exit (it would be restarted in a loop): it idles,
                // holding no share, until the campaign is resumed — also when the pause is the
                // automatic one (the pod that crossed the budget exited 2; the others, and its
                // restart, wait).
                StopReason::Paused => self.idle_while_paused(cancel).await?,
                _ => return Ok(report),
            };
            if !resumed {
                return Ok(report.stopped_by_signal());
            }
        }
    }

    /// Waits until the campaign is resumed (true) or `cancel` fires (false).
    async fn idle_while_paused(&self, cancel: &CancellationToken) -> Result<bool, RunError> {
        info!(worker = %self.name, "campaign paused; idling until `campaign-sender resume`");
        self.signals.set_busy(false);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.cfg.pause_poll()) => {}
            }
            let pause = self
                .retrying("reading the campaign's pause", || {
                    campaigns::paused(self.store.pool(), self.store.campaign_id())
                })
                .await?;
            if pause.is_none() {
                info!(worker = %self.name, "campaign resumed");
                return Ok(true);
            }
        }
    }

    /// Waits until the campaign has work again (true) or `cancel` fires (false), holding no
    /// share of the fleet's limit meanwhile.
    async fn idle_until_work(&self, cancel: &CancellationToken) -> Result<bool, RunError> {
        // Said here, not only by the claimer: it judged "busy" from the rows it held just
        // before it found nothing left, and the last of them may have been written in between.
        self.signals.set_busy(false);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = tokio::time::sleep(self.cfg.idle_poll()) => {}
            }
            let rem = self
                .retrying("counting what is left", || self.store.remaining())
                .await?;
            m::backlog(&rem, None);
            if rem.total() > 0 {
                return Ok(true);
            }
        }
    }

    /// One pass of the pipeline until done, `deadline`, the failure threshold, a pause or
    /// `cancel`.
    async fn pass(
        &self,
        cancel: &CancellationToken,
        deadline: Option<Duration>,
        mode: Mode,
    ) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let start = self.pass_start().await?;
        let report = |reason, counts| {
            RunReport::new(
                self.name.clone(),
                reason,
                mode,
                started.elapsed(),
                self.stats(),
                counts,
                start.failure_budget,
            )
        };
        if let Some(pause) = &start.settings.pause {
            // The kill switch is on: claim nothing, send nothing.
            warn!(worker = %self.name, campaign = %self.store.campaign_id(), paused_by = %pause.by,
                  reason = pause.reason.as_deref().unwrap_or(""),
                  "campaign is paused; nothing sent. `campaign-sender resume --campaign …` lifts it");
            return Ok(report(StopReason::Paused, start.counts.clone()));
        }
        info!(worker = %self.name, campaign = %self.store.campaign_id(), total = start.counts.total, "run started");
        let template: Arc<str> = start.settings.template.clone().into();
        let p = Pipeline::new(self, template, cancel, false, start.failure_budget);
        let deadline_guard = deadline.map(|d| p.stop.at(started + d));
        p.drive().await;
        drop(deadline_guard);
        if let Some(e) = p.stop.take_fatal() {
            return Err(e);
        }
        let reason = p.stop.reason(cancel.is_cancelled());
        let counts = self
            .retrying("counting the campaign", || self.store.counts())
            .await?;
        let report = report(reason, counts);
        info!(worker = %self.name, reason = ?reason, exit_code = report.exit_code, "run finished");
        Ok(report)
    }

    /// The campaign's settings, its size and its failure budget at the start of a pass.
    async fn pass_start(&self) -> Result<PassStart, RunError> {
        let settings = self
            .retrying("reading the campaign's settings", || {
                campaigns::settings(self.store.pool(), self.store.campaign_id())
            })
            .await?;
        let counts = self
            .retrying("counting the campaign", || self.store.counts())
            .await?;
        let failure_budget =
            settings.failure_budget(counts.total, self.cfg.max_permanent_failure_ratio);
        Ok(PassStart {
            settings,
            counts,
            failure_budget,
        })
    }
}
