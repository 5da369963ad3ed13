-- The provider account beyond its rate (src/rate/, src/store/rate.rs): a refusal that stops
-- every pod of a limit key until an operator lifts it, a rate an operator sets live, and a daily
-- quota counted for the whole fleet. Small tables: no online-safe form is needed.

-- Per limit key:
-- - refused_*: the provider refused the account (401/403) or the endpoint (404/405); set by the
--   first pod that saw it, cleared only by `campaign-sender resume`;
-- - override_per_s: `campaign-sender limit --rate`, in force for every pod of the key instead of
--   their MAIL_RATE_PER_S while set; base_per_s is the limit the AIMD state was last computed
--   against, so a changed limit rescales it at once;
-- - daily_quota: MAIL_DAILY_QUOTA of the pods (attempts per rolling 24 h), for `status`.
ALTER TABLE rate_limits
    ADD COLUMN IF NOT EXISTS refused_at       timestamptz,
    ADD COLUMN IF NOT EXISTS refused_status   smallint,
    ADD COLUMN IF NOT EXISTS refused_kind     text,
    ADD COLUMN IF NOT EXISTS refused_campaign text,
    ADD COLUMN IF NOT EXISTS override_per_s   double precision,
    ADD COLUMN IF NOT EXISTS override_set_at  timestamptz,
    ADD COLUMN IF NOT EXISTS base_per_s       double precision,
    ADD COLUMN IF NOT EXISTS daily_quota      bigint;
DO $$
BEGIN
    ALTER TABLE rate_limits ADD CONSTRAINT rate_limits_refusal_check CHECK (
        (refused_at IS NULL) = (refused_status IS NULL)
        AND (refused_at IS NULL) = (refused_kind IS NULL)
        AND refused_kind IN ('account', 'endpoint'));
    ALTER TABLE rate_limits ADD CONSTRAINT rate_limits_override_check CHECK (override_per_s > 0);
    ALTER TABLE rate_limits ADD CONSTRAINT rate_limits_base_check CHECK (base_per_s > 0);
    ALTER TABLE rate_limits ADD CONSTRAINT rate_limits_quota_check CHECK (daily_quota > 0);
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

-- Per pod: the quota attempts granted to it and spent by it, cumulative. What is granted and
-- not yet spent counts as used, so the fleet never exceeds the quota.
ALTER TABLE rate_pods
    ADD COLUMN IF NOT EXISTS quota_granted bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS quota_spent   bigint NOT NULL DEFAULT 0;

-- Attempts per limit key per minute: the rolling 24 h is the sum of the last 1 440 minutes.
-- Written only under the key's round lock (rate_limits row).
CREATE TABLE IF NOT EXISTS rate_usage (
    limit_key text        NOT NULL,
    minute    timestamptz NOT NULL,
    attempts  bigint      NOT NULL CHECK (attempts >= 0),
    PRIMARY KEY (limit_key, minute)
);
