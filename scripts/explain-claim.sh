#!/usr/bin/env bash
# Shows the plan and cost of one claim on a 1.2 M-row campaign with 100 000 rows still pending
# (the rest sent), on a throwaway PostgreSQL. Checks that the claim uses the partial work-set
# index, i.e. stays O(batch) however many rows are done.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/explain-claim.sh "$@"
url=$DATABASE_URL
for f in migrations/*.sql; do psql -q "$url" -f "$f"; done
psql -q "$url" -c "INSERT INTO campaign_targets (campaign_id, member_id, email, state)
  SELECT 'c', g, 'm' || g || '@example.com', CASE WHEN g <= 1100000 THEN 'sent' ELSE 'pending' END
  FROM generate_series(1, 1200000) g" -c "ANALYZE campaign_targets"
# The claim statement (`const CLAIM` in src/store/targets.rs), with literals for its parameters.
sql=$(python3 - <<'PY'
import re
src = open("src/store/targets.rs").read()
body = src.split("const CLAIM: &str = r#\"")[1].split('"#')[0]
for k, v in {"$1": "'c'", "$2": "200", "$3": "gen_random_uuid()", "$4": "60"}.items():
    body = body.replace(k, v)
print(body)
PY
)
plan=$(psql "$url" -c "EXPLAIN (ANALYZE, BUFFERS) $sql")
echo "$plan"
grep -q "campaign_targets_work_idx" <<<"$plan" || { echo "claim does not use the work-set index" >&2; exit 1; }
