//! The runtime's layers stay layers: a module under `src/<layer>/` names only modules of its
//! own layer or of layers below it (`crate::<module>::...`), and only `src/driver/` calls the
//! driver (`sys::cu*`). The order is the one `lib.rs` and ARCHITECTURE.md give.
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

/// The code of a file without its `#[cfg(test)] mod tests` tail and without comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
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
