//! The command line: every subcommand and its options, as `--help` shows them.

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "campaign-sender",
    version,
    about = "Crash-, overlap- and restart-safe campaign sender on PostgreSQL"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Apply the embedded migrations (safe when several pods run it at once: an advisory lock
    /// serialises them, and the second finds nothing left to do). Needs DATABASE_URL.
    Migrate,
    /// Send the campaign CAMPAIGN_ID until done, DEADLINE_S, too many failures or SIGTERM.
    /// Prints a JSON report line on stdout. Configuration: environment (see README). A campaign
    /// that does not exist is refused (exit 1, naming the closest).
    Run,
    /// Long-running mode (a Deployment): like `run` with no deadline; when the campaign is done
    /// it idles (one backlog query per IDLE_POLL_MS) and resumes when rows arrive. SIGTERM exits
    /// 0; too many permanent failures exit 2. A campaign that does not exist is refused (exit
    /// 1, naming the closest) unless --wait-for-campaign.
    Serve {
        /// Start even if CAMPAIGN_ID has no rows or settings yet, and send once it has.
        #[arg(long)]
        wait_for_campaign: bool,
    },
    /// Listen for the vendors' signed webhooks (EVENTS_ADDR, default 0.0.0.0:8080): bounces,
    /// complaints and unsubscribes suppress the address, deliveries settle unconfirmed rows.
    /// SIGTERM stops it after the requests in flight.
    Events,
    /// The status page (WEB_ADDR, default 127.0.0.1:8081): every campaign, its progress, rate,
    /// ETA, charts and the provider's events, refreshing itself; read-only. SIGTERM stops it.
    Web {
        /// For the failure budget shown, unless the campaign's settings row has its own.
        #[arg(long, env = "MAX_PERMANENT_FAILURE_RATIO", default_value_t = 0.01)]
        max_permanent_failure_ratio: f64,
    },
    /// Load recipients from CSV (`member_id,email`, header optional) into a campaign, in one
    /// transaction: any invalid or repeated line and nothing is imported (exit 65), unless
    /// --skip-invalid names a file for the rejects. Rows the campaign already has are left
    /// exactly as they are, so importing twice changes nothing.
    Import {
        #[arg(long)]
        campaign: String,
        /// The CSV file; `-` or nothing reads standard input.
        file: Option<std::path::PathBuf>,
        /// Import the valid lines and write every rejected one here (CSV:
        /// member_id,email,line,reason; fix it and import it again as it is).
        #[arg(long, value_name = "FILE")]
        skip_invalid: Option<std::path::PathBuf>,
        /// The field separator: `,` (default), `;` or `tab`.
        #[arg(long, default_value = ",", value_parser = parse_delimiter)]
        delimiter: u8,
        /// Accept a file with no records (otherwise an empty file is an error: exit 65).
        #[arg(long)]
        allow_empty: bool,
    },
    /// Where a campaign is: counts by state, rate and ETA, pause, live pods and their rate
    /// shares, top failure reasons.
    Status {
        #[arg(long)]
        campaign: String,
        /// Redraw every --interval-ms until the campaign is done (Ctrl-C stops watching).
        #[arg(long)]
        watch: bool,
        /// JSON (one object per line with --watch) instead of text.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 2000, value_name = "MS")]
        interval_ms: u64,
        /// For the failure budget shown, unless the campaign's settings row has its own.
        #[arg(long, env = "MAX_PERMANENT_FAILURE_RATIO", default_value_t = 0.01)]
        max_permanent_failure_ratio: f64,
    },
    /// The kill switch: every running pod stops claiming and sending within a second, lets
    /// in-flight requests finish and releases the rest; `run` exits 3 while it is on, `serve`
    /// idles.
    Pause {
        #[arg(long)]
        campaign: String,
        /// Shown by `status`.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Lifts a pause (an operator's or an automatic one) and a provider refusal (401/403/404/405
    /// stopped every pod of the limit key: after fixing the key or the URL). `--key` lifts only
    /// a limit key's refusal, for every campaign on it. Pods in `serve` continue by themselves;
    /// a Job must be started again.
    #[command(group = clap::ArgGroup::new("what").required(true).args(["campaign", "key"]))]
    Resume {
        #[arg(long)]
        campaign: Option<String>,
        /// A `RATE_LIMIT_KEY` (default: MAIL_URL's `host[:port]`).
        #[arg(long)]
        key: Option<String>,
    },
    /// Shows or sets the provider's limit for a `RATE_LIMIT_KEY` while pods run: `--rate R`
    /// overrides every pod's MAIL_RATE_PER_S, lower or higher, within a second; `--clear`
    /// returns to it. Without either, shows the key: limit, pods, refusal, daily quota.
    Limit {
        /// The `RATE_LIMIT_KEY` (default: MAIL_URL's `host[:port]`, e.g. `api.mail.example`).
        #[arg(long)]
        key: String,
        /// Requests per second for the whole fleet of the key.
        #[arg(long, value_parser = parse_rate, conflicts_with = "clear")]
        rate: Option<f64>,
        /// Back to the pods' own MAIL_RATE_PER_S.
        #[arg(long)]
        clear: bool,
    },
    /// Puts failed rows back to `pending` with their attempts reset, and prints how many.
    /// Filters narrow the selection; opted-out rows are never selected.
    RetryFailed {
        #[arg(long)]
        campaign: String,
        /// Only rows whose last provider status is one of these (e.g. `--status 422,400`).
        #[arg(long = "status", value_delimiter = ',', value_name = "CODE")]
        statuses: Vec<u16>,
        /// Only rows of these error classes (e.g. `rejected`, `invalid_email`, `timeout`).
        #[arg(long = "class", value_delimiter = ',', value_name = "CLASS")]
        classes: Vec<String>,
        /// Only rows that failed at or after this: RFC 3339 (`2026-12-02T02:00:00+09:00`) or
        /// a time ago (`90m`, `2h`).
        #[arg(long, value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Count, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Settles the campaign's `unconfirmed` rows — maybe delivered, past the provider's
    /// idempotency window (IDEMPOTENCY_WINDOW_S), so not re-sent by themselves — and prints
    /// how many. `--assume-sent` risks a member missing the mail; `--resend` risks a member
    /// getting it twice (opted-out rows are never resent).
    #[command(group = clap::ArgGroup::new("how").required(true).args(["assume_sent", "resend"]))]
    Resolve {
        #[arg(long)]
        campaign: String,
        /// Count them as sent (`sent_at` = when the unknown attempt began).
        #[arg(long)]
        assume_sent: bool,
        /// Send them again under the same idempotency key.
        #[arg(long)]
        resend: bool,
        /// Only rows whose unknown attempt began at or after this: RFC 3339 or a time ago
        /// (`90m`, `2h`).
        #[arg(long, value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// Count, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Loads the provider's suppression list (CSV `email[,reason]`, header optional; reasons
    /// such as hard_bounce, complaint, unsubscribe) in one transaction: any bad line and
    /// nothing changes (exit 65). A listed address is never sent to, in any campaign; rows
    /// already claimed are stopped before their send. Matching is on the whole address,
    /// case-insensitive. `--remove` takes the file's addresses off the list again.
    Suppress {
        /// The CSV file; `-` or nothing reads standard input.
        file: Option<std::path::PathBuf>,
        /// Take these addresses off the list; their suppressed rows go back to pending.
        #[arg(long, conflicts_with = "export")]
        remove: bool,
        /// Write the list instead, `email,reason,source,suppressed_at`, to FILE (`-`: standard
        /// output): who left, for the system that feeds `campaign_targets`.
        #[arg(long, value_name = "FILE", conflicts_with = "file")]
        export: Option<std::path::PathBuf>,
        /// With --export: only those listed since (`2h`, `7d`, or an RFC 3339 time).
        #[arg(long, requires = "export", value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// With --export: only these reasons, comma-separated (`unsubscribe,complaint`).
        #[arg(long, requires = "export", value_delimiter = ',')]
        reason: Vec<String>,
    },
    /// Moves a finished campaign's rows out of the work table, in small batches that never
    /// block the campaigns still sending: per recipient into `campaign_archive` (member, outcome,
    /// when sent, last status, attempts; no address), its final counts into
    /// `archived_campaigns`, which `status` keeps showing. Refuses a campaign with pending or
    /// sending rows (exit 1). Run as the schema owner (it deletes rows): `DATABASE_URL` =
    /// the migrate URL. Interrupted, it resumes where it stopped.
    #[command(group = clap::ArgGroup::new("which").required(true).args(["campaign", "older_than"]))]
    Archive {
        #[arg(long)]
        campaign: Option<String>,
        /// Every finished campaign unchanged for this long (`30d`, `12h`).
        #[arg(long, value_parser = humantime::parse_duration, value_name = "AGE")]
        older_than: Option<std::time::Duration>,
        /// Say what would move, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Writes the campaign's optional settings row: template, sender, failure threshold, send
    /// window. Only the options given change; the pause is not touched.
    Configure {
        #[arg(long)]
        campaign: String,
        /// The vendor's stored template (default: the campaign id): SendGrid `d-…` id, SES
        /// template name or ARN, Postmark alias or id, Mailgun template, Resend id or alias.
        #[arg(long, value_parser = parse_template)]
        template: Option<String>,
        /// The sender, `addr` or `Name <addr>` (a verified identity at the vendor; every
        /// vendor but MAIL_PROVIDER=json needs one).
        /// Exactly one RFC 5322 mailbox; checked by `configure` itself (crate::mailbox), which
        /// refuses with 78 and never shows the value.
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
        /// Send only between these local times every day, e.g. `22:00-06:00` (may wrap
        /// midnight; DST changes keep the wall-clock hours); `none` sends at any time again.
        #[arg(long, value_parser = parse_window, value_name = "HH:MM-HH:MM|none")]
        window: Option<WindowArg>,
        /// The window's time zone, an IANA name (`Asia/Tokyo`); needed with a new window.
        #[arg(long, value_parser = crate::window::parse_tz, value_name = "AREA/CITY")]
        timezone: Option<chrono_tz::Tz>,
        /// Create the settings row of a campaign that has no targets yet (otherwise an unknown
        /// campaign is refused: a typo must not create a campaign).
        #[arg(long)]
        create: bool,
    },
}

/// `--template`: 1 to 256 printable characters, no `@` (no vendor's template id has one, and
/// the status page shows it: an address there would be personal data).
pub fn parse_template(v: &str) -> Result<String, String> {
    if v.trim().is_empty() || v.len() > 256 || v.chars().any(char::is_control) || v.contains('@') {
        return Err(
            "must be 1 to 256 printable characters, no at sign (the vendor's template id, alias or name)"
                .into(),
        );
    }
    Ok(v.to_string())
}

/// `--since`: an RFC 3339 time, or a duration ago (`90m`, `2h 30m`).
pub fn parse_since(v: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let ago = humantime::parse_duration(v)
        .map_err(|e| format!("neither an RFC 3339 time nor a duration like 2h ({e})"))?;
    let ago = chrono::Duration::from_std(ago).map_err(|e| e.to_string())?;
    Ok(chrono::Utc::now() - ago)
}

pub(super) fn parse_rate(v: &str) -> Result<f64, String> {
    let max = crate::config::MAX_RATE_PER_S as f64;
    match v.parse::<f64>() {
        Ok(r) if (0.01..=max).contains(&r) => Ok(r),
        _ => Err(format!(
            "'{}' is not a rate: requests per second, from 0.01 to {max} (e.g. 100)",
            v.chars().take(20).collect::<String>()
        )),
    }
}

pub(super) fn parse_ratio(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err("must be a number between 0 and 1".into()),
    }
}

/// `--delimiter`: one ASCII separator; `tab` (or `\t`) for a tab.
fn parse_delimiter(v: &str) -> Result<u8, String> {
    match v {
        "tab" | "\\t" | "\t" => Ok(b'\t'),
        _ if v.len() == 1 && v.is_ascii() && v != "\"" => Ok(v.as_bytes()[0]),
        _ => Err("must be one character, e.g. , or ; (or `tab`)".into()),
    }
}

pub use crate::window::WindowArg;

fn parse_window(v: &str) -> Result<WindowArg, String> {
    if v.eq_ignore_ascii_case("none") {
        return Ok(WindowArg::None);
    }
    let (start, end) = crate::window::parse_span(v)?;
    Ok(WindowArg::Span(start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_rate_is_bounded_and_an_absurd_one_is_refused_short() {
        assert_eq!(parse_rate("100"), Ok(100.0));
        assert_eq!(parse_rate("100000"), Ok(100_000.0));
        for bad in ["1e30", "100001", "0", "NaN", "inf", "-5"] {
            let err = parse_rate(bad).unwrap_err();
            assert!(err.contains("from 0.01 to 100000"), "{bad}: {err}");
        }
        let long = "9".repeat(5000);
        assert!(
            parse_rate(&long).unwrap_err().len() < 120,
            "the value is cut"
        );
    }

    #[test]
    fn a_template_is_checked_and_an_address_shaped_one_refused_unechoed() {
        assert_eq!(parse_template("d-123"), Ok("d-123".into()));
        for bad in ["", "  ", "a\nb", &"t".repeat(257), "ann@example.com"] {
            let err = parse_template(bad).unwrap_err();
            assert!(!err.contains('@'), "{err}");
        }
    }
}
