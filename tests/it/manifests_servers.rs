//! The manifests of the two HTTP servers (`events`, the status page) and the alerts' runbook
//! links, held to the binary: what they run, where they listen, what they read.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use campaign_sender::config::known_variables;

use crate::manifests::{applied_files, args_of, at, int, load};

/// A server container's variables by name: each one the binary reads, and every secret
/// (`DATABASE_URL`, a key, a secret, a password) by reference to the Secret `secret`.
fn container_env(c: &serde_yaml::Value, secret: &str) -> BTreeMap<String, serde_yaml::Value> {
    let known = known_variables();
    let mut env = BTreeMap::new();
    for e in c["env"].as_sequence().unwrap() {
        let name = e["name"].as_str().unwrap();
        assert!(
            known.iter().any(|k| k == name),
            "{name} is not read by the binary"
        );
        if name == "DATABASE_URL"
            || ["SECRET", "KEY", "PASSWORD"]
                .iter()
                .any(|w| name.contains(w))
        {
            assert!(e["value"].is_null(), "{name} must come from the Secret");
            // The one-click links' secret is the senders' own: one Secret gives it to both.
            let from = if name == "UNSUBSCRIBE_SECRET" {
                "campaign-sender"
            } else {
                secret
            };
            assert_eq!(e["valueFrom"]["secretKeyRef"]["name"], from, "{name}");
        }
        env.insert(name.to_string(), e.clone());
    }
    env
}

/// The events overlay: a real subcommand, two replicas a drain never takes together, probes and
/// the Service on the port `EVENTS_ADDR` listens on, metrics where the PodMonitor scrapes, and
/// only variables `events` reads, every secret by reference.
#[test]
fn the_events_deployment_serves_where_the_app_listens_and_reads_only_its_variables() {
    use clap::Parser;
    let d = load("manifests/overlays/events/deployment.yaml");
    let c = at(&d, "spec.template.spec.containers.0");
    let args = args_of(c);
    assert_eq!(args, ["events"]);
    campaign_sender::cli::Cli::try_parse_from(["campaign-sender", "events"]).unwrap();
    assert!(int(&d, "spec.replicas") >= 2);
    let env = container_env(c, "campaign-sender-events");
    let port = |var: &str| {
        env[var]["value"]
            .as_str()
            .unwrap()
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .port() as i64
    };
    let ports = c["ports"].as_sequence().unwrap();
    let named = |n: &str| {
        ports
            .iter()
            .find(|p| p["name"] == n)
            .map(|p| int(p, "containerPort"))
    };
    assert_eq!(named("http"), Some(port("EVENTS_ADDR")));
    assert_eq!(named("metrics"), Some(port("METRICS_ADDR")));
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(c[probe]["httpGet"]["path"], "/healthz", "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "http", "{probe}");
    }
    let svc = load("manifests/overlays/events/service.yaml");
    assert_eq!(at(&svc, "spec.ports.0.targetPort"), "http");
    let pod_labels = at(&d, "spec.template.metadata.labels");
    for selector in [
        at(&svc, "spec.selector"),
        at(
            &load("manifests/overlays/events/pdb.yaml"),
            "spec.selector.matchLabels",
        ),
        at(
            &load("manifests/overlays/events/networkpolicy.yaml"),
            "spec.podSelector.matchLabels",
        ),
    ] {
        for (k, v) in selector.as_mapping().unwrap() {
            assert_eq!(&pod_labels[k], v, "{k:?}");
        }
    }
    let np = load("manifests/overlays/events/networkpolicy.yaml");
    assert_eq!(int(&np, "spec.ingress.0.ports.0.port"), port("EVENTS_ADDR"));
    assert_eq!(
        int(
            &load("manifests/overlays/events/pdb.yaml"),
            "spec.minAvailable"
        ),
        1
    );
}

