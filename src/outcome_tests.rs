//! The outcome decisions' tests (`src/outcome.rs`): the provider contract's status table,
//! refusals, backoff, the failure-check cadence, the unreachable pause, addresses, Retry-After.

use super::*;

#[test]
fn a_refusal_reads_back_as_stored_and_tells_what_to_check() {
    for r in [Refusal::Account, Refusal::Endpoint] {
        assert_eq!(Refusal::parse(r.as_str()), Some(r));
    }
    assert_eq!(Refusal::parse("recipient"), None);
    let account = Refusal::Account.advice(401);
    assert!(
        account.contains("401") && account.contains("MAIL_API_KEY"),
        "{account}"
    );
    let endpoint = Refusal::Endpoint.advice(404);
    assert!(
        endpoint.contains("404") && endpoint.contains("MAIL_URL"),
        "{endpoint}"
    );
    // Right for every vendor: SES refuses with its own words.
    assert!(
        account.contains("SES") && account.contains("ses:SendEmail"),
        "{account}"
    );
    assert!(
        endpoint.contains("SES_CONFIGURATION_SET") && endpoint.contains("--template"),
        "{endpoint}"
    );
    for advice in [account, endpoint] {
        assert!(advice.contains("campaign-sender resume"), "{advice}");
    }
}

#[test]
fn the_failure_threshold_is_checked_at_once_when_own_failures_could_cross_it() {
    let ms = Duration::from_millis;
    // 10 failed, budget 10: one more crosses it — checked at once, whenever the last was.
    assert!(failure_check_due(1, 10, 10, Some(ms(10))));
    assert!(failure_check_due(2, 9, 10, Some(ms(0))));
    // 9 + 1 = 10 is still within the budget: not at once.
    assert!(!failure_check_due(1, 9, 10, Some(ms(10))));
}

#[test]
fn otherwise_the_threshold_is_checked_at_most_once_a_second_and_never_without_new_failures() {
    let ms = Duration::from_millis;
    assert!(failure_check_due(1, 0, 10, None), "never checked yet");
    assert!(!failure_check_due(1, 0, 10, Some(ms(999))));
    assert!(failure_check_due(1, 0, 10, Some(ms(1000))));
    for since in [None, Some(ms(5000))] {
        assert!(
            !failure_check_due(0, 100, 10, since),
            "no new failures: {since:?}"
        );
    }
}

const POLICY: RetryPolicy = RetryPolicy {
    max_attempts: 5,
    base: Duration::from_secs(1),
    cap: Duration::from_secs(60),
    retry_after_cap: Duration::from_secs(600),
    resend_unknown: true,
};

fn classify(status: u16, retry_after: Option<Duration>) -> Attempt {
    super::classify(status, retry_after, &Refusals::default())
}

#[test]
fn only_an_attempt_without_any_answer_has_an_unknown_outcome() {
    let retry = |status, class| Resolution::RetryAfter {
        delay: Duration::ZERO,
        status,
        class,
    };
    assert!(retry(None, ErrorClass::Timeout).outcome_unknown());
    assert!(Resolution::Failed {
        status: None,
        class: ErrorClass::Transport
    }
    .outcome_unknown());
    for definite in [
        retry(Some(503), ErrorClass::ServerError),
        retry(Some(429), ErrorClass::Throttled),
        Resolution::Sent {
            status: 200,
            message_id: None,
        },
        Resolution::Deferred {
            delay: Duration::ZERO,
            class: ErrorClass::Connect,
        },
        Resolution::Released {
            class: ErrorClass::Released,
        },
        // No request at all: the address could never be delivered.
        Resolution::Failed {
            status: None,
            class: ErrorClass::InvalidEmail,
        },
    ] {
        assert!(!definite.outcome_unknown(), "{definite:?}");
    }
}

