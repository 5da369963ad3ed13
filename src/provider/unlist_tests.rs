//! Each vendor's lift of an address off its own suppression list ([`super::unlist`]): the
//! method, path, auth and body its API reference gives, and how its answer reads.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::profile::{Answer, Body, Outgoing, Profile, Unlisted};
use super::*;
use crate::secret::Secret;

const ADDRESS: &str = "Ann+news@Gmail.com";

fn lift(p: &dyn Profile) -> Outgoing {
    p.unlist(ADDRESS, SystemTime::now())
        .expect("the vendor has an API for it")
        .expect("the request is built")
}

fn read(p: &dyn Profile, status: u16, body: &Value) -> Unlisted {
    let headers = reqwest::header::HeaderMap::new();
    let bytes = body.to_string().into_bytes();
    p.unlisted(&Answer {
        status,
        headers: &headers,
        body: &bytes,
        now: SystemTime::now(),
    })
}

#[test]
fn sendgrid_deletes_the_bounce_of_the_address_with_its_bearer_key() {
    let p = sendgrid::SendGrid {
        api_key: Secret::new("SG.key"),
        subscription_tracking: false,
    };
    let out = lift(&p);
    assert_eq!(out.method, reqwest::Method::DELETE);
    assert_eq!(out.path, "/v3/suppression/bounces/Ann%2Bnews%40Gmail.com");
    assert_eq!(out.header_value("authorization"), Some("Bearer SG.key"));
    assert_eq!(out.body, Body::Empty);
    assert_eq!(read(&p, 204, &Value::Null), Unlisted::Lifted);
    assert_eq!(read(&p, 404, &json!({"errors": []})), Unlisted::NotListed);
}

#[test]
fn mailgun_deletes_the_bounce_in_the_sending_domain_with_basic_auth() {
    let p = mailgun::Mailgun {
        api_key: Secret::new("key-test"),
        domain: "mg.example.com".into(),
    };
    let out = lift(&p);
    assert_eq!(out.method, reqwest::Method::DELETE);
    assert_eq!(
        out.path,
        "/v3/mg.example.com/bounces/Ann%2Bnews%40Gmail.com"
    );
    assert_eq!(out.basic, Some(("api".into(), "key-test".into())));
    assert_eq!(
        read(
            &p,
            200,
            &json!({"message": "Bounced address has been removed"})
        ),
        Unlisted::Lifted
    );
    assert_eq!(
        read(
            &p,
            404,
            &json!({"message": "Address not found in bounces table"})
        ),
        Unlisted::NotListed
    );
}

#[test]
fn postmark_deletes_the_suppression_in_our_stream_and_reads_its_status() {
    let p = postmark::Postmark {
        server_token: Secret::new("pm-token"),
        message_stream: "broadcast".into(),
    };
    let out = lift(&p);
    assert_eq!(out.method, reqwest::Method::POST);
    assert_eq!(out.path, "/message-streams/broadcast/suppressions/delete");
    assert_eq!(
        out.header_value("x-postmark-server-token"),
        Some("pm-token")
    );
    let Body::Json(bytes) = &out.body else {
        panic!("Postmark takes JSON")
    };
    let body: Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!(body, json!({"Suppressions": [{"EmailAddress": ADDRESS}]}));
    let answer = |status: &str| json!({"Suppressions": [{"EmailAddress": ADDRESS, "Status": status, "Message": null}]});
    assert_eq!(read(&p, 200, &answer("Deleted")), Unlisted::Lifted);
    assert_eq!(
        read(&p, 200, &answer("Failed")),
        Unlisted::Failed { status: 200 },
        "a SpamComplaint suppression cannot be deleted"
    );
    assert_eq!(
        read(&p, 401, &json!({"ErrorCode": 10})),
        Unlisted::Refused { status: 401 }
    );
}

#[test]
fn resend_removes_the_suppression_and_a_404_is_not_taken_for_not_listed() {
    let p = resend::Resend {
        api_key: Secret::new("re_key"),
    };
    let out = lift(&p);
    assert_eq!(out.method, reqwest::Method::DELETE);
    assert_eq!(out.path, "/suppressions/Ann%2Bnews%40Gmail.com");
    assert_eq!(out.header_value("authorization"), Some("Bearer re_key"));
    assert_eq!(
        read(&p, 200, &json!({"object": "suppression", "deleted": true})),
        Unlisted::Lifted
    );
    assert_eq!(
        read(&p, 404, &Value::Null),
        Unlisted::Failed { status: 404 }
    );
}

#[test]
fn ses_deletes_the_suppressed_destination_signed_for_an_independent_checker() {
    let p = super::one_click_tests::ses(None);
    let out = lift(&p);
    assert_eq!(out.method, reqwest::Method::DELETE);
    assert_eq!(
        out.path,
        "/v2/email/suppression/addresses/Ann%2Bnews%40Gmail.com"
    );
    assert_eq!(out.body, Body::Empty);
    assert_eq!(
        super::tests::sigv4_checker(&out, b""),
        "MATCHES",
        "scripts/capture/verify_sigv4.py recomputed another signature"
    );
    let mut other = out.clone();
    other.path = other.path.replace("Ann", "Bob");
    assert_eq!(
        super::tests::sigv4_checker(&other, b""),
        "DIFFERS",
        "the address is signed"
    );
    assert_eq!(read(&p, 200, &json!({})), Unlisted::Lifted);
    assert_eq!(
        read(&p, 404, &json!({"__type": "NotFoundException"})),
        Unlisted::NotListed
    );
}

#[test]
fn our_json_contract_has_no_api_for_it() {
    let p = json::Json {
        api_key: None,
        refusals: Default::default(),
    };
    assert!(p.unlist(ADDRESS, SystemTime::now()).is_none());
    assert_eq!(read(&p, 200, &Value::Null), Unlisted::NoApi);
}

#[test]
fn the_shared_table_reads_each_class_of_answer() {
    let none = reqwest::header::HeaderMap::new();
    let mut wait = reqwest::header::HeaderMap::new();
    wait.insert("retry-after", "7".parse().unwrap());
    let read = |status: u16, headers: &reqwest::header::HeaderMap| {
        answer::unlisted(&Answer {
            status,
            headers,
            body: b"",
            now: SystemTime::now(),
        })
    };
    assert_eq!(read(200, &none), Unlisted::Lifted);
    assert_eq!(read(204, &none), Unlisted::Lifted);
    assert_eq!(read(404, &none), Unlisted::NotListed);
    assert_eq!(
        read(429, &wait),
        Unlisted::Throttled {
            retry_after: Some(std::time::Duration::from_secs(7))
        }
    );
    assert_eq!(read(403, &none), Unlisted::Refused { status: 403 });
    assert_eq!(read(401, &none), Unlisted::Refused { status: 401 });
    assert_eq!(
        read(503, &none),
        Unlisted::Unavailable { status: Some(503) }
    );
    assert_eq!(read(400, &none), Unlisted::Failed { status: 400 });
}
