-- `suppress --lift-at-vendor` (src/store/sender_refused.rs): when an address refused for our
-- domain's fault was last taken off the vendor's own list, so a rerun asks the vendor only for
-- the addresses not lifted yet. A new refusal of the address clears it (src/store/events.rs):
-- the vendor has listed it again. Nullable without a default: metadata only.
ALTER TABLE sender_refused ADD COLUMN IF NOT EXISTS lifted_at timestamptz;