#[test]
fn status_classes_follow_the_provider_contract() {
    assert_eq!(
        classify(200, None),
        Attempt::Sent {
            status: 200,
            message_id: None
        }
    );
    assert_eq!(
        classify(202, None),
        Attempt::Sent {
            status: 202,
            message_id: None
        }
    );
    for s in [429, 500, 502, 503, 504, 599] {
        assert!(matches!(classify(s, None), Attempt::Retry { .. }), "{s}");
    }
    for (s, refusal) in [
        (401, Refusal::Account),
        (403, Refusal::Account),
        (404, Refusal::Endpoint),
        (405, Refusal::Endpoint),
    ] {
        assert_eq!(classify(s, None), Attempt::Refused { status: s, refusal });
    }
    // Configurable: with no refusal statuses, a 401 is the recipient's rejection.
    let none = Refusals {
        account: vec![],
        endpoint: vec![],
    };
    assert!(matches!(
        super::classify(401, None, &none),
        Attempt::Permanent { .. }
    ));
    for s in [400, 409, 410, 422, 499] {
        assert!(
            matches!(
                classify(s, None),
                Attempt::Permanent {
                    class: ErrorClass::Rejected,
                    ..
                }
            ),
            "{s}"
        );
    }
    for s in [100, 301, 302, 304, 600, 999] {
        assert!(
            matches!(
                classify(s, None),
                Attempt::Permanent {
                    class: ErrorClass::UnexpectedStatus,
                    ..
                }
            ),
            "{s}"
        );
    }
}

#[test]
fn a_refusal_releases_the_row_even_on_its_last_attempt() {
    for (attempt_no, refusal, class) in [
        (1, Refusal::Account, ErrorClass::AccountRefused),
        (5, Refusal::Account, ErrorClass::AccountRefused),
        (5, Refusal::Endpoint, ErrorClass::EndpointRefused),
    ] {
        let res = resolve(
            Attempt::Refused {
                status: 401,
                refusal,
            },
            attempt_no,
            &POLICY,
            0.5,
        );
        assert_eq!(res, Resolution::Released { class });
        assert_eq!(res.outcome(), "refused");
    }
}

#[test]
fn backoff_doubles_is_capped_and_jittered_within_half_a_step() {
    for attempt in 1..=10u32 {
        let step = Duration::from_secs(1 << (attempt - 1)).min(POLICY.cap);
        let lo = backoff(&POLICY, attempt, None, 0.0);
        let hi = backoff(&POLICY, attempt, None, 0.999_999);
        assert_eq!(lo, step / 2, "attempt {attempt}");
        assert!(
            hi <= step && hi > step.mul_f64(0.99),
            "attempt {attempt}: {hi:?}"
        );
    }
}

#[test]
fn backoff_never_comes_back_before_retry_after() {
    let d = backoff(&POLICY, 1, Some(Duration::from_secs(30)), 0.0);
    assert_eq!(d, Duration::from_secs(30));
    let capped = backoff(&POLICY, 1, Some(Duration::from_secs(86_400)), 0.0);
    assert_eq!(capped, POLICY.retry_after_cap);
}

#[test]
fn retryable_failures_become_failed_on_the_last_attempt() {
    let retry = Attempt::Retry {
        status: Some(503),
        class: ErrorClass::ServerError,
        retry_after: None,
    };
    for n in 1..POLICY.max_attempts {
        assert!(
            matches!(
                resolve(retry.clone(), n, &POLICY, 0.5),
                Resolution::RetryAfter { .. }
            ),
            "{n}"
        );
    }
    assert_eq!(
        resolve(retry, POLICY.max_attempts, &POLICY, 0.5),
        Resolution::Failed {
            status: Some(503),
            class: ErrorClass::ServerError
        }
    );
    let perm = Attempt::Permanent {
        status: Some(422),
        class: ErrorClass::Rejected,
    };
    assert!(matches!(
        resolve(perm, 1, &POLICY, 0.5),
        Resolution::Failed { .. }
    ));
}

