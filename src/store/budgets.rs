//! Every statement on `job_budgets`: one time budget per Job object, so that `DEADLINE_S` is
//! counted from the Job's start, not from each pod's — a pod the Job controller restarts (a
//! failed index retried, a pod rescheduled after a node drain) does not start a new budget, and
//! a new Job of the same name (deleted and applied again to continue a campaign) does.

use std::time::Duration;

use sqlx::PgPool;

/// The Job a pod belongs to and the campaign it sends: the UID (the Job object: a re-created
/// Job has a new one) and the campaign key the budget; the name is only for a person reading
/// the table.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    /// Typed, so that every spelling of one UID (braces, capitals, no hyphens, `urn:uuid:`)
    /// keys one budget: it is stored hyphenated in lower case.
    pub uid: uuid::Uuid,
    pub campaign_id: &'a str,
    pub name: Option<&'a str>,
}

/// How long `job` has had since its budget started (the first pod of the Job to ask starts it).
/// Database time on both ends, so pods with skewed clocks agree.
///
/// Invariants: the first caller's start wins (`ON CONFLICT DO NOTHING`), so every pod of one
/// Job, restarted or not, ends at the same instant; a Job with another UID, or the same Job
/// sending another campaign, never reads this one's start; budgets of Jobs started more than a week ago are pruned here (a Job outlives its
/// budget by far less).
pub async fn elapsed(pool: &PgPool, job: Job<'_>) -> Result<Duration, sqlx::Error> {
    // language=PostgreSQL
    const START: &str = r#"
        INSERT INTO job_budgets (job_uid, campaign_id, job_name, started_at)
        VALUES ($1, $3, $2, now())
        ON CONFLICT (job_uid, campaign_id) DO NOTHING
    "#;
    // language=PostgreSQL
    const ELAPSED: &str = r#"
        SELECT greatest(extract(epoch FROM now() - started_at), 0)::float8
          FROM job_budgets WHERE job_uid = $1 AND campaign_id = $2
    "#;
    // language=PostgreSQL
    const PRUNE: &str = "DELETE FROM job_budgets WHERE started_at < now() - interval '7 days'";
    let uid = job.uid.hyphenated().to_string();
    sqlx::query(START)
        .bind(&uid)
        .bind(job.name)
        .bind(job.campaign_id)
        .execute(pool)
        .await?;
    let secs: f64 = sqlx::query_scalar(ELAPSED)
        .bind(&uid)
        .bind(job.campaign_id)
        .fetch_one(pool)
        .await?;
    sqlx::query(PRUNE).execute(pool).await?;
    Ok(Duration::from_secs_f64(secs))
}
