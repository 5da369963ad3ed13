-- A Job's time budget is the budget of one Job object *for one campaign*: the same JOB_UID
-- under another CAMPAIGN_ID (a copied manifest, a Job re-pointed at the next campaign) found
-- the first campaign's spent budget and sent nothing. The UID is stored canonical (lower-case,
-- hyphenated: src/store/budgets.rs), so one Job has one budget whatever the spelling it was
-- given in. Rows of the old key get the empty campaign: no pod reads them again, and they are
-- pruned within the week like every budget.
ALTER TABLE job_budgets ADD COLUMN IF NOT EXISTS campaign_id text NOT NULL DEFAULT '';
ALTER TABLE job_budgets DROP CONSTRAINT IF EXISTS job_budgets_pkey;
ALTER TABLE job_budgets ADD CONSTRAINT job_budgets_pkey PRIMARY KEY (job_uid, campaign_id);
