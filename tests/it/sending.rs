//! Sending: retries, backoff, budget leftovers, the idempotency key, opt-outs after the claim.

use std::time::Duration;

use campaign_sender::config::RunConfig;
use campaign_sender::report::RunReport;
use campaign_sender::store::Store;
use campaign_sender::worker::Step;
use fake_provider::FakeConfig;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn retry_backs_off_then_fails_after_max_attempts(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    let p = provider(FakeConfig {
        always_unavailable: true,
        ..Default::default()
    })
    .await;
    let mut cfg = config(&p.url);
    cfg.max_attempts = 3;
    cfg.backoff_base_ms = 300;
    cfg.backoff_max_ms = 300;
    let w = worker(&pool, cfg).await;
    let cancel = CancellationToken::new();

    let s = Store::new(pool.clone(), CAMPAIGN);
    for attempt in 1..=3 {
        assert!(matches!(
            w.step(far(), &cancel).await.unwrap(),
            Step::Worked { claimed: 1 }
        ));
        let (state, attempts, status, error) = state_of(&pool, 1).await;
        assert_eq!(
            (attempts, status, error.as_deref()),
            (attempt, Some(503), Some("server_error"))
        );
        if attempt < 3 {
            assert_eq!(state, "pending");
            // Backing off: not claimable until not_before (>= half the 300 ms step).
            let wait: f64 = sqlx::query_scalar(
                "SELECT extract(epoch FROM not_before - now())::float8 FROM campaign_targets WHERE member_id = 1",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            assert!(wait > 0.1, "retry not delayed: {wait}s");
            assert!(
                matches!(w.step(far(), &cancel).await.unwrap(), Step::Empty(r) if r.waiting == 1)
            );
            tokio::time::sleep(Duration::from_secs_f64(wait + 0.05)).await;
        } else {
            assert_eq!(state, "failed");
        }
    }
    assert_eq!(s.remaining().await.unwrap().total(), 0);
    assert_eq!(p.fake.stats().requests, 3);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn time_budget_leftovers_are_released_without_counting_an_attempt(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20).await;
    let p = slow_provider(200).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 1;
    let w = worker(&pool, cfg).await;
    let stop_at = Instant::now() + Duration::from_millis(500);
    w.step(stop_at, &CancellationToken::new()).await.unwrap();

    let st = states(&pool).await;
    let sent = st.get("sent").copied().unwrap_or(0);
    let pending = st.get("pending").copied().unwrap_or(0);
    // 500 ms at 200 ms a request, one at a time: at most 3 answered and 1 in flight at the
    // budget's end (fewer on a loaded machine), the rest released.
    assert!(sent <= 4, "sent {sent} after the budget");
    assert_eq!(sent + pending, 20, "{st:?}");
    let counted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE state = 'pending' AND (attempts <> 0 OR not_before IS NOT NULL OR last_error <> 'released')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(counted, 0, "a released row kept its attempt or a wait");
    // Released rows are claimable at once.
    assert_eq!(store(&pool).remaining().await.unwrap().ready, pending);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_cancelled_run_releases_unsent_rows_at_once(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let p = slow_provider(100).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 2;
    let w = worker(&pool, cfg).await;
    let cancel = CancellationToken::new();
    let stop = async {
        // SIGTERM once sending has begun: the whole batch is claimed, two requests in flight.
        until_stats(&p, Duration::from_secs(30), "sending started", |s| {
            s.delivered >= 1
        })
        .await;
        cancel.cancel();
    };
    let (report, ()) = tokio::join!(w.run(cancel.clone()), stop);
    let report = report.unwrap();
    assert_eq!(report.exit_code.code(), 1);
    let st = states(&pool).await;
    assert_eq!(
        st.get("sending"),
        None,
        "rows left leased after shutdown: {st:?}"
    );
    assert!(report.stats.released >= 30, "{:?}", report.stats);
    assert_eq!(report.stats.sent as i64, *st.get("sent").unwrap());
}

/// Runs `cfg` to the end while sampling how many rows are `sending` every millisecond: the
/// report and the most seen at once.
async fn run_sampling_held(pool: &PgPool, cfg: RunConfig) -> (RunReport, i64) {
    let w = worker(pool, cfg).await;
    let done = CancellationToken::new();
    let sampler = {
        let (pool, done) = (pool.clone(), done.clone());
        tokio::spawn(async move {
            let (mut max, mut samples) = (0i64, 0u32);
            // Bounded: the run ends within its deadline; at most 20 000 samples.
            while !done.is_cancelled() && samples < 20_000 {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM campaign_targets WHERE state = 'sending'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                max = max.max(n);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (max, samples)
        })
    };
    let report = w.run(CancellationToken::new()).await.unwrap();
    done.cancel();
    let (max, samples) = sampler.await.unwrap();
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    assert!(
        samples > 20,
        "too few samples ({samples}) to see the holding"
    );
    (report, max)
}

/// What a SIGKILL can leave `sending` (and another pod must wait a lease for) is bounded by
/// what one pod holds: fewer than `BATCH_SIZE + low_water` rows, counting rows in flight and
/// answered-but-unwritten ones, not only unsent ones. Slow flushes and wide concurrency make the
/// unwritten rows pile up if the claimer forgets them.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_worker_never_holds_more_than_a_batch_plus_the_low_water_mark(pool: PgPool) {
    const N: i64 = 2000;
    seed(&pool, CAMPAIGN, N).await;
    let p = slow_provider(20).await;
    let mut cfg = config(&p.url);
    cfg.batch_size = 50;
    cfg.send_concurrency = 64; // low_water = min(max(64, 5000 / 2), 50) = 50
    cfg.flush_max_rows = 1000;
    cfg.flush_interval_ms = 500;
    let bound = 50 + 50;
    let (report, max) = run_sampling_held(&pool, cfg).await;
    assert_eq!(report.campaign.sent, N, "{report:?}");
    assert!(
        max < bound,
        "one worker held {max} rows `sending` (bound {bound})"
    );
    // Not vacuous: the next batch was claimed while the last one was still held (pipelining).
    assert!(
        max > 50,
        "never more than one batch held ({max}): no pipelining"
    );
}

/// The claimer keeps about half a second of work (at the pod's share, here the whole 300/s)
/// claimed ahead of the sends, even when SEND_CONCURRENCY is small — and no more: low_water =
/// 150 + what is in flight (≤ 16), and each claim takes that many, so at most ~330 are held. A
/// pod that claimed only when fewer than SEND_CONCURRENCY rows were left would let its sends
/// run dry at every batch boundary (most held ~215); one that kept a whole batch ahead would
/// hold up to 399, more than a SIGKILL should leave for a lease to return.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_worker_keeps_half_a_second_of_work_claimed_ahead_of_its_sends(pool: PgPool) {
    const N: i64 = 1000;
    seed(&pool, CAMPAIGN, N).await;
    let p = slow_provider(20).await;
    let mut cfg = config(&p.url);
    cfg.batch_size = 200;
    cfg.send_concurrency = 16;
    cfg.mail_rate_per_s = 300;
    let (report, max) = run_sampling_held(&pool, cfg).await;
    assert_eq!(report.campaign.sent, N, "{report:?}");
    assert!(
        max > 250,
        "never more than {max} rows held: the next batch waited for the last one to drain"
    );
    assert!(max < 200 + 150, "held {max}, over BATCH_SIZE + low_water");
}

/// Pods sharing a limit claim by their own share, not by the fleet's limit: two pods at 200/s
/// each hold about half a second of 200/s (low_water ~100), not of 400/s. Sized by the limit,
/// each would hold up to a whole batch more, and at the end of a campaign a few pods would be
/// left with seconds of work while the others idle (the 8-pod tail).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_pod_claims_by_its_own_share_not_the_fleets_limit(pool: PgPool) {
    seed(&pool, CAMPAIGN, 6000).await;
    let p = slow_provider(20).await;
    let cancel = CancellationToken::new();
    let mut runs = Vec::new();
    for name in ["pod-a", "pod-b"] {
        let mut cfg = config(&p.url);
        cfg.worker_id = Some(name.into());
        cfg.mail_rate_per_s = 400;
        cfg.batch_size = 200;
        let w = worker(&pool, cfg).await;
        let cancel = cancel.clone();
        runs.push(tokio::spawn(async move { w.run(cancel).await }));
    }
    // Settled: both pods hold a share (the first alone briefly had the whole limit).
    until_stats(&p, Duration::from_secs(30), "both sending", |s| {
        s.delivered >= 600
    })
    .await;
    let mut max = 0i64;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2000) {
        let n: i64 =
            sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE state = 'sending'")
                .fetch_one(&pool)
                .await
                .unwrap();
        max = max.max(n);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cancel.cancel();
    for r in runs {
        r.await.unwrap().unwrap();
    }
    // Each pod: fewer than twice low_water (~100 + in flight) rows; sized by the limit (200),
    // each would hold up to 400.
    assert!(
        max < 460,
        "the two pods held {max} rows: claims sized by the fleet's limit"
    );
    assert!(max > 100, "held only {max}: no claim ahead");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_idempotency_key_is_the_same_on_every_attempt(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    // Members 25, 50, 75, 100 get a 503 on their first attempt and are retried.
    let p = provider(FakeConfig {
        faults: true,
        ..Default::default()
    })
    .await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code.code(), 0);
    let stats = p.fake.stats();
    assert_eq!(
        (stats.faults_503, stats.delivered, stats.requests),
        (4, 100, 104)
    );
    for d in p.fake.deliveries() {
        assert_eq!(
            d.keys,
            vec![format!("{CAMPAIGN}:{}", d.member_id)],
            "member {}",
            d.member_id
        );
    }
    for m in [25, 50, 75, 100] {
        assert_eq!(state_of(&pool, m).await.0, "sent");
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_opt_out_committed_after_claim_but_before_send_stops_that_send(pool: PgPool) {
    let (delivered, stats) = block_mid_run(
        &pool,
        "UPDATE campaign_targets SET opted_out_at = now()
          WHERE member_id > 30 OR member_id BETWEEN 11 AND 15",
    )
    .await;
    assert!(
        delivered.iter().all(|&m| !blocked_mid_run(m)),
        "sent after opt-out: {delivered:?}"
    );
    assert_eq!(delivered.len(), 25);
    assert_eq!(stats.opted_out, 15);
    let (state, attempts, _, error) = state_of(&pool, 35).await;
    assert_eq!(
        (state.as_str(), attempts, error.as_deref()),
        ("pending", 0, Some("opted_out"))
    );
    assert_eq!(store(&pool).remaining().await.unwrap().total(), 0);
}

/// Results are written in groups (every FLUSH_MAX_ROWS, FLUSH_INTERVAL_MS after the oldest, or
/// early for a waiting claimer), not one statement per answer: writes stay far fewer than
/// sends. Each fenced write is one statement, and its rows share that statement's `updated_at`.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn results_are_written_in_groups_not_one_statement_per_answer(pool: PgPool) {
    const N: i64 = 1000;
    seed(&pool, CAMPAIGN, N).await;
    let p = slow_provider(20).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 16;
    cfg.flush_max_rows = 100;
    cfg.flush_interval_ms = 200;
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(report.campaign.sent, N, "{report:?}");
    let writes: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT updated_at) FROM campaign_targets WHERE state = 'sent'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        writes <= N / 5,
        "{N} results written in {writes} statements"
    );
}

