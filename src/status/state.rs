//! Where a campaign stands, in one word and its detail: what the status page's badge and
//! banner say, and whether it has a current rate at all. Derived from a [`Status`] alone
//! (pure), so the page says nothing `status` cannot.

use chrono::{DateTime, Utc};

use crate::status::Status;

/// A campaign's state as the page shows it, the first that applies in this order.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// `archive` ran: the counts are final.
    Archived { at: Option<DateTime<Utc>> },
    /// Nothing left to send (`unconfirmed` rows may still wait for `resolve`).
    Done,
    /// The kill switch is on (`pause`, or a run that met its failure budget).
    Paused {
        by: String,
        at: DateTime<Utc>,
        reason: Option<String>,
    },
    /// The provider refused the account; `advice` says what to check (`resume` lifts it).
    Refused { advice: String },
    /// A quota is used up: the vendor's own, or `MAIL_DAILY_QUOTA`; it frees by itself.
    AtQuota { until: Option<DateTime<Utc>> },
    /// Outside its send window until `opens_at`.
    OutsideWindow { opens_at: DateTime<Utc> },
    /// Delivering now.
    Sending,
    /// Rows are left but nothing was delivered in the last minute and no pod of it is live.
    Waiting,
}

impl State {
    pub fn of(s: &Status) -> Self {
        if let Some(a) = &s.archived {
            return State::Archived { at: a.archived_at };
        }
        if s.done {
            return State::Done;
        }
        if let Some(p) = &s.paused {
            return State::Paused {
                by: p.by.clone(),
                at: p.at,
                reason: p.reason.clone(),
            };
        }
        if let Some(r) = s.limits.iter().find_map(|k| k.refused.as_ref()) {
            return State::Refused {
                advice: r.kind.advice(r.status),
            };
        }
        if let Some(until) = s.limits.iter().find_map(|k| k.vendor_quota_until) {
            return State::AtQuota { until: Some(until) };
        }
        if let Some(q) = s
            .limits
            .iter()
            .find_map(|k| k.quota.as_ref().filter(|q| q.full()))
        {
            return State::AtQuota {
                until: q.frees_from,
            };
        }
        if let Some(w) = s.window.as_ref().filter(|w| !w.open) {
            return State::OutsideWindow {
                opens_at: w.next_change,
            };
        }
        let live = s
            .limits
            .iter()
            .any(|k| k.members.iter().any(|m| m.campaign_id == s.campaign_id));
        if s.rate_per_s > 0.0 || live {
            State::Sending
        } else {
            State::Waiting
        }
    }

    /// The badge: one or two words.
    pub fn word(&self) -> &'static str {
        match self {
            State::Archived { .. } => "archived",
            State::Done => "done",
            State::Paused { .. } => "paused",
            State::Refused { .. } => "refused",
            State::AtQuota { .. } => "at quota",
            State::OutsideWindow { .. } => "outside window",
            State::Sending => "sending",
            State::Waiting => "waiting",
        }
    }

    /// The index page's order: what needs eyes first (stopped by something), then what moves,
    /// then what is finished.
    pub fn rank(&self) -> u8 {
        match self {
            State::Refused { .. } | State::Paused { .. } | State::AtQuota { .. } => 0,
            State::Sending => 1,
            State::OutsideWindow { .. } | State::Waiting => 2,
            State::Done => 3,
            State::Archived { .. } => 4,
        }
    }

    /// What a campaign that is not sending waits for, in a few words (`None`: it sends, or
    /// waits for nothing but a pod). Such a campaign has no current rate and no ETA at one.
    pub fn waits_for(&self) -> Option<&'static str> {
        match self {
            State::Archived { .. } | State::Done => Some("nothing: it is done"),
            State::Paused { .. } => Some("`resume`"),
            State::Refused { .. } => Some("the account's refusal to be fixed, then `resume`"),
            State::AtQuota { .. } => Some("its quota to free"),
            State::OutsideWindow { .. } => Some("its send window to open"),
            State::Sending | State::Waiting => None,
        }
    }

    /// Whether the page shows a banner for it (something stops the campaign).
    pub fn stops(&self) -> bool {
        self.rank() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::account::{KeyState, Member, QuotaState, RefusalState};
    use crate::store::campaigns::Pause;

    fn status() -> Status {
        Status {
            remaining: 10,
            ..Status::empty("spring")
        }
    }

    fn key() -> KeyState {
        KeyState {
            key: "k".into(),
            limit_per_s: Some(500.0),
            override_per_s: None,
            effective_per_s: 500.0,
            paused_for_s: None,
            refused: None,
            quota: None,
            vendor_quota_until: None,
            members: vec![],
        }
    }

    #[test]
    fn a_stopped_campaign_says_what_stops_it_before_anything_else() {
        let mut s = status();
        s.rate_per_s = 3.0;
        assert_eq!(State::of(&s), State::Sending);
        let mut k = key();
        k.quota = Some(QuotaState {
            daily: 100,
            used: 100,
            frees_from: None,
        });
        s.limits = vec![k.clone()];
        assert_eq!(State::of(&s), State::AtQuota { until: None });
        k.refused = Some(RefusalState {
            status: 403,
            kind: crate::outcome::Refusal::Account,
            since: Utc::now(),
            campaign: None,
        });
        s.limits = vec![k];
        assert!(matches!(State::of(&s), State::Refused { .. }));
        s.paused = Some(Pause {
            at: Utc::now(),
            by: "ops".into(),
            reason: Some("legal review".into()),
        });
        let st = State::of(&s);
        assert!(matches!(&st, State::Paused { by, .. } if by == "ops"));
        assert!(st.stops() && st.rank() < State::Sending.rank());
        s.done = true;
        assert_eq!(State::of(&s), State::Done);
    }

    #[test]
    fn a_campaign_with_a_live_pod_is_sending_and_one_without_is_waiting() {
        let mut s = status();
        assert_eq!(State::of(&s), State::Waiting);
        let mut k = key();
        k.members = vec![Member {
            worker: "w-0".into(),
            campaign_id: "other".into(),
            share_per_s: 500.0,
            weight: 1.0,
            expires_in_s: 5.0,
        }];
        s.limits = vec![k.clone()];
        assert_eq!(State::of(&s), State::Waiting, "another campaign's pod");
        k.members[0].campaign_id = "spring".into();
        s.limits = vec![k];
        assert_eq!(State::of(&s), State::Sending);
        assert!(State::Sending.rank() < State::Done.rank());
        assert!(State::Done.rank() < State::Archived { at: None }.rank());
    }
}
