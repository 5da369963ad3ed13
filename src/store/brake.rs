//! `campaign_tallies` and the brake: each campaign's mails sent against the complaints and hard
//! bounces its vendor reported, and the pause that stops it before a mailbox provider's line
//! (`MAX_COMPLAINT_RATIO`, `MAX_BOUNCE_RATIO`, [`crate::config::BrakeConfig`]).
//!
//! - the tally's `sent` is the campaign's sent rows, in the work table and archived, whatever
//!   made them sent: the workers' fenced finish adds the rows it wrote `sent` (in its own
//!   statement, [`crate::store::Store::finish`]), `resolve --assume-sent` the rows it settles
//!   (in its own, [`crate::store::Store::resolve`]), `events` the rows an event settled; `archive`
//!   moves rows without touching it. `events` also adds each complaint and hard bounce it stores
//!   for a row of ours ([`weigh`]);
//! - in that same transaction, a campaign whose tally is over a line — complaints / sent (or
//!   hard bounces / sent) above it, once `sent` reaches `BRAKE_MIN_SENT` — and to which this
//!   transaction added a complaint (or a hard bounce) is paused by `brake`, with the measured
//!   rate, the counts and the line as its reason. Every worker stops within `PAUSE_POLL_MS` as
//!   for any pause; `resume` lifts it. A campaign resumed while still over its line is paused
//!   again by its next complaint (or bounce): raise its line with `configure` to go on.
//!
//! Lock order, as everywhere: work rows, then the tally, then the campaign's settings row.

use sqlx::{PgConnection, PgPool};

use super::campaigns;
use super::event::{Cause, Family};

/// Who pauses a campaign over a line (`campaigns.paused_by`).
pub const BY_BRAKE: &str = "brake";

/// The lines a campaign is held to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Lines {
    /// Complaints / sent above this pauses.
    pub complaint: f64,
    /// Hard bounces / sent above this pauses.
    pub bounce: f64,
    /// Below this many mails sent, nothing pauses (the complaint and bounce lines only).
    pub min_sent: i64,
    /// The sender's refusals of distinct members at one provider that pause, with
    /// [`Lines::sender_ratio`] of the mails sent there (`MAX_SENDER_REFUSALS`; 0: off).
    pub sender_refusals: i64,
    /// `MAX_SENDER_REFUSAL_RATIO`: and at least this share of the mails sent to that provider.
    pub sender_ratio: f64,
}

/// A refusal of our own domain (`events::cause`: the sender's) of a row of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderRefusal {
    pub campaign_id: String,
    pub member_id: i64,
    pub family: Family,
    pub cause: Cause,
    pub code: Option<String>,
}

/// What one transaction brings to the tallies: rows it settled as `sent`, and the complaints
/// and hard bounces it stored for rows of ours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Added {
    /// Per campaign and mailbox provider, rows newly `sent`.
    pub sent: Vec<(String, Family, i64)>,
    /// Each (campaign, member) struck, with the line it counts against.
    pub strikes: Vec<(String, i64, Line)>,
    /// Each permanent refusal of our domain, of a row of ours.
    pub refusals: Vec<SenderRefusal>,
}

impl Added {
    /// Per campaign, rows newly `sent`.
    fn sent_per_campaign(&self) -> Vec<(String, i64)> {
        let mut per: std::collections::BTreeMap<&str, i64> = Default::default();
        for (c, _, n) in &self.sent {
            *per.entry(c).or_default() += n;
        }
        per.into_iter().map(|(c, n)| (c.to_string(), n)).collect()
    }
}

/// A campaign's tally, with the lines it is held to.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Tally {
    pub campaign_id: String,
    pub sent: i64,
    pub complaints: i64,
    pub hard_bounces: i64,
    /// The campaign's own lines (`configure`), if it set them.
    pub own_complaint: Option<f64>,
    pub own_bounce: Option<f64>,
    /// Whether the campaign is paused (by anyone).
    pub paused: bool,
}

/// Which line a tally crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Complaint,
    Bounce,
    /// The sender's refusals at one provider ([`weigh_refusals`]); a [`Tally`] has none.
    SenderRefusal,
}

impl Line {
    /// As `campaign_strikes.kind` stores it.
    pub fn kind(self) -> &'static str {
        match self {
            Line::Complaint => "complaint",
            Line::Bounce => "hard_bounce",
            Line::SenderRefusal => "sender_refusal",
        }
    }
}

