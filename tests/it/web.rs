//! `campaign-sender web` over real PostgreSQL, logged in as its own role: what each page shows
//! and never shows, its headers, its login, the JSON `status --json` prints, and a database
//! that stops answering. The page in a real browser: `web_browser.rs`.

use std::sync::Arc;
use std::time::Duration;

use campaign_sender::web::board::{self, Board};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::helpers::*;

const WEB_ROLE: &str = "campaign_sender_web";

/// The status page in-process on a free port, reading as `campaign_sender_web` through `url`;
/// returns its base URL and board once the first round of reads is done (or after 10 s).
async fn serve(
    url: &str,
    logins: Vec<String>,
    timeout: Duration,
) -> (String, Arc<Board>, CancellationToken) {
    serve_in(url, logins, timeout, chrono_tz::Tz::UTC).await
}

/// [`serve`] with the pages' times in `zone` (`WEB_TIME_ZONE`).
async fn serve_in(
    url: &str,
    logins: Vec<String>,
    timeout: Duration,
    zone: chrono_tz::Tz,
) -> (String, Arc<Board>, CancellationToken) {
    // A patient pool: a database that does not answer must be noticed by the board's own
    // bound (`timeout`), not by the pool giving up.
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(120))
        .connect_lazy(url)
        .unwrap();
    let b = Board::new(Duration::from_secs(1), timeout, zone);
    let stop = CancellationToken::new();
    tokio::spawn(board::refresh(
        pool,
        b.clone(),
        campaign_sender::status::Defaults::documented(),
        stop.clone(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = campaign_sender::web::router(b.clone(), logins);
    let s = stop.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { s.cancelled().await })
            .await
    });
    for _ in 0..200 {
        if b.last_round().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (base, b, stop)
}

async fn get(url: &str) -> (u16, reqwest::header::HeaderMap, String) {
    let r = reqwest::get(url).await.unwrap();
    let (code, headers) = (r.status().as_u16(), r.headers().clone());
    (code, headers, r.text().await.unwrap())
}

/// Two campaigns as an on-call meets them: one half sent with failures, suppressed and
/// unconfirmed rows, one paused by someone who typed an address into the reason.
async fn two_campaigns(pool: &PgPool) {
    seed(pool, "spring", 200).await;
    seed(pool, "autumn", 50).await;
    sqlx::raw_sql(
        "UPDATE campaign_targets SET state = 'sent', sent_at = now() - member_id * interval '2 seconds'
          WHERE campaign_id = 'spring' AND member_id <= 100;
         UPDATE campaign_targets SET state = 'failed', attempts = 1, last_status = 400, last_error = 'bad_request'
          WHERE campaign_id = 'spring' AND member_id BETWEEN 101 AND 103;
         UPDATE campaign_targets SET state = 'unconfirmed', unknown_since = now() - interval '1 hour'
          WHERE campaign_id = 'spring' AND member_id BETWEEN 104 AND 105;
         INSERT INTO suppressions (email, reason) VALUES ('member106@example.com', 'complaint');
         UPDATE campaign_targets SET state = 'suppressed' WHERE campaign_id = 'spring' AND member_id = 106;
         INSERT INTO provider_events (vendor, event_id, what, campaign_id, member_id, family)
         SELECT 'sendgrid', 'e' || g, CASE WHEN g <= 90 THEN 'delivered' ELSE 'hard_bounce' END,
                'spring', g, 'other'
           FROM generate_series(1, 100) g;
         INSERT INTO provider_events (vendor, event_id, what, campaign_id, member_id, cause, code, family)
         VALUES ('sendgrid', 'r1', 'refused', 'spring', 200, 'authentication', '5.7.26', 'google');
         INSERT INTO campaign_family_tallies (campaign_id, family, sent, sender_refusals)
         VALUES ('spring', 'other', 95, 0), ('spring', 'google', 5, 1);",
    )
    .execute(pool)
    .await
    .unwrap();
    campaign_sender::store::campaigns::pause(
        pool,
        "autumn",
        "ops-lead",
        Some("ask ann@example.com first"),
    )
    .await
    .unwrap();
}

/// [`two_campaigns`], and the page over them as its role, no login.
async fn two_campaigns_served(pool: &PgPool) -> (String, CancellationToken) {
    two_campaigns(pool).await;
    let url = role_url(pool, WEB_ROLE).await;
    let (base, _board, stop) = serve(&url, vec![], Duration::from_secs(5)).await;
    (base, stop)
}

