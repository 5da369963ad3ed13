//! Whose fault a refusal is, through each vendor's own event shape: the seven refusals of the
//! sender the issue measured, and the recipient's own, each ends as the table says — no
//! refusal of our domain suppresses anybody, every one of the recipient's does.

use serde_json::{json, Value};

use super::cause::*;
use super::{mailgun, postmark, resend, sendgrid, sns, Event, What};

fn only(events: Vec<Event>) -> (What, Refusal) {
    assert_eq!(events.len(), 1, "{events:?}");
    let e = events.into_iter().next().unwrap();
    (e.what, e.refusal.expect("a bounce carries its refusal"))
}

fn ses(to: &str, sub: &str, status: &str, diagnostic: &str) -> (What, Refusal) {
    let message = json!({"eventType": "Bounce",
        "bounce": {"bounceType": "Permanent", "bounceSubType": sub, "timestamp": "2026-12-07T01:00:00Z",
                   "bouncedRecipients": [{"emailAddress": to, "action": "failed", "status": status,
                                          "diagnosticCode": diagnostic}]},
        "mail": {"messageId": "m-1", "destination": [to],
                 "tags": {"campaign_id": ["c1"], "member_id": ["7"]}}});
    only(sns::parse_ses(&message.to_string(), "sns-1").unwrap())
}

fn sendgrid(to: &str, status: &str, reason: &str, classification: &str) -> (What, Refusal) {
    let body = json!([{"email": to, "event": "bounce", "type": "bounce", "status": status,
        "reason": reason, "bounce_classification": classification, "sg_event_id": "sg-1",
        "sg_message_id": "m1.filter", "timestamp": 1_765_000_000, "campaign_id": "c1", "member_id": "7"}]);
    only(sendgrid::parse(body.to_string().as_bytes()).unwrap())
}

fn mailgun(to: &str, code: Value, message: &str) -> (What, Refusal) {
    let body = json!({"signature": {}, "event-data": {"id": "mg-1", "event": "failed",
        "severity": "permanent", "reason": "bounce", "recipient": to, "timestamp": 1_765_000_000.0,
        "delivery-status": {"code": code, "message": message, "description": ""},
        "user-variables": {"campaign_id": "c1", "member_id": "7"}}});
    only(mailgun::parse(body.to_string().as_bytes()).unwrap())
}

fn resend(to: &str, sub: &str, message: &str) -> (What, Refusal) {
    let body = json!({"type": "email.bounced", "created_at": "2026-12-07T01:00:00Z",
        "data": {"email_id": "re-1", "to": [to],
                 "bounce": {"type": "Permanent", "subType": sub, "message": message},
                 "tags": {"campaign_id": "c1", "member_id": "7"}}});
    only(resend::parse(body.to_string().as_bytes(), "msg-1".into()).unwrap())
}

fn postmark(to: &str, kind: &str, details: &str) -> (What, Refusal) {
    let body = json!({"RecordType": "Bounce", "Type": kind, "ID": 42, "MessageID": "pm-1",
        "Email": to, "Details": details, "BouncedAt": "2026-12-07T01:00:00Z",
        "Metadata": {"campaign_id": "c1", "member_id": "7"}});
    only(postmark::parse(body.to_string().as_bytes()).unwrap())
}

/// The seven refusals of our own domain, in each vendor's shape.
#[test]
fn the_senders_refusals_suppress_nobody_through_every_vendor() {
    let cases = [
        ("SES Gmail 5.7.26", ses("ann@gmail.com", "General", "5.7.26",
            "smtp; 550-5.7.26 This mail has been blocked because the sender is unauthenticated."),
            Cause::Authentication, Family::Google, "5.7.26"),
        ("SES Gmail 5.7.1", ses("bo@gmail.com", "General", "5.0.0",
            "smtp; 550-5.7.1 [1.2.3.4] Our system has detected that this message is likely unsolicited mail."),
            Cause::Reputation, Family::Google, "5.7.1"),
        ("SendGrid Gmail 5.7.26 Technical", sendgrid("cy@gmail.com", "5.7.26",
            "550-5.7.26 Unauthenticated email from example.com is not accepted", "Technical"),
            Cause::Authentication, Family::Google, "5.7.26"),
        ("SendGrid Outlook S3150 Reputation", sendgrid("di@outlook.com", "5.7.1",
            "550 5.7.1 Unfortunately, messages from [1.2.3.4] weren't sent. Part of their network is on our block list (S3150)",
            "Reputation"),
            Cause::Reputation, Family::Microsoft, "5.7.1"),
        ("Mailgun Outlook 5.7.515", mailgun("ed@hotmail.com", json!(550),
            "5.7.515 Access denied, sending domain example.com does not meet the required authentication level."),
            Cause::Authentication, Family::Microsoft, "5.7.515"),
        ("Resend Yahoo 5.7.9", resend("fe@yahoo.com", "General",
            "550 5.7.9 This mail has been blocked because the sender is unauthenticated. Yahoo requires all senders to authenticate"),
            Cause::Authentication, Family::Yahoo, "5.7.9"),
        ("Postmark DMARCPolicy", postmark("gu@example.org", "DMARCPolicy",
            "smtp;550 5.7.1 Unauthenticated email is not accepted due to domain's DMARC policy"),
            Cause::Authentication, Family::Other, "5.7.1"),
    ];
    for (name, (what, r), cause, family, code) in cases {
        assert_eq!(what, What::Refused, "{name}: {r:?}");
        assert_eq!(
            (r.cause, r.family, r.code.as_deref()),
            (cause, family, Some(code)),
            "{name}"
        );
        assert!(what.effect().suppress.is_none(), "{name} suppresses");
    }
}

