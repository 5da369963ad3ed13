//! Campaigns that span days: the send window, priority, per-row schedules and the Job's
//! absolute deadline. Windows here are a few seconds long, in UTC and to the second
//! (`HH:MM:SS-HH:MM:SS`), so that a test sees one open and close.

use std::time::Duration;

use campaign_sender::exit;
use campaign_sender::report::StopReason;
use campaign_sender::store::campaigns;
use chrono::{DateTime, DurationRound, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

/// A request may reach the provider this long after the worker decided to start it (loopback,
/// a busy test machine); a start after the window's end would be later by whole batches.
const ARRIVAL_SLACK_MS: u64 = 150;

/// A whole second `secs` from now (windows are stored to the second).
fn second_from_now(secs: i64) -> DateTime<Utc> {
    (Utc::now() + chrono::Duration::seconds(secs))
        .duration_trunc(chrono::Duration::seconds(1))
        .unwrap()
}

/// Sets the campaign's window to [start, end) in UTC, as `configure --window` would.
async fn set_window(pool: &PgPool, start: DateTime<Utc>, end: DateTime<Utc>) {
    let w = campaign_sender::window::SendWindow::new(start.time(), end.time(), chrono_tz::UTC);
    campaigns::set_window(pool, CAMPAIGN, Some(w))
        .await
        .unwrap();
}

fn ms(t: DateTime<Utc>) -> u64 {
    t.timestamp_millis() as u64
}

/// `campaign-sender ARGS` as the operator role; (exit code, stdout, stderr).
async fn operator(pool: &PgPool, args: &[&str]) -> (i32, String, String) {
    let db = operator_url(pool).await;
    finish(spawn_sender(args, &db, &[]), Duration::from_secs(60)).await
}

async fn window_columns(pool: &PgPool) -> Option<(Option<String>, Option<String>)> {
    sqlx::query_as("SELECT window_start::text, timezone FROM campaigns WHERE campaign_id = $1")
        .bind(CAMPAIGN)
        .fetch_optional(pool)
        .await
        .unwrap()
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_malformed_window_or_unknown_zone_exits_64_naming_it_and_changes_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let base = ["configure", "--campaign", CAMPAIGN];
    for (args, named) in [
        (
            &["--window", "25:00-06:00", "--timezone", "Asia/Tokyo"][..],
            "'25:00-06:00'",
        ),
        (
            &["--window", "22:00", "--timezone", "Asia/Tokyo"],
            "'22:00'",
        ),
        (
            &["--window", "22:00-22:00", "--timezone", "Asia/Tokyo"],
            "a window of no time",
        ),
        (
            &["--window", "22:00-06:00", "--timezone", "Mars/Olympus"],
            "'Mars/Olympus'",
        ),
        (&["--window", "22:00-06:00"], "--window needs --timezone"),
        (&["--timezone", "Asia/Tokyo"], "give --window too"),
    ] {
        let (code, out, err) = operator(&pool, &[&base[..], args].concat()).await;
        assert_eq!(code, exit::Exit::Usage as i32, "{args:?}: {out}{err}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert_eq!(
            window_columns(&pool).await,
            None,
            "{args:?} changed the campaign"
        );
    }

    let (code, out, err) = operator(
        &pool,
        &[
            &base[..],
            &["--window", "22:00-06:00", "--timezone", "Asia/Tokyo"],
        ]
        .concat(),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("send window 22:00-06:00 Asia/Tokyo"), "{out}");
    let (code, out, _) = operator(&pool, &["status", "--campaign", CAMPAIGN]).await;
    assert_eq!(code, 0);
    assert!(out.contains("22:00-06:00 Asia/Tokyo"), "{out}");
    // A bad value later leaves the window that was set.
    let (code, _, _) = operator(&pool, &[&base[..], &["--timezone", "Asia/Tokio"]].concat()).await;
    assert_eq!(code, exit::Exit::Usage as i32);
    let set = Some((Some("22:00:00".to_string()), Some("Asia/Tokyo".to_string())));
    assert_eq!(window_columns(&pool).await, set);

    let (code, out, err) = operator(&pool, &[&base[..], &["--window", "none"]].concat()).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("send window none"), "{out}");
    assert_eq!(window_columns(&pool).await, Some((None, None)));
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn run_outside_the_window_sends_nothing_and_exits_done_for_now_at_once(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    set_window(&pool, second_from_now(3600), second_from_now(7200)).await;
    let p = provider(Default::default()).await;
    let db = worker_url(&pool).await;
    let t0 = std::time::Instant::now();
    let env = run_env(&p.url, 200);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = spawn_sender(&["run"], &db, &env);
    let (code, out, err) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(code, exit::Exit::Done as i32, "{out}{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    assert!(out.contains("\"reason\":\"window_closed\""), "{out}");
    assert_eq!(p.fake.stats().requests, 0);
    assert_eq!(states(&pool).await.get("pending"), Some(&50));
    assert_eq!(
        claimed_ever(&pool).await,
        0,
        "a row was claimed outside the window"
    );
}

