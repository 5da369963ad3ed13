-- A Job's time budget belongs to the Job object, not to its name. The Indexed Job is always
-- named `campaign-sender`: keyed by name, a Job deleted and applied again (to continue after a
-- pause, after DEADLINE_S, the next day) found its predecessor's spent budget and sent nothing
-- for a week. Keyed by the Job's UID (JOB_UID, the pod's `batch.kubernetes.io/controller-uid`
-- label), a pod the Job controller restarts keeps what is left of its Job's budget and a new Job
-- of the same name starts afresh. `job_name` is kept for a person reading the table.
--
-- run_budgets (keyed by name) is dropped: a pod of an older binary that starts after this
-- migration fails its budget read (exit 75, nothing sent); a new Job with the new image
-- continues the campaign.
CREATE TABLE IF NOT EXISTS job_budgets (
    job_uid    text        PRIMARY KEY CHECK (job_uid <> ''),
    job_name   text,
    started_at timestamptz NOT NULL
);
DROP TABLE IF EXISTS run_budgets;
