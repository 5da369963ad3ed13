//! A worker speaking each real vendor's contract (`MAIL_PROVIDER`), against the fake provider,
//! which serves every vendor's path and answers in that vendor's words (`src/provider/` has
//! the tables): what each answer does to the row, the suppression list and the run.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use campaign_sender::config::{FromEnv, RunConfig};
use serde_json::{json, Value};
use sqlx::PgPool;

use fake_provider::FakeConfig;

use crate::helpers::*;

/// A stand-in for SendGrid that keeps every request body (the fake keeps no bodies).
#[derive(Default)]
struct Recorder {
    bodies: Mutex<Vec<Value>>,
}

async fn record(State(r): State<Arc<Recorder>>, body: String) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let id = format!(
        "sg-{}",
        body["custom_args"]["member_id"].as_str().unwrap_or("")
    );
    r.bodies.lock().unwrap().push(body);
    (StatusCode::ACCEPTED, [("x-message-id", id)]).into_response()
}

/// Starts the recorder on SendGrid's path; returns its base URL.
async fn recorder(r: Arc<Recorder>) -> String {
    let app = Router::new()
        .route("/v3/mail/send", post(record))
        .with_state(r);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

pub(crate) fn vendor_config(provider: &str, base: &str, extra: &[(&str, &str)]) -> RunConfig {
    let mut vars: Vec<(String, String)> = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_PROVIDER", provider),
        ("MAIL_URL", base),
        ("MAIL_API_KEY", "test-key"),
        ("BACKOFF_BASE_MS", "20"),
        ("BACKOFF_MAX_MS", "200"),
        ("CONNECT_TIMEOUT_MS", "1000"),
        ("READ_TIMEOUT_MS", "1000"),
        ("LEASE_S", "30"),
        ("MAIL_RATE_PER_S", "5000"),
        ("IDLE_POLL_MS", "50"),
        ("DEADLINE_S", "60"),
        ("WORKER_ID", "test-worker"),
        ONE_CLICK[0],
        ONE_CLICK[1],
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    RunConfig::from_vars(vars).unwrap()
}

pub(crate) async fn configure_sender(pool: &PgPool) {
    sqlx::query("INSERT INTO campaigns (campaign_id, template, from_address) VALUES ($1, 'spring', 'News <news@example.com>')")
        .bind(CAMPAIGN)
        .execute(pool)
        .await
        .unwrap();
}

/// The vendors with their `MAIL_PROVIDER` and the settings each needs besides the key.
const VENDORS: [(&str, &[(&str, &str)]); 5] = [
    ("sendgrid", &[]),
    ("postmark", &[]),
    ("mailgun", &[("MAILGUN_DOMAIN", "mg.example.com")]),
    ("resend", &[]),
    (
        "ses",
        &[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test-key"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ],
    ),
];

/// The fake's base URL (it serves every vendor's path).
pub(crate) fn base_of(p: &TestProvider) -> String {
    p.url.trim_end_matches("/v1/send").to_string()
}

async fn reset(pool: &PgPool, n: i64) {
    sqlx::query("DELETE FROM campaign_targets")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("DELETE FROM suppressions")
        .execute(pool)
        .await
        .unwrap();
    seed(pool, CAMPAIGN, n).await;
}

/// A fresh campaign of `n` members drained through `vendor` against a fake configured `fake`.
async fn drain_through(
    pool: &PgPool,
    (vendor, extra): (&str, &[(&str, &str)]),
    n: i64,
    fake: FakeConfig,
) -> (TestProvider, campaign_sender::report::RunReport) {
    reset(pool, n).await;
    let p = provider(fake).await;
    let report = run_to_end(pool, vendor_config(vendor, &base_of(&p), extra)).await;
    (p, report)
}

#[sqlx::test]
async fn every_vendor_drains_through_faults_and_its_own_429s_mailing_nobody_twice(pool: PgPool) {
    configure_sender(&pool).await;
    for (vendor, extra) in VENDORS {
        reset(&pool, 300).await;
        let p = provider(FakeConfig {
            faults: true,
            rate_per_s: Some(400.0),
            burst: 5,
            api_key: Some("test-key".into()),
            ..Default::default()
        })
        .await;
        let mut cfg = vendor_config(vendor, &base_of(&p), extra);
        cfg.mail_rate_per_s = 1000; // above the fake's limit: its 429s must be read right
        let report = run_to_end(&pool, cfg).await;
        let s = p.fake.stats();
        assert_eq!(report.exit_code.code(), 0, "{vendor}: {report:?}");
        assert!(
            s.throttled_429 > 0,
            "{vendor}: the fake never throttled: {s:?}"
        );
        assert_eq!(s.unauthorized, 0, "{vendor}: auth refused: {s:?}");
        assert_eq!(s.members_delivered_more_than_once, 0, "{vendor}: {s:?}");
        assert_eq!(s.delivered, 300, "{vendor}: {s:?}");
        // LIST_UNSUBSCRIBE=ours, the default: every mail carried one-click unsubscribe.
        assert_eq!(s.delivered_without_one_click, 0, "{vendor}: {s:?}");
        assert_eq!(states(&pool).await.get("sent"), Some(&300), "{vendor}");
        let ids: i64 = sqlx::query_scalar(
            "SELECT count(DISTINCT provider_message_id) FROM campaign_targets WHERE campaign_id = $1",
        )
        .bind(CAMPAIGN)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(
            ids, 300,
            "{vendor}: every sent row keeps the vendor's message id"
        );
    }
}

#[sqlx::test]
async fn an_unknown_outcome_is_sent_again_only_where_the_vendor_has_a_key(pool: PgPool) {
    configure_sender(&pool).await;
    for (vendor, extra) in VENDORS {
        // Every fresh delivery is answered after the client's timeout.
        let late = FakeConfig {
            late_per_million: 1_000_000,
            late_ms: 1500,
            ..Default::default()
        };
        let (p, report) = drain_through(&pool, (vendor, extra), 20, late).await;
        let s = p.fake.stats();
        assert_eq!(report.exit_code.code(), 0, "{vendor}: {report:?}");
        assert_eq!(
            s.members_delivered_more_than_once, 0,
            "{vendor}: mailed twice: {s:?}"
        );
        let st = states(&pool).await;
        if vendor == "resend" {
            // Sent again under the same key: the vendor answers the repeat at once.
            assert_eq!(st.get("sent"), Some(&20), "{vendor}: {st:?}");
            assert!(s.duplicates_suppressed >= 20, "{vendor}: {s:?}");
        } else {
            assert_eq!(st.get("unconfirmed"), Some(&20), "{vendor}: {st:?}");
            // Since when, for `status` and `resolve --assume-sent`.
            let dated: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM campaign_targets WHERE state = 'unconfirmed' AND unknown_since IS NOT NULL",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(dated, 20, "{vendor}");
            assert_eq!(
                s.requests, 20,
                "{vendor}: an unknown outcome was sent again: {s:?}"
            );
        }
    }
}

#[sqlx::test]
async fn a_listed_address_is_suppressed_at_postmark_and_accepted_by_the_others(pool: PgPool) {
    configure_sender(&pool).await;
    for (vendor, extra) in VENDORS {
        reset(&pool, 10).await;
        let p = provider(FakeConfig::default()).await;
        p.fake.suppress([fake_provider::Suppression {
            email: "member7@example.com".into(),
            reason: "hard_bounce".into(),
        }]);
        let report = run_to_end(&pool, vendor_config(vendor, &base_of(&p), extra)).await;
        assert_eq!(
            (report.exit_code.code(), report.stats.failed),
            (0, 0),
            "{vendor}: {report:?}"
        );
        let listed: Option<String> = sqlx::query_scalar(
            "SELECT reason FROM suppressions WHERE email = 'member7@example.com'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap();
        if vendor == "postmark" {
            // Refused at send (422, ErrorCode 406): suppressed and listed, not failed.
            assert_eq!(state_of(&pool, 7).await.0, "suppressed");
            assert_eq!(listed.as_deref(), Some("inactive"));
        } else {
            // Accepted and dropped by the vendor: only its events can tell (not a failure).
            assert_eq!(state_of(&pool, 7).await.0, "sent", "{vendor}");
            assert_eq!(listed, None, "{vendor}");
        }
    }
}

/// A fresh campaign of `n` members, no state left on any limit key, and a fake that answers
/// every request with `kind` for a minute (a quota's wait: five hours, where the vendor says).
async fn misbehaving(pool: &PgPool, n: i64, kind: fake_provider::ChaosKind) -> TestProvider {
    reset(pool, n).await;
    sqlx::query("DELETE FROM rate_limits")
        .execute(pool)
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    p.fake.set_chaos(fake_provider::ChaosRequest {
        kind,
        seconds: 60.0,
        retry_after_s: 5 * 3600,
        ..Default::default()
    });
    p
}

#[sqlx::test]
async fn a_refused_account_stops_every_vendors_run_without_failing_a_row(pool: PgPool) {
    configure_sender(&pool).await;
    for (vendor, extra) in VENDORS {
        let p = misbehaving(&pool, 50, fake_provider::ChaosKind::Refuse).await;
        let report = run_to_end(&pool, vendor_config(vendor, &base_of(&p), extra)).await;
        assert_eq!(
            (report.reason, report.stats.failed),
            (campaign_sender::report::StopReason::AccountRefused, 0),
            "{vendor}: {report:?}"
        );
        assert_eq!(states(&pool).await.get("failed"), None, "{vendor}");
    }
}

#[sqlx::test]
async fn the_csvs_extra_columns_reach_the_vendor_as_template_data(pool: PgPool) {
    let db = operator_url(&pool).await;
    let import = |name: &str, text: &str| {
        let path = temp_path(name);
        std::fs::write(&path, text).unwrap();
        let child = spawn_sender(
            &["import", "--campaign", CAMPAIGN, path.to_str().unwrap()],
            &db,
            &[],
        );
        async move {
            let r = finish(child, Duration::from_secs(60)).await;
            let _ = std::fs::remove_file(&path);
            r
        }
    };
    // A column name no vendor takes: the file is refused, naming the column, nothing imported.
    let (code, out, err) = import(
        "bad.csv",
        "member_id,email,first name\n1,a1@example.com,Ann\n",
    )
    .await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::DataError as i32,
        "{out}\n{err}"
    );
    assert!(err.contains("column 3's name"), "{err}");
    let (code, out, err) = import(
        "data.csv",
        "member_id,email,first_name,plan\n1,a1@example.com,Ann,gold\n2,a2@example.com,Bo,\n3,a3@example.com,Cy,silver\n",
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        !format!("{out}{err}").contains("Ann"),
        "a data value was printed"
    );
    configure_sender(&pool).await;
    let r = Arc::new(Recorder::default());
    let base = recorder(r.clone()).await;
    let report = run_to_end(&pool, vendor_config("sendgrid", &base, &[])).await;
    assert_eq!(report.stats.sent, 3, "{report:?}");
    let bodies = r.bodies.lock().unwrap();
    // Each row's columns, and our one-click link for the body's visible unsubscribe link.
    let by_member: std::collections::HashMap<&str, Value> = bodies
        .iter()
        .map(|b| {
            let mut data = b["personalizations"][0]["dynamic_template_data"].clone();
            let link = data.as_object_mut().unwrap().remove("unsubscribe_url");
            assert!(
                link.as_ref()
                    .and_then(Value::as_str)
                    .is_some_and(|l| l.contains("/unsubscribe/")),
                "{b}"
            );
            (b["custom_args"]["member_id"].as_str().unwrap(), data)
        })
        .collect();
    assert_eq!(by_member["1"], json!({"first_name": "Ann", "plan": "gold"}));
    assert_eq!(by_member["2"], json!({"first_name": "Bo", "plan": ""}));
    assert_eq!(
        by_member["3"],
        json!({"first_name": "Cy", "plan": "silver"})
    );
    assert!(bodies
        .iter()
        .all(|b| b["custom_args"]["campaign_id"] == CAMPAIGN));
    // LIST_UNSUBSCRIBE=ours: our headers, and SendGrid's own subscription tracking left off.
    assert!(bodies.iter().all(|b| b.get("tracking_settings").is_none()));
}

#[test]
fn a_missing_or_wrong_setting_for_the_chosen_vendor_names_its_variable() {
    let cfg = |vars: &[(&str, &str)]| {
        RunConfig::from_vars(
            [("CAMPAIGN_ID", "c1"), ONE_CLICK[0], ONE_CLICK[1]]
                .iter()
                .chain(vars)
                .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .and_then(|c| c.provider().map(|_| c))
    };
    let var_of = |vars: &[(&str, &str)]| cfg(vars).unwrap_err().var;
    assert_eq!(var_of(&[("MAIL_PROVIDER", "sendgrid")]), "MAIL_API_KEY");
    assert_eq!(
        var_of(&[("MAIL_PROVIDER", "mailgun"), ("MAIL_API_KEY", "k")]),
        "MAILGUN_DOMAIN"
    );
    assert_eq!(var_of(&[("MAIL_PROVIDER", "ses")]), "AWS_REGION");
    assert_eq!(
        var_of(&[("MAIL_PROVIDER", "ses"), ("AWS_REGION", "eu-west-1")]),
        "AWS_ACCESS_KEY_ID"
    );
    assert_eq!(var_of(&[("MAIL_PROVIDER", "smtp")]), "MAIL_PROVIDER");
    assert!(cfg(&[("MAIL_PROVIDER", "smtp")])
        .unwrap_err()
        .problem
        .contains("sendgrid"));
    assert_eq!(var_of(&[]), "MAIL_URL");
    let path = cfg(&[
        ("MAIL_PROVIDER", "resend"),
        ("MAIL_API_KEY", "k"),
        ("MAIL_URL", "https://api.resend.com/emails"),
    ])
    .unwrap_err();
    assert_eq!(path.var, "MAIL_URL");
    assert!(path.problem.contains("base URL"), "{path}");
    let window = cfg(&[
        ("MAIL_PROVIDER", "postmark"),
        ("MAIL_API_KEY", "k"),
        ("IDEMPOTENCY_WINDOW_S", "86400"),
    ])
    .unwrap_err();
    assert_eq!(window.var, "IDEMPOTENCY_WINDOW_S");
    let ok = cfg(&[
        ("MAIL_PROVIDER", "ses"),
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
    ])
    .unwrap();
    assert_eq!(ok.limit_key(), "email.eu-west-1.amazonaws.com");
    assert_eq!(ok.resend_within(), Duration::ZERO);
    assert!(!ok.retry_policy().resend_unknown);

    // One-click unsubscribe: our links' settings, a vendor that manages its own, SES's list.
    let json = [("MAIL_URL", "http://127.0.0.1:1/send")];
    let bare = |extra: &[(&str, &str)]| {
        RunConfig::from_vars(
            [("CAMPAIGN_ID", "c1")]
                .iter()
                .chain(json.iter())
                .chain(extra)
                .map(|(k, v)| (k.to_string(), v.to_string())),
        )
    };
    assert_eq!(bare(&[]).unwrap_err().var, "UNSUBSCRIBE_BASE_URL");
    assert_eq!(bare(&[ONE_CLICK[0]]).unwrap_err().var, "UNSUBSCRIBE_SECRET");
    let plain_http = [
        ("UNSUBSCRIBE_BASE_URL", "http://events.example.com"),
        ONE_CLICK[1],
    ];
    assert_eq!(bare(&plain_http).unwrap_err().var, "UNSUBSCRIBE_BASE_URL");
    assert!(bare(&[("LIST_UNSUBSCRIBE", "none")]).is_ok());
    assert_eq!(
        bare(&[("LIST_UNSUBSCRIBE", "vendor")]).unwrap_err().var,
        "LIST_UNSUBSCRIBE"
    );
    let resend = [
        ("MAIL_PROVIDER", "resend"),
        ("MAIL_API_KEY", "k"),
        ("LIST_UNSUBSCRIBE", "vendor"),
    ];
    assert_eq!(cfg(&resend).unwrap_err().var, "LIST_UNSUBSCRIBE");
    let ses = [
        ("MAIL_PROVIDER", "ses"),
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "s"),
        ("LIST_UNSUBSCRIBE", "vendor"),
    ];
    assert_eq!(cfg(&ses).unwrap_err().var, "SES_CONTACT_LIST");
    let sendgrid = [
        ("MAIL_PROVIDER", "sendgrid"),
        ("MAIL_API_KEY", "k"),
        ("LIST_UNSUBSCRIBE", "vendor"),
    ];
    assert!(cfg(&sendgrid).is_ok());
}

#[sqlx::test]
async fn the_vendors_own_quota_stops_the_fleet_done_for_now_and_status_says_until_when(
    pool: PgPool,
) {
    configure_sender(&pool).await;
    for (vendor, extra) in VENDORS {
        if vendor == "postmark" {
            continue; // Postmark has no sending quota of its own
        }
        let p = misbehaving(&pool, 50, fake_provider::ChaosKind::Quota).await;
        let cfg = vendor_config(vendor, &base_of(&p), extra);
        let key = cfg.limit_key();
        let report = run_to_end(&pool, cfg.clone()).await;
        assert_eq!(
            (report.reason, report.exit_code.code(), report.stats.failed),
            (campaign_sender::report::StopReason::QuotaExhausted, 0, 0),
            "{vendor}: {report:?}"
        );
        let requests = p.fake.stats().requests;
        assert!(
            requests <= 100,
            "{vendor}: a retry storm: {requests} requests"
        );
        assert_eq!(
            states(&pool).await.get("pending"),
            Some(&50),
            "{vendor}: rows released"
        );
        let k = campaign_sender::store::account::key_state(&pool, &key)
            .await
            .unwrap()
            .unwrap();
        let until = k
            .vendor_quota_until
            .expect("the key records the vendor's quota");
        let left = (until - chrono::Utc::now()).num_seconds();
        let expected = match vendor {
            "mailgun" | "resend" => 5 * 3600,
            _ => 3600, // SES and SendGrid do not say: one probe an hour
        };
        assert!(
            (expected - 120..=expected + 5).contains(&left),
            "{vendor}: frees in {left} s"
        );
        // The next run does not even ask.
        let again = run_to_end(&pool, cfg).await;
        assert_eq!(
            again.reason,
            campaign_sender::report::StopReason::QuotaExhausted
        );
        assert_eq!(
            p.fake.stats().requests,
            requests,
            "{vendor}: the next run sent anyway"
        );
    }
}

/// Which quota stopped a pod is said in its log: the vendor's own (see `status`) or
/// `MAIL_DAILY_QUOTA`, whether the pod meets it while sending or at its start.
#[sqlx::test]
async fn a_pod_stopped_by_a_quota_says_which_quota_it_was(pool: PgPool) {
    configure_sender(&pool).await;
    let db = worker_url(&pool).await;
    let p = misbehaving(&pool, 20, fake_provider::ChaosKind::Quota).await;
    let base = base_of(&p);
    let env = vec![
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_PROVIDER", "resend"),
        ("MAIL_API_KEY", "k"),
        ("MAIL_URL", base.as_str()),
        ("DB_CONNECT_RETRY_S", "2"),
    ];
    let vendor = "the provider's own sending quota is used up";
    for (when, words) in [("while sending", "stopping"), ("at start", "nothing sent")] {
        let (code, out, err) =
            finish(spawn_sender(&["run"], &db, &env), Duration::from_secs(60)).await;
        assert_eq!(code, 0, "{when}: {out}\n{err}");
        assert!(
            err.contains(vendor) && err.contains(words) && !err.contains("MAIL_DAILY_QUOTA"),
            "{when}: {err}"
        );
    }
    let p = misbehaving(&pool, 20, fake_provider::ChaosKind::Quota).await;
    p.fake.set_chaos(fake_provider::ChaosRequest::default());
    let base = base_of(&p);
    let mut daily = env.clone();
    daily[3] = ("MAIL_URL", base.as_str());
    daily.push(("MAIL_DAILY_QUOTA", "5"));
    for (when, words) in [("while sending", "stopping"), ("at start", "nothing sent")] {
        let (code, out, err) =
            finish(spawn_sender(&["run"], &db, &daily), Duration::from_secs(60)).await;
        assert_eq!(code, 0, "{when}: {out}\n{err}");
        assert!(
            err.contains("the daily quota (MAIL_DAILY_QUOTA) is used up")
                && err.contains(words)
                && !err.contains(vendor),
            "{when}: {err}"
        );
    }
    assert_eq!(p.fake.stats().requests, 5, "the daily quota");
}

#[sqlx::test]
async fn a_vendor_run_without_a_sender_or_with_an_id_its_tags_refuse_exits_78_sending_nothing(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 5).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let base = base_of(&p);
    let env = |campaign: &'static str, vendor: &'static str| {
        vec![
            ("CAMPAIGN_ID", campaign),
            ("MAIL_PROVIDER", vendor),
            ("MAIL_API_KEY", "k"),
            ("DB_CONNECT_RETRY_S", "2"),
        ]
    };
    let mut no_sender = env(CAMPAIGN, "sendgrid");
    no_sender.push(("MAIL_URL", &base));
    let (code, out, err) = finish(
        spawn_sender(&["run"], &db, &no_sender),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::Config as i32,
        "{out}\n{err}"
    );
    assert!(
        err.contains("configure --campaign spring-sale --from"),
        "{err}"
    );
    let mut bad_id = env("spring sale", "resend");
    bad_id.push(("MAIL_URL", &base));
    let (code, out, err) = finish(
        spawn_sender(&["run"], &db, &bad_id),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        code,
        campaign_sender::exit::Exit::Config as i32,
        "{out}\n{err}"
    );
    assert!(
        err.contains("CAMPAIGN_ID") && err.contains("A-Z a-z 0-9 _ -"),
        "{err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
}

/// A stand-in for STS: answers `AssumeRoleWithWebIdentity` for the one token it expects with a
/// new key each time, valid `valid_s` seconds; counts the calls.
#[derive(Default)]
struct Sts {
    calls: std::sync::atomic::AtomicU32,
    valid_s: i64,
}

async fn assume(State(sts): State<Arc<Sts>>, body: String) -> Response {
    let form: std::collections::HashMap<String, String> =
        reqwest::Url::parse(&format!("http://x/?{body}"))
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
    if form.get("Action").map(String::as_str) != Some("AssumeRoleWithWebIdentity")
        || form.get("WebIdentityToken").map(String::as_str) != Some("the-projected-token")
        || form.get("RoleArn").map(String::as_str)
            != Some("arn:aws:iam::123456789012:role/ses-sender")
    {
        return (
            StatusCode::FORBIDDEN,
            "<ErrorResponse><Error><Code>AccessDenied</Code><Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>",
        )
            .into_response();
    }
    let n = sts.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let expires = (chrono::Utc::now() + chrono::Duration::seconds(sts.valid_s)).to_rfc3339();
    format!(
        "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
         <AccessKeyId>ASIAFAKE{n}</AccessKeyId><SecretAccessKey>secret-{n}</SecretAccessKey>\
         <SessionToken>token-{n}</SessionToken><Expiration>{expires}</Expiration>\
         </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
    )
    .into_response()
}

async fn sts(valid_s: i64) -> (Arc<Sts>, String) {
    let s = Arc::new(Sts {
        valid_s,
        ..Default::default()
    });
    let app = Router::new().route("/", post(assume)).with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (s, format!("http://{addr}/"))
}

#[sqlx::test]
async fn ses_by_web_identity_assumes_the_role_and_refreshes_the_keys_before_they_expire(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 200).await;
    configure_sender(&pool).await;
    let token = temp_path("web-identity-token");
    std::fs::write(&token, "the-projected-token\n").unwrap();
    // Keys valid 301 s: inside the five minutes before expiry one second later, so the run
    // must fetch new ones while it sends.
    let (s, sts_url) = sts(301).await;
    let p = provider(FakeConfig::default()).await;
    let mut cfg = vendor_config(
        "ses",
        &base_of(&p),
        &[
            ("AWS_REGION", "us-east-1"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ses-sender"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
            ("AWS_ENDPOINT_URL_STS", &sts_url),
        ],
    );
    cfg.mail_rate_per_s = 100; // two seconds of sending
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(
        (report.exit_code.code(), report.stats.sent),
        (0, 200),
        "{report:?}"
    );
    let calls = s.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        calls >= 2,
        "the keys were never refreshed: {calls} STS call(s)"
    );
    assert!(calls < 20, "one fetch at a time, not one per send: {calls}");

    // A role the token may not assume: the run stops at its start, exit 78, nothing sent.
    std::fs::write(&token, "another-token").unwrap();
    let db = worker_url(&pool).await;
    sqlx::query("UPDATE campaign_targets SET state = 'pending', sent_at = NULL")
        .execute(&pool)
        .await
        .unwrap();
    let before = p.fake.stats().requests;
    let env = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_PROVIDER", "ses"),
        ("MAIL_URL", &base_of(&p)),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/ses-sender"),
        ("AWS_WEB_IDENTITY_TOKEN_FILE", token.to_str().unwrap()),
        ("AWS_ENDPOINT_URL_STS", &sts_url),
    ];
    let (code, out, err) = finish(spawn_sender(&["run"], &db, &env), Duration::from_secs(60)).await;
    let _ = std::fs::remove_file(&token);
    assert_eq!(
        code,
        campaign_sender::exit::Exit::Config as i32,
        "{out}\n{err}"
    );
    assert!(err.contains("AccessDenied"), "{err}");
    assert!(
        !err.contains("another-token"),
        "the token was printed: {err}"
    );
    assert_eq!(p.fake.stats().requests, before);
}

