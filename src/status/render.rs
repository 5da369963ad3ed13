//! `status` for a person: [`render`] for a terminal, [`one_line`] for a log or a pipe.

use std::fmt::Write as _;

use super::{Status, WindowStatus};
use crate::store::Reason;

pub fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn reason(r: &Reason) -> String {
    match r.status {
        Some(s) => format!("{:>8}  {} {}", r.count, s, r.class),
        None => format!("{:>8}  {}", r.count, r.class),
    }
}

/// The short form: `spring-sale: 812034/1200000 settled, 498.2/s, ETA 12m59s`.
pub fn one_line(s: &Status) -> String {
    let c = &s.progress.counts;
    let settled = c.settled();
    let eta = match (s.done, &s.waits_for, s.eta_s) {
        (true, _, _) => "done".to_string(),
        (_, Some(w), _) => format!("no ETA: not sending, waits for {w}"),
        (_, None, Some(e)) => format!("ETA {}", duration(e)),
        (_, None, None) => "ETA unknown (nothing delivered in the last minute)".to_string(),
    };
    let mut paused = match &s.paused {
        Some(p) => format!(", PAUSED by {}", p.by),
        None => String::new(),
    };
    if let Some(r) = s.limits.iter().find_map(|k| k.refused.as_ref()) {
        paused += &format!(", REFUSED: {}", r.kind.advice(r.status));
    }
    if let Some(u) = s.limits.iter().find_map(|k| k.vendor_quota_until) {
        paused += &format!(
            ", PROVIDER QUOTA used up until {}",
            u.format("%Y-%m-%d %H:%M UTC")
        );
    }
    let mut extra = String::new();
    if c.unconfirmed > 0 {
        extra += &format!(", {} UNCONFIRMED", c.unconfirmed);
    }
    if c.suppressed > 0 {
        extra += &format!(", {} suppressed", c.suppressed);
    }
    let rate = match s.waits_for {
        Some(_) => "not sending".to_string(),
        None => format!("{:.1}/s", s.rate_per_s),
    };
    format!(
        "{}: {settled}/{} settled ({} sent, {} failed, {} opted out{extra}), {rate}, {eta}{paused}",
        s.campaign_id, c.total, c.sent, c.failed, c.opted_out
    )
}

/// The full form, for a terminal: one section after the other.
pub fn render(s: &Status) -> String {
    let mut o = String::new();
    render_state(&mut o, s);
    render_counts(&mut o, s);
    render_limits(&mut o, s);
    render_reasons(&mut o, s);
    render_funnel(&mut o, s);
    render_providers(&mut o, s);
    render_reputation(&mut o, s);
    render_inbound(&mut o, s);
    o
}

/// The mailto's inbound mails, once one came: `mailto     postmark: unsubscribed 12, last
/// 2026-12-07 10:00 UTC · no token 3, last … (read those in the vendor's inbound log)`.
fn render_inbound(o: &mut String, s: &Status) {
    let mut vendors: Vec<&str> = s.inbound.iter().map(|t| t.vendor.as_str()).collect();
    vendors.dedup();
    for vendor in vendors {
        let of_vendor = s.inbound.iter().filter(|t| t.vendor == vendor);
        let shown: Vec<String> = of_vendor
            .map(|t| {
                format!(
                    "{} {}, last {}",
                    t.outcome.replace('_', " "),
                    t.mails,
                    t.last_at.format("%Y-%m-%d %H:%M UTC")
                )
            })
            .collect();
        let hint = match s
            .inbound
            .iter()
            .any(|t| t.vendor == vendor && t.outcome == "no_token")
        {
            true => " (read those without a token in the vendor's inbound log)",
            false => "",
        };
        let _ = writeln!(o, "mailto     {vendor}: {}{hint}", shown.join(" · "));
    }
}

/// The complaint and hard-bounce rates against the lines the brake holds the campaign to.
fn render_reputation(o: &mut String, s: &Status) {
    if let Some(r) = &s.reputation {
        let _ = writeln!(o, "lines      {}", lines(r));
    }
}

/// `complaints 0.05 % (5 of 10 000), line 0.08 % · hard bounces …`, and when the brake waits.
pub fn lines(r: &crate::status::Reputation) -> String {
    use crate::store::brake::{grouped, percent};
    let one = |what: &str, n: i64, rate: f64, line: f64| {
        if r.sent == 0 {
            // No rate of nothing sent: never "(1 of 0)".
            return format!(
                "{what} {} of no mail sent yet, line {}",
                grouped(n),
                percent(line)
            );
        }
        format!(
            "{what} {} ({} of {}), line {}",
            percent(rate),
            grouped(n),
            grouped(r.sent),
            percent(line)
        )
    };
    let mut text = format!(
        "{} · {}",
        one(
            "complaints",
            r.complaints,
            r.complaint_rate,
            r.complaint_line
        ),
        one("hard bounces", r.hard_bounces, r.bounce_rate, r.bounce_line)
    );
    if r.sent < r.min_sent {
        text.push_str(&format!(
            " (the brake waits for {} sent)",
            grouped(r.min_sent)
        ));
    }
    text
}

