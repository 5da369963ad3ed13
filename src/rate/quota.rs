//! The provider account's daily quota (`MAIL_DAILY_QUOTA`: attempts per rolling 24 h per limit
//! key), kept for the whole fleet by grants, pure.
//!
//! A pod may start a request only out of quota it was granted ([`crate::rate::Pacer`] counts
//! each token against its grant). Every round it reports what it started so far; that is added
//! to the key's usage of the current minute (`rate_usage`), and a new grant tops its unspent
//! grant up to [`HORIZON`] of its share — out of what is left: the quota, minus the last 24 h's
//! usage, minus every pod's unspent grants (a pod that vanished keeps its grant counted until it
//! is forgotten, and then it is counted as used). So whatever pods join, leave or die, the
//! requests started in any 24 h never exceed the quota; a grant unspent by a pod that leaves is
//! given back.

use std::time::Duration;

/// A grant covers this much of the pod's share: its rounds (every `RATE_SYNC_MS`) top it up
/// well before it runs out.
pub const HORIZON: Duration = Duration::from_secs(1);

/// What a round knows when it grants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    pub daily: i64,
    /// Recorded attempts in the last 24 h, this round's included.
    pub used_24h: i64,
    /// Granted and not yet spent by the other pods of the key.
    pub others_outstanding: i64,
    /// This pod's cumulative grant and spending.
    pub granted: i64,
    pub spent: i64,
    /// This pod's share after the round.
    pub share_per_s: f64,
}

/// A round's grant, and the quota's state as the round saw it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Grant {
    /// This pod's new cumulative grant (never less than before).
    pub granted: i64,
    /// Attempts used or promised in the last 24 h: recorded plus every unspent grant.
    pub used: i64,
    pub daily: i64,
    /// Nothing left to grant and nothing unspent here: this pod cannot send until usage ages
    /// out of the 24 h.
    pub full: bool,
}

/// Tops this pod's unspent grant up to [`HORIZON`] of its share, out of what is left.
pub fn grant(a: &Ask) -> Grant {
    let mine = (a.granted - a.spent).max(0);
    let promised = a.used_24h + a.others_outstanding + mine;
    let left = (a.daily - promised).max(0);
    let want = (a.share_per_s * HORIZON.as_secs_f64()).ceil() as i64;
    let more = (want - mine).clamp(0, left);
    Grant {
        granted: a.granted.max(a.spent) + more,
        used: promised + more,
        daily: a.daily,
        full: left - more <= 0 && mine + more == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask() -> Ask {
        Ask {
            daily: 1_000,
            used_24h: 0,
            others_outstanding: 0,
            granted: 0,
            spent: 0,
            share_per_s: 100.0,
        }
    }

    #[test]
    fn a_grant_tops_up_to_a_second_of_the_share_and_never_beyond_the_quota() {
        let g = grant(&ask());
        assert_eq!((g.granted, g.used, g.full), (100, 100, false));
        // 60 of the 100 spent: topped up by 60.
        let g = grant(&Ask {
            granted: 100,
            spent: 60,
            used_24h: 60,
            ..ask()
        });
        assert_eq!((g.granted, g.used), (160, 160));
        // Near the quota: only what is left, counting the others' unspent grants.
        let g = grant(&Ask {
            used_24h: 900,
            others_outstanding: 70,
            ..ask()
        });
        assert_eq!((g.granted, g.used, g.full), (30, 1_000, false));
    }

    #[test]
    fn at_the_quota_nothing_is_granted_and_the_pod_is_full_once_its_grant_is_spent() {
        let spent = Ask {
            used_24h: 1_000,
            granted: 40,
            spent: 40,
            ..ask()
        };
        let g = grant(&spent);
        assert_eq!((g.granted, g.full), (40, true));
        // Still holding 10 unspent: not full yet, but nothing more.
        let g = grant(&Ask {
            used_24h: 990,
            granted: 50,
            spent: 40,
            ..ask()
        });
        assert_eq!((g.granted, g.full), (50, false));
        // Over the quota already (it was lowered): nothing, and full.
        let g = grant(&Ask {
            daily: 500,
            used_24h: 800,
            ..ask()
        });
        assert_eq!((g.granted, g.full), (0, true));
    }

    #[test]
    fn an_idle_pod_asks_for_nothing_and_a_grant_never_shrinks() {
        let g = grant(&Ask {
            share_per_s: 0.0,
            granted: 30,
            spent: 10,
            used_24h: 10,
            ..ask()
        });
        assert_eq!(g.granted, 30);
        // Spending reported beyond the grant (never, but) keeps the grant at least the spending.
        let g = grant(&Ask {
            share_per_s: 0.0,
            granted: 30,
            spent: 35,
            ..ask()
        });
        assert_eq!(g.granted, 35);
    }
}
