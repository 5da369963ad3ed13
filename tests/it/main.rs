//! One integration-test binary, on real PostgreSQL: every `#[sqlx::test]` gets a fresh database
//! (from `DATABASE_URL`, which `scripts/test.sh` points at a throwaway server) with the
//! migrations applied. The fake provider runs in-process on port 0.

mod helpers;

mod account;
mod archive;
mod brake;
mod claim;
mod dark;
mod docs;
mod doors;
mod e2e;
mod events;
mod events_e2e;
mod events_race;
mod events_sns;
mod exit_codes;
mod fold;
mod hostile;
mod import;
mod inbound;
mod keda;
mod layers;
mod lift;
mod manifests;
mod manifests_servers;
mod migrate;
mod mistakes;
mod one_click;
mod operator;
mod rate;
mod security;
mod sender_brake;
mod sending;
mod serve;
mod ses_moto;
mod suppress;
mod tls;
mod unconfirmed;
mod vendors;
mod web;
mod web_browser;
mod windows;
