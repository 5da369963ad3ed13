//! The provider account beyond a recipient: a refusal of the account or the endpoint stops the
//! whole fleet of a limit key and fails no row; the daily quota is never exceeded; a live limit
//! is adopted by running pods within a second, both ways.

use std::time::{Duration, Instant};

use campaign_sender::config::RunConfig;
use campaign_sender::exit;
use campaign_sender::report::{RunReport, StopReason};
use fake_provider::{ChaosKind, ChaosRequest, FakeConfig};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

const KEY: &str = "provider.test";

fn pod_config(url: &str, name: &str) -> RunConfig {
    let mut cfg = config(url);
    cfg.worker_id = Some(name.into());
    cfg.rate_limit_key = Some(KEY.into());
    cfg.mail_rate_per_s = 200;
    cfg
}

/// A worker `name` running `cfg` in the background until it stops by itself or `cancel`.
async fn start(
    pool: &PgPool,
    cfg: RunConfig,
    cancel: &CancellationToken,
) -> tokio::task::JoinHandle<RunReport> {
    let w = worker(pool, cfg).await;
    let cancel = cancel.clone();
    tokio::spawn(async move { w.run(cancel).await.unwrap() })
}

async fn operator(pool: &PgPool, args: &[&str]) -> (i32, String, String) {
    let db = operator_url(pool).await;
    finish(spawn_sender(args, &db, &[]), Duration::from_secs(60)).await
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// A pod that meets a refusal stops at once, before its next rate round: the refusal still
/// reaches the key (one last round as it leaves), so the other pods, the next run and `status`
/// know of it. Rounds here are 2 s apart, so only that last round can have recorded it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_pod_that_stops_at_its_first_refusal_still_records_it_for_the_key(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let p = slow_provider(5).await;
    p.fake.set_chaos(ChaosRequest {
        kind: ChaosKind::Refuse,
        seconds: 120.0,
        status: 401,
        ..Default::default()
    });
    let mut cfg = pod_config(&p.url, "pod-a");
    cfg.rate_sync_ms = 2000;
    cfg.rate_share_ttl_ms = 6000;
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(10), start(&pool, cfg, &cancel).await)
        .await
        .expect("the pod stopped")
        .unwrap();
    assert_eq!(r.reason, StopReason::AccountRefused, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "the pod took {:?}: a second round may have recorded the refusal",
        started.elapsed()
    );
    let key = campaign_sender::store::account::key_state(&pool, KEY)
        .await
        .unwrap()
        .expect("the key's row");
    let refused = key.refused.expect("the refusal is recorded for the key");
    assert_eq!(refused.status, 401);
}

/// One pod's API calls start answering 401 (its key revoked): every pod of the limit key stops
/// within a second — also the one the provider still answers — no row fails or spends an
/// attempt, `run` exits 4, and after `resume` the campaign is delivered.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_refused_account_stops_every_pod_of_the_key_within_a_second_and_fails_no_row(
    pool: PgPool,
) {
    const N: i64 = 3000;
    seed(&pool, CAMPAIGN, N).await;
    let p = slow_provider(20).await;
    let cancel = CancellationToken::new();
    let a = start(&pool, pod_config(&p.url, "pod-a"), &cancel).await;
    let b = start(&pool, pod_config(&p.url, "pod-b"), &cancel).await;
    until_stats(&p, Duration::from_secs(30), "both sending", |s| {
        s.delivered >= 200
    })
    .await;
    p.fake.set_chaos(ChaosRequest {
        kind: ChaosKind::Refuse,
        seconds: 120.0,
        status: 401,
        worker: Some("pod-a".into()),
        ..Default::default()
    });
    let refused_ms = unix_ms_now();
    let (ra, rb) = tokio::time::timeout(Duration::from_secs(10), async {
        (a.await.unwrap(), b.await.unwrap())
    })
    .await
    .expect("the pods did not stop after the refusal");
    for r in [&ra, &rb] {
        assert_eq!(r.reason, StopReason::AccountRefused, "{r:?}");
        assert_eq!(r.exit_code, exit::Exit::AccountRefused, "{r:?}");
        assert_eq!(r.stats.failed, 0, "{r:?}");
    }
    // pod-b was never refused by the provider: it stopped because the key was.
    let seen = p.fake.workers();
    let b_last = seen["pod-b"].last_ms;
    assert!(
        b_last <= refused_ms + 1000,
        "pod-b started a request {} ms after pod-a's first refusal",
        b_last - refused_ms
    );
    assert!(p.fake.stats().chaos_refused >= 1);
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM campaign_targets WHERE state = 'failed'"
        )
        .await,
        0
    );
    let spent = count(
        &pool,
        "SELECT count(*) FROM campaign_targets WHERE state <> 'sent' AND attempts > 0",
    )
    .await;
    assert_eq!(spent, 0, "a refused or released row kept an attempt");
    // The refused attempt was released, not failed (and may have gone out from pod-b since).
    assert!(ra.stats.refused >= 1, "{ra:?}");

    // What the operator sees, and a rerun before the fix: stopped at once, nothing sent.
    let (code, out, _) = operator(&pool, &["status", "--campaign", CAMPAIGN]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("REFUSED    the provider refused the account: 401; check its credentials — MAIL_API_KEY"),
        "{out}"
    );
    let before = p.fake.stats().requests;
    let claimed_sql = "SELECT count(*) FROM campaign_targets WHERE claim_id IS NOT NULL";
    let claimed = count(&pool, claimed_sql).await;
    let again = run_to_end(&pool, pod_config(&p.url, "pod-c")).await;
    assert_eq!(again.exit_code, exit::Exit::AccountRefused, "{again:?}");
    assert_eq!(p.fake.stats().requests, before, "a request while refused");
    assert_eq!(
        count(&pool, claimed_sql).await,
        claimed,
        "a run on a refused key claimed rows"
    );

    // Fixed (the key rotated in), resumed: the campaign is delivered.
    p.fake.set_chaos(ChaosRequest::default());
    let (code, out, err) = operator(&pool, &["resume", "--campaign", CAMPAIGN]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("provider.test: refusal lifted"), "{out}");
    let done = run_to_end(&pool, pod_config(&p.url, "pod-d")).await;
    assert_eq!(done.reason, StopReason::Done, "{done:?}");
    assert_eq!(states(&pool).await.get("sent"), Some(&N));
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);
}