#[test]
fn an_unreachable_provider_defers_the_row_without_ever_failing_it() {
    let undelivered = Attempt::Undelivered {
        class: ErrorClass::Connect,
    };
    // Even past the last attempt: the request never left, so the budget is not spent.
    for n in [1, POLICY.max_attempts, POLICY.max_attempts + 3] {
        assert_eq!(
            resolve(undelivered.clone(), n, &POLICY, 0.0),
            Resolution::Deferred {
                delay: backoff(&POLICY, n, None, 0.0),
                class: ErrorClass::Connect
            },
            "{n}"
        );
    }
}

#[test]
fn the_unreachable_pause_grows_with_the_outage_between_base_and_cap() {
    let p = |s: f64, j: f64| unreachable_pause(&POLICY, Duration::from_secs_f64(s), j);
    // A blip: at least the base (equal jitter: half fixed, half random).
    assert_eq!(p(0.0, 0.0), POLICY.base / 2);
    assert_eq!(p(0.0, 0.999_999).as_millis(), 999);
    // As long again as it has been down...
    assert_eq!(p(8.0, 0.0), Duration::from_secs(4));
    assert_eq!(p(8.0, 0.5), Duration::from_secs(6));
    // ...up to the cap.
    assert_eq!(p(3600.0, 0.0), POLICY.cap / 2);
    assert!(p(3600.0, 0.999_999) <= POLICY.cap);
    assert!(p(3600.0, 0.999_999) > POLICY.cap.mul_f64(0.99));
}

#[test]
fn error_classes_and_outcomes_keep_their_stored_and_exported_names() {
    // `last_error` in the database, `retry-failed --class`, and metric labels read these
    // names: renaming one silently splits a dashboard or a retry.
    let classes = [
        (ErrorClass::Throttled, "throttled"),
        (ErrorClass::ServerError, "server_error"),
        (ErrorClass::Timeout, "timeout"),
        (ErrorClass::Connect, "connect"),
        (ErrorClass::Transport, "transport"),
        (ErrorClass::Rejected, "rejected"),
        (ErrorClass::UnexpectedStatus, "unexpected_status"),
        (ErrorClass::InvalidEmail, "invalid_email"),
        (ErrorClass::OptedOut, "opted_out"),
        (ErrorClass::Released, "released"),
        (ErrorClass::AccountRefused, "account_refused"),
        (ErrorClass::EndpointRefused, "endpoint_refused"),
        (ErrorClass::VendorQuota, "vendor_quota"),
        (ErrorClass::Inactive, "inactive"),
    ];
    for (c, name) in classes {
        assert_eq!(c.as_str(), name);
    }
    let outcomes = [
        (
            Resolution::Sent {
                status: 200,
                message_id: None,
            },
            "sent",
        ),
        (
            Resolution::RetryAfter {
                delay: Duration::ZERO,
                status: None,
                class: ErrorClass::Timeout,
            },
            "retry",
        ),
        (
            Resolution::Failed {
                status: None,
                class: ErrorClass::Rejected,
            },
            "failed",
        ),
        (
            Resolution::Released {
                class: ErrorClass::OptedOut,
            },
            "opted_out",
        ),
        (
            Resolution::Released {
                class: ErrorClass::Released,
            },
            "released",
        ),
        (
            Resolution::Deferred {
                delay: Duration::ZERO,
                class: ErrorClass::Connect,
            },
            "deferred",
        ),
        (Resolution::Suppressed { status: 422 }, "suppressed"),
        (
            Resolution::Unconfirmed {
                class: ErrorClass::Timeout,
            },
            "unconfirmed",
        ),
        (
            Resolution::Released {
                class: ErrorClass::VendorQuota,
            },
            "refused",
        ),
    ];
    for (r, name) in outcomes {
        assert_eq!(r.outcome(), name);
    }
}

