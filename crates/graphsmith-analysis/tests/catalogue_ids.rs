//! Every catalogue id used anywhere in the workspace is one the catalogue defines.
//!
//! Ids are plain strings in many places a type cannot reach: rendered reports and their
//! snapshots (`catalogue: [sync-in-capture]`), docs (`graphsmith explain unjoined-fork`), test
//! assertions, the diagnosis and the raw-call classifier. So this test scans the source tree for
//! every form in which an id is written and checks each one found against
//! `catalogue::entry`. Each form must be found at least once, so a scan that stops seeing
//! anything (a moved tree, a changed spelling) fails instead of passing vacuously.
//!
//! The tree is the workspace this test was built from, or `GRAPHSMITH_REPO_DIR` when the test
//! binary runs elsewhere; a missing tree is a failure, never a silent pass.

use std::path::{Path, PathBuf};

use graphsmith_analysis::catalogue;
use regex::Regex;

/// The forms an id is written in, each with a name for messages.
fn forms() -> Vec<(&'static str, Regex)> {
    let r = |s: &str| Regex::new(s).expect("valid pattern");
    vec![
        // `graphsmith explain <id>` in docs, help texts, diagnoses and reports (ids with a dash;
        // one-word ids are found through the forms below).
        (
            "explain <id>",
            r(r"explain ([a-z][a-z0-9]*(?:-[a-z0-9]+)+)"),
        ),
        // A report line: `catalogue: [sync-in-capture] Synchronizing ...`.
        ("catalogue: [<id>]", r(r"catalogue: \[([a-z0-9-]+)\]")),
        // Rust: `catalogue::entry("<id>")`, `entry("<id>")`.
        ("entry(\"<id>\")", r(r#"\bentry\("([^"]*)"\)"#)),
        // Rust assertions on a diagnosis: `d.catalogue, Some("<id>")`.
        (
            "catalogue, Some(\"<id>\")",
            r(r#"\.catalogue,\s*Some\("([^"]*)"\)"#),
        ),
        // Rust assertions on an explained call: `.id, "<id>"`.
        (".id, \"<id>\"", r(r#"\.id,\s*"([^"]*)""#)),
    ]
}

/// Forms that hold only inside one file of this crate (where every such literal is an id).
fn file_forms() -> Vec<(&'static str, &'static str, Regex)> {
    let r = |s: &str| Regex::new(s).expect("valid pattern");
    vec![
        // The diagnosis names entries as `Some("<id>")`.
        (
            "src/diagnosis.rs",
            "Some(\"<id>\")",
            r(r#"Some\("([^"]*)"\)"#),
        ),
        // The raw-call classifier maps codes to ids: `902 => "merge",`.
        (
            "src/catalogue/calls.rs",
            "=> \"<id>\"",
            r(r#"=> "([^"]*)","#),
        ),
    ]
}

fn source_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("GRAPHSMITH_REPO_DIR") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Text files of the tree, build outputs and VCS data left out.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !matches!(
                name.as_str(),
                "target" | ".git" | "gpu-bin" | "node_modules"
            ) {
                files(&path, out);
            }
            continue;
        }
        let text = matches!(
            path.extension().and_then(|x| x.to_str()),
            Some("rs" | "md" | "txt" | "py" | "cu" | "cuh" | "c" | "h" | "sh" | "json" | "jsonl")
        );
        if text {
            out.push(path);
        }
    }
}

#[test]
fn every_catalogue_id_used_in_the_workspace_is_defined() {
    let root = source_root();
    let root = root.canonicalize().unwrap_or(root);
    assert!(
        root.join("Cargo.toml").is_file() && root.join("crates").is_dir(),
        "the workspace's sources are not at {} (set GRAPHSMITH_REPO_DIR to a checkout)",
        root.display()
    );
    let mut paths = Vec::new();
    files(&root, &mut paths);
    let forms = forms();
    let file_forms = file_forms();
    let mut seen = vec![0usize; forms.len() + file_forms.len()];
    let mut unknown = Vec::new();
    let mut check = |path: &Path, line: usize, form: &str, id: &str| {
        if catalogue::entry(id).is_none() {
            unknown.push(format!("{}:{line}: {form}: '{id}'", path.display()));
        }
    };
    let here = root.join("crates/graphsmith-analysis");
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        // This file spells the forms out with placeholders.
        if path.ends_with("tests/catalogue_ids.rs") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            for (i, (form, re)) in forms.iter().enumerate() {
                for c in re.captures_iter(line) {
                    seen[i] += 1;
                    check(path, n + 1, form, &c[1]);
                }
            }
            for (j, (file, form, re)) in file_forms.iter().enumerate() {
                if path != &here.join(file) {
                    continue;
                }
                for c in re.captures_iter(line) {
                    seen[forms.len() + j] += 1;
                    check(path, n + 1, form, &c[1]);
                }
            }
        }
    }
    let names: Vec<&str> = forms
        .iter()
        .map(|f| f.0)
        .chain(file_forms.iter().map(|f| f.1))
        .collect();
    for (name, count) in names.iter().zip(&seen) {
        assert!(
            *count > 0,
            "no id written as {name} found under {}",
            root.display()
        );
    }
    assert!(
        unknown.is_empty(),
        "unknown catalogue ids:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_scan_would_see_an_unknown_id() {
    let line = "  see: graphsmith explain no-such-entry";
    let (_, re) = &forms()[0];
    let id = &re.captures(line).expect("the form matches")[1];
    assert_eq!(id, "no-such-entry");
    assert!(catalogue::entry(id).is_none());
}
