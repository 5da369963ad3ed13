-- Never twice after the provider forgets a key (IDEMPOTENCY_WINDOW_S), and the provider's
-- suppression list (src/store/targets.rs, src/store/suppressions.rs).
--
-- The simple form, right for an empty or small table; docs/online-migration.sql has the
-- online-safe form of the constraint change for the production table (docs/MIGRATION.md).

-- Per row:
-- - started_at: when the current claim's request may first have left (stamped by the re-check
--   that clears the row for sending, cleared by the fenced write of its result). Still set on a
--   row whose lease expired, it tells a crash *after* the send began from one before it.
-- - unknown_since: the first moment an attempt with an unknown outcome (a timeout, a connection
--   broken mid-request, a crash after the send began) may have reached the provider. Past
--   IDEMPOTENCY_WINDOW_S the provider no longer suppresses a repeat of the key, so the row is
--   not sent again: it becomes 'unconfirmed' until an operator runs `resolve`.
-- Nullable without a default: metadata-only, no table rewrite.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS started_at    timestamptz,
    ADD COLUMN IF NOT EXISTS unknown_since timestamptz;

-- Two more states, both outcomes (out of the work set):
-- - 'unconfirmed': may have been delivered, cannot be re-sent safely (see above);
-- - 'suppressed': its address is on the suppression list (`campaign-sender suppress`); back to
--   'pending' when `suppress --remove` lifts it.
-- Replaced only if it is still the narrower one (docs/online-migration.sql may have done it).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'campaign_targets_state_check'
                      AND pg_get_constraintdef(oid) LIKE '%suppressed%') THEN
        ALTER TABLE campaign_targets DROP CONSTRAINT IF EXISTS campaign_targets_state_check;
        ALTER TABLE campaign_targets
            ADD CONSTRAINT campaign_targets_state_check
            CHECK (state IN ('pending', 'sending', 'sent', 'failed', 'unconfirmed', 'suppressed'));
    END IF;
END
$$;

-- Few rows each: `status` counts them, `resolve` and `suppress --remove` find them, without a
-- scan of the campaign.
CREATE INDEX IF NOT EXISTS campaign_targets_unconfirmed_idx
    ON campaign_targets (campaign_id, unknown_since)
    WHERE state = 'unconfirmed';
CREATE INDEX IF NOT EXISTS campaign_targets_suppressed_idx
    ON campaign_targets (campaign_id)
    WHERE state = 'suppressed';

-- The provider's suppression list, for every campaign: the whole address, lower-cased by
-- PostgreSQL's lower() on both sides of every comparison.
CREATE TABLE IF NOT EXISTS suppressions (
    email      text        PRIMARY KEY CHECK (email = lower(email) AND email <> ''),
    reason     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
