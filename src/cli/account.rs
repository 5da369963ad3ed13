//! The operator commands on the provider account: `resume` (a campaign's pause and the refusals
//! that stop it, or one limit key's refusal) and `limit` (show a key, or set its rate live).

use sqlx::PgPool;

use super::operator::at;
use super::CliResult;
use crate::store::account::{self, KeyState};
use crate::store::campaigns;

/// `resume --campaign C` lifts the campaign's pause and every refusal that stops it;
/// `resume --key K` lifts the key's refusal only.
pub(super) async fn resume(pool: &PgPool, campaign: Option<&str>, key: Option<&str>) -> CliResult {
    if let Some(c) = campaign {
        match campaigns::resume(pool, c).await? {
            Some(p) => println!(
                "{c}: resumed (was paused by {} since {}). `serve` pods continue by themselves; start the Job again for `run`.",
                p.by,
                at(&p.at)
            ),
            None => println!("{c}: was not paused"),
        }
        for (k, r) in account::lift_refusals_of(pool, c).await? {
            println!(
                "{k}: refusal lifted (was: {}, since {}). Pods of every campaign on this key send again.",
                r.kind.advice(r.status).split(';').next().unwrap_or_default(),
                at(&r.since)
            );
        }
    }
    if let Some(k) = key {
        match account::lift_refusal(pool, k).await? {
            Some(r) => println!(
                "{k}: refusal lifted (was: the provider answered {} since {}). Pods of every campaign on this key send again.",
                r.status,
                at(&r.since)
            ),
            None => println!("{k}: was not refused; nothing changed"),
        }
    }
    Ok(())
}

/// `limit --key K [--rate R | --clear]`: sets or clears the live limit, then shows the key.
pub(super) async fn limit(pool: &PgPool, key: &str, rate: Option<f64>, clear: bool) -> CliResult {
    if rate.is_some() || clear {
        account::set_limit(pool, key, rate).await?;
    }
    match account::key_state(pool, key).await? {
        Some(k) => print!("{}", render(&k)),
        None => println!("{key}: no pod has used this limit key and no limit was set"),
    }
    if let Some(r) = rate {
        println!("{key}: {r}/s for every pod of the key from their next round (within a second); `--clear` returns to MAIL_RATE_PER_S");
    } else if clear {
        println!("{key}: back to the pods' MAIL_RATE_PER_S from their next round");
    }
    Ok(())
}

/// A key in a few lines: its limit and where it comes from, a refusal, the quota, the pods.
fn render(k: &KeyState) -> String {
    let mut o = format!("{}\n", k.limit_line());
    if let Some(r) = &k.refused {
        o += &format!(
            "  REFUSED since {}: {}\n",
            at(&r.since),
            r.kind.advice(r.status)
        );
    }
    if let Some(q) = &k.quota {
        o += &format!(
            "  daily quota: {} of {} used in the last 24 h\n",
            q.used, q.daily
        );
    }
    for m in &k.members {
        o += &format!(
            "  {:<24} {:>7.1}/s (campaign {})\n",
            m.worker, m.share_per_s, m.campaign_id
        );
    }
    o
}
