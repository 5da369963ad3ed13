//! `DbConfig`: how to reach PostgreSQL. Shared by every subcommand.

use serde::{Deserialize, Serialize};

use super::{at_most, positive, ConfigError, FromEnv, Secret};

/// How to reach PostgreSQL. Shared by every subcommand.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct DbConfig {
    /// `DATABASE_URL` (required): `postgres://user:pass@host:port/db?sslmode=verify-full`.
    pub database_url: Secret,
    /// `DB_MAX_CONNECTIONS` (default 4): pool size per process.
    #[serde(default = "default_db_max_connections")]
    pub db_max_connections: u32,
    /// `DB_CONNECT_RETRY_S` (default 30): how long to keep retrying an unreachable database (or
    /// one that refuses the login: a password mid-rotation) at start, and how long an outage
    /// mid-run is ridden out before giving up with exit 75.
    #[serde(default = "default_db_connect_retry_s")]
    pub db_connect_retry_s: u64,
}

impl DbConfig {
    /// What connecting needs of this configuration.
    pub fn reach(&self) -> crate::store::connect::Reach<'_> {
        crate::store::connect::Reach {
            url: self.database_url.expose(),
            max_connections: self.db_max_connections,
            retry_for: std::time::Duration::from_secs(self.db_connect_retry_s),
        }
    }
}

impl FromEnv for DbConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let url = self.database_url.expose();
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(ConfigError::new(
                "DATABASE_URL",
                "must start with postgres:// or postgresql://",
            ));
        }
        positive("DB_MAX_CONNECTIONS", self.db_max_connections as u64)?;
        at_most("DB_MAX_CONNECTIONS", self.db_max_connections as u64, 1000)?;
        at_most("DB_CONNECT_RETRY_S", self.db_connect_retry_s, 86_400)?;
        Ok(())
    }
}

fn default_db_max_connections() -> u32 {
    4
}

fn default_db_connect_retry_s() -> u64 {
    30
}
