-- Finished campaigns leave the work table (`campaign-sender archive`, src/store/archive.rs):
-- their per-recipient outcome is kept compact in campaign_archive, their final counts in
-- archived_campaigns (what `status` shows for them). Small new tables: no online-safe form is
-- needed.

-- One row per recipient of an archived campaign: who (member_id; the address is not kept — the
-- member table of the other system has it), the outcome, when it was sent, the last provider
-- status and how many attempts it took. About a third of a campaign_targets row.
CREATE TABLE IF NOT EXISTS campaign_archive (
    campaign_id text        NOT NULL,
    member_id   bigint      NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('sent', 'failed', 'opted_out',
                                                        'unconfirmed', 'suppressed')),
    sent_at     timestamptz,
    last_status smallint,
    attempts    smallint    NOT NULL,
    PRIMARY KEY (campaign_id, member_id)
);

-- One row per archived (or being archived) campaign: its final counts, taken before the first
-- row moved, and when the move finished (NULL while it runs; `archive` again resumes it).
CREATE TABLE IF NOT EXISTS archived_campaigns (
    campaign_id  text        PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    archived_at  timestamptz,
    total        bigint      NOT NULL,
    sent         bigint      NOT NULL,
    failed       bigint      NOT NULL,
    opted_out    bigint      NOT NULL,
    unconfirmed  bigint      NOT NULL,
    suppressed   bigint      NOT NULL,
    last_sent_at timestamptz
);