/// Rows that were ever claimed (a claim stamps its `claim_id`, which stays after the row is
/// written or released).
async fn claimed_ever(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE claim_id IS NOT NULL")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The environment of a `run` process at test speed against `url`.
/// `pause_poll_ms`: how often a running pod re-reads the campaign's settings.
fn run_env(url: &str, pause_poll_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("CAMPAIGN_ID", CAMPAIGN.to_string()),
        ("MAIL_URL", url.to_string()),
        ("MAIL_RATE_PER_S", "100".to_string()),
        ("IDLE_POLL_MS", "50".to_string()),
        ("PAUSE_POLL_MS", pause_poll_ms.to_string()),
        ("WORKER_ID", "window-worker".to_string()),
    ]
}

/// The window's close is a stop as on SIGTERM, at the instant itself: no request starts after
/// it, requests in flight finish and are written, the unsent rest is released untouched, and the
/// pod exits well within 5 s of it, saying "done for now".
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn when_the_window_closes_no_request_starts_and_the_pod_exits_within_5_s(pool: PgPool) {
    const N: i64 = 3000;
    seed(&pool, CAMPAIGN, N).await;
    let end = second_from_now(4);
    set_window(&pool, second_from_now(-60), end).await;
    let p = slow_provider(300).await;
    let db = worker_url(&pool).await;
    // Settings re-read only every second: the stop at the window's end itself must keep the bound, not
    // a poll that happens to see the window closed.
    let env = run_env(&p.url, 1000);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let child = spawn_sender(&["run"], &db, &env);
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    let exited = Utc::now();

    assert_eq!(code, exit::Exit::Done as i32, "{out}{err}");
    assert!(out.contains("\"reason\":\"window_closed\""), "{out}");
    assert!(
        exited < end + chrono::Duration::seconds(5),
        "exited {} after the window closed",
        exited - end
    );
    let deliveries = p.fake.deliveries();
    assert!(deliveries.len() > 50, "hardly sent: {}", deliveries.len());
    let late: Vec<_> = deliveries
        .iter()
        .filter(|d| d.first_ms > ms(end) + ARRIVAL_SLACK_MS)
        .map(|d| (d.member_id, d.first_ms - ms(end)))
        .collect();
    assert!(
        late.is_empty(),
        "requests after the window closed (member, ms late): {late:?}"
    );
    // Every delivered row is written sent; every other one is pending, unleased, untried.
    let s = states(&pool).await;
    assert_eq!(
        s.get("sent").copied(),
        Some(deliveries.len() as i64),
        "{s:?}"
    );
    assert_eq!(
        s.get("pending").copied(),
        Some(N - deliveries.len() as i64),
        "{s:?}"
    );
    let touched: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM campaign_targets WHERE state = 'pending' AND (attempts > 0 OR lease_until IS NOT NULL)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(touched, 0, "unsent rows kept an attempt or a lease");
}

/// An operator who narrows the window so that it is closed now stops running pods within
/// `PAUSE_POLL_MS`, as the window's own close would.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_window_changed_to_closed_stops_a_running_pod(pool: PgPool) {
    const N: i64 = 5000;
    seed(&pool, CAMPAIGN, N).await;
    set_window(&pool, second_from_now(-60), second_from_now(3600)).await;
    let p = slow_provider(100).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 200;
    cfg.pause_poll_ms = 100;
    let running = tokio::spawn({
        let pool = pool.clone();
        async move { run_to_end(&pool, cfg).await }
    });
    until_stats(&p, Duration::from_secs(30), "sending", |s| s.requests >= 20).await;
    set_window(&pool, second_from_now(-7200), second_from_now(-3600)).await;
    let report = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("the pod kept running after its window was closed")
        .unwrap();
    assert_eq!(report.reason, StopReason::WindowClosed, "{report:?}");
    assert_eq!(report.exit_code, exit::Exit::Done);
    assert!(states(&pool).await.get("pending").copied().unwrap_or(0) > 0);
}

