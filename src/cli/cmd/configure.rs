//! `campaign-sender configure`: the campaign's optional settings row — template, sender,
//! failure threshold, brake lines, send window, weight ([`crate::store::campaigns`]).

use clap::Args;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Needs, OperatorCommand};
use crate::cli::args::{parse_ratio, parse_template, parse_weight, parse_window, WindowArg};
use crate::cli::{CliError, CliResult};
use crate::exit::Exit;
use crate::store::campaigns;

/// Writes the campaign's optional settings row: template, sender, failure threshold, send
/// window. Only the options given change; the pause is not touched.
#[derive(Args, Debug)]
pub struct Configure {
    #[arg(long)]
    campaign: String,
    /// The vendor's stored template (default: the campaign id): SendGrid `d-…` id, SES
    /// template name or ARN, Postmark alias or id, Mailgun template, Resend id or alias.
    #[arg(long, value_parser = parse_template)]
    template: Option<String>,
    /// The sender, `addr` or `Name <addr>` (a verified identity at the vendor; every
    /// vendor but MAIL_PROVIDER=json needs one).
    /// Exactly one RFC 5322 mailbox; checked by `configure` itself (crate::mailbox), which
    /// refuses with 64 and never shows the value.
    #[arg(long, value_name = "NAME <ADDR>")]
    from: Option<String>,
    /// Where replies go (one mailbox, as `--from`).
    #[arg(long, value_name = "ADDR")]
    reply_to: Option<String>,
    /// Failure threshold for this campaign (default: MAX_PERMANENT_FAILURE_RATIO).
    #[arg(long, value_parser = parse_ratio)]
    max_permanent_failure_ratio: Option<f64>,
    /// The brake's complaint line for this campaign: complaints / sent above it pauses the
    /// campaign (default: MAX_COMPLAINT_RATIO, 0.0008).
    #[arg(long, value_parser = parse_ratio, value_name = "RATIO")]
    max_complaint_ratio: Option<f64>,
    /// The brake's hard-bounce line for this campaign (default: MAX_BOUNCE_RATIO, 0.02).
    #[arg(long, value_parser = parse_ratio, value_name = "RATIO")]
    max_bounce_ratio: Option<f64>,
    /// The sender's brake for this campaign: this many refusals of our own domain
    /// (authentication, reputation, …) of distinct members at one mailbox provider, with
    /// MAX_SENDER_REFUSAL_RATIO of the mails sent there, pause it (default:
    /// MAX_SENDER_REFUSALS, 10; 0 turns it off).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..=1_000_000))]
    max_sender_refusals: Option<i32>,
    /// Send only between these local times every day, e.g. `22:00-06:00` (may wrap
    /// midnight; DST changes keep the wall-clock hours); `none` sends at any time again.
    #[arg(long, value_parser = parse_window, value_name = "HH:MM-HH:MM|none")]
    window: Option<WindowArg>,
    /// The window's time zone, an IANA name (`Asia/Tokyo`); needed with a new window.
    #[arg(long, value_parser = crate::window::parse_tz, value_name = "AREA/CITY")]
    timezone: Option<chrono_tz::Tz>,
    /// Its weight under its rate-limit key (default 1, from 0.01 to 1000): the campaigns with
    /// work share the key's rate in proportion to their weights, whatever their pod counts
    /// (weight 3 next to weight 1: 3/4 of it). Adopted by running pods at their next round.
    #[arg(long, value_parser = parse_weight, value_name = "W")]
    weight: Option<f64>,
    /// Create the settings row of a campaign that has no targets yet (otherwise an unknown
    /// campaign is refused: a typo must not create a campaign).
    #[arg(long)]
    create: bool,
}

