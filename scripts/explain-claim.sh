#!/usr/bin/env bash
# Shows the plan and cost of one claim on a 1.2 M-row campaign with 100 000 rows still pending
# (the rest sent), spread over 10 priorities, and 1 M addresses on the suppression list, on a
# throwaway PostgreSQL. Fails unless the claim reads the partial work-set index in claim order
# (priority, then member) with no sort, and looks each row's address up in the list by its key
# (no scan of the list), i.e. stays O(batch) however many rows are done or listed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/explain-claim.sh "$@"
url=$DATABASE_URL
for f in migrations/*.sql; do psql -q "$url" -f "$f"; done
psql -q "$url" -c "INSERT INTO campaign_targets (campaign_id, member_id, email, state, priority)
  SELECT 'c', g, 'm' || g || '@example.com', CASE WHEN g <= 1100000 THEN 'sent' ELSE 'pending' END, g % 10
  FROM generate_series(1, 1200000) g" -c "ANALYZE campaign_targets" \
  -c "INSERT INTO suppressions (email, reason) SELECT 'x' || g || '@example.com', 'hard_bounce'
      FROM generate_series(1, 1000000) g" -c "ANALYZE suppressions"
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
grep -q "Index Scan using campaign_targets_work_prio_idx" <<<"$plan" \
  || { echo "claim does not scan the work-set index in claim order" >&2; exit 1; }
! grep -q "Sort" <<<"$plan" || { echo "claim sorts: it reads more than a batch" >&2; exit 1; }
grep -q "Index Only Scan using suppressions_pkey" <<<"$plan" && ! grep -q "Seq Scan on suppressions" <<<"$plan" \
  || { echo "claim scans the suppression list instead of looking each address up" >&2; exit 1; }
