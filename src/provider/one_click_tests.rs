//! One-click unsubscribe through every profile: with our link, both RFC 8058 headers travel as
//! each vendor takes headers (docs/VENDORS.md "The mailbox providers' rules") and
//! `unsubscribe_url` is in the template data; with `LIST_UNSUBSCRIBE=vendor`, what turns the
//! vendor's own on and no header of ours.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::profile::{Body, Mail, Profile};
use super::*;
use crate::secret::Secret;
use crate::unsubscribe::{Links, Signer, ONE_CLICK};

fn link() -> crate::unsubscribe::Link {
    let signer = Signer::new("0123456789abcdef0123456789abcdef").unwrap();
    Links::new("https://events.example.com", signer, None).for_member("c1", 42)
}

fn mail<'a>(
    data: &'a serde_json::Map<String, Value>,
    link: Option<&'a crate::unsubscribe::Link>,
) -> Mail<'a> {
    Mail {
        campaign_id: "c1",
        member_id: 42,
        to: "ann@example.com",
        from: Some("news@example.com"),
        reply_to: None,
        template: "spring",
        data: Some(data),
        unsubscribe: link,
        feedback_id: None,
    }
}

fn body(p: &dyn Profile, m: &Mail<'_>) -> Value {
    match p.request(m, SystemTime::now()).unwrap().body {
        Body::Json(b) => serde_json::from_slice(&b).unwrap(),
        Body::Form(f) => Value::Object(
            f.into_iter()
                .map(|(k, v)| (k.to_string(), Value::String(v)))
                .collect(),
        ),
        Body::Empty => panic!("a mail has a body"),
    }
}

fn key() -> Secret {
    Secret::new("k")
}

/// SES signing with the keys the independent checker knows (secret `secret`).
pub(super) fn ses(list_management: Option<ses::ListManagement>) -> ses::Ses {
    ses::Ses {
        list_management,
        region: "us-east-1".into(),
        host: "127.0.0.1:8025".into(),
        credentials: std::sync::Arc::new(aws::Source::Static(aws::AwsKeys {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Secret::new("secret"),
            session_token: None,
        })),
        configuration_set: None,
    }
}

fn six(tracking: bool, list: Option<ses::ListManagement>) -> Vec<(&'static str, Box<dyn Profile>)> {
    vec![
        (
            "json",
            Box::new(json::Json {
                api_key: None,
                refusals: Default::default(),
            }),
        ),
        (
            "sendgrid",
            Box::new(sendgrid::SendGrid {
                api_key: key(),
                subscription_tracking: tracking,
            }),
        ),
        ("ses", Box::new(ses(list))),
        (
            "postmark",
            Box::new(postmark::Postmark {
                server_token: key(),
                message_stream: "broadcast".into(),
            }),
        ),
        (
            "mailgun",
            Box::new(mailgun::Mailgun {
                api_key: key(),
                domain: "mg.example.com".into(),
            }),
        ),
        ("resend", Box::new(resend::Resend { api_key: key() })),
    ]
}

/// Where each vendor's request carries the headers and the template data.
fn headers_and_data(vendor: &str, b: &Value) -> (Vec<(String, String)>, Value) {
    let pairs = |v: &Value| -> Vec<(String, String)> {
        match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            Value::Array(a) => a
                .iter()
                .map(|h| {
                    (
                        h["Name"].as_str().unwrap().into(),
                        h["Value"].as_str().unwrap().into(),
                    )
                })
                .collect(),
            _ => vec![],
        }
    };
    let text = |v: &Value| serde_json::from_str(v.as_str().unwrap()).unwrap();
    match vendor {
        "json" => (pairs(&b["headers"]), b["data"].clone()),
        "sendgrid" => (
            pairs(&b["personalizations"][0]["headers"]),
            b["personalizations"][0]["dynamic_template_data"].clone(),
        ),
        "ses" => (
            pairs(&b["Content"]["Template"]["Headers"]),
            text(&b["Content"]["Template"]["TemplateData"]),
        ),
        "postmark" => (pairs(&b["Headers"]), b["TemplateModel"].clone()),
        "mailgun" => (
            b.as_object()
                .unwrap()
                .iter()
                .filter_map(|(k, v)| {
                    Some((k.strip_prefix("h:")?.to_string(), v.as_str()?.to_string()))
                })
                .filter(|(k, _)| k.starts_with("List-") || k == "Feedback-ID")
                .collect(),
            text(&b["t:variables"]),
        ),
        "resend" => (pairs(&b["headers"]), b["template"]["variables"].clone()),
        other => panic!("{other}"),
    }
}

