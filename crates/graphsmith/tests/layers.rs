//! The runtime's layers stay layers: a module under `src/<layer>/` names only modules of its
//! own layer or of layers below it (`crate::<module>::...`), and only `src/driver/` calls the
//! driver (`sys::cu*`). The order is the one `lib.rs` and ARCHITECTURE.md give.
//!
//! And in every crate of the workspace, no two modules (files or folders under `src/`, siblings
//! under one parent) import each other, directly or through a longer circle, by `crate::`,
//! `super::` or `self::` paths, in `use` statements or in code (comments and `#[cfg(test)]`
//! modules left out). A module may use its own parent or children.
//!
//! The sources are those this test was built from, or `GRAPHSMITH_REPO_DIR` (a checkout's
//! root) when the test binary runs elsewhere; missing sources are a failure, never a pass.

use std::path::{Path, PathBuf};

use regex::Regex;

/// Bottom to top. `error` and `driver` are the foundation.
const LAYERS: &[&str] = &[
    "error", "driver", "ranges", "context", "memory", "module", "stream", "graph", "exec", "cache",
    "probe",
];

fn src_dir() -> PathBuf {
    match std::env::var_os("GRAPHSMITH_REPO_DIR") {
        Some(root) => PathBuf::from(root).join("crates/graphsmith/src"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The layer of a file: its first path component under `src/` (`graph/capture.rs` -> graph).
fn layer_of(src: &Path, file: &Path) -> Option<usize> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    LAYERS.iter().position(|l| *l == name)
}

/// The code of a file with its comment lines and its `#[cfg(test)] mod NAME { ... }` blocks
/// blanked (so that line numbers stay).
fn code(text: &str) -> String {
    let mut lines: Vec<&str> = text
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                ""
            } else {
                l
            }
        })
        .collect();
    let mut i = 0;
    while i < lines.len() {
        let starts_test_mod = lines[i].trim() == "#[cfg(test)]"
            && lines.get(i + 1).is_some_and(|l| {
                let l = l.trim_start();
                (l.starts_with("mod ") || l.starts_with("pub(crate) mod ")) && l.ends_with('{')
            });
        if !starts_test_mod {
            i += 1;
            continue;
        }
        // Blank up to the line that closes the module's brace.
        let mut depth = 0i64;
        let mut j = i + 1;
        while j < lines.len() {
            depth += lines[j].matches('{').count() as i64 - lines[j].matches('}').count() as i64;
            lines[j] = "";
            j += 1;
            if depth <= 0 {
                break;
            }
        }
        lines[i] = "";
        i = j;
    }
    lines.join("\n")
}

#[test]
fn no_module_names_a_layer_above_its_own_and_only_the_driver_layer_calls_the_driver() {
    let src = src_dir();
    assert!(
        src.join("lib.rs").is_file(),
        "the runtime's sources are not at {} (set GRAPHSMITH_REPO_DIR to a checkout)",
        src.display()
    );
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let path_ref = Regex::new(r"crate::([a-z_]+)::").unwrap();
    let driver_call = Regex::new(r"sys::cu[A-Z][A-Za-z0-9_]*\s*\(").unwrap();
    let mut upward = Vec::new();
    let mut calls = Vec::new();
    let mut layered = 0;
    for file in &files {
        let Some(own) = layer_of(&src, file) else {
            continue;
        };
        layered += 1;
        let text = code(&std::fs::read_to_string(file).expect("readable source file"));
        for c in path_ref.captures_iter(&text) {
            if let Some(used) = LAYERS.iter().position(|l| *l == &c[1]) {
                if used > own {
                    upward.push(format!(
                        "{}: {} uses crate::{}",
                        file.display(),
                        LAYERS[own],
                        &c[1]
                    ));
                }
            }
        }
        if LAYERS[own] != "driver" && driver_call.is_match(&text) {
            calls.push(file.display().to_string());
        }
    }
    assert!(
        layered >= 30,
        "only {layered} layered files under {}",
        src.display()
    );
    assert!(
        upward.is_empty(),
        "imports across layers going up:\n{}",
        upward.join("\n")
    );
    assert!(
        calls.is_empty(),
        "driver calls outside src/driver/:\n{}",
        calls.join("\n")
    );
}

/// Import circles that have an owner and are still to be broken, as (crate, the modules of the
/// circle, sorted). Each entry must match a circle that exists: remove it when its circle goes.
const ALLOWED_CIRCLES: &[(&str, &[&str])] = &[];

