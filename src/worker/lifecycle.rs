//! How a worker lives: [`Worker::run`] (a Job's pod: until done, its time is up — `DEADLINE_S`
//! from the Job's start, or the send window's close — the failure budget, a pause, the provider
//! refusing the account, the daily quota, or SIGTERM), [`Worker::serve`] (a Deployment's pod:
//! pass after pass, idling between them — `idle.rs` — without a share of the rate limit), and
//! [`Worker::step`] (one batch, for tests and tools that drive the queue step by step instead
//! of sleeping).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::pipeline::{Pipeline, REQUEST_GRACE};
use super::shutdown::NoAnswer;
use super::{RunError, Step, Worker};
use crate::exit::Mode;
use crate::metrics as m;
use crate::provider::Letter;
use crate::report::{RunReport, StopReason};
use crate::store::campaigns::{self, CampaignSettings};
use crate::store::{budgets, CampaignCounts};
use crate::window::WindowState;

/// What a pass starts from: the campaign's settings and its size.
struct PassStart {
    settings: CampaignSettings,
    counts: CampaignCounts,
    failure_budget: i64,
}

/// When a pass must be over, and why: the earlier of the send window's close and the run's
/// deadline.
#[derive(Debug, Clone, Copy)]
struct End {
    at: Instant,
    reason: StopReason,
}

