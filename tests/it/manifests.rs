//! Contracts between the Kubernetes manifests (`manifests/`) and the code: what the YAML says
//! about variables, exit codes, ports, subcommands, deadlines and metric names must be what the
//! binary does. (Schema validation of the YAML itself is `scripts/check-manifests.sh`.)

use std::collections::BTreeSet;
use std::path::Path;

use campaign_sender::config::{known_variables, FromEnv as _};
use campaign_sender::exit;
use campaign_sender::metrics;

use crate::helpers::ONE_CLICK;
use campaign_sender::rate::LEAVE_TIMEOUT;
use campaign_sender::worker::WRITES_AFTER_REQUESTS;
use serde::Deserialize as _;
use serde_yaml::Value;

pub(crate) fn load(path: &str) -> Value {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub(crate) fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &v[i],
        Err(_) => &v[k],
    })
}

pub(crate) fn int(v: &Value, path: &str) -> i64 {
    at(v, path)
        .as_i64()
        .unwrap_or_else(|| panic!("{path} is not an integer"))
}

/// A container's `args`.
pub(crate) fn args_of(c: &Value) -> Vec<String> {
    c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// A kustomize `envs:` file (`KEY=value` lines, `#` comments) as the ConfigMap it generates.
fn env_file(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut data = serde_yaml::Mapping::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{path}: {line:?} is not KEY=value"));
        data.insert(Value::from(k), Value::from(v));
    }
    let mut cm = serde_yaml::Mapping::new();
    cm.insert(Value::from("data"), Value::Mapping(data));
    Value::Mapping(cm)
}

fn configmap() -> Value {
    env_file("manifests/base/config.env")
}

fn setting(key: &str) -> String {
    at(&configmap(), &format!("data.{key}"))
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap has no {key}"))
        .to_string()
}

/// (file, path to the pod spec) of every worker pod template.
const WORKERS: &[(&str, &str)] = &[
    (
        "manifests/overlays/indexed-job/job.yaml",
        "spec.template.spec",
    ),
    (
        "manifests/overlays/cronjob/cronjob.yaml",
        "spec.jobTemplate.spec.template.spec",
    ),
    (
        "manifests/overlays/deployment/deployment.yaml",
        "spec.template.spec",
    ),
];

#[test]
fn every_configmap_key_is_a_variable_the_binary_reads() {
    let known: BTreeSet<String> = known_variables().into_iter().collect();
    let cm = configmap();
    let keys: Vec<&str> = at(&cm, "data")
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(keys.len() > 20, "{keys:?}");
    for k in keys {
        assert!(
            known.contains(k),
            "ConfigMap sets {k}, which the binary never reads"
        );
    }
    // And the ConfigMap's values are valid: the binary accepts them as they are.
    let mut vars: Vec<(String, String)> = at(&cm, "data")
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_string(),
                v.as_str().unwrap().to_string(),
            )
        })
        .collect();
    vars.push(("DATABASE_URL".into(), "postgres://u@h/db".into()));
    // The Secret's part of our one-click links (the ConfigMap holds the public base URL).
    vars.push(("UNSUBSCRIBE_SECRET".into(), ONE_CLICK[1].1.into()));
    use campaign_sender::config::{DbConfig, FromEnv, RunConfig};
    let run = RunConfig::from_vars(vars.clone()).expect("ConfigMap is valid");
    run.provider()
        .expect("ConfigMap's provider settings are valid");
    DbConfig::from_vars(vars).expect("ConfigMap is valid");
}

