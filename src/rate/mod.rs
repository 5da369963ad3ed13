//! One provider rate limit for the whole fleet, coordinated in PostgreSQL.
//!
//! The limit (`MAIL_RATE_PER_S`) belongs to the provider account, not to a pod. Every pod
//! sending under one *limit key* (`RATE_LIMIT_KEY`, default: the host of `MAIL_URL`) registers
//! in `rate_pods` and renews its row every `RATE_SYNC_MS`; each renewal (a *round*) recomputes
//! that pod's share and the pod paces its own sends at it with governor ([`pacer`]).
//!
//! # The rules (what keeps the fleet's total under the limit)
//! - **Shares go by the campaigns' weights, not their pod counts** ([`shares`]). A pod with
//!   work carries its campaign's weight (`configure --weight`, read in each round), an idle pod
//!   (nothing claimable, nothing queued) weight 0, so it holds no capacity. The effective limit
//!   goes to the campaigns with work in proportion to their weights, each campaign's part
//!   divided among its own working pods and capped at what they can use ([`demand`]: what one
//!   campaign cannot spend goes to the others).
//! - **A pod only ever changes its own share, in its own round, under the lock** of the key's
//!   `rate_limits` row (every round of a key is serialised by it).
//! - **Lowering is immediate; the capacity it frees is not, quite.** A pod lowers its share
//!   locally *before* the change is committed, and the old rate stays *committed* to it for
//!   [`plan::HANDOVER`] (250 ms) after `share_changed_at`, which is stamped after it slowed
//!   down: the margin for a request that leaves the process a little after its token.
//! - **Raising only takes free capacity:** `effective limit − Σ committed(others)`, where a
//!   pod's committed rate is `max(share, previous share)` within the handover after a change,
//!   its share otherwise, and, for a pod that stopped renewing, its share until the handover
//!   past its expiry. So at every instant the rates in force sum to at most the limit — and
//!   then so does every one-second window, which is what the provider counts. A share of our
//!   own that expired (the database was away) is not ours any more: only free capacity is.
//! - **A share is valid for `RATE_SHARE_TTL_MS` after the round that granted it started** (local
//!   clock, which is earlier than the database's `expires_at`). A pod that cannot renew stops
//!   sending by itself before anyone else may take its capacity.
//! - **The provider is the final judge.** On a 429 the pod pauses itself at once for the
//!   `Retry-After`, and its next round (started at once) writes a fleet-wide `paused_until` and
//!   cuts the key's *effective* limit by [`plan::DECREASE_FACTOR`] (at most once a second); the
//!   effective limit then recovers by [`plan::INCREASE_PER_S`] of the limit per second (AIMD).
//!
//! # The account's other limits (same rounds, same lock)
//! - **A refusal stops the key.** An answer that refuses the account (401/403) or the endpoint
//!   (404/405, [`crate::outcome::Refusal`]) stops the pod's pass at once and, in a round started
//!   at once, is recorded on the key's row: every pod of the key has no share from its next
//!   round (within `RATE_SYNC_MS`) and stops its pass ([`FleetView`]) until an operator lifts it
//!   (`campaign-sender resume`). The first refusal recorded is the one kept.
//! - **A live limit** (`campaign-sender limit --rate`, `rate_limits.override_per_s`) replaces
//!   the pods' `MAIL_RATE_PER_S` for the key while set, lower or higher; the effective limit is
//!   rescaled at once (an AIMD cut keeps its proportion), so pods adopt it at their next round,
//!   under the handover rule like any share change.
//! - **The daily quota** (`MAIL_DAILY_QUOTA`, attempts per rolling 24 h per key) is kept by
//!   grants ([`quota`]): a pod starts a request only out of quota granted to it; what it
//!   started is recorded per minute (`rate_usage`), and what is granted and unspent counts as
//!   used, so the quota is never exceeded whoever joins, leaves or dies.
//!
//! Times written to the tables are the database's `clock_timestamp()`, never a pod's clock, so
//! pods with skewed clocks still agree. The arithmetic is the pure [`plan::plan_round`], tested with a
//! fake clock by a fleet simulation (`sim.rs`); the rounds are [`coordinator::Coordinator`], their
//! SQL [`crate::store::rate`]; the local pacing is [`pacer`].
//!
//! # Layout
//! - [`plan`]: the pure round ([`plan::plan_round`]) and its unit tests;
//! - [`shares`]: the division of the key's rate between campaigns by weight, pure;
//! - [`demand`]: what a pod can use of its share, measured by the pod, pure;
//! - `sim.rs` (tests only): a fleet of pods on one fake clock, joining, leaving, crashing and
//!   cut off, checked against the limit in every one-second window;
//! - [`quota`]: the daily quota's grants, pure;
//! - [`coordinator`]: one pod's membership — its rounds, its signals, what it tells the pass
//!   ([`FleetView`]), leaving;
//! - [`pacer`]: the local governor limiter the share drives, and the quota's count.

pub mod coordinator;
pub mod demand;
pub mod pacer;
pub mod plan;
pub mod quota;
pub mod shares;
#[cfg(test)]
mod sim;

pub use coordinator::{Coordinator, CoordinatorSettings, FleetView, Signals, LEAVE_TIMEOUT};
pub use pacer::Pacer;
pub use plan::DEFAULT_PAUSE;
