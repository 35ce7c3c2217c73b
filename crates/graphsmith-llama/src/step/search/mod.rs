//! Launch choices measured at first load: for each batch bucket, the decoder's launch choices
//! (warps per output column of each projection, blocks per multiprocessor, the attention's
//! splits and clusters, the L2 prefetch budget, the ring GEMV, GEMV kernels or cuBLAS) are
//! searched from the rules' values by coordinate descent (`candidates.rs`, `descent.rs`), each
//! candidate timed as a replayed graph of the model's own step against the incumbent
//! (`measure.rs`), within a time budget for the whole bucket set. The winners are cached on disk per GPU, driver,
//! version, kernels and shape (`key.rs`, `cache.rs`): a cached load spends no time searching.
//!
//! A step picks its bucket's choices (`BucketChoices::for_rows`); hand-set choices
//! (`DecoderOptions::tuning`, `bench --tune`) bypass the search.

mod cache;
pub mod candidates;
mod descent;
mod key;
mod lt;
mod measure;

use std::time::{Duration, Instant};

use graphsmith::{Context, Stream};
use serde::Serialize;

pub use cache::{cache_dir, load, store, BucketResult, CacheEntry, Lookup, CACHE_DIR_VAR};
pub use candidates::{Key, Verdict};
pub use descent::{descend, Descent};
pub use key::{context_class, driver_release, kernels_hash, CacheKey, Shape, SEARCH_FORMAT};
pub use lt::{pick as pick_lt_candidate, LtChoice, LtEntry, LT_MIN_GAIN};

use super::decoder::Decoder;
use super::options::Search;
use crate::error::Result;

/// The time the search may take for the whole bucket set (the captures and the final duels
/// come on top, well within the 30 s a first load may take).
pub const BUDGET: Duration = Duration::from_secs(22);

/// What the search did when a model was made (graphs mode with [`Search::On`]).
#[derive(Clone, Debug, Serialize)]
pub struct SearchReport {
    /// Whether the choices came from the cache (then nothing was searched).
    pub from_cache: bool,
    /// Time spent searching in this load, ms (0 when from the cache).
    pub search_ms: f64,
    /// Time the search that found these choices took, ms (this one's, or the cached one's).
    pub found_in_ms: f64,
    /// The entry's file, where it was read or written.
    pub cache_file: Option<String>,
    /// What the entry is keyed by.
    pub key: CacheKey,
    /// Each bucket's choices and figures.
    pub buckets: Vec<BucketResult>,
    /// Whether the budget ended the search of some bucket before every key was tried.
    pub out_of_budget: bool,
    /// cuBLASLt's algorithm per (bucket, matmul), where the options run it.
    pub cublaslt: Option<LtEntry>,
    /// Whether cuBLASLt's algorithms were measured in this load (else read from the cache).
    pub cublaslt_measured: bool,
    /// Warnings (an unreadable cache file, a failed write) and notes (a stale entry, a
    /// candidate that could not be captured).
    pub notes: Vec<String>,
}

/// The key of `work`'s choices on `ctx`'s device.
pub(crate) fn key_for(ctx: &Context, work: &Decoder) -> Result<CacheKey> {
    let (gpu, multiprocessors, driver) = key::device_identity(ctx)?;
    let options = work.options();
    Ok(CacheKey {
        gpu,
        multiprocessors,
        driver,
        graphsmith: env!("CARGO_PKG_VERSION").to_string(),
        kernels: kernels_hash().to_string(),
        search: SEARCH_FORMAT,
        shape: Shape::new(work.config(), work.max_ctx(), options.gemm, work.uses_pdl()),
    })
}

