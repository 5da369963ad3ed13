//! The dependencies point down: every `crate::` path in the library's code (its `use` lines and
//! its paths in expressions; comments and test modules aside) goes from a module to one on a
//! lower line of `lib.rs`'s "Layers", never to one above or beside it; and within a folder, no
//! two files use each other, directly or round a ring. A circle added anywhere turns this red
//! naming the files and the line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Within a folder, the pairs of files that may use each other, and why. Each is one `impl`
/// split across two files of a folder (or a parent and the part it calls back), which the
/// issue that asked for this test allows.
/// (folder, file, file, why).
const ALLOWED_RINGS: &[(&str, &str, &str, &str)] = &[(
    "worker",
    "pipeline",
    "shutdown",
    "shutdown.rs holds the stop path's part of `impl Pipeline` (one impl in two files), and \
     the pipeline owns the `Stop` it defines",
)];

/// `lib.rs`'s layers, top first: the modules of each numbered line under `# Layers`.
fn layers() -> Vec<Vec<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let section = lib
        .split("//! # Layers")
        .nth(1)
        .expect("lib.rs has a `# Layers` section");
    let tick = regex::Regex::new(r"`([a-z_]+)`").unwrap();
    let numbered = regex::Regex::new(r"^//! \d+\. ").unwrap();
    let mut out = Vec::new();
    for line in section.lines().skip(1).take_while(|l| l.starts_with("//!")) {
        if numbered.is_match(line) {
            out.push(tick.captures_iter(line).map(|c| c[1].to_string()).collect());
        }
    }
    assert!(
        out.len() > 3,
        "lib.rs's `# Layers` lists too few lines: {out:?}"
    );
    out
}

/// Every `.rs` file under `dir`, with its path below `src/`.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// The code of a file without its comments and its test module (tests may reach anywhere).
fn code(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let t = line.trim_start();
        if t == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|(_, l)| l.starts_with("mod tests"))
        {
            break;
        }
        if !t.starts_with("//") {
            out.push((i + 1, line));
        }
    }
    out
}

fn is_test_file(rel: &str) -> bool {
    rel.ends_with("_tests.rs") || rel.ends_with("/tests.rs")
}

#[test]
fn every_crate_path_points_down_the_layers_of_lib_rs() {
    let layers = layers();
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let path = regex::Regex::new(r"\bcrate::([a-z_]+)").unwrap();
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let mut wrong = Vec::new();
    for (rel, text) in &files {
        if rel == "lib.rs" || rel == "main.rs" || is_test_file(rel) {
            continue;
        }
        let module = module_path(rel)[0].clone();
        let Some(&own) = rank.get(module.as_str()) else {
            wrong.push(format!(
                "{rel}: its module `{module}` is on no line of lib.rs's layers"
            ));
            continue;
        };
        for (n, line) in code(text) {
            for c in path.captures_iter(line) {
                let to = &c[1];
                if to == module {
                    continue;
                }
                match rank.get(to) {
                    Some(&r) if r > own => {}
                    Some(_) => wrong.push(format!(
                        "{rel}:{n}: `{module}` uses `{to}`, which is not below it: {}",
                        line.trim()
                    )),
                    None => wrong.push(format!(
                        "{rel}:{n}: `{to}` is on no line of lib.rs's layers"
                    )),
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_files_of_a_folder_use_each_other() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    // folder → module (a file, or a sub-folder) → the sibling modules it uses.
    let mut uses: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let path = regex::Regex::new(r"\b(super|crate)((?:::[a-z_]+)+)(?:::\{([^}]*)\})?").unwrap();
    for (rel, text) in &files {
        if rel == "lib.rs" || rel == "main.rs" || is_test_file(rel) {
            continue;
        }
        let module = module_path(rel);
        let (folder, own) = module.split_at(module.len() - 1);
        if folder.is_empty() {
            continue; // the top level: held by the layers above
        }
        let used = uses
            .entry(folder.join("/"))
            .or_default()
            .entry(own[0].clone())
            .or_default();
        for (_, line) in code(text) {
            for c in path.captures_iter(line) {
                let segments: Vec<&str> = c[2].split("::").skip(1).collect();
                let mut heads: Vec<Vec<String>> = Vec::new();
                let base: Vec<String> = if &c[1] == "super" {
                    // From a file, `super` is its folder; from a folder's mod.rs, the parent.
                    let up = if rel.ends_with("mod.rs") { 2 } else { 1 };
                    module[..module.len().saturating_sub(up)].to_vec()
                } else {
                    Vec::new()
                };
                let full: Vec<String> = base
                    .iter()
                    .cloned()
                    .chain(segments.iter().map(|s| s.to_string()))
                    .collect();
                heads.push(full.clone());
                if let Some(list) = c.get(3) {
                    for name in list.as_str().split(',').map(str::trim) {
                        let name = name.split("::").next().unwrap_or(name);
                        heads.push(full.iter().cloned().chain([name.to_string()]).collect());
                    }
                }
                for target in heads {
                    // A sibling: same folder, another module of it that is a file or a folder.
                    if target.len() > folder.len()
                        && target[..folder.len()] == *folder
                        && target[folder.len()] != own[0]
                    {
                        let name = &target[folder.len()];
                        let dir = src().join(folder.join("/"));
                        if dir.join(format!("{name}.rs")).exists() || dir.join(name).is_dir() {
                            used.insert(name.clone());
                        }
                    }
                }
            }
        }
    }
    let allowed = |folder: &str, a: &str, b: &str| {
        ALLOWED_RINGS
            .iter()
            .any(|(f, x, y, _why)| *f == folder && ((*x == a && *y == b) || (*x == b && *y == a)))
    };
    let mut rings = Vec::new();
    for (folder, graph) in &uses {
        for a in graph.keys() {
            for b in graph.keys().filter(|b| a < *b) {
                if reaches(graph, a, b) && reaches(graph, b, a) && !allowed(folder, a, b) {
                    rings.push(format!(
                        "src/{folder}: {a} and {b} use each other (directly or round a ring)"
                    ));
                }
            }
        }
    }
    assert!(
        rings.is_empty(),
        "circles between the files of a folder:\n{}",
        rings.join("\n")
    );
}

/// `worker/send.rs` → [worker, send]; `cli/cmd/mod.rs` → [cli, cmd].
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Whether `from` reaches `to` through the folder's uses.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_string()];
    while let Some(f) = todo.pop() {
        if f == to {
            return true;
        }
        if seen.insert(f.clone()) {
            todo.extend(graph.get(&f).into_iter().flatten().cloned());
        }
    }
    false
}
