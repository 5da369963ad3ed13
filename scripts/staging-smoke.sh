#!/usr/bin/env bash
# Staging smoke test, on a real cluster (NOT run by this repository's CI, which has none): what
# only a cluster shows — images pull and start, the NetworkPolicy lets the pods reach the
# database and the provider, the Indexed Job's podFailurePolicy retries a killed pod, the grace
# period covers a drain — proved by counting deliveries.
#
# It deploys the fake provider (the Dockerfile's `fake-provider` stage) in NAMESPACE, imports
# TARGETS members into a fresh campaign through the operator pod, runs the Indexed Job overlay
# against the fake (its own suffixed copy: the staging install is not touched), and once a third
# is delivered SIGKILLs one worker pod (`--grace-period=0 --force`) and SIGTERMs another. When the
# Job completes it checks, from the fake's own counts and `status --json`: nobody delivered
# twice, every member sent or failed (the standard fault profile rejects 0.1 %), nothing left.
#
# Needs: kubectl (context = the staging cluster), python3 with PyYAML, the base installed in NAMESPACE
# (Secret `campaign-sender` with DATABASE_URL and OPERATOR_DATABASE_URL, migrated database,
# docs/OPERATIONS.md "Deploy order"), and both images pushed:
#   NAMESPACE=campaign-sender-staging IMAGE=REGISTRY/campaign-sender:TAG \
#   FAKE_IMAGE=REGISTRY/fake-provider:TAG scripts/staging-smoke.sh
# Optional: TARGETS (20000), TIMEOUT_S (900), KEEP=1 keeps what it created.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${NAMESPACE:?set NAMESPACE}" "${IMAGE:?set IMAGE (campaign-sender)}" "${FAKE_IMAGE:?set FAKE_IMAGE}"
targets=${TARGETS:-20000}
timeout_s=${TIMEOUT_S:-900}
run=smoke-$(date +%s)
campaign=$run
k=(kubectl -n "$NAMESPACE")
work=$(mktemp -d)

