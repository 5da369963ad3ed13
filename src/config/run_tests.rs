//! `RunConfig`'s tests (`src/config/run.rs`): the documented defaults, every check made at
//! start, and the values derived from the settings.

use super::*;
use crate::config::DbConfig;

fn vars(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("CAMPAIGN_ID", "c1"),
        ("MAIL_URL", "http://127.0.0.1:1/send"),
        ("UNSUBSCRIBE_BASE_URL", "https://mail.example.com"),
        ("UNSUBSCRIBE_SECRET", "0123456789abcdef0123456789abcdef"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, val) in extra {
        v.retain(|(kk, _)| kk != k);
        v.push((k.to_string(), val.to_string()));
    }
    v
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = RunConfig::from_vars(vars(&[])).unwrap();
    assert_eq!(
        (c.batch_size, c.lease_s, c.max_attempts, c.deadline_s),
        (200, 30, 5, 3300)
    );
    assert_eq!((c.connect_timeout_ms, c.read_timeout_ms), (2000, 5000));
    assert_eq!(c.idempotency_window(), Duration::from_secs(86_400));
    assert_eq!(c.mail_provider, crate::provider::Kind::Json);
    assert_eq!(c.postmark_message_stream, "broadcast");
}

#[test]
fn a_mail_ca_file_that_cannot_be_used_is_refused_at_start_naming_it() {
    let provider = |v: &[(&str, &str)]| RunConfig::from_vars(vars(v)).unwrap().provider().err();
    let missing = provider(&[("MAIL_CA_FILE", "/nonexistent/ca.pem")]);
    assert_eq!(missing.unwrap().var, "MAIL_CA_FILE");
    let not_pem = std::env::temp_dir().join(format!("cs-not-pem-{}", std::process::id()));
    std::fs::write(&not_pem, "not a certificate\n").unwrap();
    let empty = provider(&[("MAIL_CA_FILE", not_pem.to_str().unwrap())]);
    let _ = std::fs::remove_file(&not_pem);
    let err = empty.unwrap();
    assert_eq!(err.var, "MAIL_CA_FILE");
    assert!(err.problem.contains("no PEM certificate"), "{err}");
}

#[test]
fn an_unknown_outcome_is_resent_only_until_the_window_less_the_request_and_the_recheck() {
    let c = RunConfig::from_vars(vars(&[("IDEMPOTENCY_WINDOW_S", "20")])).unwrap();
    // 20 s less 2 s connect + 5 s read + 1 s re-check + 1 s for the clocks.
    assert_eq!(c.resend_within(), Duration::from_secs(11));
    for too_short in ["9", "0"] {
        let err = RunConfig::from_vars(vars(&[("IDEMPOTENCY_WINDOW_S", too_short)])).unwrap_err();
        assert_eq!(err.var, "IDEMPOTENCY_WINDOW_S", "{too_short}: {err}");
    }
}

#[test]
fn each_bad_value_names_its_variable() {
    let cases: &[(&str, &str)] = &[
        ("BATCH_SIZE", "abc"),
        ("BATCH_SIZE", "0"),
        ("BATCH_SIZE", "-3"),
        ("LEASE_S", "5"),
        ("LEASE_S", "2"),
        ("FLUSH_MAX_ROWS", "0"),
        ("MAIL_URL", "ftp://x/y"),
        ("MAIL_URL", "not a url"),
        ("MAX_ATTEMPTS", "0"),
        ("MAX_PERMANENT_FAILURE_RATIO", "2"),
        ("CAMPAIGN_ID", " "),
        ("READ_TIMEOUT_MS", "x"),
        ("RATE_SYNC_MS", "5"),
        ("RATE_SHARE_TTL_MS", "500"),
        ("RATE_LIMIT_KEY", ""),
        ("METRICS_ADDR", "nowhere"),
        ("IDEMPOTENCY_WINDOW_S", "5"),
        ("JOB_UID", "campaign-sender"),
        ("JOB_NAME", "a job"),
    ];
    for (var, value) in cases {
        let err = RunConfig::from_vars(vars(&[(var, value)])).unwrap_err();
        assert_eq!(&err.var, var, "{var}={value} gave {err}");
    }
    let missing: Vec<_> = vars(&[])
        .into_iter()
        .filter(|(k, _)| k != "MAIL_URL")
        .collect();
    assert_eq!(RunConfig::from_vars(missing).unwrap_err().var, "MAIL_URL");
}

