-- The vendors' events come back (`campaign-sender events`, src/events/, src/store/events.rs).
--
-- provider_events: one row per vendor event, keyed by the vendor's own event id, so that a
-- vendor's retry of an event already committed changes nothing (INSERT … ON CONFLICT DO
-- NOTHING decides which events of a request are new). `status` counts a campaign's funnel from
-- it (the index), so no counter row is contended by concurrent deliveries. No address here.
CREATE TABLE IF NOT EXISTS provider_events (
    vendor      text        NOT NULL,
    event_id    text        NOT NULL CHECK (event_id <> ''),
    what        text        NOT NULL,
    campaign_id text,
    member_id   bigint,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vendor, event_id)
);
CREATE INDEX IF NOT EXISTS provider_events_campaign_idx
    ON provider_events (campaign_id, what);

-- Mailgun's signature covers a timestamp and a token, not the event: a token is accepted for
-- one event only, on every replica. Rows older than the signature's age bound are pruned.
CREATE TABLE IF NOT EXISTS webhook_tokens (
    token    text        PRIMARY KEY,
    event_id text        NOT NULL,
    seen_at  timestamptz NOT NULL DEFAULT now()
);

-- Who listed an address: the vendor whose event did (`campaign-sender events`); NULL for the
-- lists `suppress` loads and for Postmark's refusals at send, and for rows listed before this.
-- Nullable without a default: metadata-only.
ALTER TABLE suppressions ADD COLUMN IF NOT EXISTS source text;
