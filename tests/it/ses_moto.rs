//! `MAIL_PROVIDER=ses` against moto's server (`moto[server]` from PyPI, `scripts/moto.sh`): a
//! second implementation of SES v2 that checks SigV4 against its own IAM once started with
//! `INITIAL_NO_AUTH_ACTION_COUNT` (docs/VENDORS.md "The mailbox providers' rules"). moto cannot
//! render a stored template (it answers 500 before it looks at the sender, so its `MessageRejected` for an
//! unverified sender never comes back for a templated mail: that answer is held against moto's
//! own body in `src/provider/tests.rs`), so what it proves is the way in: our signature is
//! accepted by a key moto issued, and one made with another secret is the account's refusal
//! (exit 4, no row failed). The signature over the exact bytes is checked independently in
//! `src/provider/tests.rs`.

use std::process::Stdio;
use std::time::Duration;

use campaign_sender::config::{FromEnv, RunConfig};
use campaign_sender::report::StopReason;
use sqlx::PgPool;

use crate::helpers::*;

/// moto's bin directory: `MOTO_BIN` (scripts/test.sh sets it from scripts/moto.sh), else the
/// venv scripts/moto.sh makes.
fn moto_bin() -> std::path::PathBuf {
    let dir = std::env::var("MOTO_BIN")
        .map(Into::into)
        .unwrap_or_else(|_| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto-venv/bin")
        });
    assert!(
        dir.join("moto_server").exists(),
        "moto is not installed: run scripts/moto.sh (scripts/test.sh does)"
    );
    dir
}

/// moto's server on a free 127.0.0.1 port, killed on drop.
struct Moto {
    child: std::process::Child,
    url: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn moto() -> Moto {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(moto_bin().join("moto_server"))
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .env("INITIAL_NO_AUTH_ACTION_COUNT", "4")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto_server");
    let url = format!("http://127.0.0.1:{port}");
    until_some(Duration::from_secs(30), "moto to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
    })
    .await;
    Moto { child, url }
}

/// The IAM key moto will check our signatures against (and the identity news@example.com).
fn moto_key(url: &str) -> (String, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/moto-ses-setup.py");
    let out = std::process::Command::new(moto_bin().join("python"))
        .args([script, url])
        .output()
        .expect("run scripts/moto-ses-setup.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut parts = text.split_whitespace();
    (parts.next().unwrap().into(), parts.next().unwrap().into())
}

fn ses_config(url: &str, key: &str, secret: &str) -> RunConfig {
    let vars = [
        ("CAMPAIGN_ID", CAMPAIGN),
        ("MAIL_PROVIDER", "ses"),
        ("MAIL_URL", url),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("BACKOFF_BASE_MS", "20"),
        ("BACKOFF_MAX_MS", "100"),
        ("MAX_ATTEMPTS", "2"),
        ("DEADLINE_S", "60"),
        ("IDLE_POLL_MS", "50"),
        ("WORKER_ID", "ses-worker"),
        ONE_CLICK[0],
        ONE_CLICK[1],
    ];
    RunConfig::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap()
}

async fn sender(pool: &PgPool, from: &str) {
    sqlx::query(
        "INSERT INTO campaigns (campaign_id, template, from_address) VALUES ($1, 'spring', $2)
         ON CONFLICT (campaign_id) DO UPDATE SET from_address = excluded.from_address",
    )
    .bind(CAMPAIGN)
    .bind(from)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("DELETE FROM rate_limits")
        .execute(pool)
        .await
        .unwrap();
}

async fn refused_status(pool: &PgPool) -> Option<i16> {
    sqlx::query_scalar("SELECT refused_status FROM rate_limits")
        .fetch_optional(pool)
        .await
        .unwrap()
        .flatten()
}

#[sqlx::test]
async fn moto_accepts_our_sigv4_and_refuses_a_signature_made_with_another_secret(pool: PgPool) {
    seed(&pool, CAMPAIGN, 3).await;
    let m = moto().await;
    let (key, secret) = moto_key(&m.url);

    // Signed with a secret moto did not issue: SignatureDoesNotMatch, 403, the account's.
    sender(&pool, "news@example.com").await;
    let r = run_to_end(&pool, ses_config(&m.url, &key, "not-the-secret")).await;
    assert_eq!(
        (r.reason, r.stats.failed),
        (StopReason::AccountRefused, 0),
        "{r:?}"
    );
    assert_eq!(refused_status(&pool).await, Some(403));

    // Our signature: moto's IAM accepts it, checks the identity and gets as far as the stored
    // template, which it cannot render (500, retried like any 5xx): no refusal of the account.
    sender(&pool, "News <news@example.com>").await;
    let r = run_to_end(&pool, ses_config(&m.url, &key, &secret)).await;
    assert_eq!(refused_status(&pool).await, None, "{r:?}");
    assert_eq!(r.stats.refused, 0, "{r:?}");
    let (state, _, status, class) = state_of(&pool, 1).await;
    assert_eq!(
        (state.as_str(), status, class.as_deref()),
        ("failed", Some(500), Some("server_error")),
        "moto did not get past the signature"
    );
}
