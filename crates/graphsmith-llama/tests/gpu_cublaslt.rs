//! GPU tests (ignored without a GPU) of the matmuls on cuBLASLt: its logits equal cuBLAS's
//! within the check's tolerance at batch 2, 8 and 64 and after a prefill chunk, eager and
//! graphs; every bucket (and every prefill graph) hazard-free; the algorithms measured at a
//! first load are read back from the cache at the second, unchanged, with nothing measured.
//! The last test is a benchmark (it reports, never asserts timings): cuBLASLt against cuBLAS at
//! batch 8 and 64 on two shapes, graphs, turn by turn in one process.
//!
//! The cache goes to a temporary folder (`GRAPHSMITH_CACHE_DIR`, set once per process).
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_cublaslt -- --ignored --test-threads=1 --nocapture`

mod common;
use common::cache_folder;

use graphsmith::Context;
use graphsmith_llama::kernels::Projection;
use graphsmith_llama::{
    random_weights, top2, Config, DecoderOptions, Gemm, HostWeights, Mode, Model, Search,
    Tolerance, BUCKETS,
};

fn gpu() -> Context {
    Context::new(0).expect("these tests need a CUDA GPU (Context::new(0) failed)")
}

fn shape(name: &str, seed: u64) -> (Config, HostWeights) {
    let c = Config::named(name).expect("a named config");
    let w = random_weights(&c, seed);
    (c, w)
}

fn options(gemm: Gemm, search: Search) -> DecoderOptions {
    DecoderOptions {
        gemm,
        search,
        ..DecoderOptions::default()
    }
}

fn make(
    ctx: &Context,
    (c, w): &(Config, HostWeights),
    mode: Mode,
    options: DecoderOptions,
) -> Model {
    cache_folder();
    let mut m = Model::new(ctx, c.clone(), w, (64, 160), mode, options, |_, _| {})
        .unwrap_or_else(|e| panic!("the model ({:?}, {mode:?}) is made: {e}", options.gemm));
    m.poison_logits().expect("the logits are poisoned");
    m
}

/// Steps both models `steps` times at each batch (the same token ids, from position 0) and
/// holds `model`'s logits to `reference`'s.
fn same_logits(reference: &mut Model, model: &mut Model, batches: &[usize], what: &str) {
    let vocab = reference.config().vocab_size;
    for &batch in batches {
        let mut worst = 0.0f32;
        for t in 0..5 {
            let rows: Vec<(i32, i32)> = (0..batch)
                .map(|r| (((r * 131 + t * 17 + 5) % vocab) as i32, t as i32))
                .collect();
            reference.step(&rows).expect("a cuBLAS step");
            model.poison_logits().expect("the logits are poisoned");
            model.step(&rows).expect("a cuBLASLt step");
            let want = reference.logits(batch).expect("logits");
            let got = model.logits(batch).expect("logits");
            let at = format!("{what}: batch {batch} step {t}");
            worst = worst.max(common::assert_close(&at, &want, &got, vocab));
        }
        println!("{what}: batch {batch}: worst diff / tolerance {worst:.3}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cublaslt_gives_cublas_logits_at_batch_2_8_and_64_eager_and_graphs() {
    let ctx = gpu();
    let m = shape("small", 5);
    for mode in [Mode::Eager, Mode::Graphs] {
        let mut reference = make(&ctx, &m, mode, options(Gemm::Cublas, Search::Off));
        let mut lt = make(&ctx, &m, mode, options(Gemm::CublasLt, Search::Off));
        for rows in [1, 2, 8, 64] {
            assert!(lt.uses_cublaslt(rows), "{mode:?}: {rows} rows on cuBLASLt");
            assert!(!reference.uses_cublaslt(rows));
        }
        same_logits(&mut reference, &mut lt, &[2, 8, 64], &format!("{mode:?}"));
        for p in Projection::ALL {
            assert!(
                lt.cublaslt_algo(8, p).is_some(),
                "{mode:?}: the {} matmul at 8 rows was planned",
                p.name()
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_prefill_chunk_on_cublaslt_gives_cublas_logits_eager_and_graphs() {
    let ctx = gpu();
    let m = shape("small", 11);
    let vocab = m.0.vocab_size;
    let prompts: Vec<Vec<i32>> = [40usize, 25, 64]
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| ((i * 131 + s * 977 + 7) % vocab) as i32)
                .collect()
        })
        .collect();
    let views: Vec<&[i32]> = prompts.iter().map(|p| p.as_slice()).collect();
    for mode in [Mode::Eager, Mode::Graphs] {
        let mut reference = make(&ctx, &m, mode, options(Gemm::Cublas, Search::Off));
        let mut lt = make(&ctx, &m, mode, options(Gemm::CublasLt, Search::Off));
        for chunk in [32, 128] {
            reference
                .prefill(&views, chunk)
                .expect("the cuBLAS prefill");
            lt.poison_logits().expect("the logits are poisoned");
            lt.prefill(&views, chunk).expect("the cuBLASLt prefill");
            let want = reference.logits(views.len()).expect("logits");
            let got = lt.logits(views.len()).expect("logits");
            let what = format!("{mode:?} prefill in chunks of {chunk}");
            let worst = common::assert_close(&what, &want, &got, vocab);
            let next = (
                reference.next_tokens(views.len()).expect("next tokens"),
                lt.next_tokens(views.len()).expect("next tokens"),
            );
            for (s, w) in want.chunks(vocab).enumerate() {
                // The first new token is each row's argmax: equal where the margin is clear.
                if top2(w).1 > Tolerance::default().at(w) {
                    assert_eq!(
                        next.0[s], next.1[s],
                        "{what}: sequence {s}'s first new token"
                    );
                }
            }
            println!("{what}: worst diff / tolerance {worst:.3}");
        }
        if mode == Mode::Graphs {
            let reports = lt.prefill_hazard_reports().expect("prefill hazard reports");
            assert!(!reports.is_empty(), "no prefill graph was captured");
            for (bucket, r) in reports {
                assert!(
                    r.hazards.is_empty(),
                    "prefill bucket {bucket}: {:?}",
                    r.hazards
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_cublaslt_bucket_is_hazard_free_and_replays_an_eager_step() {
    let ctx = gpu();
    let m = shape("small", 7);
    for options in [
        options(Gemm::CublasLt, Search::Off),
        options(Gemm::Auto, Search::On),
    ] {
        let mut model = make(&ctx, &m, Mode::Graphs, options);
        model.capture_all().expect("every bucket is captured");
        let reports = model.hazard_reports().expect("hazard reports");
        assert_eq!(
            reports.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
            BUCKETS.to_vec()
        );
        for (bucket, r) in reports {
            assert!(r.is_clean(), "{:?} bucket {bucket}: {r:?}", options.gemm);
        }
        assert_eq!(model.verify_graphs().expect("verified"), None);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_measured_algorithms_are_read_back_from_the_cache_on_a_second_load() {
    let ctx = gpu();
    let m = shape("small", 3);
    let searched = options(Gemm::Auto, Search::On);
    // Another test of this process may have cached this shape's entry: searched afresh here.
    let entries = cache_folder().join("launch-choices");
    if entries.exists() {
        std::fs::remove_dir_all(&entries).expect("the cached entries are removed");
    }
    let mut first = make(&ctx, &m, Mode::Graphs, searched);
    let report = first.search_report().expect("the search ran").clone();
    for n in &report.notes {
        println!("note: {n}");
    }
    let lt = report
        .cublaslt
        .clone()
        .expect("cuBLASLt's algorithms were measured");
    assert!(report.cublaslt_measured && !report.from_cache);
    let want: Vec<(usize, Projection)> = BUCKETS
        .iter()
        .filter(|&&b| b > 1)
        .flat_map(|&b| Projection::ALL.map(|p| (b, p)))
        .collect();
    let got: Vec<(usize, Projection)> = lt.choices.iter().map(|c| (c.bucket, c.matmul)).collect();
    assert_eq!(got, want, "every bucket above one row, every matmul");
    for c in &lt.choices {
        println!(
            "bucket {:>2} {:>8}: candidate {} of {}, {:?} ms (heuristic's first {:?} ms)",
            c.bucket,
            c.matmul.name(),
            c.rank,
            c.candidates,
            c.chosen_ms,
            c.heuristic_ms
        );
        assert!(c.candidates >= 1 && c.rank < c.candidates, "{c:?}");
        assert!(c.chosen_ms.is_some_and(|t| t > 0.0), "{c:?}");
        assert_eq!(first.cublaslt_algo(c.bucket, c.matmul), Some(c.algo));
    }
    // Up to 8 rows the search may keep the GEMV kernels; above, cuBLASLt runs.
    assert!(first.uses_cublaslt(16) && first.uses_cublaslt(64));
    assert!(!first.uses_cublaslt(1), "one row stays on the GEMV kernels");
    let mut reference = make(&ctx, &m, Mode::Graphs, options(Gemm::Cublas, Search::Off));
    same_logits(&mut reference, &mut first, &[2, 8, 64], "auto, searched");
    drop(first);

    let second = make(&ctx, &m, Mode::Graphs, searched);
    let again = second.search_report().expect("the cache was read");
    assert!(again.from_cache, "a second load reads the cache");
    assert!(
        !again.cublaslt_measured,
        "nothing measured: {:?}",
        again.notes
    );
    assert_eq!(again.search_ms, 0.0);
    assert_eq!(again.cublaslt.as_ref(), Some(&lt), "the same algorithms");
    for c in &lt.choices {
        assert_eq!(
            second.cublaslt_algo(c.bucket, c.matmul),
            Some(c.algo),
            "bucket {} {}: the cached algorithm is the one used",
            c.bucket,
            c.matmul.name()
        );
    }
    assert!(second.uses_cublaslt(64));
}

/// Device ms per step of `model` at `batch` rows: `steps` graph replays between CUDA events.
fn turn(ctx: &Context, model: &mut Model, batch: usize, steps: usize) -> f64 {
    let start = ctx.event("bench/start", true).expect("an event");
    let end = ctx.event("bench/end", true).expect("an event");
    let rows: Vec<(i32, i32)> = (0..batch).map(|r| ((r * 31 + 1) as i32, 0)).collect();
    model.step(&rows).expect("a first step");
    model.stream().record(&start).expect("recorded");
    model.run_free(batch, steps).expect("steps");
    model.stream().record(&end).expect("recorded");
    end.synchronize().expect("synchronised");
    end.elapsed_ms_since(&start).expect("elapsed") as f64 / steps as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Reports (asserts nothing about time): graphs steps at batch 8 and 64 with cuBLAS, cuBLASLt
/// on the heuristic's first algorithms, and cuBLASLt with the measured ones, on the shapes of
/// `GRAPHSMITH_LT_BENCH_SHAPES` (default `small,1b`), turn by turn in one process.
#[test]
#[ignore = "needs a CUDA GPU"]
fn bench_cublaslt_against_cublas() {
    let ctx = gpu();
    let shapes = std::env::var("GRAPHSMITH_LT_BENCH_SHAPES").unwrap_or("small,1b".into());
    for name in shapes.split(',') {
        let m = shape(name, 1);
        let mut contenders = [
            (
                "cublas",
                make(&ctx, &m, Mode::Graphs, options(Gemm::Cublas, Search::On)),
            ),
            (
                "cublaslt-heuristic",
                make(&ctx, &m, Mode::Graphs, options(Gemm::CublasLt, Search::Off)),
            ),
            (
                "cublaslt-measured",
                make(&ctx, &m, Mode::Graphs, options(Gemm::CublasLt, Search::On)),
            ),
        ];
        for batch in [8, 64] {
            let steps = 100;
            let mut times = vec![Vec::new(); contenders.len()];
            for (_, model) in contenders.iter_mut() {
                turn(&ctx, model, batch, 20);
            }
            for t in 0..15 {
                for j in 0..contenders.len() {
                    let i = if t % 2 == 0 {
                        j
                    } else {
                        contenders.len() - 1 - j
                    };
                    times[i].push(turn(&ctx, &mut contenders[i].1, batch, steps));
                }
            }
            let base = median(times[0].clone());
            for (i, (label, _)) in contenders.iter().enumerate() {
                let ms = median(times[i].clone());
                println!(
                    "bench {name} batch {batch:>2} {label:<19} {ms:.4} ms/step ({:.3}x cuBLAS)",
                    base / ms
                );
            }
        }
    }
}