/// The status page's component: a real subcommand listening where the Service, the probes and
/// the NetworkPolicy point, a login file from its Secret at the path `WEB_BASIC_AUTH_FILE`
/// names, times in the CronJob's zone, and only variables `web` reads, the database URL by
/// reference.
#[test]
fn the_web_component_serves_where_the_app_listens_behind_a_login() {
    use clap::Parser;
    let d = load("manifests/components/web/deployment.yaml");
    let c = at(&d, "spec.template.spec.containers.0");
    assert_eq!(args_of(c), ["web"]);
    campaign_sender::cli::Cli::try_parse_from(["campaign-sender", "web"]).unwrap();
    let env = container_env(c, "campaign-sender-web");
    let port = env["WEB_ADDR"]["value"]
        .as_str()
        .unwrap()
        .parse::<std::net::SocketAddr>()
        .unwrap()
        .port() as i64;
    assert_eq!(int(c, "ports.0.containerPort"), port);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthz");
    let np = load("manifests/components/web/networkpolicy.yaml");
    assert_eq!(int(&np, "spec.ingress.0.ports.0.port"), port);
    let svc = load("manifests/components/web/service.yaml");
    assert_eq!(at(&svc, "spec.ports.0.targetPort"), "http");
    let pod_labels = at(&d, "spec.template.metadata.labels");
    for selector in [
        at(&svc, "spec.selector"),
        at(&np, "spec.podSelector.matchLabels"),
    ] {
        for (k, v) in selector.as_mapping().unwrap() {
            assert_eq!(&pod_labels[k], v, "{k:?}");
        }
    }
    // The login file is mounted where WEB_BASIC_AUTH_FILE points.
    let file = std::path::Path::new(env["WEB_BASIC_AUTH_FILE"]["value"].as_str().unwrap());
    let mount = &c["volumeMounts"].as_sequence().unwrap()[0];
    assert_eq!(
        mount["mountPath"].as_str(),
        file.parent().and_then(|p| p.to_str())
    );
    let volume = at(&d, "spec.template.spec.volumes.0");
    assert_eq!(volume["name"], mount["name"]);
    assert_eq!(volume["secret"]["secretName"], "campaign-sender-web");
    assert_eq!(
        volume["secret"]["items"][0]["path"].as_str(),
        file.file_name().and_then(|f| f.to_str())
    );
    // The pages' times in the zone the CronJob fires in, a zone the binary knows.
    let zone = &env["WEB_TIME_ZONE"]["value"];
    let cron = load("manifests/overlays/cronjob/cronjob.yaml");
    assert_eq!(zone, at(&cron, "spec.timeZone"));
    campaign_sender::window::parse_tz(zone.as_str().unwrap()).unwrap();
}

/// The anchor GitHub gives a heading: lower-cased, punctuation dropped (letters, digits, `-`
/// and `_` kept), spaces as `-`.
fn github_anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every alert says where its runbook is (`runbook: docs/OPERATIONS.md#anchor`), and the
/// anchor is a section of docs/OPERATIONS.md as GitHub renders it — its own, one per alert: an
/// on-call at 02:00 follows a link that lands on what to do about this alert.
#[test]
fn every_alert_links_a_runbook_section_that_exists() {
    assert_eq!(
        github_anchor("The vendor's events (`campaign-sender events`)"),
        "the-vendors-events-campaign-sender-events"
    );
    let ops = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/OPERATIONS.md"))
        .unwrap();
    let anchors: Vec<String> = ops
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| github_anchor(l.trim_start_matches('#').trim()))
        .collect();
    let rules = load("manifests/monitoring/prometheusrule.yaml");
    let mut alerts = 0;
    let mut sections = BTreeSet::new();
    for group in at(&rules, "spec.groups").as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let runbook = rule["annotations"]["runbook"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert} has no runbook annotation"));
            let anchor = runbook
                .strip_prefix("docs/OPERATIONS.md#")
                .unwrap_or_else(|| panic!("{alert}: {runbook} is not docs/OPERATIONS.md#…"));
            assert!(
                anchors.iter().any(|a| a == anchor),
                "{alert}: no section #{anchor} in docs/OPERATIONS.md"
            );
            assert!(
                sections.insert(anchor.to_string()),
                "{alert} shares #{anchor}"
            );
        }
    }
    assert!(alerts >= 15, "{alerts} alerts");
}

/// Whether a Kubernetes label selector (`matchLabels`, `matchExpressions` with `In`) selects a
/// pod with `labels`.
fn selects(selector: &serde_yaml::Value, labels: &serde_yaml::Value) -> bool {
    let label = |k: &serde_yaml::Value| labels[k.as_str().unwrap()].as_str();
    let by_value = selector["matchLabels"]
        .as_mapping()
        .into_iter()
        .flatten()
        .all(|(k, v)| label(k) == v.as_str());
    let by_expression = selector["matchExpressions"]
        .as_sequence()
        .into_iter()
        .flatten()
        .all(|e| {
            assert_eq!(e["operator"], "In", "only In is read here: {e:?}");
            let values = e["values"].as_sequence().unwrap();
            label(&e["key"]).is_some_and(|l| values.iter().any(|v| v.as_str() == Some(l)))
        });
    by_value && by_expression
}

/// Every pod template in `manifests/` with a port named `metrics` (the workers of each mode, the
/// webhook receivers) is one the PodMonitor scrapes: an alert on a metric nobody scrapes never
/// fires, or fires for ever (`EventsLagging` reads "no event came back" from a counter that is
/// absent when the events pods are not scraped).
#[test]
fn prometheus_scrapes_every_pod_that_serves_metrics() {
    let pm = load("manifests/monitoring/podmonitor.yaml");
    assert_eq!(at(&pm, "spec.podMetricsEndpoints.0.port"), "metrics");
    let selector = at(&pm, "spec.selector");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    let mut files = Vec::new();
    applied_files(&root, &mut files);
    let mut scraped = BTreeMap::new();
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(file).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let doc = serde_yaml::Value::deserialize(doc).unwrap();
            let template = match doc["kind"].as_str() {
                Some("Job" | "Deployment") => at(&doc, "spec.template"),
                Some("CronJob") => at(&doc, "spec.jobTemplate.spec.template"),
                _ => continue,
            };
            // Patches (the cadence overlays, components) name no containers: skipped.
            let serves_metrics = template["spec"]["containers"]
                .as_sequence()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_sequence().into_iter().flatten())
                .any(|p| p["name"] == "metrics");
            if serves_metrics {
                let name = at(&doc, "metadata.name").as_str().unwrap().to_string();
                scraped.insert(
                    format!("{} {name}", file.strip_prefix(&root).unwrap().display()),
                    selects(selector, &template["metadata"]["labels"]),
                );
            }
        }
    }
    let components: BTreeSet<_> = scraped
        .keys()
        .map(|k| k.rsplit(' ').next().unwrap())
        .collect();
    assert!(
        components.contains("campaign-sender-events") && scraped.len() >= 4,
        "{scraped:?}"
    );
    let missed: Vec<_> = scraped
        .iter()
        .filter(|(_, s)| !**s)
        .map(|(k, _)| k)
        .collect();
    assert!(
        missed.is_empty(),
        "not scraped by the PodMonitor: {missed:?}"
    );
}

