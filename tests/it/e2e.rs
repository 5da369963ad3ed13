//! End to end: real `campaign-sender run` processes against the fake provider, killed,
//! overlapped and opted out from under.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

/// Test-speed worker settings: a 4 s lease so a killed worker's rows come back quickly.
fn env<'a>(mail_url: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", mail_url),
        ("BATCH_SIZE", "200"),
        ("SEND_CONCURRENCY", "16"),
        ("LEASE_S", "4"),
        ("CONNECT_TIMEOUT_MS", "500"),
        ("READ_TIMEOUT_MS", "500"),
        ("BACKOFF_BASE_MS", "50"),
        ("BACKOFF_MAX_MS", "500"),
        ("IDLE_POLL_MS", "100"),
        ("DEADLINE_S", "90"),
        ("MAIL_RATE_PER_S", "2000"),
    ];
    v.extend_from_slice(extra);
    v
}

async fn assert_all_settled(pool: &PgPool, total: i64) {
    let st = states(pool).await;
    let settled = st.get("sent").unwrap_or(&0) + st.get("failed").unwrap_or(&0);
    assert_eq!(settled, total, "targets lost or stuck: {st:?}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_worker_killed_mid_run_and_restarted_loses_nothing_and_mails_nobody_twice(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3000).await;
    let p = provider(FakeConfig {
        faults: true,
        latency_mean_ms: 20,
        ..Default::default()
    })
    .await;
    let db = worker_url(&pool).await;
    let e = env(&p.url, &[("WORKER_ID", "victim")]);

    let mut victim = spawn_sender(&["run"], &db, &e);
    let t0 = std::time::Instant::now();
    while p.fake.stats().delivered < 600 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no progress before the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    victim.start_kill().unwrap(); // SIGKILL: no cleanup, rows stay leased
    victim.wait().await.unwrap();
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE state = 'sending'")
            .fetch_one(&pool)
            .await
            .unwrap();

    let (code, out, err) = finish(
        spawn_sender(&["run"], &db, &env(&p.url, &[])),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(code, 0, "restarted worker: {out}\n{err}");
    assert_all_settled(&pool, 3000).await;
    let s = p.fake.stats();
    assert_eq!(s.members_delivered_more_than_once, 0);
    // Repeats are bounded by what the killed worker held (at most a batch plus the low-water
    // prefetch) and, since results are flushed as they come, by what was in flight or not yet
    // flushed: SEND_CONCURRENCY (16) + two flush groups (FLUSH_MAX_ROWS, 100) at the most.
    assert!(leased <= 400, "the worker hoarded {leased} rows");
    assert!(
        s.duplicates_suppressed <= leased as u64,
        "{s:?}, leased {leased}"
    );
    assert!(s.duplicates_suppressed <= 16 + 2 * 100, "{s:?}");
    assert_eq!(s.delivered, 3000 - 3, "997, 1994, 2991 fail with 422");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn two_workers_overlapping_from_the_start_mail_nobody_twice(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3000).await;
    let p = provider(FakeConfig {
        faults: true,
        latency_mean_ms: 10,
        ..Default::default()
    })
    .await;
    let db = worker_url(&pool).await;
    let a = spawn_sender(&["run"], &db, &env(&p.url, &[("WORKER_ID", "a")]));
    let b = spawn_sender(&["run"], &db, &env(&p.url, &[("WORKER_ID", "b")]));
    let (ra, rb) = tokio::join!(
        finish(a, Duration::from_secs(90)),
        finish(b, Duration::from_secs(90))
    );
    assert_eq!((ra.0, rb.0), (0, 0), "{}\n{}", ra.2, rb.2);
    assert_all_settled(&pool, 3000).await;
    let s = p.fake.stats();
    assert_eq!(
        (s.members_delivered_more_than_once, s.duplicates_suppressed),
        (0, 0),
        "{s:?}"
    );
    // Both did real work (overlap, not one idling), and each report says whose it is (an
    // Indexed Job's pods are told apart by WORKER_ID).
    for (out, name) in [(&ra.1, "a"), (&rb.1, "b")] {
        let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(report["worker"], name, "{report}");
        assert!(
            report["stats"]["sent"].as_u64().unwrap() > 100,
            "{name}: {report}"
        );
    }
}

/// How the members leave mid-run.
#[derive(Clone, Copy)]
enum OptOut {
    /// The other system sets `opted_out_at`.
    ByTheMemberTable,
    /// The mailbox provider's one-click POST to `events` (RFC 8058), as its own role.
    ByOneClick,
}

impl OptOut {
    /// Opts `ids` out; returns once every one is committed.
    async fn commit(self, pool: &PgPool, events: &str, ids: &[i64]) {
        match self {
            OptOut::ByTheMemberTable => {
                sqlx::query("UPDATE campaign_targets SET opted_out_at = now() WHERE campaign_id = $1 AND member_id = ANY($2)")
                    .bind(CAMPAIGN)
                    .bind(ids)
                    .execute(pool)
                    .await
                    .unwrap();
            }
            OptOut::ByOneClick => {
                let signer = campaign_sender::unsubscribe::Signer::new(ONE_CLICK[1].1).unwrap();
                let http = reqwest::Client::new();
                let clicks = ids.iter().map(|id| {
                    http.post(format!(
                        "{events}/unsubscribe/{}",
                        signer.token(CAMPAIGN, *id)
                    ))
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body("List-Unsubscribe=One-Click")
                    .send()
                });
                for r in futures::future::join_all(clicks).await {
                    assert_eq!(r.unwrap().status(), 200);
                }
            }
        }
    }
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn opt_outs_committed_mid_run_are_never_mailed_after_they_commit(pool: PgPool) {
    opted_out_mid_run(pool, OptOut::ByTheMemberTable).await;
}

/// A one-click unsubscribe reaches the running pods as any opt-out: no mail after
/// `OPTOUT_RECHECK_MS`, and a later campaign never mails the address.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn one_click_unsubscribes_mid_run_stop_the_running_pods_and_later_campaigns(pool: PgPool) {
    opted_out_mid_run(pool.clone(), OptOut::ByOneClick).await;
    seed(&pool, "next-campaign", 30).await;
    let next = campaign_sender::store::Store::new(pool.clone(), "next-campaign");
    let batch = next.claim(100, Duration::from_secs(30)).await.unwrap();
    let mailed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert!(!mailed.contains(&3) && !mailed.contains(&13), "{mailed:?}");
    assert_eq!(
        batch.suppressed, 3,
        "members 3, 13 and 23 left by one click"
    );
}

async fn opted_out_mid_run(pool: PgPool, how: OptOut) {
    const N: i64 = 5000;
    const RECHECK_MS: u64 = 300;
    seed(&pool, CAMPAIGN, N).await;
    let p = provider(FakeConfig {
        faults: true,
        latency_mean_ms: 20,
        latency_jitter_ms: 10,
        ..Default::default()
    })
    .await;
    let db = worker_url(&pool).await;
    let recheck = RECHECK_MS.to_string();
    let e = env(
        &p.url,
        &[("MAIL_RATE_PER_S", "500"), ("OPTOUT_RECHECK_MS", &recheck)],
    );
    let role = PgPool::connect(&role_url(&pool, "campaign_sender_events").await)
        .await
        .unwrap();
    let events = crate::events::serve_events(role, crate::events::listeners(false)).await;
    let w1 = spawn_sender(&["run"], &db, &e);
    let w2 = spawn_sender(&["run"], &db, &e);

    // 500 members (every 10th, offset 3) opt out in 50 commits spread over the run, as the
    // other system (or the mailbox provider's click) would; each commit's time is taken after
    // it returned.
    let mut committed: HashMap<i64, u64> = HashMap::new();
    for k in 0..50i64 {
        let ids: Vec<i64> = (0..10).map(|j| (k * 10 + j) * 10 + 3).collect();
        how.commit(&pool, &events, &ids).await;
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        committed.extend(ids.into_iter().map(|id| (id, at)));
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    let (r1, r2) = tokio::join!(
        finish(w1, Duration::from_secs(90)),
        finish(w2, Duration::from_secs(90))
    );
    assert_eq!((r1.0, r2.0), (0, 0), "{}\n{}", r1.2, r2.2);

    let deliveries = p.fake.deliveries();
    // A send may start up to OPTOUT_RECHECK_MS after the check that cleared it (documented
    // window), plus scheduling slack on a shared machine.
    let window = RECHECK_MS + 150;
    let late: Vec<_> = deliveries
        .iter()
        .filter_map(|d| {
            committed
                .get(&d.member_id)
                .map(|c| (d.member_id, d.first_ms as i64 - *c as i64))
        })
        .filter(|(_, after)| *after > window as i64)
        .collect();
    assert!(
        late.is_empty(),
        "delivered after opt-out (member, ms after commit): {late:?}"
    );
    let opted_out_delivered = deliveries
        .iter()
        .filter(|d| committed.contains_key(&d.member_id))
        .count();
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);

    // Transient 503s (every 25th) end sent; 422s (every 997th) end failed; the opted-out ones
    // not already mailed stay unsent and are not work.
    let rows: Vec<(i64, String)> =
        sqlx::query_as("SELECT member_id, state FROM campaign_targets WHERE campaign_id = $1")
            .bind(CAMPAIGN)
            .fetch_all(&pool)
            .await
            .unwrap();
    for (id, state) in rows {
        if committed.contains_key(&id) {
            assert!(state == "sent" || state == "pending", "{id}: {state}");
        } else if id % 997 == 0 {
            assert_eq!(state, "failed", "{id}");
        } else {
            assert_eq!(state, "sent", "{id}");
        }
    }
    let unsent_opted_out: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE opted_out_at IS NOT NULL AND state <> 'sent'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(unsent_opted_out as usize + opted_out_delivered, 500);
    assert!(
        unsent_opted_out > 0,
        "the run finished before any opt-out mattered; the test proves nothing"
    );
}

fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("running").to_string();
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM {pid}");
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn sends_inside_a_batch_overlap(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    let p = slow_provider(50).await;
    let mut cfg = config(&p.url);
    cfg.send_concurrency = 16;
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(report.exit_code.code(), 0);
    let s = p.fake.stats();
    assert!(s.max_in_flight >= 8, "requests did not overlap: {s:?}");
    assert!(
        s.max_in_flight <= 16,
        "more in flight than SEND_CONCURRENCY: {s:?}"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn sigterm_releases_unsent_rows_at_once_and_others_finish_them_without_waiting(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2000).await;
    let p = slow_provider(20).await;
    let db = worker_url(&pool).await;
    // A 30 s lease: if SIGTERM left rows leased, the second worker would have to wait it out.
    let slow = env(
        &p.url,
        &[
            ("LEASE_S", "30"),
            ("MAIL_RATE_PER_S", "200"),
            ("WORKER_ID", "leaving"),
        ],
    );
    let leaving = spawn_sender(&["run"], &db, &slow);
    let t0 = std::time::Instant::now();
    while p.fake.stats().delivered < 300 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sigterm(&leaving);
    let (code, out, err) = finish(leaving, Duration::from_secs(10)).await;
    assert_eq!(code, 1, "SIGTERM is 'stopped before done': {err}");
    let report: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(
        report["stats"]["released"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM campaign_targets WHERE state = 'sending'"
        )
        .await,
        0
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM campaign_targets WHERE state = 'pending' AND attempts <> 0"
        )
        .await,
        0,
        "a released row kept its attempt"
    );

    let t1 = std::time::Instant::now();
    let fast = env(&p.url, &[("LEASE_S", "30"), ("WORKER_ID", "staying")]);
    let (code, _, err) = finish(spawn_sender(&["run"], &db, &fast), Duration::from_secs(60)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        t1.elapsed() < Duration::from_secs(15),
        "waited for leases: {:?}",
        t1.elapsed()
    );
    assert_all_settled(&pool, 2000).await;
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_live_workers_leases_are_kept_alive_past_their_initial_length(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    // 40/s: the first batch of 200 takes ~5 s, longer than the 3 s lease.
    let slow = env(
        &p.url,
        &[
            ("LEASE_S", "3"),
            ("MAIL_RATE_PER_S", "40"),
            ("WORKER_ID", "slow"),
        ],
    );
    let slow = spawn_sender(&["run"], &db, &slow);
    // Until a held row's lease has been pushed past the claim's own 3 s (renewed by the
    // heartbeat), no live lease may have run out on the way.
    until_some(
        Duration::from_secs(30),
        "a lease renewed past its first 3 s",
        || async {
            let overdue = count(
            &pool,
            "SELECT count(*) FROM campaign_targets WHERE state = 'sending' AND lease_until < now()",
        )
        .await;
            assert_eq!(overdue, 0, "a live worker's lease ran out");
            let renewed = count(
                &pool,
                "SELECT count(*) FROM campaign_targets
              WHERE state = 'sending' AND lease_until > updated_at + interval '3.5 seconds'",
            )
            .await;
            (renewed > 0).then_some(())
        },
    )
    .await;
    // A fast worker joins; it must not take the slow one's (live) rows.
    let fast = spawn_sender(
        &["run"],
        &db,
        &env(&p.url, &[("LEASE_S", "3"), ("WORKER_ID", "fast")]),
    );
    let (rs, rf) = tokio::join!(
        finish(slow, Duration::from_secs(60)),
        finish(fast, Duration::from_secs(60))
    );
    assert_eq!((rs.0, rf.0), (0, 0), "{}\n{}", rs.2, rf.2);
    let s = p.fake.stats();
    assert_eq!(
        (s.duplicates_suppressed, s.members_delivered_more_than_once),
        (0, 0),
        "{s:?}"
    );
    let report: serde_json::Value = serde_json::from_str(rs.1.lines().last().unwrap()).unwrap();
    assert!(
        report["stats"]["leases_renewed"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(
        report["stats"]["stale_writes"].as_u64().unwrap(),
        0,
        "{report}"
    );
    assert_all_settled(&pool, 300).await;
}

/// `run` is done only when nothing is left: a row in retry backoff and a row a crashed worker
/// still holds leased are work, though neither is claimable yet. A run that stopped there would
/// leave both to the next night's run.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_run_is_not_done_while_a_row_waits_in_backoff_and_another_is_leased(pool: PgPool) {
    seed_in_backoff(&pool, CAMPAIGN, 1..=1).await;
    seed_leased_by_a_crashed_worker(&pool, CAMPAIGN, 2..=2).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let t0 = std::time::Instant::now();
    let (code, out, err) = finish(
        spawn_sender(&["run"], &db, &env(&p.url, &[])),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(t0.elapsed() >= Duration::from_millis(900), "did not wait");
    assert_eq!(states(&pool).await.get("sent"), Some(&2), "{err}");
    assert_eq!(p.fake.stats().delivered, 2);
}

/// Continuing an Indexed Job, as OPERATIONS says (`resume`, then the Job deleted and applied
/// again under the same name): the time budget is the Job object's (`JOB_UID`), so a pod of
/// the old Job restarted after its `DEADLINE_S` sends nothing, and the new Job of the same name
/// sends the rest.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_job_applied_again_under_its_name_sends_the_rest_and_a_spent_one_sends_nothing(
    pool: PgPool,
) {
    const FIRST: &str = "5d3c7a2e-1b1f-4c55-8f5e-6f0a2b9d0001";
    const SECOND: &str = "5d3c7a2e-1b1f-4c55-8f5e-6f0a2b9d0002";
    seed(&pool, CAMPAIGN, 1_000).await;
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let ops = operator_url(&pool).await;
    let job = |uid| {
        env(
            &p.url,
            &[
                ("JOB_NAME", "campaign-sender"),
                ("JOB_UID", uid),
                ("DEADLINE_S", "6"),
                ("MAIL_RATE_PER_S", "200"),
            ],
        )
    };
    let operator = |args: &[&str]| finish(spawn_sender(args, &ops, &[]), Duration::from_secs(30));

    // The first Job is paused part-way: its pod exits 3.
    let started = std::time::Instant::now();
    let first = spawn_sender(&["run"], &db, &job(FIRST));
    until_stats(&p, Duration::from_secs(30), "the first Job sending", |s| {
        s.delivered >= 100
    })
    .await;
    let (code, out, err) = operator(&["pause", "--campaign", CAMPAIGN, "--reason", "check"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = finish(first, Duration::from_secs(30)).await;
    assert_eq!(code, 3, "a paused run exits 3: {err}");
    let (code, out, err) = operator(&["resume", "--campaign", CAMPAIGN]).await;
    assert_eq!(code, 0, "{out}{err}");
    let asked_by_first = p.fake.stats().requests;
    assert!(asked_by_first < 1_000, "the first Job sent everything");

    // A pod of the first Job restarted after its budget is spent sends nothing.
    tokio::time::sleep(Duration::from_secs(7).saturating_sub(started.elapsed())).await;
    let (code, _, err) = finish(
        spawn_sender(&["run"], &db, &job(FIRST)),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(p.fake.stats().requests, asked_by_first, "a spent Job sent");

    // The Job applied again: same name, new UID, a whole budget: it sends the rest.
    let (code, _, err) = finish(
        spawn_sender(&["run"], &db, &job(SECOND)),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert_all_settled(&pool, 1_000).await;
    let s = p.fake.stats();
    assert_eq!(s.delivered, 1_000);
    assert_eq!(s.members_delivered_more_than_once, 0);
}