/// Every page and answer: what `status` counts, the paused campaign first with its banner, the
/// security headers on each, a 404 page for an unknown campaign — and no address anywhere,
/// not even the one typed into the pause reason.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn every_page_shows_the_status_figures_and_never_an_address(pool: PgPool) {
    // A campaign made before ids had one alphabet: its link must still lead to it.
    seed(&pool, "q 1/2?x", 3).await;
    let (base, stop) = two_campaigns_served(&pool).await;

    let (code, _, index) = get(&format!("{base}/")).await;
    assert_eq!(code, 200, "{index}");
    let (autumn, spring) = (
        index.find("/campaigns/autumn").unwrap(),
        index.find("/campaigns/spring").unwrap(),
    );
    assert!(autumn < spring, "the paused campaign comes first");
    assert!(
        index.contains("href=\"/campaigns/q%201%2F2%3Fx\""),
        "{index}"
    );
    let (code, _, legacy) = get(&format!("{base}/campaigns/q%201%2F2%3Fx")).await;
    assert_eq!(code, 200, "{legacy}");
    assert!(legacy.contains("q 1/2?x") && legacy.contains("/api/campaigns/q%201%2F2%3Fx"));
    assert!(
        index.contains("106\u{2009}/\u{2009}200") || index.contains("106 / 200 settled"),
        "{index}"
    );

    let (code, _, page) = get(&format!("{base}/campaigns/spring")).await;
    assert_eq!(code, 200);
    assert!(page.contains("What the provider reported"), "the funnel");
    assert!(page.contains("By mailbox provider"), "the providers");
    assert!(
        page.contains("Postmaster Tools") && page.contains("authentication 1"),
        "Gmail's complaints and our domain's refusals"
    );
    for figure in [
        "100",
        "unconfirmed",
        "resolve --campaign spring",
        "complaint",
        "400 bad request",
        "<svg",
        "bounced hard",
        "90.0 % of sent",
    ] {
        assert!(
            page.contains(figure),
            "{figure} missing from the campaign page"
        );
    }
    let (_, _, paused) = get(&format!("{base}/campaigns/autumn")).await;
    assert!(paused.contains("Paused</strong> by ops-lead"), "{paused}");
    assert!(paused.contains("resume --campaign autumn"));

    let (code, _, missing) = get(&format!("{base}/campaigns/%3Cscript%3Ex")).await;
    assert_eq!(code, 404);
    assert!(
        missing.contains("No such campaign") && !missing.contains("<script>"),
        "{missing}"
    );

    let (code, _, typed_address) = get(&format!("{base}/campaigns/ann@example.com")).await;
    assert_eq!(code, 404);
    let mut answers = vec![index, page, paused, missing, typed_address];
    for path in [
        "/",
        "/campaigns/spring",
        "/campaigns/nope",
        "/api/campaigns/spring",
        "/healthz",
        "/static/web.css",
        "/static/live.js",
        "/nowhere",
    ] {
        let (_, headers, body) = get(&format!("{base}{path}")).await;
        for (name, value) in campaign_sender::web::SECURITY_HEADERS {
            assert_eq!(
                headers.get(name).map(|v| v.to_str().unwrap()),
                Some(value),
                "{name} on {path}"
            );
        }
        answers.push(body);
    }
    for body in &answers[..5] {
        assert!(!body.contains('@'), "an address on a page: {body}");
    }
    stop.cancel();
}

/// With `WEB_TIME_ZONE=Asia/Tokyo` every time a page shows is Tokyo's, saying so (a pause at
/// 17:30 UTC reads 02:30 JST the next day); the JSON API stays in UTC.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn every_time_on_a_page_is_in_the_pages_time_zone(pool: PgPool) {
    two_campaigns(&pool).await;
    sqlx::query(
        "UPDATE campaigns SET paused_at = '2026-12-06 17:30:00+00' WHERE campaign_id = 'autumn'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let url = role_url(&pool, WEB_ROLE).await;
    let zone = chrono_tz::Tz::Asia__Tokyo;
    let (base, _board, stop) = serve_in(&url, vec![], Duration::from_secs(5), zone).await;
    let (_, _, paused) = get(&format!("{base}/campaigns/autumn")).await;
    assert!(paused.contains("since 2026-12-07 02:30:00 JST"), "{paused}");
    let (_, _, index) = get(&format!("{base}/")).await;
    let (_, _, spring) = get(&format!("{base}/campaigns/spring")).await;
    for page in [&paused, &index, &spring] {
        assert!(page.contains(" JST)"), "the read-at line: {page}");
        assert!(
            !page.contains("UTC"),
            "a time not in the page's zone: {page}"
        );
    }
    assert!(
        spring.contains("unconfirmed") && spring.contains("JST: "),
        "{spring}"
    );
    let (_, _, api) = get(&format!("{base}/api/campaigns/autumn")).await;
    assert!(api.contains("2026-12-06T17:30:00"), "{api}");
    stop.cancel();
}

