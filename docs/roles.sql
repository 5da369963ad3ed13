-- Least-privilege database roles for campaign-sender. `campaign-sender migrate` applies this
-- file after the migrations (src/store/roles.rs embeds it), as the owner; by hand it is:
--
--   psql "$MIGRATE_DATABASE_URL" -v ON_ERROR_STOP=1 -f docs/roles.sql
--   psql "$MIGRATE_DATABASE_URL" -c "ALTER ROLE campaign_sender_worker PASSWORD '…'"   -- or IAM auth
--
-- Idempotent: rerunning it (e.g. after a migration added a table) only re-applies the grants.
-- The integration tests apply this file and run every worker process as
-- campaign_sender_worker (tests/it/helpers.rs, `worker_url`), so a statement that needs more than
-- this fails a test, not a campaign.
--
-- campaign_sender_worker (`run`, `serve`):
-- - campaign_targets: reads rows; updates only the delivery columns. It cannot insert or
--   delete rows, and cannot change who a row is for (`campaign_id`, `member_id`, `email`) or an
--   opt-out (`opted_out_at`, written by another system);
-- - rate_limits, rate_pods, rate_usage: the fleet's rate-limit coordination (pods insert, renew
--   and prune their rows, record a refusal and the quota's use), but not a live limit;
-- - campaigns: reads settings; writes only the pause columns (the automatic pause on too many
--   failures), never the template or threshold;
-- - job_budgets: its Job's time budget (the first pod of a Job records its start; old ones are
--   pruned);
-- - _sqlx_migrations: reads the applied version (workers wait for the schema).
-- campaign_sender_operator (`import`, `status`, `pause`, `resume`, `retry-failed`,
-- `configure`, `limit`): the worker's reads, inserts into campaign_targets (import, through a
-- temporary table), retry-failed's update, the campaigns table, and on rate_limits the refusal
-- (`resume` lifts it) and the live limit (`limit`). Neither role can create, alter or
-- drop anything, or read another table.
-- campaign_sender_events (`events`, the vendors' webhooks): records each event once
-- (provider_events, webhook_tokens), lists an address (suppressions) and settles a row whose
-- attempt had an unknown outcome (the delivery columns of campaign_targets); keeps each
-- campaign's tally and pauses one over the complaint or bounce line (campaign_tallies, the
-- pause columns of campaigns); counts soft bounces (soft_bounces).
-- campaign_sender_web (`web`, the status page): reads what `status` reads, nothing else; it
-- writes nothing. It may read `email` only to join a suppressed row to its listing's reason
-- (the page never shows an address), and never a row's template data.
-- campaign_sender_keda (KEDA's backlog query, manifests/overlays/deployment/scaledobject.yaml):
-- reads only the columns that query needs, never an address or a result.

DO $$
BEGIN
    CREATE ROLE campaign_sender_worker LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- exists, or created concurrently
END
$$;

DO $$
BEGIN
    CREATE ROLE campaign_sender_operator LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- exists, or created concurrently
END
$$;

DO $$
BEGIN
    CREATE ROLE campaign_sender_events LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- exists, or created concurrently
END
$$;

DO $$
BEGIN
    CREATE ROLE campaign_sender_web LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- exists, or created concurrently
END
$$;

DO $$
BEGIN
    CREATE ROLE campaign_sender_keda LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;  -- exists, or created concurrently
END
$$;

-- Nothing by default: only the grants below.
REVOKE ALL ON campaign_targets, rate_limits, rate_pods, rate_usage, campaigns, job_budgets,
    suppressions, campaign_archive, archived_campaigns, _sqlx_migrations, provider_events,
    webhook_tokens, campaign_tallies, campaign_strikes, soft_bounces, campaign_family_tallies, sender_refused, inbound_mail FROM campaign_sender_worker, campaign_sender_operator, campaign_sender_keda,
    campaign_sender_events, campaign_sender_web;
GRANT USAGE ON SCHEMA public TO campaign_sender_worker, campaign_sender_operator,
    campaign_sender_keda, campaign_sender_events, campaign_sender_web;

GRANT SELECT (campaign_id, member_id, email, state, attempts, opted_out_at, not_before,
              send_after, sent_at, last_status, last_error, unknown_since)
    ON campaign_targets TO campaign_sender_web;
GRANT SELECT ON campaigns, archived_campaigns, rate_limits, rate_pods,
    rate_usage, provider_events, campaign_tallies, campaign_family_tallies, _sqlx_migrations
    TO campaign_sender_web;
-- Not the archive's addresses: the page shows none.
GRANT SELECT (campaign_id, member_id, outcome, sent_at, last_status, attempts)
    ON campaign_archive TO campaign_sender_web;
GRANT SELECT (email, reason) ON suppressions TO campaign_sender_web;
GRANT SELECT ON inbound_mail TO campaign_sender_web;

GRANT SELECT, INSERT ON provider_events TO campaign_sender_events;
-- UPDATE (event_id): taking a token is a no-op upsert, so a replica sees another's commit.
GRANT SELECT, INSERT, DELETE, UPDATE (event_id) ON webhook_tokens TO campaign_sender_events;
GRANT SELECT, INSERT ON suppressions TO campaign_sender_events;
GRANT SELECT ON campaign_targets TO campaign_sender_events;
-- A one-click on an archived campaign's mail finds its mailbox there.
GRANT SELECT (campaign_id, member_id, email) ON campaign_archive TO campaign_sender_events;
-- opted_out_at: a one-click unsubscribe (`/unsubscribe/{token}`) opts its row out at once.
GRANT UPDATE (state, lease_until, claim_id, updated_at, started_at, unknown_since,
              provider_message_id, opted_out_at)
    ON campaign_targets TO campaign_sender_events;
GRANT SELECT ON _sqlx_migrations TO campaign_sender_events;
-- The brake: an event adds to its campaign's tally (a settled row to `sent`) and, over a line,
-- pauses the campaign in the same transaction.
GRANT SELECT, INSERT, UPDATE ON campaign_tallies TO campaign_sender_events;
GRANT SELECT, INSERT ON campaign_strikes TO campaign_sender_events;
GRANT SELECT, INSERT, UPDATE ON campaign_family_tallies TO campaign_sender_events;
-- The addresses refused for our domain's fault: a vendor's later drop of them lists nobody; a
-- new refusal clears when the vendor last lifted the address.
GRANT SELECT, INSERT, UPDATE (lifted_at) ON sender_refused TO campaign_sender_events;
GRANT SELECT, INSERT (campaign_id, paused_at, paused_by, pause_reason),
      UPDATE (paused_at, paused_by, pause_reason, updated_at)
    ON campaigns TO campaign_sender_events;
-- The pages a recipient sees when they leave name the campaign's sender (its display name).
GRANT SELECT (from_address) ON campaigns TO campaign_sender_events;
-- Soft bounces that age: recorded, counted, pruned past the window.
GRANT SELECT, INSERT, UPDATE, DELETE ON soft_bounces TO campaign_sender_events;
-- The mailto's inbound mails: counted by what became of them (no address kept).
GRANT SELECT, INSERT, UPDATE ON inbound_mail TO campaign_sender_events;

GRANT SELECT ON campaign_targets TO campaign_sender_worker;
GRANT UPDATE (state, attempts, not_before, lease_until, claim_id, last_status, last_error,
              updated_at, sent_at, started_at, unknown_since, provider_message_id)
    ON campaign_targets TO campaign_sender_worker;
-- INSERT: a vendor that refuses a recipient as inactive (Postmark's 406) lists the address.
GRANT SELECT, INSERT ON suppressions TO campaign_sender_worker;
GRANT SELECT, INSERT ON rate_limits TO campaign_sender_worker;
-- Not override_*: a live limit is the operator's (`campaign-sender limit`).
GRANT UPDATE (limit_key, effective_per_s, paused_until, last_decrease_at, updated_at, refused_at,
              refused_status, refused_kind, refused_campaign, base_per_s, daily_quota,
              vendor_quota_until)
    ON rate_limits TO campaign_sender_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON rate_pods TO campaign_sender_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON rate_usage TO campaign_sender_worker;
GRANT SELECT ON campaigns TO campaign_sender_worker;
-- `run` and `serve` refuse a campaign that does not exist, naming the archived ones too.
GRANT SELECT ON archived_campaigns TO campaign_sender_worker;
GRANT INSERT (campaign_id, paused_at, paused_by, pause_reason),
      UPDATE (paused_at, paused_by, pause_reason, updated_at)
    ON campaigns TO campaign_sender_worker;
GRANT SELECT, INSERT, DELETE ON job_budgets TO campaign_sender_worker;
-- The fenced finish adds the mails it wrote `sent` to the campaign's tally (the brake's base).
GRANT SELECT, INSERT, UPDATE ON campaign_tallies TO campaign_sender_worker;
GRANT SELECT, INSERT, UPDATE ON campaign_family_tallies TO campaign_sender_worker;
-- Postmark's inactive recipient is not listed when its inactivity is our refusal's.
GRANT SELECT ON sender_refused TO campaign_sender_worker;
GRANT SELECT ON _sqlx_migrations TO campaign_sender_worker;

GRANT SELECT ON campaign_targets, rate_limits, rate_pods, rate_usage, _sqlx_migrations
    TO campaign_sender_operator;
-- `resume` lifts a refusal; `limit` sets or clears a live rate (on a key no pod used yet too).
GRANT INSERT (limit_key, effective_per_s, updated_at, override_per_s, override_set_at),
      UPDATE (refused_at, refused_status, refused_kind, refused_campaign, override_per_s,
              override_set_at)
    ON rate_limits TO campaign_sender_operator;
GRANT INSERT (campaign_id, member_id, email, priority, send_after, data)
    ON campaign_targets TO campaign_sender_operator;
GRANT UPDATE (state, attempts, not_before, lease_until, updated_at, sent_at, last_error,
              unknown_since)
    ON campaign_targets TO campaign_sender_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON suppressions TO campaign_sender_operator;
-- status shows a campaign's funnel from the events.
GRANT SELECT ON provider_events TO campaign_sender_operator;
-- `suppress --lift-at-vendor` lifts at the vendor the addresses refused for our domain's fault
-- and records when.
GRANT SELECT, UPDATE (lifted_at) ON sender_refused TO campaign_sender_operator;
-- `status` of an archived campaign; `archive` itself runs as the owner (it deletes rows).
GRANT SELECT ON campaign_archive, archived_campaigns TO campaign_sender_operator;
GRANT SELECT, INSERT, UPDATE ON campaigns TO campaign_sender_operator;
-- status shows each campaign's complaint and bounce rates against its lines; `resolve
-- --assume-sent` adds the rows it settles to the tally (the tally is the sent rows).
GRANT SELECT, INSERT, UPDATE ON campaign_tallies, campaign_family_tallies
    TO campaign_sender_operator;
-- `status` shows when the mailto's last inbound mail came, and those no token named.
GRANT SELECT ON inbound_mail TO campaign_sender_operator;
-- `suppress --remove` lets a lifted address start its soft bounces afresh.
GRANT SELECT, DELETE ON soft_bounces TO campaign_sender_operator;

GRANT SELECT (campaign_id, state, opted_out_at) ON campaign_targets TO campaign_sender_keda;
GRANT SELECT (campaign_id, paused_at, window_start, window_end, timezone)
    ON campaigns TO campaign_sender_keda;
