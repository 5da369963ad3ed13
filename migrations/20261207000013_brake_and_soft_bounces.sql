-- The mailbox providers' lines (src/store/brake.rs, src/store/soft_bounces.rs).
--
-- campaign_tallies: per campaign, the mails sent and the complaints and hard bounces the
-- vendors reported for them, so that `events` can weigh one against the other in the
-- transaction of the event that arrives, without counting a 1.2 M-row campaign each time.
-- `sent` is added by the workers' fenced finish and by `events` settling an unknown attempt;
-- complaints and hard bounces by `events`, once per stored event. A row of its own (not on
-- `campaigns`), so the workers' frequent additions never hold the row a pause updates.
CREATE TABLE IF NOT EXISTS campaign_tallies (
    campaign_id  text   PRIMARY KEY,
    sent         bigint NOT NULL DEFAULT 0 CHECK (sent >= 0),
    complaints   bigint NOT NULL DEFAULT 0 CHECK (complaints >= 0),
    hard_bounces bigint NOT NULL DEFAULT 0 CHECK (hard_bounces >= 0)
);

-- campaign_strikes: the members whose complaint or hard bounce a tally counted, so that each
-- counts once however many events a vendor sends of it (SES may report one complaint twice,
-- Postmark a bounce and then the suppression it caused).
CREATE TABLE IF NOT EXISTS campaign_strikes (
    campaign_id text   NOT NULL,
    member_id   bigint NOT NULL,
    kind        text   NOT NULL CHECK (kind IN ('complaint', 'hard_bounce')),
    PRIMARY KEY (campaign_id, member_id, kind)
);

-- Campaigns already under way keep their history: one scan, once, at upgrade.
INSERT INTO campaign_strikes (campaign_id, member_id, kind)
SELECT DISTINCT campaign_id, member_id, what
  FROM provider_events
 WHERE what IN ('complaint', 'hard_bounce') AND campaign_id IS NOT NULL AND member_id IS NOT NULL
ON CONFLICT DO NOTHING;
INSERT INTO campaign_tallies (campaign_id, sent)
SELECT campaign_id, count(*) FROM campaign_targets WHERE state = 'sent' GROUP BY campaign_id
ON CONFLICT (campaign_id) DO NOTHING;
UPDATE campaign_tallies t
   SET complaints = s.complaints, hard_bounces = s.hard_bounces
  FROM (SELECT campaign_id,
               count(*) FILTER (WHERE kind = 'complaint') AS complaints,
               count(*) FILTER (WHERE kind = 'hard_bounce') AS hard_bounces
          FROM campaign_strikes GROUP BY campaign_id) s
 WHERE s.campaign_id = t.campaign_id;

-- A campaign's own lines; NULL: the fleet's (MAX_COMPLAINT_RATIO, MAX_BOUNCE_RATIO).
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS max_complaint_ratio double precision
        CHECK (max_complaint_ratio IS NULL OR max_complaint_ratio BETWEEN 0 AND 1),
    ADD COLUMN IF NOT EXISTS max_bounce_ratio double precision
        CHECK (max_bounce_ratio IS NULL OR max_bounce_ratio BETWEEN 0 AND 1);

-- Soft bounces that age: one row per address and message (a vendor's retries of one message
-- are one), at the time the vendor says it happened. Personal data like `suppressions`:
-- `events` prunes rows older than SOFT_BOUNCE_WINDOW_S.
CREATE TABLE IF NOT EXISTS soft_bounces (
    email       text        NOT NULL CHECK (email = email_fold(email) AND email <> ''),
    message     text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    PRIMARY KEY (email, message)
);
CREATE INDEX IF NOT EXISTS soft_bounces_occurred_idx ON soft_bounces (occurred_at);
