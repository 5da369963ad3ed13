-- Suppression matched in every script: `ÄNN@EXAMPLE.COM` listed must stop `änn@example.com`.
-- PostgreSQL's lower() follows the database's collation, and under the C collation (a
-- throwaway cluster's, many a managed default) it folds ASCII only. email_fold() folds the
-- whole of Unicode whatever the database's collation: lower() under the builtin C.UTF-8
-- collation (pg_c_utf8, PostgreSQL 17 and later: the same on every machine), else under ICU's
-- root locale. It is fixed here, once per database, and used on every side of every
-- comparison with suppressions and in its CHECK, so the two sides always agree.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'pg_c_utf8') THEN
        CREATE OR REPLACE FUNCTION email_fold(address text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN lower(address COLLATE pg_c_utf8);
    ELSIF EXISTS (SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu') THEN
        CREATE OR REPLACE FUNCTION email_fold(address text) RETURNS text
            LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
            RETURN lower(address COLLATE "und-x-icu");
    ELSE
        RAISE EXCEPTION 'email_fold needs PostgreSQL 17 or later (pg_c_utf8) or a server built with ICU';
    END IF;
END
$$;

-- Listed addresses folded the new way. Two that fold to one (`Änn@…` and `änn@…`, both kept by
-- the old ASCII-only fold) become one listing: the earliest, with its reason.
DELETE FROM suppressions a
 USING suppressions b
 WHERE email_fold(a.email) = email_fold(b.email)
   AND (b.created_at, b.email) < (a.created_at, a.email);
UPDATE suppressions SET email = email_fold(email) WHERE email <> email_fold(email);
ALTER TABLE suppressions DROP CONSTRAINT IF EXISTS suppressions_email_check;
ALTER TABLE suppressions ADD CONSTRAINT suppressions_email_folded
    CHECK (email = email_fold(email) AND email <> '');
