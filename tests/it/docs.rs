//! The documents hold together: every cross-reference a file makes to a section (`README "X"`,
//! `docs/NAME.md "Y"`) names one that exists, every test the reliability table cites exists,
//! and the docs' tables of defaults say what the configs hold. A renamed
//! section, test or default turns this red instead of leaving a dangling pointer.

use std::path::{Path, PathBuf};

use campaign_sender::config::{DbConfig, EventsConfig, FromEnv, RunConfig, WebConfig};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (recursively) whose name ends with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !["target", "node_modules", ".git", "fixtures"].contains(&name.as_str()) {
                files(&path, exts, out);
            }
        } else if exts.iter().any(|e| name.ends_with(e)) {
            out.push(path);
        }
    }
}

/// A document's sections: its headings' text, and its bold paragraph titles (RELIABILITY.md
/// groups its tables under those).
fn sections(doc: &str) -> Vec<String> {
    doc.lines()
        .filter_map(|l| {
            if l.starts_with('#') {
                Some(l.trim_start_matches('#').trim().to_string())
            } else if let Some(rest) = l.strip_prefix("**") {
                rest.split_once("**").map(|(t, _)| t.to_string())
            } else {
                None
            }
        })
        .collect()
}

/// A reference names a section when it is its title, or the title's start before a
/// parenthesis (`"The vendor's events"` for ``The vendor's events (`campaign-sender events`)``).
fn names(section: &str, reference: &str) -> bool {
    section == reference || section.starts_with(&format!("{reference} ("))
}

