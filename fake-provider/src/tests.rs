//! The fake provider's own tests: the GCRA limit, the accepted-request record, chaos, key
//! retention, late answers, the suppression list and the vendors' contracts.

use super::*;

#[test]
fn gcra_admits_rate_plus_burst_in_any_second() {
    let p = FakeProvider::new(FakeConfig {
        rate_per_s: Some(100.0),
        burst: 10,
        ..Default::default()
    });
    let mut inner = p.inner.lock().unwrap();
    let start = Instant::now();
    let mut admitted = 0;
    // 1000 arrivals spread evenly over one second (1 ms apart): 100/s + a burst of 10.
    for i in 0..1000u64 {
        if matches!(
            p.admit(&mut inner, start + Duration::from_millis(i)),
            Verdict::Accepted
        ) {
            admitted += 1;
        }
    }
    assert!((100..=111).contains(&admitted), "admitted {admitted}");
}

#[test]
fn only_accepted_requests_are_timed_as_accepted() {
    let p = FakeProvider::new(FakeConfig {
        rate_per_s: Some(100.0),
        burst: 0,
        ..Default::default()
    });
    let start = Instant::now();
    // Three at once: the first is accepted, the next two are throttled.
    let verdicts: Vec<bool> = (0..3)
        .map(|_| matches!(p.admit_counted(start, 0, "w".into()), Verdict::Accepted))
        .collect();
    assert_eq!(verdicts, [true, false, false]);
    assert_eq!(p.accepted_ms().len(), 1);
}

fn json_body(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

fn send_headers(key: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("idempotency-key", key.parse().unwrap());
    h
}

#[tokio::test]
async fn a_chaos_storm_answers_429_with_retry_after_apart_from_the_limit_and_then_ends() {
    let p = FakeProvider::new(FakeConfig::default());
    let body = br#"{"to":"a@example.com","member_id":1,"template":"t"}"#;
    p.set_chaos(ChaosRequest {
        kind: ChaosKind::Storm429,
        seconds: 0.3,
        retry_after_s: 7,
        ..Default::default()
    });
    let r = p
        .handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "7");
    p.set_chaos(ChaosRequest {
        kind: ChaosKind::Burst5xx,
        seconds: 0.3,
        retry_after_s: 1,
        ..Default::default()
    });
    assert!(p
        .handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await
        .status()
        .is_server_error());
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        p.handle(Contract::Json, send_headers("t:1"), json_body(body))
            .await
            .status(),
        StatusCode::OK
    );
    let s = p.stats();
    assert_eq!(
        (s.chaos_429, s.chaos_5xx, s.throttled_429, s.delivered),
        (1, 1, 0, 1)
    );
    assert_eq!(s.max_offered_in_1s, 3);
}