#[test]
fn the_pod_failure_policy_fails_the_job_on_exactly_the_codes_a_person_must_act_on() {
    let job = load("manifests/overlays/indexed-job/job.yaml");
    let rules = at(&job, "spec.podFailurePolicy.rules")
        .as_sequence()
        .unwrap();
    let fail: BTreeSet<i64> = rules
        .iter()
        .filter(|r| r["action"] == "FailJob")
        .flat_map(|r| r["onExitCodes"]["values"].as_sequence().unwrap().clone())
        .map(|v| v.as_i64().unwrap())
        .collect();
    // Every code is decided here (the match has no wildcard): a person must act, or a retry of
    // the index continues the campaign.
    for code in exit::Exit::ALL {
        let person_must_act = match code {
            exit::Exit::TooManyFailures
            | exit::Exit::Paused
            | exit::Exit::AccountRefused
            | exit::Exit::Usage
            | exit::Exit::Config => true,
            exit::Exit::Done
            | exit::Exit::Incomplete
            | exit::Exit::DataError
            | exit::Exit::NoInput
            | exit::Exit::DatabaseUnavailable
            | exit::Exit::NoPermission => false,
        };
        assert_eq!(fail.contains(&(code as i64)), person_must_act, "{code:?}");
    }
    let ours: BTreeSet<i64> = exit::Exit::ALL.iter().map(|c| *c as i64).collect();
    assert!(
        fail.is_subset(&ours),
        "{fail:?}: a code the binary never exits with"
    );
    let container = at(
        &job,
        "spec.podFailurePolicy.rules.0.onExitCodes.containerName",
    );
    assert_eq!(container, at(&job, "spec.template.spec.containers.0.name"));
    assert_eq!(
        at(&job, "spec.template.spec.restartPolicy"),
        "Never",
        "podFailurePolicy needs restartPolicy Never"
    );
}

#[test]
fn the_cronjob_runs_exactly_the_indexed_job_at_two_in_tokyo() {
    let job = load("manifests/overlays/indexed-job/job.yaml");
    let cron = load("manifests/overlays/cronjob/cronjob.yaml");
    assert_eq!(at(&cron, "spec.jobTemplate.spec"), at(&job, "spec"));
    assert_eq!(at(&cron, "spec.schedule"), "0 2 * * *");
    assert_eq!(at(&cron, "spec.timeZone"), "Asia/Tokyo");
    assert_eq!(at(&cron, "spec.concurrencyPolicy"), "Forbid");
    assert_eq!(
        (int(&job, "spec.completions"), int(&job, "spec.parallelism")),
        (4, 4)
    );
    assert_eq!(at(&job, "spec.completionMode"), "Indexed");
}

#[test]
fn deadlines_and_grace_periods_nest_the_way_the_app_expects() {
    let job = load("manifests/overlays/indexed-job/job.yaml");
    let deadline_s: i64 = setting("DEADLINE_S").parse().unwrap();
    let request_s = (setting("CONNECT_TIMEOUT_MS").parse::<i64>().unwrap()
        + setting("READ_TIMEOUT_MS").parse::<i64>().unwrap())
        / 1000;
    for (file, spec) in WORKERS {
        let v = load(file);
        let grace = int(&v, &format!("{spec}.terminationGracePeriodSeconds"));
        // In-flight requests end within the request timeout; results are written for at most
        // WRITES_AFTER_REQUESTS more, then the pod leaves the fleet (LEAVE_TIMEOUT); 2 s to spare.
        let shutdown_s = request_s + (WRITES_AFTER_REQUESTS + LEAVE_TIMEOUT).as_secs() as i64 + 2;
        assert!(
            grace >= shutdown_s,
            "{file}: grace {grace} s < {shutdown_s} s"
        );
    }
    let grace = int(&job, "spec.template.spec.terminationGracePeriodSeconds");
    // The app stops itself at DEADLINE_S; the Job's deadline is the last resort above it.
    assert!(int(&job, "spec.activeDeadlineSeconds") >= deadline_s + grace);
}