#[test]
fn every_profile_carries_both_headers_as_its_vendor_takes_them_and_the_link_in_the_data() {
    let data = json!({"first_name": "Ann", "unsubscribe_url": "a column of the file"})
        .as_object()
        .unwrap()
        .clone();
    let l = link();
    for (vendor, p) in six(false, None) {
        let b = body(p.as_ref(), &mail(&data, Some(&l)));
        let (headers, template_data) = headers_and_data(vendor, &b);
        assert_eq!(
            headers,
            [
                ("List-Unsubscribe".to_string(), format!("<{}>", l.url)),
                ("List-Unsubscribe-Post".to_string(), ONE_CLICK.to_string()),
            ],
            "{vendor}: {b}"
        );
        assert_eq!(
            template_data["unsubscribe_url"],
            l.url.as_str(),
            "{vendor}: ours wins"
        );
        assert_eq!(template_data["first_name"], "Ann", "{vendor}");
        let count = b.to_string().matches("List-Unsubscribe-Post").count();
        assert_eq!(count, 1, "{vendor}: never two");

        let plain = body(p.as_ref(), &mail(&data, None));
        assert!(
            !plain.to_string().contains("List-Unsubscribe"),
            "{vendor}: {plain}"
        );
    }
}

#[test]
fn vendor_mode_turns_the_vendors_own_on_and_sends_no_header_of_ours() {
    let data = serde_json::Map::new();
    let list = ses::ListManagement {
        contact_list_name: "newsletter".into(),
        topic_name: Some("spring".into()),
    };
    for (vendor, p) in six(true, Some(list)) {
        let b = body(p.as_ref(), &mail(&data, None));
        assert!(!b.to_string().contains("List-Unsubscribe"), "{vendor}: {b}");
        match vendor {
            "sendgrid" => assert_eq!(
                b["tracking_settings"],
                json!({"subscription_tracking": {"enable": true}})
            ),
            "ses" => assert_eq!(
                b["ListManagementOptions"],
                json!({"ContactListName": "newsletter", "TopicName": "spring"})
            ),
            _ => {}
        }
    }
}

/// Our contract sends `data` only when there is some: the row's, or our link alone.
#[test]
fn the_json_contract_has_data_only_when_the_row_or_the_link_gives_some() {
    let p = json::Json {
        api_key: None,
        refusals: Default::default(),
    };
    let empty = serde_json::Map::new();
    let none = Mail {
        data: None,
        ..mail(&empty, None)
    };
    assert_eq!(body(&p, &none).get("data"), None);
    let l = link();
    let only_link = Mail {
        data: None,
        ..mail(&empty, Some(&l))
    };
    assert_eq!(
        body(&p, &only_link)["data"],
        json!({"unsubscribe_url": l.url})
    );
}

/// Gmail's Feedback Loop header through every profile, as each vendor takes headers: one per
/// mail, after the one-click pair or alone, its value as `RunConfig::feedback_header` made it
/// (no address, no member id).
#[test]
fn every_profile_carries_one_feedback_id_and_no_address_in_it() {
    let data = serde_json::Map::new();
    let l = link();
    let value = "c1:sendgrid:bulk:news2026";
    for (vendor, p) in six(false, None) {
        for with_link in [Some(&l), None] {
            let m = Mail {
                feedback_id: Some(value),
                ..mail(&data, with_link)
            };
            let b = body(p.as_ref(), &m);
            let (headers, _) = headers_and_data(vendor, &b);
            let feedback: Vec<&(String, String)> =
                headers.iter().filter(|(k, _)| k == "Feedback-ID").collect();
            assert_eq!(feedback.len(), 1, "{vendor}: {b}");
            assert_eq!(feedback[0].1, value, "{vendor}");
            assert_eq!(
                headers.len(),
                if with_link.is_some() { 3 } else { 1 },
                "{vendor}"
            );
            assert!(
                !feedback[0].1.contains('@') && !feedback[0].1.contains("42"),
                "{vendor}"
            );
        }
        let plain = body(p.as_ref(), &mail(&data, None));
        assert!(
            !plain.to_string().contains("Feedback-ID"),
            "{vendor}: {plain}"
        );
    }
}