/// Hostile input: every numeric variable (found from the config itself, so a new one is
/// covered without editing this test), given each malformed value in turn, is refused and
/// named — never silently defaulted.
#[test]
fn every_numeric_variable_malformed_in_turn_is_refused_naming_it() {
    let run = serde_json::to_value(RunConfig::with_defaults("c", "http://127.0.0.1/")).unwrap();
    let numeric: Vec<String> = run
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, v)| v.is_number())
        .map(|(k, _)| k.to_ascii_uppercase())
        .collect();
    assert!(numeric.len() >= 18, "{numeric:?}");
    for var in &numeric {
        for value in ["abc", "-1", "", "1e400", "18446744073709551616", " 5"] {
            let err = RunConfig::from_vars(vars(&[(var, value)]))
                .expect_err(&format!("{var}={value:?} was accepted"));
            assert_eq!(&err.var, var, "{var}={value:?} gave {err}");
        }
    }
    for (var, value) in [
        ("DB_MAX_CONNECTIONS", "abc"),
        ("DB_MAX_CONNECTIONS", "0"),
        ("DB_CONNECT_RETRY_S", "-1"),
    ] {
        let err = DbConfig::from_vars([
            ("DATABASE_URL".to_string(), "postgres://h/db".to_string()),
            (var.to_string(), value.to_string()),
        ])
        .unwrap_err();
        assert_eq!(err.var, var, "{var}={value:?} gave {err}");
    }
    let err = DbConfig::from_vars([("DATABASE_URL".to_string(), "mysql://h/db".to_string())])
        .unwrap_err();
    assert_eq!(err.var, "DATABASE_URL");
    assert!(
        !err.to_string().contains("mysql://h/db"),
        "a secret printed: {err}"
    );
}

#[test]
fn a_mail_url_without_a_scheme_says_what_to_add_and_never_shows_credentials() {
    for (value, shown) in [
        ("127.0.0.1:18080/v1/send", "'127.0.0.1:18080/v1/send'"),
        ("localhost:18080/v1/send", "'localhost:18080/v1/send'"),
        ("ftp://x/y", "'ftp://x/y'"),
        ("user:pw@mail.example/v1", "'[redacted]@mail.example/v1'"),
    ] {
        let err = RunConfig::from_vars(vars(&[("MAIL_URL", value)])).unwrap_err();
        assert_eq!(err.var, "MAIL_URL");
        assert_eq!(
            err.problem,
            format!("must start with http:// or https:// (got {shown})")
        );
    }
    let err = RunConfig::from_vars(vars(&[("MAIL_URL", "https://u:secret@/x")])).unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
}

/// A vendor's component of the manifests cannot delete the base's `MAIL_URL`, only set it
/// empty: empty is unset — the vendor's public endpoint — and still required for `json`.
#[test]
fn an_empty_mail_url_is_the_vendors_public_endpoint_and_still_missing_for_json() {
    let c = RunConfig::from_vars(vars(&[
        ("MAIL_URL", ""),
        ("MAIL_PROVIDER", "sendgrid"),
        ("MAIL_API_KEY", "k"),
    ]))
    .unwrap();
    assert_eq!(c.mail_base().unwrap().as_str(), "https://api.sendgrid.com/");
    let err = RunConfig::from_vars(vars(&[("MAIL_URL", " ")])).unwrap_err();
    assert_eq!(err.var, "MAIL_URL");
    assert!(err.problem.contains("required"), "{err}");
}

#[test]
fn the_limit_key_defaults_to_the_provider_host() {
    let c =
        RunConfig::from_vars(vars(&[("MAIL_URL", "https://api.mail.example/v1/send")])).unwrap();
    assert_eq!(c.limit_key(), "api.mail.example");
    let c = RunConfig::from_vars(vars(&[])).unwrap();
    assert_eq!(c.limit_key(), "127.0.0.1:1");
    let c = RunConfig::from_vars(vars(&[("RATE_LIMIT_KEY", "account-7")])).unwrap();
    assert_eq!(c.limit_key(), "account-7");
}

#[test]
fn secrets_never_print() {
    let c = RunConfig::from_vars(vars(&[("MAIL_API_KEY", "sk_live_abc")])).unwrap();
    assert!(!format!("{c:?}").contains("sk_live_abc"));
    let d =
        DbConfig::from_vars([("DATABASE_URL".into(), "postgres://u:hunter2@h/db".into())]).unwrap();
    assert!(!format!("{d:?}").contains("hunter2"));
}

#[test]
fn every_count_and_duration_has_an_upper_bound_and_the_largest_number_is_refused_by_name() {
    for &(var, max) in super::BOUNDS {
        let over = (max + 1).to_string();
        let err = RunConfig::from_vars(vars(&[(var, &over)])).unwrap_err();
        assert_eq!(err.var, var, "{var}={over}: {err}");
        assert!(err.problem.contains(&max.to_string()), "{err}");
    }
    for var in [
        "DEADLINE_S",
        "LEASE_S",
        "IDEMPOTENCY_WINDOW_S",
        "MAIL_DAILY_QUOTA",
        "IDLE_POLL_MS",
    ] {
        let err = RunConfig::from_vars(vars(&[(var, &u64::MAX.to_string())])).unwrap_err();
        assert_eq!(err.var, var, "{err}");
    }
    // At the bound: accepted (those whose bound other checks allow on their own).
    for (var, at) in [
        ("DEADLINE_S", "2678400"),
        ("MAIL_RATE_PER_S", "100000"),
        ("MAX_ATTEMPTS", "100"),
    ] {
        assert!(
            RunConfig::from_vars(vars(&[(var, at)])).is_ok(),
            "{var}={at}"
        );
    }
}