#[test]
fn retry_after_accepts_seconds_and_http_dates() {
    let now = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
    let later = httpdate::fmt_http_date(now + Duration::from_secs(120));
    assert_eq!(
        parse_retry_after(&later, now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after("soon", now), None);
}

#[test]
fn without_a_key_an_unknown_outcome_is_unconfirmed_at_once_and_an_answer_is_still_retried() {
    let no_key = RetryPolicy {
        resend_unknown: false,
        ..POLICY
    };
    for class in [ErrorClass::Timeout, ErrorClass::Transport] {
        let unknown = Attempt::Retry {
            status: None,
            class,
            retry_after: None,
        };
        for attempt_no in [1, POLICY.max_attempts] {
            let res = resolve(unknown.clone(), attempt_no, &no_key, 0.5);
            assert_eq!(
                res,
                Resolution::Unconfirmed { class },
                "{class:?} #{attempt_no}"
            );
            assert!(res.outcome_unknown());
        }
        assert!(matches!(
            resolve(unknown, 1, &POLICY, 0.5),
            Resolution::RetryAfter { .. }
        ));
    }
    let answered = Attempt::Retry {
        status: Some(503),
        class: ErrorClass::ServerError,
        retry_after: None,
    };
    assert!(matches!(
        resolve(answered, 1, &no_key, 0.5),
        Resolution::RetryAfter { .. }
    ));
}

#[test]
fn a_vendors_quota_releases_the_row_and_an_inactive_recipient_is_suppressed() {
    for attempt_no in [1, POLICY.max_attempts] {
        let quota = Attempt::Quota {
            status: 429,
            frees_in: None,
        };
        assert_eq!(
            resolve(quota, attempt_no, &POLICY, 0.5),
            Resolution::Released {
                class: ErrorClass::VendorQuota
            }
        );
        let inactive = Attempt::Suppressed { status: 422 };
        let res = resolve(inactive, attempt_no, &POLICY, 0.5);
        assert_eq!(res, Resolution::Suppressed { status: 422 });
        assert!(!res.outcome_unknown());
    }
    let sent = Attempt::Sent {
        status: 202,
        message_id: Some("m-1".into()),
    };
    assert_eq!(
        resolve(sent, 1, &POLICY, 0.5),
        Resolution::Sent {
            status: 202,
            message_id: Some("m-1".into())
        }
    );
}

#[test]
fn each_resolution_is_written_as_its_row_state_with_what_it_knows() {
    let sent = Resolution::Sent {
        status: 202,
        message_id: Some("m-1".into()),
    }
    .written();
    assert_eq!(
        (sent.state, sent.attempted, sent.status, sent.error),
        (RowState::Sent, true, Some(202), None)
    );
    assert_eq!(
        sent.message_id.as_deref(),
        Some("m-1"),
        "the vendor's id kept"
    );
    let inactive = Resolution::Suppressed { status: 422 }.written();
    assert_eq!(
        (inactive.state, inactive.error),
        (RowState::Suppressed, Some("inactive"))
    );
    let unknown = Resolution::RetryAfter {
        delay: Duration::from_millis(1500),
        status: None,
        class: ErrorClass::Timeout,
    }
    .written();
    assert_eq!(
        (unknown.state, unknown.unknown, unknown.delay_ms),
        (RowState::Pending, true, Some(1500)),
        "a timeout may have been delivered: its window starts"
    );
    let released = Resolution::Released {
        class: ErrorClass::Released,
    }
    .written();
    assert!(!released.attempted, "the claim's attempt is given back");
    let deferred = Resolution::Deferred {
        delay: Duration::from_secs(2),
        class: ErrorClass::Connect,
    }
    .written();
    assert_eq!(
        (deferred.attempted, deferred.unknown, deferred.delay_ms),
        (false, false, Some(2000))
    );
    let failed = Resolution::Failed {
        status: Some(400),
        class: ErrorClass::Rejected,
    }
    .written();
    assert_eq!(
        (failed.state, failed.status, failed.error),
        (RowState::Failed, Some(400), Some("rejected"))
    );
    let unconfirmed = Resolution::Unconfirmed {
        class: ErrorClass::Transport,
    }
    .written();
    assert_eq!(
        (unconfirmed.state, unconfirmed.unknown),
        (RowState::Unconfirmed, true)
    );
}
