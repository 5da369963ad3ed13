//! The operator commands: `status`, `pause`/`resume`, `retry-failed`, `configure`, and how
//! running workers obey the kill switch (`import`: import.rs).

use std::time::{Duration, Instant};

use campaign_sender::status;
use campaign_sender::store::campaigns;
use campaign_sender::store::RetryFilter;
use campaign_sender::{exit, report::StopReason};
use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

// --- pause / resume -------------------------------------------------------------------------

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_running_worker_obeys_a_pause_within_a_second_and_starts_no_request_after(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3000).await;
    let p = slow_provider(150).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 400;
    let w = worker(&pool, cfg).await;
    let run = tokio::spawn(async move { w.run(Default::default()).await });
    let t0 = Instant::now();
    while p.fake.stats().delivered < 200 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    campaigns::pause(&pool, CAMPAIGN, campaigns::BY_OPERATOR, Some("test"))
        .await
        .unwrap();
    let paused_ms = unix_ms_now();
    let paused_at = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the worker did not stop after the pause")
        .unwrap()
        .unwrap();
    let stopped_after = paused_at.elapsed();
    assert_eq!(report.reason, StopReason::Paused, "{report:?}");
    assert_eq!(report.exit_code, exit::Exit::Paused);
    // In-flight requests (150 ms) finished and were written; nothing new started after 1 s.
    assert!(stopped_after < Duration::from_secs(2), "{stopped_after:?}");
    let last_start = p
        .fake
        .deliveries()
        .iter()
        .map(|d| d.first_ms)
        .max()
        .unwrap();
    assert!(
        last_start <= paused_ms + 1000,
        "a request started {} ms after the pause",
        last_start - paused_ms
    );
    let st = states(&pool).await;
    assert_eq!(st.get("sending"), None, "rows still claimed: {st:?}");
    assert_eq!(
        *st.get("sent").unwrap() as u64,
        p.fake.stats().delivered,
        "a delivered request was not written"
    );
    assert!(*st.get("pending").unwrap() > 1000, "{st:?}");

    // Resumed, a new run finishes the campaign without mailing anyone twice.
    campaigns::resume(&pool, CAMPAIGN).await.unwrap().unwrap();
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 5000;
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    assert_eq!(states(&pool).await.get("sent"), Some(&3000));
    assert_eq!(p.fake.stats().members_delivered_more_than_once, 0);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn run_on_a_paused_campaign_exits_3_at_once_and_sends_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 100).await;
    let p = provider(FakeConfig::default()).await;
    let db = operator_url(&pool).await;
    let worker_db = worker_url(&pool).await;
    let pause = spawn_sender(
        &[
            "pause",
            "--campaign",
            CAMPAIGN,
            "--reason",
            "wrong template",
        ],
        &db,
        &[],
    );
    let (code, out, err) = finish(pause, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let env = [("CAMPAIGN_ID", CAMPAIGN), ("MAIL_URL", p.url.as_str())];
    let t0 = Instant::now();
    let (code, out, err) = finish(
        spawn_sender(&["run"], &worker_db, &env),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, exit::Exit::Paused as i32, "{out}\n{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        err.contains("resume"),
        "the log does not say what to do: {err}"
    );
    assert_eq!(p.fake.stats().requests, 0);
    assert_eq!(states(&pool).await.get("pending"), Some(&100));

    let resume = spawn_sender(&["resume", "--campaign", CAMPAIGN], &db, &[]);
    assert_eq!(finish(resume, Duration::from_secs(30)).await.0, 0);
    let (code, out, err) = finish(
        spawn_sender(&["run"], &worker_db, &env),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, exit::Exit::Done as i32, "{out}\n{err}");
    assert_eq!(states(&pool).await.get("sent"), Some(&100));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn serve_idles_while_paused_and_continues_by_itself_after_resume(pool: PgPool) {
    seed(&pool, CAMPAIGN, 200).await;
    campaigns::pause(&pool, CAMPAIGN, campaigns::BY_OPERATOR, None)
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let metrics = format!("127.0.0.1:{}", refused_addr().port());
    let env = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", p.url.as_str()),
        ("WORKER_ID", "serve-0"),
        ("IDLE_POLL_MS", "100"),
        ("METRICS_ADDR", metrics.as_str()),
    ];
    let mut child = spawn_sender(&["serve"], &db, &env);
    until_idle(&pool, "serve-0").await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "serve exited while paused"
    );
    // What keeps CampaignSenderNoProgress quiet during a deliberate pause.
    paused_gauge_reads(&metrics, 1).await;
    assert_eq!(p.fake.stats().requests, 0);
    campaigns::resume(&pool, CAMPAIGN).await.unwrap();
    let t0 = Instant::now();
    while p.fake.stats().delivered < 200 {
        assert!(t0.elapsed() < Duration::from_secs(30), "not resumed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    paused_gauge_reads(&metrics, 0).await;
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(states(&pool).await.get("sent"), Some(&200));
}

/// Waits until the pod's `campaign_sender_campaign_paused` gauge reads `value`.
async fn paused_gauge_reads(addr: &str, value: u8) {
    let line = format!("campaign_sender_campaign_paused{{worker=\"serve-0\"}} {value}");
    until_some(Duration::from_secs(10), &line, || async {
        metrics_text(addr).await?.contains(&line).then_some(())
    })
    .await;
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn serve_waits_on_an_automatic_pause_instead_of_crash_looping(pool: PgPool) {
    // What a Deployment's pods find after one of them crossed the threshold: failures over the
    // budget (5 of 100 > 1 %) and the automatic pause. Exiting 2 again would restart them in a
    // loop; they wait for `retry-failed` + `resume` instead.
    seed(&pool, CAMPAIGN, 100).await;
    sqlx::query("UPDATE campaign_targets SET state = 'failed', attempts = 1, last_status = 422, last_error = 'rejected' WHERE member_id <= 5")
        .execute(&pool)
        .await
        .unwrap();
    campaigns::pause(&pool, CAMPAIGN, campaigns::BY_AUTO, Some("over budget"))
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    let db = worker_url(&pool).await;
    let env = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_URL", p.url.as_str()),
        ("WORKER_ID", "serve-0"),
        ("IDLE_POLL_MS", "100"),
    ];
    let mut child = spawn_sender(&["serve"], &db, &env);
    until_idle(&pool, "serve-0").await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "serve exited on an automatic pause"
    );
    assert_eq!(p.fake.stats().requests, 0);
    // The operator's way out: the failures are retried, the pause lifted, the pod goes on.
    store(&pool)
        .retry_failed(&RetryFilter::default(), false)
        .await
        .unwrap();
    campaigns::resume(&pool, CAMPAIGN).await.unwrap();
    let t0 = Instant::now();
    while p.fake.stats().delivered < 100 {
        assert!(t0.elapsed() < Duration::from_secs(30), "not resumed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let (code, out, err) = finish(child, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{out}\n{err}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn crossing_the_failure_threshold_pauses_the_campaign_and_status_says_why(pool: PgPool) {
    let (p, report) = run_against_an_unavailable_provider(&pool, 2000).await;
    assert_eq!(report.exit_code, exit::Exit::TooManyFailures, "{report:?}");
    let s = status::gather(&pool, CAMPAIGN, status::Defaults::documented())
        .await
        .unwrap();
    let pause = s.paused.clone().expect("not paused");
    assert_eq!(pause.by, campaigns::BY_AUTO);
    assert!(
        pause
            .reason
            .as_deref()
            .unwrap()
            .contains("permanent failures exceed the budget of 20"),
        "{pause:?}"
    );
    assert_eq!(s.failures[0].status, Some(503), "{:?}", s.failures);
    assert_eq!(s.failures[0].class, "server_error");
    assert_eq!(s.failures[0].count, s.progress.counts.failed);
    let text = status::render(&s);
    assert!(text.contains("auto") && text.contains("503"), "{text}");
    // Other pods (a rerun here) do not start sending again.
    let before = p.fake.stats().requests;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.reason, StopReason::Paused);
    assert_eq!(p.fake.stats().requests, before);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_first_pause_wins_and_resume_lifts_it_whoever_set_it(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    let first = campaigns::pause(&pool, CAMPAIGN, campaigns::BY_AUTO, Some("over budget"))
        .await
        .unwrap();
    let second = campaigns::pause(&pool, CAMPAIGN, campaigns::BY_OPERATOR, Some("later"))
        .await
        .unwrap();
    assert_eq!(
        second, first,
        "a later pause replaced the reason status shows"
    );
    let lifted = campaigns::resume(&pool, CAMPAIGN).await.unwrap();
    assert_eq!(lifted, Some(first));
    assert_eq!(campaigns::resume(&pool, CAMPAIGN).await.unwrap(), None);
    assert_eq!(campaigns::paused(&pool, CAMPAIGN).await.unwrap(), None);
}

// --- retry-failed ---------------------------------------------------------------------------

/// 1..=10 failed 422 an hour ago, 11..=20 failed 503 just now, 21..=25 failed 422 but opted
/// out, 26..=30 sent, 31..=35 claimed, the rest pending.
async fn failed_fixture(pool: &PgPool) {
    seed(pool, CAMPAIGN, 50).await;
    for sql in [
        "UPDATE campaign_targets SET state = 'failed', attempts = 3, last_status = 422, last_error = 'rejected', updated_at = now() - interval '1 hour' WHERE member_id BETWEEN 1 AND 10",
        "UPDATE campaign_targets SET state = 'failed', attempts = 5, last_status = 503, last_error = 'server_error', updated_at = now() WHERE member_id BETWEEN 11 AND 20",
        "UPDATE campaign_targets SET state = 'failed', attempts = 1, last_status = 422, last_error = 'rejected', opted_out_at = now(), updated_at = now() WHERE member_id BETWEEN 21 AND 25",
        "UPDATE campaign_targets SET state = 'sent', attempts = 1, last_status = 422, last_error = 'rejected', sent_at = now() WHERE member_id BETWEEN 26 AND 30",
        "UPDATE campaign_targets SET state = 'sending', attempts = 1, last_status = 422, last_error = 'rejected', claim_id = gen_random_uuid(), lease_until = now() + interval '1 minute' WHERE member_id BETWEEN 31 AND 35",
    ] {
        sqlx::query(sql).execute(pool).await.unwrap();
    }
}

async fn snapshot(pool: &PgPool) -> Vec<(i64, String, i32, Option<uuid::Uuid>)> {
    sqlx::query_as(
        "SELECT member_id, state, attempts, claim_id FROM campaign_targets WHERE campaign_id = $1 ORDER BY member_id",
    )
    .bind(CAMPAIGN)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn retry_failed_only_touches_the_selected_rows(pool: PgPool) {
    failed_fixture(&pool).await;
    let s = store(&pool);
    let before = snapshot(&pool).await;
    // Filters narrow: --since (the 503s failed just now, the 422s an hour ago), --class.
    let recent = RetryFilter {
        since: Some(chrono::Utc::now() - chrono::Duration::minutes(10)),
        ..Default::default()
    };
    assert_eq!(s.retry_failed(&recent, true).await.unwrap(), 10);
    let rejected = RetryFilter {
        classes: vec!["rejected".into()],
        ..Default::default()
    };
    assert_eq!(s.retry_failed(&rejected, true).await.unwrap(), 10);
    let f422 = RetryFilter {
        statuses: vec![422],
        ..Default::default()
    };
    assert_eq!(s.retry_failed(&f422, true).await.unwrap(), 10);
    assert_eq!(snapshot(&pool).await, before, "--dry-run changed rows");
    assert_eq!(s.retry_failed(&f422, false).await.unwrap(), 10);
    let after = snapshot(&pool).await;
    for (b, a) in before.iter().zip(&after) {
        if (1..=10).contains(&a.0) {
            assert_eq!((a.1.as_str(), a.2), ("pending", 0), "{a:?}");
        } else {
            assert_eq!(a, b, "row {} was touched", a.0);
        }
    }
    assert_eq!(s.retry_failed(&recent, false).await.unwrap(), 10);
    let after = snapshot(&pool).await;
    assert!(after[10..20].iter().all(|r| r.1 == "pending" && r.2 == 0));
    // Nothing left but the opted-out ones, which are never put back.
    assert_eq!(
        s.retry_failed(&RetryFilter::default(), false)
            .await
            .unwrap(),
        0
    );
    assert!(after[20..25].iter().all(|r| r.1 == "failed"));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn retry_failed_from_the_command_line_prints_how_many_and_they_are_sent(pool: PgPool) {
    failed_fixture(&pool).await;
    let db = operator_url(&pool).await;
    let child = spawn_sender(
        &[
            "retry-failed",
            "--campaign",
            CAMPAIGN,
            "--status",
            "422,503",
            "--since",
            "2h",
        ],
        &db,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("20 failed rows put back to pending"), "{out}");
    // Release the fixture's fake claim, then a run sends them.
    sqlx::query("UPDATE campaign_targets SET lease_until = now() - interval '1 second' WHERE state = 'sending'")
        .execute(&pool)
        .await
        .unwrap();
    let p = provider(FakeConfig::default()).await;
    let mut cfg = config(&p.url);
    // The 5 opted-out failures stay failed: allow them.
    cfg.max_permanent_failure_ratio = 0.2;
    let report = run_to_end(&pool, cfg).await;
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    let st = states(&pool).await;
    assert_eq!(st.get("sent"), Some(&45), "{st:?}");
    assert_eq!(st.get("failed"), Some(&5), "{st:?}");
}

// --- status and settings ----------------------------------------------------------------------

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn status_json_shows_counts_rate_eta_and_failure_reasons(pool: PgPool) {
    seed(&pool, CAMPAIGN, 2000).await;
    sqlx::query(
        "UPDATE campaign_targets SET opted_out_at = now() WHERE member_id BETWEEN 1 AND 10",
    )
    .execute(&pool)
    .await
    .unwrap();
    // Faults: 997 and 1994 answer 422.
    let p = provider(FakeConfig {
        faults: true,
        ..Default::default()
    })
    .await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(report.exit_code, exit::Exit::Done, "{report:?}");
    let db = operator_url(&pool).await;
    let child = spawn_sender(&["status", "--campaign", CAMPAIGN, "--json"], &db, &[]);
    let (code, out, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    assert_eq!(v["counts"]["sent"], 1988);
    assert_eq!(v["counts"]["failed"], 2);
    assert_eq!(v["counts"]["opted_out"], 10);
    assert_eq!(v["remaining"], 0);
    assert_eq!(v["done"], true);
    // Finished: no current rate, no ETA, and what it waits for instead.
    assert_eq!(v["eta_s"], serde_json::Value::Null, "{v}");
    assert_eq!(v["rate_per_s"], 0.0, "{v}");
    assert_eq!(v["waits_for"], "nothing: it is done", "{v}");
    assert!(v["sent_last_minute"].as_i64().unwrap() > 0, "{v}");
    assert_eq!(v["failures"][0]["status"], 422);
    assert_eq!(v["failures"][0]["class"], "rejected");
    assert_eq!(v["failures"][0]["count"], 2);
    assert_eq!(v["paused"], serde_json::Value::Null);
    assert!(!out.contains('@'));
    // --watch on a finished campaign prints once and ends.
    let child = spawn_sender(
        &[
            "status",
            "--campaign",
            CAMPAIGN,
            "--watch",
            "--interval-ms",
            "100",
        ],
        &db,
        &[],
    );
    let (code, out, _) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 1, "{out}");
    // An unknown campaign is an error, not an empty report.
    let child = spawn_sender(&["status", "--campaign", "nope"], &db, &[]);
    assert_eq!(finish(child, Duration::from_secs(30)).await.0, 1);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn status_lists_live_workers_with_their_rate_share(pool: PgPool) {
    seed(&pool, CAMPAIGN, 20_000).await;
    let p = provider(FakeConfig::default()).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 200;
    let w = worker(&pool, cfg).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let run = {
        let cancel = cancel.clone();
        tokio::spawn(async move { w.run(cancel).await })
    };
    let t0 = Instant::now();
    let s = loop {
        let s = status::gather(&pool, CAMPAIGN, status::Defaults::documented())
            .await
            .unwrap();
        if s.limits.first().is_some_and(|k| !k.members.is_empty()) && s.rate_per_s > 0.0 {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no live worker shown: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    cancel.cancel();
    run.await.unwrap().unwrap();
    let key = &s.limits[0];
    assert_eq!(key.limit_per_s, Some(200.0));
    assert_eq!(key.members.len(), 1);
    assert_eq!(key.members[0].worker, "test-worker");
    assert!(s.eta_s.is_some_and(|e| e > 10.0), "{s:?}");
    let text = status::render(&s);
    assert!(text.contains("test-worker"), "{text}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_settings_row_sets_the_template_and_threshold_and_none_is_needed(pool: PgPool) {
    // Without a settings row: the campaign id is the template.
    seed(&pool, CAMPAIGN, 50).await;
    let p = provider(FakeConfig::default()).await;
    assert_eq!(
        run_to_end(&pool, config(&p.url)).await.exit_code,
        exit::Exit::Done
    );
    assert!(p.fake.deliveries().iter().all(|d| d.template == CAMPAIGN));

    // configure: a template, and a threshold that tolerates 2 bad addresses in 100.
    sqlx::query("DELETE FROM campaign_targets")
        .execute(&pool)
        .await
        .unwrap();
    seed(&pool, CAMPAIGN, 100).await;
    sqlx::query("UPDATE campaign_targets SET email = 'not-an-address' WHERE member_id IN (10, 20)")
        .execute(&pool)
        .await
        .unwrap();
    let db = operator_url(&pool).await;
    let child = spawn_sender(
        &[
            "configure",
            "--campaign",
            CAMPAIGN,
            "--template",
            "spring-v2",
            "--max-permanent-failure-ratio",
            "0.05",
        ],
        &db,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{out}\n{err}");
    // A later configure of one setting keeps the other.
    campaigns::set_settings(
        &pool,
        CAMPAIGN,
        &campaigns::SettingsChange {
            template: Some("spring-v3"),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p = provider(FakeConfig::default()).await;
    let report = run_to_end(&pool, config(&p.url)).await;
    assert_eq!(
        report.exit_code,
        exit::Exit::Done,
        "the campaign's threshold was ignored: {report:?}"
    );
    let d = p.fake.deliveries();
    assert_eq!(d.len(), 98);
    assert!(d.iter().all(|d| d.template == "spring-v3"), "{:?}", d[0]);
}
