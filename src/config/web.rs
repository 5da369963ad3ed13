//! `WebConfig`: what `campaign-sender web` needs besides the database.

use serde::{Deserialize, Serialize};

use super::{at_most, positive, ConfigError, FromEnv};

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct WebConfig {
    /// `WEB_ADDR` (default `127.0.0.1:8081`): where the status page listens. Loopback by
    /// default: reach it with `kubectl port-forward` or behind an identity-aware proxy.
    #[serde(default = "default_addr")]
    pub web_addr: String,
    /// `WEB_BASIC_AUTH_FILE` (default unset: no login): a file of `user:password` lines (a
    /// mounted Secret); every request must then carry one of them as HTTP basic auth.
    #[serde(default)]
    pub web_basic_auth_file: Option<std::path::PathBuf>,
    /// `WEB_REFRESH_S` (default 5, at most 300): how often a campaign still moving is read
    /// again. Pages are drawn from the last read, so any number of viewers costs the database
    /// what one does; a settled or archived campaign is read every 12 × `WEB_REFRESH_S`.
    #[serde(default = "default_refresh_s")]
    pub web_refresh_s: u64,
    /// `WEB_DB_TIMEOUT_MS` (default 10000, at most 60000): the longest one campaign's read may
    /// take; past it the database counts as not answering and the pages answer 503.
    #[serde(default = "default_db_timeout_ms")]
    pub web_db_timeout_ms: u64,
    /// `WEB_TIME_ZONE` (default `UTC`): the IANA zone the pages show every time in, with its
    /// abbreviation (`Asia/Tokyo`: `2026-12-07 02:00:00 JST`). The JSON API stays in UTC.
    #[serde(default = "default_time_zone")]
    pub web_time_zone: String,
}

fn default_addr() -> String {
    "127.0.0.1:8081".into()
}
fn default_refresh_s() -> u64 {
    5
}
fn default_db_timeout_ms() -> u64 {
    10_000
}
fn default_time_zone() -> String {
    "UTC".into()
}

impl FromEnv for WebConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        self.socket()?;
        positive("WEB_REFRESH_S", self.web_refresh_s)?;
        at_most("WEB_REFRESH_S", self.web_refresh_s, 300)?;
        positive("WEB_DB_TIMEOUT_MS", self.web_db_timeout_ms)?;
        at_most("WEB_DB_TIMEOUT_MS", self.web_db_timeout_ms, 60_000)?;
        if let Some(f) = &self.web_basic_auth_file {
            self.logins_in(f)?;
        }
        self.zone()?;
        Ok(())
    }
}

impl WebConfig {
    /// `WEB_REFRESH_S`: how often the page's figures are read.
    pub fn refresh(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.web_refresh_s)
    }

    /// `WEB_DB_TIMEOUT_MS`: the longest one round of reads may take.
    pub fn db_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.web_db_timeout_ms)
    }

    pub fn socket(&self) -> Result<std::net::SocketAddr, ConfigError> {
        self.web_addr.parse().map_err(|e| {
            ConfigError::new(
                "WEB_ADDR",
                format!("must be host:port, e.g. 127.0.0.1:8081 ({e})"),
            )
        })
    }

    /// `WEB_TIME_ZONE` as a zone.
    pub fn zone(&self) -> Result<chrono_tz::Tz, ConfigError> {
        crate::window::parse_tz(&self.web_time_zone)
            .map_err(|problem| ConfigError::new("WEB_TIME_ZONE", problem))
    }

    /// The logins of `WEB_BASIC_AUTH_FILE` (none: no file set, the page is open).
    pub fn logins(&self) -> Result<Vec<String>, ConfigError> {
        match &self.web_basic_auth_file {
            Some(f) => self.logins_in(f),
            None => Ok(Vec::new()),
        }
    }

    /// Reads `user:password` lines (blank lines and `#` comments skipped). A line without a
    /// colon, an empty user or password, or an empty file is refused: a file meant to protect
    /// the page never opens it by accident. No line is echoed (they are secrets).
    fn logins_in(&self, file: &std::path::Path) -> Result<Vec<String>, ConfigError> {
        let var = "WEB_BASIC_AUTH_FILE";
        let text = std::fs::read_to_string(file)
            .map_err(|e| ConfigError::new(var, format!("cannot read {} ({e})", file.display())))?;
        let mut logins = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            match line.split_once(':') {
                Some((user, password)) if !user.is_empty() && !password.is_empty() => {
                    logins.push(line.to_string())
                }
                _ => {
                    return Err(ConfigError::new(
                        var,
                        format!("line {} is not user:password (neither empty)", n + 1),
                    ))
                }
            }
        }
        if logins.is_empty() {
            return Err(ConfigError::new(
                var,
                "holds no user:password line: unset it to serve the page without a login",
            ));
        }
        Ok(logins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Result<WebConfig, ConfigError> {
        WebConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn the_page_listens_on_loopback_unless_told_otherwise() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.socket().unwrap().to_string(), "127.0.0.1:8081");
        assert_eq!(c.web_refresh_s, 5);
        assert_eq!(c.zone().unwrap(), chrono_tz::Tz::UTC);
        assert!(c.logins().unwrap().is_empty());
    }

    #[test]
    fn a_login_file_that_would_open_the_page_by_accident_is_refused() {
        let dir = std::env::temp_dir().join(format!("web-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p.display().to_string()
        };
        let good = write("good", "# on-call\nops:s3cret\n\nlead:other:colon\n");
        let c = cfg(&[("WEB_BASIC_AUTH_FILE", &good)]).unwrap();
        assert_eq!(c.logins().unwrap(), ["ops:s3cret", "lead:other:colon"]);
        for text in ["", "# nothing\n", "ops\n", ":pw\n", "ops:\n"] {
            let f = write("bad", text);
            let e = cfg(&[("WEB_BASIC_AUTH_FILE", &f)]).unwrap_err();
            assert_eq!(e.var, "WEB_BASIC_AUTH_FILE", "{text:?}");
            assert!(!e.problem.contains("s3cret"));
        }
        let e = cfg(&[("WEB_REFRESH_S", "0")]).unwrap_err();
        assert_eq!(e.var, "WEB_REFRESH_S");
        let e = cfg(&[("WEB_ADDR", "localhost")]).unwrap_err();
        assert_eq!(e.var, "WEB_ADDR");
        let e = cfg(&[("WEB_TIME_ZONE", "JST")]).unwrap_err();
        assert_eq!(e.var, "WEB_TIME_ZONE");
        assert!(e.problem.contains("Asia/Tokyo"), "{}", e.problem);
        let c = cfg(&[("WEB_TIME_ZONE", "Asia/Tokyo")]).unwrap();
        assert_eq!(c.zone().unwrap(), chrono_tz::Tz::Asia__Tokyo);
    }
}
