//! The search of the launch choices without a GPU: cache keys, the cache on disk (round trip,
//! corrupt, unreadable and stale files), candidates and pruning, the verdict, and which bucket's
//! choices a step takes.

mod common;

use graphsmith_llama::search::candidates::{attention_of, directions, keys, uses_gemv};
use graphsmith_llama::search::{
    context_class, driver_release, load, store, BucketResult, CacheEntry, CacheKey, Key, Lookup,
    Shape, Verdict, SEARCH_FORMAT,
};
use graphsmith_llama::{
    bucket_for, BucketChoices, BucketFacts, Config, DecoderOptions, Gemm, Tuning, BUCKETS,
};

fn key() -> CacheKey {
    common::cache_key(Gemm::Auto)
}

fn entry() -> CacheEntry {
    CacheEntry {
        key: key(),
        search_ms: 12_345.0,
        buckets: BUCKETS
            .iter()
            .map(|&b| BucketResult {
                bucket: b,
                tuning: if b == 1 { "down=4,pf=8" } else { "default" }.into(),
                rules_ms: Some(0.75),
                chosen_ms: Some(0.74),
                candidates: 3,
            })
            .collect(),
        cublaslt: None,
    }
}

#[test]
fn every_component_of_the_key_changes_it() {
    let base = key();
    let mut changed: Vec<CacheKey> = Vec::new();
    let mut with = |f: &dyn Fn(&mut CacheKey)| {
        let mut k = base.clone();
        f(&mut k);
        changed.push(k);
    };
    with(&|k| k.gpu = "NVIDIA H100 80GB HBM3".into());
    with(&|k| k.multiprocessors = 114);
    with(&|k| k.driver = "580.65.06 (CUDA 13.0)".into());
    with(&|k| k.graphsmith = "0.2.0".into());
    with(&|k| k.kernels = "ffffffffffffffff".into());
    with(&|k| k.search = SEARCH_FORMAT + 1);
    with(&|k| k.shape.hidden_size = 4096);
    with(&|k| k.shape.intermediate_size = 5632);
    with(&|k| k.shape.num_hidden_layers = 22);
    with(&|k| k.shape.num_attention_heads = 16);
    with(&|k| k.shape.num_key_value_heads = 4);
    with(&|k| k.shape.head_dim = 128);
    with(&|k| k.shape.vocab_size = 32000);
    with(&|k| k.shape.tie_word_embeddings = false);
    with(&|k| k.shape.context = 4096);
    with(&|k| k.shape.gemm = "cublas".into());
    with(&|k| k.shape.pdl = false);
    let mut ids: Vec<String> = changed.iter().map(CacheKey::id).collect();
    ids.push(base.id());
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "every change gives another id");
    for k in &changed {
        assert_ne!(k.file_name(), base.file_name());
    }
    // The same key, the same id, in every process (FNV-1a of its JSON).
    assert_eq!(base.id(), key().id());
    assert!(
        base.file_name().starts_with("nvidia-h200-"),
        "{}",
        base.file_name()
    );
    assert!(base.file_name().ends_with(".json"));
}

#[test]
fn the_shape_takes_every_field_that_changes_launches() {
    let c = Config::named("small").unwrap();
    let s = Shape::new(&c, 300, Gemm::Cublas, false);
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        r#"{"hidden_size":576,"intermediate_size":1536,"num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"head_dim":64,"vocab_size":49152,"tie_word_embeddings":true,"context":512,"gemm":"cublas","pdl":false}"#
    );
    assert_eq!(context_class(1), 16);
    assert_eq!(context_class(177), 256);
    assert_eq!(context_class(256), 256);
    assert_eq!(context_class(257), 512);
    assert_eq!(context_class(2049), 4096);
}

#[test]
fn the_driver_release_is_read_from_the_kernel_modules_line() {
    let text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct  2 00:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
    assert_eq!(driver_release(text).as_deref(), Some("580.159.04"));
    assert_eq!(
        driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024").as_deref(),
        Some("550.54.15")
    );
    assert_eq!(driver_release(""), None);
    assert_eq!(driver_release("no numbers here"), None);
}

