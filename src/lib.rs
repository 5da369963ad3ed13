//! campaign-sender: deliver a marketing campaign, one provider call per recipient, from a
//! PostgreSQL work table — safe when started twice, overlapping, killed or rescheduled.
//!
//! # Layout
//! - [`config`]: typed environment configuration, defaults, validation (exit 78), [`config::Secret`].
//! - [`store`]: every SQL statement on `campaign_targets` (claim, re-check, fenced finish,
//!   counts, progress, failure reasons, retry-failed) with the invariant each keeps; migrations are embedded from `migrations/`.
//! - [`provider`]: the HTTP client for the provider contract (idempotency key, timeouts).
//! - [`rate_share`]: one provider limit for the whole fleet: pods register in PostgreSQL and
//!   each takes a share under a handover rule; AIMD and a fleet-wide pause on 429.
//! - [`pacer`]: local pacing at this pod's share with governor (share swaps, validity, pauses).
//! - [`metrics`]: Prometheus metric names and the exporter.
//! - [`outcome`]: pure decisions: status → attempt → resolution, backoff with jitter.
//! - [`outage`]: how long and how often to retry a database that does not answer (start and
//!   mid-run, `DB_CONNECT_RETRY_S`).
//! - [`worker`]: the loop: claim → gate (opt-out re-check + pacing) → concurrent sends →
//!   fenced finish; one [`worker::Worker::step`] at a time, [`worker::Worker::run`] until done.
//! - [`report`]: counters, the run report, exit codes.
//! - [`shutdown`]: the root `CancellationToken`, cancelled by SIGTERM/SIGINT.
//! - [`telemetry`]: tracing setup (JSON in pods).
//! - [`fake_provider`]: an in-process or standalone provider with the real contract, rate
//!   limit, faults and statistics, for tests and load runs.
//! - [`campaign`]: the optional per-campaign settings row and the fleet-wide kill switch.
//! - [`import`]: CSV → `COPY` → checks → idempotent insert, in one transaction.
//! - [`status`]: what `status` shows (counts, rate, ETA, pause, pods, failure reasons).
//! - [`operator`]: the operator commands' terminal side (progress, output, exit codes).
//! - [`cli`]: the `campaign-sender` subcommands.

pub mod campaign;
pub mod cli;
pub mod config;
pub mod fake_provider;
pub mod import;
pub mod metrics;
pub mod operator;
pub mod outage;
pub mod outcome;
pub mod pacer;
pub mod provider;
pub mod rate_share;
pub mod report;
pub mod shutdown;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod worker;
