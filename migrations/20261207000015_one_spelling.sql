-- One mailbox, one spelling (src/fold.rs), and an address listed for each of its reasons
-- (src/store/suppressions.rs).
--
-- email_fold(), the SQL form of crate::fold::fold — the two must agree character for
-- character (tests/it/fold.rs): Unicode NFC; simple lower-casing, one character for one; NFC
-- again; no trailing dot. pg_c_utf8's lower() is the simple mapping; ICU's (PostgreSQL 15
-- and 16) is the full one, which differs in two places only, both taken out first by
-- translate(): `İ` (full: i + U+0307) and a final `Σ` (full: ς). Rows of the work table are
-- compared through it as they are (another system may write them unfolded), and no index of
-- the work table uses it, so changing it rewrites nothing there.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'pg_c_utf8') THEN
        CREATE OR REPLACE FUNCTION email_fold(address text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN rtrim(normalize(lower(translate(normalize(address, NFC), 'İΣ', 'iσ')
                                         COLLATE pg_c_utf8), NFC), '.');
    ELSIF EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu') THEN
        CREATE OR REPLACE FUNCTION email_fold(address text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN rtrim(normalize(lower(translate(normalize(address, NFC), 'İΣ', 'iσ')
                                         COLLATE "und-x-icu"), NFC), '.');
    ELSE
        RAISE EXCEPTION 'email_fold needs PostgreSQL 17 or later (pg_c_utf8) or a server built with ICU';
    END IF;
END
$$;

-- The list: one row per address and reason, refolded. Two spellings that now fold to one
-- become one address with the union of their reasons, each reason's earliest listing kept.
-- A listing of an internationalised domain gets its other form from `migrate` itself
-- (store::suppressions::complete_forms: SQL cannot compute UTS 46).
ALTER TABLE suppressions DROP CONSTRAINT IF EXISTS suppressions_email_folded;
ALTER TABLE suppressions DROP CONSTRAINT IF EXISTS suppressions_pkey;
DELETE FROM suppressions WHERE email_fold(email) = '';
UPDATE suppressions SET email = email_fold(email) WHERE email <> email_fold(email);
DELETE FROM suppressions
 WHERE ctid NOT IN (SELECT DISTINCT ON (email, reason) ctid FROM suppressions
                     ORDER BY email, reason, created_at);
ALTER TABLE suppressions ADD CONSTRAINT suppressions_pkey PRIMARY KEY (email, reason);
ALTER TABLE suppressions ADD CONSTRAINT suppressions_email_folded
    CHECK (email = email_fold(email) AND email <> '') NOT VALID;
ALTER TABLE suppressions VALIDATE CONSTRAINT suppressions_email_folded;

-- Soft bounces, refolded the same way: one per address and message, the earliest kept.
ALTER TABLE soft_bounces DROP CONSTRAINT IF EXISTS soft_bounces_email_check;
ALTER TABLE soft_bounces DROP CONSTRAINT IF EXISTS soft_bounces_pkey;
DELETE FROM soft_bounces WHERE email_fold(email) = '';
UPDATE soft_bounces SET email = email_fold(email) WHERE email <> email_fold(email);
DELETE FROM soft_bounces
 WHERE ctid NOT IN (SELECT DISTINCT ON (email, message) ctid FROM soft_bounces
                     ORDER BY email, message, occurred_at);
ALTER TABLE soft_bounces ADD CONSTRAINT soft_bounces_pkey PRIMARY KEY (email, message);
ALTER TABLE soft_bounces ADD CONSTRAINT soft_bounces_email_folded
    CHECK (email = email_fold(email) AND email <> '') NOT VALID;
ALTER TABLE soft_bounces VALIDATE CONSTRAINT soft_bounces_email_folded;
