//! The least-privilege roles of docs/roles.sql, granted by `campaign-sender migrate` right after
//! the migrations: one apply of an overlay on an empty database (the migrate Job beside the
//! workers) ends with the schema and the grants the workers wait for, not with workers that
//! exit on a missing grant.

use sqlx::PgPool;

/// docs/roles.sql, its one source: idempotent (creates the roles if missing, re-applies every
/// grant), so every migrate run may apply it.
pub const ROLES_SQL: &str = include_str!("../../docs/roles.sql");

/// Applies [`ROLES_SQL`] in one transaction.
///
/// Invariant: runs of several migrate pods are serialised by a transaction-scoped advisory
/// lock (concurrent GRANTs on one object fail with "tuple concurrently updated"), and a run
/// that fails changes nothing.
pub async fn grant(pool: &PgPool) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('campaign-sender docs/roles.sql'))")
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(ROLES_SQL).execute(&mut *tx).await?;
    tx.commit().await
}