/// The recipient's own refusals still suppress.
#[test]
fn the_recipients_refusals_suppress_through_every_vendor() {
    let cases = [
        (
            "SES Gmail 5.1.1",
            ses(
                "ann@gmail.com",
                "General",
                "5.1.1",
                "smtp; 550-5.1.1 The email account that you tried to reach does not exist.",
            ),
            Cause::NoMailbox,
        ),
        (
            "SES NoEmail",
            ses(
                "ann@example.org",
                "NoEmail",
                "5.0.0",
                "smtp; 550 user unknown",
            ),
            Cause::NoMailbox,
        ),
        (
            "SendGrid Gmail 5.1.1",
            sendgrid(
                "bo@gmail.com",
                "5.1.1",
                "550 5.1.1 The email account that you tried to reach does not exist",
                "Invalid Address",
            ),
            Cause::NoMailbox,
        ),
        (
            "Mailgun Outlook 5.1.10",
            mailgun(
                "cy@outlook.com",
                json!(550),
                "5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
            ),
            Cause::NoMailbox,
        ),
        (
            "Postmark HardBounce",
            postmark(
                "di@example.org",
                "HardBounce",
                "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
            ),
            Cause::NoMailbox,
        ),
        (
            "Resend 5.1.1",
            resend(
                "ed@example.org",
                "General",
                "550 5.1.1 The email account that you tried to reach does not exist.",
            ),
            Cause::NoMailbox,
        ),
    ];
    for (name, (what, r), cause) in cases {
        assert_eq!((what, r.cause), (What::HardBounce, cause), "{name}: {r:?}");
        assert!(what.effect().suppress.is_some(), "{name} does not suppress");
    }
}

/// What the answer does not show is unknown, and a permanent unknown suppresses as before: an
/// `x.7.x` code with no row of its provider is not the sender's by guess.
#[test]
fn an_unshown_cause_is_unknown_and_still_suppresses() {
    for (name, (what, r)) in [
        (
            "5.7.1 at another provider",
            ses(
                "ann@example.org",
                "General",
                "5.7.1",
                "smtp; 550 5.7.1 rejected",
            ),
        ),
        (
            "no code at all",
            ses("bo@example.org", "General", "", "smtp; 550 go away"),
        ),
        (
            "SendGrid Technical",
            sendgrid("cy@example.org", "5.7.0", "550 5.7.0 no", "Technical"),
        ),
    ] {
        assert_eq!(
            (what, r.cause),
            (What::HardBounce, Cause::Unknown),
            "{name}: {r:?}"
        );
    }
}

#[test]
fn a_code_is_found_in_the_servers_words_and_never_a_longer_number() {
    let code = |t: &str| read(None, None, Some(t), Hint::None).code;
    assert_eq!(code("smtp; 550-5.7.26 blocked").as_deref(), Some("5.7.26"));
    assert_eq!(code("550 5.1.10 RESOLVER").as_deref(), Some("5.1.10"));
    assert_eq!(code("421 4.7.0 [TSS04] later").as_deref(), Some("4.7.0"));
    assert_eq!(code("version 15.7.1.2 of the server"), None);
    assert_eq!(code("1.2.3.4 said no"), None);
    assert_eq!(code(""), None);
    // SES's class-only status gives way to the words' code.
    let r = read(None, Some("5.0.0"), Some("550 5.1.1 unknown"), Hint::None);
    assert_eq!(r.code.as_deref(), Some("5.1.1"));
}

#[test]
fn families_are_the_providers_domains_and_never_a_business_subdomain() {
    for (address, family) in [
        ("a@gmail.com", Family::Google),
        ("a@GoogleMail.com.", Family::Google),
        ("a@hotmail.co.uk", Family::Microsoft),
        ("a@live.fr", Family::Microsoft),
        ("a@yahoo.co.jp", Family::Yahoo),
        ("a@aol.com", Family::Yahoo),
        ("a@icloud.com", Family::Apple),
        ("a@live.mycompany.com", Family::Other),
        ("a@gmail.com.evil.org", Family::Other),
        ("no-at", Family::Other),
    ] {
        assert_eq!(Family::of(address), family, "{address}");
    }
}

/// Every row's cause is the one its source names, and the sender's rows are all x.7.x codes or
/// words: no recipient's code is ever read as the sender's.
#[test]
fn every_senders_row_is_a_policy_code_of_its_provider() {
    for (family, code, needle, cause, source) in ROWS {
        if cause.whose() == Whose::Sender {
            assert!(
                family.is_some(),
                "{source}: a sender's row names its provider"
            );
            assert!(code.contains(".7."), "{source}: {code}");
        }
        if family.is_none() {
            assert!(
                needle.is_empty() && cause.whose() == Whose::Recipient,
                "{source}"
            );
        }
    }
}