/// `serve` outside the window holds no rate share (weight 0) and makes no request; it sends
/// once the window opens, without being restarted.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn serve_idles_until_the_window_opens_then_sends(pool: PgPool) {
    const N: i64 = 40;
    seed(&pool, CAMPAIGN, N).await;
    let opens = second_from_now(3);
    set_window(&pool, opens, second_from_now(600)).await;
    let p = provider(Default::default()).await;
    let w = worker(&pool, config(&p.url)).await;
    let cancel = CancellationToken::new();
    let serving = tokio::spawn({
        let cancel = cancel.clone();
        async move { w.serve(cancel).await }
    });
    until_idle(&pool, "test-worker").await;
    assert_eq!(
        p.fake.stats().requests,
        0,
        "sent while the window was closed"
    );
    until_some(
        Duration::from_secs(30),
        "all sent after the window opened",
        || async { (states(&pool).await.get("sent") == Some(&N)).then_some(()) },
    )
    .await;
    let early = p
        .fake
        .deliveries()
        .iter()
        .filter(|d| d.first_ms < ms(opens))
        .count();
    assert_eq!(early, 0, "sent before the window opened");
    cancel.cancel();
    let report = serving.await.unwrap().unwrap();
    assert_eq!(report.exit_code, exit::Exit::Done);
}

/// Claims take rows highest priority first, then by member; a high-priority row waiting out a
/// retry backoff keeps its priority and does not hold back the rows behind it.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn claims_take_the_highest_priority_first_and_a_backoff_blocks_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 300).await;
    sqlx::query("UPDATE campaign_targets SET priority = member_id % 3")
        .execute(&pool)
        .await
        .unwrap();
    // Member 2 (priority 2) is waiting out a backoff.
    sqlx::query("UPDATE campaign_targets SET attempts = 1, not_before = now() + interval '1 hour' WHERE member_id = 2")
        .execute(&pool)
        .await
        .unwrap();
    let s = store(&pool);
    let first = claimed(&s, 100).await;
    let mut want: Vec<i64> = (5..=299).step_by(3).collect(); // priority 2 but member 2
    want.push(1); // then priority 1, lowest member first
    assert_eq!(first, want);
    let next = claimed(&s, 3).await;
    assert_eq!(next, vec![4, 7, 10]);

    sqlx::query("UPDATE campaign_targets SET not_before = now() WHERE member_id = 2")
        .execute(&pool)
        .await
        .unwrap();
    let back = claimed(&s, 1).await;
    assert_eq!(back, vec![2], "the row back from backoff lost its priority");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_row_is_not_claimed_before_its_send_after(pool: PgPool) {
    seed(&pool, CAMPAIGN, 10).await;
    sqlx::query("UPDATE campaign_targets SET send_after = now() + interval '1 hour', priority = 9 WHERE member_id <= 5")
        .execute(&pool)
        .await
        .unwrap();
    let s = store(&pool);
    let ids = claimed(&s, 10).await;
    assert_eq!(ids, vec![6, 7, 8, 9, 10]);
    sqlx::query(
        "UPDATE campaign_targets SET send_after = now() - interval '1 second' WHERE member_id = 3",
    )
    .execute(&pool)
    .await
    .unwrap();
    let ids = claimed(&s, 10).await;
    assert_eq!(ids, vec![3]);
}

