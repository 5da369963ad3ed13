//! The statements on `campaign_targets` of the work loop and of `status`, each with the
//! invariant it keeps (`import`'s are in [`super::import`], the failed rows' in
//! [`super::failed`], `resolve`'s in [`super::suppressions`]).
//!
//! The work loop's statements ([`Store::claim`], [`Store::recheck`], [`Store::extend_leases`],
//! [`Store::finish`], [`Store::remaining`], [`Store::failed_count`]) are each one auto-committed
//! statement. [`Store::claim`] and [`Store::recheck`] are the deliberate command–query
//! exceptions: each changes rows and returns what it found, because doing both in one statement
//! is what makes it atomic. [`Store::progress`] reads rows outside any claim.
//!
//! Invariant of every statement here that writes a list of rows: it names the campaign as
//! `(SELECT $1::text)`, a value the planner cannot look up in the statistics, so it estimates a
//! campaign at an average one and finds the listed rows by primary key, O(rows), whatever the
//! statistics say. Named as a plain `$1`, a campaign they have not seen yet (imported since the
//! last `ANALYZE`: a 1.2 M-row import into a 13 M-row table does not trigger one) is estimated
//! at one row, and the planner scans all its rows once per listed row (docs/BENCHMARKS.md, "The
//! claim on a 1.2 M-row table"). `scripts/explain-claim.sh` fails on such a plan, custom or
//! generic.

use std::time::Duration;

use sqlx::{FromRow, PgPool};

/// Run first, in the transaction of a statement that reads all of one campaign's rows
/// ([`Store::progress`], [`Store::rate_before`], [`Store::sent_per_minute`]).
///
/// Invariant: such a statement reads that campaign's rows only (its primary-key range), so its
/// cost grows with the campaign, not with the finished campaigns kept beside it. Left to its
/// costs, the planner scanned the whole table for `status` at 13.2 M rows, a scan that grows
/// with every campaign kept (docs/BENCHMARKS.md, "The table grows").
/// `scripts/explain-claim.sh` fails otherwise.
// language=PostgreSQL
pub(super) const ONE_CAMPAIGN_ONLY: &str = "SET LOCAL enable_seqscan = off";
use uuid::Uuid;

pub use super::row_state::RowState;
use crate::text_enum::{text_enum, text_enum_sql};

/// One claimed row, as the worker needs it. The email is personal data: it goes into the
/// request body and nowhere else.
#[derive(Clone, FromRow)]
pub struct ClaimedRow {
    pub member_id: i64,
    pub email: Option<String>,
    /// The recipient's template data (`import`'s extra CSV columns), personal data like the
    /// address: sent to the vendor, never logged.
    pub data: Option<sqlx::types::Json<serde_json::Value>>,
    /// This claim's attempt number (1 for the first).
    pub attempt: i32,
    /// Taken over from a holder whose lease had expired (a killed or stalled worker).
    pub reclaimed: bool,
}

impl std::fmt::Debug for ClaimedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedRow")
            .field("member_id", &self.member_id)
            .field("email", &"[personal data]")
            .field("data", &self.data.as_ref().map(|_| "[personal data]"))
            .field("attempt", &self.attempt)
            .field("reclaimed", &self.reclaimed)
            .finish()
    }
}

/// A claimed batch: the rows and the fencing token every write about them must carry.
#[derive(Debug, Clone)]
pub struct Batch {
    pub claim_id: Uuid,
    pub rows: Vec<ClaimedRow>,
    /// Rows taken over from a holder whose lease had expired (a killed or stalled worker).
    pub reclaimed: usize,
    /// Rows the claim picked and moved to `suppressed` instead (their address is listed).
    pub suppressed: usize,
}

/// A row as the claim statement returns it, before the suppressed ones are set apart.
#[derive(FromRow)]
struct Picked {
    #[sqlx(flatten)]
    row: ClaimedRow,
    priority: i32,
    suppressed: bool,
}

