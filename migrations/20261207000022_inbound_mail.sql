-- The mailto of `List-Unsubscribe` (src/store/inbound.rs): how many mails each vendor's inbound
-- route brought to `events` by what became of them, and when the last one came, so `status`
-- shows a dead route and the mails no token names. One row per (vendor, outcome); no address,
-- no subject, nothing of the mail.
CREATE TABLE IF NOT EXISTS inbound_mail (
    vendor  text        NOT NULL,
    outcome text        NOT NULL CHECK (outcome IN ('unsubscribed', 'unmatched', 'no_token')),
    mails   bigint      NOT NULL DEFAULT 0,
    last_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (vendor, outcome)
);
