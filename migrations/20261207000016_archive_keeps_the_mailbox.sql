-- A one-click is honoured for every mail we ever sent, after `archive` too: the archive keeps
-- the folded address (email_fold) of each row it moves, so a click on an archived campaign's
-- mail lists that mailbox like any other (src/store/one_click.rs; the personal-data reasoning
-- is docs/OPERATIONS.md "Archiving finished campaigns"). Nullable without a default: metadata
-- only; rows archived before this have no address, and their clicks still find none.
ALTER TABLE campaign_archive ADD COLUMN IF NOT EXISTS email text;
