//! Every SQL statement, one file per table, each statement with the invariant it keeps.
//!
//! - [`targets`]: `campaign_targets`, the work queue (claim, re-check, heartbeat, fenced finish,
//!   what is left, counts for `status`); [`failed`]: failure reasons and `retry-failed`;
//!   [`history`]: deliveries per minute over a campaign's life (the status page's chart);
//! - [`campaigns`]: `campaigns`, the optional settings row (template, budget, send window) and
//!   the fleet-wide kill switch;
//! - [`budgets`]: `job_budgets`, one time budget per Job object;
//! - [`one_click`]: a one-click unsubscribe: the row opted out, its address listed, counted;
//!   [`inbound`]: the mailto's inbound mails, counted by what became of them;
//! - [`rate`]: `rate_limits`, `rate_pods` and `rate_usage`, the fleet-wide rate limit's rounds;
//! - [`account`]: the same tables as operators see and steer them (members, refusals, a live
//!   limit, the daily quota's use);
//! - [`import`]: the statements of `import` (staging table, duplicate check, idempotent insert);
//! - [`archive`]: a finished campaign out of the work table (`archive`);
//! - [`suppressions`]: the provider's suppression list (`suppress`), and `resolve` of
//!   `unconfirmed` rows; [`row_state`]: the states a row can be in;
//! - [`events`]: `provider_events` and `webhook_tokens`, what the vendors' events do;
//!   [`event`]: one vendor event as stored, and the one table of what each kind does;
//!   [`brake`]: `campaign_tallies` and `campaign_family_tallies`, each campaign's sent,
//!   complaints, hard bounces and (per mailbox provider) refusals of our domain, and the pause
//!   over a line; [`providers`]: a campaign by mailbox provider, for `status`;
//!   [`soft_bounces`]: soft bounces that age into a suppression; [`sender_refused`]: the
//!   addresses refused for our domain's fault, lifted at the vendor (`suppress
//!   --lift-at-vendor`);
//! - [`connect`]: the pool and the migrations; [`roles`]: docs/roles.sql, granted after them;
//! - [`outage`]: the one retry rule for a database that does not answer.
//!
//! Transactions, locks and timeouts: every statement of the work loop is a single
//! auto-committed statement, and no transaction is ever held across a provider call. Row locks
//! live only for the duration of the claim and re-check statements; after that, ownership is
//! the lease (`lease_until`) plus the fencing token (`claim_id`), and every write matches the
//! token. The only multi-statement transactions are a rate round (serialised by its key's row
//! lock, see [`rate`]), an import or `suppress` (atomic by design, see [`import`]) and an archive
//! batch (see [`archive`]).

pub mod account;
pub mod archive;
pub mod brake;
pub mod budgets;
pub mod campaigns;
pub mod connect;
pub mod event;
pub mod events;
pub mod failed;
pub mod history;
pub mod import;
pub mod inbound;
pub mod one_click;
pub mod outage;
pub mod providers;
pub mod rate;
pub mod roles;
pub mod row_state;
pub mod sender_refused;
pub mod soft_bounces;
pub mod suppressions;
pub mod targets;

pub use connect::{connect, schema_ready, MIGRATOR};
pub use failed::{Reason, RetryFilter};
pub use targets::{
    Batch, CampaignCounts, ClaimedRow, Finished, Progress, Recheck, Remaining, RowState, Store,
    Written,
};
