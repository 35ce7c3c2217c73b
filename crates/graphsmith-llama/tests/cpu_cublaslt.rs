//! cuBLASLt without a GPU: its algorithms kept in the launch choices' cache entry (round trip,
//! an entry without them, the format raised), the choice among measured candidates, and the
//! `--gemm cublaslt` spelling in the cache key.

mod common;

use graphsmith_llama::kernels::Projection;
use graphsmith_llama::search::{
    load, pick_lt_candidate, store, BucketResult, CacheEntry, CacheKey, Lookup, LtChoice, LtEntry,
    SEARCH_FORMAT,
};
use graphsmith_llama::{Gemm, BUCKETS};

fn key(gemm: Gemm) -> CacheKey {
    common::cache_key(gemm)
}

fn lt_entry() -> LtEntry {
    let mut choices = Vec::new();
    for &bucket in BUCKETS.iter().filter(|&&b| b > 1) {
        for (i, p) in Projection::ALL.into_iter().enumerate() {
            // Opaque algorithm words, the high ones included (JSON keeps u64 exactly).
            let algo = std::array::from_fn(|w| {
                (bucket as u64) << 40 | (i as u64) << 8 | w as u64 | u64::MAX << 60
            });
            choices.push(LtChoice {
                bucket,
                matmul: p,
                algo,
                rank: i % 3,
                candidates: 8,
                heuristic_ms: (i != 4).then_some(0.05),
                chosen_ms: Some(0.045),
            });
        }
    }
    LtEntry {
        version: 130_100,
        measure_ms: 321.5,
        choices,
    }
}

fn entry(gemm: Gemm) -> CacheEntry {
    CacheEntry {
        key: key(gemm),
        search_ms: 2_000.0,
        buckets: BUCKETS
            .iter()
            .map(|&b| BucketResult {
                bucket: b,
                tuning: "default".into(),
                rules_ms: Some(0.75),
                chosen_ms: Some(0.75),
                candidates: 0,
            })
            .collect(),
        cublaslt: Some(lt_entry()),
    }
}

#[test]
fn the_cublaslt_algorithms_round_trip_in_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let e = entry(Gemm::Auto);
    store(dir.path(), &e).unwrap();
    let Lookup::Hit(got) = load(dir.path(), &e.key) else {
        panic!("the entry is read back");
    };
    assert_eq!(*got, e);
    let lt = got.cublaslt.unwrap();
    assert_eq!(
        lt.choices.len(),
        6 * 5,
        "every bucket above one row, every matmul"
    );
    assert_eq!(lt.choices[7].algo, lt_entry().choices[7].algo);
    // The matmuls are spelled by name in the file.
    let text = std::fs::read_to_string(dir.path().join(e.key.file_name())).unwrap();
    assert!(text.contains("\"matmul\": \"gate_up\""), "{text}");
    assert!(text.contains("\"version\": 130100"), "{text}");
}

#[test]
fn an_entry_without_cublaslt_reads_as_none() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = entry(Gemm::Cublas);
    e.cublaslt = None;
    let mut json: serde_json::Value = serde_json::to_value(&e).unwrap();
    json.as_object_mut().unwrap().remove("cublaslt");
    std::fs::write(
        dir.path().join(e.key.file_name()),
        serde_json::to_string(&json).unwrap(),
    )
    .unwrap();
    assert_eq!(load(dir.path(), &e.key), Lookup::Hit(Box::new(e)));
}

#[test]
fn cublaslt_has_its_own_key_and_the_format_was_raised() {
    const { assert!(SEARCH_FORMAT >= 2, "entries now hold cuBLASLt's algorithms") };
    assert_eq!(key(Gemm::CublasLt).shape.gemm, "cublaslt");
    assert_ne!(key(Gemm::CublasLt).id(), key(Gemm::Cublas).id());
    assert_ne!(key(Gemm::CublasLt).id(), key(Gemm::Auto).id());
    // An entry of the older format is stale, never reused.
    let dir = tempfile::tempdir().unwrap();
    let mut old = entry(Gemm::Auto);
    old.key.search = 1;
    std::fs::write(
        dir.path().join(key(Gemm::Auto).file_name()),
        serde_json::to_string(&old).unwrap(),
    )
    .unwrap();
    match load(dir.path(), &key(Gemm::Auto)) {
        Lookup::Stale(note) => assert!(note.contains("search format 1 against 2"), "{note}"),
        other => panic!("an old entry is stale, got {other:?}"),
    }
}

#[test]
fn a_candidate_must_beat_the_heuristics_first_clearly() {
    assert_eq!(pick_lt_candidate(&[0.100, 0.0995, 0.2]), 0);
    assert_eq!(pick_lt_candidate(&[0.100, 0.080, 0.090]), 1);
    assert_eq!(pick_lt_candidate(&[f64::INFINITY, 0.2]), 1);
}
