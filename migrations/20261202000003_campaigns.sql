-- Optional per-campaign settings and the fleet-wide kill switch (src/campaign.rs).
--
-- A campaign needs no row here: rows in campaign_targets with no settings row send with the
-- defaults (template = campaign id, MAX_PERMANENT_FAILURE_RATIO from the environment, not
-- paused). `campaign-sender pause` creates the row when it is missing. No foreign key either
-- way: the other system that fills campaign_targets knows nothing of this table.
CREATE TABLE IF NOT EXISTS campaigns (
    campaign_id                 text             PRIMARY KEY,
    -- The provider template; NULL means the campaign id.
    template                    text             CHECK (template IS NULL OR template <> ''),
    -- Overrides MAX_PERMANENT_FAILURE_RATIO for this campaign; NULL means the environment's.
    max_permanent_failure_ratio double precision
        CHECK (max_permanent_failure_ratio IS NULL OR max_permanent_failure_ratio BETWEEN 0 AND 1),
    -- The kill switch: set means no pod claims or starts a send for this campaign.
    paused_at                   timestamptz,
    -- Who paused it ('operator' via the CLI, or 'auto' when failures crossed the threshold),
    -- and why, in words for `status`. Never personal data.
    paused_by                   text,
    pause_reason                text,
    created_at                  timestamptz      NOT NULL DEFAULT now(),
    updated_at                  timestamptz      NOT NULL DEFAULT now()
);