/// Each cadence overlay keeps a Job inside its period: the app stops at DEADLINE_S (from the
/// Job's first pod), the Job's deadline is above that plus the grace period, and both end before
/// the next fire, so that `concurrencyPolicy: Forbid` skips a fire only for a Job that started
/// late. A Job's pods share one budget only if they are told their Job's name.
#[test]
fn every_cadence_ends_a_job_before_the_next_fire_and_pods_know_their_job() {
    let grace = int(
        &load("manifests/overlays/cronjob/cronjob.yaml"),
        "spec.jobTemplate.spec.template.spec.terminationGracePeriodSeconds",
    );
    // (overlay, its period in seconds, the schedule it must have)
    for (dir, period, schedule) in [
        ("cadence-nightly-window", 86_400, "0 2 * * *"),
        ("cadence-every-6h", 21_600, "0 2-23/6 * * *"),
    ] {
        let cron = load(&format!("manifests/overlays/{dir}/cronjob.yaml"));
        let cm = env_file(&format!("manifests/overlays/{dir}/config.env"));
        let deadline_s: i64 = at(&cm, "data.DEADLINE_S")
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let active = int(&cron, "spec.jobTemplate.spec.activeDeadlineSeconds");
        let starting = int(&cron, "spec.startingDeadlineSeconds");
        assert_eq!(at(&cron, "spec.schedule"), schedule, "{dir}");
        assert_eq!(at(&cron, "spec.timeZone"), "Asia/Tokyo", "{dir}");
        assert_eq!(at(&cron, "spec.concurrencyPolicy"), "Forbid", "{dir}");
        assert!(
            active >= deadline_s + grace,
            "{dir}: {active} < {deadline_s} + {grace}"
        );
        assert!(active < period, "{dir}: a Job outlives its period");
        assert!(
            starting < period,
            "{dir}: a late start reaches the next fire"
        );
    }
    for (file, spec) in &WORKERS[..2] {
        let pod = load(file);
        let env = at(&pod, &format!("{spec}.containers.0.env"));
        for (var, label) in [
            ("JOB_UID", "batch.kubernetes.io/controller-uid"),
            ("JOB_NAME", "batch.kubernetes.io/job-name"),
        ] {
            let e = env
                .as_sequence()
                .unwrap()
                .iter()
                .find(|e| e["name"] == var)
                .unwrap_or_else(|| panic!("{file}: no {var}"));
            assert_eq!(
                at(e, "valueFrom.fieldRef.fieldPath"),
                format!("metadata.labels['{label}']").as_str(),
                "{file}"
            );
        }
    }
}

#[test]
fn pods_run_real_subcommands_and_expose_the_metrics_port_the_app_listens_on() {
    use clap::Parser;
    let port: u16 = setting("METRICS_ADDR")
        .parse::<std::net::SocketAddr>()
        .unwrap()
        .port();
    let mut subcommands = Vec::new();
    for (file, spec) in WORKERS {
        let v = load(file);
        let c = at(&v, &format!("{spec}.containers.0"));
        let args = args_of(c);
        campaign_sender::cli::Cli::try_parse_from(
            std::iter::once("campaign-sender".to_string()).chain(args.clone()),
        )
        .unwrap_or_else(|e| panic!("{file}: {args:?}: {e}"));
        subcommands.push(args.join(" "));
        assert_eq!(int(c, "ports.0.containerPort"), port as i64, "{file}");
        assert_eq!(c["ports"][0]["name"], "metrics", "{file}");
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{file} {probe}");
        }
        // Memory limit is set (the measured RSS is the reason it is small).
        assert!(
            c["resources"]["limits"]["memory"].as_str().is_some(),
            "{file}"
        );
        assert_eq!(
            c["securityContext"]["readOnlyRootFilesystem"], true,
            "{file}"
        );
    }
    assert_eq!(subcommands, ["run", "run", "serve"]);
    // Where Prometheus scrapes: manifests_servers::prometheus_scrapes_every_pod_that_serves_metrics.
    let np = load("manifests/base/networkpolicy.yaml");
    assert_eq!(int(&np, "spec.ingress.0.ports.0.port"), port as i64);
    let migrate = load("manifests/base/migrate-job.yaml");
    assert_eq!(
        at(&migrate, "spec.template.spec.containers.0.args.0"),
        "migrate"
    );
}

#[test]
fn alerts_and_the_dashboard_use_only_metrics_the_app_records() {
    let known: BTreeSet<&str> = metrics::ALL.iter().copied().collect();
    let rules = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/monitoring/prometheusrule.yaml"),
    )
    .unwrap();
    let dashboard = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/monitoring/dashboard.json"),
    )
    .unwrap();
    let mut used = BTreeSet::new();
    for text in [&rules, &dashboard] {
        let mut rest = text.as_str();
        while let Some(i) = rest.find("campaign_sender_") {
            let name: String = rest[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[i + name.len()..];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name)
                .to_string();
            used.insert(base);
        }
    }
    assert!(used.len() >= 10, "{used:?}");
    for name in &used {
        assert!(
            known.contains(name.as_str()),
            "{name} is used by an alert or the dashboard but never recorded"
        );
    }
    // What the KEDA backlog query counts: tests/it/keda.rs, on PostgreSQL.
}