/// `MAIL_URL` without its path: the provider's router answers 404 to every request. That is
/// the endpoint, not 100 recipients: exit 4 at the first answers, nothing failed, and `status`
/// says to check the path.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_mail_url_without_its_path_is_an_endpoint_refusal_not_failed_rows(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    let p = provider(FakeConfig::default()).await;
    let wrong = p.url.trim_end_matches("/v1/send").to_string() + "/";
    let report = run_to_end(&pool, pod_config(&wrong, "pod-a")).await;
    assert_eq!(report.exit_code, exit::Exit::AccountRefused, "{report:?}");
    assert_eq!(report.campaign.failed, 0, "{report:?}");
    assert!(report.stats.requests <= 50, "kept trying: {report:?}");
    let (_, out, _) = operator(&pool, &["status", "--campaign", CAMPAIGN]).await;
    assert!(
        out.contains(
            "the endpoint answered 404: check MAIL_URL (json: the whole URL with its path"
        ),
        "{out}"
    );
    let (code, out, _) = operator(&pool, &["resume", "--key", KEY]).await;
    assert_eq!(code, 0);
    assert!(out.contains("refusal lifted"), "{out}");
    let fixed = run_to_end(&pool, pod_config(&p.url, "pod-a")).await;
    assert_eq!(
        (fixed.exit_code, fixed.campaign.sent),
        (exit::Exit::Done, 300),
        "{fixed:?}"
    );
}

/// `serve` meets a refusal by idling without a share, not by exiting into a restart loop, and
/// sends again by itself once `resume --key` lifts it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn serve_idles_while_the_key_is_refused_and_sends_after_resume(pool: PgPool) {
    seed(&pool, CAMPAIGN, 200).await;
    let p = provider(FakeConfig::default()).await;
    p.fake.set_chaos(ChaosRequest {
        kind: ChaosKind::Refuse,
        seconds: 120.0,
        status: 403,
        ..Default::default()
    });
    let w = worker(&pool, pod_config(&p.url, "pod-a")).await;
    let cancel = CancellationToken::new();
    let serving = tokio::spawn({
        let cancel = cancel.clone();
        async move { w.serve(cancel).await }
    });
    until_idle(&pool, "pod-a").await;
    let refused = p.fake.stats().requests;
    assert!(refused >= 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(p.fake.stats().requests, refused, "requests while refused");
    p.fake.set_chaos(ChaosRequest::default());
    let (code, _, err) = operator(&pool, &["resume", "--key", KEY]).await;
    assert_eq!(code, 0, "{err}");
    until_some(Duration::from_secs(30), "all sent after resume", || async {
        (states(&pool).await.get("sent") == Some(&200)).then_some(())
    })
    .await;
    cancel.cancel();
    let report = serving.await.unwrap().unwrap();
    assert_eq!(report.exit_code, exit::Exit::Done);
    assert_eq!(report.campaign.failed, 0);
}

