//! How a key's usable rate is divided between the campaigns that share it, pure: by the
//! campaigns' weights (`configure --weight`), not by their pod counts.
//!
//! # The rule
//! - Only pods with work take part: a pod's row carries its campaign's weight while it has work
//!   and 0 when idle, so a campaign with no work holds nothing.
//! - Each working pod first gets a floor, [`MIN_RATE_PER_S`] (less only when the key's rate
//!   cannot give every working pod that much), so no share falls below the pacer's minimum while
//!   its campaign has work, whatever the weights.
//! - The rest goes to the campaigns in proportion to their weights (a campaign's weight is the
//!   mean of what its working pods report: they agree except for one round after a change),
//!   each campaign's part divided equally among its own working pods.
//! - **A campaign is capped at what its pods can use.** A pod that spent clearly less than it
//!   was given reports a demand ([`super::demand`]); a campaign all of whose pods report one is
//!   capped at their sum, and what it leaves goes to the others by their weights (water-filling).
//!   When every campaign is capped, what is left is still divided by weight: nobody can use it,
//!   and a pod whose capacity comes back finds its share already there.
//!
//! Each pod computes only its own share, from the rows it reads under the key's lock; the shares
//! of one moment sum to the usable rate, and the handover rule of [`super::plan`] keeps the
//! rates in force under the limit while pods adopt them one round after another.

use std::collections::BTreeMap;

use super::pacer::MIN_RATE_PER_S;
/// The weights' bounds and default belong to the settings row they are stored in.
pub use crate::store::campaigns::{WEIGHT_DEFAULT, WEIGHT_MAX, WEIGHT_MIN};

/// One working pod as the division sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim<'a> {
    pub campaign: &'a str,
    /// Its campaign's weight while it has work; 0 idle (it takes no part).
    pub weight: f64,
    /// What it can use, if it spent clearly less than it was given ([`super::demand`]).
    pub demand: Option<f64>,
}

/// One campaign's pods taken together.
#[derive(Debug, Clone, Copy, Default)]
struct Campaign {
    weight_sum: f64,
    pods: usize,
    /// The sum of its pods' demands; `None` when one of them can use more than it has.
    demand: Option<f64>,
}

impl Campaign {
    fn weight(&self) -> f64 {
        self.weight_sum / self.pods as f64
    }
}

/// This pod's share of `usable` requests/s next to `others` (every other live pod of the key,
/// idle ones included: they take no part).
pub fn share(usable: f64, me: Claim<'_>, others: &[Claim<'_>]) -> f64 {
    if me.weight <= 0.0 || usable <= 0.0 {
        return 0.0;
    }
    let campaigns = campaigns(me, others);
    let pods: usize = campaigns.values().map(|c| c.pods).sum();
    let floor = MIN_RATE_PER_S.min(usable / pods as f64);
    let rest = usable - floor * pods as f64;
    let mine = campaigns
        .keys()
        .position(|k| *k == me.campaign)
        .expect("this pod's campaign is among the working ones");
    let parts = water_fill(
        rest,
        floor,
        &campaigns.values().copied().collect::<Vec<_>>(),
    );
    floor + parts[mine] / campaigns[me.campaign].pods as f64
}