/// What the vendor's events said, once any came: accepted → delivered → bounced/complained.
fn render_funnel(o: &mut String, s: &Status) {
    if s.funnel.iter().all(|(_, n)| *n == 0) {
        return;
    }
    let shown: Vec<String> = s
        .funnel
        .iter()
        .map(|(col, n)| format!("{} {n}", col.replace('_', " ")))
        .collect();
    let _ = writeln!(o, "events     {}", shown.join(" · "));
}

/// The campaign by mailbox provider, once it sent to or heard from one: `Gmail  sent 300 ·
/// delivered 250 · … · refused 12 (authentication 12) · complaints not reported (Postmaster
/// Tools) · bounced 0.67 %`.
fn render_providers(o: &mut String, s: &Status) {
    use crate::store::brake::{grouped, percent};
    for p in &s.providers {
        let name = p
            .family
            .parse::<crate::store::event::Family>()
            .map_or("other", |f| match f {
                crate::store::event::Family::Other => "others",
                f => f.provider_name(),
            });
        let refused = match p.refused.iter().map(|(_, n)| n).sum::<i64>() {
            0 => "refused 0".to_string(),
            n => format!(
                "refused {} ({})",
                grouped(n),
                p.refused
                    .iter()
                    .map(|(cause, n)| format!("{} {}", cause.replace('_', " "), grouped(*n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let complaints = match p.complaint_rate {
            Some(rate) => format!("complaints {} ({})", grouped(p.complaints), percent(rate)),
            None => "complaints not reported — Postmaster Tools".to_string(),
        };
        let _ = writeln!(
            o,
            "provider   {name}: sent {} · delivered {} · deferred {} ({} for rate) · bounced {} ({}) · {refused} · {complaints}",
            grouped(p.sent),
            grouped(p.delivered),
            grouped(p.deferred),
            grouped(p.deferred_for_rate),
            grouped(p.bounced),
            percent(p.bounce_rate),
        );
    }
}

fn render_state(o: &mut String, s: &Status) {
    let _ = writeln!(
        o,
        "campaign   {} (template {}, weight {})",
        s.campaign_id, s.template, s.weight
    );
    let reply = s
        .reply_to
        .as_deref()
        .map(|r| format!(", reply-to {r}"))
        .unwrap_or_default();
    match &s.from {
        Some(f) => {
            let _ = writeln!(o, "sender     {f}{reply}");
        }
        None => {
            let _ = writeln!(
                o,
                "sender     none (every vendor but MAIL_PROVIDER=json needs one: `campaign-sender configure --campaign {} --from \"Name <addr>\"`)",
                s.campaign_id
            );
        }
    }
    match &s.paused {
        Some(p) => {
            let why = p
                .reason
                .as_deref()
                .map(|r| format!(": {}", crate::shown::quoted(r)))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "PAUSED     since {} by {}{why}",
                p.at.format("%Y-%m-%d %H:%M:%S UTC"),
                p.by
            );
            let _ = writeln!(
                o,
                "           `campaign-sender resume --campaign {}` lifts it",
                s.campaign_id
            );
        }
        None => match &s.archived {
            Some(a) => {
                let when = a
                    .archived_at
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                    .unwrap_or_else(|| "in progress (run `archive` again to finish)".into());
                let later = if s.done {
                    String::new()
                } else {
                    format!("; {} rows imported since are running", s.remaining)
                };
                let _ = writeln!(
                    o,
                    "state      archived {when}; per recipient in campaign_archive{later}"
                );
            }
            None => {
                let _ = writeln!(o, "state      {}", if s.done { "done" } else { "running" });
            }
        },
    }
}

fn render_counts(o: &mut String, s: &Status) {
    let c = &s.progress.counts;
    let _ = writeln!(
        o,
        "targets    {} total: {} sent, {} failed ({}), {} pending ({} waiting to retry, {} scheduled for later), {} sending, {} opted out",
        c.total, c.sent, c.failed, budget(s), c.pending, s.progress.retry_waiting, s.progress.scheduled, c.sending, c.opted_out
    );
    render_unsendable(o, s);
    // With a window, the ETA counts whole windows (its own line); without, it is the rate's.
    let eta = match s.eta_s {
        Some(e) if !s.done && s.window.is_none() => format!(", ETA {}", duration(e)),
        _ => String::new(),
    };
    let _ = match &s.waits_for {
        Some(w) => writeln!(
            o,
            "rate       none: not sending, waits for {w} ({} delivered in the last minute)",
            s.progress.sent_last_minute
        ),
        None => writeln!(
            o,
            "rate       {:.1}/s over the last minute ({} delivered){eta}",
            s.rate_per_s, s.progress.sent_last_minute
        ),
    };
    if let Some(w) = &s.window {
        render_window(o, w, s.done, s.at);
    }
}

/// The rows neither sent nor sendable: suppressed by reason, and unconfirmed with what to do.
fn render_unsendable(o: &mut String, s: &Status) {
    let c = &s.progress.counts;
    if c.suppressed > 0 {
        let reasons: Vec<String> = s
            .suppressed
            .iter()
            .map(|b| format!("{} {}", b.count, b.label))
            .collect();
        let _ = writeln!(
            o,
            "suppressed {} (address on the suppression list: {})",
            c.suppressed,
            reasons.join(", ")
        );
    }
    if c.unconfirmed > 0 {
        let since = s
            .unconfirmed_since
            .map(|t| format!(" since {}", t.format("%Y-%m-%d %H:%M:%S UTC")))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "UNCONFIRMED {}{since}: maybe delivered, past the provider's idempotency window; \
             `campaign-sender resolve --campaign {} --assume-sent | --resend` settles them",
            c.unconfirmed, s.campaign_id
        );
    }
}

/// `window     22:00-06:00 Asia/Tokyo: closed, opens Sat 22:00 JST (in 5h12m)` and the ETA in
/// whole windows: `at 100/s, 8h00m a window: this one and 2 more, done about Wed 05:40 JST`.
fn render_window(o: &mut String, w: &WindowStatus, done: bool, now: chrono::DateTime<chrono::Utc>) {
    let tz = w.send_window.tz;
    let local =
        |t: chrono::DateTime<chrono::Utc>| t.with_timezone(&tz).format("%a %H:%M %Z").to_string();
    let change = if w.open {
        "open, closes"
    } else {
        "closed, opens"
    };
    let _ = writeln!(
        o,
        "window     {}: {change} {} (in {})",
        w.window,
        local(w.next_change),
        duration((w.next_change - now).num_seconds() as f64)
    );
    if done {
        return;
    }
    let span = {
        let secs = (w.send_window.end - w.send_window.start)
            .num_seconds()
            .rem_euclid(86_400);
        duration(secs as f64)
    };
    let line = match &w.finish {
        None => "unknown: nothing delivered yet to estimate a rate from".to_string(),
        Some(f) => {
            let windows = match (w.open, f.windows) {
                (true, 1) => "within this one".to_string(),
                (true, n) => format!("this one and {} more", n - 1),
                (false, 1) => "the next one".to_string(),
                (false, n) => format!("{n} more windows"),
            };
            format!(
                "at {:.0}/s, {span} a window: {windows}, done about {}",
                f.rate_per_s,
                local(f.at)
            )
        }
    };
    let _ = writeln!(o, "ETA        {line}");
}

/// The failure budget in words: "budget 12 = 1 % of 1200", or, for a campaign too small for
/// its ratio to allow one row, that any failure stops a run.
pub fn budget(s: &Status) -> String {
    let pct = s.failure_ratio * 100.0;
    let total = s.progress.counts.total;
    if s.failure_budget == 0 {
        format!("any failure stops a run: {pct} % of {total} is less than one row")
    } else {
        format!("budget {} = {pct} % of {total}", s.failure_budget)
    }
}

/// Each rate-limit key the campaign's pods send under: its limit, a refusal, the daily quota,
/// and every live pod of the key.
fn render_limits(o: &mut String, s: &Status) {
    if s.limits.iter().all(|k| k.members.is_empty()) {
        let _ = writeln!(o, "workers    none live");
    }
    for k in &s.limits {
        let _ = writeln!(o, "limit      {}", k.limit_line());
        if let Some(r) = &k.refused {
            let _ = writeln!(
                o,
                "REFUSED    {} since {}",
                r.kind.advice(r.status),
                r.since.format("%Y-%m-%d %H:%M:%S UTC")
            );
        }
        if let Some(q) = &k.quota {
            let full = match (q.full(), q.frees_from) {
                (true, Some(t)) => format!("; FULL, frees from {}", t.format("%Y-%m-%d %H:%M UTC")),
                (true, None) => "; FULL".to_string(),
                _ => String::new(),
            };
            let _ = writeln!(
                o,
                "quota      {} of {} requests in the last 24 h{full}",
                q.used, q.daily
            );
        }
        if let Some(until) = k.vendor_quota_until {
            let _ = writeln!(
                o,
                "QUOTA      the provider's own sending quota is used up: no pod sends until {} (it frees by itself; runs exit 0, done for now)",
                until.format("%Y-%m-%d %H:%M UTC")
            );
        }
        for m in &k.members {
            let other = if m.campaign_id == s.campaign_id {
                String::new()
            } else {
                format!(" (campaign {})", m.campaign_id)
            };
            let idle = if m.weight == 0.0 {
                ", idle".to_string()
            } else {
                format!(", weight {}", m.weight)
            };
            let _ = writeln!(
                o,
                "  {:<24} share {:>7.1}/s{idle}{other}",
                m.worker, m.share_per_s
            );
        }
    }
}

fn render_reasons(o: &mut String, s: &Status) {
    for (title, list) in [("failed", &s.failures), ("retrying", &s.retrying)] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(o, "{title} by last status and class:");
        for r in list {
            let _ = writeln!(o, "{}", reason(r));
        }
    }
}
