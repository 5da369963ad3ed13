//! Each profile's request held against what the vendor's own SDK sent for the same mail
//! (`tests/fixtures/providers/*.jsonl`, recorded by `scripts/capture/run-all.sh`), in meaning:
//! path, auth, content type, every field; the kinds, the tags' charset, SES's credentials.
//! The answer tables are `answer_tests.rs`'s.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::profile::{Body, Mail, Outgoing, Profile};
use super::*;
use crate::secret::Secret;

/// The one mail every capture sent: to Ann.Lee@example.com from news@example.com, template
/// `spring` (SendGrid `d-spring`), data `{"first_name":"Ann"}`, campaign `c1`, member 42.
fn mail<'a>(template: &'a str, data: &'a serde_json::Map<String, Value>) -> Mail<'a> {
    Mail {
        campaign_id: "c1",
        member_id: 42,
        to: "Ann.Lee@example.com",
        from: Some("news@example.com"),
        reply_to: None,
        template,
        data: Some(data),
        unsubscribe: None,
        feedback_id: None,
    }
}

fn data() -> serde_json::Map<String, Value> {
    json!({"first_name": "Ann"}).as_object().unwrap().clone()
}

/// The request the SDK sent, from its capture.
struct Captured {
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Captured {
    fn load(vendor: &str) -> Self {
        let path = format!(
            "{}/tests/fixtures/providers/{vendor}.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let rec: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        Self {
            path: rec["path"].as_str().unwrap().to_string(),
            headers: rec["headers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| {
                    (
                        h[0].as_str().unwrap().to_ascii_lowercase(),
                        h[1].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            body: rec["body"].as_str().unwrap().to_string(),
        }
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }

    /// The multipart parts (name, value), in order.
    fn parts(&self) -> Vec<(String, String)> {
        parts(self.header("content-type").unwrap(), self.body.as_bytes())
    }
}

/// The parts (name, value) of a `multipart/form-data` body with text parts, in order.
fn parts(content_type: &str, body: &[u8]) -> Vec<(String, String)> {
    let boundary = content_type.split("boundary=").nth(1).unwrap();
    let body = std::str::from_utf8(body).unwrap();
    let end = body
        .rfind(&format!("--{boundary}--"))
        .expect("a closing delimiter");
    body[..end]
        .split(&format!("--{boundary}\r\n"))
        .filter_map(|part| {
            let name = part.split("name=\"").nth(1)?.split('"').next()?;
            let (_, value) = part.split_once("\r\n\r\n")?;
            Some((name.to_string(), value.strip_suffix("\r\n")?.to_string()))
        })
        .collect()
}

fn ours(p: &dyn Profile, template: &str) -> Outgoing {
    let d = data();
    p.request(&mail(template, &d), SystemTime::now()).unwrap()
}

fn json_of(out: &Outgoing) -> Value {
    match &out.body {
        Body::Json(b) => serde_json::from_slice(b).unwrap(),
        Body::Form(_) | Body::Empty => panic!("not JSON"),
    }
}

#[test]
fn sendgrid_asks_as_its_sdk_does() {
    let sdk = Captured::load("sendgrid");
    let p = sendgrid::SendGrid {
        subscription_tracking: false,
        api_key: Secret::new("SG.test-key"),
    };
    let out = ours(&p, "d-spring");
    assert_eq!(out.path, sdk.path);
    assert_eq!(
        out.header_value("Authorization"),
        sdk.header("authorization")
    );
    assert_eq!(json_of(&out), sdk.json());
    assert!(!Kind::Sendgrid.idempotent() && p.needs_sender());
    assert_eq!(out.header_value("Idempotency-Key"), None);
}

#[test]
fn postmark_asks_as_its_sdk_does() {
    let sdk = Captured::load("postmark");
    let p = postmark::Postmark {
        server_token: Secret::new("server-token"),
        message_stream: "broadcast".into(),
    };
    let out = ours(&p, "spring");
    assert_eq!(out.path, sdk.path);
    assert_eq!(
        out.header_value("X-Postmark-Server-Token"),
        sdk.header("x-postmark-server-token")
    );
    assert_eq!(json_of(&out), sdk.json());
    let by_id = json_of(&ours(&p, "1234567"));
    assert_eq!(
        (by_id["TemplateId"].clone(), by_id.get("TemplateAlias")),
        (json!(1234567), None)
    );
}

#[test]
fn resend_asks_as_its_sdk_does_with_the_idempotency_key() {
    let sdk = Captured::load("resend");
    let p = resend::Resend {
        api_key: Secret::new("re_test_key"),
    };
    let out = ours(&p, "spring");
    assert_eq!(out.path, sdk.path);
    assert_eq!(
        out.header_value("Authorization"),
        sdk.header("authorization")
    );
    assert_eq!(
        out.header_value("Idempotency-Key"),
        sdk.header("idempotency-key")
    );
    assert_eq!(sdk.header("idempotency-key"), Some("c1:42"));
    assert_eq!(json_of(&out), sdk.json());
    assert!(Kind::Resend.idempotent());
}

#[test]
fn mailgun_asks_as_its_sdk_does() {
    let sdk = Captured::load("mailgun");
    let p = mailgun::Mailgun {
        api_key: Secret::new("key-test"),
        domain: "mg.example.com".into(),
    };
    let out = ours(&p, "spring");
    assert_eq!(out.path, sdk.path);
    assert_eq!(out.basic, Some(("api".into(), "key-test".into())));
    assert_eq!(sdk.header("authorization"), Some("Basic YXBpOmtleS10ZXN0"));
    assert!(sdk
        .header("content-type")
        .unwrap()
        .starts_with("multipart/form-data"));
    let (content_type, bytes) = out.body.encode();
    let content_type = content_type.expect("a form has a content type");
    assert!(content_type.starts_with("multipart/form-data; boundary="));
    let mut ours = parts(&content_type, &bytes);
    let mut theirs = sdk.parts();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
}

#[test]
fn a_form_value_reaches_the_vendor_whole_whatever_it_holds() {
    let hostile = "a\r\n--x\r\nContent-Disposition: form-data; name=\"to\"\r\n\r\nb \"c\" ü";
    let fields = vec![("t:variables", hostile.to_string()), ("to", String::new())];
    let (content_type, bytes) = Body::Form(fields.clone()).encode();
    let content_type = content_type.expect("a form has a content type");
    let boundary = content_type.split("boundary=").nth(1).unwrap();
    assert!(!hostile.contains(boundary));
    let expected: Vec<(String, String)> = fields
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    assert_eq!(parts(&content_type, &bytes), expected);
    let (again, _) = Body::Form(fields).encode();
    assert_ne!(again, Some(content_type), "a new boundary per body");
}

#[test]
fn ses_asks_as_its_sdk_does_and_its_signature_holds_for_an_independent_checker() {
    let sdk = Captured::load("ses");
    let p = ses::Ses {
        configuration_set: Some("campaign-events".into()),
        ..super::one_click_tests::ses(None)
    };
    let out = ours(&p, "spring");
    assert_eq!(out.path, sdk.path);
    let Body::Json(bytes) = &out.body else {
        panic!("SES takes JSON")
    };
    let body: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(body, sdk.json());
    let auth = out.header_value("authorization").unwrap();
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            && auth.contains("/us-east-1/ses/aws4_request"),
        "{auth}"
    );
    assert_eq!(
        sigv4_checker(&out, bytes),
        "MATCHES",
        "scripts/capture/verify_sigv4.py recomputed another signature"
    );
    // A changed body no longer matches what was signed.
    let mut tampered = bytes.clone();
    tampered[10] ^= 1;
    assert_eq!(sigv4_checker(&out, &tampered), "DIFFERS");
}

/// Runs the stdlib-only SigV4 checker (not `aws-sigv4`) over the request as sent.
pub(super) fn sigv4_checker(out: &Outgoing, body: &[u8]) -> String {
    let mut headers: Vec<(String, String)> = out
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    if out.body != Body::Empty {
        headers.push(("content-type".into(), "application/json".into()));
    }
    let rec = json!({
        "method": out.method.as_str(),
        "url": format!("http://127.0.0.1:8025{}", out.path),
        "headers": headers,
        "body": String::from_utf8_lossy(body),
    });
    let file = std::env::temp_dir().join(format!(
        "cs-sigv4-{}-{}.jsonl",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&file, format!("{rec}\n")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/capture/verify_sigv4.py"
    );
    let run = std::process::Command::new("python3")
        .args([script, file.to_str().unwrap(), "secret"])
        .output()
        .expect("python3 runs the independent SigV4 checker");
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&run.stdout).to_string();
    text.split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_json_contract_is_unchanged_and_carries_the_data() {
    let p = json::Json {
        api_key: Some(Secret::new("k")),
        refusals: crate::outcome::Refusals::default(),
    };
    let out = ours(&p, "spring");
    assert_eq!(out.path, "");
    assert!(Kind::Json.idempotent() && !p.needs_sender());
    assert_eq!(out.header_value("Idempotency-Key"), Some("c1:42"));
    assert_eq!(out.header_value("Authorization"), Some("Bearer k"));
    assert_eq!(
        json_of(&out),
        json!({"to": "Ann.Lee@example.com", "member_id": 42, "template": "spring", "data": {"first_name": "Ann"}})
    );
}

#[test]
fn a_sender_with_a_name_and_a_reply_to_travel_in_each_vendors_fields() {
    let d = data();
    let m = Mail {
        from: Some("News Team <news@example.com>"),
        reply_to: Some("help@example.com"),
        ..mail("spring", &d)
    };
    let now = SystemTime::now();
    let sg = sendgrid::SendGrid {
        subscription_tracking: false,
        api_key: Secret::new("k"),
    };
    let b = json_of(&sg.request(&m, now).unwrap());
    assert_eq!(
        b["from"],
        json!({"email": "news@example.com", "name": "News Team"})
    );
    assert_eq!(b["reply_to"], json!({"email": "help@example.com"}));
    // A display name with quotes, stored as `configure` writes it: SendGrid gets it exactly.
    let quoted = crate::mailbox::Mailbox::parse(r#"Ann "Q" <reply@example.com>"#)
        .unwrap()
        .header();
    let q = Mail {
        reply_to: Some(&quoted),
        ..m
    };
    assert_eq!(
        json_of(&sg.request(&q, now).unwrap())["reply_to"],
        json!({"email": "reply@example.com", "name": "Ann \"Q\""})
    );
    let pm = postmark::Postmark {
        server_token: Secret::new("k"),
        message_stream: "broadcast".into(),
    };
    let b = json_of(&pm.request(&m, now).unwrap());
    assert_eq!(
        (b["From"].as_str(), b["ReplyTo"].as_str()),
        (
            Some("News Team <news@example.com>"),
            Some("help@example.com")
        )
    );
    let rs = resend::Resend {
        api_key: Secret::new("k"),
    };
    assert_eq!(
        json_of(&rs.request(&m, now).unwrap())["reply_to"],
        "help@example.com"
    );
    let mg = mailgun::Mailgun {
        api_key: Secret::new("k"),
        domain: "d".into(),
    };
    let Body::Form(f) = mg.request(&m, now).unwrap().body else {
        panic!()
    };
    assert!(f.contains(&("h:Reply-To", "help@example.com".into())));
}

#[test]
fn each_kind_has_its_name_its_endpoint_and_says_whether_it_honours_keys() {
    for k in Kind::ALL {
        assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        assert_eq!(
            k.idempotent(),
            matches!(k, Kind::Json | Kind::Resend),
            "{k:?}"
        );
    }
    assert_eq!(
        "smtp".parse::<Kind>().unwrap_err().to_string(),
        "\"smtp\" is not a provider profile"
    );
    let base = |k: Kind| k.default_base(Some("eu-west-1"));
    assert_eq!(base(Kind::Json), None);
    assert_eq!(
        base(Kind::Sendgrid).as_deref(),
        Some("https://api.sendgrid.com")
    );
    assert_eq!(
        base(Kind::Ses).as_deref(),
        Some("https://email.eu-west-1.amazonaws.com")
    );
    assert_eq!(Kind::Ses.default_base(None), None);
    assert_eq!(
        base(Kind::Postmark).as_deref(),
        Some("https://api.postmarkapp.com")
    );
    assert_eq!(
        base(Kind::Mailgun).as_deref(),
        Some("https://api.mailgun.net")
    );
    assert_eq!(
        base(Kind::Resend).as_deref(),
        Some("https://api.resend.com")
    );
    let url = |u: &str| reqwest::Url::parse(u).unwrap();
    assert_eq!(host_of(&url("http://127.0.0.1:8025/x")), "127.0.0.1:8025");
    assert_eq!(
        host_of(&url("https://email.eu-west-1.amazonaws.com")),
        "email.eu-west-1.amazonaws.com"
    );
    assert_eq!(idempotency_key("c1", 42), "c1:42");
}

#[test]
fn a_mail_and_a_request_print_neither_the_address_nor_the_data_nor_the_key() {
    let d = data();
    let m = mail("spring", &d);
    let shown = format!("{m:?}");
    assert!(
        shown.contains("[personal data]") && shown.contains("member_id: 42"),
        "{shown}"
    );
    assert!(!shown.contains("Ann"), "{shown}");
    let p = sendgrid::SendGrid {
        subscription_tracking: false,
        api_key: Secret::new("SG.very-secret"),
    };
    let shown = format!("{:?}", p.request(&m, SystemTime::now()).unwrap());
    assert!(
        shown.contains("/v3/mail/send") && shown.contains("Authorization"),
        "{shown}"
    );
    assert!(
        !shown.contains("very-secret") && !shown.contains("Ann"),
        "{shown}"
    );
}

const STS_ANSWER: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:mail:campaign-sender</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/ses-sender/campaign-sender-worker-0</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:campaign-sender-worker-0</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2026-12-06T10:00:00Z</Expiration>
      <AccessKeyId>ASIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>www.amazon.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

#[test]
fn sts_keys_are_read_with_their_expiry_and_replaced_five_minutes_before_it() {
    let (keys, expires) = aws::parse(STS_ANSWER).unwrap();
    assert_eq!(keys.access_key_id, "ASIAIOSFODNN7EXAMPLE");
    assert_eq!(
        keys.secret_access_key.expose(),
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
    );
    assert!(keys.session_token.is_some());
    let at = |s: &str| SystemTime::from(chrono::DateTime::parse_from_rfc3339(s).unwrap());
    assert_eq!(expires, at("2026-12-06T10:00:00Z"));
    assert!(aws::parse("<html>oops</html>").is_err());

    let w = aws::WebIdentity::new(
        "r".into(),
        "f".into(),
        "s".into(),
        "http://127.0.0.1:1".into(),
    );
    assert!(w.needs_refresh(at("2026-12-06T09:00:00Z")), "none yet");
    w.hold(keys, expires);
    assert!(!w.needs_refresh(at("2026-12-06T09:54:59Z")));
    assert!(
        w.needs_refresh(at("2026-12-06T09:55:00Z")),
        "within five minutes of expiry"
    );
    let src = aws::Source::WebIdentity(w);
    assert!(src.current(at("2026-12-06T09:59:59Z")).is_some());
    assert!(
        src.current(at("2026-12-06T10:00:00Z")).is_none(),
        "expired keys sign nothing"
    );
}

#[test]
fn ses_signs_with_web_identity_keys_once_held_and_hands_them_to_the_client_to_refresh() {
    let ses = ses::Ses {
        list_management: None,
        region: "eu-west-1".into(),
        host: "email.eu-west-1.amazonaws.com".into(),
        credentials: std::sync::Arc::new(aws::Source::WebIdentity(aws::WebIdentity::new(
            "arn:aws:iam::1:role/r".into(),
            "/nonexistent".into(),
            "s".into(),
            "http://127.0.0.1:1/".into(),
        ))),
        configuration_set: None,
    };
    let d = data();
    let now = SystemTime::now();
    assert!(
        matches!(
            ses.request(&mail("spring", &d), now),
            Err(BuildError::Unsigned)
        ),
        "no keys yet: nothing is signed"
    );
    let Some(aws::Source::WebIdentity(w)) = ses.aws_credentials() else {
        panic!("the client must be given SES's credentials to refresh them")
    };
    w.hold(
        aws::AwsKeys {
            access_key_id: "ASIATEMP".into(),
            secret_access_key: Secret::new("s"),
            session_token: Some(Secret::new("the-session-token")),
        },
        now + Duration::from_secs(3600),
    );
    let out = ses.request(&mail("spring", &d), now).unwrap();
    assert_eq!(
        out.header_value("x-amz-security-token"),
        Some("the-session-token")
    );
    assert!(out
        .header_value("authorization")
        .unwrap()
        .contains("Credential=ASIATEMP/"));
}

/// SES alone names a limit on a header's value (870 printable ASCII); the start checks the
/// longest `List-Unsubscribe` against it.
#[test]
fn only_ses_names_a_header_value_limit() {
    for kind in Kind::ALL {
        let expected = (kind == Kind::Ses).then_some(870);
        assert_eq!(kind.header_value_limit(), expected, "{kind:?}");
    }
}
