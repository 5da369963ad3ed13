//! Every statement on `campaigns`: the optional settings row and the fleet-wide kill switch.
//!
//! A campaign needs no settings row: without one it sends with the defaults (the campaign id as
//! template, `MAX_PERMANENT_FAILURE_RATIO` from the environment, not paused). The row carries:
//! - `template`: the provider template (else the campaign id);
//! - `from_address`, `reply_to`: the sender (`Name <addr>` or `addr`) and reply-to a vendor's
//!   mail carries (every vendor but the JSON contract needs a sender);
//! - `max_permanent_failure_ratio`: this campaign's failure threshold (else the environment's);
//! - the pause: `paused_at`, `paused_by` (`operator` or `auto`) and `pause_reason`;
//! - the send window: `window_start`, `window_end` (local times) and `timezone`
//!   ([`crate::window`]);
//! - `weight`: its share next to the other campaigns of its rate-limit key
//!   ([`crate::rate::shares`]), read by every round of its pods.
//!
//! The pause is a kill switch stored in PostgreSQL, so every pod of every Job, CronJob and
//! Deployment obeys the same switch. A running pipeline polls it every `PAUSE_POLL_MS` (≤ 1 s):
//! on seeing it, the pod stops claiming and starting sends, lets the requests in flight finish,
//! writes their results and releases everything else. `run` on a paused campaign exits at once
//! with [`crate::exit::Exit::Paused`]; `serve` idles until it is resumed.

use chrono::{DateTime, NaiveTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, PgPool};

use crate::window::{parse_tz, SendWindow};

/// The smallest weight `configure --weight` accepts (the table's CHECK says the same).
pub const WEIGHT_MIN: f64 = 0.01;
/// The largest weight `configure --weight` accepts (the table's CHECK says the same).
pub const WEIGHT_MAX: f64 = 1000.0;
/// A campaign's weight until `configure --weight` sets one (the column's default).
pub const WEIGHT_DEFAULT: f64 = 1.0;

/// Who set a pause.
pub const BY_OPERATOR: &str = "operator";
/// The run paused the campaign itself: permanent failures crossed the threshold.
pub const BY_AUTO: &str = "auto";

/// A campaign's pause, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pause {
    pub at: DateTime<Utc>,
    pub by: String,
    pub reason: Option<String>,
}

/// The settings a run uses: the stored row merged over the defaults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CampaignSettings {
    pub template: String,
    /// `configure --from`: the sender, `Name <addr>` or `addr` (`None`: not configured).
    pub from_address: Option<String>,
    /// `configure --reply-to`.
    pub reply_to: Option<String>,
    /// `None`: use `MAX_PERMANENT_FAILURE_RATIO`.
    pub max_permanent_failure_ratio: Option<f64>,
    pub pause: Option<Pause>,
    /// Send only inside this window (`None`: at any time).
    #[serde(serialize_with = "shown")]
    pub window: Option<SendWindow>,
    /// `configure --weight` (1 unless set): its share next to the campaigns of its key.
    pub weight: f64,
    /// Whether a settings row exists at all.
    pub stored: bool,
}

fn shown<S: serde::Serializer>(w: &Option<SendWindow>, s: S) -> Result<S::Ok, S::Error> {
    match w {
        Some(w) => s.serialize_str(&w.to_string()),
        None => s.serialize_none(),
    }
}

/// The `campaigns` row as stored.
#[derive(FromRow)]
struct SettingsRow {
    template: Option<String>,
    from_address: Option<String>,
    reply_to: Option<String>,
    max_permanent_failure_ratio: Option<f64>,
    #[sqlx(flatten)]
    pause: PauseRow,
    window_start: Option<NaiveTime>,
    window_end: Option<NaiveTime>,
    timezone: Option<String>,
    weight: f64,
}

