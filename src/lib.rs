//! campaign-sender: deliver a marketing campaign, one provider call per recipient, from a
//! PostgreSQL work table — safe when started twice, overlapping, killed or rescheduled.
//!
//! # Layout
//! The pipeline of one pod, in the order a row meets it:
//! - [`worker`]: the work loop — `claim.rs` (claim a batch: lease + fencing token), `gate.rs`
//!   (pacer token + opt-out re-check), `send.rs` (one provider call), `finish.rs` (fenced result
//!   writes, the failure budget), `held.rs` (the rows held), `watches.rs` (lease heartbeat,
//!   settings watch), `shutdown.rs` (the one stop path), `recorder.rs` (report + metrics),
//!   `lifecycle.rs` (`run`, `serve`, `step`);
//! - [`store`]: every SQL statement, one file per table, each with the invariant it keeps;
//!   connecting, and the one retry rule for the database ([`store::outage`]);
//! - [`rate`]: one provider limit for the whole fleet — the pure round (`plan.rs`, simulated
//!   in `sim.rs`), the coordinator's rounds in PostgreSQL, the governor pacer;
//! - [`provider`]: the HTTP client and one profile per vendor (`MAIL_PROVIDER`: our JSON
//!   contract, SendGrid, SES, Postmark, Mailgun, Resend): each builds its request and reads its
//!   answers; the idempotency key where the vendor has one, timeouts, SES's credentials;
//! - [`outcome`]: pure decisions: status → attempt → what to write, backoff with jitter;
//! - [`window`]: a campaign's send window in its time zone (pure: open or closed at an instant,
//!   DST included).
//!
//! Around it:
//! - [`config`]: typed environment configuration, defaults, validation (exit 78); it builds
//!   the typed values the rest takes (the provider client, the webhook listeners, the rules);
//! - [`secret`]: a value never printed (a URL with a password, a key);
//! - [`campaign_id`]: the one alphabet of campaign ids (they travel in headers and tags);
//! - [`mailbox`]: the sender and reply-to, exactly one RFC 5322 mailbox each;
//! - [`shown`]: personal data and text from outside: whether a text is plausibly an address,
//!   and how a value may be shown (never an address, escaped, cut);
//! - [`fold`]: one mailbox, one spelling: the fold the suppression list compares by (the SQL
//!   `email_fold()` agrees with it) and the listings of an internationalised domain;
//! - [`unsubscribe`]: one-click unsubscribe (RFC 8058) with our links: the signed token, the
//!   headers' values (the senders add them, `events` honours them);
//! - [`exit`]: exit codes and the one rule from how a run stopped to its code;
//! - [`report`]: per-process counters and the run report;
//! - [`metrics`]: Prometheus metric names and the exporter;
//! - [`telemetry`]: tracing setup (JSON in pods);
//! - [`text_enum`]: the one declaration of a vocabulary stored or shown as text (row states,
//!   error classes, verdicts, phases);
//! - [`events`]: `campaign-sender events`, the vendors' signed webhooks: suppressions from
//!   bounces and complaints, settled rows from deliveries;
//! - [`http`]: the public doors `events` and `web` are served through: connections, heads,
//!   bodies and shutdown, each bounded;
//! - [`import`]: CSV → `COPY` → checks → idempotent insert, in one transaction;
//! - [`status`]: what `status` shows (counts, rate, ETA, pause, pods, failure reasons);
//! - [`web`]: `campaign-sender web`, the same figures as a page that refreshes itself, read in
//!   the background (`board.rs`) and drawn on the server (`page.rs`, `chart.rs`);
//! - [`cli`]: the subcommands, for the binary (`src/main.rs`), which owns signals and the exit.
//!
//! # Layers
//! Dependencies point down: a module uses only modules on lines below its own, never one above
//! or beside it (held by `tests/it/layers.rs` over every `crate::` path outside tests):
//! 1. `cli`
//! 2. `web`, `worker`
//! 3. `status`
//! 4. `config`
//! 5. `events`, `rate`, `import`
//! 6. `provider`
//! 7. `report`, `mailbox`, `metrics`, `unsubscribe`
//! 8. `outcome`, `exit`
//! 9. `store`
//! 10. `window`, `text_enum`, `campaign_id`, `secret`, `http`, `telemetry`, `fold`
//! 11. `shown`
//!
//! The fake provider and the load harnesses are crates of their own (`fake-provider/`,
//! `loadtest/`), so they never reach the production binary.

pub mod campaign_id;
pub mod cli;
pub mod config;
pub mod events;
pub mod exit;
pub mod fold;
pub mod http;
pub mod import;
pub mod mailbox;
pub mod metrics;
pub mod outcome;
pub mod provider;
pub mod rate;
pub mod report;
pub mod secret;
pub mod shown;
pub mod status;
pub mod store;
pub mod telemetry;
pub mod text_enum;
pub mod unsubscribe;
pub mod web;
pub mod window;
pub mod worker;