/// The labels of a pod template at `path` in `file`.
fn pod_labels(file: &str, path: &str) -> BTreeSet<(String, String)> {
    let doc = load(file);
    at(&doc, path)
        .as_mapping()
        .unwrap_or_else(|| panic!("{file}: no labels at {path}"))
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap().to_string(),
                v.as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn the_disruption_budget_holds_serve_pods_and_never_job_pods() {
    let pdb = load("manifests/overlays/deployment/pdb.yaml");
    let selects = pod_labels(
        "manifests/overlays/deployment/pdb.yaml",
        "spec.selector.matchLabels",
    );
    assert!(
        at(&pdb, "spec.selector.matchExpressions").is_null(),
        "the test reads matchLabels only"
    );
    let serve = pod_labels(
        "manifests/overlays/deployment/deployment.yaml",
        "spec.template.metadata.labels",
    );
    assert!(selects.is_subset(&serve), "the PDB misses serve pods");
    for (file, path) in [
        (
            "manifests/overlays/indexed-job/job.yaml",
            "spec.template.metadata.labels",
        ),
        (
            "manifests/overlays/cronjob/cronjob.yaml",
            "spec.jobTemplate.spec.template.metadata.labels",
        ),
    ] {
        assert!(
            !selects.is_subset(&pod_labels(file, path)),
            "the PDB selects the Job pods of {file}"
        );
    }
}

/// Every file `kubectl apply -f DIR` would read (it takes .yaml, .yml and .json).
pub(crate) fn applied_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            applied_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
}

#[test]
fn no_manifest_kubectl_would_apply_holds_a_secret() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let mut files = Vec::new();
    applied_files(&root, &mut files);
    assert!(files.len() > 10, "{files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.lines().any(|l| l.trim() == "kind: Secret"),
            "{}: `kubectl apply -f` would create this Secret with its example values",
            file.display()
        );
    }
    // The example is still where the docs say, with the shape the pods read.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base/secret.yaml.example");
    let text = std::fs::read_to_string(example).unwrap();
    assert!(text.contains("kind: Secret") && text.contains("DATABASE_URL"));
}

#[test]
fn every_worker_spreads_over_zones_and_nodes_selecting_its_own_pods() {
    for (file, spec) in WORKERS {
        let labels_path = format!("{}.metadata.labels", spec.strip_suffix(".spec").unwrap());
        let own = pod_labels(file, &labels_path);
        let doc = load(file);
        let spread = at(&doc, &format!("{spec}.topologySpreadConstraints"))
            .as_sequence()
            .unwrap_or_else(|| panic!("{file}: no topologySpreadConstraints"));
        let keys: BTreeSet<&str> = spread
            .iter()
            .map(|c| c["topologyKey"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from(["topology.kubernetes.io/zone", "kubernetes.io/hostname"]),
            "{file}"
        );
        for (i, c) in spread.iter().enumerate() {
            let selects = pod_labels(
                file,
                &format!("{spec}.topologySpreadConstraints.{i}.labelSelector.matchLabels"),
            );
            assert!(
                selects.is_subset(&own),
                "{file}: constraint {i} selects other pods"
            );
            // Soft: a spread the cluster cannot give must not hold a run back.
            assert_eq!(c["whenUnsatisfiable"], "ScheduleAnyway", "{file}");
        }
    }
}

/// The operator commands run in a pod of their own (`kubectl run … --overrides` of
/// manifests/operator/pod-overrides.json): as the operator role, never with the workers' or the
/// schema owner's URL, and under the restricted Pod Security profile.
#[test]
fn operator_pods_log_in_as_the_operator_role_and_run_restricted() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/operator/pod-overrides.json");
    let pod: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let spec = &pod["spec"];
    let c = &spec["containers"][0];
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
    assert!(
        c["envFrom"].is_null(),
        "the whole Secret would reach the pod"
    );
    let env = c["env"].as_array().unwrap();
    assert_eq!(env.len(), 1, "{env:?}");
    assert_eq!(env[0]["name"], "DATABASE_URL");
    assert_eq!(
        env[0]["valueFrom"]["secretKeyRef"]["key"],
        "OPERATOR_DATABASE_URL"
    );
    // Restricted: non-root, no privilege escalation, no capabilities, the runtime's seccomp.
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert_eq!(spec["automountServiceAccountToken"], false);
    // The database's CA where components/db-ca puts it for every other pod (a URL with
    // `sslrootcert=` names that path); optional, so a cluster without the Secret still starts it.
    let ca = load("manifests/components/db-ca/pod.yaml");
    let (volume, mount) = (at(&ca, "0.value"), at(&ca, "1.value"));
    let ours = &spec["volumes"][0];
    assert_eq!(ours["secret"]["optional"], true);
    for field in ["secretName", "items"] {
        let theirs = serde_json::to_value(&volume["secret"][field]).unwrap();
        assert_eq!(ours["secret"][field], theirs, "{field}");
    }
    let our_mount = &c["volumeMounts"][0];
    assert_eq!(our_mount["name"], ours["name"]);
    assert_eq!(
        our_mount["mountPath"],
        serde_json::to_value(&mount["mountPath"]).unwrap()
    );
    assert_eq!(our_mount["readOnly"], true);
    // The key is in the Secret's documented shape.
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base/secret.yaml.example"),
    )
    .unwrap();
    assert!(example.contains("OPERATOR_DATABASE_URL: "), "{example}");
}