/// The workspace's `crates/` directory (from `GRAPHSMITH_REPO_DIR` when set).
fn crates_dir() -> PathBuf {
    match std::env::var_os("GRAPHSMITH_REPO_DIR") {
        Some(root) => PathBuf::from(root).join("crates"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

/// The module a file under `src/` is: `a/b.rs` and `a/b/mod.rs` -> [a, b]; `lib.rs` and
/// `main.rs` (the roots) -> [].
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file under src/");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.strip_suffix(".rs").unwrap_or(&last);
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_string());
    }
    parts
}

fn skip_spaces(s: &[u8], i: &mut usize) {
    while *i < s.len() && s[*i].is_ascii_whitespace() {
        *i += 1;
    }
}

/// The paths of a use tree starting at `s[*i]` (`a::{b, c::d}` -> [a, b], [a, c, d]); a glob or
/// anything else ends a path.
fn use_tree(s: &[u8], i: &mut usize) -> Vec<Vec<String>> {
    skip_spaces(s, i);
    if s.get(*i) == Some(&b'{') {
        *i += 1;
        let mut out = Vec::new();
        loop {
            skip_spaces(s, i);
            match s.get(*i) {
                None => break,
                Some(b'}') => {
                    *i += 1;
                    break;
                }
                Some(b',') => *i += 1,
                Some(_) => {
                    let before = *i;
                    let paths = use_tree(s, i);
                    if *i == before {
                        *i += 1; // not a path: skipped
                    } else {
                        out.extend(paths);
                    }
                }
            }
        }
        return out;
    }
    let start = *i;
    while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
        *i += 1;
    }
    if *i == start {
        if s.get(*i) == Some(&b'*') {
            *i += 1;
        }
        return vec![Vec::new()];
    }
    let ident = String::from_utf8_lossy(&s[start..*i]).into_owned();
    let mut j = *i;
    skip_spaces(s, &mut j);
    if s[j..].starts_with(b"::") {
        *i = j + 2;
        let mut subs = use_tree(s, i);
        for sub in &mut subs {
            sub.insert(0, ident.clone());
        }
        return subs;
    }
    vec![vec![ident]]
}

/// Every module path a file's code names through `crate::`, `super::` or `self::`, resolved
/// against the file's own module `own`, with the line it is on.
fn named_paths(code: &str, own: &[String]) -> Vec<(Vec<String>, usize)> {
    let root = Regex::new(r"\b(crate|super|self)\s*::").unwrap();
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for m in root.find_iter(code) {
        if code[..m.start()].ends_with("::") {
            continue; // `super::super::`: part of the path found before.
        }
        let line = code[..m.start()].matches('\n').count() + 1;
        let mut i = m.start();
        for path in use_tree(bytes, &mut i) {
            let mut resolved: Vec<String> = match path[0].as_str() {
                "crate" => Vec::new(),
                "super" => own[..own.len().saturating_sub(1)].to_vec(),
                _ => own.to_vec(),
            };
            for seg in &path[1..] {
                match seg.as_str() {
                    "super" => {
                        resolved.pop();
                    }
                    "self" => {}
                    s => resolved.push(s.to_string()),
                }
            }
            out.push((resolved, line));
        }
    }
    out
}

/// An import between two sibling modules: (their parent, from, to, where).
type Edge = (Vec<String>, String, String, String);

/// The imports between sibling modules of one crate's `src/`.
fn sibling_imports(src: &Path) -> Vec<Edge> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .iter()
        .map(|f| (f.clone(), module_of(src, f)))
        .collect();
    let exists = |m: &[String]| modules.iter().any(|(_, own)| own.starts_with(m));
    let mut edges = Vec::new();
    for (file, own) in &modules {
        let text = code(&std::fs::read_to_string(file).expect("readable source file"));
        for (mut target, line) in named_paths(&text, own) {
            while !target.is_empty() && !exists(&target) {
                target.pop();
            }
            let k = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if k == own.len() || k == target.len() {
                continue; // itself, an ancestor or a descendant: not a sibling.
            }
            let at = format!("{}:{line}", file.strip_prefix(src).unwrap().display());
            edges.push((own[..k].to_vec(), own[k].clone(), target[k].clone(), at));
        }
    }
    edges
}

