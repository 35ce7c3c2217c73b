//! GPU tests (ignored without a GPU) of the launch choices measured at load: the searched
//! choices (and hand-set ones off the rules in every bucket) give the rules' logits within the
//! check's tolerance, a second load reads the cache and searches nothing (a corrupt entry is a
//! warning and a new search), and every bucket of a searched model is hazard-free and replays
//! what an eager step computes. A model of fewer sequences searches only its own buckets: an
//! entry that lacks some of a later model's is searched for them, and the union kept.
//!
//! The cache goes to a temporary folder (`GRAPHSMITH_CACHE_DIR`, set once per process).
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_search -- --ignored --test-threads=1`

mod common;
use common::cache_folder;

use std::path::PathBuf;

use graphsmith::Context;
use graphsmith_llama::search::{load, Lookup};
use graphsmith_llama::{
    random_weights, BucketChoices, Config, DecoderOptions, HostWeights, Mode, Model, Search,
    SearchReport, Tuning, BUCKETS,
};

fn noop(_: usize, _: usize) {}

fn make(
    ctx: &Context,
    m: &(Config, HostWeights),
    max_ctx: usize,
    options: DecoderOptions,
) -> Model {
    make_for(ctx, m, (64, max_ctx), options)
}

/// A graphs-mode model of `size` (rows, positions), the cache in [`cache_folder`].
fn make_for(
    ctx: &Context,
    (c, w): &(Config, HostWeights),
    size: (usize, usize),
    options: DecoderOptions,
) -> Model {
    cache_folder();
    Model::new(ctx, c.clone(), w, size, Mode::Graphs, options, noop).expect("the model is made")
}

/// The search report of a searched graphs-mode model of `size`, printed; the model is dropped.
fn searched_report(ctx: &Context, m: &(Config, HostWeights), size: (usize, usize)) -> SearchReport {
    let model = make_for(ctx, m, size, searched());
    let r = model
        .search_report()
        .expect("a searched model has a report")
        .clone();
    say(&r);
    r
}

/// Whatever an earlier load left for the key of a model of `size`: removed, so that the next
/// load starts from no entry. Returns the entry's file (in [`cache_folder`]).
fn no_entry(ctx: &Context, m: &(Config, HostWeights), size: (usize, usize)) -> PathBuf {
    let file = PathBuf::from(
        searched_report(ctx, m, size)
            .cache_file
            .expect("the entry's file"),
    );
    assert!(file.starts_with(cache_folder()), "{}", file.display());
    std::fs::remove_file(&file).unwrap();
    file
}

fn searched() -> DecoderOptions {
    DecoderOptions {
        search: Search::On,
        ..DecoderOptions::default()
    }
}

fn say(r: &SearchReport) {
    println!(
        "search: from cache {}, {:.0} ms (found in {:.0} ms), out of budget {}, file {:?}",
        r.from_cache, r.search_ms, r.found_in_ms, r.out_of_budget, r.cache_file
    );
    for b in &r.buckets {
        println!(
            "  bucket {:>2}: [{}] rules {:?} ms, chosen {:?} ms, {} candidates",
            b.bucket, b.tuning, b.rules_ms, b.chosen_ms, b.candidates
        );
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
}

/// Decodes `steps` steps at every batch of `batches` on both models (the same token ids, from
/// position 0) and holds `model`'s logits to `rules`' within the check's default tolerance
/// (`src/load/tolerance.rs`), the argmax where the rules' top-2 margin exceeds it.
fn same_logits(rules: &mut Model, model: &mut Model, batches: &[usize], steps: usize, what: &str) {
    let vocab = rules.config().vocab_size;
    for &batch in batches {
        let mut worst = 0.0f32;
        for t in 0..steps {
            let rows: Vec<(i32, i32)> = (0..batch)
                .map(|r| (((r * 131 + t * 17 + 5) % vocab) as i32, t as i32))
                .collect();
            rules.step(&rows).unwrap();
            model.poison_logits().unwrap();
            model.step(&rows).unwrap();
            let want = rules.logits(batch).unwrap();
            let got = model.logits(batch).unwrap();
            let at = format!("{what}: batch {batch} step {t}");
            worst = worst.max(common::assert_close(&at, &want, &got, vocab));
        }
        println!("{what}: batch {batch}: worst diff / tolerance {worst:.3}");
    }
}

fn small() -> (Config, HostWeights) {
    let c = Config::named("small").unwrap();
    let w = random_weights(&c, 5);
    (c, w)
}

const BATCHES: [usize; 8] = [1, 2, 3, 8, 16, 21, 32, 64];

#[test]
#[ignore = "needs a CUDA GPU"]
fn searched_choices_give_the_rules_logits_within_the_tolerance() {
    let ctx = Context::new(0).unwrap();
    let m = small();
    let mut rules = make(&ctx, &m, 96, DecoderOptions::default());
    assert!(
        rules.search_report().is_none(),
        "the library's default is the rules'"
    );
    let mut model = make(&ctx, &m, 96, searched());
    let report = model.search_report().expect("the search ran").clone();
    say(&report);
    assert_eq!(
        report.buckets.iter().map(|b| b.bucket).collect::<Vec<_>>(),
        BUCKETS.to_vec()
    );
    for b in &report.buckets {
        let t: Tuning = b.tuning.parse().unwrap();
        assert_eq!(
            model.options().buckets.for_rows(b.bucket),
            t,
            "bucket {}",
            b.bucket
        );
    }
    same_logits(&mut rules, &mut model, &BATCHES, 6, "searched");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn choices_off_the_rules_in_every_bucket_give_the_rules_logits() {
    let ctx = Context::new(0).unwrap();
    let m = small();
    // Each bucket its own choices, the GEMV kernels at 2 and 4 rows included.
    let mut buckets = BucketChoices::default();
    for (b, spec) in [
        (
            1,
            "o=4,down=4,gate_up=2,head=2,pf=8,cluster=0,splits=4,cpa=5",
        ),
        (2, "gemv=1,o=1,blocks=2"),
        (4, "gemv=1,down=8,pf=0"),
        (8, "splits=1"),
        (16, "cluster=1"),
        (32, "splits=2"),
        (64, "cluster=1"),
    ] {
        buckets.set(b, spec.parse().unwrap()).unwrap();
    }
    let options = DecoderOptions {
        buckets,
        ..DecoderOptions::default()
    };
    let mut rules = make(&ctx, &m, 96, DecoderOptions::default());
    let mut model = make(&ctx, &m, 96, options);
    assert!(model.uses_gemv(2) && model.uses_gemv(4) && !model.uses_gemv(8));
    same_logits(&mut rules, &mut model, &BATCHES, 6, "hand-set per bucket");
    model.capture_all().unwrap();
    for (bucket, r) in model.hazard_reports().unwrap() {
        assert!(r.is_clean(), "bucket {bucket}: {r:?}");
    }
    assert_eq!(model.verify_graphs().unwrap(), None);
}

/// The tiny config: a search of it takes a second or two.
fn tiny() -> (Config, HostWeights) {
    let c = Config::named("tiny").unwrap();
    let w = random_weights(&c, 9);
    (c, w)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_second_load_reads_the_cache_and_searches_nothing() {
    let ctx = Context::new(0).unwrap();
    let m = tiny();
    let file = no_entry(&ctx, &m, (64, 40));

    let fresh = make(&ctx, &m, 40, searched());
    let a = fresh.search_report().unwrap().clone();
    say(&a);
    assert!(!a.from_cache);
    assert!(a.search_ms > 0.0);
    assert_eq!(a.cache_file.as_deref(), Some(file.to_str().unwrap()));
    let dir = file.parent().unwrap();
    assert!(matches!(load(dir, &a.key), Lookup::Hit(_)));
    let choices = fresh.options().buckets;
    drop(fresh);

    let cached = make(&ctx, &m, 40, searched());
    let b = cached.search_report().unwrap().clone();
    say(&b);
    assert!(b.from_cache);
    assert_eq!(b.search_ms, 0.0);
    assert_eq!(b.found_in_ms, a.search_ms);
    assert_eq!(b.buckets, a.buckets);
    assert_eq!(cached.options().buckets, choices);
    // A context of another class is another key: searched again, in a file of its own.
    drop(cached);
    let other = make(&ctx, &m, 300, searched());
    let c = other.search_report().unwrap();
    assert!(!c.from_cache);
    assert_ne!(c.key, a.key);
    assert_ne!(c.cache_file, a.cache_file);
    drop(other);

    // A corrupt entry: a warning, and a new search that writes it again.
    std::fs::write(&file, "{ not json").unwrap();
    let again = make(&ctx, &m, 40, searched());
    let d = again.search_report().unwrap();
    say(d);
    assert!(!d.from_cache);
    assert!(
        d.notes.iter().any(|n| n.contains("not an entry")),
        "{:?}",
        d.notes
    );
    assert!(matches!(load(dir, &d.key), Lookup::Hit(_)));
    // Hand-set choices bypass the search.
    let expert = DecoderOptions {
        tuning: "pf=0".parse().unwrap(),
        ..searched()
    };
    assert!(make(&ctx, &m, 40, expert).search_report().is_none());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_bucket_of_a_searched_model_is_hazard_free() {
    let ctx = Context::new(0).unwrap();
    for m in [tiny(), small()] {
        let mut model = make(&ctx, &m, 96, searched());
        say(model.search_report().unwrap());
        model.capture_all().unwrap();
        let reports = model.hazard_reports().unwrap();
        assert_eq!(
            reports.iter().map(|r| r.0).collect::<Vec<_>>(),
            BUCKETS.to_vec()
        );
        for (bucket, r) in &reports {
            assert!(r.is_clean(), "{}: bucket {bucket}: {r:?}", m.0.name);
        }
        // Each bucket's graph computes what an eager step with the same choices computes.
        assert_eq!(model.verify_graphs().unwrap(), None, "{}", m.0.name);
        assert!(model.attention_counters().unwrap().iter().all(|&n| n == 0));
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_entry_lacking_a_models_buckets_is_searched_for_them_and_keeps_the_union() {
    let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
    let m = tiny();
    // A context class no other test of this file uses (1024 positions).
    let max_ctx = 600;
    let buckets = |r: &SearchReport| r.buckets.iter().map(|b| b.bucket).collect::<Vec<_>>();
    let file = no_entry(&ctx, &m, (1, max_ctx));
    let dir = file.parent().unwrap().to_path_buf();

    // Three sequences: buckets 1, 2 and 4 searched, and no others.
    let a = searched_report(&ctx, &m, (3, max_ctx));
    assert!(!a.from_cache);
    assert_eq!(buckets(&a), [1, 2, 4]);
    let Lookup::Hit(entry) = load(&dir, &a.key) else {
        panic!("the entry of three sequences is written");
    };
    assert_eq!(entry.buckets, a.buckets);

    // One sequence: bucket 1 is in the entry, read and nothing searched.
    let b = searched_report(&ctx, &m, (1, max_ctx));
    assert!(b.from_cache, "{:?}", b.notes);
    assert_eq!(b.search_ms, 0.0);
    assert_eq!(b.buckets, a.buckets[..1].to_vec());

    // Eight sequences: bucket 8 is missing, so the model's buckets are searched and the union
    // of both searches stored.
    let c = searched_report(&ctx, &m, (8, max_ctx));
    assert!(!c.from_cache);
    assert!(c.search_ms > 0.0);
    assert_eq!(buckets(&c), [1, 2, 4, 8]);
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("no choices for buckets [8]")),
        "{:?}",
        c.notes
    );

    // Four sequences after both: read, nothing searched (the union covers 1, 2 and 4).
    let d = searched_report(&ctx, &m, (4, max_ctx));
    assert!(d.from_cache, "{:?}", d.notes);
    assert_eq!(d.search_ms, 0.0);
    assert_eq!(d.buckets, c.buckets[..3].to_vec());
    let Lookup::Hit(entry) = load(&dir, &a.key) else {
        panic!("the union is written");
    };
    assert_eq!(
        entry.buckets.iter().map(|b| b.bucket).collect::<Vec<_>>(),
        [1, 2, 4, 8]
    );
    assert_eq!(&entry.buckets[..3], &d.buckets[..]);
    // A model of 64 sequences lacks 16, 32 and 64: searched again, all seven kept.
    let e = searched_report(&ctx, &m, (64, max_ctx));
    assert!(!e.from_cache);
    assert_eq!(buckets(&e), BUCKETS.to_vec());
}
