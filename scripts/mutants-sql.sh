#!/usr/bin/env bash
# Breaks the safety-critical code (SQL, rate sharing and the code around it) on purpose, one mutation at a time, and shows which tests
# notice. Every mutation must turn at least one test red; the script fails otherwise.
# Needs DATABASE_URL like scripts/test.sh (starts a throwaway PostgreSQL when unset).
# The working tree is restored after each mutation (and on exit, whatever happens).
set -euo pipefail
cd "$(dirname "$0")/.."

[ -n "${DATABASE_URL:-}" ] || exec scripts/with-pg.sh scripts/mutants-sql.sh "$@"
backup=$(mktemp -d)
cp -r src "$backup/"
cleanup() {
  rm -rf src && cp -r "$backup/src" src
  rm -rf "$backup"
}
trap cleanup EXIT

# name | file | old text | new text (exact, must occur exactly once) [| which tests: `unit` runs
# only the library's unit tests, `fleet` the unit tests and tests/it/rate_share.rs, `serve`
# tests/it/serve.rs; default all]
mutations=(
  "claim without SKIP LOCKED|src/store.rs|  FOR UPDATE SKIP LOCKED|  FOR UPDATE"
  "finish without the claim_id fence|src/store.rs|AND t.claim_id = \$2|AND \$2::uuid IS NOT NULL"
  "claim ignores opted_out_at|src/store.rs|AND opted_out_at IS NULL
                   AND state IN ('pending', 'sending')|AND state IN ('pending', 'sending')"
  "no lease heartbeat|src/worker.rs|match self.w.store.extend_leases(&rows, self.cfg().lease()).await {|match self.w.store.extend_leases(&rows[..0], self.cfg().lease()).await {"
  "no release of unsent rows on stop|src/worker.rs|.chain(cleared.drain(..))
            .for_each(&mut release);|.chain(cleared.drain(..))
            .for_each(drop);"
  "attempt number in the Idempotency-Key|src/provider.rs|idempotency_key(&self.campaign_id, member_id)|format!(\"{}:{attempt}\", idempotency_key(&self.campaign_id, member_id))"
  "rate share: no handover second after a change|src/rate_share.rs|if now < self.share_changed_at + window {|if false && now < self.share_changed_at + window {|unit"
  "rate share: no handover second after expiry|src/rate_share.rs|if now >= self.expires_at + window {|if now >= self.expires_at {|unit"
  "rate share: every pod takes the whole limit|src/rate_share.rs|effective * report.weight / total_weight|effective|unit"
  "rate share: raise beyond the free capacity|src/rate_share.rs|fair.min(current.max(free))|fair|unit"
  "rate share: a 429 pauses only its own pod|src/rate_share.rs|self.pacer.pause_until(Instant::now() + left);|let _ = left;|fleet"
  "rate share: a 429 is never reported to the fleet|src/rate_share.rs|        let _ = self.throttled.send(retry_after);|        let _ = retry_after;|fleet"
  "rate share: leaving keeps sending|src/rate_share.rs|    async fn leave(&self) {
        self.pacer.revoke();|    async fn leave(&self) {|fleet"
  "rate share: an idle pod keeps its share|src/worker.rs|                    .set_busy(self.holding.load(Ordering::SeqCst) > 0);|                    .set_busy(true);|serve"
  "claim gate: holds FLUSH_MAX_ROWS more than its bound|src/worker.rs|            while self.holding.load(Ordering::SeqCst) >= low_water {|            while self.holding.load(Ordering::SeqCst) >= low_water + self.cfg().flush_max_rows as usize {|sending"
  "claim gate: no early write for a waiting claimer|src/worker.rs|let makes_room = self.room_wanted.load(Ordering::SeqCst)|let makes_room = false && self.room_wanted.load(Ordering::SeqCst)|sending"
  "unreachable: a refused connect spends an attempt|src/provider.rs|Err(e) if e.is_connect() => Attempt::Undelivered {|Err(e) if false && e.is_connect() => Attempt::Undelivered {|hostile"
  "unreachable: no pause of the pod|src/worker.rs|pacer.pause_until(Instant::now() + pause);|let _ = Instant::now() + pause;|hostile"
  "unreachable: no one-at-a-time probing|src/worker.rs|            if probe {|            if probe && false {|hostile"
  "threshold: own failures wait for the 1-s check|src/outcome.rs|        && (known_failed + new_failures > budget|        && (false|exit"
  "pacer: a share never lapses|src/pacer.rs|s.valid_until = Some(valid_until);|s.valid_until = Some(valid_until + Duration::from_secs(3600));|unit"
  "provider: redirects are followed|src/provider.rs|.redirect(reqwest::redirect::Policy::none())|.redirect(reqwest::redirect::Policy::limited(5))|hostile"
  "provider: an attempt has no total bound|src/provider.rs|            .timeout(connect + read)
|            .timeout(Duration::from_secs(3600))
|hostile"
  "pause: a running pod ignores the kill switch|src/worker.rs|match campaign::paused(self.w.store.pool(), self.w.store.campaign_id()).await {|match campaign::paused(self.w.store.pool(), \"another campaign\").await {|operator"
  "pause: run starts on a paused campaign|src/worker.rs|        if let Some(pause) = &settings.pause {|        if let Some(pause) = None::<&campaign::Pause> {|operator"
  "pause: serve exits on an automatic pause|src/worker.rs|                    StopReason::Paused => {|                    StopReason::Paused if report.exit_code != crate::report::exit::TOO_MANY_FAILURES => {|operator"
  "pause: no auto-pause over the threshold|src/worker.rs|                                campaign::BY_AUTO,|                                \"\",|operator"
  "pause: a later pause overwrites the first|src/campaign.rs|           SET paused_at    = coalesce(c.paused_at, excluded.paused_at),
               paused_by    = CASE WHEN c.paused_at IS NULL THEN excluded.paused_by ELSE c.paused_by END,
               pause_reason = CASE WHEN c.paused_at IS NULL THEN excluded.pause_reason ELSE c.pause_reason END,|           SET paused_at    = excluded.paused_at,
               paused_by    = excluded.paused_by,
               pause_reason = excluded.pause_reason,|operator"
  "import: a bad file is partly imported|src/import.rs|report.duplicates > 0) && !skipping {|report.duplicates > 0) && !skipping && false {|operator"
  "import: a concurrent insert fails the import|src/import.rs|if e.is_unique_violation() => {|if e.is_unique_violation() && false => {|operator"
  "import: a re-import overwrites rows|src/import.rs|         WHERE NOT EXISTS (SELECT 1 FROM campaign_targets t
                            WHERE t.campaign_id = \$1 AND t.member_id = i.member_id)
         ORDER BY i.member_id
    \"#;|         ORDER BY i.member_id
        ON CONFLICT (campaign_id, member_id) DO UPDATE SET email = excluded.email, state = 'pending'
    \"#;|operator"
  "retry-failed: puts opted-out rows back|src/store.rs|          AND state = 'failed'
          AND opted_out_at IS NULL|          AND state = 'failed'|operator"
  "retry-failed: touches rows that are not failed|src/store.rs|          AND state = 'failed'
          AND opted_out_at IS NULL|          AND state <> 'pending'
          AND opted_out_at IS NULL|operator"
  "retry-failed: --since ignored|src/store.rs|          AND (\$4::timestamptz IS NULL OR updated_at >= \$4)|          AND (\$4::timestamptz IS NULL OR \$4 IS NOT NULL)|operator"
  "heartbeat extends re-claimed rows|src/store.rs|               AND t.claim_id = r.claim_id
|               AND r.claim_id IS NOT NULL
|claim"
  "pre-send check misses a takeover|src/store.rs|                OR t.claim_id IS DISTINCT FROM r.claim_id
|                OR false
|claim"
  "release spends the attempt|src/store.rs|ELSE greatest(t.attempts - 1, 0) END|ELSE t.attempts END|sending"
  "counts: an opted-out failed row twice|src/store.rs|WHERE opted_out_at IS NOT NULL AND state NOT IN ('sent', 'failed'))|WHERE opted_out_at IS NOT NULL AND state <> 'sent')|claim"
  "settings: the template is ignored|src/worker.rs|            settings.template.into(),
            cancel.child_token(),
            false,|            Arc::from(self.store.campaign_id()),
            cancel.child_token(),
            false,|operator"
)