#[test]
fn mail_provider_is_read_by_name_and_a_wrong_one_is_refused_with_the_choices() {
    for kind in crate::provider::Kind::ALL {
        let c = RunConfig::from_vars(vars(&[
            ("MAIL_PROVIDER", kind.as_str()),
            ("MAIL_URL", "http://127.0.0.1:1"),
            ("MAIL_API_KEY", "k"),
            ("MAILGUN_DOMAIN", "mg.example.com"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
        ]));
        let c = match kind {
            // The JSON contract's MAIL_URL is the whole URL: give it a path.
            crate::provider::Kind::Json => RunConfig::from_vars(vars(&[("MAIL_PROVIDER", "json")])),
            _ => c,
        };
        let c = c.unwrap();
        assert_eq!(c.mail_provider, kind);
        assert!(c.provider().is_ok(), "{kind:?}");
    }
    let err = RunConfig::from_vars(vars(&[("MAIL_PROVIDER", "smtp")])).unwrap_err();
    assert_eq!(err.var, "MAIL_PROVIDER");
    assert!(
        err.problem
            .contains("json, sendgrid, ses, postmark, mailgun, resend"),
        "{err}"
    );
}

/// The worker id's fallback, `$HOSTNAME`, is held to `WORKER_ID`'s alphabet and blamed by name
/// (it reaches headers, logs and metric labels); taken only when it is the name used.
#[test]
fn a_hostname_the_worker_id_falls_back_to_is_checked_and_blamed_by_name() {
    for host in ["<img src=x onerror=alert(1)>ann@example.com", "evil\nx", ""] {
        let err = RunConfig::from_vars(vars(&[("HOSTNAME", host)])).unwrap_err();
        assert_eq!(err.var, "HOSTNAME", "{host:?} gave {err}");
        assert!(!err.to_string().contains("ann@"), "{err}");
    }
    let ok = RunConfig::from_vars(vars(&[("HOSTNAME", "campaign-sender-7d9f-x2")])).unwrap();
    assert_eq!(ok.worker_name(), "campaign-sender-7d9f-x2");
    // Not the name used: WORKER_ID or the Job's index wins, and HOSTNAME is not read.
    for named in [("WORKER_ID", "w-1"), ("JOB_COMPLETION_INDEX", "3")] {
        let c = RunConfig::from_vars(vars(&[("HOSTNAME", "a b"), named])).unwrap();
        assert!(!c.worker_name().contains(' '));
    }
}

#[test]
fn a_job_uid_is_a_uuid() {
    let uid = "6b4f0e0c-3f3e-4bd7-9a58-2f1f3c0a9d11";
    let c = RunConfig::from_vars(vars(&[("JOB_UID", uid)])).unwrap();
    assert_eq!(c.job_uid.as_deref(), Some(uid));
    // Every spelling of one UID is one Job.
    for spelling in [
        format!("{{{}}}", uid.to_uppercase()),
        format!("urn:uuid:{uid}"),
        uid.replace('-', ""),
    ] {
        let c = RunConfig::from_vars(vars(&[("JOB_UID", &spelling)])).unwrap();
        assert_eq!(
            c.job().unwrap(),
            Some(uuid::Uuid::parse_str(uid).unwrap()),
            "{spelling}"
        );
    }
    assert!(RunConfig::from_vars(vars(&[("JOB_UID", "job-1")])).is_err());
}

#[test]
fn a_feedback_id_is_gmails_sender_id_and_its_header_names_no_member() {
    let c = RunConfig::from_vars(vars(&[("FEEDBACK_ID", "news2026")])).unwrap();
    let header = c.feedback_header().unwrap().unwrap();
    assert_eq!(header, format!("{}:json:bulk:news2026", c.campaign_id));
    assert!(!header.contains('@'));
    for bad in [
        "abcd",
        "sixteen-chars-xx",
        "has:colon",
        "has space",
        "ünicode",
    ] {
        let err = RunConfig::from_vars(vars(&[("FEEDBACK_ID", bad)])).unwrap_err();
        assert_eq!(err.var, "FEEDBACK_ID", "{bad}");
    }
    assert_eq!(
        RunConfig::from_vars(vars(&[]))
            .unwrap()
            .feedback_header()
            .unwrap(),
        None
    );
}
