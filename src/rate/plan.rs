//! The arithmetic of one round, pure: AIMD on the key's effective limit, then the pod's share
//! under the handover rule ([`super`] states the rules). The database time comes in as an
//! argument, so every rule is unit-tested (and simulated for a whole fleet, `sim.rs`) without a
//! clock or a database.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::pacer::MIN_RATE_PER_S;
use super::quota;
use super::shares::{self, Claim};
use crate::outcome::Refusal;
pub use crate::store::rate::{LimitRow, PodRow};

/// How long a given-up rate stays committed to the pod that gave it up (after a change, and
/// after its share expired): the longest a request may leave the process after its token was
/// handed out (a descheduled task), with room for the pods' and the database's clocks running at
/// slightly different speeds. Not a whole second: if at every instant the rates in force sum to
/// at most the limit, every one-second window does too, so capacity may move as soon as its old
/// holder has stopped using it (`rate::sim` checks this on a fake clock).
pub const HANDOVER: Duration = Duration::from_millis(250);
/// Multiplicative decrease of the effective limit on a 429 (at most once per
/// [`DECREASE_INTERVAL`]).
pub const DECREASE_FACTOR: f64 = 0.7;
/// One 429 storm cuts the limit once: the provider counts per second.
pub const DECREASE_INTERVAL: Duration = Duration::from_secs(1);
/// Additive increase of the effective limit: this fraction of the limit per second, so a
/// halved limit is whole again after 10 s without 429s.
pub const INCREASE_PER_S: f64 = 0.05;
/// The effective limit never falls below this fraction of the limit.
pub const MIN_FRACTION: f64 = 0.05;
/// A share change smaller than this (requests/s) is not worth a new limiter.
pub const MIN_CHANGE_PER_S: f64 = 0.5;
/// A 429 without a usable `Retry-After` pauses the fleet this long.
pub const DEFAULT_PAUSE: Duration = Duration::from_secs(1);

fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

fn delta(d: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(d).unwrap_or(chrono::TimeDelta::MAX)
}

/// What a pod's row means for the round (the row itself is the store's: [`PodRow`]).
impl PodRow {
    /// The rate this pod may still be sending at, at `now`: what every other pod must leave it.
    pub fn committed(&self, now: DateTime<Utc>) -> f64 {
        let window = delta(HANDOVER);
        if now >= self.expires_at + window {
            return 0.0;
        }
        if now < self.share_changed_at + window {
            self.share_per_s.max(self.prev_share_per_s)
        } else {
            self.share_per_s
        }
    }

    pub fn live(&self, now: DateTime<Utc>) -> bool {
        now < self.expires_at
    }

    /// This pod as the division by weight sees it.
    fn claim(&self) -> Claim<'_> {
        Claim {
            campaign: &self.campaign_id,
            weight: self.weight,
            demand: self.demand_per_s,
        }
    }

    /// Quota attempts granted and not yet spent: counted as used until spent or forgotten.
    pub fn quota_outstanding(&self) -> i64 {
        (self.quota_granted - self.quota_spent).max(0)
    }
}

/// What the provider refused, as the pod that saw it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub status: u16,
    pub kind: Refusal,
    /// The campaign of the pod that saw it (`resume --campaign` lifts it).
    pub campaign: String,
}

/// What one pod reports in a round.
#[derive(Debug, Clone)]
pub struct Report {
    /// Its campaign (the campaigns of a key share it by weight, [`shares`]).
    pub campaign: String,
    /// Its campaign's weight while it has work, 0 idle.
    pub weight: f64,
    /// What it can use, if it spent clearly less than it was given ([`super::demand`]).
    pub demand: Option<f64>,
    pub limit_per_s: f64,
    /// A 429 was seen since the last round, with the longest `Retry-After` (capped).
    pub throttled: Option<Option<Duration>>,
    pub ttl: Duration,
    /// The provider refused the account or the endpoint since the last round.
    pub refused: Option<Refused>,
    /// Requests this process started so far (its pacer's tokens), for the daily quota.
    pub spent: u64,
    /// `MAIL_DAILY_QUOTA`, if set.
    pub daily_quota: Option<u64>,
    /// The vendor said its own quota is used up since the last round, freeing in this long.
    pub vendor_quota: Option<Duration>,
}

impl Report {
    fn claim(&self) -> Claim<'_> {
        Claim {
            campaign: &self.campaign,
            weight: self.weight,
            demand: self.demand,
        }
    }
}

/// The outcome of a round: the pod's new row and the key's new row.
#[derive(Debug, Clone)]
pub struct Plan {
    pub me: PodRow,
    pub limit: LimitRow,
    /// The limit in force: the live override, else `min(limit_per_s)` over the live pods.
    pub fleet_limit: f64,
    pub live_pods: usize,
    /// The share changed (a new limiter, a new `share_changed_at`).
    pub changed: bool,
    /// Requests this pod started since its last round: added to this minute's usage.
    pub used_add: i64,
    /// The daily quota's state, if one is set.
    pub quota: Option<quota::Grant>,
    /// The vendor's own quota is used up (until `limit.vendor_quota_until`).
    pub vendor_quota_full: bool,
}