#[test]
fn every_reference_to_a_documents_section_names_one_that_exists() {
    let docs: Vec<(&str, String)> = [
        ("README", "README.md"),
        ("docs/DESIGN.md", "docs/DESIGN.md"),
        ("docs/OPERATIONS.md", "docs/OPERATIONS.md"),
        ("docs/RELIABILITY.md", "docs/RELIABILITY.md"),
        ("docs/BENCHMARKS.md", "docs/BENCHMARKS.md"),
        ("docs/MIGRATION.md", "docs/MIGRATION.md"),
        ("docs/VENDORS.md", "docs/VENDORS.md"),
    ]
    .into_iter()
    .map(|(name, path)| (name, read(&root().join(path))))
    .collect();
    // `README "X"`, `docs/NAME.md "Y"`, with or without a comma, quotes escaped or not.
    let reference =
        regex::Regex::new(r#"(README|docs/[A-Z]+\.md),? (?:\\?")([^"\\]+)(?:\\?")"#).unwrap();
    let mut sources = Vec::new();
    for dir in [
        "src",
        "tests",
        "docs",
        "manifests",
        "scripts",
        "loadtest",
        "fake-provider",
        ".ci",
    ] {
        files(
            &root().join(dir),
            &[
                ".rs", ".md", ".yaml", ".sh", ".env", ".json", ".mjs", ".py", ".sql", "run",
            ],
            &mut sources,
        );
    }
    sources.push(root().join("README.md"));
    let mut dangling = Vec::new();
    let mut seen = 0;
    // A title wrapped onto the next line of a comment is one title.
    let wrap = regex::Regex::new(r"\s*\n\s*(?://[!/]?|#)?\s*").unwrap();
    for file in sources.iter().filter(|f| !f.ends_with("tests/it/docs.rs")) {
        let text = read(file);
        for c in reference.captures_iter(&text) {
            let doc = &c[1];
            let title = wrap.replace_all(&c[2], " ");
            let Some((_, body)) = docs.iter().find(|(name, _)| *name == doc) else {
                continue;
            };
            seen += 1;
            if !sections(body).iter().any(|s| names(s, &title)) {
                dangling.push(format!(
                    "{}: {doc} \"{title}\"",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        seen > 20,
        "only {seen} references found: is the pattern still right?"
    );
    assert!(
        dangling.is_empty(),
        "sections that do not exist:\n{}",
        dangling.join("\n")
    );
}

#[test]
fn every_test_the_reliability_table_cites_exists() {
    let mut code = String::new();
    let mut rs = Vec::new();
    files(&root().join("src"), &[".rs"], &mut rs);
    files(&root().join("tests"), &[".rs"], &mut rs);
    for f in rs {
        code.push_str(&read(&f));
        code.push('\n');
    }
    let doc = read(&root().join("docs/RELIABILITY.md"));
    let cited = regex::Regex::new(r"`([a-z_][a-z0-9_:*…]*)`").unwrap();
    let mut missing = Vec::new();
    let mut seen = 0;
    for row in doc.lines().filter(|l| l.starts_with("| ")) {
        let Some(tests) = row.trim_end_matches('|').rsplit(" | ").next() else {
            continue;
        };
        for c in cited.captures_iter(tests) {
            let name = c[1].rsplit("::").next().unwrap();
            if name.matches('_').count() < 2 || name.chars().all(|ch| ch == '*') {
                continue; // a module, a variable, or "every test of the module"
            }
            seen += 1;
            let pattern = regex::escape(name)
                .replace(r"\*", "[a-z0-9_]*")
                .replace('…', "[a-z0-9_]*");
            let exists = regex::Regex::new(&format!(r"fn {pattern}\b")).unwrap();
            if !exists.is_match(&code) {
                missing.push(c[1].to_string());
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} tests cited: is the table's shape still the same?"
    );
    assert!(
        missing.is_empty(),
        "tests cited but not found:\n{}",
        missing.join("\n")
    );
}

/// Every table of settings in the docs (`| variable | default | meaning |`: the README's, the
/// status page's in OPERATIONS.md): each numeric default is the one its config takes when the
/// variable is unset (both sides of an `A` / `B` row).
#[test]
fn the_docs_defaults_are_the_configs_defaults() {
    let unset = || std::iter::empty::<(String, String)>();
    let configs = [
        serde_json::to_value(RunConfig::with_defaults("c", "http://127.0.0.1/")).unwrap(),
        serde_json::to_value(
            DbConfig::from_vars([("DATABASE_URL".to_string(), "postgres://x".to_string())])
                .unwrap(),
        )
        .unwrap(),
        serde_json::to_value(WebConfig::from_vars(unset()).unwrap()).unwrap(),
        serde_json::to_value(envy::from_iter::<_, EventsConfig>(unset()).unwrap()).unwrap(),
        serde_json::to_value(campaign_sender::config::BrakeConfig::from_vars(unset()).unwrap())
            .unwrap(),
    ];
    let mut checked = std::collections::BTreeMap::new();
    for doc in ["README.md", "docs/OPERATIONS.md"] {
        let text = read(&root().join(doc));
        let mut in_table = false;
        for row in text.lines() {
            if row.starts_with("| variable | default |") {
                in_table = true;
                continue;
            }
            if !row.starts_with('|') {
                in_table = false;
            }
            if !in_table || !row.starts_with("| `") {
                continue;
            }
            let cells: Vec<&str> = row.split(" | ").collect();
            let vars: Vec<String> = cells[0]
                .trim_start_matches("| ")
                .split(" / ")
                .map(|v| v.trim_matches('`').to_lowercase())
                .collect();
            let defaults: Vec<&str> = cells[1].split(" / ").collect();
            for (var, default) in vars.iter().zip(defaults) {
                let Some(number) = default
                    .split_whitespace()
                    .next()
                    .and_then(|d| d.parse::<f64>().ok())
                else {
                    continue; // "required", "unset", a name
                };
                let actual = configs
                    .iter()
                    .find_map(|c| c.get(var))
                    .unwrap_or_else(|| panic!("{doc}: {var} is not a config field"));
                if actual.is_null() && default.contains('(') {
                    continue; // a default that depends on something else, said in the parenthesis
                }
                assert_eq!(actual.as_f64(), Some(number), "{doc}'s default of {var}");
                *checked.entry(doc).or_insert(0) += 1;
            }
        }
    }
    assert!(checked["README.md"] > 20, "{checked:?}");
    assert!(checked["docs/OPERATIONS.md"] >= 7, "{checked:?}");
}

/// The map is true: every file under `src/` is named in its folder's map — the `//!` docs of
/// its `mod.rs`, or of `lib.rs` for the top level — so a newcomer who reads the maps finds every
/// file. A test module (`*_tests.rs`, `tests.rs`) belongs to the file it tests.
#[test]
fn every_source_file_is_named_in_its_folders_map() {
    let mut all = Vec::new();
    files(&root().join("src"), &["rs"], &mut all);
    let mut unnamed = Vec::new();
    for path in all {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if ["mod", "lib", "main", "tests"].contains(&name.as_str()) || name.ends_with("_tests") {
            continue;
        }
        let dir = path.parent().unwrap();
        let map = if dir == root().join("src") {
            dir.join("lib.rs")
        } else {
            dir.join("mod.rs")
        };
        let docs: String = read(&map)
            .lines()
            .filter(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let named = regex::Regex::new(&format!(r"\b{}\b", regex::escape(&name))).unwrap();
        if !named.is_match(&docs) {
            unnamed.push(path.strip_prefix(root()).unwrap().display().to_string());
        }
    }
    assert!(unnamed.is_empty(), "not in their folder's map: {unnamed:?}");
}