#[test]
fn an_entry_round_trips_and_gives_its_choices() {
    let dir = tempfile::tempdir().unwrap();
    let e = entry();
    let path = store(dir.path(), &e).unwrap();
    assert_eq!(path, dir.path().join(e.key.file_name()));
    assert_eq!(load(dir.path(), &e.key), Lookup::Hit(Box::new(e.clone())));
    let choices = e.choices().unwrap();
    assert_eq!(choices.for_rows(1).to_string(), "down=4,pf=8");
    assert!(choices.for_rows(2).is_default());
    // Written whole: nothing but the entry is left in the folder.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|f| f.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from(e.key.file_name())]);
    // A second store replaces it.
    let mut again = e.clone();
    again.search_ms = 1.0;
    store(dir.path(), &again).unwrap();
    assert_eq!(load(dir.path(), &e.key), Lookup::Hit(Box::new(again)));
}

#[test]
fn timings_come_back_from_the_file_to_the_last_bit() {
    // serde_json's default parser may miss a float by one ulp; the cache must not (a cached load
    // reports the search it read, exactly as it was measured).
    let dir = tempfile::tempdir().unwrap();
    let mut e = entry();
    e.search_ms = 2_412.739_166_000_000_3;
    if let Some(b) = e.buckets.first_mut() {
        b.rules_ms = Some(0.048_548_001_796_007_156);
        b.chosen_ms = Some(0.045_644_000_172_615_05);
    }
    store(dir.path(), &e).unwrap();
    assert_eq!(load(dir.path(), &e.key), Lookup::Hit(Box::new(e)));
}

#[test]
fn a_missing_folder_is_made_and_a_missing_entry_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let inner = dir.path().join("a/b");
    assert_eq!(load(&inner, &key()), Lookup::Miss);
    store(&inner, &entry()).unwrap();
    assert!(matches!(load(&inner, &key()), Lookup::Hit(_)));
}

#[test]
fn a_corrupt_file_is_a_warning_and_a_new_search() {
    let dir = tempfile::tempdir().unwrap();
    let k = key();
    let path = dir.path().join(k.file_name());
    std::fs::write(&path, "{\"key\": {\"gpu\": ").unwrap();
    assert_eq!(
        load(dir.path(), &k),
        Lookup::Unusable(format!(
            "launch choices cache {}: not an entry (EOF while parsing a value at line 1 column 16); searching again",
            path.display()
        ))
    );
    // A choice `--tune` does not read.
    let mut e = entry();
    e.buckets[0].tuning = "down=3".into();
    std::fs::write(&path, serde_json::to_string(&e).unwrap()).unwrap();
    assert_eq!(
        load(dir.path(), &k),
        Lookup::Unusable(format!(
            "launch choices cache {}: bucket 1: down=3: warps per column must be 1, 2, 4 or 8 (they share out a block of 8 warps); searching again",
            path.display()
        ))
    );
    // A bucket that is not one.
    let mut e = entry();
    e.buckets[0].bucket = 3;
    std::fs::write(&path, serde_json::to_string(&e).unwrap()).unwrap();
    assert!(matches!(load(dir.path(), &k), Lookup::Unusable(w) if w.contains("3 is not a bucket")));
}

#[test]
fn an_unreadable_file_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let k = key();
    // A folder where the file should be: reading it fails.
    std::fs::create_dir(dir.path().join(k.file_name())).unwrap();
    match load(dir.path(), &k) {
        Lookup::Unusable(w) => assert!(w.contains("cannot read it"), "{w}"),
        other => panic!("{other:?}"),
    }
    // And storing over it fails with a message, not a panic.
    let err = store(dir.path(), &entry()).unwrap_err();
    assert!(err.contains("cannot rename it"), "{err}");
    assert!(err.ends_with("the choices are not cached"), "{err}");
}

#[test]
fn an_entry_written_for_another_version_or_driver_is_stale_not_reused() {
    let dir = tempfile::tempdir().unwrap();
    let k = key();
    let path = dir.path().join(k.file_name());
    let mut old = entry();
    old.key.graphsmith = "0.0.9".into();
    old.key.driver = "575.51.03 (CUDA 12.9)".into();
    std::fs::write(&path, serde_json::to_string(&old).unwrap()).unwrap();
    assert_eq!(
        load(dir.path(), &k),
        Lookup::Stale(format!(
            "launch choices cache {}: written for another key (driver 575.51.03 (CUDA 12.9) against 580.159.04 (CUDA 13.0), graphsmith 0.0.9 against 0.1.0), not reused",
            path.display()
        ))
    );
    // A changed shape is looked up under another file: a miss.
    let mut other = k.clone();
    other.shape.num_hidden_layers = 22;
    assert_eq!(load(dir.path(), &other), Lookup::Miss);
}

