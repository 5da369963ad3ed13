-- The work table. Works on an empty database and upgrades the legacy table our users run today:
--   campaign_targets(campaign_id text, member_id bigint, email text, sent_at timestamptz,
--                    PRIMARY KEY (campaign_id, member_id))
--
-- Another system inserts (campaign_id, member_id, email) and sets opted_out_at directly, so every
-- added column has a default and nothing here may reject such a row (no foreign keys, email
-- nullable: a NULL or malformed address is failed by the worker without a request, not refused
-- by the database).
--
-- This is the simple form, right for an empty or small table. For the 1.2 M-row production table
-- run the online-safe variant in docs/MIGRATION.md first (same end state; this file is then a
-- no-op apart from its bookkeeping).

CREATE TABLE IF NOT EXISTS campaign_targets (
    campaign_id text        NOT NULL,
    member_id   bigint      NOT NULL,
    email       text,
    sent_at     timestamptz,
    PRIMARY KEY (campaign_id, member_id)
);

-- ADD COLUMN with a constant default is metadata-only since PostgreSQL 11: no table rewrite.
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

-- Legacy rows the old CronJob already mailed are done: they must never be claimed again.
UPDATE campaign_targets
   SET state = 'sent'
 WHERE sent_at IS NOT NULL
   AND state <> 'sent';

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'campaign_targets_state_check') THEN
        ALTER TABLE campaign_targets
            ADD CONSTRAINT campaign_targets_state_check
            CHECK (state IN ('pending', 'sending', 'sent', 'failed'));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'campaign_targets_attempts_check') THEN
        ALTER TABLE campaign_targets
            ADD CONSTRAINT campaign_targets_attempts_check CHECK (attempts >= 0);
    END IF;
END
$$;

-- The work set: only rows that can still be claimed. Sent, failed and opted-out rows leave this
-- index, so a claim reads O(batch) entries however many of the 1.2 M rows are already done.
CREATE INDEX IF NOT EXISTS campaign_targets_work_idx
    ON campaign_targets (campaign_id, member_id)
    WHERE state IN ('pending', 'sending') AND opted_out_at IS NULL;

-- Failed rows are few (the run stops above 1 %): counting them for the failure threshold and
-- listing them for an operator stays cheap.
CREATE INDEX IF NOT EXISTS campaign_targets_failed_idx
    ON campaign_targets (campaign_id, last_status)
    WHERE state = 'failed';