/// A Job's template is immutable: both Jobs tell Argo CD and Flux to recreate them on a new
/// release (docs/OPERATIONS.md "A new release"), and the migrate Job runs before each Argo sync.
#[test]
fn both_jobs_are_recreated_by_gitops_tools_on_a_new_release() {
    for file in [
        "manifests/base/migrate-job.yaml",
        "manifests/overlays/indexed-job/job.yaml",
    ] {
        let job = load(file);
        let a = at(&job, "metadata.annotations");
        assert_eq!(a["kustomize.toolkit.fluxcd.io/force"], "enabled", "{file}");
        let argo = a["argocd.argoproj.io/sync-options"].as_str().unwrap_or("");
        assert!(
            argo.contains("Force=true") && argo.contains("Replace=true"),
            "{file}"
        );
    }
    let migrate = load("manifests/base/migrate-job.yaml");
    assert_eq!(
        at(&migrate, "metadata.annotations")["argocd.argoproj.io/hook"],
        "PreSync"
    );
}

/// The image's dependency stage parses the whole workspace from its manifests alone: every
/// target path a workspace manifest names must get a stub there, or `docker build` fails.
#[test]
fn the_dockerfile_stubs_every_target_of_the_workspace() {
    let dockerfile = std::fs::read_to_string("Dockerfile").unwrap();
    for manifest in [
        "Cargo.toml",
        "fake-provider/Cargo.toml",
        "loadtest/Cargo.toml",
    ] {
        let text = std::fs::read_to_string(manifest).unwrap();
        let dir = Path::new(manifest).parent().unwrap();
        let paths: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("path = \""))
            .filter_map(|p| p.strip_suffix('"'))
            .filter(|p| p.ends_with(".rs"))
            .map(|p| dir.join(p).to_string_lossy().into_owned())
            .collect();
        for path in paths {
            assert!(
                dockerfile.contains(&format!("> {path}")),
                "Dockerfile has no stub for {path} (named in {manifest})"
            );
        }
    }
}

/// The indexed Job as a GKE + SES team deploys it — `components/ses` with `components/db-ca` —
/// renders an environment `run` accepts: every literal the pod gets (the ConfigMap, the env
/// values), the Secret's keys as stand-ins (no `MAIL_API_KEY`: SES does without), and the
/// credentials from web identity at the token path the component mounts.
#[test]
fn the_ses_component_renders_an_environment_run_accepts() {
    // kustomize takes relative paths only: a directory two below the repository's root.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join(format!("it-ses-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let m = "../../manifests";
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [{m}/overlays/indexed-job]\n\
             components: [{m}/components/ses, {m}/components/db-ca]\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl is needed (for kustomize), as scripts/check-manifests.sh says");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let of = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap();
    let mut vars: Vec<(String, String)> = of("ConfigMap")["data"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().into(), v.as_str().unwrap().into()))
        .collect();
    let pod = &of("Job")["spec"]["template"]["spec"];
    for e in pod["containers"][0]["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        match e["value"].as_str() {
            Some(v) => vars.push((name, v.into())),
            None if e["valueFrom"]["secretKeyRef"]["optional"] == Value::Bool(true) => {}
            // The Secret's required keys (DATABASE_URL is DbConfig's), and the downward API's.
            None => vars.push((name.clone(), stand_in(&name))),
        }
    }
    let cfg = campaign_sender::config::RunConfig::from_vars(vars).unwrap_or_else(|e| {
        panic!("the SES overlay's environment is refused: {e}");
    });
    if let Err(e) = cfg.provider() {
        panic!("the SES overlay's provider settings are refused: {e}");
    }
    assert_eq!(cfg.mail_provider.as_str(), "ses");
    assert_eq!(
        cfg.mail_base().unwrap().as_str(),
        "https://email.eu-west-1.amazonaws.com/"
    );
    assert!(matches!(
        cfg.aws_credentials().unwrap(),
        campaign_sender::provider::aws::Source::WebIdentity(_)
    ));
    let token = cfg.aws_web_identity_token_file.clone().unwrap();
    let mounted = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|m| token.starts_with(m["mountPath"].as_str().unwrap()) && m["name"] == "aws-token");
    assert!(mounted, "{token} is not where the token is mounted");
}

