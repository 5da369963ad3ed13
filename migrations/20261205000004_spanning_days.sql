-- Campaigns that span days: a priority and an optional schedule per row, a send window per
-- campaign, and one time budget per Job (src/window.rs, src/worker/lifecycle.rs).
--
-- The simple form, right for an empty or small table; docs/online-migration.sql has the
-- online-safe form of the index change for the production table (docs/MIGRATION.md).

-- Per row: higher priority is sent first (default 0); send_after, if set, is the earliest time
-- the row may be claimed. Both have defaults, so the other system's inserts stay valid.
-- ADD COLUMN with a constant default is metadata-only: no table rewrite.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS priority   integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS send_after timestamptz;

-- The work set in claim order: by campaign, highest priority first, then member. Sent, failed
-- and opted-out rows leave it, so a claim reads O(batch) entries however many rows are done;
-- rows waiting for their retry or their schedule are passed over in order, never blocking a
-- lower priority. It replaces the work set by member (same predicate).
CREATE INDEX IF NOT EXISTS campaign_targets_work_prio_idx
    ON campaign_targets (campaign_id, priority DESC, member_id)
    WHERE state IN ('pending', 'sending') AND opted_out_at IS NULL;
DROP INDEX IF EXISTS campaign_targets_work_idx;

-- Per campaign: send only between window_start and window_end local time in `timezone` (an
-- IANA name); all three set, or none (send at any time).
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS window_start time,
    ADD COLUMN IF NOT EXISTS window_end   time,
    ADD COLUMN IF NOT EXISTS timezone     text;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'campaigns_window_check') THEN
        ALTER TABLE campaigns
            ADD CONSTRAINT campaigns_window_check
            CHECK ((window_start IS NULL) = (window_end IS NULL)
               AND (window_start IS NULL) = (timezone IS NULL)
               AND (window_start IS NULL OR window_start <> window_end));
    END IF;
END
$$;

-- One time budget per Job: the first pod of a Job records when the Job's budget started, and
-- every pod of it — a retried or rescheduled one too — ends at started_at + DEADLINE_S, not at
-- its own start + DEADLINE_S. Keyed by the Job's name (JOB_NAME); rows older than a week are
-- pruned by the pods.
CREATE TABLE IF NOT EXISTS run_budgets (
    job_name   text        PRIMARY KEY,
    started_at timestamptz NOT NULL
);