/// A tally as [`weigh`] left it, with what this transaction added.
#[derive(Debug, sqlx::FromRow)]
struct Weighed {
    #[sqlx(flatten)]
    tally: Tally,
    added_complaints: i64,
    added_bounces: i64,
}

impl Tally {
    /// Its lines: its own, else the fleet's.
    pub fn lines(&self, fleet: Lines) -> Lines {
        Lines {
            complaint: self.own_complaint.unwrap_or(fleet.complaint),
            bounce: self.own_bounce.unwrap_or(fleet.bounce),
            ..fleet
        }
    }

    /// The rate of `line`'s kind: its count / sent (0 before anything is sent).
    pub fn rate(&self, line: Line) -> f64 {
        if self.sent <= 0 {
            return 0.0;
        }
        self.count(line) as f64 / self.sent as f64
    }

    fn count(&self, line: Line) -> i64 {
        match line {
            Line::Complaint => self.complaints,
            Line::Bounce => self.hard_bounces,
            Line::SenderRefusal => 0,
        }
    }

    /// Whether the tally is over `line` under `lines` (never below `min_sent`).
    pub fn over(&self, line: Line, lines: Lines) -> bool {
        let limit = match line {
            Line::Complaint => lines.complaint,
            Line::Bounce => lines.bounce,
            Line::SenderRefusal => return false,
        };
        self.sent >= lines.min_sent && self.rate(line) > limit
    }

    /// The pause's reason, in words: `complaint rate 0.31 % (31 of 10 000) over 0.10 %`.
    pub fn reason(&self, line: Line, lines: Lines) -> String {
        let (what, limit) = match line {
            Line::Complaint => ("complaint rate", lines.complaint),
            Line::Bounce => ("hard-bounce rate", lines.bounce),
            Line::SenderRefusal => ("sender's refusals", lines.sender_ratio),
        };
        format!(
            "{what} {} ({} of {}) over {}",
            percent(self.rate(line)),
            grouped(self.count(line)),
            grouped(self.sent),
            percent(limit)
        )
    }
}

/// A ratio as a percentage with two decimals: `0.31 %`.
pub fn percent(ratio: f64) -> String {
    format!("{:.2} %", ratio * 100.0)
}

/// A count with its thousands apart: `10 000`.
pub fn grouped(n: i64) -> String {
    crate::shown::grouped(n, ' ')
}

/// A campaign the brake paused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Braked {
    pub campaign_id: String,
    pub line: Line,
    pub reason: String,
}

