//! The AWS credentials SES requests are signed with, as the standard chain finds them: keys in
//! the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) first,
//! else web identity federation (`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`: GKE's projected
//! service-account token exchanged at STS `AssumeRoleWithWebIdentity` for temporary keys).
//!
//! Temporary keys are refreshed before they expire: a send that finds them within
//! [`REFRESH_BEFORE`] of their expiry (or missing) fetches new ones first, one fetch at a time,
//! re-reading the token file (Kubernetes rotates it). The STS call is one unsigned form POST; it
//! is made here with the client we already have rather than through `aws-config`, which would
//! bring a second HTTP stack and a C build (aws-lc) into the image for this one request.

use std::sync::RwLock;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use crate::secret::Secret;

/// The static part of the AWS credential chain: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`
/// and, for temporary credentials, `AWS_SESSION_TOKEN`.
#[derive(Clone)]
pub struct AwsKeys {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

/// Temporary keys are replaced this long before they expire (the AWS SDKs' default buffer).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// Where the signing keys come from.
pub enum Source {
    /// Keys from the environment, used as they are.
    Static(AwsKeys),
    /// Web identity federation, refreshed before expiry.
    WebIdentity(WebIdentity),
}

impl Source {
    /// The keys to sign with now (`None`: none fetched yet, or the last ones expired).
    pub fn current(&self, now: SystemTime) -> Option<AwsKeys> {
        match self {
            Source::Static(k) => Some(k.clone()),
            Source::WebIdentity(w) => w.current(now),
        }
    }

    /// Makes sure [`Source::current`] has keys valid beyond [`REFRESH_BEFORE`]: fetches new
    /// ones when needed. What went wrong, when it did (never the token).
    pub async fn ensure_fresh(&self, client: &reqwest::Client) -> Result<(), String> {
        match self {
            Source::Static(_) => Ok(()),
            Source::WebIdentity(w) => w.ensure_fresh(client, SystemTime::now()).await,
        }
    }
}

/// `AssumeRoleWithWebIdentity` settings and the keys it last gave.
pub struct WebIdentity {
    pub role_arn: String,
    pub token_file: String,
    pub session_name: String,
    /// `AWS_ENDPOINT_URL_STS`, else `https://sts.{region}.amazonaws.com`.
    pub sts_url: String,
    keys: RwLock<Option<(AwsKeys, SystemTime)>>,
    /// One fetch at a time: the others wait for it instead of asking STS too.
    fetching: tokio::sync::Mutex<()>,
}

impl WebIdentity {
    pub fn new(
        role_arn: String,
        token_file: String,
        session_name: String,
        sts_url: String,
    ) -> Self {
        Self {
            role_arn,
            token_file,
            session_name,
            sts_url,
            keys: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// Holds `keys` until `expires` (what a fetch does; tests too).
    pub fn hold(&self, keys: AwsKeys, expires: SystemTime) {
        *self.keys.write().expect("keys lock") = Some((keys, expires));
    }

    fn current(&self, now: SystemTime) -> Option<AwsKeys> {
        let held = self.keys.read().expect("keys lock");
        held.as_ref()
            .filter(|(_, expires)| *expires > now)
            .map(|(k, _)| k.clone())
    }

    /// Whether the keys held at `now` must be replaced: none yet, or within
    /// [`REFRESH_BEFORE`] of their expiry.
    pub fn needs_refresh(&self, now: SystemTime) -> bool {
        let held = self.keys.read().expect("keys lock");
        held.as_ref()
            .is_none_or(|(_, expires)| *expires <= now + REFRESH_BEFORE)
    }

    async fn ensure_fresh(&self, client: &reqwest::Client, now: SystemTime) -> Result<(), String> {
        if !self.needs_refresh(now) {
            return Ok(());
        }
        let _one = self.fetching.lock().await;
        if !self.needs_refresh(SystemTime::now()) {
            return Ok(()); // another send fetched them meanwhile
        }
        let (keys, expires) = self.fetch(client).await?;
        self.hold(keys, expires);
        tracing::info!(role_arn = %self.role_arn, "AWS credentials refreshed (web identity)");
        Ok(())
    }

    /// One `AssumeRoleWithWebIdentity`: the token file read now, the keys and their expiry.
    async fn fetch(&self, client: &reqwest::Client) -> Result<(AwsKeys, SystemTime), String> {
        let token = std::fs::read_to_string(&self.token_file).map_err(|e| {
            format!(
                "cannot read AWS_WEB_IDENTITY_TOKEN_FILE {}: {e}",
                self.token_file
            )
        })?;
        let form = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("Version", "2011-06-15"),
            ("RoleArn", self.role_arn.as_str()),
            ("RoleSessionName", self.session_name.as_str()),
            ("WebIdentityToken", token.trim()),
        ];
        let resp = client
            .post(&self.sts_url)
            .form(&form)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| format!("STS ({}) did not answer: {e}", self.sts_url))?;
        let status = resp.status();
        let body = resp
            .text()
            .await
            .map_err(|e| format!("STS answer unreadable: {e}"))?;
        if !status.is_success() {
            return Err(format!(
                "STS refused AssumeRoleWithWebIdentity for {} ({status}): {}",
                self.role_arn,
                sts_error(&body)
            ));
        }
        parse(&body)
    }
}

/// STS's answer (XML).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Response {
    assume_role_with_web_identity_result: AssumeResult,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AssumeResult {
    credentials: StsCredentials,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: String,
}

/// The keys and their expiry in an `AssumeRoleWithWebIdentityResponse`.
pub fn parse(xml: &str) -> Result<(AwsKeys, SystemTime), String> {
    let r: Response =
        quick_xml::de::from_str(xml).map_err(|e| format!("STS answer not understood: {e}"))?;
    let c = r.assume_role_with_web_identity_result.credentials;
    let expires = chrono::DateTime::parse_from_rfc3339(&c.expiration)
        .map_err(|e| format!("STS expiration not understood: {e}"))?;
    Ok((
        AwsKeys {
            access_key_id: c.access_key_id,
            secret_access_key: Secret::new(c.secret_access_key),
            session_token: Some(Secret::new(c.session_token)),
        },
        SystemTime::from(expires.with_timezone(&chrono::Utc)),
    ))
}

/// The `<Code>` and `<Message>` of an STS error, at most 200 characters (never the token: STS
/// does not echo it).
fn sts_error(xml: &str) -> String {
    #[derive(Deserialize, Default)]
    #[serde(rename_all = "PascalCase", default)]
    struct Error {
        code: String,
        message: String,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct ErrorResponse {
        error: Error,
    }
    match quick_xml::de::from_str::<ErrorResponse>(xml) {
        Ok(e) => format!("{}: {}", e.error.code, e.error.message)
            .chars()
            .take(200)
            .collect(),
        Err(_) => "no STS error in the answer".to_string(),
    }
}
