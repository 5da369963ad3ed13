//! `BrakeConfig`: the mailbox providers' lines, for every process that weighs or shows them —
//! `events` brakes on them and counts soft bounces; `status` and the page show each campaign's
//! rates against them. The manifests set them once (base `config.env`), so all agree.
//!
//! Why each default is what it is (the providers' own lines, with their sources) is one table,
//! for the operators who tune them: docs/OPERATIONS.md, "The brake".

use serde::{Deserialize, Serialize};

use super::{at_most, positive, ConfigError, FromEnv};

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq)]
pub struct BrakeConfig {
    /// `MAX_COMPLAINT_RATIO` (default 0.0008, between 0 and 1): a campaign whose complaints /
    /// sent exceeds it is paused (a campaign may set its own: `configure --max-complaint-ratio`).
    #[serde(default = "default_complaint")]
    pub max_complaint_ratio: f64,
    /// `MAX_BOUNCE_RATIO` (default 0.02, between 0 and 1): the same for hard bounces / sent
    /// (`configure --max-bounce-ratio`).
    #[serde(default = "default_bounce")]
    pub max_bounce_ratio: f64,
    /// `BRAKE_MIN_SENT` (default 1000, at least 1): below this many mails sent, nothing pauses.
    #[serde(default = "default_min_sent")]
    pub brake_min_sent: u64,
    /// `MAX_SENDER_REFUSALS` (default 10, at most 1000000; 0 turns it off): this many permanent
    /// refusals of our own domain (authentication, reputation, …) of distinct members at one
    /// mailbox provider pause the campaign, with `MAX_SENDER_REFUSAL_RATIO` of the mails sent
    /// there, whatever `BRAKE_MIN_SENT` (a campaign may set its own: `configure
    /// --max-sender-refusals`).
    #[serde(default = "default_sender_refusals")]
    pub max_sender_refusals: u64,
    /// `MAX_SENDER_REFUSAL_RATIO` (default 0.01, between 0 and 1): and at least this share of
    /// the mails sent to that provider, so stray refusals over a day of mail do not pause.
    #[serde(default = "default_sender_ratio")]
    pub max_sender_refusal_ratio: f64,
    /// `SOFT_BOUNCE_LIMIT` (default 3, between 1 and 100): this many soft bounces of one address
    /// (one per message) within the window suppress it (reason `soft_bounce`).
    #[serde(default = "default_soft_limit")]
    pub soft_bounce_limit: u64,
    /// `SOFT_BOUNCE_WINDOW_S` (default 604800 = 7 days, at most 31536000): how long a soft bounce
    /// counts, by the time the vendor says it happened.
    #[serde(default = "default_soft_window")]
    pub soft_bounce_window_s: u64,
}

fn default_complaint() -> f64 {
    0.0008
}
fn default_bounce() -> f64 {
    0.02
}
fn default_min_sent() -> u64 {
    1000
}
fn default_sender_refusals() -> u64 {
    10
}
fn default_sender_ratio() -> f64 {
    0.01
}
fn default_soft_limit() -> u64 {
    3
}
fn default_soft_window() -> u64 {
    7 * 24 * 3600
}

impl Default for BrakeConfig {
    fn default() -> Self {
        Self {
            max_complaint_ratio: default_complaint(),
            max_bounce_ratio: default_bounce(),
            brake_min_sent: default_min_sent(),
            max_sender_refusals: default_sender_refusals(),
            max_sender_refusal_ratio: default_sender_ratio(),
            soft_bounce_limit: default_soft_limit(),
            soft_bounce_window_s: default_soft_window(),
        }
    }
}

impl FromEnv for BrakeConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        for (var, r) in [
            ("MAX_COMPLAINT_RATIO", self.max_complaint_ratio),
            ("MAX_BOUNCE_RATIO", self.max_bounce_ratio),
            ("MAX_SENDER_REFUSAL_RATIO", self.max_sender_refusal_ratio),
        ] {
            if !(0.0..=1.0).contains(&r) {
                return Err(ConfigError::new(var, "must be between 0 and 1"));
            }
        }
        positive("BRAKE_MIN_SENT", self.brake_min_sent)?;
        at_most("BRAKE_MIN_SENT", self.brake_min_sent, i64::MAX as u64)?;
        at_most("MAX_SENDER_REFUSALS", self.max_sender_refusals, 1_000_000)?;
        positive("SOFT_BOUNCE_LIMIT", self.soft_bounce_limit)?;
        at_most("SOFT_BOUNCE_LIMIT", self.soft_bounce_limit, 100)?;
        positive("SOFT_BOUNCE_WINDOW_S", self.soft_bounce_window_s)?;
        at_most(
            "SOFT_BOUNCE_WINDOW_S",
            self.soft_bounce_window_s,
            365 * 24 * 3600,
        )
    }
}

impl BrakeConfig {
    /// The rules `events` records under.
    pub fn rules(&self) -> crate::store::events::Rules {
        crate::store::events::Rules {
            lines: self.lines(),
            soft_bounce_limit: self.soft_bounce_limit,
            soft_bounce_window_s: self.soft_bounce_window_s,
        }
    }

    /// The fleet's lines, as the store weighs them.
    pub fn lines(&self) -> crate::store::brake::Lines {
        crate::store::brake::Lines {
            complaint: self.max_complaint_ratio,
            bounce: self.max_bounce_ratio,
            min_sent: self.brake_min_sent as i64,
            sender_refusals: self.max_sender_refusals as i64,
            sender_ratio: self.max_sender_refusal_ratio,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<BrakeConfig, ConfigError> {
        BrakeConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn the_defaults_stay_under_the_providers_lines() {
        let d = from(&[]).unwrap();
        assert_eq!(d, BrakeConfig::default());
        assert!(
            d.max_complaint_ratio < 0.001,
            "under Gmail's 0.1 % and SES's review"
        );
        assert!(d.max_bounce_ratio < 0.05, "under SES's review at 5 %");
        assert_eq!((d.brake_min_sent, d.soft_bounce_limit), (1000, 3));
        assert_eq!(d.soft_bounce_window_s, 604_800);
    }

    #[test]
    fn a_line_outside_zero_to_one_or_a_zero_count_is_named() {
        assert_eq!(
            from(&[("MAX_COMPLAINT_RATIO", "1.5")]).unwrap_err().var,
            "MAX_COMPLAINT_RATIO"
        );
        assert_eq!(
            from(&[("MAX_BOUNCE_RATIO", "-0.1")]).unwrap_err().var,
            "MAX_BOUNCE_RATIO"
        );
        assert_eq!(
            from(&[("BRAKE_MIN_SENT", "0")]).unwrap_err().var,
            "BRAKE_MIN_SENT"
        );
        assert_eq!(
            from(&[("SOFT_BOUNCE_LIMIT", "101")]).unwrap_err().var,
            "SOFT_BOUNCE_LIMIT"
        );
        assert_eq!(
            from(&[("SOFT_BOUNCE_WINDOW_S", "0")]).unwrap_err().var,
            "SOFT_BOUNCE_WINDOW_S"
        );
    }
}