/// The circles among the edges: each strongly connected set of two or more siblings, as
/// (parent/module names sorted, one import of each edge inside it).
fn circles(edges: &[Edge]) -> Vec<(Vec<String>, Vec<String>)> {
    let reach = |from: &(Vec<String>, String)| {
        let mut seen = vec![from.1.clone()];
        let mut todo = vec![from.1.clone()];
        while let Some(n) = todo.pop() {
            for (p, a, b, _) in edges {
                if p == &from.0 && a == &n && !seen.contains(b) {
                    seen.push(b.clone());
                    todo.push(b.clone());
                }
            }
        }
        seen
    };
    let mut out: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for (parent, a, _, _) in edges {
        let from_a = reach(&(parent.clone(), a.clone()));
        let mut members: Vec<String> = from_a
            .iter()
            .filter(|b| reach(&(parent.clone(), (*b).clone())).contains(a))
            .cloned()
            .collect();
        if members.len() < 2 {
            continue;
        }
        members.sort();
        let names: Vec<String> = members
            .iter()
            .map(|m| {
                [parent.as_slice(), std::slice::from_ref(m)]
                    .concat()
                    .join("/")
            })
            .collect();
        if out.iter().any(|(n, _)| n == &names) {
            continue;
        }
        let mut evidence: Vec<String> = Vec::new();
        for (p, x, y, at) in edges {
            let shown = format!("{x} -> {y} ({at})");
            if p == parent
                && members.contains(x)
                && members.contains(y)
                && !evidence
                    .iter()
                    .any(|e| e.starts_with(&format!("{x} -> {y} ")))
            {
                evidence.push(shown);
            }
        }
        out.push((names, evidence));
    }
    out
}

#[test]
fn no_two_modules_of_a_workspace_crate_import_each_other() {
    let crates = crates_dir();
    let mut found = Vec::new();
    let mut unexpected = Vec::new();
    let mut crate_count = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&crates)
        .unwrap_or_else(|e| {
            panic!(
                "the workspace's crates are not at {} ({e}; set GRAPHSMITH_REPO_DIR to a checkout)",
                crates.display()
            )
        })
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for dir in entries {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        crate_count += 1;
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for (members, evidence) in circles(&sibling_imports(&src)) {
            let allowed = ALLOWED_CIRCLES.iter().any(|(c, m)| {
                *c == name && m.iter().copied().eq(members.iter().map(String::as_str))
            });
            found.push((name.clone(), members.clone()));
            if !allowed {
                unexpected.push(format!(
                    "{name}: {} import each other:\n    {}",
                    members.join(", "),
                    evidence.join("\n    ")
                ));
            }
        }
    }
    // Every workspace crate has a src/: fewer means the sources are not all there.
    let where_ = crates.display();
    assert!(crate_count >= 9, "only {crate_count} crates under {where_}");
    assert!(
        unexpected.is_empty(),
        "modules that import each other (move what both need into one of them or a third \
         module):\n{}",
        unexpected.join("\n")
    );
    let stale: Vec<String> = ALLOWED_CIRCLES
        .iter()
        .filter(|(c, m)| {
            !found
                .iter()
                .any(|(n, f)| n == c && m.iter().copied().eq(f.iter().map(String::as_str)))
        })
        .map(|(c, m)| format!("{c}: {}", m.join(", ")))
        .collect();
    assert!(
        stale.is_empty(),
        "ALLOWED_CIRCLES lists circles that no longer exist (remove them): {}",
        stale.join("; ")
    );
}

#[test]
fn use_trees_and_relative_paths_resolve_to_modules() {
    let own: Vec<String> = vec!["inject".into(), "nvtx".into()];
    let text = "use super::{thread::{self, Local}, state::*};\nlet x = crate::event::OUT;\n\
                use super::super::cli;";
    let paths: Vec<(String, usize)> = named_paths(text, &own)
        .into_iter()
        .map(|(p, l)| (p.join("/"), l))
        .collect();
    assert_eq!(
        paths,
        [
            ("inject/thread".to_string(), 1),
            ("inject/thread/Local".to_string(), 1),
            ("inject/state".to_string(), 1),
            ("event/OUT".to_string(), 2),
            ("cli".to_string(), 3),
        ]
    );
}

#[test]
fn a_longer_circle_is_one_circle_and_a_parent_is_not_a_sibling() {
    let edge = |p: &[&str], a: &str, b: &str| -> Edge {
        (
            p.iter().map(|s| s.to_string()).collect(),
            a.into(),
            b.into(),
            format!("{a}.rs:1"),
        )
    };
    let edges = vec![
        edge(&[], "a", "b"),
        edge(&[], "b", "c"),
        edge(&[], "c", "a"),
        edge(&[], "c", "d"),
        edge(&["x"], "a", "b"),
    ];
    let found = circles(&edges);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, ["a", "b", "c"]);
    assert_eq!(
        found[0].1,
        ["a -> b (a.rs:1)", "b -> c (b.rs:1)", "c -> a (c.rs:1)"]
    );
    let own: Vec<String> = vec!["inject".into()];
    let (target, _) = &named_paths("use self::thread::tid;", &own)[0];
    assert_eq!(target, &["inject", "thread", "tid"]);
}
