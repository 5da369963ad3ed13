//! The two watches that run beside the stages until the flusher is done:
//! - the lease heartbeat: every `LEASE_S / 3` it extends the lease of every row still held
//!   ([`crate::store::Store::extend_leases`], fenced by claim), so a live worker's rows never
//!   expire under it, and samples the backlog gauges;
//! - the settings watch: every `PAUSE_POLL_MS` it reads the campaign's settings row
//!   ([`crate::store::campaigns::settings`]) and stops the pass — the same stop as SIGTERM — once
//!   the kill switch is on or the send window is closed (an operator may change it mid-run; the
//!   pass's own timer stops it at the window's end to the instant).
//!
//! Both retry a failed statement by the one rule ([`crate::store::outage`]) until their next
//! beat, and then simply try again at it.

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::pipeline::Pipeline;
use crate::metrics as m;
use crate::rate::FleetView;
use crate::report::StopReason;
use crate::store::campaigns::{self, CampaignSettings};
use crate::store::connect::error_text;
use crate::store::outage::retrying;
use crate::window::WindowState;

impl Pipeline<'_> {
    /// Extends the lease of every row still held, every LEASE_S / 3, until `done`.
    pub(super) async fn heartbeat(&self, done: CancellationToken) {
        let beat = self.cfg().heartbeat();
        let mut tick = tokio::time::interval(beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate; a fresh claim needs no renewal
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = done.cancelled() => return,
            }
            // A database that stops answering holds a statement forever: once everything is
            // written, the beat is abandoned rather than awaited.
            tokio::select! {
                _ = self.beat(beat) => {}
                _ = done.cancelled() => return,
            }
        }
    }

    /// One beat: the backlog gauges, then the held rows' leases.
    async fn beat(&self, beat: std::time::Duration) {
        self.sample_backlog().await;
        let rows = self.held.rows();
        if rows.is_empty() {
            return;
        }
        let (store, lease) = (&self.w.store, self.cfg().lease());
        match retrying(beat, "renewing leases", || {
            store.extend_leases(&rows, lease)
        })
        .await
        {
            Ok(n) => {
                self.w.recorder.leases_renewed(n);
                debug!(held = rows.len(), renewed = n, "leases renewed");
            }
            Err(e) => {
                warn!(error = %error_text(&e), held = rows.len(), "lease renewal failed; will retry next beat")
            }
        }
    }

    /// The backlog gauges, for dashboards and alerts: two cheap counts on partial indexes. A
    /// failed sample leaves the gauges as they were (the next beat tries again).
    async fn sample_backlog(&self) {
        let store = &self.w.store;
        if let (Ok(rem), Ok(failed)) = (store.remaining().await, store.failed_count().await) {
            m::backlog(&rem, Some(failed));
        }
    }

    /// The kill switch and the send window: every `PAUSE_POLL_MS` reads the campaign's settings
    /// and, once it is paused or outside its window, stops the pipeline — the same stop as
    /// SIGTERM: no claim and no send starts after this, in-flight requests finish, results are
    /// written and the rest is released.
    pub(super) async fn pause_watch(&self, done: CancellationToken) {
        let poll = self.cfg().pause_poll();
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let store = &self.w.store;
        let mut fleet = self.w.signals.view();
        // The pass started from the key's state as it was: only a change stops it.
        fleet.mark_unchanged();
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = fleet.changed() => {}
                _ = self.stop.stopped() => return,
                _ = done.cancelled() => return,
            }
            if let Some(reason) = self.fleet_stops(&fleet.borrow_and_update()) {
                self.stop.stop(reason);
                return;
            }
            let settings = retrying(poll, "reading the campaign's settings", || {
                campaigns::settings(store.pool(), store.campaign_id())
            });
            // Stopping already, the settings no longer matter (and may never come).
            let settings = tokio::select! {
                s = settings => s,
                _ = self.stop.stopped() => return,
                _ = done.cancelled() => return,
            };
            match settings {
                Ok(s) => {
                    if let Some(reason) = self.must_stop(&s) {
                        self.stop.stop(reason);
                        return;
                    }
                }
                // Sends need the database too (the gate's re-check), so an outage stops them
                // anyway.
                Err(e) => {
                    warn!(error = %error_text(&e), "cannot read the campaign's settings; will retry")
                }
            }
        }
    }

    /// Whether the limit key stops this pass, as the coordinator's last round saw it: the
    /// provider refused the account or the endpoint (this pod's answer or another's), or the
    /// daily quota has nothing left for this pod.
    fn fleet_stops(&self, v: &FleetView) -> Option<StopReason> {
        if let Some((status, refusal)) = v.refused {
            error!(worker = %self.w.name, status, "{}; stopping: in-flight requests finish, the rest is released", refusal.advice(status));
            return Some(StopReason::AccountRefused);
        }
        if v.quota_full {
            warn!(worker = %self.w.name, "{}; stopping until it frees", quota_words(v));
            return Some(StopReason::QuotaExhausted);
        }
        None
    }

    /// Whether the settings stop this pass: paused, or outside the send window.
    fn must_stop(&self, s: &CampaignSettings) -> Option<StopReason> {
        if let Some(pause) = &s.pause {
            m::campaign_paused(true);
            warn!(worker = %self.w.name, paused_by = %pause.by,
                  reason = pause.reason.as_deref().unwrap_or(""),
                  "campaign paused; stopping: in-flight requests finish, the rest is released");
            return Some(StopReason::Paused);
        }
        match s.window.map(|w| (w, w.state_at(chrono::Utc::now()))) {
            Some((w, WindowState::Closed { .. })) => {
                m::window_open(false);
                info!(worker = %self.w.name, window = %w, "send window closed; stopping: in-flight requests finish, the rest is released");
                Some(StopReason::WindowClosed)
            }
            _ => None,
        }
    }
}

/// Which quota stops the key, in an operator's words.
pub(super) fn quota_words(v: &FleetView) -> &'static str {
    if v.vendor_quota {
        "the provider's own sending quota is used up (see `campaign-sender status`)"
    } else {
        "the daily quota (MAIL_DAILY_QUOTA) is used up"
    }
}
