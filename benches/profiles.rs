//! What each vendor profile costs a mail on top of the rest of the worker: building the request
//! (body, headers, SES's SigV4 signature, Mailgun's multipart encoding) and reading a successful
//! answer (the message id), the steps in which the `MAIL_PROVIDER` profiles differ. Everything else a mail costs (the
//! claim, the re-check, the HTTP exchange, the finish) is the same code for every profile, so
//! the difference between two lines here is the difference in CPU per sent mail between the
//! two profiles. `scripts/bench.sh profiles` runs it; docs/BENCHMARKS.md "Each vendor's
//! contract" relates it to the worker's whole CPU per mail.

use std::sync::Arc;
use std::time::SystemTime;

use campaign_sender::outcome::Refusals;
use campaign_sender::provider::aws::AwsKeys;
use campaign_sender::provider::aws::Source;
use campaign_sender::provider::{
    json, mailgun, postmark, resend, sendgrid, ses, Answer, Mail, Profile,
};
use campaign_sender::secret::Secret;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use reqwest::header::{HeaderMap, HeaderValue};

/// Each profile as `MAIL_PROVIDER` builds it, and the body of its success answer.
fn profiles() -> Vec<(&'static str, Box<dyn Profile>, &'static [u8])> {
    let key = || Secret::new("SG.bench-key-0123456789");
    vec![
        (
            "json",
            Box::new(json::Json {
                api_key: Some(key()),
                refusals: Refusals::default(),
            }) as Box<dyn Profile>,
            b"{}".as_slice(),
        ),
        (
            "sendgrid",
            Box::new(sendgrid::SendGrid {
                api_key: key(),
                subscription_tracking: false,
            }),
            b"",
        ),
        (
            "ses",
            Box::new(ses::Ses {
                list_management: None,
                region: "eu-west-1".into(),
                host: "email.eu-west-1.amazonaws.com".into(),
                credentials: Arc::new(Source::Static(AwsKeys {
                    access_key_id: "AKIDEXAMPLE".into(),
                    secret_access_key: Secret::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"),
                    session_token: None,
                })),
                configuration_set: Some("campaign-events".into()),
            }),
            br#"{"MessageId":"0102018f-bench-0000"}"#,
        ),
        (
            "postmark",
            Box::new(postmark::Postmark {
                server_token: key(),
                message_stream: "broadcast".into(),
            }),
            br#"{"To":"x","SubmittedAt":"2026-12-06T10:00:00Z","MessageID":"b7bc2f4a-e38e","ErrorCode":0,"Message":"OK"}"#,
        ),
        (
            "mailgun",
            Box::new(mailgun::Mailgun {
                api_key: key(),
                domain: "mg.example.com".into(),
            }),
            br#"{"id":"<20261206.1@mg.example.com>","message":"Queued. Thank you."}"#,
        ),
        (
            "resend",
            Box::new(resend::Resend { api_key: key() }),
            br#"{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}"#,
        ),
    ]
}

fn request_and_answer(c: &mut Criterion) {
    let data = serde_json::json!({"first_name": "Ann", "city": "Osaka", "plan": "gold"});
    let data = data.as_object().expect("an object");
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-message-id",
        HeaderValue::from_static("14c5d75ce93.dfd.64b469"),
    );
    let links = campaign_sender::unsubscribe::Links::new(
        "https://mail.example.com",
        campaign_sender::unsubscribe::Signer::new("0123456789abcdef0123456789abcdef").unwrap(),
        None,
    );
    let mut group = c.benchmark_group("profile");
    for (name, profile, body) in profiles() {
        group.bench_function(name, |b| {
            let mut member_id = 0i64;
            b.iter(|| {
                member_id += 1;
                // LIST_UNSUBSCRIBE=ours, the default: every mail's link is signed here.
                let link = links.for_member("spring-2026", member_id);
                let mail = Mail {
                    campaign_id: "spring-2026",
                    member_id,
                    to: "ann.lee@example.com",
                    from: Some("Example News <news@example.com>"),
                    reply_to: None,
                    template: "spring",
                    data: Some(data),
                    unsubscribe: Some(&link),
                    feedback_id: None,
                };
                let now = SystemTime::now();
                let out = profile.request(black_box(&mail), now).expect("built");
                let answer = Answer {
                    status: if name == "sendgrid" { 202 } else { 200 },
                    headers: &headers,
                    body,
                    now,
                };
                let read = profile.read(&answer);
                // What `Provider::send` hands the client: the headers and the encoded body.
                black_box((out.headers, out.body.encode(), read))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, request_and_answer);
criterion_main!(benches);