survived=0
printf '%-40s %s\n' "mutation" "tests that went red"
ran=0
for m in "${mutations[@]}"; do
  IFS='|' read -r name file old new <<<"$m"
  # MUTANTS_ONLY=regex runs only the mutations whose name matches (for working on one area).
  if [ -n "${MUTANTS_ONLY:-}" ] && ! grep -Eq "$MUTANTS_ONLY" <<<"$name"; then continue; fi
  ran=$((ran + 1))
  # Multi-line patterns: read the whole record again with python for exact replacement.
  python3 - "$file" "$m" <<'PY'
import sys
path, rec = sys.argv[1], sys.argv[2]
name, file, old, new = rec.split("|")[:4]
src = open(path).read()
if src.count(old) != 1:
    sys.exit(f"mutation {name!r}: pattern found {src.count(old)} times in {path}; update scripts/mutants-sql.sh")
open(path, "w").write(src.replace(old, new))
PY
  scope=$(python3 -c 'import sys; r = sys.argv[1].split("|"); print(r[4] if len(r) > 4 else "all")' "$m")
  case "$scope" in
    unit) tests=(--lib) ;;
    fleet) tests=(--lib --test it -- rate_share) ;;
    serve) tests=(--test it -- serve::) ;;
    operator) tests=(--test it -- operator::) ;;
    hostile) tests=(--test it -- hostile::) ;;
    exit) tests=(--test it -- exit_codes::) ;;
    claim) tests=(--test it -- claim::) ;;
    sending) tests=(--test it -- sending::) ;;
    *) tests=(--lib --test it) ;;
  esac
  out=$(cargo test --locked -q "${tests[@]}" 2>&1 || true)
  if grep -q "could not compile" <<<"$out"; then
    cp "$backup/$file" "$file"
    echo "mutation '$name' does not compile; fix scripts/mutants-sql.sh" >&2
    exit 1
  fi
  red=$(sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p; s/^    \([a-z_0-9]*::[a-z_0-9:]*\)$/\1/p' <<<"$out" | sort -u | tr '\n' ' ')
  cp "$backup/$file" "$file"
  if [ -z "$red" ]; then
    printf '%-40s %s\n' "$name" "NONE — the mutant survived"
    survived=$((survived + 1))
  else
    printf '%-40s %s\n' "$name" "$red"
  fi
done
echo "mutants: $ran run, $((ran - survived)) killed, $survived survived"
[ "$survived" = 0 ]
