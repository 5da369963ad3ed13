//! The verifiers at their edges, one vendor after another: credentials and signatures empty,
//! one byte short and one byte long; timestamps exactly at the tolerance and one second past
//! it, on both sides. A comparison made as a prefix, or a tolerance made one-sided, turns one
//! of these red. (SES through SNS: `tests/it/events_sns.rs`, with openssl's signatures.)

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{mailgun, postmark, resend, sendgrid, Refused};

const NOW: i64 = 1_800_000_000;

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn headers(pairs: &[(&str, String)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect()
}

/// `bytes` one short, one long (an extra byte), and empty.
fn edges(bytes: &[u8]) -> [Vec<u8>; 3] {
    let mut long = bytes.to_vec();
    long.push(bytes[0]);
    [bytes[..bytes.len() - 1].to_vec(), long, Vec::new()]
}

#[test]
fn postmark_takes_its_credentials_exactly_and_nothing_shorter_or_longer() {
    let p = postmark::Postmark::new("hook", "s3cret-0123456789").unwrap();
    let basic = |creds: &[u8]| headers(&[("authorization", format!("Basic {}", b64(creds)))]);
    assert_eq!(p.verify(&basic(b"hook:s3cret-0123456789")), Ok(()));
    for wrong in edges(b"hook:s3cret-0123456789") {
        assert_eq!(
            p.verify(&basic(&wrong)),
            Err(Refused::BadSignature),
            "{:?}",
            String::from_utf8_lossy(&wrong)
        );
    }
    assert_eq!(p.verify(&basic(b"hook:")), Err(Refused::BadSignature));
    assert_eq!(p.verify(&HeaderMap::new()), Err(Refused::Unsigned));
}

fn resend_headers(
    key: &[u8],
    id: &str,
    ts: i64,
    body: &[u8],
    mac: impl Fn(Vec<u8>) -> Vec<u8>,
) -> HeaderMap {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(format!("{id}.{ts}.").as_bytes());
    m.update(body);
    let sig = mac(m.finalize().into_bytes().to_vec());
    headers(&[
        ("svix-id", id.into()),
        ("svix-timestamp", ts.to_string()),
        ("svix-signature", format!("v1,{}", b64(&sig))),
    ])
}

#[test]
fn resend_takes_five_minutes_either_way_and_a_whole_signature_only() {
    let key = b"campaign-sender resend test key!";
    let r = resend::Resend::new(&format!("whsec_{}", b64(key))).unwrap();
    let body = br#"{"type":"email.delivered"}"#;
    let tol = resend::TOLERANCE_S;
    for at in [NOW - tol, NOW + tol, NOW] {
        let h = resend_headers(key, "msg_1", at, body, |s| s);
        assert_eq!(
            r.verify(&h, body, NOW),
            Ok("msg_1".into()),
            "at now{:+}",
            at - NOW
        );
    }
    for at in [NOW - tol - 1, NOW + tol + 1] {
        let h = resend_headers(key, "msg_1", at, body, |s| s);
        assert_eq!(
            r.verify(&h, body, NOW),
            Err(Refused::Stale),
            "at now{:+}",
            at - NOW
        );
    }
    let whole = resend_headers(key, "msg_1", NOW, body, |s| s);
    let sig = whole["svix-signature"].to_str().unwrap()[3..].to_string();
    let sig = base64::engine::general_purpose::STANDARD
        .decode(sig)
        .unwrap();
    for wrong in edges(&sig) {
        let h = resend_headers(key, "msg_1", NOW, body, |_| wrong.clone());
        assert_eq!(
            r.verify(&h, body, NOW),
            Err(Refused::BadSignature),
            "{} bytes",
            wrong.len()
        );
    }
}

fn mailgun_body(key: &[u8], ts: i64, sig: impl Fn(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).unwrap();
    m.update(format!("{ts}tok-1").as_bytes());
    let sig = hex::encode(sig(m.finalize().into_bytes().to_vec()));
    serde_json::json!({"signature": {"timestamp": ts.to_string(), "token": "tok-1", "signature": sig},
        "event-data": {"event": "delivered", "id": "mg-1", "recipient": "a@example.com"}})
    .to_string()
    .into_bytes()
}

#[test]
fn mailgun_takes_five_minutes_either_way_and_a_whole_signature_only() {
    let key = b"key-mailgun-0123456789abcdef01234";
    let m = mailgun::Mailgun::new("key-mailgun-0123456789abcdef01234").unwrap();
    let tol = mailgun::MAX_AGE_S;
    for at in [NOW - tol, NOW + tol] {
        assert!(
            m.verify(&mailgun_body(key, at, |s| s), NOW).is_ok(),
            "at now{:+}",
            at - NOW
        );
    }
    for at in [NOW - tol - 1, NOW + tol + 1] {
        let got = m.verify(&mailgun_body(key, at, |s| s), NOW).err();
        assert_eq!(got, Some(Refused::Stale), "at now{:+}", at - NOW);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(format!("{NOW}tok-1").as_bytes());
    let sig = mac.finalize().into_bytes().to_vec();
    for wrong in edges(&sig) {
        let got = m
            .verify(&mailgun_body(key, NOW, |_| wrong.clone()), NOW)
            .err();
        assert_eq!(got, Some(Refused::BadSignature), "{} bytes", wrong.len());
    }
}

#[test]
fn sendgrid_takes_a_whole_signature_only() {
    use p256::ecdsa::signature::Signer as _;
    use p256::pkcs8::EncodePublicKey as _;
    let sk = p256::ecdsa::SigningKey::from_bytes(&[7u8; 32].into()).unwrap();
    let der = sk.verifying_key().to_public_key_der().unwrap();
    let sg = sendgrid::SendGrid::new(&b64(der.as_bytes())).unwrap();
    let body = b"[]\r\n";
    let ts = NOW.to_string();
    let sig: p256::ecdsa::Signature = sk.sign(&[ts.as_bytes(), body].concat());
    let sig = sig.to_der().as_bytes().to_vec();
    let signed = |sig: &[u8]| {
        headers(&[
            ("x-twilio-email-event-webhook-signature", b64(sig)),
            ("x-twilio-email-event-webhook-timestamp", ts.clone()),
        ])
    };
    assert_eq!(sg.verify(&signed(&sig), body), Ok(()));
    for wrong in edges(&sig) {
        assert_eq!(
            sg.verify(&signed(&wrong), body),
            Err(Refused::BadSignature),
            "{} bytes",
            wrong.len()
        );
    }
}

#[test]
fn secrets_weaker_than_the_vendors_issue_are_refused_without_being_shown() {
    // Resend (Svix): whsec_ and at least 24 bytes; the empty key signs anything.
    for short in [String::new(), b64(b"x"), b64(&[7u8; 23])] {
        let err = resend::Resend::new(&format!("whsec_{short}"))
            .err()
            .expect("refused");
        assert!(
            err.contains("24") && (short.is_empty() || !err.contains(&short)),
            "{err}"
        );
    }
    assert!(resend::Resend::new(&format!("whsec_{}", b64(&[7u8; 24]))).is_ok());
    // Mailgun: 32 characters at least.
    for short in ["", "k", &"k".repeat(31)] {
        let err = mailgun::Mailgun::new(short).err().expect("refused");
        assert!(err.contains("32"), "{err}");
    }
    assert!(mailgun::Mailgun::new(&"k".repeat(32)).is_ok());
    // Postmark: a password of 16 characters at least, and a user.
    for short in ["", "p", &"p".repeat(15)] {
        let err = postmark::Postmark::new("hook", short)
            .err()
            .expect("refused");
        assert!(
            err.contains("16") && (short.len() < 3 || !err.contains(short)),
            "{err}"
        );
    }
    assert!(postmark::Postmark::new("", &"p".repeat(16)).is_err());
    assert!(postmark::Postmark::new("hook", &"p".repeat(16)).is_ok());
}