#[tokio::test]
async fn a_key_is_suppressed_within_its_retention_and_delivered_again_after_it() {
    let p = FakeProvider::new(FakeConfig {
        idempotency_window: Duration::from_millis(300),
        ..Default::default()
    });
    let body = br#"{"to":"a@example.com","member_id":1,"template":"t"}"#;
    for _ in 0..2 {
        let r = p
            .handle(Contract::Json, send_headers("t:1"), json_body(body))
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    assert_eq!(
        (p.stats().delivered, p.stats().duplicates_suppressed),
        (1, 1)
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    p.handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await;
    let s = p.stats();
    assert_eq!((s.delivered, s.members_delivered_more_than_once), (2, 1));
}

#[tokio::test]
async fn a_late_answer_is_held_only_for_a_fresh_delivery() {
    let p = FakeProvider::new(FakeConfig {
        late_per_million: 1_000_000,
        late_ms: 400,
        ..Default::default()
    });
    let body = br#"{"to":"a@example.com","member_id":1,"template":"t"}"#;
    let t0 = Instant::now();
    p.handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await;
    assert!(
        t0.elapsed() >= Duration::from_millis(400),
        "the first answer is late"
    );
    let t1 = Instant::now();
    p.handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await;
    assert!(
        t1.elapsed() < Duration::from_millis(400),
        "a suppressed repeat is not"
    );
    let s = p.stats();
    assert_eq!((s.delivered, s.answered_late), (1, 1));
}

#[tokio::test]
async fn a_suppressed_address_is_refused_in_any_case_and_never_delivered() {
    let p = FakeProvider::new(FakeConfig::default());
    p.suppress([Suppression {
        email: "A@Example.com".into(),
        reason: "hard_bounce".into(),
    }]);
    let body = br#"{"to":"a@EXAMPLE.com","member_id":1,"template":"t"}"#;
    let r = p
        .handle(Contract::Json, send_headers("t:1"), json_body(body))
        .await;
    assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
    let s = p.stats();
    assert_eq!((s.delivered, s.suppressed_requests), (0, 1));
    assert_eq!(
        p.suppressions(),
        [Suppression {
            email: "a@example.com".into(),
            reason: "hard_bounce".into()
        }]
    );
}

#[tokio::test]
async fn a_vendor_without_keys_delivers_a_repeat_and_postmark_refuses_a_listed_address() {
    let p = FakeProvider::new(FakeConfig::default());
    let body = serde_json::json!({
        "From": "news@example.com", "To": "a@example.com", "TemplateAlias": "t",
        "Metadata": {"campaign_id": "c1", "member_id": "1"}, "MessageStream": "broadcast"
    });
    for _ in 0..2 {
        let r = p
            .handle(Contract::Postmark, HeaderMap::new(), body.clone())
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let s = p.stats();
    assert_eq!(
        (
            s.delivered,
            s.duplicates_suppressed,
            s.members_delivered_more_than_once
        ),
        (2, 0, 1),
        "Postmark has no idempotency key: a repeat is a second mail"
    );
    p.suppress([Suppression {
        email: "b@example.com".into(),
        reason: "hard_bounce".into(),
    }]);
    let mut listed = body.clone();
    listed["To"] = "b@example.com".into();
    let r = p.handle(Contract::Postmark, HeaderMap::new(), listed).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let mut sg = serde_json::json!({
        "from": {"email": "news@example.com"},
        "personalizations": [{"to": [{"email": "b@example.com"}]}],
        "custom_args": {"campaign_id": "c1", "member_id": "2"}, "template_id": "d-1"
    });
    let r = p
        .handle(Contract::Sendgrid, HeaderMap::new(), sg.clone())
        .await;
    assert_eq!(
        r.status(),
        StatusCode::ACCEPTED,
        "SendGrid accepts a listed address and drops it"
    );
    assert_eq!(p.stats().suppressed_requests, 2);
    sg["personalizations"][0]["to"][0]["email"] = "c@example.com".into();
    let r = p.handle(Contract::Sendgrid, HeaderMap::new(), sg).await;
    assert!(r.headers().contains_key("x-message-id"));
}

#[tokio::test]
async fn each_vendor_checks_its_own_auth() {
    let p = FakeProvider::new(FakeConfig {
        api_key: Some("k".into()),
        ..Default::default()
    });
    let h = |pairs: &[(&'static str, &str)]| {
        let mut m = HeaderMap::new();
        for (n, v) in pairs {
            m.insert(*n, v.parse().unwrap());
        }
        m
    };
    let resend = serde_json::json!({"from": "n@example.com", "to": "a@example.com",
        "tags": [{"name": "campaign_id", "value": "c1"}, {"name": "member_id", "value": "1"}],
        "template": {"id": "t"}});
    let wrong = p
        .handle(
            Contract::Resend,
            h(&[("authorization", "Bearer x")]),
            resend.clone(),
        )
        .await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let right = p
        .handle(
            Contract::Resend,
            h(&[("authorization", "Bearer k"), ("idempotency-key", "c1:1")]),
            resend,
        )
        .await;
    assert_eq!(right.status(), StatusCode::OK);
    let pm = serde_json::json!({"To": "a@example.com", "TemplateAlias": "t",
        "Metadata": {"campaign_id": "c1", "member_id": "2"}});
    let r = p
        .handle(
            Contract::Postmark,
            h(&[("x-postmark-server-token", "k")]),
            pm,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let mg = serde_json::json!({"to": "a@example.com", "template": "t", "v:campaign_id": "c1", "v:member_id": "3"});
    let r = p
        .handle(
            Contract::Mailgun,
            h(&[("authorization", "Basic YXBpOms=")]),
            mg,
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(p.stats().unauthorized, 1);
}
