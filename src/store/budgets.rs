//! Every statement on `run_budgets`: one time budget per Job, so that `DEADLINE_S` is counted
//! from the Job's start, not from each pod's — a pod the Job controller restarts (a failed
//! index retried, a pod rescheduled after a node drain) does not start a new budget.

use std::time::Duration;

use sqlx::PgPool;

/// How long the Job named `job_name` has had since its budget started (the first pod of the Job
/// to ask starts it). Database time on both ends, so pods with skewed clocks agree.
///
/// Invariants: the first caller's start wins (`ON CONFLICT DO NOTHING`); budgets of Jobs started
/// more than a week ago are pruned here (a Job outlives its budget by far less).
pub async fn elapsed(pool: &PgPool, job_name: &str) -> Result<Duration, sqlx::Error> {
    // language=PostgreSQL
    const START: &str = r#"
        INSERT INTO run_budgets (job_name, started_at) VALUES ($1, now())
        ON CONFLICT (job_name) DO NOTHING
    "#;
    // language=PostgreSQL
    const ELAPSED: &str = r#"
        SELECT greatest(extract(epoch FROM now() - started_at), 0)::float8
          FROM run_budgets WHERE job_name = $1
    "#;
    // language=PostgreSQL
    const PRUNE: &str = "DELETE FROM run_budgets WHERE started_at < now() - interval '7 days'";
    sqlx::query(START).bind(job_name).execute(pool).await?;
    let secs: f64 = sqlx::query_scalar(ELAPSED)
        .bind(job_name)
        .fetch_one(pool)
        .await?;
    sqlx::query(PRUNE).execute(pool).await?;
    Ok(Duration::from_secs_f64(secs))
}