/// Work left in a campaign (opted-out rows are not work).
#[derive(Debug, Clone, Default, PartialEq, FromRow)]
pub struct Remaining {
    /// `pending` and claimable now.
    pub ready: i64,
    /// `pending`, waiting for `not_before` (retry backoff) or `send_after` (a schedule).
    pub waiting: i64,
    /// `sending`: leased by a worker (or by a crashed one until the lease expires).
    pub leased: i64,
    /// Seconds until the earliest waiting row or lease becomes claimable.
    pub next_due_s: Option<f64>,
}

impl Remaining {
    pub fn total(&self) -> i64 {
        self.ready + self.waiting + self.leased
    }
}

/// Final states of a whole campaign.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, FromRow)]
pub struct CampaignCounts {
    pub total: i64,
    pub sent: i64,
    pub failed: i64,
    pub pending: i64,
    pub sending: i64,
    /// Opted out and neither sent nor failed: never mailed, never will be (a row sent or
    /// failed before its opt-out keeps that outcome, so the buckets add up to `total`).
    pub opted_out: i64,
    /// Maybe delivered, not safe to send again: waiting for `resolve`.
    pub unconfirmed: i64,
    /// Its address is on the suppression list.
    pub suppressed: i64,
}

text_enum! {
    /// Why a claimed row must not be sent now although we claimed it (what [`Store::recheck`]
    /// finds), as the re-check's statement words it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Recheck: "re-check verdict" {
        /// `opted_out_at` was set after the claim.
        OptedOut = "opted_out",
        /// Our lease lapsed and another worker re-claimed the row: it is not ours any more.
        TakenOver = "taken_over",
        /// Its address was suppressed after the claim: the re-check moved it to `suppressed`.
        Suppressed = "suppressed",
        /// Its idempotency window closed after the claim: the re-check moved it to
        /// `unconfirmed`.
        Unconfirmed = "unconfirmed",
        /// The campaign is paused (an operator, `auto`, the brake): nothing is sent, the row is
        /// left as it is, still ours, for the caller to release.
        Paused = "paused",
    }
}

text_enum_sql!(Recheck);

/// The rows side of `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, FromRow)]
pub struct Progress {
    #[sqlx(flatten)]
    pub counts: CampaignCounts,
    /// `pending` rows in retry backoff.
    pub retry_waiting: i64,
    /// `pending` rows scheduled for later (`send_after` in the future).
    pub scheduled: i64,
    /// Rows that became `sent` in the last minute.
    pub sent_last_minute: i64,
    /// Seconds since the oldest of those (the window the rate is measured over).
    pub recent_window_s: Option<f64>,
    /// When the last row was sent.
    pub last_sent_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// One row's result as [`Store::finish`] writes it: plain values, built by the worker from its
/// decision ([`crate::outcome::Resolution::written`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub state: RowState,
    /// An HTTP attempt was made (else the claim's attempt is given back).
    pub attempted: bool,
    /// Its outcome is unknown: it may have been delivered (starts the idempotency window).
    pub unknown: bool,
    /// Not claimable again before this many milliseconds (`not_before`).
    pub delay_ms: Option<i64>,
    /// The provider's HTTP status.
    pub status: Option<i16>,
    /// The error class (`last_error`).
    pub error: Option<&'static str>,
    /// The vendor's id of the accepted message.
    pub message_id: Option<String>,
}

/// Rows (member id, claim) as the arrays a statement binds, in member order: every statement
/// that locks several rows of a claim (re-check, heartbeat, finish) locks them in that order,
/// so two of them running at once for one pod wait for each other but never deadlock.
fn in_member_order(rows: &[(i64, Uuid)]) -> (Vec<i64>, Vec<Uuid>) {
    let mut rows = rows.to_vec();
    rows.sort_unstable_by_key(|(member_id, _)| *member_id);
    rows.into_iter().unzip()
}

/// The campaign-scoped handle on `campaign_targets`.
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    campaign_id: String,
}

