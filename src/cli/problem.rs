//! What a database error means for the person who must fix it: one classification
//! ([`DbProblem`]), one sentence of what to do, one exit code, and whether waiting can heal it.
//!
//! What is shown: the host and port (where to look), the SQLSTATE, the table a grant is missing
//! on and the grant docs/roles.sql gives for it. What is never shown: the URL's password; the
//! words of a refused login (they name the user, and a Cloud SQL IAM user is an email address);
//! a role name that could be an address.

use std::io::ErrorKind;

use sqlx::postgres::PgConnectOptions;

use crate::config::DbConfig;
use crate::exit::Exit;
use crate::store::connect;

/// docs/roles.sql, the grants each role needs (compiled in, so a permission error can name the
/// missing one).
const ROLES_SQL: &str = include_str!("../../docs/roles.sql");

/// What kind of command met the problem: whose grants docs/roles.sql prescribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// `run`, `serve`: `campaign_sender_worker`.
    Worker,
    /// `import`, `status`, `pause`, …: `campaign_sender_operator`.
    Operator,
    /// `events`: `campaign_sender_events`.
    Events,
    /// `web`: `campaign_sender_web`.
    Web,
    /// `migrate`: the schema owner.
    Owner,
}

impl Who {
    /// Who runs `command`.
    pub fn of(command: &super::Command) -> Self {
        use super::Command;
        match command {
            Command::Migrate(_) => Who::Owner,
            Command::Run(_) | Command::Serve(_) => Who::Worker,
            Command::Events(_) => Who::Events,
            Command::Web(_) => Who::Web,
            Command::Operator(_) => Who::Operator,
        }
    }

    fn role(self) -> Option<&'static str> {
        match self {
            Who::Worker => Some("campaign_sender_worker"),
            Who::Operator => Some("campaign_sender_operator"),
            Who::Events => Some("campaign_sender_events"),
            Who::Web => Some("campaign_sender_web"),
            Who::Owner => None,
        }
    }
}

/// How patient a command is with a database that does not let it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// A worker waits out everything for `DB_CONNECT_RETRY_S`: a server starting up (57P03) or
    /// full (53300), a failover, a login refused while a password is being rotated (the role
    /// changed before the Secret or after it), grants about to be applied.
    Worker,
    /// A person at a terminal is told at once what waiting cannot heal (a refused login, an
    /// unknown role or database, a missing grant, a certificate); only a server that is not
    /// there (yet) is waited for ([`DbProblem::heals_by_waiting`]).
    Interactive,
}

impl Patience {
    /// Whether connecting tries again after `e` ([`connect::connect`]'s `retry`).
    pub fn waits_for(self, e: &sqlx::Error) -> bool {
        self == Patience::Worker || DbProblem::of(e).heals_by_waiting()
    }
}

/// Where the database is and who logs in, as far as may be shown.
#[derive(Debug, Clone)]
pub struct Target {
    at: String,
    user: String,
}

impl Target {
    pub fn of(cfg: &DbConfig) -> Self {
        match cfg.database_url.expose().parse::<PgConnectOptions>() {
            Ok(o) => Self {
                at: format!("{}:{}", o.get_host(), o.get_port()),
                user: o.get_username().to_string(),
            },
            Err(_) => Self {
                at: "the host in DATABASE_URL".into(),
                user: String::new(),
            },
        }
    }

    /// The role, unless it could be a person's address (a Cloud SQL IAM user).
    fn role_shown(&self) -> String {
        if self.user.contains('@') || self.user.is_empty() {
            "the role in DATABASE_URL".into()
        } else {
            format!("the role {}", self.user)
        }
    }
}

/// What is wrong with the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbProblem {
    /// Nothing listens there: the connection was refused.
    Refused,
    /// No answer in time, or the connection dropped.
    NoAnswer,
    /// The TLS handshake failed: a certificate, a CA, a name.
    Tls,
    /// SQLSTATE class 28: a wrong password, a role that may not log in, no pg_hba.conf entry.
    LoginRefused { sqlstate: String },
    /// 3D000: the database named in the URL does not exist.
    NoDatabase,
    /// 42501: the role lacks a grant (on this table, when the server names one).
    Permission { table: Option<String> },
    /// The server said something else.
    Other,
}

impl DbProblem {
    pub fn of(e: &sqlx::Error) -> Self {
        match e {
            sqlx::Error::Io(io) if io.kind() == ErrorKind::ConnectionRefused => DbProblem::Refused,
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => {
                DbProblem::NoAnswer
            }
            sqlx::Error::Tls(_) => DbProblem::Tls,
            sqlx::Error::Database(d) => match d.code().as_deref() {
                Some(c) if c.starts_with("28") => DbProblem::LoginRefused {
                    sqlstate: c.to_string(),
                },
                Some("3D000") => DbProblem::NoDatabase,
                Some("42501") => DbProblem::Permission {
                    table: d
                        .message()
                        .strip_prefix("permission denied for table ")
                        .map(str::to_string),
                },
                _ => DbProblem::Other,
            },
            _ => DbProblem::Other,
        }
    }

    /// Whether a person should be made to wait for it: a server that is down or busy may come
    /// back; a wrong password, an unknown role or database, a missing grant or a certificate
    /// problem will not heal by itself (a worker waits for those too: a password mid-rotation, a
    /// grant about to be applied).
    pub fn heals_by_waiting(&self) -> bool {
        matches!(
            self,
            DbProblem::Refused | DbProblem::NoAnswer | DbProblem::Other
        )
    }

