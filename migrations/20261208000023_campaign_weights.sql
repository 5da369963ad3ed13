-- Campaigns side by side under one rate-limit key (src/rate/shares.rs): the key's rate goes to
-- the campaigns with work in proportion to their weights, each campaign's share divided among its
-- own working pods, whatever the pod counts.

-- `configure --weight` (src/store/campaigns.rs): 1 unless set; the bounds are
-- WEIGHT_MIN and WEIGHT_MAX there.
ALTER TABLE campaigns
    ADD COLUMN IF NOT EXISTS weight double precision NOT NULL DEFAULT 1
        CHECK (weight >= 0.01 AND weight <= 1000);

-- What a pod's share may be capped at: the rate it can use, measured over its last round when it
-- spent clearly less than its steady share (a campaign whose pods cannot spend their share
-- leaves the rest to the others); NULL: as much as it is given. `weight` is now its campaign's
-- weight while it has work (0 idle), as the pod read it in its last round.
ALTER TABLE rate_pods
    ADD COLUMN IF NOT EXISTS demand_per_s double precision CHECK (demand_per_s >= 0);
