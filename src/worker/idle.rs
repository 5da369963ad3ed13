//! How a `serve` pod waits between passes, holding no share of the fleet's limit: until the
//! campaign has work again, is resumed, its send window opens, or the provider account lets it
//! send again (a refusal lifted, the daily quota freed). Each returns true to run the next pass,
//! false when told to stop.

use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::{RunError, Worker};
use crate::metrics as m;
use crate::store::campaigns;
use crate::window::WindowState;

impl Worker {
    /// Waits until the campaign is resumed (true) or `cancel` fires (false).
    pub(super) async fn idle_while_paused(
        &self,
        cancel: &CancellationToken,
    ) -> Result<bool, RunError> {
        info!(worker = %self.name, "campaign paused; idling until `campaign-sender resume`");
        m::campaign_paused(true);
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
                m::campaign_paused(false);
                info!(worker = %self.name, "campaign resumed");
                return Ok(true);
            }
        }
    }

    /// Waits until the campaign's send window opens (true) or `cancel` fires (false), holding no
    /// share of the fleet's limit meanwhile. Looks at the settings at least once a minute, so a
    /// window an operator changes meanwhile is seen.
    pub(super) async fn idle_while_closed(
        &self,
        cancel: &CancellationToken,
    ) -> Result<bool, RunError> {
        self.signals.set_busy(false);
        loop {
            let settings = self
                .retrying("reading the campaign's settings", || {
                    campaigns::settings(self.store.pool(), self.store.campaign_id())
                })
                .await?;
            let opens_at = match settings.window.map(|w| w.state_at(Utc::now())) {
                Some(WindowState::Closed { opens_at }) => opens_at,
                _ => {
                    info!(worker = %self.name, "send window open");
                    return Ok(true);
                }
            };
            m::window_open(false);
            let wake = super::lifecycle::instant_of(opens_at)
                .min(Instant::now() + Duration::from_secs(60));
            tokio::select! {
                _ = cancel.cancelled() => return Ok(false),
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// Waits until the campaign has work again (true) or `cancel` fires (false), holding no
    /// share of the fleet's limit meanwhile.
    pub(super) async fn idle_until_work(
        &self,
        cancel: &CancellationToken,
    ) -> Result<bool, RunError> {
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

    /// Waits until the limit key lets this pod send again (true) — its refusal lifted by
    /// `campaign-sender resume`, its daily quota freed as usage ages out — or `cancel` fires
    /// (false). The coordinator's rounds go on meanwhile (at weight 0) and say when.
    pub(super) async fn idle_while_account_stops(
        &self,
        cancel: &CancellationToken,
    ) -> Result<bool, RunError> {
        self.signals.set_busy(false);
        let mut view = self.signals.view();
        tokio::select! {
            _ = cancel.cancelled() => Ok(false),
            _ = view.wait_for(|v| v.refused.is_none() && !v.quota_full) => {
                info!(worker = %self.name, "the provider account may send again");
                Ok(true)
            }
        }
    }
}
