//! A database connection that goes dark (packets vanish, the socket stays open): each attempt
//! of a statement is cut at its bound (`store::outage`), the connection it held is closed and
//! never handed out again (`store::connect::pool`), and the server ends what a vanished worker
//! left open (`store::connect::Session`). The stopping pod's bound is in exit_codes.rs.

use std::time::{Duration, Instant};

use campaign_sender::config::{DbConfig, FromEnv};
use campaign_sender::store::connect::{self, Session};
use campaign_sender::store::outage::retrying;
use campaign_sender::store::Store;
use fake_provider::FakeConfig;
use sqlx::PgPool;

use crate::helpers::*;

/// A pool of `max` connections to `url` as `run` makes it (the worker's session settings).
async fn worker_pool(url: &str, max: u32) -> PgPool {
    let cfg = DbConfig::from_vars([
        ("DATABASE_URL".to_string(), url.to_string()),
        ("DB_MAX_CONNECTIONS".to_string(), max.to_string()),
    ])
    .unwrap();
    let session = Session::Worker {
        outage_limit: Duration::from_secs(20),
    };
    connect::connect(cfg.reach(), session, |_| false)
        .await
        .unwrap()
}

/// The only connection of the pool goes dark while a statement waits for its answer. The
/// attempt is cut at 2 s, the connection closed (not pinged for minutes while it holds the
/// pool's one slot), and the next attempt answers on a new connection.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_statement_cut_on_a_dark_connection_closes_it_and_the_next_attempt_answers(pool: PgPool) {
    let url = worker_url(&pool).await;
    let db = FrozenDb::in_front_of(&url).await;
    let p = worker_pool(&db.url(&url), 1).await;
    sqlx::query("SELECT 1").execute(&p).await.unwrap();
    let started = Instant::now();
    let asked = retrying(Duration::from_secs(20), "a test statement", || {
        sqlx::query_scalar::<_, i32>("SELECT 7 FROM pg_sleep(0.5)").fetch_one(&p)
    });
    let asked = tokio::time::timeout(Duration::from_secs(30), asked);
    let dark = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        db.go_dark();
    };
    let (answer, ()) = tokio::join!(asked, dark);
    let took = started.elapsed();
    assert_eq!(answer.expect("never answered").unwrap(), 7);
    // Cut at 2 s, closed within the release ping's 1 s, a 0.2-s wait, a 0.5-s statement.
    assert!(took < Duration::from_secs(6), "answered after {took:?}");
    assert_eq!(
        db.dark_closed(),
        (1, 1),
        "(went dark, closed by the client)"
    );
}

/// A rate round holds its key's row lock inside a transaction. A pod whose connection goes dark
/// mid-round must not hold it for the fleet until TCP gives up (minutes): the server ends a
/// worker's transaction left idle for 2 s.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_round_left_open_by_a_dark_pod_frees_its_key_within_seconds(pool: PgPool) {
    use campaign_sender::store::rate::lock_key;
    let url = worker_url(&pool).await;
    let db = FrozenDb::in_front_of(&url).await;
    let dark_pod = worker_pool(&db.url(&url), 1).await;
    let mut tx = dark_pod.begin().await.unwrap();
    lock_key(&mut tx, "provider", 500.0).await.unwrap();
    db.go_dark();
    let other_pod = worker_pool(&url, 1).await;
    let started = Instant::now();
    let locked = async {
        let mut tx = other_pod.begin().await?;
        sqlx::query("SET LOCAL lock_timeout = '20s'")
            .execute(&mut *tx)
            .await?;
        lock_key(&mut tx, "provider", 500.0).await?;
        tx.commit().await
    };
    let locked: Result<(), sqlx::Error> = locked.await;
    let took = started.elapsed();
    locked.expect("the key stayed locked by the dark pod");
    assert!(took < Duration::from_secs(5), "locked after {took:?}");
    drop(tx);
}

