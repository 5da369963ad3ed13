#!/usr/bin/env bash
# The import benchmark (docs/BENCHMARKS.md, "Import"): `campaign-sender import` of a generated
# CSV of ROWS members (default 1 200 000) into an empty campaign, against the database's own
# ceiling measured on the same server in the same run: psql's `\copy` of the same file straight
# into campaign_targets (no validation, no duplicate check, no idempotency). Then a re-import
# of the same file (every row already present) and a tenth of the file, for memory flatness.
# Then `suppress` of a generated suppression list of SUPPRESS_ROWS addresses (default 1 000 000,
# mixed case, with reasons) into an empty list, again (every address listed), and `--remove`.
# Prints one line per step (seconds, rows/s, peak RSS of the importing process) and a JSON line.
# Needs DATABASE_URL like scripts/test.sh (starts a throwaway PostgreSQL when unset).
set -euo pipefail
cd "$(dirname "$0")/.."

[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/bench-import.sh "$@"
rows=${ROWS:-1200000}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
psql=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$DATABASE_URL")

cargo build --locked --release --bin campaign-sender
bin=target/release/campaign-sender
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# member_id,email with a header; ~38 MB at 1.2 M rows.
{ echo "member_id,email"; seq 1 "$rows" | awk '{print $1 ",member" $1 "@example.com"}'; } >"$work/members.csv"
head -n $((rows / 10 + 1)) "$work/members.csv" >"$work/tenth.csv"
suppress_rows=${SUPPRESS_ROWS:-1000000}
{ echo "email,reason"; seq 1 "$suppress_rows" | awk '{print "Member" $1 "@Example.com," ($1 % 3 ? "hard_bounce" : "complaint")}'; } >"$work/suppressions.csv"

# Runs a command; prints "seconds max_rss_kib" of it.
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
dt = time.monotonic() - t
if r.returncode != 0:
    sys.exit(f"{sys.argv[1:]} exited {r.returncode}")
print(f"{dt:.3f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
}

DATABASE_URL=$DATABASE_URL "$bin" migrate >/dev/null 2>&1
reset() { "${psql[@]}" -c "TRUNCATE campaign_targets" -c "CHECKPOINT"; }

reset
read -r ceiling_s _ < <(measure "${psql[@]}" -c "\\copy campaign_targets (campaign_id, member_id, email) FROM PROGRAM 'sed \"1d; s/^/bench,/\" $work/members.csv' WITH (FORMAT csv)")
reset
read -r import_s import_rss < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" import --campaign bench "$work/members.csv")
n=$("${psql[@]}" -At -c "SELECT count(*) FROM campaign_targets WHERE campaign_id = 'bench' AND state = 'pending'")
[ "$n" = "$rows" ] || { echo "imported $n rows, expected $rows" >&2; exit 1; }
read -r again_s again_rss < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" import --campaign bench "$work/members.csv")
reset
read -r tenth_s tenth_rss < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" import --campaign bench "$work/tenth.csv")
read -r sup_s sup_rss < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" suppress "$work/suppressions.csv")
n=$("${psql[@]}" -At -c "SELECT count(*) FROM suppressions")
[ "$n" = "$suppress_rows" ] || { echo "listed $n addresses, expected $suppress_rows" >&2; exit 1; }
read -r resup_s _ < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" suppress "$work/suppressions.csv")
read -r unsup_s _ < <(measure env DATABASE_URL="$DATABASE_URL" "$bin" suppress --remove "$work/suppressions.csv")

python3 - "$rows" "$suppress_rows" "$ceiling_s" "$import_s" "$import_rss" "$again_s" "$again_rss" "$tenth_s" "$tenth_rss" "$sup_s" "$sup_rss" "$resup_s" "$unsup_s" <<'PY'
import json, sys
rows, srows = int(sys.argv[1]), int(sys.argv[2])
ceiling, imp, imp_rss, again, again_rss, tenth, tenth_rss, sup, sup_rss, resup, unsup = map(float, sys.argv[3:])
print(f"ceiling: psql \\copy into campaign_targets   {ceiling:6.2f} s  {rows / ceiling:9.0f} rows/s")
print(f"import:  {rows} rows, empty campaign   {imp:6.2f} s  {rows / imp:9.0f} rows/s  "
      f"({100 * ceiling / imp:.0f} % of the ceiling's speed)  peak RSS {imp_rss / 1024:.1f} MiB")
print(f"re-import: every row already present      {again:6.2f} s  {rows / again:9.0f} rows/s  peak RSS {again_rss / 1024:.1f} MiB")
print(f"import:  {rows // 10} rows (a tenth)            {tenth:6.2f} s  peak RSS {tenth_rss / 1024:.1f} MiB")
print(f"suppress: {srows} addresses, empty list    {sup:6.2f} s  {srows / sup:9.0f} rows/s  peak RSS {sup_rss / 1024:.1f} MiB")
print(f"suppress: again, every address listed     {resup:6.2f} s")
print(f"suppress --remove: all of them            {unsup:6.2f} s")
print(json.dumps({"rows": rows, "ceiling_s": ceiling, "import_s": imp, "import_rss_mib": round(imp_rss / 1024, 1),
                  "reimport_s": again, "tenth_s": tenth, "tenth_rss_mib": round(tenth_rss / 1024, 1),
                  "import_vs_ceiling": round(ceiling / imp, 3), "suppress_rows": srows,
                  "suppress_s": sup, "suppress_rss_mib": round(sup_rss / 1024, 1),
                  "resuppress_s": resup, "unsuppress_s": unsup}))
PY
