//! One provider rate limit for the whole fleet, coordinated in PostgreSQL.
//!
//! The limit (`MAIL_RATE_PER_S`) belongs to the provider account, not to a pod. Every pod
//! sending under one *limit key* (`RATE_LIMIT_KEY`, default: the host of `MAIL_URL`) registers
//! in `rate_pods` and renews its row every `RATE_SYNC_MS`; each renewal (a *round*) recomputes
//! that pod's share and the pod paces its own sends at it with governor ([`pacer`]).
//!
//! # The rules (what keeps the fleet's total under the limit)
//! - **Shares are weighted by demand.** A pod with work has weight 1, an idle pod (nothing
//!   claimable, nothing queued) weight 0, so it holds no capacity. The fair share of a pod is
//!   `effective limit × its weight ÷ the live pods' total weight`.
//! - **A pod only ever changes its own share, in its own round, under the lock** of the key's
//!   `rate_limits` row (every round of a key is serialised by it).
//! - **Lowering is immediate; the capacity it frees is not.** A pod lowers its share locally
//!   *before* the change is committed, and the old rate stays *committed* to it for one more
//!   second ([`HANDOVER`]) after `share_changed_at`, which is stamped after it slowed down.
//! - **Raising only takes free capacity:** `effective limit − Σ committed(others)`, where a
//!   pod's committed rate is `max(share, previous share)` within a second of a change, its share
//!   otherwise, and, for a pod that stopped renewing, its share until one second past its
//!   expiry. So capacity moves between pods only after the old rate's one-second window has
//!   closed: during joins, leaves and crashes the sum of the rates in force never exceeds the
//!   limit.
//! - **A share is valid for `RATE_SHARE_TTL_MS` after the round that granted it started** (local
//!   clock, which is earlier than the database's `expires_at`). A pod that cannot renew stops
//!   sending by itself before anyone else may take its capacity.
//! - **The provider is the final judge.** On a 429 the pod pauses itself at once for the
//!   `Retry-After`, and its next round (started at once) writes a fleet-wide `paused_until` and
//!   cuts the key's *effective* limit by [`DECREASE_FACTOR`] (at most once a second); the
//!   effective limit then recovers by [`INCREASE_PER_S`] of the limit per second (AIMD).
//!
//! Times written to the tables are the database's `clock_timestamp()`, never a pod's clock, so
//! pods with skewed clocks still agree. The arithmetic is the pure [`plan::plan_round`], tested with a
//! fake clock by a fleet simulation (`sim.rs`); the rounds are [`coordinator::Coordinator`], their
//! SQL [`crate::store::rate`]; the local pacing is [`pacer`].
//!
//! # Layout
//! - [`plan`]: the pure round ([`plan::plan_round`]) and its unit tests;
//! - `sim.rs` (tests only): a fleet of pods on one fake clock, joining, leaving, crashing and
//!   cut off, checked against the limit in every one-second window;
//! - [`coordinator`]: one pod's membership — its rounds, its signals, leaving;
//! - [`pacer`]: the local governor limiter the share drives.

pub mod coordinator;
pub mod pacer;
pub mod plan;
#[cfg(test)]
mod sim;

pub use coordinator::{Coordinator, CoordinatorSettings, Signals};
pub use pacer::Pacer;
pub use plan::DEFAULT_PAUSE;