/// A pod the Job controller restarts keeps its Job's budget: `DEADLINE_S` counts from the
/// Job's first pod, so a restart past it sends nothing and says "done for now". The budget is
/// the Job object's (`JOB_UID`): a new Job under the same name starts a whole one.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_restarted_pod_does_not_start_a_new_time_budget(pool: PgPool) {
    const FIRST: &str = "0b0e6a4c-8a8e-4f57-9f0c-3c4f1b6c0001";
    seed(&pool, CAMPAIGN, 30).await;
    let p = provider(Default::default()).await;
    let mut cfg = config(&p.url);
    cfg.deadline_s = 60;
    cfg.job_name = Some("campaign-sender".into());
    sqlx::query(
        "INSERT INTO job_budgets (job_uid, campaign_id, job_name, started_at) \
         VALUES ($1, $2, 'campaign-sender', now() - interval '61 seconds')",
    )
    .bind(FIRST)
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    // One Job, one budget, whatever the spelling of its UID.
    let simple = FIRST.replace('-', "");
    for spelling in [
        FIRST.to_string(),
        format!("{{{}}}", FIRST.to_uppercase()),
        format!("urn:uuid:{FIRST}"),
        simple,
    ] {
        cfg.job_uid = Some(spelling.clone());
        let restarted = run_to_end(&pool, cfg.clone()).await;
        assert_eq!(
            restarted.reason,
            StopReason::Deadline,
            "{spelling}: {restarted:?}"
        );
        assert_eq!(restarted.exit_code, exit::Exit::Done, "{restarted:?}");
    }
    assert_eq!(
        p.fake.stats().requests,
        0,
        "a restarted pod started a new budget"
    );

    // The same Job sending another campaign has a budget of its own.
    seed(&pool, "other-campaign", 5).await;
    let mut other = cfg.clone();
    other.campaign_id = "other-campaign".into();
    other.job_uid = Some(FIRST.into());
    let sent = run_to_end(&pool, other).await;
    assert_eq!(sent.reason, StopReason::Done, "{sent:?}");
    assert_eq!(sent.stats.sent, 5);

    // The next Job, of the same name, has a budget of its own, started by its first pod.
    cfg.job_uid = Some("0b0e6a4c-8a8e-4f57-9f0c-3c4f1b6c0002".into());
    let next = run_to_end(&pool, cfg).await;
    assert_eq!(next.reason, StopReason::Done, "{next:?}");
    assert_eq!(states(&pool).await.get("sent"), Some(&30));
    let budgets: i64 = sqlx::query_scalar("SELECT count(*) FROM job_budgets")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        budgets, 3,
        "this Job's for two campaigns, and the next Job's"
    );
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn import_reads_priority_and_send_after_and_refuses_a_bad_priority_whole(pool: PgPool) {
    let dir = tempfile_dir("windows-import");
    let good = dir.join("good.csv");
    std::fs::write(
        &good,
        "member_id,email,send_after,priority\n1,a@example.com,,5\n2,b@example.com,2030-01-02T08:00:00+09:00,\n",
    )
    .unwrap();
    let (code, out, err) = operator(
        &pool,
        &["import", "--campaign", CAMPAIGN, good.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let rows: Vec<(i64, i32, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT member_id, priority, send_after FROM campaign_targets ORDER BY member_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows[0], (1, 5, None));
    assert_eq!(rows[1].1, 0);
    assert_eq!(rows[1].2.unwrap().to_rfc3339(), "2030-01-01T23:00:00+00:00");

    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "member_id,email,priority\n3,c@example.com,1\n4,d@example.com,high\n",
    )
    .unwrap();
    let (code, out, err) = operator(
        &pool,
        &["import", "--campaign", "other", bad.to_str().unwrap()],
    )
    .await;
    assert_eq!(code, exit::Exit::DataError as i32, "{out}{err}");
    assert!(
        err.contains("line 3") && err.contains("priority 'high' is not an integer"),
        "{err}"
    );
    let others: i64 =
        sqlx::query_scalar("SELECT count(*) FROM campaign_targets WHERE campaign_id = 'other'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(others, 0, "a refused file was partly imported");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}-{}", std::process::id(), unix_ms_now()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Claims up to `n` rows (a one-minute lease) and lists their members in claim order.
async fn claimed(s: &campaign_sender::store::Store, n: u32) -> Vec<i64> {
    s.claim(n, Duration::from_secs(60))
        .await
        .unwrap()
        .rows
        .iter()
        .map(|r| r.member_id)
        .collect()
}

/// What `status` assumes for a campaign whose window is closed: the rate of the minute up to
/// its last delivery — that campaign's `sent` rows of that minute only, per second.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_closed_windows_rate_is_the_last_minute_of_this_campaigns_sends(pool: PgPool) {
    seed(&pool, CAMPAIGN, 200).await;
    seed(&pool, "another-campaign", 100).await;
    let last = Utc::now() - chrono::Duration::hours(3);
    // 90 rows sent in the minute up to `last` (one at `last` itself), 90 more in the minute
    // before, 20 failed in it, and the other campaign's 100 sent in it: 90 / 60 s = 1.5/s.
    sqlx::query(
        "UPDATE campaign_targets
            SET state = CASE WHEN member_id <= 180 OR campaign_id <> $1 THEN 'sent' ELSE 'failed' END,
                sent_at = $2 - make_interval(secs => CASE WHEN campaign_id <> $1 THEN 1
                                                          WHEN member_id <= 90 THEN (member_id - 1) * 0.5
                                                          WHEN member_id <= 180 THEN 61 + (member_id - 91) * 0.5
                                                          ELSE 10 END)",
    )
    .bind(CAMPAIGN)
    .bind(last)
    .execute(&pool)
    .await
    .unwrap();
    let store = campaign_sender::store::Store::new(pool.clone(), CAMPAIGN);
    assert_eq!(store.rate_before(last).await.unwrap(), 1.5);
}
