//! KEDA's backlog query (manifests/overlays/deployment/scaledobject.yaml), run as KEDA runs it:
//! as its own role of docs/roles.sql, on real PostgreSQL. What it counts scales the `serve`
//! Deployment, so it must count exactly the rows a pod may send now, nothing while the campaign
//! is paused or outside its send window, and use the work-set index.

use std::path::Path;

use campaign_sender::store::campaigns;
use campaign_sender::window::{SendWindow, WindowState};
use chrono::{Duration as Span, NaiveTime, Timelike, Utc};
use sqlx::PgPool;

use crate::helpers::*;

const KEDA_ROLE: &str = "campaign_sender_keda";

/// The trigger's query as the overlay renders it for campaign `id`: its first quoted literal is
/// the campaign (kustomization.yaml's `replacements`; scripts/check-manifests.sh checks the
/// rendered one carries the ConfigMap's CAMPAIGN_ID).
fn backlog_query(id: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("manifests/overlays/deployment/scaledobject.yaml");
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let query = doc["spec"]["triggers"][0]["metadata"]["query"]
        .as_str()
        .expect("the trigger's query")
        .to_string();
    let mut parts: Vec<&str> = query.split('\'').collect();
    assert!(parts.len() > 2, "no quoted campaign id in {query}");
    parts[1] = id;
    parts.join("'")
}

/// A connection as KEDA makes it: the role of docs/roles.sql it has, nothing more.
async fn as_keda(pool: &PgPool) -> PgPool {
    PgPool::connect(&role_url(pool, KEDA_ROLE).await)
        .await
        .unwrap()
}

async fn keda_count(keda: &PgPool) -> i64 {
    sqlx::query_scalar(&backlog_query(CAMPAIGN))
        .fetch_one(keda)
        .await
        .expect("the KEDA role runs the backlog query")
}

/// A window of local times `from`..`to` hours away from now, in Tokyo.
fn window_around_now(from: i64, to: i64) -> SendWindow {
    let tz: chrono_tz::Tz = "Asia/Tokyo".parse().unwrap();
    let local = Utc::now().with_timezone(&tz).time();
    let at = |h: i64| {
        let t = local + Span::hours(h);
        NaiveTime::from_hms_opt(t.hour(), t.minute(), 0).unwrap()
    };
    SendWindow::new(at(from), at(to), tz)
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn keda_counts_sendable_rows_as_its_own_role_and_nothing_while_paused_or_closed(
    pool: PgPool,
) {
    seed(&pool, CAMPAIGN, 50).await;
    seed(&pool, "another-campaign", 20).await;
    sqlx::query(
        "UPDATE campaign_targets SET opted_out_at = now()
          WHERE campaign_id = $1 AND member_id <= 5",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE campaign_targets SET state = 'sent', sent_at = now()
          WHERE campaign_id = $1 AND member_id BETWEEN 6 AND 15",
    )
    .bind(CAMPAIGN)
    .execute(&pool)
    .await
    .unwrap();
    let keda = as_keda(&pool).await;
    // 50 rows, 5 opted out, 10 sent; the other campaign's 20 are not ours.
    assert_eq!(keda_count(&keda).await, 35);

    campaigns::pause(&pool, CAMPAIGN, campaigns::BY_OPERATOR, None)
        .await
        .unwrap();
    assert_eq!(
        keda_count(&keda).await,
        0,
        "a paused campaign keeps pods up"
    );
    campaigns::resume(&pool, CAMPAIGN).await.unwrap();
    assert_eq!(keda_count(&keda).await, 35);

    // Whether the query sees the window open is what the worker decides (src/window.rs), for
    // windows that wrap midnight and windows that do not.
    let mut seen = Vec::new();
    for (from, to) in [(-1, 1), (2, 3), (2, 1), (1, -1)] {
        let w = window_around_now(from, to);
        campaigns::set_window(&pool, CAMPAIGN, Some(w))
            .await
            .unwrap();
        let open = matches!(w.state_at(Utc::now()), WindowState::Open { .. });
        let counted = keda_count(&keda).await;
        assert_eq!(counted, if open { 35 } else { 0 }, "window {w}");
        seen.push(open);
    }
    assert!(
        seen.contains(&true) && seen.contains(&false),
        "both cases: {seen:?}"
    );
    campaigns::set_window(&pool, CAMPAIGN, None).await.unwrap();
    assert_eq!(keda_count(&keda).await, 35);

    // The role reads no address.
    let denied = sqlx::query("SELECT email FROM campaign_targets LIMIT 1")
        .fetch_optional(&keda)
        .await
        .unwrap_err();
    assert!(denied.to_string().contains("permission denied"), "{denied}");
}

#[sqlx::test(migrator = "campaign_sender::store::MIGRATOR")]
async fn the_keda_query_reads_the_work_set_index_not_the_table(pool: PgPool) {
    // A table mostly of other campaigns' finished rows, as after a few campaigns.
    seed(&pool, "last-year", 50_000).await;
    sqlx::query("UPDATE campaign_targets SET state = 'sent', sent_at = now()")
        .execute(&pool)
        .await
        .unwrap();
    seed(&pool, CAMPAIGN, 500).await;
    sqlx::query("ANALYZE campaign_targets")
        .execute(&pool)
        .await
        .unwrap();
    let keda = as_keda(&pool).await;
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", backlog_query(CAMPAIGN)))
        .fetch_all(&keda)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("campaign_targets_work_prio_idx")
            && !plan.contains("Seq Scan on campaign_targets"),
        "{plan}"
    );
}
