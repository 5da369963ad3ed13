//! The pages in a real browser: the status page (`campaign-sender web` as a process, logged in
//! as its own role, over real PostgreSQL while two worker processes send a campaign and another
//! waits paused; tests/browser/web.test.mjs) and the unsubscribe pages (`campaign-sender events`
//! likewise; tests/browser/unsubscribe.test.mjs), driven through headless Chromium (see those
//! files for what they hold).

use std::time::Duration;

use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

/// The browser tests' directory (`BROWSER_TESTS`, set by scripts/test.sh from
/// scripts/browser.sh), with its npm packages installed.
fn browser_tests() -> std::path::PathBuf {
    let dir: std::path::PathBuf = std::env::var("BROWSER_TESTS")
        .map(Into::into)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser"));
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "the browser tests' packages are not installed: run scripts/browser.sh (scripts/test.sh does)"
    );
    dir
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_page_in_chromium_moves_while_a_campaign_sends_and_shows_a_pause(pool: PgPool) {
    let dir = browser_tests();
    seed(&pool, "spring", 9000).await;
    seed(&pool, "autumn", 40).await;
    seed(&pool, "summer", 1500).await;
    // What an on-call meets: spring sent a first part earlier (a gap since), a few rows failed;
    // summer is done.
    sqlx::raw_sql(
        "UPDATE campaign_targets SET state = 'sent', attempts = 1,
                sent_at = now() - interval '40 minutes' + member_id * interval '400 milliseconds'
          WHERE campaign_id = 'spring' AND member_id <= 3000;
         UPDATE campaign_targets SET state = 'failed', attempts = 1, last_status = 422,
                last_error = 'invalid_recipient'
          WHERE campaign_id = 'spring' AND member_id BETWEEN 3001 AND 3012;
         UPDATE campaign_targets SET state = 'sent', attempts = 1,
                sent_at = now() - interval '3 hours' + member_id * interval '1 second'
          WHERE campaign_id = 'summer';",
    )
    .execute(&pool)
    .await
    .unwrap();
    campaign_sender::store::campaigns::pause(
        &pool,
        "autumn",
        "ops-lead",
        Some("waiting for legal"),
    )
    .await
    .unwrap();
    let p = provider(FakeConfig::default()).await;
    let workers_db = worker_url(&pool).await;
    let mut workers = Vec::new();
    for id in ["spring-0", "spring-1"] {
        workers.push(spawn_sender(
            &["run"],
            &workers_db,
            &[
                ("CAMPAIGN_ID", "spring"),
                ("MAIL_URL", &p.url),
                ("MAIL_RATE_PER_S", "60"),
                ("WORKER_ID", id),
                ("DEADLINE_S", "150"),
            ],
        ));
    }
    let addr = refused_addr().to_string();
    let _web = spawn_sender(
        &["web"],
        &role_url(&pool, "campaign_sender_web").await,
        &[("WEB_ADDR", &addr), ("WEB_REFRESH_S", "1")],
    );
    let base = format!("http://{addr}");
    until_some(
        Duration::from_secs(30),
        "web to read the campaigns",
        || async {
            let h = reqwest::get(format!("{base}/healthz")).await.ok()?;
            h.status().is_success().then_some(())
        },
    )
    .await;
    until_stats(&p, Duration::from_secs(30), "the first deliveries", |s| {
        s.delivered >= 60
    })
    .await;

    let said = browser_test(
        &dir,
        "web.test.mjs",
        &[
            ("BASE_URL", &base),
            ("SENDING", "spring"),
            ("PAUSED", "autumn"),
        ],
    )
    .await;
    assert!(
        said.contains("ok: axe-core finds no WCAG 2 A/AA violation"),
        "{said}"
    );
    for w in &mut workers {
        let _ = w.start_kill();
    }
}

/// Runs `script` of the browser tests with `env` (and `CHROMIUM`, `SCREENSHOTS` passed on),
/// within 2 minutes; asserts it succeeded and returns what it said.
async fn browser_test(dir: &std::path::Path, script: &str, env: &[(&str, &str)]) -> String {
    let mut node = tokio::process::Command::new("node");
    node.arg(dir.join(script))
        .current_dir(dir)
        .envs(env.iter().copied())
        .kill_on_drop(true);
    for passed in ["CHROMIUM", "SCREENSHOTS"] {
        if let Ok(v) = std::env::var(passed) {
            node.env(passed, v);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(120), node.output())
        .await
        .expect("the browser test ended within 2 minutes")
        .expect("node runs (Node.js is needed: scripts/browser.sh)");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    assert!(
        out.status.success(),
        "the browser test {script} failed:\n{said}"
    );
    said
}

/// A member who reads Japanese and one who reads English follow their mails' links on a phone:
/// each page is in their language, names the sender ("News" of `News <news@example.com>`) and
/// no address, passes axe AA; the button unsubscribes each (opted out and listed), and a forged
/// link names no sender. `events` runs as a process, as its own role.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_unsubscribe_pages_in_chromium_speak_the_readers_language_and_name_the_sender(
    pool: PgPool,
) {
    let dir = browser_tests();
    seed(&pool, CAMPAIGN, 2).await;
    sqlx::query(
        "INSERT INTO campaigns (campaign_id, from_address) VALUES ($1, 'News <news@example.com>')",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let addr = refused_addr().to_string();
    let _events = spawn_sender(
        &["events"],
        &role_url(&pool, "campaign_sender_events").await,
        &[("EVENTS_ADDR", &addr), ONE_CLICK[1]],
    );
    let base = format!("http://{addr}");
    until_healthy(&base, "events").await;
    let signer = campaign_sender::unsubscribe::Signer::new(ONE_CLICK[1].1).unwrap();
    let (ja, en) = (signer.token(CAMPAIGN, 1), signer.token(CAMPAIGN, 2));
    let said = browser_test(
        &dir,
        "unsubscribe.test.mjs",
        &[
            ("BASE_URL", &base),
            ("TOKEN_JA", &ja),
            ("TOKEN_EN", &en),
            ("SENDER", "News"),
        ],
    )
    .await;
    assert!(
        said.contains("ok: en: axe-core finds no WCAG 2 A/AA violation"),
        "{said}"
    );
    let left: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT member_id, opted_out_at IS NOT NULL FROM campaign_targets ORDER BY member_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(left, [(1, true), (2, true)]);
    let listed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM suppressions WHERE reason = 'unsubscribe'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(listed, 2);
}