/// A value for a key the pod takes from a Secret or the downward API.
fn stand_in(name: &str) -> String {
    match name {
        "JOB_UID" => "6a1e7b3c-2f0d-4c8e-9a55-0b7d3e2f1c44".into(),
        "JOB_NAME" | "HOSTNAME" | "POD_NAME" => "campaign-sender-0-abcde".into(),
        "JOB_COMPLETION_INDEX" => "0".into(),
        "UNSUBSCRIBE_SECRET" => ONE_CLICK[1].1.into(),
        _ => format!("stand-in-{}", name.to_ascii_lowercase()),
    }
}

/// `archive` in the cluster: the operator pod's owner variant differs from it only in the
/// Secret key it logs in with (the schema owner's, which may delete rows) and its names — the
/// `suppress --lift-at-vendor` calls the vendor: its pod (vendor-overrides.json) is the operator
/// pod plus the vendor's settings (the ConfigMap), its key (`MAIL_API_KEY`, optional: SES signs
/// without one) and, for SES by web identity, the service account and its STS token — nothing
/// else of the Secret.
#[test]
fn the_vendor_pod_is_the_operator_pod_with_the_vendors_settings_and_key() {
    let read = |name: &str| -> serde_json::Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("manifests/operator")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let (operator, mut vendor) = (read("pod-overrides.json"), read("vendor-overrides.json"));
    let spec = vendor["spec"].as_object_mut().unwrap();
    assert_eq!(
        spec.remove("serviceAccountName").unwrap(),
        "campaign-sender"
    );
    let token = spec["volumes"].as_array_mut().unwrap().pop().unwrap();
    assert_eq!(
        token["projected"]["sources"][0]["serviceAccountToken"]["audience"],
        "sts.amazonaws.com"
    );
    let c = &mut spec["containers"][0];
    let mount = c["volumeMounts"].as_array_mut().unwrap().pop().unwrap();
    assert_eq!(mount["name"], token["name"]);
    assert_eq!(
        mount["mountPath"], "/var/run/secrets/aws",
        "where components/ses puts it"
    );
    let from = c.as_object_mut().unwrap().remove("envFrom").unwrap();
    assert_eq!(
        from,
        serde_json::json!([{"configMapRef": {"name": "campaign-sender"}}])
    );
    let key = c["env"].as_array_mut().unwrap().pop().unwrap();
    assert_eq!(key["name"], "MAIL_API_KEY");
    assert_eq!(key["valueFrom"]["secretKeyRef"]["key"], "MAIL_API_KEY");
    assert_eq!(key["valueFrom"]["secretKeyRef"]["optional"], true);
    assert_eq!(vendor, operator);
}

/// same restricted pod, the same CA, nothing else of the Secret.
#[test]
fn the_archive_pod_is_the_operator_pod_as_the_schema_owner() {
    let read = |name: &str| -> serde_json::Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("manifests/operator")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    };
    let (operator, mut archive) = (read("pod-overrides.json"), read("archive-overrides.json"));
    let c = &mut archive["spec"]["containers"][0];
    assert_eq!(
        c["env"][0]["valueFrom"]["secretKeyRef"]["key"],
        "MIGRATE_DATABASE_URL"
    );
    c["env"][0]["valueFrom"]["secretKeyRef"]["key"] = "OPERATOR_DATABASE_URL".into();
    c["name"] = operator["spec"]["containers"][0]["name"].clone();
    archive["metadata"]["labels"]["app.kubernetes.io/component"] = "operator".into();
    assert_eq!(archive, operator);
}