    /// What to check, in one sentence.
    pub fn advice(&self, target: &Target, who: Who) -> String {
        let at = &target.at;
        match self {
            DbProblem::Refused => format!("connection refused at {at} — is the server running? Check DATABASE_URL's host and port; a rerun is safe"),
            DbProblem::NoAnswer => format!("no answer from {at} in time — is it reachable from here (network, firewall, the Cloud SQL proxy)? Check DATABASE_URL; a rerun is safe"),
            DbProblem::Tls => format!("the TLS handshake with {at} failed: check sslmode and sslrootcert in DATABASE_URL (the server's CA) and that the host name is in its certificate"),
            DbProblem::LoginRefused { .. } => "the database refused the login: check the user and password in DATABASE_URL (the Secret) and that the role may log in from here; a rerun is safe".into(),
            DbProblem::NoDatabase => "the database named in DATABASE_URL does not exist: check its path; a rerun is safe".into(),
            DbProblem::Permission { table } => permission_advice(table.as_deref(), target, who),
            DbProblem::Other => format!("the database at {at} refused the request: check DATABASE_URL, credentials and the server's log; a rerun is safe"),
        }
    }

    pub fn exit_code(&self) -> Exit {
        match self {
            DbProblem::Permission { .. } => Exit::NoPermission,
            _ => Exit::DatabaseUnavailable,
        }
    }
}

/// "permission denied for table campaigns: the role x lacks a grant docs/roles.sql gives
/// campaign_sender_operator on campaigns: GRANT …; apply docs/roles.sql as the schema owner".
fn permission_advice(table: Option<&str>, target: &Target, who: Who) -> String {
    let on = table.map(|t| format!(" on {t}")).unwrap_or_default();
    let mut s = format!(
        "permission denied{on}: {} lacks a grant",
        target.role_shown()
    );
    if let (Some(t), Some(role)) = (table, who.role()) {
        let grants = grants_for(t, role);
        if !grants.is_empty() {
            s += &format!(" docs/roles.sql gives {role}: {}", grants.join(" "));
        }
    }
    s + "; apply docs/roles.sql as the schema owner (psql \"$MIGRATE_DATABASE_URL\" -f docs/roles.sql) and rerun"
}

/// The GRANT statements of docs/roles.sql that give `role` something on `table`, each on one
/// line.
pub fn grants_for(table: &str, role: &str) -> Vec<String> {
    let code: String = ROLES_SQL
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    code.split(';')
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| s.starts_with("GRANT "))
        .filter(|s| {
            let (on, to) = match (s.find(" ON "), s.find(" TO ")) {
                (Some(on), Some(to)) if on < to => (&s[on + 4..to], &s[to + 4..]),
                _ => return false,
            };
            let names = |list: &str| {
                list.split(',')
                    .map(|n| n.trim().to_string())
                    .collect::<Vec<_>>()
            };
            names(on).iter().any(|n| n == table) && names(to).iter().any(|n| n == role)
        })
        .map(|s| format!("{s};"))
        .collect()
}

/// Logs what is wrong with the database and what to do; returns the exit code for it. The one
/// place a database error ends a command.
pub fn report(e: &sqlx::Error, target: &Target, who: Who) -> Exit {
    let problem = DbProblem::of(e);
    let shown = connect::error_text(e);
    let advice = problem.advice(target, who);
    match connect::sqlstate(e) {
        Some(code) => tracing::error!(error = %shown, sqlstate = %code, "{advice}"),
        None => tracing::error!(error = %shown, "{advice}"),
    }
    problem.exit_code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_grant_is_named_from_docs_roles_sql() {
        let g = grants_for("campaigns", "campaign_sender_worker");
        assert_eq!(g.len(), 2, "{g:?}");
        assert!(
            g[0].starts_with("GRANT SELECT ON campaigns TO campaign_sender_worker"),
            "{g:?}"
        );
        assert!(
            g[1].contains("UPDATE (paused_at, paused_by, pause_reason, updated_at)"),
            "{g:?}"
        );
        let op = grants_for("campaign_targets", "campaign_sender_operator");
        assert!(
            op.iter().any(|g| g.starts_with(
                "GRANT INSERT (campaign_id, member_id, email, priority, send_after, data)"
            )),
            "{op:?}"
        );
        assert!(grants_for("campaigns", "nobody").is_empty());
    }

    #[test]
    fn a_role_that_could_be_an_address_is_never_shown() {
        let t = |user: &str| Target {
            at: "db:5432".into(),
            user: user.into(),
        };
        assert_eq!(
            t("campaign_sender_worker").role_shown(),
            "the role campaign_sender_worker"
        );
        assert_eq!(
            t("ann@example.com").role_shown(),
            "the role in DATABASE_URL"
        );
        let p = DbProblem::Permission {
            table: Some("campaigns".into()),
        };
        let said = p.advice(&t("ann@example.com"), Who::Worker);
        assert!(!said.contains("ann@"), "{said}");
        assert!(
            said.contains("GRANT SELECT ON campaigns TO campaign_sender_worker"),
            "{said}"
        );
        assert_eq!(p.exit_code(), Exit::NoPermission);
    }

    #[test]
    fn only_an_absent_or_busy_server_is_worth_a_persons_wait() {
        assert!(DbProblem::Refused.heals_by_waiting());
        assert!(DbProblem::NoAnswer.heals_by_waiting());
        for p in [
            DbProblem::LoginRefused {
                sqlstate: "28P01".into(),
            },
            DbProblem::NoDatabase,
            DbProblem::Permission { table: None },
            DbProblem::Tls,
        ] {
            assert!(!p.heals_by_waiting(), "{p:?}");
        }
    }
}