/// The working pods grouped by campaign (in a fixed order: the campaign ids').
fn campaigns<'a>(me: Claim<'a>, others: &[Claim<'a>]) -> BTreeMap<&'a str, Campaign> {
    let mut by: BTreeMap<&str, Campaign> = BTreeMap::new();
    for p in others.iter().filter(|p| p.weight > 0.0).chain([&me]) {
        let c = by.entry(p.campaign).or_insert(Campaign {
            demand: Some(0.0),
            ..Default::default()
        });
        c.weight_sum += p.weight;
        c.pods += 1;
        c.demand = match (c.demand, p.demand) {
            (Some(sum), Some(d)) => Some(sum + d),
            _ => None,
        };
    }
    by
}

/// `rest` divided between `campaigns` by weight, none given more than its demand beyond its
/// pods' floors while another can use it; what every cap leaves is divided by weight too.
fn water_fill(rest: f64, floor: f64, campaigns: &[Campaign]) -> Vec<f64> {
    let cap = |c: &Campaign| c.demand.map(|d| (d - floor * c.pods as f64).max(0.0));
    let mut part = vec![0.0; campaigns.len()];
    let mut capped = vec![false; campaigns.len()];
    let mut left = rest;
    // Each pass caps at least one more campaign or gives out the rest: at most one per campaign.
    for _ in 0..=campaigns.len() {
        let open: f64 = (0..campaigns.len())
            .filter(|&i| !capped[i])
            .map(|i| campaigns[i].weight())
            .sum();
        if open <= 0.0 {
            break;
        }
        let over: Vec<usize> = (0..campaigns.len())
            .filter(|&i| !capped[i])
            .filter(|&i| {
                cap(&campaigns[i]).is_some_and(|d| left * campaigns[i].weight() / open > d)
            })
            .collect();
        if over.is_empty() {
            for i in (0..campaigns.len()).filter(|&i| !capped[i]) {
                part[i] = left * campaigns[i].weight() / open;
            }
            return part;
        }
        for i in over {
            let d = cap(&campaigns[i]).unwrap_or(0.0);
            part[i] = d;
            capped[i] = true;
            left -= d;
        }
    }
    // Every campaign is capped: what they leave is nobody's, so it is divided by weight.
    let all: f64 = campaigns.iter().map(Campaign::weight).sum();
    for (i, c) in campaigns.iter().enumerate() {
        part[i] += left.max(0.0) * c.weight() / all;
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(campaign: &str, weight: f64) -> Claim<'_> {
        Claim {
            campaign,
            weight,
            demand: None,
        }
    }

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn campaigns_share_by_weight_whatever_their_pod_counts() {
        // A on 4 pods at weight 1, B on 1 pod at weight 3: B 375/s, each A pod 31.25/s.
        let a: Vec<Claim> = (0..4).map(|_| pod("a", 1.0)).collect();
        let b = pod("b", 3.0);
        let floor = MIN_RATE_PER_S;
        assert!(near(
            share(500.0, b, &a),
            floor + (500.0 - 5.0 * floor) * 0.75
        ));
        let others: Vec<Claim> = a[1..].iter().copied().chain([b]).collect();
        let one_a = share(500.0, a[0], &others);
        assert!(near(one_a, floor + (500.0 - 5.0 * floor) * 0.25 / 4.0));
        // Every pod's share sums to the usable rate.
        assert!(near(4.0 * one_a + share(500.0, b, &a), 500.0));
        // One campaign alone: equal shares, as before weights.
        assert!(near(share(500.0, a[0], &a[1..]), 125.0));
    }

    #[test]
    fn an_idle_pod_or_a_campaign_without_work_holds_nothing() {
        let busy = pod("a", 1.0);
        assert_eq!(share(500.0, pod("b", 0.0), &[busy]), 0.0);
        // An idle pod of a heavy campaign takes nothing from a working one.
        assert!(near(
            share(500.0, busy, &[pod("b", 0.0), pod("b", 0.0)]),
            500.0
        ));
        assert_eq!(share(0.0, busy, &[]), 0.0);
    }

    #[test]
    fn no_share_falls_below_the_pacers_minimum_whatever_the_weights() {
        let light = pod("light", WEIGHT_MIN);
        let heavy = pod("heavy", WEIGHT_MAX);
        let s = share(500.0, light, &[heavy]);
        assert!(s >= MIN_RATE_PER_S, "{s}");
        assert!(near(s + share(500.0, heavy, &[light]), 500.0));
        // A rate too small for every pod's minimum is divided equally.
        let many: Vec<Claim> = (0..9).map(|_| heavy).collect();
        assert!(near(share(0.05, light, &many), 0.005));
    }

    #[test]
    fn a_campaign_its_pods_cannot_spend_leaves_the_rest_to_the_others() {
        // B (weight 3) can use only 50/s: A takes the remaining 450.
        let b = Claim {
            demand: Some(50.0),
            ..pod("b", 3.0)
        };
        let a = pod("a", 1.0);
        assert!(near(share(500.0, b, &[a]), 50.0));
        assert!(near(share(500.0, a, &[b]), 450.0));
        // A demand above the weighted share caps nothing.
        let roomy = Claim {
            demand: Some(400.0),
            ..b
        };
        let floor = MIN_RATE_PER_S;
        assert!(near(
            share(500.0, a, &[roomy]),
            floor + (500.0 - 2.0 * floor) * 0.25
        ));
        // A campaign with one pod that can use more is not capped.
        let b2 = pod("b", 3.0);
        assert!(near(
            share(500.0, a, &[b, b2]),
            floor + (500.0 - 3.0 * floor) * 0.25
        ));
        // Everyone capped: the rest still goes by weight.
        let a_capped = Claim {
            demand: Some(10.0),
            ..a
        };
        let total = share(500.0, a_capped, &[b]) + share(500.0, b, &[a_capped]);
        assert!(near(total, 500.0));
        assert!(near(share(500.0, a_capped, &[b]), 10.0 + 440.0 * 0.25));
    }

    #[test]
    fn a_campaigns_weight_is_the_mean_of_its_pods_during_a_change() {
        // One B pod has read the new weight 3, the other still reports 1: B counts as 2.
        let a = pod("a", 1.0);
        let (b_new, b_old) = (pod("b", 3.0), pod("b", 1.0));
        let sum = share(300.0, a, &[b_new, b_old])
            + share(300.0, b_new, &[a, b_old])
            + share(300.0, b_old, &[a, b_new]);
        assert!(near(sum, 300.0));
        assert!(near(
            share(300.0, a, &[b_new, b_old]),
            0.01 + (300.0 - 0.03) / 3.0
        ));
    }
}
