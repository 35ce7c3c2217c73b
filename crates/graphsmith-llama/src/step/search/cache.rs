//! The search's winners on disk: one JSON file per [`CacheKey`] in the platform's cache folder
//! (`$GRAPHSMITH_CACHE_DIR`, else `dirs::cache_dir()/graphsmith`), under `launch-choices/`.
//! A file that cannot be read or parsed is a warning and a new search, never an error; a file
//! whose key differs from the one asked for (another driver, version, kernels or shape) is
//! stale and never reused; files are written whole or not at all (a temporary file in the same
//! folder, then renamed over the entry).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::key::CacheKey;
use super::lt::LtEntry;
use crate::step::buckets::{union_by_bucket, BucketChoices};
use crate::step::tuning::Tuning;

/// The variable that puts the cache elsewhere (a folder; `launch-choices/` is made inside it).
pub const CACHE_DIR_VAR: &str = "GRAPHSMITH_CACHE_DIR";

/// The cache's folder: `$GRAPHSMITH_CACHE_DIR/launch-choices` when the variable is set and not
/// empty, else `graphsmith/launch-choices` in the platform's cache folder (`~/.cache` on Linux);
/// `None` when the platform has none.
pub fn cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os(CACHE_DIR_VAR) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::cache_dir()?.join("graphsmith"),
    };
    Some(base.join("launch-choices"))
}

/// One bucket's result: its choices and what the search measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BucketResult {
    pub bucket: usize,
    /// The choices in `--tune`'s spelling (`default`: the rules').
    pub tuning: String,
    /// Milliseconds per step with the rules' choices and with these, as the search measured
    /// them turn by turn (`None` where the search ran out of time before timing them).
    pub rules_ms: Option<f64>,
    pub chosen_ms: Option<f64>,
    /// Candidates timed against the incumbent.
    pub candidates: usize,
}

/// What one file holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub key: CacheKey,
    /// The search that found these choices took this long, ms.
    pub search_ms: f64,
    pub buckets: Vec<BucketResult>,
    /// cuBLASLt's algorithm per (bucket, matmul), where the options run it (`search/lt.rs`).
    #[serde(default)]
    pub cublaslt: Option<LtEntry>,
}

impl CacheEntry {
    /// The buckets of `needed` the entry does not cover: those without launch choices, and
    /// those of `lt_needed` (the buckets a load runs on cuBLASLt) without an algorithm for
    /// every matmul where the entry holds cuBLASLt's algorithms (an entry without them has
    /// them measured at load, as before). A load with any is searched, not read.
    pub fn missing(&self, needed: &[usize], lt_needed: &[usize]) -> Vec<usize> {
        needed
            .iter()
            .copied()
            .filter(|b| {
                let launch = self.buckets.iter().any(|r| r.bucket == *b);
                let lt =
                    !lt_needed.contains(b) || self.cublaslt.as_ref().is_none_or(|lt| lt.covers(*b));
                !(launch && lt)
            })
            .collect()
    }

    /// This entry (what a search of some buckets found) with `older`'s buckets that it lacks:
    /// their launch choices, and their cuBLASLt algorithms where both were chosen by one
    /// cuBLASLt version (an older entry's algorithms stay where this search ran none). What is
    /// stored after a search, so that a model using fewer buckets never narrows the entry.
    pub fn merged_over(mut self, older: &CacheEntry) -> CacheEntry {
        union_by_bucket(&mut self.buckets, &older.buckets, |r| r.bucket);
        self.cublaslt = match (self.cublaslt.take(), &older.cublaslt) {
            (Some(new), Some(old)) if new.version == old.version => Some(new.merged_over(old)),
            (None, old) => old.clone(),
            (new, _) => new,
        };
        self
    }

    /// The choices per bucket, or what is wrong with them (an unknown bucket or a spelling
    /// `--tune` does not read).
    pub fn choices(&self) -> Result<BucketChoices, String> {
        let mut out = BucketChoices::default();
        for b in &self.buckets {
            let t: Tuning = b
                .tuning
                .parse()
                .map_err(|e| format!("bucket {}: {e}", b.bucket))?;
            out.set(b.bucket, t)?;
        }
        Ok(out)
    }
}

/// What looking a key up found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// An entry for this key.
    Hit(Box<CacheEntry>),
    /// No entry.
    Miss,
    /// An entry for another key (stale: another driver, version, kernels or shape), not reused.
    Stale(String),
    /// A file that cannot be read or understood: searched again, with this warning.
    Unusable(String),
}

/// Looks `key` up in `dir`.
pub fn load(dir: &Path, key: &CacheKey) -> Lookup {
    let path = dir.join(key.file_name());
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Miss,
        Err(e) => {
            return Lookup::Unusable(format!(
                "launch choices cache {}: cannot read it ({e}); searching again",
                path.display()
            ))
        }
    };
    let entry: CacheEntry = match serde_json::from_str(&text) {
        Ok(e) => e,
        Err(e) => {
            return Lookup::Unusable(format!(
                "launch choices cache {}: not an entry ({e}); searching again",
                path.display()
            ))
        }
    };
    if entry.key != *key {
        return Lookup::Stale(format!(
            "launch choices cache {}: written for another key ({}), not reused",
            path.display(),
            differences(&entry.key, key).join(", ")
        ));
    }
    if let Err(e) = entry.choices() {
        return Lookup::Unusable(format!(
            "launch choices cache {}: {e}; searching again",
            path.display()
        ));
    }
    Lookup::Hit(Box::new(entry))
}

/// The fields in which two keys differ, named.
fn differences(a: &CacheKey, b: &CacheKey) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{name} {x} against {y}"));
        }
    };
    field("gpu", a.gpu.clone(), b.gpu.clone());
    field(
        "multiprocessors",
        a.multiprocessors.to_string(),
        b.multiprocessors.to_string(),
    );
    field("driver", a.driver.clone(), b.driver.clone());
    field("graphsmith", a.graphsmith.clone(), b.graphsmith.clone());
    field("kernels", a.kernels.clone(), b.kernels.clone());
    field("search format", a.search.to_string(), b.search.to_string());
    if a.shape != b.shape {
        let shape = |s| serde_json::to_string(s).unwrap_or_default();
        field("shape", shape(&a.shape), shape(&b.shape));
    }
    out
}

/// Writes `entry` into `dir` (made if missing) atomically: a temporary file in `dir`, then
/// renamed over the entry's file. Returns the file, or what failed.
pub fn store(dir: &Path, entry: &CacheEntry) -> Result<PathBuf, String> {
    let path = dir.join(entry.key.file_name());
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "launch choices cache {}: cannot {what} ({e}); the choices are not cached",
            path.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(|e| fail("make its folder", &e))?;
    let text = serde_json::to_string_pretty(entry).map_err(|e| fail("serialise it", &e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail("write it", &e))?;
    tmp.write_all(text.as_bytes())
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| fail("write it", &e))?;
    tmp.persist(&path)
        .map_err(|e| fail("rename it", &e.error))?;
    Ok(path)
}