/// Pods joining and leaving while the quota runs out never start more requests than
/// `MAIL_DAILY_QUOTA` (a leaving pod gives its unspent grant back); at the quota `run` exits 0
/// ("done for now"), and a new run sends nothing.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_daily_quota_is_never_exceeded_by_pods_joining_and_leaving(pool: PgPool) {
    const QUOTA: u64 = 300;
    seed(&pool, CAMPAIGN, 2000).await;
    let p = slow_provider(10).await;
    let with_quota = |name: &str| {
        let mut cfg = pod_config(&p.url, name);
        cfg.mail_daily_quota = Some(QUOTA);
        cfg
    };
    let cancel_a = CancellationToken::new();
    let cancel = CancellationToken::new();
    let a = start(&pool, with_quota("pod-a"), &cancel_a).await;
    until_stats(&p, Duration::from_secs(30), "a sending", |s| {
        s.requests >= 60
    })
    .await;
    let b = start(&pool, with_quota("pod-b"), &cancel).await;
    until_stats(&p, Duration::from_secs(30), "b joined", |s| {
        s.requests >= 140
    })
    .await;
    cancel_a.cancel();
    let c = start(&pool, with_quota("pod-c"), &cancel).await;
    let reports = tokio::time::timeout(Duration::from_secs(30), async {
        vec![a.await.unwrap(), b.await.unwrap(), c.await.unwrap()]
    })
    .await
    .expect("the pods did not stop at the quota");
    let requests = p.fake.stats().requests;
    assert!(
        requests <= QUOTA,
        "{requests} requests against a quota of {QUOTA}"
    );
    assert!(
        requests >= QUOTA - 20,
        "only {requests} of {QUOTA}: the quota was not used"
    );
    for r in &reports[1..] {
        assert_eq!(r.reason, StopReason::QuotaExhausted, "{r:?}");
        assert_eq!(r.exit_code, exit::Exit::Done, "{r:?}");
    }
    let late = run_to_end(&pool, with_quota("pod-d")).await;
    assert_eq!(late.reason, StopReason::QuotaExhausted, "{late:?}");
    assert_eq!(
        p.fake.stats().requests,
        requests,
        "a request over the quota"
    );
    let (_, out, _) = operator(&pool, &["status", "--campaign", CAMPAIGN]).await;
    assert!(
        out.contains(&format!("of {QUOTA} requests in the last 24 h; FULL")),
        "{out}"
    );
}

/// Requests the provider received in [from, to) (Unix ms), from each delivery's arrival.
fn arrived(p: &TestProvider, from: u64, to: u64) -> usize {
    p.fake
        .deliveries()
        .iter()
        .filter(|d| (from..to).contains(&d.first_ms))
        .count()
}

/// `campaign-sender limit --rate` reaches running pods within a second, lower and higher, and
/// holds whatever they were configured with; `--clear` gives them back their own.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_live_limit_is_adopted_by_running_pods_within_a_second_both_ways(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20_000).await;
    let p = slow_provider(10).await;
    let cancel = CancellationToken::new();
    let a = start(&pool, pod_config(&p.url, "pod-a"), &cancel).await;
    let b = start(&pool, pod_config(&p.url, "pod-b"), &cancel).await;
    until_stats(&p, Duration::from_secs(30), "sending", |s| {
        s.delivered >= 200
    })
    .await;

    let (code, _, err) = operator(&pool, &["limit", "--key", KEY, "--rate", "50"]).await;
    assert_eq!(code, 0, "{err}");
    let lowered = unix_ms_now();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let low = arrived(&p, lowered + 1000, lowered + 2000);
    // 50/s plus each pod's burst of 2.
    assert!(
        low <= 54,
        "{low} requests in a second at a live limit of 50"
    );

    let (code, _, _) = operator(&pool, &["limit", "--key", KEY, "--rate", "300"]).await;
    assert_eq!(code, 0);
    let raised = unix_ms_now();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let high = arrived(&p, raised + 1000, raised + 2000);
    assert!(
        (250..=306).contains(&high),
        "{high} requests in a second at a live limit of 300 (pods configured for 200)"
    );

    let (code, out, _) = operator(&pool, &["limit", "--key", KEY, "--clear"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("back to the pods' MAIL_RATE_PER_S"), "{out}");
    let cleared = unix_ms_now();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let own = arrived(&p, cleared + 1000, cleared + 2000);
    assert!(
        own <= 204,
        "{own} requests in a second back at MAIL_RATE_PER_S 200"
    );
    cancel.cancel();
    let t0 = Instant::now();
    let _ = (a.await, b.await);
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(p.fake.stats().throttled_429, 0);

    // Every pod gone, no live limit: no rate is in force, and none is made up (#34 item 10).
    for args in [
        &["limit", "--key", KEY][..],
        &["status", "--campaign", CAMPAIGN],
    ] {
        let (code, out, err) = operator(&pool, args).await;
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.contains("no limit in force") && !out.contains(" 0/s"),
            "{args:?}: {out}"
        );
    }
}
