-- Autovacuum for the work table by the number of dead rows, not by a share of the table
-- (docs/DESIGN.md "The table grows"; figures in docs/BENCHMARKS.md, `scripts/bloat.sh`).
--
-- A claim and a finish each write a new version of the row (they change `state`, which the
-- partial indexes read, so neither can be a HOT update). The old versions' space is reused only
-- once a VACUUM has recorded it in the free-space map; until then new versions go to the end of
-- the table. PostgreSQL's default waits for dead rows worth 20 % of the table: with ten finished
-- campaigns kept for audit that is 2.6 M dead rows, more than a whole 1.2 M campaign's drain
-- produces, so the table grows by a new version of most sent rows and claims slow down as dead
-- index entries pile up across the drain. The churn is bounded by the provider's rate, not by the table's size, so the trigger is
-- a fixed count: 20 000 dead rows, under a minute of sending at 500/s, i.e. every autovacuum
-- round while a campaign sends and none while nothing does. Each round is cheap however large
-- the table: it reads only pages changed since the last one (the visibility map skips the rest).
--
-- Storage parameters only: SHARE UPDATE EXCLUSIVE, which lets reads and writes go on, and no
-- rewrite, so this form is also the online-safe one (docs/online-migration.sql, step 7).
ALTER TABLE campaign_targets SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 20000
);
