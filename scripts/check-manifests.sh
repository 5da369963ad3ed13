#!/usr/bin/env bash
# Validates manifests/ without a cluster (CI runs it):
#  1. every overlay and monitoring/ renders with `kubectl kustomize`;
#  2. the built-in kinds validate strictly against Kubernetes 1.30 and 1.33 (`kubernetes-validate --strict`
#     rejects misspelt fields; the example Secret is validated too);
#     Each mode is also rendered with every component of manifests/components (the status
#     page, the database CA, GKE DNS, the metadata server, the Cloud SQL Auth Proxy, the nightly
#     priority, SES with web identity),
#     validated, and checked to mount the CA in every pod, to mount STS's token beside it in the
#     sending pods (MAIL_API_KEY optional there), to open the egress each component is for, and
#     to give the sending Job a never-preempting priority class;
#  3. KEDA and Prometheus Operator objects validate against their upstream CRDs
#     (../shared/crds, unknown fields rejected: scripts/validate-crds.py);
#  4. the PrometheusRule expressions parse (`promtool check rules`) and each alert fires when it
#     should and stays silent when it should not (`promtool test rules`,
#     monitoring/tests/alerts.test.yaml).
# The contracts between manifests and code (variables, exit codes, ports, metric names) are
# tests in tests/it/manifests.rs. Installs kubernetes-validate (PyPI) and promtool (Debian's
# prometheus package) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
crds=${CRD_DIR:-../shared/crds}
# The oldest and the newest Kubernetes minor our users' GKE channels run.
k8s_versions=(1.30.0 1.33.0)

command -v kubectl >/dev/null || { echo "check-manifests: kubectl is needed (for kustomize)" >&2; exit 1; }
command -v kubernetes-validate >/dev/null || pip install -q kubernetes-validate
python3 -c 'import jsonschema, yaml' 2>/dev/null || pip install -q jsonschema pyyaml
if ! command -v promtool >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  else
    echo "check-manifests: promtool missing; install the 'prometheus' package" >&2; exit 1
  fi
