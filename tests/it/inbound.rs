//! The mailto of `List-Unsubscribe` honoured (src/events/inbound.rs): the token our header puts
//! in the mailto's `+tag` and subject, posted back through each vendor's inbound route as that
//! vendor secures it, unsubscribes exactly as the one-click POST before the 2xx; a post that
//! does not authenticate stores nothing; a mail without a token is answered 2xx, stores
//! nothing and is counted for `status`; one over the cap is answered so that its vendor stops.
//! SES receiving through SNS is in `events_sns.rs`; the exit 78 of a mailto nothing reads here.

use std::time::Duration;

use campaign_sender::config::{FromEnv, RunConfig};
use campaign_sender::unsubscribe::Signer;
use fake_provider::FakeConfig;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;
use crate::one_click::left;

fn signer() -> Signer {
    Signer::new(ONE_CLICK[1].1).unwrap()
}

/// `inbound_mail` as (vendor, outcome, mails).
async fn tallied(pool: &PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as("SELECT vendor, outcome, mails FROM inbound_mail ORDER BY vendor, outcome")
        .fetch_all(pool)
        .await
        .unwrap()
}

fn postmark_auth(password: &str) -> Vec<(&'static str, String)> {
    let pair = format!("{POSTMARK_USER}:{password}");
    vec![
        ("Authorization", format!("Basic {}", b64(pair.as_bytes()))),
        ("Content-Type", "application/json".into()),
    ]
}

/// Postmark's inbound JSON for a mail to `to` with `subject`.
fn postmark_mail(to: &str, subject: &str) -> String {
    json!({"From": "someone@example.net", "To": to, "OriginalRecipient": to,
           "ToFull": [{"Email": to, "Name": "", "MailboxHash": ""}],
           "Subject": subject, "MessageID": "pm-1", "TextBody": "", "Attachments": []})
    .to_string()
}