/// A whole run whose connections all go dark mid-run, with statements in flight on them (the
/// work table is locked for half a second first, so every statement on it started then is
/// waiting in the server): each is cut, the run goes on on new connections, and every row is
/// sent once.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_run_whose_connections_go_dark_sends_every_row_once(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3_000).await;
    let p = provider(FakeConfig {
        latency_mean_ms: 20,
        ..Default::default()
    })
    .await;
    let url = worker_url(&pool).await;
    let db = FrozenDb::in_front_of(&url).await;
    let mut cfg = config(&p.url);
    cfg.mail_rate_per_s = 1_000;
    let w = worker_on(
        cfg,
        Store::new(worker_pool(&db.url(&url), 4).await, CAMPAIGN),
        Duration::from_secs(20),
    );
    let run = tokio::spawn(async move { w.run(Default::default()).await });
    until_stats(&p, Duration::from_secs(30), "sending under way", |s| {
        s.delivered >= 500
    })
    .await;
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE campaign_targets IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.go_dark();
    lock.commit().await.unwrap();
    let dark_at = Instant::now();
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the run hung on a dark connection")
        .unwrap()
        .unwrap();
    let after = dark_at.elapsed();
    eprintln!("dark: the run finished {after:?} after its connections went dark");
    assert_eq!(report.exit_code.code(), 0, "{report:?}");
    assert_eq!(states(&pool).await.get("sent"), Some(&3_000));
    let s = p.fake.stats();
    assert_eq!(s.members_delivered_more_than_once, 0);
    assert_eq!(s.delivered, 3_000);
    let (went_dark, closed) = db.dark_closed();
    assert!(went_dark >= 1, "no connection was open at the swallow");
    // 2 500 rows at 1 000/s, with one cut of 2 s (or two when a retry met another dark one).
    assert!(after < Duration::from_secs(15), "finished {after:?} after");
    assert!(
        closed >= 1,
        "no dark connection was closed: {went_dark} went dark"
    );
}

/// A claim that commits while its connection goes dark (queued behind a lock, answered into
/// the void): the worker's retry keeps the claim's id and takes the committed rows back at
/// once, instead of leaving them leased to nobody for `LEASE_S` (30 s here).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_claim_whose_answer_is_lost_is_taken_back_by_its_retry_at_once(pool: PgPool) {
    seed(&pool, CAMPAIGN, 50).await;
    let url = worker_url(&pool).await;
    let db = FrozenDb::in_front_of(&url).await;
    let store = Store::new(worker_pool(&db.url(&url), 1).await, CAMPAIGN);
    // Prepared on the one connection first, as a worker's claims are: the lost claim then
    // goes out whole and commits (an unprepared one would wait for its Parse's answer).
    store.claim(0, Duration::from_secs(30)).await.unwrap();
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE campaign_targets IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let id = uuid::Uuid::new_v4();
    let started = Instant::now();
    let claim = tokio::spawn(async move {
        retrying(Duration::from_secs(20), "claiming rows", || {
            store.claim_as(id, 50, Duration::from_secs(30))
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    db.go_dark();
    lock.commit().await.unwrap();
    let batch = tokio::time::timeout(Duration::from_secs(30), claim)
        .await
        .expect("the claim hung")
        .unwrap()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(
        batch.rows.len(),
        50,
        "the rows committed by the lost claim were not taken back"
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(batch.rows.iter().all(|r| r.attempt == 1));
}

/// The server's bounds are set on the sessions they are meant for: keepalives on every one; a
/// statement time-out (the outage limit), the idle-transaction bound and the client check only on
/// a worker's (an import's COPY or an archive may run for minutes).
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn keepalives_on_every_session_and_statement_bounds_only_on_a_workers(pool: PgPool) {
    let url = worker_url(&pool).await;
    let show = |p: PgPool| async move {
        let mut got = Vec::new();
        for setting in [
            "tcp_keepalives_idle",
            "tcp_keepalives_interval",
            "tcp_keepalives_count",
            "tcp_user_timeout",
            "statement_timeout",
            "idle_in_transaction_session_timeout",
            "client_connection_check_interval",
        ] {
            let v: String = sqlx::query_scalar(&format!("SHOW {setting}"))
                .fetch_one(&p)
                .await
                .unwrap();
            got.push(v);
        }
        got
    };
    let worker = show(worker_pool(&url, 1).await).await;
    assert_eq!(
        worker,
        ["10", "5", "3", "30000", "20s", "2s", "1s"],
        "a worker's session"
    );
    let cfg = DbConfig::from_vars([("DATABASE_URL".to_string(), url.clone())]).unwrap();
    let other = connect::connect(cfg.reach(), Session::Other, |_| false)
        .await
        .unwrap();
    assert_eq!(
        show(other).await,
        ["10", "5", "3", "30000", "0", "0", "0"],
        "an operator's session"
    );
}
