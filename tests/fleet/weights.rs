//! Campaigns side by side under one rate-limit key, real worker processes against a fake
//! provider that enforces exactly the limit: the key's rate goes by the campaigns' weights
//! (`configure --weight`), not by their pod counts, and the fleet stays at the limit.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_provider::{Delivery, FakeConfig};
use sqlx::PgPool;

use crate::helpers::*;

const A: &str = "newsletter";
const B: &str = "flash-sale";
const LIMIT: f64 = 500.0;

/// `campaign-sender run` for one pod of `campaign`, every pod told the key's whole limit.
fn env<'a>(campaign: &'a str, mail_url: &'a str, worker: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CAMPAIGN_ID", campaign),
        ("MAIL_URL", mail_url),
        ("WORKER_ID", worker),
        ("MAIL_RATE_PER_S", "500"),
        ("SEND_CONCURRENCY", "32"),
        ("BATCH_SIZE", "200"),
        ("LEASE_S", "10"),
        ("CONNECT_TIMEOUT_MS", "500"),
        ("READ_TIMEOUT_MS", "2000"),
        ("DEADLINE_S", "90"),
        ("IDLE_POLL_MS", "100"),
    ]
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// First deliveries of `campaign` (its template is its id) in `[from, to)` Unix ms, per second.
fn rate(d: &[Delivery], campaign: &str, from: u64, to: u64) -> f64 {
    let n = d
        .iter()
        .filter(|x| x.template == campaign && (from..to).contains(&x.first_ms))
        .count();
    n as f64 / ((to - from) as f64 / 1000.0)
}

/// The last first delivery of `campaign`, Unix ms.
fn last(d: &[Delivery], campaign: &str) -> u64 {
    d.iter()
        .filter(|x| x.template == campaign)
        .map(|x| x.first_ms)
        .max()
        .unwrap()
}

/// The fake provider on threads of its own (its own runtime), not on the test's: what the test
/// does meanwhile (children's output, `configure`) must not hold requests back and let them
/// reach its rate check together, which it would answer 429.
fn provider_on_its_own_threads(cfg: FakeConfig) -> TestProvider {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let addr = "127.0.0.1:0".parse().unwrap();
            let (bound, fake, task) = fake_provider::spawn(cfg, addr).await.unwrap();
            tx.send((bound, fake)).unwrap();
            // Serves until the test's process ends.
            let _ = task.await;
        });
    });
    let (bound, fake) = rx.recv().unwrap();
    TestProvider {
        url: format!("http://{bound}/v1/send"),
        fake,
    }
}