/// The one text of "a `pending` row whose retry backoff (`not_before`) and schedule
/// (`send_after`) have passed": claimable now. [`Store::claim`] picks by it and
/// [`Store::remaining`] counts by it (`ready`, and `waiting` by its negation), so the two never
/// disagree about what is ready. (A macro, so that each statement stays one `&'static str`.)
macro_rules! pending_due {
    () => {
        "(state = 'pending' AND (not_before IS NULL OR not_before <= now())
                              AND (send_after IS NULL OR send_after <= now()))"
    };
}

impl Store {
    pub fn new(pool: PgPool, campaign_id: impl Into<String>) -> Self {
        Self {
            pool,
            campaign_id: campaign_id.into(),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn campaign_id(&self) -> &str {
        &self.campaign_id
    }

    /// Claims up to `limit` rows for `lease`, under a fresh fencing token.
    ///
    /// Invariants:
    /// - two claims never get the same row: `FOR UPDATE SKIP LOCKED` locks what it picks and
    ///   passes over rows another claim is locking, instead of waiting for it;
    /// - an opted-out row is never claimed (`opted_out_at IS NULL`, re-evaluated on the locked,
    ///   latest row version, so an opt-out committed before the claim always wins);
    /// - a row in retry backoff is not claimed before `not_before`, nor a scheduled row before
    ///   its `send_after`; neither blocks the rows behind it;
    /// - the highest `priority` goes first, then the lowest `member_id`: picked in that order,
    ///   and returned in it (sorted here: an `UPDATE`'s `RETURNING` keeps no order of its own);
    /// - a row whose address is on the suppression list is never claimed: the claim moves it
    ///   to `suppressed` (out of the work set, no attempt counted) and does not return it;
    /// - a row another worker holds is taken only after its lease expired (the crash case);
    ///   if that holder had begun sending it (`started_at`), the send's outcome is unknown and
    ///   `unknown_since` keeps the earliest such moment (the re-check before the next send
    ///   applies the idempotency window to it);
    /// - the claim counts the attempt (`attempts + 1`) and stamps a new `claim_id`, which
    ///   fences off every later write by the previous holder;
    /// - it reads the partial work-set index in that order (`scripts/explain-claim.sh` fails
    ///   otherwise), so its cost is O(batch) however many rows are done;
    /// - it is safe to retry with the same `claim_id` ([`Store::claim_as`]): a claim whose answer
    ///   was lost (a connection gone dark after the commit) gets its own rows back on the retry,
    ///   uncounted a second time, instead of leaving them leased to nobody until `LEASE_S`.
    pub async fn claim(&self, limit: u32, lease: Duration) -> Result<Batch, sqlx::Error> {
        self.claim_as(Uuid::new_v4(), limit, lease).await
    }

    /// [`Store::claim`] under `claim_id`, which every retry of one claim keeps (the worker's).
    pub async fn claim_as(
        &self,
        claim_id: Uuid,
        limit: u32,
        lease: Duration,
    ) -> Result<Batch, sqlx::Error> {
        // language=PostgreSQL
        const CLAIM: &str = concat!(
            r#"
            WITH picked AS (
                SELECT member_id, state AS was, claim_id IS NOT DISTINCT FROM $3 AS ours,
                       EXISTS (SELECT 1 FROM suppressions s
                                WHERE s.email = email_fold(campaign_targets.email)) AS suppressed
                  FROM campaign_targets
                 WHERE campaign_id = $1
                   AND opted_out_at IS NULL
                   AND state IN ('pending', 'sending')
                   AND (   "#,
            pending_due!(),
            r#"
                        OR (state = 'sending' AND (lease_until IS NULL OR lease_until < now()
                                                   OR claim_id = $3)))
                 ORDER BY priority DESC, member_id
                 LIMIT $2
                   FOR UPDATE SKIP LOCKED
            )
            UPDATE campaign_targets t
               SET state         = CASE WHEN picked.suppressed THEN 'suppressed' ELSE 'sending' END,
                   attempts      = t.attempts + (NOT picked.suppressed AND NOT picked.ours)::int,
                   claim_id      = $3,
                   lease_until   = CASE WHEN NOT picked.suppressed
                                        THEN now() + make_interval(secs => $4) END,
                   not_before    = NULL,
                   unknown_since = coalesce(t.unknown_since, t.started_at),
                   started_at    = NULL,
                   updated_at    = now()
              FROM picked
             WHERE t.campaign_id = (SELECT $1::text)
               AND t.member_id = picked.member_id
            RETURNING t.member_id, t.email, t.data, t.attempts AS attempt, t.priority,
                      picked.was = 'sending' AND NOT picked.ours AS reclaimed, picked.suppressed
        "#
        );
        let picked: Vec<Picked> = sqlx::query_as(CLAIM)
            .bind(&self.campaign_id)
            .bind(limit as i64)
            .bind(claim_id)
            .bind(lease.as_secs_f64())
            .fetch_all(&self.pool)
            .await?;
        let (suppressed, mut rows): (Vec<Picked>, Vec<Picked>) =
            picked.into_iter().partition(|p| p.suppressed);
        // `RETURNING` keeps no order: the batch is sent in the order it was picked in.
        rows.sort_unstable_by_key(|p| (std::cmp::Reverse(p.priority), p.row.member_id));
        let rows: Vec<ClaimedRow> = rows.into_iter().map(|p| p.row).collect();
        Ok(Batch {
            claim_id,
            reclaimed: rows.iter().filter(|r| r.reclaimed).count(),
            suppressed: suppressed.len(),
            rows,
        })
    }

    /// Which of these claimed rows (member id, the claim that holds it) must not be sent now,
    /// and why; the others are stamped as begun.
    ///
    /// Invariants:
    /// - the one gate for the idempotency window, and the last for the suppression list (an
    ///   address listed after the claim);
    /// - a send starts only after this has seen the row still ours (`state = 'sending'` under
    ///   the claim we hold it by), not opted out, its address not suppressed and its
    ///   idempotency window (`unknown_since` within `resend_within`) still open. Run just
    ///   before sending, it closes the window between claim and send to the freshness the
    ///   caller demands;
    /// - a suppressed row becomes `suppressed` here, and one past its window `unconfirmed`
    ///   (both out of our claim: no later write of ours touches them); an opted-out one is left
    ///   to the caller to release;
    /// - every row cleared for sending gets `started_at` (the first such stamp of the claim
    ///   stays): if the claim's lease expires with no result written, the next claim knows
    ///   whether a request may have left. Rows not cleared are not stamped, so a crash marks
    ///   only what was about to be sent;
    /// - a paused campaign sends nothing: every row asked is `paused`, none stamped or moved, so
    ///   a pause committed before a check started stops every send that check would clear —
    ///   the bound on a pause is the caller's freshness, whatever the poll of the settings does;
    /// - the verdict is read as of the statement's start (what "a check at most
    ///   `OPTOUT_RECHECK_MS` old" means); the rows it stamps or moves are locked once, in member
    ///   order, and only if still ours then — the fence, checked on the latest version, is the
    ///   one test of ownership: a row taken over is reported taken over, never stamped or
    ///   moved (an opted-out one is reported opted out whoever holds it: its release is fenced
    ///   like every write); primary-key lookups only: cost O(rows asked).
    pub async fn recheck(
        &self,
        rows: &[(i64, Uuid)],
        resend_within: Duration,
    ) -> Result<Vec<(i64, Recheck)>, sqlx::Error> {
        let (ids, claims) = in_member_order(rows);
        // language=PostgreSQL
        const RECHECK: &str = r#"
            WITH asked AS (
                SELECT * FROM unnest($2::bigint[], $3::uuid[]) AS r(member_id, claim_id)
            ),
            verdict AS (
                SELECT c.member_id, a.claim_id,
                       CASE WHEN EXISTS (SELECT 1 FROM campaigns p
                                          WHERE p.campaign_id = (SELECT $1::text)
                                            AND p.paused_at IS NOT NULL) THEN 'paused'
                            WHEN c.opted_out_at IS NOT NULL THEN 'opted_out'
                            WHEN EXISTS (SELECT 1 FROM suppressions s WHERE s.email = email_fold(c.email))
                                 THEN 'suppressed'
                            WHEN c.unknown_since <= now() - make_interval(secs => $4)
                                 THEN 'unconfirmed'
                            ELSE 'send' END AS verdict
                  FROM asked a
                  JOIN campaign_targets c
                    ON c.campaign_id = (SELECT $1::text) AND c.member_id = a.member_id
            ),
            marked AS (
                UPDATE campaign_targets t
                   SET state       = CASE WHEN v.verdict = 'send' THEN t.state ELSE v.verdict END,
                       started_at  = CASE WHEN v.verdict = 'send'
                                          THEN coalesce(t.started_at, now()) END,
                       lease_until = CASE WHEN v.verdict = 'send' THEN t.lease_until END,
                       updated_at  = CASE WHEN v.verdict = 'send' THEN t.updated_at ELSE now() END
                  FROM verdict v
                 WHERE t.campaign_id = (SELECT $1::text)
                   AND t.member_id = v.member_id
                   AND t.state = 'sending'
                   AND t.claim_id = v.claim_id
                   AND v.verdict NOT IN ('opted_out', 'paused')
                RETURNING t.member_id, v.verdict
            )
            SELECT member_id, verdict FROM verdict WHERE verdict IN ('opted_out', 'paused')
            UNION ALL
            SELECT member_id, verdict FROM marked WHERE verdict <> 'send'
            UNION ALL
            SELECT a.member_id, 'taken_over'
              FROM asked a
             WHERE NOT EXISTS (SELECT 1 FROM marked m WHERE m.member_id = a.member_id)
               AND NOT EXISTS (SELECT 1 FROM verdict v
                                WHERE v.member_id = a.member_id
                                  AND v.verdict IN ('opted_out', 'paused'))
        "#;
        // A verdict this code does not know is a decode error, never read as one it does.
        sqlx::query_as(RECHECK)
            .bind(&self.campaign_id)
            .bind(&ids)
            .bind(&claims)
            .bind(resend_within.as_secs_f64())
            .fetch_all(&self.pool)
            .await
    }

    /// The heartbeat: pushes the lease of rows we still hold (member id, claim) to
    /// `now() + lease`. Returns how many rows were extended.
    ///
    /// Invariants:
    /// - fenced like every write — only rows still `sending` under the claim we hold them by; a
    ///   row someone else re-claimed is not extended (and not ours any more);
    /// - it never waits for a row lock: a row another statement holds right now (the finish
    ///   writing its result, an opt-out) is skipped this beat and extended at the next. Two
    ///   statements updating the same rows lock them in their plans' orders, which need not
    ///   agree: a heartbeat that waited could deadlock with the finish of the same rows (seen:
    ///   PostgreSQL broke the cycle after `deadlock_timeout`, 1 s of that pod's sending lost).
    /// - Primary-key lookups only, so its cost is O(rows held), not O(campaign).
    pub async fn extend_leases(
        &self,
        rows: &[(i64, Uuid)],
        lease: Duration,
    ) -> Result<u64, sqlx::Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let (ids, claims) = in_member_order(rows);
        // language=PostgreSQL
        const EXTEND: &str = r#"
            WITH held AS (
                SELECT t.member_id
                  FROM campaign_targets t
                  JOIN unnest($2::bigint[], $3::uuid[]) AS r(member_id, claim_id)
                    ON t.member_id = r.member_id AND t.claim_id = r.claim_id
                 WHERE t.campaign_id = (SELECT $1::text)
                   AND t.state = 'sending'
                   FOR UPDATE OF t SKIP LOCKED
            )
            UPDATE campaign_targets t
               SET lease_until = now() + make_interval(secs => $4)
              FROM held
             WHERE t.campaign_id = (SELECT $1::text)
               AND t.member_id = held.member_id
        "#;
        let n = sqlx::query(EXTEND)
            .bind(&self.campaign_id)
            .bind(&ids)
            .bind(&claims)
            .bind(lease.as_secs_f64())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n)
    }