/// Sets `work`'s choices per bucket from the cache, or by searching (then caches them), when
/// its options ask for the search and set no choice by hand; `None` otherwise. Only the
/// decoder's buckets ([`Decoder::buckets`]) are read or searched: an entry that lacks some of
/// them ([`CacheEntry::missing`]) has the decoder's buckets searched, and the union stored
/// ([`CacheEntry::merged_over`]). Warnings go to stderr and into the report.
pub(crate) fn run(
    ctx: &Context,
    stream: &Stream,
    work: &mut Decoder,
) -> Result<Option<SearchReport>> {
    let options = work.options();
    if options.search == Search::Off || !options.tuning.is_default() {
        return Ok(None);
    }
    let key = key_for(ctx, work)?;
    let dir = cache_dir();
    let mut notes = Vec::new();
    let needed = work.buckets();
    let lt_needed = if work.lt().is_some() {
        work.lt_buckets()
    } else {
        Vec::new()
    };
    // An entry that covers some of the buckets: kept under what this load searches.
    let mut prior = None;
    match &dir {
        Some(dir) => match load(dir, &key) {
            Lookup::Hit(entry) => {
                let missing = entry.missing(needed, &lt_needed);
                if missing.is_empty() {
                    return read_entry(ctx, stream, work, (dir, key, *entry), notes).map(Some);
                }
                notes.push(format!(
                    "launch choices cache {}: no choices for buckets {missing:?}; buckets {needed:?} searched",
                    dir.join(key.file_name()).display()
                ));
                prior = Some(*entry);
            }
            Lookup::Miss => {}
            Lookup::Stale(note) => notes.push(note),
            Lookup::Unusable(warning) => {
                eprintln!("warning: {warning}");
                notes.push(warning);
            }
        },
        None => notes.push(format!(
            "the platform has no cache folder (set {CACHE_DIR_VAR}): the choices are not cached"
        )),
    }
    let started = Instant::now();
    // cuBLASLt's algorithms first: the launch choices' candidates are captured with them. The
    // prior entry's are reused where they cover every bucket this load runs on cuBLASLt.
    let cached_lt = prior
        .as_ref()
        .and_then(|p| p.cublaslt.as_ref())
        .filter(|lt| lt_needed.iter().all(|&b| lt.covers(b)));
    let lt = lt::settle(ctx, stream, work, cached_lt, &mut notes)?;
    let cublaslt_measured = lt.as_ref().is_some_and(|(_, m)| *m);
    let lt = lt.map(|(e, _)| e);
    let searched = measure::search_all(ctx, stream, work, BUDGET)?;
    let search_ms = started.elapsed().as_secs_f64() * 1e3;
    notes.extend(searched.notes);
    let mut entry = CacheEntry {
        key: key.clone(),
        search_ms,
        buckets: searched.buckets.clone(),
        cublaslt: lt.clone(),
    };
    if let Some(p) = &prior {
        entry = entry.merged_over(p);
    }
    let cache_file = match dir.as_deref().map(|d| store(d, &entry)) {
        Some(Ok(path)) => Some(path.display().to_string()),
        Some(Err(warning)) => {
            eprintln!("warning: {warning}");
            notes.push(warning);
            None
        }
        None => None,
    };
    Ok(SearchReport {
        from_cache: false,
        search_ms,
        found_in_ms: search_ms,
        cache_file,
        key,
        buckets: searched.buckets,
        out_of_budget: searched.out_of_budget,
        cublaslt_measured,
        cublaslt: lt,
        notes,
    }
    .into())
}

/// Sets `work`'s choices from `entry`, which covers every bucket of the decoder: no time is
/// spent searching (cuBLASLt's algorithms are measured only where the entry's are refused or
/// of another cuBLASLt, then the entry is written again).
fn read_entry(
    ctx: &Context,
    stream: &Stream,
    work: &mut Decoder,
    (dir, key, mut entry): (&std::path::Path, CacheKey, CacheEntry),
    mut notes: Vec<String>,
) -> Result<SearchReport> {
    let needed = work.buckets();
    let mut path = dir.join(key.file_name()).display().to_string();
    for b in entry.buckets.iter().filter(|b| needed.contains(&b.bucket)) {
        if let Ok(t) = b.tuning.parse() {
            work.set_bucket_choice(b.bucket, t)?;
        }
    }
    let started = Instant::now();
    let lt = lt::settle(ctx, stream, work, entry.cublaslt.as_ref(), &mut notes)?;
    let measured = lt.as_ref().is_some_and(|(_, m)| *m);
    let lt = lt.map(|(e, _)| e);
    if measured {
        // The launch choices stand; the entry is written again with the new algorithms (and
        // the old ones of the buckets this decoder lacks, where one cuBLASLt chose both).
        let old = entry.clone();
        entry.cublaslt = lt.clone();
        entry = entry.merged_over(&old);
        match store(dir, &entry) {
            Ok(p) => path = p.display().to_string(),
            Err(warning) => {
                eprintln!("warning: {warning}");
                notes.push(warning);
            }
        }
    }
    Ok(SearchReport {
        from_cache: true,
        search_ms: if measured {
            started.elapsed().as_secs_f64() * 1e3
        } else {
            0.0
        },
        found_in_ms: entry.search_ms,
        cache_file: Some(path),
        key,
        buckets: entry
            .buckets
            .into_iter()
            .filter(|b| needed.contains(&b.bucket))
            .collect(),
        out_of_budget: false,
        cublaslt: lt,
        cublaslt_measured: measured,
        notes,
    })
}
