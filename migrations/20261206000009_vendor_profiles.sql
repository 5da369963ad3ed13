-- What a real vendor's mail needs (src/provider/): the sender and reply-to of a campaign, each
-- recipient's template data, and the vendor's id of each accepted message (its events name it).
--
-- Every change is ADD COLUMN without a default (metadata-only, no rewrite, no long lock); the
-- campaign_targets part is step 8 of docs/online-migration.sql. The other system's inserts of
-- (campaign_id, member_id, email) stay valid: all new columns are nullable.

-- `configure --from "Name <addr>" [--reply-to ADDR]`: what the vendors' From / Reply-To carry.
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS from_address text,
    ADD COLUMN IF NOT EXISTS reply_to     text;

-- data: the CSV's columns beyond member_id, email, priority and send_after, as one flat JSON
-- object of strings (`import`), sent as the vendor's template data. Personal data like the
-- address: never logged. provider_message_id: the vendor's id of the accepted message.
ALTER TABLE campaign_targets
    ADD COLUMN IF NOT EXISTS data                jsonb,
    ADD COLUMN IF NOT EXISTS provider_message_id text;

-- The vendor's own quota (not its rate, not MAIL_DAILY_QUOTA) is used up: no pod of the key
-- sends until then (src/rate/coordinator.rs). Set by the first pod that meets it.
ALTER TABLE rate_limits
    ADD COLUMN IF NOT EXISTS vendor_quota_until timestamptz;
