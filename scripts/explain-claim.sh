#!/usr/bin/env bash
# Shows the plan and cost of one claim on a 1.2 M-row campaign with 100 000 rows still pending
# (the rest sent), spread over 10 priorities, and 1 M addresses on the suppression list, on a
# throwaway PostgreSQL. Fails unless the claim reads the partial work-set index in claim order
# (priority, then member) with no sort, and looks each row's address up in the list by its key
# (no scan of the list), i.e. stays O(batch) however many rows are done or listed; and that
# every statement writing a list of rows finds them by key on a campaign not yet analysed, and
# every statement reading a whole campaign (`status`) reads only that campaign's rows.
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
# The claim statement (`const CLAIM` in src/store/targets.rs, as scripts/statement.py reads
# it), with literals for its parameters.
sql=$(python3 - <<'PY'
import sys
sys.path.insert(0, "scripts")
from statement import statement
body = statement("CLAIM")
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

# Every statement of the work loop that writes a list of rows, on a campaign the statistics have
# not seen (1.2 M rows inserted after the last ANALYZE, as right after an import): each must
# find its rows by the primary key's index condition on (campaign, member), never by a scan of
# the campaign (src/store/targets.rs, module invariant). Custom and generic plans both: sqlx
# prepares statements, and PostgreSQL may switch to the generic plan after five executions.
psql -q "$url" -c "INSERT INTO campaign_targets (campaign_id, member_id, email)
  SELECT 'unseen', g, 'm' || g || '@example.com' FROM generate_series(1, 1200000) g"
python3 - "$url" <<'PY'
import json, subprocess, sys, uuid
sys.path.insert(0, "scripts")
from statement import statement
url = sys.argv[1]
def arr(values): return "'{" + ",".join(map(str, values)) + "}'"
ids = arr(range(1, 201))
uuids = arr(uuid.uuid4() for _ in range(200))
statements = {
    "CLAIM": ("text, bigint, uuid, float8", "'unseen', 200, gen_random_uuid(), 60"),
    "RECHECK": ("text, bigint[], uuid[], float8", f"'unseen', {ids}, {uuids}, 86400"),
    "EXTEND": ("text, bigint[], uuid[], float8", f"'unseen', {ids}, {uuids}, 60"),
    "FINISH": ("text, uuid, bigint[], text[], bool[], bigint[], int2[], text[], bool[], text[]",
               f"'unseen', gen_random_uuid(), {ids}, {arr(['sent'] * 200)}, "
               f"{arr(['true'] * 200)}, {arr(['NULL'] * 200)}, {arr([202] * 200)}, "
               f"{arr(['NULL'] * 200)}, {arr(['false'] * 200)}, {arr(['m'] * 200)}"),
}
def nodes(n):
    yield n
    for c in n.get("Plans", []):
        yield from nodes(c)
bad = []
for name, (types, args) in statements.items():
    body = statement(name)
    for mode in ("force_custom_plan", "force_generic_plan"):
        out = subprocess.run(
            ["psql", "-qAt", url, "-c", f"PREPARE s({types}) AS {body}",
             "-c", f"SET plan_cache_mode = {mode}",
             "-c", f"EXPLAIN (FORMAT JSON) EXECUTE s({args})"],
            capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{name} ({mode}): {out.stderr}")
        plan = json.loads(out.stdout)[0]["Plan"]
        for n in nodes(plan):
            if n.get("Relation Name") != "campaign_targets" or n["Node Type"] == "ModifyTable":
                continue
            cond = n.get("Index Cond", "")
            whole_campaign = "Seq Scan" in n["Node Type"] or (
                n.get("Index Name") != "campaign_targets_work_prio_idx"
                and "member_id" not in cond)
            if whole_campaign:
                bad.append(f"{name} ({mode}): {n['Node Type']} {n.get('Index Name', '')} {cond}"
                           f" {n.get('Filter', '')}")
        print(f"{name} ({mode}): ok")
if bad:
    sys.exit("statements that scan a whole campaign the statistics have not seen:\n  "
             + "\n  ".join(bad))

# The statements that read all of one campaign's rows (`status`), run as the code runs them:
# after ONE_CAMPAIGN_ONLY in their transaction. They must read that campaign's range, never
# the whole table (here the campaign is half of it, so a scan of the table is the cheaper
# plan by the planner's costs).
setting = statement("ONE_CAMPAIGN_ONLY")
subprocess.run(["psql", "-q", url, "-c", "ANALYZE campaign_targets"], check=True)
for name, types, args in [("PROGRESS", "text", "'c'"),
                          ("RATE", "text, timestamptz", "'c', now()")]:
    body = statement(name)
    out = subprocess.run(
        ["psql", "-qAt", url, "-c", "BEGIN", "-c", setting,
         "-c", f"PREPARE s({types}) AS {body}",
         "-c", f"EXPLAIN (FORMAT JSON) EXECUTE s({args})", "-c", "ROLLBACK"],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{name}: {out.stderr}")
    plan = json.loads(out.stdout)[0]["Plan"]
    scans = [n for n in nodes(plan) if n.get("Relation Name") == "campaign_targets"]
    if any("Seq Scan" in n["Node Type"] for n in scans):
        bad.append(f"{name}: reads the whole table for one campaign")
    print(f"{name}: {', '.join(n['Node Type'] for n in scans)}")
if bad:
    sys.exit("\n".join(bad))
PY
