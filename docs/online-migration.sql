-- The online-safe form of the migrations that touch campaign_targets, for a large live table
-- (our users: 1.2 M rows on Cloud SQL, the old CronJob possibly still reading it): steps 1-4
-- are migrations/20261202000001_campaign_targets.sql, step 5 the table's part of
-- migrations/20261205000004_spanning_days.sql, step 6 migrations/20261205000006_…, step 7
-- migrations/20261205000008_…, step 8 migrations/20261206000009_…. Run it statement by
-- statement with psql BEFORE the `campaign-sender migrate` that applies them
-- (docs/MIGRATION.md); those migrations then find everything in place. Each statement is safe to run again.
-- Nothing here holds a lock that blocks reads or writes for longer than a catalog update.
-- tests/it/migrate.rs runs this file and checks it ends in the same schema as the migration.

-- 1. New columns. Metadata-only since PostgreSQL 11 (constant defaults, no rewrite), but
--    ALTER TABLE takes an ACCESS EXCLUSIVE lock for that instant: never queue behind a long
--    transaction (and block everyone behind us) — fail fast and retry instead.
SET lock_timeout = '5s';

ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS opted_out_at timestamptz,
    ADD COLUMN IF NOT EXISTS state        text        NOT NULL DEFAULT 'pending',
    ADD COLUMN IF NOT EXISTS attempts     integer     NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS not_before   timestamptz,
    ADD COLUMN IF NOT EXISTS lease_until  timestamptz,
    ADD COLUMN IF NOT EXISTS claim_id     uuid,
    ADD COLUMN IF NOT EXISTS last_status  smallint,
    ADD COLUMN IF NOT EXISTS last_error   text,
    ADD COLUMN IF NOT EXISTS updated_at   timestamptz;

-- 2. Backfill legacy sent rows in short transactions of 10 000 rows. Repeat this statement
--    until it reports UPDATE 0 (psql: `\watch 1`, stop at 0). Row locks only, briefly.
UPDATE campaign_targets
   SET state = 'sent'
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM campaign_targets
                          WHERE sent_at IS NOT NULL AND state <> 'sent'
                          LIMIT 10000));

-- 3. CHECK constraints without a long lock: NOT VALID is instant; VALIDATE scans the table under
--    SHARE UPDATE EXCLUSIVE, which lets reads and writes continue.
ALTER TABLE campaign_targets
    ADD CONSTRAINT campaign_targets_state_check
    CHECK (state IN ('pending', 'sending', 'sent', 'failed')) NOT VALID;

ALTER TABLE campaign_targets VALIDATE CONSTRAINT campaign_targets_state_check;

ALTER TABLE campaign_targets
    ADD CONSTRAINT campaign_targets_attempts_check CHECK (attempts >= 0) NOT VALID;

ALTER TABLE campaign_targets VALIDATE CONSTRAINT campaign_targets_attempts_check;

-- 4. Indexes without blocking writes. CONCURRENTLY cannot run inside a transaction block. If one
--    fails it leaves an INVALID index that IF NOT EXISTS would then skip: check with
--    `SELECT indexrelid::regclass FROM pg_index WHERE NOT indisvalid;`, DROP INDEX CONCURRENTLY
--    it, and run the statement again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS campaign_targets_work_idx
    ON campaign_targets (campaign_id, member_id)
    WHERE state IN ('pending', 'sending') AND opted_out_at IS NULL;

CREATE INDEX CONCURRENTLY IF NOT EXISTS campaign_targets_failed_idx
    ON campaign_targets (campaign_id, last_status)
    WHERE state = 'failed';

-- 5. Priority and schedule (metadata-only columns), and the work set in claim order, built
--    without blocking writes; the old work set goes once the new one is valid.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS priority   integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS send_after timestamptz;

CREATE INDEX CONCURRENTLY IF NOT EXISTS campaign_targets_work_prio_idx
    ON campaign_targets (campaign_id, priority DESC, member_id)
    WHERE state IN ('pending', 'sending') AND opted_out_at IS NULL;

DROP INDEX CONCURRENTLY IF EXISTS campaign_targets_work_idx;

-- 6. Unconfirmed rows and the suppression list (migrations/20261205000006_…): two
--    metadata-only columns; the state CHECK replaced by a wider one, NOT VALID then validated
--    (one statement drops the old one and adds it, so a row is never unchecked); two small partial
--    indexes built without blocking writes; a new table.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS started_at    timestamptz,
    ADD COLUMN IF NOT EXISTS unknown_since timestamptz;

ALTER TABLE campaign_targets
    DROP CONSTRAINT IF EXISTS campaign_targets_state_check,
    ADD CONSTRAINT campaign_targets_state_check
    CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'unconfirmed', 'suppressed')) NOT VALID;

ALTER TABLE campaign_targets VALIDATE CONSTRAINT campaign_targets_state_check;

CREATE INDEX CONCURRENTLY IF NOT EXISTS campaign_targets_unconfirmed_idx
    ON campaign_targets (campaign_id, unknown_since)
    WHERE state = 'unconfirmed';

CREATE INDEX CONCURRENTLY IF NOT EXISTS campaign_targets_suppressed_idx
    ON campaign_targets (campaign_id)
    WHERE state = 'suppressed';

CREATE TABLE IF NOT EXISTS suppressions (
    email      text        PRIMARY KEY CHECK (email = lower(email) AND email <> ''),
    reason     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- 7. Autovacuum by dead-row count (migrations/20261205000008_autovacuum.sql): storage
--    parameters only, under SHARE UPDATE EXCLUSIVE (reads and writes go on), no rewrite.
ALTER TABLE campaign_targets SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000
);

-- 8. The table's part of migrations/20261206000009_vendor_profiles.sql: nullable columns
--    without a default, metadata-only.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS data                jsonb,
    ADD COLUMN IF NOT EXISTS provider_message_id text;

RESET lock_timeout;
