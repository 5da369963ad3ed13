//! Criterion benches for the hot paths:
//! - `claim_finish_200`: one claim of 200 rows + one fenced finish of them, on real PostgreSQL
//!   (a fresh database on the server `DATABASE_URL` points at; skipped with a message without
//!   it — `scripts/bench.sh` starts a throwaway server);
//! - `classify_resolve`: the pure outcome decision for one response;
//! - `rate_limiter_acquire`: one governor token (the pacer every send goes through).

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use campaign_sender::outcome::{classify, resolve, Refusals, RetryPolicy};
use campaign_sender::store::{Store, MIGRATOR};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use governor::{Quota, RateLimiter};

fn classify_resolve(c: &mut Criterion) {
    let policy = RetryPolicy {
        max_attempts: 5,
        base: Duration::from_secs(1),
        cap: Duration::from_secs(60),
        retry_after_cap: Duration::from_secs(600),
        resend_unknown: true,
    };
    let statuses = [200u16, 202, 429, 500, 503, 400, 422, 301];
    let refusals = Refusals::default();
    c.bench_function("classify_resolve", |b| {
        let mut i = 0usize;
        b.iter(|| {
            i = i.wrapping_add(1);
            let s = statuses[i % statuses.len()];
            black_box(resolve(
                classify(black_box(s), Some(Duration::from_secs(1)), &refusals),
                (i % 5) as u32 + 1,
                &policy,
                0.5,
            ))
        })
    });
}

fn rate_limiter_acquire(c: &mut Criterion) {
    // A quota far above what the bench can reach, so every check succeeds: the cost of a token.
    let limiter = RateLimiter::direct(Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap()));
    c.bench_function("rate_limiter_acquire", |b| {
        b.iter(|| black_box(limiter.check().is_ok()))
    });
}

fn claim_finish(c: &mut Criterion) {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("claim_finish_200: skipped — set DATABASE_URL to a PostgreSQL server that allows CREATE DATABASE (scripts/bench.sh starts one)");
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = format!("bench_{}", std::process::id());
    let (store, admin) = rt.block_on(async {
        let admin = sqlx::PgPool::connect(&url)
            .await
            .expect("connect DATABASE_URL");
        sqlx::query(&format!("CREATE DATABASE {db}"))
            .execute(&admin)
            .await
            .unwrap();
        let mut u = reqwest::Url::parse(&url).unwrap();
        u.set_path(&format!("/{db}"));
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(u.as_str())
            .await
            .unwrap();
        MIGRATOR.run(&pool).await.unwrap();
        // 1.2 M rows like our users' campaign; the bench drains from the front of the work set.
        sqlx::query(
            "INSERT INTO campaign_targets (campaign_id, member_id, email)
             SELECT 'bench', g, 'member' || g || '@example.com' FROM generate_series(1, 1200000) g",
        )
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("VACUUM ANALYZE campaign_targets")
            .execute(&pool)
            .await
            .unwrap();
        (Store::new(pool, "bench"), admin)
    });
    c.bench_function("claim_finish_200", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let t = Instant::now();
                    let batch = store.claim(200, Duration::from_secs(30)).await.unwrap();
                    let results: Vec<_> = batch
                        .rows
                        .iter()
                        .map(|r| {
                            (
                                r.member_id,
                                campaign_sender::outcome::Resolution::Sent {
                                    status: 200,
                                    message_id: None,
                                }
                                .written(),
                            )
                        })
                        .collect();
                    store.finish(batch.claim_id, &results).await.unwrap();
                    spent += t.elapsed();
                    if batch.rows.len() < 200 {
                        // Drained: start over (not timed).
                        sqlx::query("UPDATE campaign_targets SET state = 'pending'")
                            .execute(store.pool())
                            .await
                            .unwrap();
                    }
                }
                spent
            })
        })
    });
    rt.block_on(async {
        store.pool().close().await;
        sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .execute(&admin)
            .await
            .unwrap();
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = classify_resolve, rate_limiter_acquire, claim_finish
}
criterion_main!(benches);