/// AIMD on the key's effective limit at `now`, against `fleet_limit`: a changed limit rescales
/// it at once (an operator's `limit` takes effect in one round, both ways); it grows back by
/// [`INCREASE_PER_S`] after a cut, and a 429 pauses the fleet and cuts it (once per
/// [`DECREASE_INTERVAL`]).
fn aimd(
    l: &mut LimitRow,
    now: DateTime<Utc>,
    fleet_limit: f64,
    throttled: Option<Option<Duration>>,
) {
    let mut effective = l.effective_per_s;
    // Unchanged, the factor is 1. (`base_per_s` > 0 is a table constraint.)
    if let Some(base) = l.base_per_s {
        effective *= fleet_limit / base;
    }
    effective = effective.min(fleet_limit);
    // Additive increase for the time since the last update or the end of a pause (none before).
    let since = l.paused_until.map_or(l.updated_at, |p| p.max(l.updated_at));
    let grown = fleet_limit * INCREASE_PER_S * secs(now - since).max(0.0);
    effective = (effective + grown).min(fleet_limit);
    if let Some(retry_after) = throttled {
        let until = now + delta(retry_after.unwrap_or(DEFAULT_PAUSE));
        l.paused_until = Some(l.paused_until.map_or(until, |p| p.max(until)));
        if l.last_decrease_at
            .is_none_or(|t| now - t >= delta(DECREASE_INTERVAL))
        {
            effective = (effective * DECREASE_FACTOR).max(fleet_limit * MIN_FRACTION);
            l.last_decrease_at = Some(now);
        }
    }
    l.effective_per_s = effective;
    l.base_per_s = Some(fleet_limit);
    l.updated_at = now;
}

/// One round of one pod, at database time `now`: AIMD on the key's limit, a refusal recorded,
/// then the pod's share under the handover rule (see the module docs) and its quota grant.
/// Pure; `others` are every other pod's rows of the key, live or not; `used_24h` the key's
/// recorded attempts in the last 24 h.
pub fn plan_round(
    now: DateTime<Utc>,
    mine: Option<&PodRow>,
    pod_id: Uuid,
    report: &Report,
    others: &[PodRow],
    limit: &LimitRow,
    used_24h: i64,
) -> Plan {
    let live: Vec<&PodRow> = others.iter().filter(|p| p.live(now)).collect();
    let configured = live
        .iter()
        .map(|p| p.limit_per_s)
        .fold(report.limit_per_s, f64::min)
        .max(0.0);
    let fleet_limit = limit.override_per_s.unwrap_or(configured);

    let mut l = limit.clone();
    aimd(&mut l, now, fleet_limit, report.throttled);
    if let (Some(r), None) = (&report.refused, l.refused_at) {
        l.refused_at = Some(now);
        l.refused_status = Some(r.status as i16);
        l.refused_kind = Some(r.kind.as_str().to_string());
        l.refused_campaign = Some(r.campaign.clone());
    }
    // The vendor's quota: the latest moment any pod was told it frees.
    if let Some(frees_in) = report.vendor_quota {
        let until = now + delta(frees_in);
        l.vendor_quota_until = Some(l.vendor_quota_until.map_or(until, |u| u.max(until)));
    }
    let vendor_quota_full = l.vendor_quota_until.is_some_and(|u| u > now);
    // A refused key sends nothing, whatever its limit.
    let usable = if l.refused_at.is_some() {
        0.0
    } else {
        l.effective_per_s
    };

    // This pod's share: its campaign's part by weight, divided among its working pods.
    let fair = shares::share(
        usable,
        report.claim(),
        &live.iter().map(|p| p.claim()).collect::<Vec<_>>(),
    );
    let free = usable - others.iter().map(|p| p.committed(now)).sum::<f64>();
    // A row of ours that expired (the database was away) is no share any more: its capacity may
    // have been taken. Only capacity that is free now can be ours again.
    let current = mine.filter(|m| m.live(now)).map_or(0.0, |m| m.share_per_s);
    let target = if fair <= current {
        fair
    } else {
        fair.min(current.max(free))
    }
    .max(0.0);
    let before = mine.map_or(0.0, |m| m.share_per_s);
    let changed = (target - before).abs() >= MIN_CHANGE_PER_S
        || (target < MIN_RATE_PER_S && before >= MIN_RATE_PER_S);
    let mut me = mine.cloned().unwrap_or(PodRow {
        pod_id,
        campaign_id: report.campaign.clone(),
        weight: report.weight,
        demand_per_s: None,
        limit_per_s: report.limit_per_s,
        share_per_s: 0.0,
        prev_share_per_s: 0.0,
        share_changed_at: now,
        expires_at: now,
        quota_granted: 0,
        quota_spent: 0,
    });
    if changed {
        me.prev_share_per_s = me.committed(now);
        me.share_per_s = target;
        me.share_changed_at = now;
    }
    me.weight = report.weight;
    me.demand_per_s = report.demand;
    me.limit_per_s = report.limit_per_s;
    me.expires_at = now + delta(report.ttl);

    // The daily quota: what this pod started since its last round is used; a grant tops up
    // what it may start next, out of what the fleet has left.
    let spent = (report.spent as i64).max(me.quota_spent);
    let used_add = spent - me.quota_spent;
    me.quota_spent = spent;
    l.daily_quota = report.daily_quota.map(|q| q as i64);
    let quota = report.daily_quota.map(|daily| {
        quota::grant(&quota::Ask {
            daily: daily as i64,
            used_24h: used_24h + used_add,
            others_outstanding: others.iter().map(PodRow::quota_outstanding).sum(),
            granted: me.quota_granted,
            spent,
            share_per_s: me.share_per_s,
        })
    });
    if let Some(q) = &quota {
        me.quota_granted = q.granted;
    }
    Plan {
        me,
        limit: l,
        fleet_limit,
        live_pods: live.len() + 1,
        changed,
        used_add,
        quota,
        vendor_quota_full,
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(crate) mod tests;