impl OperatorCommand for Configure {
    fn needs(&self) -> Needs<'_> {
        if self.create {
            Needs::New(&self.campaign)
        } else {
            Needs::Existing(&self.campaign)
        }
    }

    async fn run(self, pool: &PgPool, _: CancellationToken) -> CliResult {
        let from = mailbox("--from", self.from.as_deref())?;
        let reply_to = mailbox("--reply-to", self.reply_to.as_deref())?;
        let settings = Settings {
            change: campaigns::SettingsChange {
                template: self.template.as_deref(),
                ratio: self.max_permanent_failure_ratio,
                from: from.as_deref(),
                reply_to: reply_to.as_deref(),
                complaint_line: self.max_complaint_ratio,
                bounce_line: self.max_bounce_ratio,
                sender_refusals: self.max_sender_refusals,
                weight: self.weight,
            },
            window: self.window,
            timezone: self.timezone,
        };
        configure(pool, &self.campaign, settings).await
    }
}

/// `--from` / `--reply-to` as stored: exactly one mailbox in its canonical form
/// ([`crate::mailbox`]); anything else is a usage error (64) naming `flag`, never showing the
/// value.
fn mailbox(flag: &str, value: Option<&str>) -> Result<Option<String>, CliError> {
    value
        .map(|v| {
            crate::mailbox::Mailbox::parse(v)
                .map(|m| m.header())
                .map_err(|problem| {
                    eprintln!(
                        "usage error: {flag} {problem} (the value is not shown: it is an address); nothing changed"
                    );
                    CliError::Exit(Exit::Usage)
                })
        })
        .transpose()
}

/// What `configure` was asked to change (`None`: keep it).
struct Settings<'a> {
    change: campaigns::SettingsChange<'a>,
    window: Option<WindowArg>,
    timezone: Option<chrono_tz::Tz>,
}

/// Writes the settings asked for; a request that cannot be honoured (a window without a time
/// zone) changes nothing and is a usage error (64).
async fn configure(pool: &PgPool, campaign: &str, asked: Settings<'_>) -> CliResult {
    let before = campaigns::settings(pool, campaign).await?;
    let window =
        crate::window::change(asked.window, asked.timezone, before.window).map_err(|problem| {
            eprintln!("usage error: {problem}; nothing changed");
            CliError::Exit(Exit::Usage)
        })?;
    let c = &asked.change;
    let lines =
        c.complaint_line.is_some() || c.bounce_line.is_some() || c.sender_refusals.is_some();
    let changes = c.template.is_some()
        || c.ratio.is_some()
        || c.from.is_some()
        || c.weight.is_some()
        || lines;
    if changes || c.reply_to.is_some() || !before.stored {
        campaigns::set_settings(pool, campaign, c).await?;
    }
    if let Some(w) = window {
        campaigns::set_window(pool, campaign, w).await?;
    }
    let s = campaigns::settings(pool, campaign).await?;
    println!(
        "{campaign}: template {}, sender {}, failure threshold {}, send window {}",
        s.template,
        if s.from_address.is_some() {
            "set"
        } else {
            "none"
        },
        s.max_permanent_failure_ratio
            .map(|r| r.to_string())
            .unwrap_or_else(|| "MAX_PERMANENT_FAILURE_RATIO".into()),
        s.window
            .map(|w| w.to_string())
            .unwrap_or_else(|| "none (any time)".into())
    );
    if c.weight.is_some() {
        println!(
            "{campaign}: weight {}: its share of its rate-limit key is its weight over the sum of the weights of the campaigns with work (running pods adopt it at their next round)",
            s.weight
        );
    }
    if lines {
        let line = |r: Option<f64>, var: &str| {
            r.map(crate::store::brake::percent)
                .unwrap_or_else(|| format!("unchanged ({var} unless set before)"))
        };
        println!(
            "{campaign}: the brake pauses it over complaints {}, hard bounces {} of mails sent",
            line(c.complaint_line, "MAX_COMPLAINT_RATIO"),
            line(c.bounce_line, "MAX_BOUNCE_RATIO")
        );
        if let Some(n) = c.sender_refusals {
            match n {
                0 => println!("{campaign}: the sender's brake is off"),
                n => println!("{campaign}: the sender's brake pauses it at {n} refusals of our domain at one mailbox provider (with MAX_SENDER_REFUSAL_RATIO of the mails sent there)"),
            }
        }
    }
    Ok(())
}