fi
[ -d "$crds" ] || { echo "check-manifests: no CRDs at $crds (set CRD_DIR)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for dir in overlays/migrate overlays/indexed-job overlays/cronjob overlays/cadence-nightly-window overlays/cadence-every-6h overlays/events \
  overlays/deployment monitoring; do
  out="$tmp/$(echo "$dir" | tr / -).yaml"
  echo "== $dir"
  kubectl kustomize "manifests/$dir" >"$out"
  # Built-in kinds; CRD kinds are only warned about here and checked below.
  for v in "${k8s_versions[@]}"; do
    kubernetes-validate -k "$v" --strict --quiet "$out" || status=1
  done
  python3 scripts/validate-crds.py "$crds" <"$out" || status=1
done
# The components (manifests/components), all together on each mode, as an overlay of a user's
# would use them: they render, validate, and do what they say.
mkdir "$tmp/with-components"
rel=$(realpath --relative-to="$tmp/with-components" manifests)
for mode in indexed-job cronjob cadence-nightly-window cadence-every-6h deployment events; do
  echo "== overlays/$mode + every component"
  cat >"$tmp/with-components/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$rel/overlays/$mode]
components: [$rel/components/web, $rel/components/db-ca, $rel/components/gke-dns, $rel/components/gke-metadata, $rel/components/cloudsql-proxy, $rel/components/nightly-priority, $rel/components/ses]
YAML
  out="$tmp/components-$mode.yaml"
  kubectl kustomize "$tmp/with-components" >"$out"
  for v in "${k8s_versions[@]}"; do
    kubernetes-validate -k "$v" --strict --quiet "$out" || status=1
  done
  python3 - "$out" <<'PY' || status=1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def pod(d):
    spec = d["spec"]
    if d["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec["template"]["spec"]
bad = []
for d in docs:
    if d["kind"] in ("Job", "CronJob", "Deployment"):
        p = pod(d)
        mounts = p["containers"][0].get("volumeMounts", [])
        vols = {v["name"]: v for v in p.get("volumes", [])}
        ok = any(m["mountPath"] == "/etc/campaign-sender" and m["name"] in vols
                 and vols[m["name"]]["secret"]["secretName"] == "campaign-sender-db-ca" for m in mounts)
        if not ok:
            bad.append(f"{d['kind']}/{d['metadata']['name']} does not mount the database CA")
        # The sending pods (components/ses): STS's token beside the CA, MAIL_API_KEY optional.
        if d["metadata"]["name"] == "campaign-sender":
            c = p["containers"][0]
            token = [v for v in p.get("volumes", []) if "projected" in v
                     and any(s.get("serviceAccountToken", {}).get("audience") == "sts.amazonaws.com"
                             for s in v["projected"]["sources"])]
            if not token or not any(m["name"] == token[0]["name"] and m["mountPath"] == "/var/run/secrets/aws"
                                    for m in mounts):
                bad.append(f"{d['kind']}/campaign-sender: no STS token at /var/run/secrets/aws")
            key = [e for e in c.get("env", []) if e["name"] == "MAIL_API_KEY"]
            if key and not key[0]["valueFrom"]["secretKeyRef"].get("optional"):
                bad.append(f"{d['kind']}/campaign-sender: MAIL_API_KEY is not optional")
cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("campaign-sender"))
if cm["data"].get("MAIL_PROVIDER") != "ses" or cm["data"].get("MAIL_URL") != "":
    bad.append("components/ses did not set MAIL_PROVIDER=ses and an empty MAIL_URL over the base's")
allowed = set()
for d in docs:
    if d["kind"] == "NetworkPolicy":
        for rule in d["spec"].get("egress", []):
            for to in rule.get("to", []):
                for port in rule.get("ports", []):
                    if "ipBlock" in to:
                        allowed.add((to["ipBlock"]["cidr"], port["port"]))
for need in [("169.254.169.254/32", 53), ("169.254.20.10/32", 53), ("169.254.169.254/32", 80),
             ("169.254.169.252/32", 988)]:
    if need not in allowed:
        bad.append(f"no egress to {need[0]} port {need[1]}")
if not any(port == 3307 for _, port in allowed):
    bad.append("no egress to the Cloud SQL Auth Proxy's port 3307")
never_preempting = {d["metadata"]["name"] for d in docs if d["kind"] == "PriorityClass"
                    and d.get("preemptionPolicy") == "Never"}
for d in docs:
    if d["kind"] in ("Job", "CronJob") and d["metadata"]["name"].startswith("campaign-sender") \
            and "migrate" not in d["metadata"]["name"]:
        if pod(d).get("priorityClassName") not in never_preempting:
            bad.append(f"{d['kind']}/{d['metadata']['name']} has no never-preempting priority class")
if bad:
    sys.exit("\n".join(bad))
PY
done
echo "== every workload runs the release's image (components/release: a tag or a digest)"
python3 - "$tmp"/overlays-*.yaml "$tmp"/components-*.yaml <<'PY' || status=1
import sys, yaml
bad = []
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        if not d or d["kind"] not in ("Job", "CronJob", "Deployment"):
            continue
        spec = d["spec"]["jobTemplate"]["spec"] if d["kind"] == "CronJob" else d["spec"]
        for c in spec["template"]["spec"].get("containers", []) + spec["template"]["spec"].get("initContainers", []):
            image = c["image"]
            if image.startswith("campaign-sender") and "@sha256:" not in image and ":" not in image:
                bad.append(f"{path}: {d['kind']} {d['metadata']['name']}: {image} has no tag or digest")
            if image.endswith(":latest"):
                bad.append(f"{path}: {d['kind']} {d['metadata']['name']}: {image}")
if bad:
    sys.exit("\n".join(bad))
print("every workload: campaign-sender with a tag or digest")
PY
echo "== the backlog query names the ConfigMap's campaign"
python3 - "$tmp/overlays-deployment.yaml" <<'PY' || status=1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
campaign = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["CAMPAIGN_ID"]
query = next(d for d in docs if d["kind"] == "ScaledObject")["spec"]["triggers"][0]["metadata"]["query"]
literals = query.split("'")[1::2]
if literals[:1] != [campaign] or campaign in literals[1:]:
    sys.exit(f"the KEDA query counts {literals[:1]}, the ConfigMap's CAMPAIGN_ID is {campaign!r}")
print(f"KEDA counts the backlog of {campaign!r}")
PY
for overrides in pod-overrides archive-overrides vendor-overrides; do
echo "== operator/$overrides.json (as \`kubectl run … --override-type=strategic\` completes it)"
python3 - "$tmp/operator-pod.json" "manifests/operator/$overrides.json" <<'PY'
import json, sys
pod = json.load(open(sys.argv[2]))
pod["kind"] = "Pod"
pod["metadata"]["name"] = "campaign-sender-operator"
c = pod["spec"]["containers"][0]
c["image"] = "campaign-sender:0.1.0"
c["args"] = ["import", "--campaign", "spring-sale", "-"]
json.dump(pod, open(sys.argv[1], "w"))
PY
for v in "${k8s_versions[@]}"; do
  kubernetes-validate -k "$v" --strict --quiet "$tmp/operator-pod.json" || status=1
done
done
for example in base/secret.yaml.example overlays/events/secret.yaml.example components/web/secret.yaml.example; do
  echo "== $example"
  for v in "${k8s_versions[@]}"; do
    kubernetes-validate -k "$v" --strict --quiet "manifests/$example" || status=1
  done
done

echo "== promtool check rules"
python3 - "$tmp/rules.yaml" <<'PY'
import sys, yaml
rule = yaml.safe_load(open("manifests/monitoring/prometheusrule.yaml"))
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(sys.argv[1], "w"))
PY
promtool check rules "$tmp/rules.yaml" || status=1

echo "== promtool test rules"
# The alerts' firing and silence (monitoring/tests/alerts.test.yaml), against the same groups
# without their annotations (the tests are about when an alert fires, not its wording).
mkdir "$tmp/test"
cp manifests/monitoring/tests/alerts.test.yaml "$tmp/test/"
python3 - "$tmp/test/rules.yaml" <<'PY'
import sys, yaml
rule = yaml.safe_load(open("manifests/monitoring/prometheusrule.yaml"))
for group in rule["spec"]["groups"]:
    for r in group["rules"]:
        r.pop("annotations", None)
yaml.safe_dump({"groups": rule["spec"]["groups"]}, open(sys.argv[1], "w"))
PY
(cd "$tmp/test" && promtool test rules alerts.test.yaml) || status=1
[ "$status" = 0 ] && echo "check-manifests: all valid" || echo "check-manifests: FAILED" >&2
exit "$status"