    /// Writes a claim's results in one fenced statement. Returns how many rows were written and
    /// how many of those were written `sent` although their member had opted out by then.
    /// `results.len() - written` rows were stale: re-claimed by someone else after our lease
    /// expired, so their outcome is not ours to record.
    ///
    /// Invariants:
    /// - the fence: only rows still `sending` under our `claim_id` are touched;
    /// - `sent` stamps `sent_at` (what the legacy job and any rollback read);
    /// - a released row gives its attempt back (`attempts - 1`) and keeps its last provider
    ///   answer, so time-budget leftovers and shutdown do not use up retries;
    /// - a retry gets `not_before = now() + delay`, so no one claims it before then;
    /// - a row written `sent` whose `opted_out_at` is set by now (the opt-out raced the request
    ///   in flight) is counted (`campaign_sender_sent_after_optout_total`): it should stay 0;
    /// - an attempt whose outcome is unknown (a timeout, a broken connection) starts the row's
    ///   idempotency window at the moment its send began (`unknown_since`, the earliest one
    ///   kept); every written row's `started_at` is cleared, since its outcome is now recorded.
    /// - `sent` keeps the vendor's message id (`provider_message_id`), which its events name;
    /// - a row the vendor refused as inactive becomes `suppressed` and, in the same statement,
    ///   its address is listed in `suppressions` for `inactive` (beside any other reason), so
    ///   no campaign mails it again — unless it was refused for our domain's fault before
    ///   (`sender_refused`: Postmark deactivated it for our refusal, not the recipient's); the other form of an internationalised domain, which SQL
    ///   cannot compute, is added by [`super::suppressions::complete_forms`] within the hour;
    /// - a row written `unconfirmed` (an unknown outcome under a vendor without idempotency
    ///   keys) is out of the work set at once: never sent again blindly;
    /// - the rows written `sent` are added to the campaign's tally, and to its tally of their
    ///   mailbox provider (`mailbox_family`, locked in family order), in the same statement, so
    ///   the brakes weigh complaints and refusals against every mail sent
    ///   ([`crate::store::brake`]).
    pub async fn finish(
        &self,
        claim_id: Uuid,
        results: &[(i64, Written)],
    ) -> Result<Finished, sqlx::Error> {
        if results.is_empty() {
            return Ok(Finished::default());
        }
        let n = results.len();
        let mut ids = Vec::with_capacity(n);
        let mut states = Vec::with_capacity(n);
        let mut attempted = Vec::with_capacity(n);
        let mut unknown = Vec::with_capacity(n);
        let mut delays = Vec::with_capacity(n);
        let mut statuses = Vec::with_capacity(n);
        let mut errors = Vec::with_capacity(n);
        let mut message_ids = Vec::with_capacity(n);
        let mut ordered: Vec<&(i64, Written)> = results.iter().collect();
        ordered.sort_unstable_by_key(|(member_id, _)| *member_id);
        for (member_id, w) in ordered {
            ids.push(*member_id);
            states.push(w.state);
            attempted.push(w.attempted);
            unknown.push(w.unknown);
            delays.push(w.delay_ms);
            statuses.push(w.status);
            errors.push(w.error);
            message_ids.push(w.message_id.as_deref());
        }
        // language=PostgreSQL
        const FINISH: &str = r#"
            WITH written AS (
                UPDATE campaign_targets t
                   SET state       = r.state,
                       attempts    = CASE WHEN r.attempted THEN t.attempts ELSE greatest(t.attempts - 1, 0) END,
                       not_before  = CASE WHEN r.delay_ms IS NULL THEN NULL
                                          ELSE now() + r.delay_ms * interval '1 millisecond' END,
                       sent_at     = CASE WHEN r.state = 'sent' THEN now() ELSE t.sent_at END,
                       last_status = CASE WHEN r.attempted THEN r.status ELSE t.last_status END,
                       last_error  = CASE WHEN r.attempted THEN r.error ELSE coalesce(r.error, t.last_error) END,
                       lease_until = NULL,
                       unknown_since = CASE WHEN r.unknown THEN coalesce(t.unknown_since, t.started_at, now())
                                            ELSE t.unknown_since END,
                       started_at  = NULL,
                       provider_message_id = coalesce(r.message_id, t.provider_message_id),
                       updated_at  = now()
                  FROM unnest($3::bigint[], $4::text[], $5::bool[], $6::bigint[], $7::int2[], $8::text[],
                              $9::bool[], $10::text[])
                       AS r(member_id, state, attempted, delay_ms, status, error, unknown, message_id)
                 WHERE t.campaign_id = (SELECT $1::text)
                   AND t.member_id = r.member_id
                   AND t.state = 'sending'
                   AND t.claim_id = $2
                RETURNING r.state, t.email, r.state = 'sent' AND t.opted_out_at IS NOT NULL AS after_optout
            ),
            listed AS (
                INSERT INTO suppressions (email, reason, source)
                SELECT DISTINCT email_fold(email), 'inactive', 'finish'
                  FROM written
                 WHERE state = 'suppressed' AND email_fold(email) <> ''
                   AND NOT EXISTS (SELECT 1 FROM sender_refused r WHERE r.email = email_fold(email))
                ON CONFLICT (email, reason) DO NOTHING
            ),
            tallied AS (
                INSERT INTO campaign_tallies AS c (campaign_id, sent)
                SELECT $1, count(*) FROM written WHERE state = 'sent' HAVING count(*) > 0
                ON CONFLICT (campaign_id) DO UPDATE SET sent = c.sent + excluded.sent
                RETURNING 1
            ),
            -- After the campaign's tally (it reads tallied's output): the lock order of events.
            per_provider AS (
                INSERT INTO campaign_family_tallies AS f (campaign_id, family, sent)
                SELECT $1, mailbox_family(email), count(*) FROM written
                 WHERE state = 'sent' AND email IS NOT NULL AND EXISTS (SELECT 1 FROM tallied)
                 GROUP BY 2 ORDER BY 2
                ON CONFLICT (campaign_id, family) DO UPDATE SET sent = f.sent + excluded.sent
            )
            SELECT after_optout FROM written
        "#;
        let written: Vec<bool> = sqlx::query_scalar(FINISH)
            .bind(&self.campaign_id)
            .bind(claim_id)
            .bind(&ids)
            .bind(&states)
            .bind(&attempted)
            .bind(&delays)
            .bind(&statuses)
            .bind(&errors)
            .bind(&unknown)
            .bind(&message_ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(Finished {
            written: written.len() as u64,
            sent_after_optout: written.iter().filter(|b| **b).count() as u64,
        })
    }