/// The 1B config's one-row bucket on an H200 (132 multiprocessors), context 177.
fn one_row() -> BucketFacts {
    BucketFacts {
        rows: 1,
        gemv_choice: true,
        gemv_by_rule: true,
        warps_rule: [1, 2, 1, 2, 1],
        warps_max: [8, 8, 8, 8, 8],
        ring_fits: false,
        ring_rule: false,
        attention: (8, 4, 64),
        max_ctx: 177,
        sm_count: 132,
    }
}

#[test]
fn keys_follow_the_path_the_bucket_runs() {
    let f = one_row();
    let t = Tuning::default();
    // Cluster by rule at one row and 177 positions (12 splits): no split key.
    assert!(attention_of(&f, &t).cluster);
    assert_eq!(
        keys(&f, &t),
        vec![
            Key::Gemv,
            Key::Warps(1),
            Key::Warps(2),
            Key::Warps(3),
            Key::Warps(4),
            Key::Warps(0),
            Key::Blocks,
            Key::Prefetch,
            Key::Cluster
        ]
    );
    // On cuBLAS: the attention's keys only (no prefetch: the cuBLAS path does not ask for one;
    // still clusters by the rule, so no split cap).
    let cublas: Tuning = "gemv=0".parse().unwrap();
    assert!(!uses_gemv(&f, &cublas));
    assert_eq!(keys(&f, &cublas), vec![Key::Gemv, Key::Cluster]);
    let plain: Tuning = "gemv=0,cluster=0".parse().unwrap();
    assert_eq!(keys(&f, &plain), vec![Key::Gemv, Key::Cluster, Key::Splits]);
    // A bucket of 16 rows (no GEMV instantiation): no kernel choice.
    let sixteen = BucketFacts {
        rows: 16,
        gemv_choice: false,
        gemv_by_rule: false,
        ..f
    };
    assert_eq!(keys(&sixteen, &t), vec![Key::Cluster, Key::Splits]);
    // A group of 8 query heads has no cluster variant.
    let wide = BucketFacts {
        attention: (2, 8, 64),
        ..sixteen
    };
    assert_eq!(keys(&wide, &t), vec![Key::Splits]);
    // The ring GEMV where it takes the model: its keys, and no warps or blocks for the
    // projections it runs (all four by the rule).
    let ring = BucketFacts {
        ring_fits: true,
        ring_rule: true,
        ..f
    };
    assert_eq!(
        keys(&ring, &t),
        vec![
            Key::Gemv,
            Key::Ring,
            Key::RingBlocks,
            Key::Warps(4),
            Key::Prefetch,
            Key::Cluster
        ]
    );
}

fn specs(d: &[Vec<Tuning>]) -> Vec<Vec<String>> {
    d.iter()
        .map(|dir| dir.iter().map(|t| t.to_string()).collect())
        .collect()
}

#[test]
fn candidates_step_away_from_the_rule_within_what_the_kernels_take() {
    let f = one_row();
    let t = Tuning::default();
    // o's rule is 2: down to 1, up to 4 and 8.
    assert_eq!(
        specs(&directions(&f, &t, Key::Warps(1))),
        vec![vec!["o=1"], vec!["o=4", "o=8"]]
    );
    // q/k/v's rule is 1: up only; a column of 2 slices stops at 2.
    let short = BucketFacts {
        warps_max: [2, 8, 8, 8, 8],
        ..f
    };
    assert_eq!(
        specs(&directions(&short, &t, Key::Warps(0))),
        vec![vec!["qkv=2"]]
    );
    // From an incumbent that set the key.
    let o4: Tuning = "o=4".parse().unwrap();
    assert_eq!(
        specs(&directions(&f, &o4, Key::Warps(1))),
        vec![vec!["o=2", "o=1"], vec!["o=8"]]
    );
    assert_eq!(
        specs(&directions(&f, &t, Key::Blocks)),
        vec![vec!["blocks=3", "blocks=2"]]
    );
    assert_eq!(
        specs(&directions(&f, &t, Key::Prefetch)),
        vec![vec!["pf=2", "pf=1", "pf=0"], vec!["pf=8", "pf=16"]]
    );
    assert_eq!(specs(&directions(&f, &t, Key::Gemv)), vec![vec!["gemv=0"]]);
    assert_eq!(
        specs(&directions(&f, &t, Key::Cluster)),
        vec![vec!["cluster=0"]]
    );
    // Clustered: the cap changes nothing, so none is tried.
    assert!(directions(&f, &t, Key::Splits).is_empty());
    // Without clusters: caps below the rule's 12 splits only (above it they change nothing).
    let plain: Tuning = "cluster=0".parse().unwrap();
    assert_eq!(
        specs(&directions(&f, &plain, Key::Splits)),
        vec![vec![
            "splits=6,cluster=0",
            "splits=3,cluster=0",
            "splits=1,cluster=0"
        ]]
    );
    // The ring GEMV: one projection toggled at a time; its blocks 2 <-> 1.
    let ring = BucketFacts {
        ring_fits: true,
        ring_rule: true,
        ..f
    };
    assert_eq!(
        specs(&directions(&ring, &t, Key::Ring)),
        vec![
            vec!["cpa=14"],
            vec!["cpa=13"],
            vec!["cpa=11"],
            vec!["cpa=7"]
        ]
    );
    assert_eq!(
        specs(&directions(&ring, &t, Key::RingBlocks)),
        vec![vec!["cpab=1"]]
    );
    // Every candidate changes one key of the incumbent and parses back.
    for k in keys(&f, &t) {
        for dir in directions(&f, &t, k) {
            for c in dir {
                assert_ne!(c, t, "{k:?}");
                assert_eq!(c.to_string().parse::<Tuning>().unwrap(), c);
            }
        }
    }
}

