-- Whose fault a refusal is (src/events/cause.rs): kept with the stored event — the cause, the
-- enhanced code (5.7.26) and the recipient's mailbox provider — never the server's text, which
-- can hold an address. Nullable without a default: metadata only; events stored before have
-- none. `what` gains 'refused' (a permanent refusal of the sender: it suppresses nobody); the
-- column has no CHECK, so no constraint changes.
ALTER TABLE provider_events
    ADD COLUMN IF NOT EXISTS cause  text,
    ADD COLUMN IF NOT EXISTS code   text,
    ADD COLUMN IF NOT EXISTS family text;
