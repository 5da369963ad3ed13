//! One-click unsubscribe (RFC 8058) on `events`, as a mailbox provider and a person use it:
//! POST in both encodings opts the row out and lists the address (200, no redirect), GET and
//! HEAD change nothing, a forged or altered token changes nothing, and the database not
//! answering is 503 within the bound.

use std::time::Duration;

use campaign_sender::unsubscribe::Signer;
use sqlx::PgPool;

use crate::events::*;
use crate::helpers::*;

fn signer() -> Signer {
    Signer::new(ONE_CLICK[1].1).unwrap()
}

/// (opted out?, listed as (reason, source)?, one-click events counted) for member `m`.
pub(crate) async fn left(pool: &PgPool, m: i64) -> (bool, Option<(String, Option<String>)>, i64) {
    let opted: bool = sqlx::query_scalar(
        "SELECT opted_out_at IS NOT NULL FROM campaign_targets WHERE campaign_id = $1 AND member_id = $2",
    )
    .bind(CAMPAIGN)
    .bind(m)
    .fetch_one(pool)
    .await
    .unwrap();
    let listed: Option<(String, Option<String>)> =
        sqlx::query_as("SELECT reason, source FROM suppressions WHERE email = $1")
            .bind(format!("member{m}@example.com"))
            .fetch_optional(pool)
            .await
            .unwrap();
    let counted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM provider_events WHERE vendor = 'one-click' AND member_id = $1",
    )
    .bind(m)
    .fetch_one(pool)
    .await
    .unwrap();
    (opted, listed, counted)
}

async fn send(
    method: reqwest::Method,
    url: &str,
    content_type: Option<&str>,
    body: &str,
) -> reqwest::Response {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let mut r = client.request(method, url).body(body.to_string());
    if let Some(t) = content_type {
        r = r.header("Content-Type", t);
    }
    r.send().await.unwrap()
}