impl SettingsRow {
    /// The stored window. A time zone the database holds but no zone database knows (only SQL
    /// by hand can write one: `configure` checks it) is a decoding error naming the value.
    fn window(&self) -> Result<Option<SendWindow>, sqlx::Error> {
        match (self.window_start, self.window_end, &self.timezone) {
            (Some(start), Some(end), Some(tz)) => {
                let tz = parse_tz(tz).map_err(|e| sqlx::Error::Decode(e.into()))?;
                Ok(Some(SendWindow::new(start, end, tz)))
            }
            _ => Ok(None),
        }
    }
}

/// The pause columns as stored.
#[derive(FromRow)]
struct PauseRow {
    paused_at: Option<DateTime<Utc>>,
    paused_by: Option<String>,
    pause_reason: Option<String>,
}

impl PauseRow {
    fn pause(self) -> Option<Pause> {
        self.paused_at.map(|at| Pause {
            at,
            by: self.paused_by.unwrap_or_else(|| BY_OPERATOR.to_string()),
            reason: self.pause_reason,
        })
    }
}

/// Reads a campaign's settings; a missing row gives the defaults.
///
/// Invariant: a campaign without a `campaigns` row behaves exactly as before the table existed.
pub async fn settings(pool: &PgPool, campaign_id: &str) -> Result<CampaignSettings, sqlx::Error> {
    // language=PostgreSQL
    const SETTINGS: &str = r#"
        SELECT template, from_address, reply_to, max_permanent_failure_ratio, paused_at,
               paused_by, pause_reason, window_start, window_end, timezone, weight
          FROM campaigns
         WHERE campaign_id = $1
    "#;
    let row: Option<SettingsRow> = sqlx::query_as(SETTINGS)
        .bind(campaign_id)
        .fetch_optional(pool)
        .await?;
    Ok(match row {
        None => CampaignSettings {
            template: campaign_id.to_string(),
            from_address: None,
            reply_to: None,
            max_permanent_failure_ratio: None,
            pause: None,
            window: None,
            weight: WEIGHT_DEFAULT,
            stored: false,
        },
        Some(r) => CampaignSettings {
            window: r.window()?,
            template: r.template.unwrap_or_else(|| campaign_id.to_string()),
            from_address: r.from_address,
            reply_to: r.reply_to,
            max_permanent_failure_ratio: r.max_permanent_failure_ratio,
            pause: r.pause.pause(),
            weight: r.weight,
            stored: true,
        },
    })
}

impl CampaignSettings {
    /// `failed` rows a campaign of `total` rows may have before a run stops with exit 2 and
    /// pauses it: the settings row's ratio, else `default_ratio` (`MAX_PERMANENT_FAILURE_RATIO`).
    /// One rule for the worker and for `status`.
    pub fn failure_budget(&self, total: i64, default_ratio: f64) -> i64 {
        let ratio = self.max_permanent_failure_ratio.unwrap_or(default_ratio);
        (total as f64 * ratio).floor() as i64
    }
}

/// The campaign's sender (`configure --from`), for the pages a recipient sees when they leave
/// (`events`, which may read this column of the settings and no other).
pub async fn sender(pool: &PgPool, campaign_id: &str) -> Result<Option<String>, sqlx::Error> {
    let from: Option<Option<String>> =
        sqlx::query_scalar("SELECT from_address FROM campaigns WHERE campaign_id = $1")
            .bind(campaign_id)
            .fetch_optional(pool)
            .await?;
    Ok(from.flatten())
}

/// Whether a campaign exists: it has targets, a settings row, or was archived. Index probes.
pub async fn exists(pool: &PgPool, campaign_id: &str) -> Result<bool, sqlx::Error> {
    // language=PostgreSQL
    const EXISTS: &str = r#"
        SELECT EXISTS (SELECT 1 FROM campaign_targets WHERE campaign_id = $1)
            OR EXISTS (SELECT 1 FROM campaigns WHERE campaign_id = $1)
    "#;
    // An archived campaign exists too; asked apart, and only then, so that a role without the
    // archive's grant (a worker's, by mistake) still meets the grant its command lacks.
    // language=PostgreSQL
    const ARCHIVED: &str =
        "SELECT EXISTS (SELECT 1 FROM archived_campaigns WHERE campaign_id = $1)";
    if sqlx::query_scalar(EXISTS)
        .bind(campaign_id)
        .fetch_one(pool)
        .await?
    {
        return Ok(true);
    }
    sqlx::query_scalar(ARCHIVED)
        .bind(campaign_id)
        .fetch_one(pool)
        .await
}

