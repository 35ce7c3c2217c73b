//! cuBLASLt without a GPU: its algorithms kept in the launch choices' cache entry (round trip,
//! an entry without them, the format raised), the choice among measured candidates, the
//! `--gemm cublaslt` spelling in the cache key, and which buckets an entry covers (launch
//! choices and algorithms) and the union stored after a model searched only its own.

mod common;

use graphsmith_llama::kernels::Projection;
use graphsmith_llama::search::{
    load, pick_lt_candidate, store, BucketResult, CacheEntry, CacheKey, Lookup, LtChoice, LtEntry,
    SEARCH_FORMAT,
};
use graphsmith_llama::{buckets_for_capacity, Gemm, BUCKETS};

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

/// `e` keeping only `buckets`' launch choices and algorithms, each bucket's tuning and
/// algorithm words marked with `mark` (to tell two searches' results apart).
fn only(mut e: CacheEntry, buckets: &[usize], mark: &str) -> CacheEntry {
    e.buckets.retain(|b| buckets.contains(&b.bucket));
    for b in &mut e.buckets {
        b.tuning = mark.into();
    }
    if let Some(lt) = &mut e.cublaslt {
        lt.choices.retain(|c| buckets.contains(&c.bucket));
        for c in &mut lt.choices {
            c.rank = mark.len();
        }
    }
    e
}

#[test]
fn an_entry_covers_only_the_buckets_it_holds() {
    let full = entry(Gemm::Auto);
    let lt_of =
        |buckets: &[usize]| -> Vec<usize> { buckets.iter().copied().filter(|&b| b > 1).collect() };
    for capacity in [1, 3, 64, 100] {
        let needed = buckets_for_capacity(capacity);
        assert!(
            full.missing(needed, &lt_of(needed)).is_empty(),
            "{capacity}"
        );
    }
    // Written by a model of one sequence: it covers such a model, not one of three.
    let one = only(entry(Gemm::Auto), &[1], "pf=8");
    assert!(one.missing(&[1], &[]).is_empty());
    assert_eq!(one.missing(&[1, 2, 4], &[2, 4]), [2, 4]);
    // Launch choices without cuBLASLt's algorithms for a bucket run on it: not covered.
    let mut gap = entry(Gemm::Auto);
    if let Some(lt) = &mut gap.cublaslt {
        lt.choices
            .retain(|c| !(c.bucket == 4 && c.matmul == Projection::Down));
    }
    assert_eq!(gap.missing(&[1, 2, 4], &[2, 4]), [4]);
    assert!(
        gap.missing(&[1, 2, 4], &[]).is_empty(),
        "a load without cuBLASLt needs no algorithm"
    );
    // An entry without algorithms at all has them measured at load, as before.
    let mut none = entry(Gemm::Auto);
    none.cublaslt = None;
    assert!(none.missing(&[1, 2, 4], &[2, 4]).is_empty());
}

#[test]
fn a_search_of_some_buckets_stores_the_union_and_a_later_load_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    // A model of 64 sequences searched every bucket; then one of 3 searched buckets 1, 2, 4.
    let wide = only(entry(Gemm::Auto), &BUCKETS, "default");
    let narrow = only(entry(Gemm::Auto), &[1, 2, 4], "pf=8");
    store(dir.path(), &wide).unwrap();
    let Lookup::Hit(old) = load(dir.path(), &wide.key) else {
        panic!("the first entry is read back");
    };
    let union = narrow.clone().merged_over(&old);
    store(dir.path(), &union).unwrap();
    let Lookup::Hit(got) = load(dir.path(), &wide.key) else {
        panic!("the union is read back");
    };
    assert_eq!(*got, union);
    let tunings: Vec<(usize, &str)> = got
        .buckets
        .iter()
        .map(|b| (b.bucket, b.tuning.as_str()))
        .collect();
    assert_eq!(
        tunings,
        [
            (1, "pf=8"),
            (2, "pf=8"),
            (4, "pf=8"),
            (8, "default"),
            (16, "default"),
            (32, "default"),
            (64, "default")
        ],
        "the new search's buckets, then the older entry's others"
    );
    let lt = got.cublaslt.as_ref().unwrap();
    assert_eq!(
        lt.choices.len(),
        6 * 5,
        "every bucket above one row, every matmul"
    );
    let ranks: Vec<(usize, usize)> = lt.choices.iter().map(|c| (c.bucket, c.rank)).collect();
    assert!(
        ranks.windows(2).all(|w| w[0].0 <= w[1].0),
        "by bucket: {ranks:?}"
    );
    assert!(
        ranks.iter().all(|&(b, r)| r == if b <= 4 { 4 } else { 7 }),
        "{ranks:?}"
    );
    // Every bucket of any capacity is covered again: a 64-sequence load searches nothing.
    assert!(got.missing(&BUCKETS, &BUCKETS[1..]).is_empty());

    // Algorithms of another cuBLASLt are not mixed in: the new search's alone stand.
    let mut other = narrow.clone();
    if let Some(lt) = &mut other.cublaslt {
        lt.version += 1;
    }
    let mixed = other.merged_over(&wide);
    assert_eq!(mixed.buckets.len(), BUCKETS.len());
    let buckets: Vec<usize> = mixed
        .cublaslt
        .unwrap()
        .choices
        .iter()
        .map(|c| c.bucket)
        .collect();
    assert!(buckets.iter().all(|&b| b <= 4), "{buckets:?}");
    // A search that ran without cuBLASLt keeps the older entry's algorithms.
    let mut plain = narrow;
    plain.cublaslt = None;
    assert_eq!(plain.merged_over(&wide).cublaslt, wide.cublaslt);
}