const FORM: &str = "application/x-www-form-urlencoded";

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_one_click_post_opts_out_and_lists_at_once_and_get_changes_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    // As `events` runs: its own role, with exactly the grants of docs/roles.sql.
    let role = PgPool::connect(&role_url(&pool, "campaign_sender_events").await)
        .await
        .unwrap();
    let base = serve_events(role, listeners(false)).await;
    let url = |m: i64| format!("{base}/unsubscribe/{}", signer().token(CAMPAIGN, m));

    // A person or a link scanner following the link: a page with a button, nothing changed.
    for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
        let r = send(method.clone(), &url(1), None, "").await;
        assert_eq!(r.status(), 200, "{method}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(csp.contains("form-action 'self'"), "{csp}");
        let page = r.text().await.unwrap();
        assert!(!page.contains('@'), "an address on the page: {page}");
    }
    assert_eq!(
        left(&pool, 1).await,
        (false, None, 0),
        "GET changed something"
    );

    // The mailbox provider's one click, form-encoded: done before the 200, no redirect.
    let r = send(
        reqwest::Method::POST,
        &url(1),
        Some(FORM),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("location").is_none());
    let done = (
        true,
        Some(("unsubscribe".into(), Some("one-click".into()))),
        1,
    );
    assert_eq!(left(&pool, 1).await, done);
    // A second click changes nothing.
    let r = send(
        reqwest::Method::POST,
        &url(1),
        Some(FORM),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(left(&pool, 1).await, done);

    // multipart/form-data, as RFC 8058 says a client SHOULD send it.
    let multipart = "--b0undary\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b0undary--\r\n";
    let r = send(
        reqwest::Method::POST,
        &url(2),
        Some("multipart/form-data; boundary=b0undary"),
        multipart,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(left(&pool, 2).await, done);

    // Neither is claimed again, and the addresses are listed for every later campaign.
    let store = campaign_sender::store::Store::new(pool.clone(), CAMPAIGN);
    let batch = store.claim(10, Duration::from_secs(30)).await.unwrap();
    let claimed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(claimed, [3]);
    seed(&pool, "next-campaign", 3).await;
    let next = campaign_sender::store::Store::new(pool.clone(), "next-campaign");
    let batch = next.claim(10, Duration::from_secs(30)).await.unwrap();
    assert_eq!(batch.rows.len(), 1, "a later campaign mailed who left");
    assert_eq!(batch.suppressed, 2);
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_forged_altered_or_truncated_token_changes_nothing(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let genuine = signer().token(CAMPAIGN, 1);
    let mac = genuine.rsplit('.').next().unwrap();
    let stranger = Signer::new("another secret of thirty-two bytes").unwrap();
    for token in [
        format!("{CAMPAIGN}.2.{mac}"),
        genuine[..genuine.len() - 2].to_string(),
        format!("{genuine}x"),
        stranger.token(CAMPAIGN, 1),
        "nothing".to_string(),
    ] {
        let url = format!("{base}/unsubscribe/{token}");
        let r = send(
            reqwest::Method::POST,
            &url,
            Some(FORM),
            "List-Unsubscribe=One-Click",
        )
        .await;
        assert_eq!(r.status(), 404, "{token}");
        assert_eq!(
            send(reqwest::Method::GET, &url, None, "").await.status(),
            404
        );
    }
    // A genuine token, but not the one-click body: nothing either.
    let url = format!("{base}/unsubscribe/{genuine}");
    let r = send(
        reqwest::Method::POST,
        &url,
        Some(FORM),
        "unsubscribe=please",
    )
    .await;
    assert_eq!(r.status(), 400);
    for m in 1..=3 {
        assert_eq!(left(&pool, m).await, (false, None, 0), "member {m}");
    }
}

#[tokio::test]
async fn a_database_that_does_not_answer_is_503_within_the_bound() {
    let dead = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(30))
        .connect_lazy(&format!("postgres://x@{}/x", refused_addr()))
        .unwrap();
    let base = serve_events(dead, listeners(false)).await;
    let url = format!("{base}/unsubscribe/{}", signer().token(CAMPAIGN, 1));
    let t0 = std::time::Instant::now();
    let r = send(
        reqwest::Method::POST,
        &url,
        Some(FORM),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(r.status(), 503);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// RFC 8058 and Gmail's 48 hours do not end with our retention: a one-click on the mail of a
/// campaign archived since is answered 200 after the archive's folded address is listed (as
/// `events` runs, with its own role's grants), and no later campaign mails that mailbox.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_one_click_on_an_archived_campaigns_mail_is_honoured(pool: PgPool) {
    use campaign_sender::store::archive;
    sqlx::query(
        "INSERT INTO campaign_targets (campaign_id, member_id, email, state, sent_at)
         SELECT $1, g, 'Member' || g || '@Example.com', 'sent', now() FROM generate_series(1, 3) g",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    archive::begin(&pool, CAMPAIGN).await.unwrap();
    archive::move_all(&pool, CAMPAIGN, archive::LockRetry::ARCHIVE)
        .await
        .unwrap();
    archive::complete(&pool, CAMPAIGN).await.unwrap();
    let role = PgPool::connect(&role_url(&pool, "campaign_sender_events").await)
        .await
        .unwrap();
    let base = serve_events(role, listeners(false)).await;
    let url = format!("{base}/unsubscribe/{}", signer().token(CAMPAIGN, 2));
    let r = send(
        reqwest::Method::POST,
        &url,
        Some(FORM),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(r.status(), 200);
    let listed: Vec<(String, String)> = sqlx::query_as("SELECT email, reason FROM suppressions")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        listed,
        [("member2@example.com".into(), "unsubscribe".into())]
    );
    seed(&pool, "next-campaign", 3).await;
    let next = campaign_sender::store::Store::new(pool.clone(), "next-campaign");
    let batch = next.claim(10, Duration::from_secs(30)).await.unwrap();
    let claimed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(claimed, [1, 3], "a later campaign mailed who left");
    // A token of a campaign nobody has is still 404, nothing stored.
    let stranger = format!("{base}/unsubscribe/{}", signer().token("never-sent", 2));
    let r = send(
        reqwest::Method::POST,
        &stranger,
        Some(FORM),
        "List-Unsubscribe=One-Click",
    )
    .await;
    assert_eq!(r.status(), 404);
}

/// Every answer of `/unsubscribe` carries the page's security headers — the router's 405,
/// the body's 413 (over one-click's own small bound) and 400 — and a multipart body whose
/// `List-Unsubscribe` words sit in a part named otherwise unsubscribes nobody.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn every_answer_carries_the_page_headers_and_only_the_named_part_counts(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    let base = serve_events(pool.clone(), listeners(false)).await;
    let url = format!("{base}/unsubscribe/{}", signer().token(CAMPAIGN, 1));
    let smuggled = "--b\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\nname=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--b--\r\n";
    let big = "List-Unsubscribe=One-Click&".repeat(1000);
    for (method, kind, body, status) in [
        (
            reqwest::Method::PUT,
            Some(FORM),
            "List-Unsubscribe=One-Click",
            405,
        ),
        (reqwest::Method::POST, Some(FORM), big.as_str(), 413),
        (
            reqwest::Method::POST,
            Some(FORM),
            "List-Unsubscribe=Two-Clicks",
            400,
        ),
        (
            reqwest::Method::POST,
            Some("multipart/form-data; boundary=b"),
            smuggled,
            400,
        ),
    ] {
        let r = send(method.clone(), &url, kind, body).await;
        assert_eq!(r.status(), status, "{method} {status}");
        let csp = r.headers().get("content-security-policy");
        assert!(
            csp.is_some_and(|v| v.to_str().unwrap().contains("default-src 'none'")),
            "{method} {status}"
        );
        assert_eq!(r.headers()["x-frame-options"], "DENY", "{method} {status}");
    }
    assert_eq!(
        left(&pool, 1).await,
        (false, None, 0),
        "nobody unsubscribed"
    );
}

/// The operator's texts (`UNSUBSCRIBE_PAGE_TEXTS`) replace ours, in the reader's language, with
/// `events` as a process; a file with an unknown key stops it at start (78, naming the key),
/// and so does a default language the pages do not have.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_operators_texts_speak_on_the_page_and_a_bad_file_stops_events(pool: PgPool) {
    seed(&pool, CAMPAIGN, 1).await;
    sqlx::query(
        "INSERT INTO campaigns (campaign_id, from_address) VALUES ($1, 'shop@example.co.jp')",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let db = role_url(&pool, "campaign_sender_events").await;
    let texts = temp_path("texts.json");
    std::fs::write(
        &texts,
        r#"{"ja": {"confirm_lead": "{sender}のお知らせを止めますか？"}}"#,
    )
    .unwrap();
    let addr = refused_addr().to_string();
    let path = texts.to_str().unwrap();
    let _events = spawn_sender(
        &["events"],
        &db,
        &[
            ("EVENTS_ADDR", &addr),
            ONE_CLICK[1],
            ("UNSUBSCRIBE_PAGE_TEXTS", path),
            ("UNSUBSCRIBE_PAGE_LANG", "ja"),
        ],
    );
    let base = format!("http://{addr}");
    until_healthy(&base, "events").await;
    let url = format!("{base}/unsubscribe/{}", signer().token(CAMPAIGN, 1));
    let page = |accept: Option<&'static str>| {
        let url = url.clone();
        async move {
            let mut r = reqwest::Client::new().get(&url);
            if let Some(a) = accept {
                r = r.header("Accept-Language", a);
            }
            let r = r.send().await.unwrap();
            let lang = r.headers()["content-language"]
                .to_str()
                .unwrap()
                .to_string();
            (lang, r.text().await.unwrap())
        }
    };
    let (lang, html) = page(Some("fr-FR, de")).await;
    assert_eq!(
        lang, "ja",
        "UNSUBSCRIBE_PAGE_LANG for a reader we cannot serve"
    );
    assert!(
        html.contains("<strong>example.co.jp</strong>のお知らせを止めますか？"),
        "{html}"
    );
    assert!(!html.contains('@'), "{html}");
    let (lang, html) = page(Some("en-US,en;q=0.9")).await;
    assert_eq!(lang, "en");
    assert!(
        html.contains("<html lang=\"en\">") && html.contains("Stop receiving mail from"),
        "{html}"
    );

    std::fs::write(&texts, r#"{"ja": {"confirm_leed": "x"}}"#).unwrap();
    let refused = |setting: (&'static str, String)| {
        let db = db.clone();
        async move {
            let addr = refused_addr().to_string();
            let env = [
                ("EVENTS_ADDR", addr.as_str()),
                ONE_CLICK[1],
                (setting.0, setting.1.as_str()),
            ];
            finish(
                spawn_sender(&["events"], &db, &env),
                Duration::from_secs(30),
            )
            .await
        }
    };
    let (code, _, err) = refused(("UNSUBSCRIBE_PAGE_TEXTS", path.to_string())).await;
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("UNSUBSCRIBE_PAGE_TEXTS") && err.contains("ja.confirm_leed"),
        "{err}"
    );
    let (code, _, err) = refused(("UNSUBSCRIBE_PAGE_LANG", "fr".to_string())).await;
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("UNSUBSCRIBE_PAGE_LANG"), "{err}");
}