cleanup() {
  kill "${pf:-0}" 2>/dev/null || true
  if [ "${KEEP:-0}" != 1 ]; then
    "${k[@]}" delete all,configmap,networkpolicy,serviceaccount -l "campaign-sender/smoke=$run" \
      --ignore-not-found --wait=false >/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { echo "[$(date +%H:%M:%S)] $*"; }

# An operator command in the operator pod (docs/OPERATIONS.md, "Loading a campaign").
operator() {
  "${k[@]}" run "op-$run-$RANDOM" --rm -i --restart=Never --quiet --image="$IMAGE" \
    --labels="campaign-sender/smoke=$run" \
    --override-type=strategic --overrides="$(cat manifests/operator/pod-overrides.json)" -- "$@"
}

say "fake provider ($FAKE_IMAGE), 500/s with the standard faults"
"${k[@]}" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fake-provider-$run
  labels: {campaign-sender/smoke: "$run"}
spec:
  replicas: 1
  selector: {matchLabels: {app: fake-provider, campaign-sender/smoke: "$run"}}
  template:
    metadata:
      labels: {app: fake-provider, campaign-sender/smoke: "$run"}
    spec:
      securityContext: {runAsNonRoot: true, runAsUser: 10001, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: fake-provider
          image: $FAKE_IMAGE
          args: ["--rate", "500", "--burst", "20", "--faults", "standard", "--latency-ms", "80", "--jitter-ms", "40"]
          ports: [{containerPort: 8080}]
          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata:
  name: fake-provider-$run
  labels: {campaign-sender/smoke: "$run"}
spec:
  selector: {app: fake-provider, campaign-sender/smoke: "$run"}
  ports: [{port: 8080, targetPort: 8080}]
---
# The base policy lets the workers reach the provider on 443 outside the cluster only.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: fake-provider-$run
  labels: {campaign-sender/smoke: "$run"}
spec:
  podSelector: {matchLabels: {app.kubernetes.io/name: campaign-sender}}
  policyTypes: [Egress]
  egress:
    - to: [{podSelector: {matchLabels: {app: fake-provider, campaign-sender/smoke: "$run"}}}]
      ports: [{port: 8080, protocol: TCP}]
YAML
"${k[@]}" rollout status "deployment/fake-provider-$run" --timeout=180s

say "importing $targets members into campaign $campaign"
{ echo "member_id,email"; seq 1 "$targets" | awk '{print $1 ",smoke" $1 "@example.com"}'; } \
  | operator import --campaign "$campaign" -

say "the Indexed Job against the fake"
mkdir -p "$work/overlay"
repo=$(realpath --relative-to="$work/overlay" manifests)
# IMAGE as kustomize's images: wants it: a name, and a digest or a tag (a registry port is not one).
if [[ $IMAGE == *@* ]]; then image_name=${IMAGE%@*}; image_ref="    digest: ${IMAGE#*@}"
elif [[ ${IMAGE##*/} == *:* ]]; then image_name=${IMAGE%:*}; image_ref="    newTag: ${IMAGE##*:}"
else image_name=$IMAGE; image_ref=""; fi
cat >"$work/overlay/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $NAMESPACE
nameSuffix: -$run
labels:
  - pairs: {campaign-sender/smoke: "$run"}
    includeSelectors: false
resources: [$repo/overlays/indexed-job]
images:
  - name: campaign-sender
    newName: $image_name
$image_ref
configMapGenerator:
  - name: campaign-sender
    behavior: merge
    literals:
      - CAMPAIGN_ID=$campaign
      - MAIL_URL=http://fake-provider-$run.$NAMESPACE.svc:8080/v1/send
      - RATE_LIMIT_KEY=$run
YAML
kubectl kustomize "$work/overlay" >"$work/rendered.yaml"
# The migrate Job of the copy is redundant (the database is migrated) and harmless; skip it.
python3 - "$work/rendered.yaml" >"$work/apply.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
keep = [d for d in docs if not (d["kind"] == "Job" and "migrate" in d["metadata"]["name"])]
print(yaml.safe_dump_all(keep))
PY
"${k[@]}" apply -f "$work/apply.yaml" >/dev/null
job=campaign-sender-$run

"${k[@]}" port-forward "service/fake-provider-$run" 18080:8080 >/dev/null 2>&1 &
pf=$!
sleep 3
fake_stat() { python3 -c "import json,sys,urllib.request; print(json.load(urllib.request.urlopen('http://127.0.0.1:18080/stats'))['$1'])"; }

say "waiting for a third to be delivered"
deadline=$((SECONDS + timeout_s))
while [ "$(fake_stat delivered)" -lt $((targets / 3)) ]; do
  [ $SECONDS -lt $deadline ] || { echo "FAILED: a third not delivered within ${timeout_s}s" >&2; exit 1; }
  sleep 2
done
mapfile -t pods < <("${k[@]}" get pods -l "batch.kubernetes.io/job-name=$job" \
  --field-selector=status.phase=Running -o name)
[ "${#pods[@]}" -ge 2 ] || { echo "FAILED: fewer than 2 running worker pods: ${pods[*]}" >&2; exit 1; }
say "SIGKILL ${pods[0]}, SIGTERM ${pods[1]}"
"${k[@]}" delete "${pods[0]}" --grace-period=0 --force >/dev/null 2>&1
"${k[@]}" delete "${pods[1]}" --wait=false >/dev/null

say "waiting for the Job to complete"
"${k[@]}" wait --for=condition=complete "job/$job" --timeout="${timeout_s}s"

operator status --campaign "$campaign" --json >"$work/status.json"
python3 - "$targets" "$work/status.json" <<'PY'
import json, sys, urllib.request
targets = int(sys.argv[1])
stats = json.load(urllib.request.urlopen("http://127.0.0.1:18080/stats"))
status = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])["counts"]
checks = [
    ("nobody delivered twice", stats["members_delivered_more_than_once"] == 0),
    ("every member sent or failed", status["sent"] + status["failed"] == targets),
    ("nothing pending or sending", status["pending"] == 0 and status["sending"] == 0),
    ("every row recorded sent was delivered", status["sent"] == stats["delivered"]),
    ("no 429 from the provider", stats["throttled_429"] == 0),
]
print(f"delivered {stats['delivered']}, suppressed repeats {stats['duplicates_suppressed']}, "
      f"422 {stats['rejected_422']}, 429 {stats['throttled_429']}; campaign sent {status['sent']}, "
      f"failed {status['failed']}")
bad = [what for what, ok in checks if not ok]
for what, ok in checks:
    print(("ok      " if ok else "FAILED  ") + what)
sys.exit(1 if bad else 0)
PY
say "passed"