#[test]
fn a_candidate_wins_only_by_more_than_the_noise() {
    let inc = [
        1.000, 1.002, 0.999, 1.001, 1.000, 1.003, 0.998, 1.000, 1.001,
    ];
    // 2% faster every turn: wins.
    let fast: Vec<f64> = inc.iter().map(|t| t * 0.98).collect();
    let v = Verdict::judge(&inc, &fast);
    assert!(v.wins, "{v:?}");
    assert!((v.gain - 0.02).abs() < 1e-9);
    assert!((v.incumbent - 1.000).abs() < 1e-12 && (v.candidate - 0.98).abs() < 1e-12);
    // 0.1% faster: below the least gain kept.
    let tie: Vec<f64> = inc.iter().map(|t| t * 0.999).collect();
    assert!(!Verdict::judge(&inc, &tie).wins);
    // Slower: never.
    let slow: Vec<f64> = inc.iter().map(|t| t * 1.05).collect();
    assert!(!Verdict::judge(&inc, &slow).wins);
    // 1% faster at the median, but turns spread by +-5%: the threshold grows past the gain.
    let noisy = [0.94, 1.04, 0.95, 1.05, 0.99, 0.93, 1.06, 0.99, 0.98];
    let v = Verdict::judge(&[1.0; 9], &noisy);
    assert!(v.threshold > 0.02 && !v.wins, "{v:?}");
    // No turns, or broken ones, never win.
    assert!(!Verdict::judge(&[], &[]).wins);
    assert!(!Verdict::judge(&[0.0, f64::NAN], &[0.5, 0.5]).wins);
}

#[test]
fn a_step_takes_the_choices_of_the_bucket_that_holds_it() {
    let mut choices = BucketChoices::default();
    assert!(choices.is_default());
    for (i, &b) in BUCKETS.iter().enumerate() {
        let t: Tuning = format!("splits={}", i + 1).parse().unwrap();
        choices.set(b, t).unwrap();
    }
    for rows in 1..=64 {
        let bucket = bucket_for(rows).unwrap();
        let i = BUCKETS.iter().position(|&b| b == bucket).unwrap();
        assert_eq!(
            choices.for_rows(rows).attention_splits,
            Some(i + 1),
            "{rows} rows"
        );
    }
    // Above the largest bucket (run eagerly): the largest's.
    assert_eq!(choices.for_rows(65).attention_splits, Some(7));
    assert_eq!(choices.for_rows(1000).attention_splits, Some(7));
    assert_eq!(
        choices.set(3, Tuning::default()).unwrap_err(),
        "3 is not a bucket (the buckets: [1, 2, 4, 8, 16, 32, 64])"
    );
    assert_eq!(
        choices.iter().map(|(b, _)| b).collect::<Vec<_>>(),
        BUCKETS.to_vec()
    );
    // Hand-set choices win over a bucket's, key by key.
    let options = DecoderOptions {
        tuning: "splits=9,pf=0".parse().unwrap(),
        buckets: choices,
        ..DecoderOptions::default()
    };
    assert_eq!(options.tuning_for(1).to_string(), "splits=9,pf=0");
    let o4: Tuning = "o=4".parse().unwrap();
    choices.set(2, o4).unwrap();
    let options = DecoderOptions {
        tuning: "pf=0".parse().unwrap(),
        buckets: choices,
        ..DecoderOptions::default()
    };
    assert_eq!(options.tuning_for(2).to_string(), "o=4,pf=0");
    assert_eq!(options.tuning_for(3).to_string(), "splits=3,pf=0");
}

