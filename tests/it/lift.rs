//! `suppress --lift-at-vendor` (src/cli/cmd/lift.rs) against the fake's vendor APIs: it takes
//! off each vendor's own list exactly the campaign's addresses that vendor reported refused for
//! our domain's fault — never one on our list, one refused for the recipient's fault, one of
//! another vendor's events or one outside the campaign — records each lift so a rerun asks for
//! none again, until a new refusal of the address; a key the vendor refuses stops it (4).

use std::time::Duration;

use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;
use crate::vendors::base_of;

/// Five members at Gmail: ann, bo and cy refused for our domain's fault by the vendor under
/// test (bo has also unsubscribed), dee refused for her own (no such mailbox), eve refused
/// for ours but reported by another vendor.
async fn seed_refusals(pool: &PgPool, vendor: &str) {
    sqlx::query("DELETE FROM campaign_targets")
        .execute(pool)
        .await
        .unwrap();
    for table in ["provider_events", "sender_refused", "suppressions"] {
        sqlx::query(&format!("DELETE FROM {table}"))
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state)
         SELECT $1, m, e, 'sent'
           FROM unnest(ARRAY[1, 2, 3, 4, 5]::bigint[],
                       ARRAY['Ann@gmail.com', 'bo@gmail.com', 'cy@gmail.com', 'dee@gmail.com',
                             'eve@gmail.com']) AS x(m, e)",
    )
    .bind(CAMPAIGN)
    .execute(pool)
    .await
    .unwrap();
    let other = if vendor == "sendgrid" {
        "ses"
    } else {
        "sendgrid"
    };
    sqlx::query(
        "INSERT INTO provider_events (vendor, event_id, what, campaign_id, member_id, cause, family)
         VALUES ($2, 'e1', 'refused', $1, 1, 'authentication', 'google'),
                ($2, 'e2', 'refused', $1, 2, 'authentication', 'google'),
                ($2, 'e3', 'refused', $1, 3, 'reputation', 'google'),
                ($2, 'e4', 'hard_bounce', $1, 4, 'no_mailbox', 'google'),
                ($3, 'e5', 'refused', $1, 5, 'authentication', 'google')",
    )
    .bind(CAMPAIGN)
    .bind(vendor)
    .bind(other)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO sender_refused (email, family, cause)
         SELECT email_fold(e), 'google', 'authentication'
           FROM unnest(ARRAY['ann@gmail.com', 'bo@gmail.com', 'cy@gmail.com', 'eve@gmail.com']) e",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO suppressions (email, reason, source)
         VALUES ('bo@gmail.com', 'unsubscribe', 'one-click'), ('dee@gmail.com', 'hard_bounce', $1)",
    )
    .bind(vendor)
    .execute(pool)
    .await
    .unwrap();
}

/// The vendor's list: every address it listed after a hard bounce, ours and theirs, and
/// someone outside the campaign. Not cy: that vendor never listed her.
fn vendor_list(p: &TestProvider) {
    let listed = [
        "ann@gmail.com",
        "bo@gmail.com",
        "dee@gmail.com",
        "eve@gmail.com",
        "zed@example.org",
    ];
    p.fake
        .suppress(listed.iter().map(|e| fake_provider::Suppression {
            email: e.to_string(),
            reason: "HardBounce".into(),
        }));
}

fn still_listed(p: &TestProvider) -> Vec<String> {
    p.fake.suppressions().into_iter().map(|s| s.email).collect()
}

async fn lift(pool: &PgPool, env: &[(&str, &str)]) -> (i32, String, String) {
    let args = ["suppress", "--lift-at-vendor", "--campaign", CAMPAIGN];
    let child = spawn_sender(&args, &operator_url(pool).await, env);
    finish(child, Duration::from_secs(60)).await
}

/// The vendor's settings for `vendor` against the fake at `base`, the key `key`.
fn env_of<'a>(vendor: &'a str, base: &'a str, key: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("MAIL_PROVIDER", vendor),
        ("MAIL_URL", base),
        ("MAIL_API_KEY", key),
    ];
    match vendor {
        "mailgun" => env.push(("MAILGUN_DOMAIN", "mg.example.com")),
        "ses" => env.extend([
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ]),
        _ => {}
    }
    env
}