async fn set_weight(pool: &PgPool, campaign: &str, weight: &str) {
    let op = operator_url(pool).await;
    let c = spawn_sender(
        &["configure", "--campaign", campaign, "--weight", weight],
        &op,
        &[],
    );
    let (code, out, err) = finish(c, Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{out}\n{err}");
}

/// The case: a newsletter on 4 pods at weight 1 and a flash sale on 1 pod at weight 3
/// share one 500/s key 1 : 3 (per pod count it would be 4 : 1); the flash sale's weight set to
/// 1 while they run is adopted within 3 s; when it is done the newsletter alone is back at the
/// limit within 3 s. At every moment the provider never says 429 and nobody is mailed twice.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn campaigns_share_one_limit_by_weight_not_by_pod_count_and_adopt_a_weight_live(
    pool: PgPool,
) {
    seed(&pool, A, 6500).await;
    seed(&pool, B, 4000).await;
    set_weight(&pool, B, "3").await;
    // The provider enforces exactly the limit, with the burst of the drain benchmarks (20).
    let p = provider_on_its_own_threads(FakeConfig {
        rate_per_s: Some(LIMIT),
        burst: 20,
        latency_mean_ms: 20,
        latency_jitter_ms: 10,
        ..Default::default()
    });
    let db = worker_url(&pool).await;
    let started = unix_ms();
    let mut children: Vec<_> = ["a0", "a1", "a2", "a3"]
        .iter()
        .map(|w| spawn_sender(&["run"], &db, &env(A, &p.url, w)))
        .collect();
    children.push(spawn_sender(&["run"], &db, &env(B, &p.url, "b0")));
    tokio::time::sleep(Duration::from_millis(6000)).await;
    let changed = unix_ms();
    set_weight(&pool, B, "1").await;
    for c in children {
        let (code, out, err) = finish(c, Duration::from_secs(90)).await;
        assert_eq!(code, 0, "{out}\n{err}");
    }
    let s = p.fake.stats();
    assert_eq!(s.throttled_429, 0, "{s:?}");
    assert_eq!(s.delivered, 6500 + 4000, "{s:?}");
    assert_eq!(s.members_delivered_more_than_once, 0, "{s:?}");
    let d = p.fake.deliveries();
    let (b_done, a_done) = (last(&d, B), last(&d, A));
    // The stretches: weights 1 : 3 from when every pod has claimed into its share (2.5 s: five
    // processes of the debug build start) until the change; 1 : 1
    // from 3 s after the change until the flash sale's tail; the newsletter alone from 3 s after
    // the flash sale's last delivery until its own tail.
    let stretches = [
        ("weights 1:3", started + 2500, changed, 0.75),
        ("weights 1:1", changed + 3000, b_done - 500, 0.5),
    ];
    for (name, from, to, part) in stretches {
        assert!(
            to > from + 1000,
            "{name}: only {} ms to measure",
            to.saturating_sub(from)
        );
        let (a, b) = (rate(&d, A, from, to), rate(&d, B, from, to));
        let got = b / (a + b);
        eprintln!(
            "{name}: flash sale {b:.0}/s, newsletter {a:.0}/s: {got:.3} of {:.0}/s",
            a + b
        );
        assert!(
            (got - part).abs() <= 0.05,
            "{name}: the flash sale had {got:.3} of it ({b:.0}/s next to {a:.0}/s)"
        );
        let each: Vec<String> = (from / 1000..to / 1000)
            .map(|s| {
                format!(
                    "{:.0}+{:.0}",
                    rate(&d, A, s * 1000, s * 1000 + 1000),
                    rate(&d, B, s * 1000, s * 1000 + 1000)
                )
            })
            .collect();
        assert!(
            a + b >= 0.97 * LIMIT,
            "{name}: {:.0}/s of {LIMIT} (A+B in each second: {})",
            a + b,
            each.join(" ")
        );
    }
    // The newsletter alone: the two seconds from 3 s after the flash sale's last delivery,
    // before its own tail (a drain's last claims, docs/BENCHMARKS.md "One rate limit for the fleet").
    let (from, to) = (b_done + 3000, b_done + 5000);
    assert!(
        a_done > to + 1000,
        "the newsletter ended {} ms after the flash sale",
        a_done - b_done
    );
    let alone = rate(&d, A, from, to);
    let each: Vec<String> = (b_done / 1000 - 1..a_done / 1000 + 1)
        .map(|s| {
            format!(
                "{}:{:.0}",
                s - started / 1000,
                rate(&d, A, s * 1000, s * 1000 + 1000)
            )
        })
        .collect();
    eprintln!(
        "the newsletter alone: {alone:.0}/s (each second: {})",
        each.join(" ")
    );
    assert!(alone >= 0.95 * LIMIT, "the newsletter alone: {alone:.0}/s");
}

/// `configure --weight` is stored, shown by `status` (the campaign's line, and each pod's
/// weight beside its share) and changes nothing else.
#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn a_weight_is_stored_shown_by_status_and_changes_nothing_else(pool: PgPool) {
    seed(&pool, A, 10).await;
    let op = operator_url(&pool).await;
    let configure = ["configure", "--campaign", A, "--template", "t1"];
    let (code, _, err) = finish(spawn_sender(&configure, &op, &[]), Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    set_weight(&pool, A, "2.5").await;
    let s = campaign_sender::store::campaigns::settings(&pool, A)
        .await
        .unwrap();
    assert_eq!((s.weight, s.template.as_str()), (2.5, "t1"));
    // A pod of the campaign with work reports its campaign's weight.
    sqlx::query(
        "INSERT INTO rate_limits (limit_key, effective_per_s, updated_at)
         VALUES ('127.0.0.1', 500, now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO rate_pods (limit_key, pod_id, worker, campaign_id, weight, limit_per_s,
                                share_per_s, prev_share_per_s, share_changed_at, expires_at)
         VALUES ('127.0.0.1', gen_random_uuid(), 'pod-1', $1, 2.5, 500, 500, 500, now(),
                 now() + interval '1 minute')",
    )
    .bind(A)
    .execute(&pool)
    .await
    .unwrap();
    let status = ["status", "--campaign", A];
    let (code, out, err) = finish(spawn_sender(&status, &op, &[]), Duration::from_secs(20)).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("campaign   {A} (template t1, weight 2.5)")),
        "{out}"
    );
    assert!(out.contains("share   500.0/s, weight 2.5"), "{out}");
    let (code, out, err) = finish(
        spawn_sender(&["status", "--campaign", A, "--json"], &op, &[]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["weight"], 2.5, "{out}");
}