impl End {
    fn earliest(a: Option<End>, b: Option<End>) -> Option<End> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.at < a.at { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// The local instant of a wall-clock one (now if it is past).
pub(super) fn instant_of(t: DateTime<Utc>) -> Instant {
    Instant::now() + (t - Utc::now()).to_std().unwrap_or_default()
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
        self.sendable(&settings).await?;
        let p = Pipeline::new(self, letter(&settings).into(), cancel, true, i64::MAX);
        let _deadline = p.stop.at(stop_at, StopReason::Deadline);
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
        let report = match self.deadline().await {
            Ok(deadline) => self.pass(&cancel, deadline, Mode::Run).await,
            Err(e) => Err(e),
        };
        self.stop_coordinator().await;
        report
    }

    /// The run's deadline: `DEADLINE_S` after its Job's time budget started (the first pod of
    /// the Job object started it: a restarted pod gets what is left, not a new budget; a new Job
    /// of the same name gets a whole one), or after this process started when it is not a Job's
    /// (no `JOB_UID`).
    async fn deadline(&self) -> Result<Option<Instant>, RunError> {
        let Some(budget) = self.cfg.deadline() else {
            return Ok(None);
        };
        // Validated at start: an unparsable JOB_UID never reaches a run.
        let spent = match self.cfg.job().ok().flatten() {
            Some(uid) => {
                let job = budgets::Job {
                    uid,
                    campaign_id: &self.cfg.campaign_id,
                    name: self.cfg.job_name.as_deref(),
                };
                self.retrying("reading the Job's time budget", || {
                    budgets::elapsed(self.store.pool(), job)
                })
                .await?
            }
            None => Duration::ZERO,
        };
        if spent >= budget {
            warn!(worker = %self.name, spent_s = spent.as_secs(), "the Job's time budget (DEADLINE_S) was spent before this pod started; nothing is sent");
        }
        Ok(Some(Instant::now() + budget.saturating_sub(spent)))
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
                StopReason::WindowClosed => self.idle_while_closed(cancel).await?,
                StopReason::AccountRefused | StopReason::QuotaExhausted => {
                    self.idle_while_account_stops(cancel).await?
                }
                _ => return Ok(report),
            };
            if !resumed {
                return Ok(report.stopped_by_signal());
            }
        }
    }

    /// One pass of the pipeline until done, its end (the deadline, the window's close), the
    /// failure threshold, a pause or `cancel`.
    async fn pass(
        &self,
        cancel: &CancellationToken,
        deadline: Option<Instant>,
        mode: Mode,
    ) -> Result<RunReport, RunError> {
        let started = Instant::now();
        let start = self.pass_start().await?;
        self.sendable(&start.settings).await?;
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
        m::campaign_paused(start.settings.pause.is_some());
        if let Some(pause) = &start.settings.pause {
            // The kill switch is on: claim nothing, send nothing.
            warn!(worker = %self.name, campaign = %self.store.campaign_id(), paused_by = %pause.by,
                  reason = pause.reason.as_deref().unwrap_or(""),
                  "campaign is paused; nothing sent. `campaign-sender resume --campaign …` lifts it");
            return Ok(report(StopReason::Paused, start.counts.clone()));
        }
        if let Some(reason) = self.account_stops().await {
            return Ok(report(reason, start.counts.clone()));
        }
        let end = match self.end_of_pass(&start.settings, deadline) {
            Ok(end) => end,
            // Its time is up already (the window is closed, the deadline passed): claim nothing.
            Err(reason) => return Ok(report(reason, start.counts.clone())),
        };
        info!(worker = %self.name, campaign = %self.store.campaign_id(), total = start.counts.total,
              list_unsubscribe = self.cfg.list_unsubscribe.as_str(), "run started");
        if let Some(caution) = self.cfg.list_unsubscribe.caution() {
            warn!(worker = %self.name, "{caution}");
        }
        if let Ok(Some(links)) = self.cfg.links() {
            if !links.every_mailto_tagged(self.store.campaign_id()) {
                info!(worker = %self.name, "UNSUBSCRIBE_MAILTO: with this campaign id the longest member ids make a local part over 64 octets; those mails carry the token in the mailto's subject only (a shorter mailbox or campaign id puts it in every +tag too)");
            }
        }
        let letter = Arc::new(letter(&start.settings));
        let mut p = Pipeline::new(self, letter, cancel, false, start.failure_budget);
        p.requests_end = end.map(|e| e.at + REQUEST_GRACE);
        let end_guard = end.map(|e| p.stop.at(e.at, e.reason));
        p.drive().await;
        drop(end_guard);
        if let Some(e) = p.stop.take_fatal() {
            return Err(e);
        }
        let reason = p.stop.reason();
        let counts = match p
            .retrying("counting the campaign", || self.store.counts())
            .await
        {
            Ok(counts) => counts,
            Err(NoAnswer::Outage(e)) => return Err(e),
            // The database does not answer and the pod must go: the counts it started with.
            Err(NoAnswer::Stopping) => {
                warn!(worker = %self.name, "the database did not answer while stopping; the report shows the counts at the start");
                start.counts.clone()
            }
        };
        let report = report(reason, counts);
        info!(worker = %self.name, reason = ?reason, exit_code = report.exit_code.code(), "run finished");
        Ok(report)
    }

    /// When this pass must end: the earlier of the send window's close and `deadline`; or, if
    /// either is already past, why it may not start.
    fn end_of_pass(
        &self,
        settings: &CampaignSettings,
        deadline: Option<Instant>,
    ) -> Result<Option<End>, StopReason> {
        let by_deadline = deadline.map(|at| End {
            at,
            reason: StopReason::Deadline,
        });
        let by_window = match settings.window.map(|w| (w, w.state_at(Utc::now()))) {
            Some((w, WindowState::Closed { opens_at })) => {
                m::window_open(false);
                info!(worker = %self.name, window = %w, opens_at = %opens_at, "send window closed; nothing sent until it opens");
                return Err(StopReason::WindowClosed);
            }
            Some((_, WindowState::Open { closes_at })) => {
                m::window_open(true);
                Some(End {
                    at: instant_of(closes_at),
                    reason: StopReason::WindowClosed,
                })
            }
            None => None,
        };
        let end = End::earliest(by_deadline, by_window);
        match end {
            Some(e) if e.at <= Instant::now() => Err(e.reason),
            _ => Ok(end),
        }
    }

    /// Whether the provider account lets this pass send at all, as the coordinator's first
    /// round saw the key: a refusal recorded (until `resume`), or a daily quota with nothing
    /// left. Said in the log with what to do.
    async fn account_stops(&self) -> Option<StopReason> {
        let v = self.signals.known_view(self.cfg.rate_share_ttl()).await;
        if let Some((status, refusal)) = v.refused {
            error!(worker = %self.name, status, "{}; nothing sent", refusal.advice(status));
            return Some(StopReason::AccountRefused);
        }
        if v.quota_full {
            warn!(worker = %self.name, "{}; nothing sent until it frees", super::watches::quota_words(&v));
            return Some(StopReason::QuotaExhausted);
        }
        None
    }

    /// Whether this vendor can send the campaign as configured: every vendor but our JSON
    /// contract needs a sender (`configure --from`), without which each mail would be refused;
    /// and the credentials it signs with must be at hand (SES: web identity fetched now).
    async fn sendable(&self, settings: &CampaignSettings) -> Result<(), RunError> {
        if self.provider.needs_sender() && settings.from_address.is_none() {
            return Err(RunError::Config(crate::config::ConfigError::new(
                "CAMPAIGN_ID",
                format!(
                    "campaign {} has no sender, which this provider needs: `campaign-sender configure --campaign {} --from \"Name <addr>\"` (a sender the vendor has verified)",
                    self.store.campaign_id(),
                    self.store.campaign_id()
                ),
            )));
        }
        self.provider.prepare().await.map_err(|e| {
            RunError::Config(crate::config::ConfigError::new(
                "AWS_ROLE_ARN",
                format!("{e}; check the role's trust policy and AWS_WEB_IDENTITY_TOKEN_FILE"),
            ))
        })
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

/// The campaign's part of every mail: its settings row's template, sender and reply-to.
fn letter(settings: &CampaignSettings) -> Letter {
    Letter {
        template: settings.template.clone(),
        from: settings.from_address.clone(),
        reply_to: settings.reply_to.clone(),
    }
}