/// Postmark's refusal of an inactive recipient with a long message (a few kB, as an answer
/// listing several addresses may be): read whole, not cut to a fragment that is no JSON.
async fn long_inactive() -> Response {
    let message = format!(
        "You tried to send to recipient(s) that have been marked as inactive. {}",
        "Found inactive addresses: x. ".repeat(100)
    );
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        axum::Json(json!({"ErrorCode": 406, "Message": message})),
    )
        .into_response()
}

#[sqlx::test]
async fn an_answer_of_a_few_kilobytes_is_read_whole(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    configure_sender(&pool).await;
    let app = Router::new().route("/email/withTemplate", post(long_inactive));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let report = run_to_end(
        &pool,
        vendor_config("postmark", &format!("http://{addr}"), &[]),
    )
    .await;
    assert_eq!(report.stats.failed, 0, "{report:?}");
    assert_eq!(state_of(&pool, 1).await.0, "suppressed");
}

/// A header SES would refuse is refused at start: with the longest ids (a 128-character
/// campaign id, a 20-character member id) an 880-character `UNSUBSCRIBE_BASE_URL` makes a
/// `List-Unsubscribe` over SES's 870, so `run` exits 78 naming it before any mail; a mailto
/// a header cannot carry as it is is refused too.
#[sqlx::test]
async fn a_list_unsubscribe_over_the_vendors_limit_exits_78_before_any_mail(pool: PgPool) {
    seed(&pool, CAMPAIGN, 5).await;
    configure_sender(&pool).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let base = base_of(&p);
    let long_url = format!("https://events.example.com/{}", "p".repeat(880 - 27));
    assert_eq!(long_url.len(), 880);
    let env = |vendor: &'static str, url: &'static str| {
        let mut e: Vec<(&str, String)> = vec![
            ("CAMPAIGN_ID", CAMPAIGN.into()),
            ("MAIL_PROVIDER", vendor.into()),
            ("MAIL_URL", base.clone()),
            ("MAIL_API_KEY", "k".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE".into()),
            ("AWS_SECRET_ACCESS_KEY", "s".into()),
            ("UNSUBSCRIBE_BASE_URL", long_url.clone()),
            (ONE_CLICK[1].0, ONE_CLICK[1].1.into()),
            ("DB_CONNECT_RETRY_S", "2".into()),
        ];
        if !url.is_empty() {
            e.push(("UNSUBSCRIBE_BASE_URL", url.into()));
            e.push(("UNSUBSCRIBE_MAILTO", "ünsub@exämple.de".into()));
            e.push(("UNSUBSCRIBE_MAILTO_INBOUND", "postmark".into()));
        }
        e
    };
    for (vendor, url, var) in [
        ("ses", "", "UNSUBSCRIBE_BASE_URL"),
        (
            "sendgrid",
            "https://events.example.com",
            "UNSUBSCRIBE_MAILTO",
        ),
    ] {
        let e = env(vendor, url);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (code, out, err) =
            finish(spawn_sender(&["run"], &db, &e), Duration::from_secs(60)).await;
        assert_eq!(
            code,
            campaign_sender::exit::Exit::Config as i32,
            "{vendor}: {out}\n{err}"
        );
        assert!(err.contains(var), "{vendor}: {err}");
        assert!(!err.contains("ünsub"), "{err}");
    }
    assert_eq!(p.fake.stats().requests, 0, "no mail left");
}