    /// Work left. Uses the work-set index only.
    ///
    /// Invariant: opted-out rows are not remaining work (they will never be claimed).
    pub async fn remaining(&self) -> Result<Remaining, sqlx::Error> {
        // language=PostgreSQL
        const REMAINING: &str = concat!(
            "SELECT count(*) FILTER (WHERE ",
            pending_due!(),
            ") AS ready, count(*) FILTER (WHERE state = 'pending' AND NOT ",
            pending_due!(),
            r#") AS waiting,
                   count(*) FILTER (WHERE state = 'sending') AS leased,
                   extract(epoch FROM min(CASE WHEN state = 'pending' THEN greatest(not_before, send_after)
                                               ELSE lease_until END) - now())::float8 AS next_due_s
              FROM campaign_targets
             WHERE campaign_id = $1
               AND state IN ('pending', 'sending')
               AND opted_out_at IS NULL
        "#
        );
        sqlx::query_as(REMAINING)
            .bind(&self.campaign_id)
            .fetch_one(&self.pool)
            .await
    }

    /// Rows in `failed` (partial index): checked during the run against the threshold.
    pub async fn failed_count(&self) -> Result<i64, sqlx::Error> {
        // language=PostgreSQL
        const FAILED: &str =
            "SELECT count(*) FROM campaign_targets WHERE campaign_id = $1 AND state = 'failed'";
        sqlx::query_scalar(FAILED)
            .bind(&self.campaign_id)
            .fetch_one(&self.pool)
            .await
    }