#[test]
fn the_cache_folder_follows_its_variable() {
    use graphsmith_llama::search::{cache_dir, CACHE_DIR_VAR};
    // The only test of this binary that reads or sets the variable.
    std::env::set_var(CACHE_DIR_VAR, "/some/where");
    assert_eq!(
        cache_dir(),
        Some(std::path::PathBuf::from("/some/where/launch-choices"))
    );
    std::env::set_var(CACHE_DIR_VAR, "");
    let default = cache_dir();
    std::env::remove_var(CACHE_DIR_VAR);
    assert_eq!(default, cache_dir());
    if let Some(d) = default {
        assert!(d.ends_with("graphsmith/launch-choices"), "{}", d.display());
    }
}

/// A duel on a cost model: ms per step of each choice, without noise.
fn model_duel(
    cost: impl Fn(&Tuning) -> f64,
) -> impl FnMut(&Tuning, &Tuning) -> Result<Option<Verdict>, String> {
    move |inc, cand| {
        let (i, c) = (cost(inc), cost(cand));
        Ok(Some(Verdict::judge(&[i; 5], &[c; 5])))
    }
}

#[test]
fn the_descent_keeps_what_wins_and_walks_a_direction_while_it_wins() {
    use graphsmith_llama::search::descend;
    let f = one_row();
    // o faster with more warps (best at 8), down at 4, a prefetch of 2 MiB; the rest no better.
    let cost = |t: &Tuning| {
        let mut ms = 1.0;
        ms -= match t.warps_per_column[1] {
            Some(8) => 0.03,
            Some(4) => 0.02,
            _ => 0.0,
        };
        if t.warps_per_column[3] == Some(4) {
            ms -= 0.01;
        }
        if t.warps_per_column[3] == Some(8) {
            ms += 0.05;
        }
        if t.prefetch_mib == Some(2) {
            ms -= 0.005;
        }
        ms
    };
    let d = descend(&f, model_duel(cost), || false).unwrap();
    assert_eq!(d.tuning.to_string(), "o=8,down=4,pf=2");
    assert!(!d.late && d.skipped.is_empty());
    assert_eq!(d.last, Some(cost(&d.tuning)));
    // A direction stops at its first step that does not win: with nothing better than the
    // rules, each direction takes one duel.
    let rules = descend(&f, model_duel(|_| 1.0), || false).unwrap();
    assert_eq!(rules.tuning, Tuning::default());
    // gemv 1, o 2 (down, up), gate_up 1 (up), down 2, head 1, qkv 1, blocks 1, pf 2, cluster 1.
    assert_eq!(rules.duels, 12);
    // With no time, nothing is tried.
    let late = descend(&f, model_duel(cost), || true).unwrap();
    assert!(late.late && late.duels == 0 && late.tuning == Tuning::default());
    assert_eq!(late.last, None);
}

#[test]
fn a_candidate_that_cannot_run_ends_its_direction_and_an_error_ends_the_descent() {
    use graphsmith_llama::search::descend;
    let f = one_row();
    // The cuBLAS path cannot be captured (say): skipped, the rest goes on.
    let d = descend(
        &f,
        |inc: &Tuning, cand: &Tuning| {
            if cand.gemv == Some(false) {
                return Ok(None);
            }
            // Each MiB less prefetched is faster: the walk goes 2, 1, 0.
            let ms = |t: &Tuning| 0.96 + 0.01 * t.prefetch_mib.unwrap_or(4) as f64;
            Ok::<_, String>(Some(Verdict::judge(&[ms(inc); 3], &[ms(cand); 3])))
        },
        || false,
    )
    .unwrap();
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].1.to_string(), "gemv=0");
    assert_eq!(d.tuning.to_string(), "pf=0");
    let err = descend(
        &f,
        |_: &Tuning, _: &Tuning| Err("lost".to_string()),
        || false,
    );
    assert_eq!(err.unwrap_err(), "lost");
}