async fn lifted_at(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT email FROM sender_refused WHERE lifted_at IS NOT NULL ORDER BY email",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Each vendor: ann comes off its list; bo (on ours), dee (her own bounce), eve (another
/// vendor's report) and zed (not in the campaign) stay; cy was never listed — "not listed"
/// where the vendor says so (SES, SendGrid, Mailgun), lifted where its answer cannot tell
/// (Postmark), not lifted where a 404 is ambiguous (Resend's private beta: exit 1). A rerun
/// asks for nothing again.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn each_vendor_lifts_exactly_the_campaigns_addresses_refused_for_our_fault(pool: PgPool) {
    let cases = [
        ("sendgrid", "lifted 1, not listed 1, failed 0", 0),
        ("ses", "lifted 1, not listed 1, failed 0", 0),
        ("mailgun", "lifted 1, not listed 1, failed 0", 0),
        ("postmark", "lifted 2, not listed 0, failed 0", 0),
        ("resend", "lifted 1, not listed 0, failed 1", 1),
    ];
    for (vendor, said, code) in cases {
        seed_refusals(&pool, vendor).await;
        let p = provider(FakeConfig {
            api_key: Some("test-key".into()),
            ..Default::default()
        })
        .await;
        vendor_list(&p);
        let base = base_of(&p);
        let env = env_of(vendor, &base, "test-key");
        let (got, out, err) = lift(&pool, &env).await;
        assert_eq!(got, code, "{vendor}: {out}{err}");
        assert!(out.contains(said), "{vendor}: {out}");
        assert!(
            out.contains("1 left listed (on our list too)"),
            "{vendor}: {out}"
        );
        assert!(
            !out.contains('@') && !err.contains('@'),
            "{vendor}: no address printed"
        );
        assert_eq!(
            still_listed(&p),
            [
                "bo@gmail.com",
                "dee@gmail.com",
                "eve@gmail.com",
                "zed@example.org"
            ],
            "{vendor}"
        );
        let again = lift(&pool, &env).await;
        assert_eq!(again.0, code, "{vendor}: {}{}", again.1, again.2);
        let asked_again = if vendor == "resend" {
            "failed 1"
        } else {
            "failed 0"
        };
        assert!(
            again
                .1
                .contains(&format!("lifted 0, not listed 0, {asked_again}")),
            "{vendor}: {}",
            again.1
        );
    }
}

/// A new refusal of a lifted address (the vendor has listed it again) makes it one to lift
/// again: the mark is cleared by the event, through the real events server.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_new_refusal_of_a_lifted_address_is_lifted_again(pool: PgPool) {
    seed_refusals(&pool, "sendgrid").await;
    let p = provider(FakeConfig::default()).await;
    vendor_list(&p);
    let base = base_of(&p);
    let env = env_of("sendgrid", &base, "test-key");
    assert_eq!(lift(&pool, &env).await.0, 0);
    assert_eq!(lifted_at(&pool).await, ["ann@gmail.com", "cy@gmail.com"]);

    let url = format!(
        "{}/events/sendgrid",
        serve_events(pool.clone(), listeners(false)).await
    );
    let body = serde_json::json!([
        {"email": "ann@gmail.com", "event": "bounce", "type": "bounce", "status": "5.7.26",
         "reason": "550-5.7.26 Unauthenticated email from example.com is not accepted",
         "bounce_classification": "Technical", "sg_event_id": "again", "timestamp": now_s(),
         "campaign_id": CAMPAIGN, "member_id": "1"}
    ])
    .to_string();
    assert_eq!(
        post(&url, &sendgrid_signed(&body, &now_s().to_string()), &body).await,
        200
    );
    assert_eq!(
        lifted_at(&pool).await,
        ["cy@gmail.com"],
        "the refusal cleared ann's mark"
    );
    p.fake.suppress([fake_provider::Suppression {
        email: "ann@gmail.com".into(),
        reason: "HardBounce".into(),
    }]);
    let (code, out, _) = lift(&pool, &env).await;
    assert_eq!(code, 0);
    assert!(out.contains("lifted 1, not listed 0"), "{out}");
    assert!(!still_listed(&p).contains(&"ann@gmail.com".to_string()));
}

/// A key the vendor refuses (401) stops the lift at its first address, records nothing and
/// exits 4; `MAIL_PROVIDER=json` has no list to lift (78).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_refused_key_stops_the_lift_and_our_contract_has_none(pool: PgPool) {
    seed_refusals(&pool, "mailgun").await;
    let p = provider(FakeConfig {
        api_key: Some("the-real-key".into()),
        ..Default::default()
    })
    .await;
    vendor_list(&p);
    let base = base_of(&p);
    let (code, out, err) = lift(&pool, &env_of("mailgun", &base, "a-revoked-key")).await;
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("refused the key (401)"), "{err}");
    assert!(out.contains("not asked 2"), "{out}");
    assert!(lifted_at(&pool).await.is_empty());
    assert_eq!(still_listed(&p).len(), 5);

    let (code, _, err) = lift(&pool, &[("MAIL_PROVIDER", "json"), ("MAIL_URL", &p.url)]).await;
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("MAIL_PROVIDER"), "{err}");
}