/// Adds `added` to the tallies and pauses every campaign this pushed over a line, in the
/// caller's transaction (`events`: the one that stores the events).
///
/// Invariants: a tally only grows; a member's complaint (or hard bounce) counts once per
/// campaign (`campaign_strikes`' key); a campaign is paused only when this transaction added a
/// complaint (or a hard bounce) and its tally is then over that line with at least `min_sent`
/// mails sent; an existing pause is kept as it was ([`campaigns::pause`]). Tallies are locked
/// in campaign order, so two transactions never wait on each other in a circle.
pub async fn weigh(
    tx: &mut PgConnection,
    added: &Added,
    fleet: Lines,
) -> Result<Vec<Braked>, sqlx::Error> {
    if added.sent.is_empty() && added.strikes.is_empty() && added.refusals.is_empty() {
        return Ok(Vec::new());
    }
    // language=PostgreSQL
    const ADD: &str = r#"
        WITH struck AS (
            INSERT INTO campaign_strikes (campaign_id, member_id, kind)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
            ON CONFLICT DO NOTHING
            RETURNING campaign_id, kind
        ),
        adds AS (
            SELECT campaign_id, sum(sent)::bigint AS sent,
                   sum(complaints)::bigint AS complaints, sum(hard_bounces)::bigint AS hard_bounces
              FROM (SELECT campaign_id, 0::bigint AS sent,
                           (kind = 'complaint')::int AS complaints,
                           (kind = 'hard_bounce')::int AS hard_bounces
                      FROM struck
                    UNION ALL
                    SELECT c, n, 0, 0 FROM unnest($4::text[], $5::bigint[]) AS x(c, n)) u
             GROUP BY campaign_id
        ),
        added AS (
            INSERT INTO campaign_tallies AS t (campaign_id, sent, complaints, hard_bounces)
            SELECT * FROM adds ORDER BY campaign_id
            ON CONFLICT (campaign_id) DO UPDATE
               SET sent = t.sent + excluded.sent,
                   complaints = t.complaints + excluded.complaints,
                   hard_bounces = t.hard_bounces + excluded.hard_bounces
            RETURNING t.campaign_id, t.sent, t.complaints, t.hard_bounces
        )
        SELECT a.campaign_id, a.sent, a.complaints, a.hard_bounces,
               c.max_complaint_ratio AS own_complaint, c.max_bounce_ratio AS own_bounce,
               c.paused_at IS NOT NULL AS paused,
               d.complaints AS added_complaints, d.hard_bounces AS added_bounces
          FROM added a
          JOIN adds d ON d.campaign_id = a.campaign_id
          LEFT JOIN campaigns c ON c.campaign_id = a.campaign_id
         ORDER BY a.campaign_id
    "#;
    let sent = added.sent_per_campaign();
    let weighed: Vec<Weighed> = sqlx::query_as(ADD)
        .bind(
            added
                .strikes
                .iter()
                .map(|s| s.0.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(added.strikes.iter().map(|s| s.1).collect::<Vec<_>>())
        .bind(added.strikes.iter().map(|s| s.2.kind()).collect::<Vec<_>>())
        .bind(sent.iter().map(|s| s.0.as_str()).collect::<Vec<_>>())
        .bind(sent.iter().map(|s| s.1).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await?;
    let mut braked = Vec::new();
    for w in weighed.iter().filter(|w| !w.tally.paused) {
        let t = &w.tally;
        let lines = t.lines(fleet);
        let crossed = [
            (Line::Complaint, w.added_complaints),
            (Line::Bounce, w.added_bounces),
        ]
        .into_iter()
        .find(|(line, n)| *n > 0 && t.over(*line, lines));
        if let Some((line, _)) = crossed {
            let reason = t.reason(line, lines);
            campaigns::pause(&mut *tx, &t.campaign_id, BY_BRAKE, Some(&reason)).await?;
            braked.push(Braked {
                campaign_id: t.campaign_id.clone(),
                line,
                reason,
            });
        }
    }
    braked.extend(weigh_refusals(tx, added, fleet).await?);
    Ok(braked)
}

/// A campaign's tally at one provider, as [`weigh_refusals`] left it.
#[derive(Debug, sqlx::FromRow)]
struct AtProvider {
    campaign_id: String,
    family: String,
    sent: i64,
    sender_refusals: i64,
    added: i64,
    own_line: Option<i32>,
    paused: bool,
}

impl AtProvider {
    /// Over the sender's line: at least `line` refusals of distinct members, and at least the
    /// ratio of the mails sent to the provider (a line of 0 is off).
    fn over(&self, line: i64, ratio: f64) -> bool {
        line > 0
            && self.sender_refusals >= line
            && self.sender_refusals as f64 >= ratio * self.sent as f64
    }
}

/// The sender's brake, after [`weigh`]'s, in its transaction: adds the mails sent per provider
/// and the refusals of our domain per provider, and pauses a campaign whose refusals at one
/// provider this transaction brought to its line (see [`AtProvider::over`]) — without waiting
/// for `BRAKE_MIN_SENT`: a broken DKIM key stops the campaign within its first refusals.
///
/// Invariants: a member's refusal counts once per campaign (`campaign_strikes`); provider
/// tallies are locked in (campaign, provider) order, after the campaign tallies; the reason
/// names the provider, the cause, the code and the counts.
async fn weigh_refusals(
    tx: &mut PgConnection,
    added: &Added,
    fleet: Lines,
) -> Result<Vec<Braked>, sqlx::Error> {
    if added.sent.is_empty() && added.refusals.is_empty() {
        return Ok(Vec::new());
    }
    // language=PostgreSQL
    const ADD: &str = r#"
        WITH struck AS (
            INSERT INTO campaign_strikes (campaign_id, member_id, kind)
            SELECT c, m, 'sender_refusal' FROM unnest($1::text[], $2::bigint[]) AS x(c, m)
            ON CONFLICT DO NOTHING
            RETURNING campaign_id, member_id
        ),
        refused AS (
            SELECT x.c AS campaign_id, x.f AS family, count(*) AS n
              FROM unnest($1::text[], $2::bigint[], $3::text[]) AS x(c, m, f)
              JOIN struck s ON s.campaign_id = x.c AND s.member_id = x.m
             GROUP BY 1, 2
        ),
        adds AS (
            SELECT campaign_id, family, sum(sent)::bigint AS sent, sum(n)::bigint AS refusals
              FROM (SELECT campaign_id, family, 0::bigint AS sent, n FROM refused
                    UNION ALL
                    SELECT c, f, n, 0 FROM unnest($4::text[], $5::text[], $6::bigint[]) AS y(c, f, n)) u
             GROUP BY 1, 2
        ),
        added AS (
            INSERT INTO campaign_family_tallies AS t (campaign_id, family, sent, sender_refusals)
            SELECT * FROM adds ORDER BY campaign_id, family
            ON CONFLICT (campaign_id, family) DO UPDATE
               SET sent = t.sent + excluded.sent,
                   sender_refusals = t.sender_refusals + excluded.sender_refusals
            RETURNING t.campaign_id, t.family, t.sent, t.sender_refusals
        )
        SELECT a.campaign_id, a.family, a.sent, a.sender_refusals, d.refusals AS added,
               c.max_sender_refusals AS own_line, c.paused_at IS NOT NULL AS paused
          FROM added a
          JOIN adds d ON d.campaign_id = a.campaign_id AND d.family = a.family
          LEFT JOIN campaigns c ON c.campaign_id = a.campaign_id
         ORDER BY a.campaign_id, a.family
    "#;
    // One refusal per member and campaign in one request (a vendor may repeat an event).
    let mut seen = std::collections::HashSet::new();
    let refusals: Vec<&SenderRefusal> = added
        .refusals
        .iter()
        .filter(|r| seen.insert((r.campaign_id.as_str(), r.member_id)))
        .collect();
    let weighed: Vec<AtProvider> = sqlx::query_as(ADD)
        .bind(
            refusals
                .iter()
                .map(|r| r.campaign_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(refusals.iter().map(|r| r.member_id).collect::<Vec<_>>())
        .bind(
            refusals
                .iter()
                .map(|r| r.family.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(added.sent.iter().map(|s| s.0.as_str()).collect::<Vec<_>>())
        .bind(added.sent.iter().map(|s| s.1.as_str()).collect::<Vec<_>>())
        .bind(added.sent.iter().map(|s| s.2).collect::<Vec<_>>())
        .fetch_all(&mut *tx)
        .await?;
    let mut braked = Vec::new();
    let mut paused: std::collections::HashSet<&str> = Default::default();
    for w in weighed.iter().filter(|w| !w.paused && w.added > 0) {
        let line = w.own_line.map_or(fleet.sender_refusals, i64::from);
        if paused.contains(w.campaign_id.as_str()) || !w.over(line, fleet.sender_ratio) {
            continue;
        }
        let last = refusals
            .iter()
            .rev()
            .find(|r| r.campaign_id == w.campaign_id && r.family.as_str() == w.family)
            .expect("a provider with refusals added has one of them");
        let reason = sender_reason(w, last);
        campaigns::pause(&mut *tx, &w.campaign_id, BY_BRAKE, Some(&reason)).await?;
        paused.insert(w.campaign_id.as_str());
        braked.push(Braked {
            campaign_id: w.campaign_id.clone(),
            line: Line::SenderRefusal,
            reason,
        });
    }
    Ok(braked)
}

/// `Gmail refuses our mail: authentication (5.7.26), 12 members of 300 sent there; check SPF,
/// DKIM and DMARC (OPERATIONS: "Whose fault is a refusal")`.
fn sender_reason(w: &AtProvider, last: &SenderRefusal) -> String {
    let check = match last.cause {
        Cause::Authentication => "check SPF, DKIM and DMARC of the sending domain",
        Cause::Reputation => "check the domain's and IPs' reputation and block lists",
        Cause::Policy => "check the content and the provider's policy",
        Cause::Tls => "check the vendor's TLS",
        _ => "check the sending domain",
    };
    let code = last
        .code
        .as_deref()
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    format!(
        "{} refuses our mail: {}{code}, {} members of {} sent there; {check} (docs/OPERATIONS.md, \"Whose fault is a refusal\")",
        last.family.provider_name(),
        last.cause.as_str(),
        grouped(w.sender_refusals),
        grouped(w.sent)
    )
}

/// A campaign's tally and own lines (`status`, the page); `None` before its first mail.
pub async fn tally(pool: &PgPool, campaign_id: &str) -> Result<Option<Tally>, sqlx::Error> {
    // language=PostgreSQL
    const TALLY: &str = r#"
        SELECT t.campaign_id, t.sent, t.complaints, t.hard_bounces,
               c.max_complaint_ratio AS own_complaint, c.max_bounce_ratio AS own_bounce,
               c.paused_at IS NOT NULL AS paused
          FROM campaign_tallies t LEFT JOIN campaigns c ON c.campaign_id = t.campaign_id
         WHERE t.campaign_id = $1
    "#;
    sqlx::query_as(TALLY)
        .bind(campaign_id)
        .fetch_optional(pool)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLEET: Lines = Lines {
        complaint: 0.001,
        bounce: 0.02,
        min_sent: 1000,
        sender_refusals: 10,
        sender_ratio: 0.01,
    };

    fn tally(sent: i64, complaints: i64, hard_bounces: i64) -> Tally {
        Tally {
            campaign_id: "c".into(),
            sent,
            complaints,
            hard_bounces,
            own_complaint: None,
            own_bounce: None,
            paused: false,
        }
    }

    #[test]
    fn a_tally_is_over_a_line_only_above_it_and_past_the_minimum() {
        assert!(
            !tally(10_000, 10, 0).over(Line::Complaint, FLEET),
            "at the line"
        );
        assert!(tally(10_000, 11, 0).over(Line::Complaint, FLEET));
        assert!(
            !tally(999, 999, 0).over(Line::Complaint, FLEET),
            "below min"
        );
        assert!(tally(1000, 0, 21).over(Line::Bounce, FLEET));
        assert!(!tally(1000, 0, 20).over(Line::Bounce, FLEET));
    }

    fn at_google(sent: i64, sender_refusals: i64) -> AtProvider {
        AtProvider {
            campaign_id: "c".into(),
            family: "google".into(),
            sent,
            sender_refusals,
            added: 1,
            own_line: None,
            paused: false,
        }
    }

    /// Ten refusals of our domain pause a campaign of a few hundred Gmail mails at once, with
    /// no minimum sent; ten stray ones over a day of 400 000 do not; a line of 0 is off.
    #[test]
    fn the_senders_line_needs_both_its_count_and_its_share_of_the_providers_mails() {
        assert!(at_google(300, 12).over(10, 0.01));
        assert!(
            at_google(300, 10).over(10, 0.01),
            "reaching the line is enough"
        );
        assert!(!at_google(300, 5).over(10, 0.01), "under the count");
        assert!(!at_google(400_000, 10).over(10, 0.01), "under the share");
        assert!(at_google(1000, 10).over(10, 0.01), "10 of 1000 reaches 1 %");
        assert!(!at_google(300, 300).over(0, 0.01), "off");
        let refusal = SenderRefusal {
            campaign_id: "c".into(),
            member_id: 1,
            family: Family::Google,
            cause: Cause::Authentication,
            code: Some("5.7.26".into()),
        };
        assert_eq!(
            sender_reason(&at_google(300, 12), &refusal),
            "Gmail refuses our mail: authentication (5.7.26), 12 members of 300 sent there; \
             check SPF, DKIM and DMARC of the sending domain (docs/OPERATIONS.md, \"Whose fault is a refusal\")"
        );
    }

    #[test]
    fn a_campaigns_own_line_wins_over_the_fleets() {
        let mut t = tally(10_000, 11, 0);
        t.own_complaint = Some(0.005);
        assert!(!t.over(Line::Complaint, t.lines(FLEET)));
        assert_eq!(t.lines(FLEET).bounce, FLEET.bounce);
    }

    #[test]
    fn the_reason_gives_the_rate_the_counts_and_the_line() {
        let lines = Lines {
            complaint: 0.001,
            ..FLEET
        };
        assert_eq!(
            tally(10_000, 31, 0).reason(Line::Complaint, lines),
            "complaint rate 0.31 % (31 of 10 000) over 0.10 %"
        );
        assert_eq!(
            tally(1_234_567, 0, 30_000).reason(Line::Bounce, FLEET),
            "hard-bounce rate 2.43 % (30 000 of 1 234 567) over 2.00 %"
        );
    }
}
