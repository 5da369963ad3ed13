-- The fleet-wide provider rate limit (src/rate_share.rs). Pods that send under one limit key
-- (by default the provider host) share one MAIL_RATE_PER_S; every round of a key is serialised
-- by a row lock on its rate_limits row. Times are the database's clock_timestamp(), never a
-- pod's, so pods with skewed clocks agree.

-- One row per limit key: the effective (AIMD) limit and the fleet-wide pause after a 429.
CREATE TABLE IF NOT EXISTS rate_limits (
    limit_key        text             PRIMARY KEY,
    effective_per_s  double precision NOT NULL CHECK (effective_per_s >= 0),
    paused_until     timestamptz,
    last_decrease_at timestamptz,
    updated_at       timestamptz      NOT NULL
);

-- One row per pod (a run of `campaign-sender run`), renewed every RATE_SYNC_MS. A pod's rate
-- counts against the limit (is "committed") as max(share, prev_share) until a second after
-- share_changed_at, and until a second after expires_at when it stops renewing.
CREATE TABLE IF NOT EXISTS rate_pods (
    limit_key        text             NOT NULL,
    pod_id           uuid             NOT NULL,
    worker           text             NOT NULL,
    campaign_id      text             NOT NULL,
    weight           double precision NOT NULL CHECK (weight >= 0),
    limit_per_s      double precision NOT NULL CHECK (limit_per_s >= 0),
    share_per_s      double precision NOT NULL CHECK (share_per_s >= 0),
    prev_share_per_s double precision NOT NULL CHECK (prev_share_per_s >= 0),
    share_changed_at timestamptz      NOT NULL,
    expires_at       timestamptz      NOT NULL,
    PRIMARY KEY (limit_key, pod_id)
);