/// A Mailgun route's `forward()` fields, signed at `ts` with `token` (`key`: the signing key).
fn mailgun_fields(
    ts: i64,
    token: &str,
    key: &str,
    to: &str,
    subject: &str,
) -> Vec<(String, String)> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(format!("{ts}{token}").as_bytes());
    [
        ("timestamp", ts.to_string()),
        ("token", token.to_string()),
        ("signature", hex::encode(mac.finalize().into_bytes())),
        ("recipient", to.to_string()),
        ("sender", "someone@example.net".into()),
        ("subject", subject.to_string()),
        ("body-plain", "".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn form(fields: &[(String, String)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish()
}

/// `fields` as `multipart/form-data`, with one attachment (a file part) after them.
fn multipart(fields: &[(String, String)]) -> String {
    let mut body = String::new();
    for (k, v) in fields {
        body += &format!("--XyZ\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n");
    }
    body += "--XyZ\r\nContent-Disposition: form-data; name=\"attachment1\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nunsubscribe spring-sale.9.not-a-token\r\n--XyZ--\r\n";
    body
}

const MULTIPART: &str = "multipart/form-data; boundary=XyZ";

/// SendGrid Inbound Parse fields for a mail to `to` with `subject`.
fn sendgrid_fields(to: &str, subject: &str) -> Vec<(String, String)> {
    [
        ("headers", "Subject: x\r\n".to_string()),
        ("to", to.to_string()),
        ("from", "someone@example.net".into()),
        ("subject", subject.to_string()),
        (
            "envelope",
            json!({"to": [to], "from": "someone@example.net"}).to_string(),
        ),
        ("text", "".into()),
        ("SPF", "pass".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn with_type(mut h: Vec<(&'static str, String)>, kind: &str) -> Vec<(&'static str, String)> {
    h.push(("Content-Type", kind.to_string()));
    h
}

/// The run's own `List-Unsubscribe` for member `m`, and its mailto's address and subject as a
/// mail client reads them (RFC 6068: the subject percent-decoded).
fn mailto_of(m: i64) -> (String, String) {
    let cfg = RunConfig::from_vars(
        [
            ("CAMPAIGN_ID", CAMPAIGN),
            ("MAIL_URL", "http://127.0.0.1:9/send"),
            ("UNSUBSCRIBE_BASE_URL", "https://events.example.com"),
            ONE_CLICK[1],
            ("UNSUBSCRIBE_MAILTO", "leave@example.com"),
            ("UNSUBSCRIBE_MAILTO_INBOUND", "postmark"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .unwrap();
    let header = cfg.links().unwrap().unwrap().for_member(CAMPAIGN, m).header;
    let mailto = header
        .split("<mailto:")
        .nth(1)
        .and_then(|r| r.strip_suffix('>'))
        .unwrap_or_else(|| panic!("no mailto in {header}"));
    let (to, query) = mailto.split_once("?subject=").unwrap();
    let subject = percent_encoding::percent_decode_str(query)
        .decode_utf8()
        .unwrap()
        .into_owned();
    (to.to_string(), subject)
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mailto_through_each_vendors_inbound_route_unsubscribes_before_its_2xx(pool: PgPool) {
    seed(&pool, CAMPAIGN, 6).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let url = |v: &str| format!("{base}/inbound/{v}");
    let s = signer();

    // Postmark, the token in the +tag our own header put there (a client that drops the subject).
    let (to, subject) = mailto_of(1);
    assert!(to.starts_with(&format!("leave+{CAMPAIGN}.1.")), "{to}");
    assert_eq!(subject, format!("unsubscribe {}", s.token(CAMPAIGN, 1)));
    let pm = postmark_mail(&to, "");
    assert_eq!(
        post(&url("postmark"), &postmark_auth(POSTMARK_PASSWORD), &pm).await,
        200
    );
    // Mailgun, form-encoded, the token in the subject alone (a provider that dropped the tag).
    let (_, subject) = mailto_of(2);
    let f = mailgun_fields(now_s(), "tok-2", MAILGUN_KEY, "leave@example.com", &subject);
    let urlencoded = with_type(vec![], "application/x-www-form-urlencoded");
    assert_eq!(post(&url("mailgun"), &urlencoded, &form(&f)).await, 200);
    // Mailgun again, multipart with an attachment, as a route posts a mail that has one.
    let (_, subject) = mailto_of(3);
    let f = mailgun_fields(now_s(), "tok-3", MAILGUN_KEY, "leave@example.com", &subject);
    let multi = with_type(vec![], MULTIPART);
    assert_eq!(post(&url("mailgun"), &multi, &multipart(&f)).await, 200);
    // SendGrid's Inbound Parse, signed by its security policy over the raw multipart body.
    let (to, subject) = mailto_of(4);
    let body = multipart(&sendgrid_fields(&to, &format!("Re: {subject}")));
    let ts = now_s().to_string();
    let signed = with_type(sendgrid_signed(&body, &ts), MULTIPART);
    assert_eq!(post(&url("sendgrid"), &signed, &body).await, 200);

    let one_click = Some(("unsubscribe".to_string(), Some("one-click".to_string())));
    for m in 1..=4 {
        assert_eq!(
            left(&pool, m).await,
            (true, one_click.clone(), 1),
            "member {m}"
        );
    }
    assert_eq!(left(&pool, 5).await, (false, None, 0), "nobody else");
    // A repeat (the vendor's retry, a second mail) changes nothing and is 2xx too.
    assert_eq!(
        post(&url("postmark"), &postmark_auth(POSTMARK_PASSWORD), &pm).await,
        200
    );
    assert_eq!(
        left(&pool, 1).await.2,
        1,
        "counted once in the funnel, as a one-click"
    );
    assert_eq!(
        tallied(&pool).await,
        [
            ("mailgun".into(), "unsubscribed".into(), 2),
            ("postmark".into(), "unsubscribed".into(), 2),
            ("sendgrid".into(), "unsubscribed".into(), 1),
        ]
    );
    // A vendor whose route is not configured here: 404.
    assert_eq!(post(&url("ses"), &[], "{}").await, 404);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_inbound_post_that_does_not_authenticate_is_refused_and_stores_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let url = |v: &str| format!("{base}/inbound/{v}");
    let (to, subject) = mailto_of(1);

    let pm = postmark_mail(&to, &subject);
    assert_eq!(
        post(
            &url("postmark"),
            &postmark_auth("wrong-password-0123456"),
            &pm
        )
        .await,
        401
    );
    let no_auth = vec![("Content-Type", "application/json".to_string())];
    assert_eq!(post(&url("postmark"), &no_auth, &pm).await, 401);

    let urlencoded = with_type(vec![], "application/x-www-form-urlencoded");
    let forged = mailgun_fields(
        now_s(),
        "t",
        "key-not-the-signing-key-0123456789",
        &to,
        &subject,
    );
    assert_eq!(
        post(&url("mailgun"), &urlencoded, &form(&forged)).await,
        401
    );
    let stale = mailgun_fields(now_s() - 3600, "t", MAILGUN_KEY, &to, &subject);
    assert_eq!(post(&url("mailgun"), &urlencoded, &form(&stale)).await, 401);
    let mut unsigned = mailgun_fields(now_s(), "t", MAILGUN_KEY, &to, &subject);
    unsigned.retain(|(k, _)| k != "signature");
    assert_eq!(
        post(&url("mailgun"), &urlencoded, &form(&unsigned)).await,
        401
    );

    let body = multipart(&sendgrid_fields(&to, &subject));
    let ts = now_s().to_string();
    let tampered = body.replace("someone@", "another@");
    let signed = with_type(sendgrid_signed(&body, &ts), MULTIPART);
    assert_eq!(post(&url("sendgrid"), &signed, &tampered).await, 401);
    assert_eq!(
        post(&url("sendgrid"), &with_type(vec![], MULTIPART), &body).await,
        401
    );

    assert_eq!(left(&pool, 1).await, (false, None, 0));
    assert!(
        tallied(&pool).await.is_empty(),
        "a refused post was counted"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_inbound_mail_without_a_valid_token_is_answered_2xx_counted_and_shown(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let url = format!("{base}/inbound/postmark");
    let auth = postmark_auth(POSTMARK_PASSWORD);
    // Written by hand; sent before the mailto carried a token; a token forged for member 2.
    let real = signer().token(CAMPAIGN, 1);
    let forged = format!("{CAMPAIGN}.2.{}", real.rsplit('.').next().unwrap());
    for subject in [
        "please take me off your list",
        "unsubscribe",
        &format!("unsubscribe {forged}"),
    ] {
        let mail = postmark_mail("leave@example.com", subject);
        assert_eq!(post(&url, &auth, &mail).await, 200, "{subject}");
    }
    // A genuine token whose row is gone (never imported, or archived before addresses were kept).
    let gone = signer().token(CAMPAIGN, 99);
    let mail = postmark_mail("leave@example.com", &format!("unsubscribe {gone}"));
    assert_eq!(post(&url, &auth, &mail).await, 200);

    for m in 1..=3 {
        assert_eq!(left(&pool, m).await, (false, None, 0), "member {m}");
    }
    assert_eq!(stored(&pool).await, 0, "nothing of the mail is stored");
    assert_eq!(
        tallied(&pool).await,
        [
            ("postmark".into(), "no_token".into(), 3),
            ("postmark".into(), "unmatched".into(), 1),
        ]
    );
    let status = campaign_sender::status::gather(
        &pool,
        CAMPAIGN,
        campaign_sender::status::Defaults::documented(),
    )
    .await
    .unwrap();
    let shown = campaign_sender::status::render(&status);
    let line = shown
        .lines()
        .find(|l| l.starts_with("mailto"))
        .unwrap_or_else(|| panic!("{shown}"));
    assert!(
        line.contains("postmark: no token 3, last ") && line.contains("inbound log"),
        "{line}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_inbound_mail_over_its_cap_is_answered_so_that_its_vendor_stops_posting_it(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 2).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let url = |v: &str| format!("{base}/inbound/{v}");
    let (to, subject) = mailto_of(1);
    let attachment = "x".repeat(INBOUND_MAX + 1);

    let mut pm: serde_json::Value = serde_json::from_str(&postmark_mail(&to, &subject)).unwrap();
    pm["TextBody"] = json!(attachment);
    let pm = pm.to_string();
    // Postmark stops at 403, Mailgun at 406, SendGrid only at a 2xx.
    assert_eq!(
        post(&url("postmark"), &postmark_auth(POSTMARK_PASSWORD), &pm).await,
        403
    );
    let mut f = mailgun_fields(now_s(), "big", MAILGUN_KEY, &to, &subject);
    f.push(("body-html".into(), attachment.clone()));
    let multi = with_type(vec![], MULTIPART);
    assert_eq!(post(&url("mailgun"), &multi, &multipart(&f)).await, 406);
    let mut f = sendgrid_fields(&to, &subject);
    f.push(("html".into(), attachment));
    let body = multipart(&f);
    let signed = with_type(sendgrid_signed(&body, &now_s().to_string()), MULTIPART);
    assert_eq!(post(&url("sendgrid"), &signed, &body).await, 200);

    assert_eq!(
        left(&pool, 1).await,
        (false, None, 0),
        "an unread mail unsubscribes nobody"
    );
    assert!(tallied(&pool).await.is_empty());
}

/// A mailto nothing reads would lose its unsubscribes: `run` exits 78 before any mail without
/// `UNSUBSCRIBE_MAILTO_INBOUND`, or with a vendor whose inbound is not supported, saying why.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mailto_without_an_inbound_route_exits_78_before_any_mail(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let base = p.url.clone();
    for (inbound, var, says) in [
        (None, "UNSUBSCRIBE_MAILTO", "UNSUBSCRIBE_MAILTO_INBOUND"),
        (
            Some("resend"),
            "UNSUBSCRIBE_MAILTO_INBOUND",
            "not supported",
        ),
        (
            Some("smtp"),
            "UNSUBSCRIBE_MAILTO_INBOUND",
            "postmark, mailgun, sendgrid or ses",
        ),
    ] {
        let mut env: Vec<(&str, &str)> = vec![
            ("CAMPAIGN_ID", CAMPAIGN),
            ("MAIL_URL", &base),
            ("UNSUBSCRIBE_BASE_URL", "https://events.example.com"),
            ONE_CLICK[1],
            ("UNSUBSCRIBE_MAILTO", "leave@example.com"),
            ("DB_CONNECT_RETRY_S", "2"),
        ];
        env.extend(inbound.map(|v| ("UNSUBSCRIBE_MAILTO_INBOUND", v)));
        let (code, out, err) =
            finish(spawn_sender(&["run"], &db, &env), Duration::from_secs(60)).await;
        assert_eq!(
            code,
            campaign_sender::exit::Exit::Config as i32,
            "{inbound:?}: {out}\n{err}"
        );
        assert!(
            err.contains(var) && err.contains(says),
            "{inbound:?}: {err}"
        );
    }
    assert_eq!(
        states(&pool).await.get("pending"),
        Some(&3),
        "no row was claimed"
    );
}
