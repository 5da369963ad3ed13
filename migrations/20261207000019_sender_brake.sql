-- The sender's brake (src/store/brake.rs): a campaign pauses when the permanent refusals of
-- our own domain (events::cause: authentication, reputation, …) of distinct members at one
-- mailbox provider reach its line, weighed against the mails sent to that provider.
--
-- mailbox_family(): the provider family of an address's domain, the SQL form of
-- store::event::Family::of (tests/it/brake.rs holds the two together). Immutable: the finish
-- and the upgrade's count compute it on rows, no index uses it.
CREATE OR REPLACE FUNCTION mailbox_family(address text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN CASE
        WHEN position('@' IN address) = 0 THEN 'other'
        ELSE (SELECT CASE
            WHEN d IN ('gmail.com', 'googlemail.com') THEN 'google'
            WHEN d IN ('outlook.com', 'hotmail.com', 'live.com', 'msn.com')
                 OR d ~ '^(hotmail|outlook|live)\.[a-z]{2,3}(\.[a-z]{2,3})?$' THEN 'microsoft'
            WHEN d IN ('yahoo.com', 'ymail.com', 'rocketmail.com', 'aol.com')
                 OR d ~ '^(yahoo|aol)\.[a-z]{2,3}(\.[a-z]{2,3})?$' THEN 'yahoo'
            WHEN d IN ('icloud.com', 'me.com', 'mac.com') THEN 'apple'
            ELSE 'other' END
          FROM (SELECT rtrim(lower(split_part(address, '@', -1)), '.') AS d) x)
    END;

-- Per campaign and provider: the mails sent (the finish, `resolve --assume-sent` and
-- `events` settling add them, as to campaign_tallies) and the sender's refusals of distinct
-- members (`events`, once per member: campaign_strikes' key).
CREATE TABLE IF NOT EXISTS campaign_family_tallies (
    campaign_id     text   NOT NULL,
    family          text   NOT NULL
                    CHECK (family IN ('google', 'microsoft', 'yahoo', 'apple', 'other')),
    sent            bigint NOT NULL DEFAULT 0 CHECK (sent >= 0),
    sender_refusals bigint NOT NULL DEFAULT 0 CHECK (sender_refusals >= 0),
    PRIMARY KEY (campaign_id, family)
);

ALTER TABLE campaign_strikes DROP CONSTRAINT IF EXISTS campaign_strikes_kind_check;
ALTER TABLE campaign_strikes ADD CONSTRAINT campaign_strikes_kind_check
    CHECK (kind IN ('complaint', 'hard_bounce', 'sender_refusal'));

-- A campaign's own line of refusals; NULL: the fleet's (MAX_SENDER_REFUSALS); 0: off.
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS max_sender_refusals integer
        CHECK (max_sender_refusals IS NULL OR max_sender_refusals >= 0);

-- Campaigns under way keep their history: one count of the sent rows, once, at upgrade.
INSERT INTO campaign_family_tallies (campaign_id, family, sent)
SELECT campaign_id, mailbox_family(email), count(*)
  FROM campaign_targets WHERE state = 'sent' AND email IS NOT NULL
 GROUP BY 1, 2
ON CONFLICT (campaign_id, family) DO NOTHING;