/// A result write the database keeps refusing (here a trigger; a full disk or a broken
/// constraint would do the same) is retried for several seconds — a blip is ridden out — then
/// given up and counted (`finish_errors`). Its rows were sent, so they come back after their
/// lease and are sent again under the same idempotency key: the provider suppresses the repeat,
/// nobody is mailed twice, and they are written once the database takes the write.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_result_write_that_keeps_failing_is_given_up_counted_and_its_rows_return_after_their_lease(
    pool: PgPool,
) {
    const N: i64 = 20;
    seed(&pool, CAMPAIGN, N).await;
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_member_7() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'test: this write is refused'; END $$;
         CREATE TRIGGER refuse_member_7 BEFORE UPDATE ON campaign_targets FOR EACH ROW
           WHEN (NEW.member_id = 7 AND NEW.state = 'sent') EXECUTE FUNCTION refuse_member_7();",
    )
    .execute(&pool)
    .await
    .unwrap();
    let p = provider(Default::default()).await;
    let mut cfg = config(&p.url);
    cfg.lease_s = 3;
    cfg.connect_timeout_ms = 500;
    cfg.read_timeout_ms = 500;
    let w = std::sync::Arc::new(worker(&pool, cfg).await);
    let t0 = Instant::now();
    let run = {
        let w = w.clone();
        tokio::spawn(async move { w.run(CancellationToken::new()).await.unwrap() })
    };
    while w.stats().finish_errors == 0 {
        assert!(t0.elapsed() < Duration::from_secs(20), "never gave up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Five tries, 200 ms doubling: 6.2 s of retries before giving up.
    let gave_up = t0.elapsed();
    assert!(
        gave_up >= Duration::from_secs(5),
        "gave up after {gave_up:?}"
    );
    sqlx::query("DROP TRIGGER refuse_member_7 ON campaign_targets")
        .execute(&pool)
        .await
        .unwrap();
    let report = run.await.unwrap();
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    assert_eq!(report.campaign.sent, N, "{report:?}");
    assert_eq!(report.stats.finish_errors, 1, "{report:?}");
    let s = p.fake.stats();
    assert_eq!(
        (s.delivered, s.members_delivered_more_than_once),
        (N as u64, 0),
        "{s:?}"
    );
    assert!(
        s.duplicates_suppressed >= 1,
        "the unwritten rows were not sent again: {s:?}"
    );
}

/// Rows another pod took over while our requests for them were in flight (our lease had
/// lapsed, theirs is live) are not ours to write: the fenced write leaves them to the new owner,
/// and the report counts each as a stale write (what the stale-writes alert watches).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn results_for_rows_taken_over_mid_request_are_fenced_off_and_counted(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20).await;
    // Slow answers: all 20 requests are open at once for long enough to take rows over.
    let p = slow_provider(1500).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 32;
    cfg.read_timeout_ms = 3000;
    let w = worker(&pool, cfg).await;
    let takeover = async {
        until_stats(&p, Duration::from_secs(10), "20 requests in flight", |s| {
            s.in_flight >= 20
        })
        .await;
        sqlx::query(
            "UPDATE campaign_targets SET claim_id = gen_random_uuid(),
                    lease_until = now() + interval '1 minute'
              WHERE member_id <= 5",
        )
        .execute(&pool)
        .await
        .unwrap();
    };
    let cancel = CancellationToken::new();
    let (step, ()) = tokio::join!(w.step(far(), &cancel), takeover);
    assert!(matches!(step.unwrap(), Step::Worked { claimed: 20 }));
    assert_eq!(w.stats().stale_writes, 5, "{:?}", w.stats());
    let s = states(&pool).await;
    assert_eq!(
        (s.get("sent"), s.get("sending")),
        (Some(&15), Some(&5)),
        "{s:?}"
    );
}