/// Every campaign that exists, by name: those with targets ([`TARGET_CAMPAIGNS`]), a settings
/// row or an archive.
pub async fn names(pool: &PgPool) -> Result<Vec<String>, sqlx::Error> {
    // language=PostgreSQL
    let names = format!(
        "{TARGET_CAMPAIGNS}
        SELECT campaign_id FROM ids WHERE campaign_id IS NOT NULL
        UNION
        SELECT campaign_id FROM campaigns
        UNION
        SELECT campaign_id FROM archived_campaigns
        ORDER BY 1"
    );
    sqlx::query_scalar(&names).fetch_all(pool).await
}

/// `ids (campaign_id)`: every `campaign_id` of `campaign_targets`, read as a loose index scan
/// of its primary key (one probe per campaign, not a scan of its millions of rows), and a NULL
/// after the last. The start of a statement (`WITH RECURSIVE …`) that goes on from it.
pub(crate) const TARGET_CAMPAIGNS: &str = r#"
        WITH RECURSIVE ids (campaign_id) AS (
            (SELECT campaign_id FROM campaign_targets ORDER BY campaign_id LIMIT 1)
            UNION ALL
            SELECT (SELECT t.campaign_id FROM campaign_targets t
                     WHERE t.campaign_id > ids.campaign_id
                     ORDER BY t.campaign_id LIMIT 1)
              FROM ids
             WHERE ids.campaign_id IS NOT NULL
        )"#;

/// The kill switch alone: one primary-key lookup, polled by every running pipeline.
pub async fn paused(pool: &PgPool, campaign_id: &str) -> Result<Option<Pause>, sqlx::Error> {
    // language=PostgreSQL
    const PAUSED: &str =
        "SELECT paused_at, paused_by, pause_reason FROM campaigns WHERE campaign_id = $1";
    let row: Option<PauseRow> = sqlx::query_as(PAUSED)
        .bind(campaign_id)
        .fetch_optional(pool)
        .await?;
    Ok(row.and_then(PauseRow::pause))
}

/// Pauses a campaign (creating its settings row if needed). Returns the pause now in force.
///
/// Invariants:
/// - an existing pause is kept as it was (first pause wins: an `auto` pause's reason is not
///   overwritten by a later operator pause, nor the other way round);
/// - the other settings of an existing row are untouched.
pub async fn pause<'e>(
    db: impl sqlx::PgExecutor<'e>,
    campaign_id: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<Pause, sqlx::Error> {
    // language=PostgreSQL
    const PAUSE: &str = r#"
        INSERT INTO campaigns AS c (campaign_id, paused_at, paused_by, pause_reason)
        VALUES ($1, now(), $2, $3)
        ON CONFLICT (campaign_id) DO UPDATE
           SET paused_at    = coalesce(c.paused_at, excluded.paused_at),
               paused_by    = CASE WHEN c.paused_at IS NULL THEN excluded.paused_by ELSE c.paused_by END,
               pause_reason = CASE WHEN c.paused_at IS NULL THEN excluded.pause_reason ELSE c.pause_reason END,
               updated_at   = now()
        RETURNING paused_at, paused_by, pause_reason
    "#;
    let row: PauseRow = sqlx::query_as(PAUSE)
        .bind(campaign_id)
        .bind(by)
        .bind(reason)
        .fetch_one(db)
        .await?;
    Ok(row.pause().expect("paused_at was just set"))
}

