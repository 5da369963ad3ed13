//! Each vendor's answer table, case by case: the statuses, error codes and bodies, and the
//! rate-limit headers each vendor sends, read by its profile into an [`Attempt`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::profile::{Answer, Profile};
use super::*;
use crate::outcome::{Attempt, ErrorClass, Refusal};
use crate::secret::Secret;

fn answer_of(
    p: &dyn Profile,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
    now: SystemTime,
) -> Attempt {
    let mut map = HeaderMap::new();
    for (n, v) in headers {
        map.insert(
            HeaderName::from_bytes(n.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    p.read(&Answer {
        status,
        headers: &map,
        body: body.as_bytes(),
        now,
    })
}

fn sent(status: u16, id: &str) -> Attempt {
    Attempt::Sent {
        status,
        message_id: Some(id.into()),
    }
}

fn throttled(status: u16, wait: Option<u64>) -> Attempt {
    Attempt::Retry {
        status: Some(status),
        class: ErrorClass::Throttled,
        retry_after: wait.map(Duration::from_secs),
    }
}

fn refused(status: u16, r: Refusal) -> Attempt {
    Attempt::Refused { status, refusal: r }
}

fn rejected(status: u16) -> Attempt {
    Attempt::Permanent {
        status: Some(status),
        class: ErrorClass::Rejected,
    }
}

fn server(status: u16) -> Attempt {
    Attempt::Retry {
        status: Some(status),
        class: ErrorClass::ServerError,
        retry_after: None,
    }
}

const NOW_S: u64 = 1_800_000_000;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW_S)
}

#[test]
fn sendgrid_answers_are_read_from_its_table() {
    let p = sendgrid::SendGrid {
        subscription_tracking: false,
        api_key: Secret::new("k"),
    };
    let a = |s, h: &[(&str, &str)], b: &str| answer_of(&p, s, h, b, now());
    let reset = (NOW_S + 30).to_string();
    assert_eq!(a(202, &[("x-message-id", "xid-1")], ""), sent(202, "xid-1"));
    assert_eq!(
        a(
            429,
            &[("x-ratelimit-reset", &reset)],
            r#"{"errors":[{"field":null,"message":"too many requests"}]}"#
        ),
        throttled(429, Some(30))
    );
    assert_eq!(
        a(
            401,
            &[],
            r#"{"errors":[{"message":"Maximum credits exceeded"}]}"#
        ),
        Attempt::Quota {
            status: 401,
            frees_in: None
        }
    );
    let revoked = r#"{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked"}]}"#;
    assert_eq!(a(401, &[], revoked), refused(401, Refusal::Account));
    assert_eq!(
        a(
            403,
            &[],
            r#"{"errors":[{"message":"The from address does not match a verified Sender Identity"}]}"#
        ),
        refused(403, Refusal::Account)
    );
    assert_eq!(a(404, &[], ""), refused(404, Refusal::Endpoint));
    assert_eq!(
        a(400, &[], r#"{"errors":[{"message":"bad","field":"x"}]}"#),
        rejected(400)
    );
    assert_eq!(a(503, &[], ""), server(503));
}

#[test]
fn postmark_answers_are_read_from_its_table() {
    let p = postmark::Postmark {
        server_token: Secret::new("k"),
        message_stream: "broadcast".into(),
    };
    let a = |s, b: &str| answer_of(&p, s, &[], b, now());
    let ok = r#"{"To":"x","SubmittedAt":"2026-12-06T00:00:00Z","MessageID":"b7bc2f4a-e38e-4336-af7d-e6c392c2f817","ErrorCode":0,"Message":"OK"}"#;
    assert_eq!(
        a(200, ok),
        sent(200, "b7bc2f4a-e38e-4336-af7d-e6c392c2f817")
    );
    let inactive = r#"{"ErrorCode":406,"Message":"You tried to send to a recipient that has been marked as inactive."}"#;
    assert_eq!(a(422, inactive), Attempt::Suppressed { status: 422 });
    for code in [10, 400, 401, 405, 412, 413] {
        let body = format!(r#"{{"ErrorCode":{code},"Message":"m"}}"#);
        assert_eq!(
            a(422, &body),
            refused(422, Refusal::Account),
            "ErrorCode {code}"
        );
    }
    assert_eq!(
        a(
            422,
            r#"{"ErrorCode":300,"Message":"Invalid email request"}"#
        ),
        rejected(422)
    );
    assert_eq!(
        a(401, r#"{"ErrorCode":10,"Message":"bad token"}"#),
        refused(401, Refusal::Account)
    );
    assert_eq!(
        a(429, r#"{"ErrorCode":429,"Message":"Rate Limit Exceeded"}"#),
        throttled(429, None)
    );
    assert_eq!(
        a(503, r#"{"ErrorCode":100,"Message":"Maintenance"}"#),
        server(503)
    );
}

#[test]
fn mailgun_answers_are_read_from_its_table() {
    let p = mailgun::Mailgun {
        api_key: Secret::new("k"),
        domain: "mg.example.com".into(),
    };
    let a = |s, b: &str| answer_of(&p, s, &[], b, now());
    let ok = r#"{"id":"<20111114174239.25659.5817@samples.mailgun.org>","message":"Queued. Thank you."}"#;
    assert_eq!(
        a(200, ok),
        sent(200, "20111114174239.25659.5817@samples.mailgun.org")
    );
    let in_20s = httpdate::fmt_http_date(now() + Duration::from_secs(20)).replace("GMT", "UTC");
    let body = format!(
        r#"{{"message":"Domain mg.example.com is not allowed to send: request limit exceeded, try again after {in_20s}"}}"#
    );
    assert_eq!(a(429, &body), throttled(429, Some(20)));
    // Exactly the quota's threshold is still a rate's wait.
    let at_threshold = httpdate::fmt_http_date(now() + mailgun::QUOTA_WAIT).replace("GMT", "UTC");
    let body = format!(
        r#"{{"message":"Domain mg.example.com is not allowed to send: request limit exceeded, try again after {at_threshold}"}}"#
    );
    assert_eq!(a(429, &body), throttled(429, Some(600)));
    let in_5h =
        httpdate::fmt_http_date(now() + Duration::from_secs(5 * 3600)).replace("GMT", "UTC");
    let body = format!(
        r#"{{"message":"Domain mg.example.com is not allowed to send: recipient limit exceeded, try again after {in_5h}"}}"#
    );
    assert_eq!(
        a(429, &body),
        Attempt::Quota {
            status: 429,
            frees_in: Some(Duration::from_secs(5 * 3600))
        }
    );
    let sandbox = r#"{"message":"Domain mg.example.com is not allowed to send: Free accounts are for test purposes only."}"#;
    assert_eq!(a(400, sandbox), refused(400, Refusal::Account));
    assert_eq!(a(401, "Forbidden"), refused(401, Refusal::Account));
    assert_eq!(
        a(404, r#"{"message":"Domain not found: mg.example.com"}"#),
        refused(404, Refusal::Endpoint)
    );
    assert_eq!(
        a(400, r#"{"message":"to parameter is not a valid address"}"#),
        rejected(400)
    );
    assert_eq!(a(500, ""), server(500));
}

#[test]
fn resend_answers_are_read_from_its_table() {
    let p = resend::Resend {
        api_key: Secret::new("k"),
    };
    let a = |s, h: &[(&str, &str)], b: &str| answer_of(&p, s, h, b, now());
    let err =
        |code: u16, name: &str| format!(r#"{{"statusCode":{code},"message":"m","name":"{name}"}}"#);
    assert_eq!(
        a(200, &[], r#"{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}"#),
        sent(200, "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794")
    );
    assert_eq!(
        a(
            429,
            &[("retry-after", "2")],
            &err(429, "rate_limit_exceeded")
        ),
        throttled(429, Some(2))
    );
    assert_eq!(
        a(
            429,
            &[("ratelimit-reset", "3")],
            &err(429, "rate_limit_exceeded")
        ),
        throttled(429, Some(3))
    );
    for nonsense in ["-3", "NaN", "soon"] {
        assert_eq!(
            a(
                429,
                &[("ratelimit-reset", nonsense)],
                &err(429, "rate_limit_exceeded")
            ),
            throttled(429, None),
            "{nonsense}"
        );
    }
    for quota in ["daily_quota_exceeded", "monthly_quota_exceeded"] {
        assert_eq!(
            a(429, &[("retry-after", "3600")], &err(429, quota)),
            Attempt::Quota {
                status: 429,
                frees_in: Some(Duration::from_secs(3600))
            },
            "{quota}"
        );
    }
    for (status, name) in [
        (401, "missing_api_key"),
        (403, "invalid_api_key"),
        (403, "validation_error"),
    ] {
        assert_eq!(
            a(status, &[], &err(status, name)),
            refused(status, Refusal::Account),
            "{name}"
        );
    }
    assert_eq!(
        a(409, &[], &err(409, "concurrent_idempotent_requests")),
        server(409)
    );
    assert_eq!(
        a(409, &[], &err(409, "invalid_idempotent_request")),
        rejected(409)
    );
    assert_eq!(a(422, &[], &err(422, "invalid_parameter")), rejected(422));
    assert_eq!(a(500, &[], &err(500, "application_error")), server(500));
}

#[test]
fn ses_answers_are_read_from_its_table() {
    let p = ses::Ses {
        list_management: None,
        region: "us-east-1".into(),
        host: "email.us-east-1.amazonaws.com".into(),
        credentials: std::sync::Arc::new(aws::Source::Static(aws::AwsKeys {
            access_key_id: "AKID".into(),
            secret_access_key: Secret::new("s"),
            session_token: None,
        })),
        configuration_set: None,
    };
    let a = |s, h: &[(&str, &str)], b: &str| answer_of(&p, s, h, b, now());
    let typed = |t: &str| vec![("x-amzn-errortype", t.to_string())];
    let a2 = |s, t: &str, b: &str| {
        let h = typed(t);
        let h: Vec<(&str, &str)> = h.iter().map(|(n, v)| (*n, v.as_str())).collect();
        a(s, &h, b)
    };
    assert_eq!(
        a(200, &[], r#"{"MessageId":"0100-abc"}"#),
        sent(200, "0100-abc")
    );
    assert_eq!(
        a2(
            429,
            "TooManyRequestsException",
            r#"{"message":"Maximum sending rate exceeded."}"#
        ),
        throttled(429, None)
    );
    assert_eq!(
        a2(
            429,
            "TooManyRequestsException:http://internal.amazon.com/coral/",
            r#"{"message":"Daily message quota exceeded."}"#
        ),
        Attempt::Quota {
            status: 429,
            frees_in: None
        }
    );
    for t in [
        "AccountSuspendedException",
        "SendingPausedException",
        "MailFromDomainNotVerifiedException",
    ] {
        assert_eq!(
            a2(400, t, r#"{"message":"m"}"#),
            refused(400, Refusal::Account),
            "{t}"
        );
    }
    // The type may come only in the body, as moto sends it.
    assert_eq!(
        a(
            400,
            &[],
            r#"{"__type":"MessageRejected","Message":"Email address not verified news@example.com"}"#
        ),
        refused(400, Refusal::Account)
    );
    assert_eq!(
        a(
            400,
            &[],
            r#"{"__type":"com.amazonaws#MessageRejected","message":"Message contains a virus"}"#
        ),
        rejected(400)
    );
    assert_eq!(
        a2(403, "SignatureDoesNotMatch", "{}"),
        refused(403, Refusal::Account)
    );
    assert_eq!(
        a2(
            404,
            "NotFoundException",
            r#"{"message":"Template spring does not exist"}"#
        ),
        refused(404, Refusal::Endpoint)
    );
    assert_eq!(a2(400, "BadRequestException", "{}"), rejected(400));
    assert_eq!(a2(500, "InternalServiceErrorException", "{}"), server(500));
}