/// The events Secret's example, copied as it is, starts `events`: its one vendor (SES through
/// SNS) is configured and valid, and every other vendor's key is left out, not a placeholder
/// that would exit 78.
#[test]
fn the_events_secret_example_starts_events_as_it_is() {
    use campaign_sender::config::{EventsConfig, FromEnv as _};
    let example = load("manifests/overlays/events/secret.yaml.example");
    let vars: Vec<(String, String)> = example["stringData"]
        .as_mapping()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str().unwrap().into(), v.as_str().unwrap().into()))
        .collect();
    assert!(
        vars.iter().all(|(_, v)| !v.contains("REPLACE-ME")),
        "{vars:?}"
    );
    let cfg = EventsConfig::from_vars(vars).unwrap_or_else(|e| panic!("refused: {e}"));
    assert_eq!(
        cfg.listeners(campaign_sender::config::BrakeConfig::default().rules())
            .unwrap()
            .vendors(),
        ["ses"]
    );
}

/// One database URL form everywhere a person copies one from: `sslmode=verify-full` with the
/// CA at the path `components/db-ca` mounts (KEDA's, whose operator has no CA of ours, is
/// `sslmode=require`, as OPERATIONS says), a host name — never an IP the certificate lacks.
#[test]
fn every_example_database_url_names_the_ca_the_component_mounts() {
    let ca = load("manifests/components/db-ca/pod.yaml");
    let mount = at(&ca, "1.value.mountPath").as_str().unwrap().to_string();
    let form = format!("?sslmode=verify-full&sslrootcert={mount}/db-ca.pem");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for file in [
        "manifests/base/secret.yaml.example",
        "manifests/overlays/events/secret.yaml.example",
        "manifests/components/web/secret.yaml.example",
        "docs/OPERATIONS.md",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for url in text.split("postgres://").skip(1) {
            let url: String = url
                .chars()
                .take_while(|c| !matches!(c, '\'' | '"' | ' ' | '\n' | '`'))
                .collect();
            if url.contains("127.0.0.1") || url.is_empty() || url.starts_with('…') {
                continue; // the local examples, and a bare `postgres://…`
            }
            seen += 1;
            let host = url.split('@').nth(1).unwrap_or_default();
            assert!(
                !host.starts_with(|c: char| c.is_ascii_digit()),
                "{file}: {url}: an IP host"
            );
            if url.starts_with("campaign_sender_keda") {
                assert!(url.ends_with("?sslmode=require"), "{file}: {url}");
            } else {
                assert!(url.ends_with(&form), "{file}: {url} is not …{form}");
            }
        }
    }
    assert!(seen >= 10, "only {seen} URLs found");
}

/// OPERATIONS, read end to end, names every key of a Secret the manifests read — the pods'
/// `secretKeyRef`s, KEDA's `secretTargetRef`s, the operator pods' overrides — so nobody meets a
/// pod stuck in CreateContainerConfigError over a key the runbook never mentioned.
#[test]
fn operations_names_every_secret_key_the_manifests_read() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ops = std::fs::read_to_string(root.join("docs/OPERATIONS.md")).unwrap();
    let mut keys = BTreeSet::new();
    let mut files = vec![root.join("manifests")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let name = path.to_string_lossy().to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // The line after a secret reference names its key, in YAML and in the JSON overrides.
        for (i, line) in text.lines().enumerate() {
            let refers = line.contains("secretKeyRef") || line.contains("secretTargetRef");
            if !refers {
                continue;
            }
            let window: String = text.lines().skip(i).take(5).collect::<Vec<_>>().join(" ");
            for part in window.split("key").skip(1) {
                let key: String = part
                    .trim_start_matches(|c: char| !c.is_ascii_uppercase())
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                    .collect();
                if key.len() > 3 {
                    keys.insert(key);
                }
            }
        }
    }
    assert!(
        keys.contains("OPERATOR_DATABASE_URL") && keys.contains("KEDA_DATABASE_URL"),
        "{keys:?}"
    );
    let missing: Vec<&String> = keys.iter().filter(|k| !ops.contains(k.as_str())).collect();
    assert!(missing.is_empty(), "OPERATIONS never names {missing:?}");
}