/// Lifts a pause. Returns the pause that was lifted, if there was one.
///
/// Invariant: only the pause columns change; a campaign without a settings row stays without
/// one.
pub async fn resume(pool: &PgPool, campaign_id: &str) -> Result<Option<Pause>, sqlx::Error> {
    // language=PostgreSQL
    const RESUME: &str = r#"
        UPDATE campaigns c
           SET paused_at = NULL, paused_by = NULL, pause_reason = NULL, updated_at = now()
          FROM (SELECT paused_at, paused_by, pause_reason
                  FROM campaigns WHERE campaign_id = $1 FOR UPDATE) old
         WHERE c.campaign_id = $1
           AND old.paused_at IS NOT NULL
        RETURNING old.paused_at AS paused_at, old.paused_by AS paused_by,
                  old.pause_reason AS pause_reason
    "#;
    let row: Option<PauseRow> = sqlx::query_as(RESUME)
        .bind(campaign_id)
        .fetch_optional(pool)
        .await?;
    Ok(row.and_then(PauseRow::pause))
}

/// Stores settings (`campaign-sender configure`). `None` keeps what the row has (the default
/// for a new row).
///
/// Invariants: only the given settings change; the pause is not touched.
pub async fn set_settings(
    pool: &PgPool,
    campaign_id: &str,
    asked: &SettingsChange<'_>,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SET: &str = r#"
        INSERT INTO campaigns AS c (campaign_id, template, max_permanent_failure_ratio,
                                    from_address, reply_to, max_complaint_ratio,
                                    max_bounce_ratio, max_sender_refusals, weight)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce($9::float8, 1))
        ON CONFLICT (campaign_id) DO UPDATE
           SET template = coalesce(excluded.template, c.template),
               max_permanent_failure_ratio = coalesce(excluded.max_permanent_failure_ratio,
                                                      c.max_permanent_failure_ratio),
               max_complaint_ratio = coalesce(excluded.max_complaint_ratio,
                                              c.max_complaint_ratio),
               max_bounce_ratio = coalesce(excluded.max_bounce_ratio, c.max_bounce_ratio),
               max_sender_refusals = coalesce(excluded.max_sender_refusals,
                                              c.max_sender_refusals),
               from_address = coalesce(excluded.from_address, c.from_address),
               reply_to = coalesce(excluded.reply_to, c.reply_to),
               weight = coalesce($9::float8, c.weight),
               updated_at = now()
    "#;
    sqlx::query(SET)
        .bind(campaign_id)
        .bind(asked.template)
        .bind(asked.ratio)
        .bind(asked.from)
        .bind(asked.reply_to)
        .bind(asked.complaint_line)
        .bind(asked.bounce_line)
        .bind(asked.sender_refusals)
        .bind(asked.weight)
        .execute(pool)
        .await?;
    Ok(())
}

/// What `configure` changes in the settings row; `None` keeps the stored value.
#[derive(Debug, Clone, Copy, Default)]
pub struct SettingsChange<'a> {
    pub template: Option<&'a str>,
    pub ratio: Option<f64>,
    pub from: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    /// The brake's lines (`--max-complaint-ratio`, `--max-bounce-ratio`).
    pub complaint_line: Option<f64>,
    pub bounce_line: Option<f64>,
    /// The sender's brake's line (`--max-sender-refusals`; 0: off).
    pub sender_refusals: Option<i32>,
    /// `--weight`: its share next to the campaigns of its rate-limit key.
    pub weight: Option<f64>,
}

/// Sets (or, with `None`, clears) a campaign's send window (`configure --window`).
///
/// Invariants: the three columns change together (the table's CHECK says so too); nothing else
/// in the row changes; a campaign without a row gets one.
pub async fn set_window(
    pool: &PgPool,
    campaign_id: &str,
    window: Option<SendWindow>,
) -> Result<(), sqlx::Error> {
    // language=PostgreSQL
    const SET: &str = r#"
        INSERT INTO campaigns AS c (campaign_id, window_start, window_end, timezone)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (campaign_id) DO UPDATE
           SET window_start = excluded.window_start,
               window_end   = excluded.window_end,
               timezone     = excluded.timezone,
               updated_at   = now()
    "#;
    sqlx::query(SET)
        .bind(campaign_id)
        .bind(window.map(|w| w.start))
        .bind(window.map(|w| w.end))
        .bind(window.map(|w| w.tz.name().to_string()))
        .execute(pool)
        .await?;
    Ok(())
}