    /// Counts by final state for the whole campaign (one scan of its rows; for reports): the
    /// counts of [`Store::progress`], so a report and `status` can never disagree.
    pub async fn counts(&self) -> Result<CampaignCounts, sqlx::Error> {
        Ok(self.progress().await?.counts)
    }

    /// Everything `status` shows about the rows, in one scan of the campaign's rows.
    ///
    /// Invariants: the buckets partition the campaign — `sent`, `failed`, `unconfirmed` and
    /// `suppressed` are outcomes and stand whenever the opt-out came; opted out and neither sent nor failed is not work
    /// (neither `pending` nor `sending`, but `opted_out`), so a row is never counted twice;
    /// "sent recently" counts rows whose `sent_at` is in the last minute.
    pub async fn progress(&self) -> Result<Progress, sqlx::Error> {
        // language=PostgreSQL
        const PROGRESS: &str = r#"
            SELECT count(*) AS total,
                   count(*) FILTER (WHERE state = 'sent') AS sent,
                   count(*) FILTER (WHERE state = 'failed') AS failed,
                   count(*) FILTER (WHERE state = 'pending' AND opted_out_at IS NULL) AS pending,
                   count(*) FILTER (WHERE state = 'sending' AND opted_out_at IS NULL) AS sending,
                   count(*) FILTER (WHERE opted_out_at IS NOT NULL
                                      AND state IN ('pending', 'sending')) AS opted_out,
                   count(*) FILTER (WHERE state = 'unconfirmed') AS unconfirmed,
                   count(*) FILTER (WHERE state = 'suppressed') AS suppressed,
                   count(*) FILTER (WHERE state = 'pending' AND opted_out_at IS NULL
                                      AND not_before > now()) AS retry_waiting,
                   count(*) FILTER (WHERE state = 'pending' AND opted_out_at IS NULL
                                      AND send_after > now()) AS scheduled,
                   count(*) FILTER (WHERE state = 'sent' AND sent_at > now() - interval '1 minute') AS sent_last_minute,
                   extract(epoch FROM now() - min(sent_at) FILTER (
                       WHERE state = 'sent' AND sent_at > now() - interval '1 minute'))::float8 AS recent_window_s,
                   max(sent_at) FILTER (WHERE state = 'sent') AS last_sent_at
              FROM campaign_targets
             WHERE campaign_id = $1
        "#;
        let mut tx = self.pool.begin().await?;
        sqlx::query(ONE_CAMPAIGN_ONLY).execute(&mut *tx).await?;
        let progress = sqlx::query_as(PROGRESS)
            .bind(&self.campaign_id)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(progress)
    }

    /// The rate the campaign was last sent at: rows sent in the minute up to `last` (its last
    /// delivery), per second. What `status` assumes for a campaign not sending now (its window
    /// is closed).
    pub async fn rate_before(
        &self,
        last: chrono::DateTime<chrono::Utc>,
    ) -> Result<f64, sqlx::Error> {
        // language=PostgreSQL
        const RATE: &str = r#"
            SELECT count(*)::float8 / 60
              FROM campaign_targets
             WHERE campaign_id = $1 AND state = 'sent'
               AND sent_at > $2 - interval '1 minute' AND sent_at <= $2
        "#;
        let mut tx = self.pool.begin().await?;
        sqlx::query(ONE_CAMPAIGN_ONLY).execute(&mut *tx).await?;
        let rate = sqlx::query_scalar(RATE)
            .bind(&self.campaign_id)
            .bind(last)
            .fetch_one(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(rate)
    }
}

/// What one fenced [`Store::finish`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Finished {
    /// Rows written (still ours under the claim).
    pub written: u64,
    /// Of those, rows written `sent` whose member had opted out by the time of the write.
    pub sent_after_optout: u64,
}