/// `/api/campaigns/{id}` is `status --json` of the same moment: the same fields and counts.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_api_answers_what_status_json_prints(pool: PgPool) {
    let (base, stop) = two_campaigns_served(&pool).await;
    let (code, _, body) = get(&format!("{base}/api/campaigns/spring")).await;
    assert_eq!(code, 200);
    let api: serde_json::Value = serde_json::from_str(&body).unwrap();
    let status = campaign_sender::status::gather(
        &pool,
        "spring",
        campaign_sender::status::Defaults::documented(),
    )
    .await
    .unwrap();
    let cli = serde_json::to_value(&status).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&api), keys(&cli));
    assert_eq!(
        (
            api["counts"]["sent"].as_i64(),
            api["counts"]["unconfirmed"].as_i64()
        ),
        (Some(100), Some(2))
    );
    for field in [
        "counts",
        "remaining",
        "failures",
        "suppressed",
        "paused",
        "unconfirmed_since",
        "template",
        "failure_budget",
    ] {
        assert_eq!(api[field], cli[field], "{field}");
    }
    assert_eq!(get(&format!("{base}/api/campaigns/nope")).await.0, 404);
    stop.cancel();
}

/// With `WEB_BASIC_AUTH_FILE` every path needs one of its logins — but `/healthz`, which the
/// kubelet probes without one.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_login_file_closes_every_page_but_the_health_check(pool: PgPool) {
    two_campaigns(&pool).await;
    let logins = vec!["ops:s3cret".to_string(), "lead:other".to_string()];
    let (base, _board, stop) = serve(
        &role_url(&pool, WEB_ROLE).await,
        logins,
        Duration::from_secs(5),
    )
    .await;
    let client = reqwest::Client::new();
    for path in [
        "/",
        "/campaigns/spring",
        "/api/campaigns/spring",
        "/static/web.css",
        "/nowhere",
    ] {
        let url = format!("{base}{path}");
        let none = client.get(&url).send().await.unwrap();
        assert_eq!(none.status(), 401, "{path}");
        assert!(none.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic "));
        let wrong = client
            .get(&url)
            .basic_auth("ops", Some("s3cre"))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{path}");
        let right = client
            .get(&url)
            .basic_auth("lead", Some("other"))
            .send()
            .await
            .unwrap();
        assert_ne!(right.status(), 401, "{path}");
    }
    assert_eq!(
        client
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    stop.cancel();
}

/// A database that stops answering mid-read turns every page into a 503 that says so within
/// the read timeout (never stale figures shown as current, never a hang), and the pages come
/// back by themselves when it answers again.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_database_that_stops_answering_turns_the_pages_to_503_and_back(pool: PgPool) {
    two_campaigns(&pool).await;
    let url = role_url(&pool, WEB_ROLE).await;
    let frozen = FrozenDb::in_front_of(&url).await;
    let (base, _board, stop) = serve(&frozen.url(&url), vec![], Duration::from_secs(1)).await;
    assert_eq!(get(&format!("{base}/campaigns/spring")).await.0, 200);

    frozen.freeze();
    let page = until_some(Duration::from_secs(15), "a 503 page", || async {
        let (code, headers, body) = get(&format!("{base}/campaigns/spring")).await;
        (code == 503).then_some((headers, body))
    })
    .await;
    assert!(
        page.1.contains("The database is not answering"),
        "{}",
        page.1
    );
    assert_eq!(page.0["retry-after"], "2");
    assert_eq!(get(&format!("{base}/")).await.0, 503);
    assert_eq!(get(&format!("{base}/api/campaigns/spring")).await.0, 503);
    assert_eq!(get(&format!("{base}/healthz")).await.0, 503);

    frozen.thaw();
    until_some(Duration::from_secs(20), "the pages back", || async {
        (get(&format!("{base}/campaigns/spring")).await.0 == 200).then_some(())
    })
    .await;
    stop.cancel();
}
