//! The fleet-wide rate limit on real PostgreSQL: coordinators sharing one key, and real worker
//! processes against a fake provider that enforces exactly the limit.

use std::time::Duration;

use campaign_sender::rate::plan::DECREASE_FACTOR;
use campaign_sender::rate::plan::HANDOVER;
use campaign_sender::rate::Pacer;
use campaign_sender::rate::{Coordinator, CoordinatorSettings, Signals};
use campaign_sender::store::account::{keys_of_campaign, members};
use fake_provider::{ChaosKind, ChaosRequest, FakeConfig};
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

const LIMIT: f64 = 100.0;
const TTL: Duration = Duration::from_millis(800);
const SYNC: Duration = Duration::from_millis(50);

struct Pod {
    pacer: Pacer,
    signals: Signals,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn pod(pool: &PgPool, name: &str) -> Pod {
    let pacer = Pacer::new();
    let (c, signals) = Coordinator::new(
        pool.clone(),
        CoordinatorSettings {
            key: "provider.test".into(),
            worker: name.into(),
            campaign_id: CAMPAIGN.into(),
            limit_per_s: LIMIT,
            ttl: TTL,
            sync: SYNC,
            retry_after_cap: Duration::from_secs(600),
            daily_quota: None,
        },
        pacer.clone(),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(c.run(stop.clone()));
    Pod {
        pacer,
        signals,
        stop,
        task,
    }
}

/// Polls every 5 ms until `f` holds; returns when (panics after `limit`).
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Instant {
    let t0 = Instant::now();
    loop {
        if f() {
            return Instant::now();
        }
        assert!(t0.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_joining_pod_gets_capacity_only_after_the_handover_since_the_others_gave_it_up(
    pool: PgPool,
) {
    let a = pod(&pool, "a");
    until(
        Duration::from_secs(5),
        "a alone gets the whole limit",
        || near(a.pacer.rate(), LIMIT),
    )
    .await;
    // a has held it for over a second: only a's lowering itself (its share_changed_at, written
    // by the round that lowers) can keep its old rate in force for b's first second.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let b = pod(&pool, "b");
    let lowered = until(Duration::from_secs(5), "a lowers to half", || {
        near(a.pacer.rate(), LIMIT / 2.0)
    })
    .await;
    // Meanwhile the sum of the rates in force never exceeds the limit, and b gets nothing
    // until a's old rate has been out of force for the handover.
    let mut b_started = None;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let (ra, rb) = (a.pacer.rate(), b.pacer.rate());
        assert!(ra + rb <= LIMIT + 1e-9, "a {ra} + b {rb} over the limit");
        if rb > 0.0 && b_started.is_none() {
            b_started = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let b_started = b_started.expect("b never got a share");
    assert!(
        b_started.duration_since(lowered) >= HANDOVER - Duration::from_millis(50),
        "b got capacity {:?} after a lowered",
        b_started.duration_since(lowered)
    );
    assert!(near(b.pacer.rate(), LIMIT / 2.0), "b {}", b.pacer.rate());
    let members = members(&pool, "provider.test").await.unwrap();
    assert_eq!(members.len(), 2, "{members:?}");
    drop((a.task, b.task));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_crashed_pods_share_returns_only_after_its_ttl_and_the_handover(pool: PgPool) {
    let a = pod(&pool, "a");
    let b = pod(&pool, "b");
    until(Duration::from_secs(5), "an even split", || {
        near(a.pacer.rate(), LIMIT / 2.0) && near(b.pacer.rate(), LIMIT / 2.0)
    })
    .await;
    // A crash: the coordinator vanishes without leaving (no final write).
    a.task.abort();
    let crashed = Instant::now();
    let whole = until(Duration::from_secs(10), "b takes the whole limit", || {
        near(b.pacer.rate(), LIMIT)
    })
    .await;
    let took = whole.duration_since(crashed);
    // a's last renewal was at most SYNC before the crash: its share expires ≥ TTL − SYNC later,
    // and is committed for the handover after that.
    assert!(
        took >= TTL - SYNC + HANDOVER - Duration::from_millis(50),
        "capacity handed over after only {took:?}"
    );
    // Liveness, not the rule: the capacity does come back (TTL + the handover + a round, with
    // room for a loaded machine's late rounds).
    assert!(took <= TTL + Duration::from_millis(4000), "took {took:?}");
    drop(b.task);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_leaving_pod_stops_at_once_and_frees_its_share_after_the_handover(pool: PgPool) {
    let a = pod(&pool, "a");
    let b = pod(&pool, "b");
    until(Duration::from_secs(5), "an even split", || {
        near(a.pacer.rate(), LIMIT / 2.0) && near(b.pacer.rate(), LIMIT / 2.0)
    })
    .await;
    a.stop.cancel();
    a.task.await.unwrap();
    let left = Instant::now();
    assert_eq!(a.pacer.rate(), 0.0, "a left but may still send");
    let whole = until(Duration::from_secs(5), "b takes the whole limit", || {
        near(b.pacer.rate(), LIMIT)
    })
    .await;
    let took = whole.duration_since(left);
    assert!(
        took >= HANDOVER - Duration::from_millis(50),
        "handed over after {took:?}"
    );
    // Liveness, not the rule: handed over at all (the handover plus a round, with room for a
    // loaded machine's late rounds).
    assert!(took <= Duration::from_millis(4000), "took {took:?}");
    drop(b.task);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_429_seen_by_one_pod_pauses_every_pod_of_the_key_and_cuts_the_limit(pool: PgPool) {
    let a = pod(&pool, "a");
    let b = pod(&pool, "b");
    until(Duration::from_secs(5), "an even split", || {
        near(a.pacer.rate(), LIMIT / 2.0) && near(b.pacer.rate(), LIMIT / 2.0)
    })
    .await;
    let paused_for_status = || async {
        let keys = keys_of_campaign(&pool, CAMPAIGN).await.unwrap();
        assert_eq!(keys.len(), 1, "{keys:?}");
        keys[0].paused_for_s
    };
    assert_eq!(paused_for_status().await, None, "paused before any 429");
    a.signals.throttled(Some(Duration::from_secs(2)));
    let reported = Instant::now();
    let (effective, paused_for): (f64, f64) = {
        let t0 = Instant::now();
        loop {
            let r: Option<(f64, f64)> = sqlx::query_as(
                "SELECT effective_per_s, extract(epoch FROM paused_until - clock_timestamp())::float8
                   FROM rate_limits WHERE limit_key = 'provider.test' AND paused_until IS NOT NULL",
            )
            .fetch_optional(&pool)
            .await
            .unwrap();
            if let Some(r) = r {
                break r;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "the pause was never written"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert!(
        (effective - LIMIT * DECREASE_FACTOR).abs() < 1.0,
        "{effective}"
    );
    assert!(paused_for > 1.5, "paused for {paused_for} s");
    // `status` shows the pause (what it reads for each key of the campaign).
    let shown = paused_for_status().await;
    assert!(shown.is_some_and(|s| s > 1.0), "status shows {shown:?}");
    // b, which saw no 429 itself, gets no token until the pause is over.
    let stop = CancellationToken::new();
    until(Duration::from_secs(5), "b hears of the pause", || {
        b.pacer.paused_until().is_some()
    })
    .await;
    b.pacer.acquire(&stop).await.unwrap();
    assert!(
        reported.elapsed() >= Duration::from_millis(1800),
        "b sent {:?} after the 429",
        reported.elapsed()
    );
    drop((a.task, b.task));
}

/// `campaign-sender run` settings for the fleet tests.
fn env<'a>(mail_url: &'a str, rate: &'a str, worker: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", mail_url),
        ("WORKER_ID", worker),
        ("MAIL_RATE_PER_S", rate),
        ("SEND_CONCURRENCY", "16"),
        ("BATCH_SIZE", "50"),
        ("LEASE_S", "5"),
        ("CONNECT_TIMEOUT_MS", "500"),
        ("READ_TIMEOUT_MS", "1000"),
        ("DEADLINE_S", "60"),
        ("IDLE_POLL_MS", "100"),
    ]
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn four_worker_processes_share_one_limit_and_the_provider_never_says_429(pool: PgPool) {
    // The provider enforces exactly the limit, with the burst of the drain benchmarks (100 ms of
    // tolerance: arrival jitter on a loaded 2-core machine running the whole suite in parallel
    // exceeded a 25 ms one); each worker is told the fleet's limit, not a quarter of it, so
    // pods not sharing would be 4× over and answered thousands of 429s.
    seed(&pool, CAMPAIGN, 2000).await;
    let p = provider(FakeConfig {
        rate_per_s: Some(200.0),
        burst: 20,
        latency_mean_ms: 20,
        latency_jitter_ms: 10,
        ..Default::default()
    })
    .await;
    let db = worker_url(&pool).await;
    let names = ["w0", "w1", "w2", "w3"];
    let children: Vec<_> = names
        .iter()
        .map(|n| spawn_sender(&["run"], &db, &env(&p.url, "200", n)))
        .collect();
    let mut reports = Vec::new();
    for c in children {
        let (code, out, err) = finish(c, Duration::from_secs(60)).await;
        assert_eq!(code, 0, "{out}\n{err}");
        reports
            .push(serde_json::from_str::<serde_json::Value>(out.lines().last().unwrap()).unwrap());
    }
    let s = p.fake.stats();
    assert_eq!(s.throttled_429, 0, "{s:?}");
    assert!(s.max_accepted_in_1s <= 200 + 20, "{s:?}");
    assert_eq!(s.delivered, 2000, "{s:?}");
    assert_eq!(s.members_delivered_more_than_once, 0);
    // The limit was shared, not taken by one: every worker sent a real part.
    for r in &reports {
        assert!(r["stats"]["sent"].as_u64().unwrap() >= 200, "{r}");
    }
}

/// Rate-limit members whose share has not expired.
async fn live_pods(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM rate_pods WHERE expires_at > clock_timestamp()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A worker whose run has ended (done, deadline, SIGTERM, too many failures) has left the fleet
/// before `run` returns: its row is marked gone, so the other pods get its capacity one second
/// later — not after `RATE_SHARE_TTL_MS`, and not never while its process lingers, renewing a
/// share nobody uses.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_worker_has_left_the_fleet_when_its_run_returns(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let p = provider(Default::default()).await;
    let w = worker(&pool, config(&p.url)).await;
    let report = w.run(CancellationToken::new()).await.unwrap();
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    assert_eq!(p.fake.stats().delivered, 50);
    // The worker still exists, as a process does between its report and its exit.
    assert_eq!(
        live_pods(&pool).await,
        0,
        "the finished worker still holds a live share"
    );
    // Nothing renews it afterwards either (RATE_SYNC_MS is 250 ms, the TTL 3 s).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        live_pods(&pool).await,
        0,
        "the finished worker renewed its share"
    );
    drop(w);
}

/// A worker driven step by step (tests, tools) and then dropped leaves the fleet too: its
/// coordinator does not live on in the runtime, renewing a share nobody uses.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_worker_dropped_after_a_step_leaves_the_fleet(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    let p = provider(Default::default()).await;
    let w = worker(&pool, config(&p.url)).await;
    let far = Instant::now() + Duration::from_secs(60);
    w.step(far, &CancellationToken::new()).await.unwrap();
    assert_eq!(p.fake.stats().delivered, 10);
    assert_eq!(
        live_pods(&pool).await,
        1,
        "the stepping worker never joined"
    );
    drop(w);
    let t0 = Instant::now();
    while live_pods(&pool).await > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "the dropped worker still renews its share"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lone worker paces itself at the whole limit (one second of 100 requests at 100/s, not a
/// burst), and its report says how long the gate waited for the pacer: the run was rate-bound,
/// so most of it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_lone_worker_sends_at_its_limit_and_reports_the_time_it_waited_for_it(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    let p = provider(Default::default()).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 100;
    let t0 = Instant::now();
    let report = run_to_end(&pool, cfg).await;
    let took = t0.elapsed();
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    let s = p.fake.stats();
    assert_eq!(s.delivered, 100, "{s:?}");
    assert!(s.max_accepted_in_1s <= 100 + 2, "{s:?}");
    assert!(
        took >= Duration::from_millis(900),
        "100 at 100/s in {took:?}"
    );
    let waited = Duration::from_millis(report.stats.pacer_wait_ms);
    assert!(
        waited >= Duration::from_millis(500) && waited <= took,
        "waited {waited:?} for the pacer in a {took:?} run"
    );
}

/// A 429 pauses the pod that got it at once, for its `Retry-After`, without waiting for the
/// fleet: here no coordinator round can commit (the key's row is locked, as a slow or failing
/// database would), so the fleet-wide pause never lands and the pod's own pause is all that
/// keeps it from sending into the provider's refusal until its share lapses.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_429_pauses_its_own_pod_at_once_even_when_the_fleet_cannot_be_told(pool: PgPool) {
    const N: u64 = 60;
    seed(&pool, CAMPAIGN, N as i64).await;
    let p = provider(Default::default()).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 40;
    cfg.send_concurrency = 4;
    let w = worker(&pool, cfg).await;
    let run = tokio::spawn(async move { w.run(CancellationToken::new()).await.unwrap() });
    until_stats(&p, Duration::from_secs(10), "sending started", |s| {
        s.delivered >= 5
    })
    .await;
    // No round commits from here on: the fleet cannot hear of the 429.
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM rate_limits FOR UPDATE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let storm_ms = unix_ms_now();
    p.fake.set_chaos(ChaosRequest {
        kind: ChaosKind::Storm429,
        seconds: 0.5,
        retry_after_s: 2,
        ..Default::default()
    });
    // A fixed stretch for an absence (no delivery inside the Retry-After): a loaded machine can
    // only deliver less in it, never more. The first 429 comes within the 0.5-s storm, so its
    // 2-s pause covers the whole window checked.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let during: Vec<i64> = p
        .fake
        .deliveries()
        .iter()
        .filter(|d| (storm_ms + 300..storm_ms + 1800).contains(&d.first_ms))
        .map(|d| d.member_id)
        .collect();
    assert!(
        during.is_empty(),
        "delivered during the 2-s Retry-After: {during:?}"
    );
    lock.rollback().await.unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    let s = p.fake.stats();
    assert_eq!(
        (s.delivered, s.members_delivered_more_than_once),
        (N, 0),
        "{s:?}"
    );
    assert!(s.chaos_429 >= 1, "the storm met no request: {s:?}");
}

/// A pod whose campaign has rows left but none claimable yet (all in retry backoff) holds no
/// share of the fleet's limit while it waits: its weight is 0, so the pods of other campaigns
/// on the same account get the whole limit.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_pod_whose_rows_all_wait_in_backoff_holds_no_share_of_the_limit(pool: PgPool) {
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, attempts, not_before)
         SELECT $1, g, 'member' || g || '@example.com', 1, now() + interval '60 seconds'
           FROM generate_series(1, 20) g",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let p = provider(Default::default()).await;
    let w = worker(&pool, config(&p.url)).await;
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { w.run(cancel).await }
    });
    until_some(
        Duration::from_secs(10),
        "the pod joined the fleet",
        || async { (live_pods(&pool).await > 0).then_some(()) },
    )
    .await;
    // An absence: six rounds and many empty claims later the pod still asks for nothing (a
    // loaded machine only makes fewer of them).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let weight: f64 = sqlx::query_scalar(
        "SELECT weight FROM rate_pods WHERE worker = 'test-worker' AND expires_at > clock_timestamp()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(weight, 0.0, "a pod with nothing claimable holds a share");
    assert_eq!(p.fake.stats().requests, 0);
    cancel.cancel();
    run.await.unwrap().unwrap();
}
