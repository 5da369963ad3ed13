//! What the status page shows, read in the background: the [`Board`] holds the last read of
//! every campaign, and [`refresh`] keeps it current.
//!
//! Invariants:
//! - a page is drawn from the last read, never by a read of its own: any number of viewers
//!   (and their pages' self-refresh) cost the database what one reader does — one
//!   [`crate::status::gather`] per campaign still moving every `WEB_REFRESH_S`, per settled
//!   or archived one every [`SETTLED_EVERY`] × that, and its per-minute deliveries at most every
//!   [`HISTORY_EVERY`] and only when its `sent` count moved;
//! - every figure is `status`'s own ([`crate::status::gather`]): the page and the terminal
//!   cannot disagree;
//! - a read that fails or does not answer within [`Board::read_timeout`] marks the board
//!   [`Health::Unavailable`] (pages answer 503 and say so) until a read succeeds: stale figures
//!   are never shown as current.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::status::{self, Status};
use crate::store::history::Minute;
use crate::store::{campaigns, connect, Store};

/// A settled or archived campaign is read this many times less often than a moving one.
pub const SETTLED_EVERY: u32 = 12;
/// The per-minute deliveries are read at most this often, and only when the campaign's `sent`
/// count moved since (the chart's unit is a minute; the chart says when they were read).
pub const HISTORY_EVERY: Duration = Duration::from_secs(30);

/// One campaign as last read.
#[derive(Debug, Clone)]
pub struct View {
    pub status: Status,
    /// Deliveries per minute over the campaign's life.
    pub history: Vec<Minute>,
    /// When `history` was read, and the campaign's `sent` count then.
    pub history_at: DateTime<Utc>,
    pub history_sent: i64,
}

impl View {
    /// Nothing will move without an operator: archived, or done with nothing sent lately.
    pub fn settled(&self) -> bool {
        let s = &self.status;
        s.archived.is_some() || (s.done && s.rate_per_s == 0.0)
    }
}

/// Whether the last reads succeeded.
#[derive(Debug, Clone, PartialEq)]
pub enum Health {
    /// The first round of reads is under way: nothing to show yet.
    Starting,
    Ok,
    /// Reads fail since `since`; `problem` says what the database answered (no secret, no
    /// address: [`connect::error_text`]).
    Unavailable {
        since: DateTime<Utc>,
        problem: String,
    },
}

impl Health {
    /// One word for `/healthz`.
    pub fn word(&self) -> &'static str {
        match self {
            Health::Starting => "starting",
            Health::Ok => "ok",
            Health::Unavailable { .. } => "unavailable",
        }
    }
}

/// Every campaign's last read, shared by the pages and the refresher.
#[derive(Debug)]
pub struct Board {
    inner: RwLock<Inner>,
    /// `WEB_REFRESH_S`.
    pub refresh: Duration,
    /// `WEB_DB_TIMEOUT_MS`: the longest one read may take before the database counts as not
    /// answering.
    pub read_timeout: Duration,
    /// `WEB_TIME_ZONE`: the zone the pages show times in.
    pub zone: Tz,
}

#[derive(Debug)]
struct Inner {
    views: BTreeMap<String, View>,
    health: Health,
    /// When the last complete round of reads ended, and how long it took.
    last_round: Option<(DateTime<Utc>, Duration)>,
}

impl Board {
    pub fn new(refresh: Duration, read_timeout: Duration, zone: Tz) -> Arc<Self> {
        Arc::new(Self {
            inner: RwLock::new(Inner {
                views: BTreeMap::new(),
                health: Health::Starting,
                last_round: None,
            }),
            refresh,
            read_timeout,
            zone,
        })
    }

    pub fn health(&self) -> Health {
        self.read().health.clone()
    }

    /// Every campaign, in the order of the index page: by [`crate::status::state::State::rank`], then
    /// name.
    pub fn views(&self) -> Vec<View> {
        let mut v: Vec<View> = self.read().views.values().cloned().collect();
        v.sort_by_key(|v| crate::status::state::State::of(&v.status).rank());
        v
    }

    pub fn view(&self, campaign_id: &str) -> Option<View> {
        self.read().views.get(campaign_id).cloned()
    }

    pub fn last_round(&self) -> Option<(DateTime<Utc>, Duration)> {
        self.read().last_round
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `old` is due for a new read at `now`.
    fn due(&self, old: Option<&View>, now: DateTime<Utc>) -> bool {
        let Some(old) = old else { return true };
        let every = if old.settled() {
            self.refresh * SETTLED_EVERY
        } else {
            self.refresh
        };
        (now - old.status.at).to_std().unwrap_or_default() >= every
    }

    fn failed(&self, e: &sqlx::Error) {
        let problem = connect::error_text(e);
        let mut inner = self.write();
        if !matches!(inner.health, Health::Unavailable { .. }) {
            warn!(error = %problem, "the status page cannot read the database; its pages answer 503 until a read succeeds");
            inner.health = Health::Unavailable {
                since: Utc::now(),
                problem,
            };
        }
    }
}

/// Keeps `board` current until `stop`: a round of reads every second, each campaign read when
/// it is due ([`Board::due`]). A campaign gone from the database leaves the board.
pub async fn refresh(
    pool: PgPool,
    board: Arc<Board>,
    defaults: status::Defaults,
    stop: CancellationToken,
) {
    loop {
        let started = std::time::Instant::now();
        let result = tokio::select! {
            r = round(&pool, &board, defaults) => r,
            _ = stop.cancelled() => return,
        };
        match result {
            Ok(()) => {
                let mut inner = board.write();
                if inner.health != Health::Ok {
                    debug!("the status page reads the database");
                }
                inner.health = Health::Ok;
                inner.last_round = Some((Utc::now(), started.elapsed()));
            }
            Err(e) => board.failed(&e),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// `read`, or [`sqlx::Error::PoolTimedOut`] after `limit`: a database that does not answer is
/// unavailable, not slow.
async fn bounded<T>(
    limit: Duration,
    read: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

/// One round: the campaigns that exist, and a new read of each that is due.
async fn round(
    pool: &PgPool,
    board: &Board,
    defaults: status::Defaults,
) -> Result<(), sqlx::Error> {
    let names = bounded(board.read_timeout, campaigns::names(pool)).await?;
    board.write().views.retain(|id, _| names.contains(id));
    for id in names {
        let old = board.view(&id);
        if !board.due(old.as_ref(), Utc::now()) {
            continue;
        }
        let view = bounded(board.read_timeout, read(pool, &id, old, defaults)).await?;
        board.write().views.insert(id, view);
    }
    Ok(())
}

/// Reads one campaign: its status, and its deliveries per minute when [`HISTORY_EVERY`] old
/// and its `sent` count moved.
async fn read(
    pool: &PgPool,
    id: &str,
    old: Option<View>,
    defaults: status::Defaults,
) -> Result<View, sqlx::Error> {
    let status = status::gather(pool, id, defaults).await?;
    let sent = status.progress.counts.sent;
    let (history, history_at, history_sent) = match old {
        Some(o)
            if o.history_sent == sent
                || (status.at - o.history_at).to_std().unwrap_or_default() < HISTORY_EVERY =>
        {
            (o.history, o.history_at, o.history_sent)
        }
        _ => (
            Store::new(pool.clone(), id).sent_per_minute().await?,
            status.at,
            sent,
        ),
    };
    Ok(View {
        status,
        history,
        history_at,
        history_sent,
    })
}
