//! GPU tests of the weight swap's parts: swaps back and forth reuse each executable's
//! relocation index, the switch's parts add up, the swapped model gives the bits of a model
//! built on the new weights, and `swap-bench`'s figures on the tiny config.
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_swap -- --ignored --test-threads=1`

mod common;

use graphsmith::Context;
use graphsmith_llama::{
    bench_swap, generate, random_weights, Config, DecoderOptions, HostWeights, Mode, Model, Source,
    SwapBench, SwapReport, BUCKETS,
};

fn ctx() -> Context {
    Context::new(0).expect("a CUDA GPU is needed for this test")
}

/// The parts of a swap made in place: every bucket switched, the parts within the whole.
fn assert_in_place(what: &str, r: &SwapReport) {
    assert_eq!(r.method, "relocate", "{what}: {r:?}");
    assert_eq!(r.executables, BUCKETS.len(), "{what}: {r:?}");
    assert!(
        r.nodes_updated > 0 && r.words >= r.nodes_updated,
        "{what}: {r:?}"
    );
    assert!(r.driver_ms > 0.0 && r.host_ms > 0.0, "{what}: {r:?}");
    // Both are measured inside the switch's own clock (to the nanosecond): 1 µs of rounding.
    assert!(
        r.driver_ms + r.host_ms <= r.switch_ms + 1e-3,
        "{what}: {r:?}"
    );
    assert_eq!(r.fallback_ms, 0.0, "{what}: {r:?}");
    assert!(r.verify_ms > 0.0, "{what}: {r:?}");
}

/// Decodes `prompt` greedily with `model` (logits poisoned first) and with an eager model
/// built on `w`, and asserts the same tokens and the same logits, bit for bit.
fn assert_same_as_built_on(model: &mut Model, ctx: &Context, c: &Config, w: &HostWeights) {
    let prompt = [3, 1, 4, 1, 5];
    model.poison_logits().unwrap();
    let got = generate(model, &prompt, 16).unwrap();
    let mut fresh = common::model(ctx, c, w, (1, 64), Mode::Eager);
    let want = generate(&mut fresh, &prompt, 16).unwrap();
    assert_eq!(got.tokens, want.tokens);
    let logits = model.logits(1).unwrap();
    assert!(logits.iter().all(|v| v.is_finite()));
    assert_eq!(logits, fresh.logits(1).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn swaps_back_and_forth_reuse_the_index_and_give_the_new_models_bits() {
    let ctx = ctx();
    let c = Config::named("tiny").unwrap();
    let (w, w2) = (random_weights(&c, 21), random_weights(&c, 22));
    // Capacity 64: the model holds every bucket, and each swap switches every one.
    let mut model = common::model(&ctx, &c, &w, (64, 64), Mode::Graphs);
    model.capture_all().unwrap();

    let there = model.swap_weights(&w2).unwrap();
    assert_in_place("there", &there);
    assert!(there.index_ms > 0.0, "the first swap indexes: {there:?}");
    assert_same_as_built_on(&mut model, &ctx, &c, &w2);

    let back = model.swap_weights(&w).unwrap();
    assert_in_place("back", &back);
    assert_eq!(back.index_ms, 0.0, "every index is kept: {back:?}");
    assert_eq!(back.nodes_updated, there.nodes_updated);
    assert_eq!(back.words, there.words);
    assert_same_as_built_on(&mut model, &ctx, &c, &w);
    for (bucket, r) in model.hazard_reports().unwrap() {
        assert!(r.is_clean(), "bucket {bucket} after two swaps: {r:?}");
    }

    // A re-capture gives every executable a new graph: the next swap indexes it again.
    model.recapture_all().unwrap();
    let third = model.swap_weights(&w2).unwrap();
    assert_in_place("after a re-capture", &third);
    assert!(third.index_ms > 0.0, "{third:?}");
    assert_same_as_built_on(&mut model, &ctx, &c, &w2);
    println!("swaps: there {there:?}\nback {back:?}\nafter a re-capture {third:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn swap_bench_reports_switch_verification_and_recapture_apart() {
    let ctx = ctx();
    let source = Source::Random {
        config: "tiny".into(),
        seed: 0,
    };
    let swap_source = Source::Random {
        config: "tiny".into(),
        seed: 1,
    };
    let what = SwapBench {
        source: &source,
        swap_source: &swap_source,
        rounds: 3,
        options: DecoderOptions::default(),
        progress: false,
    };
    let r = bench_swap(|| Ok(ctx.clone()), &what).unwrap();
    println!("{}", serde_json::to_string(&r).unwrap());
    assert!(r.all_relocated, "{r:?}");
    assert_eq!((r.swaps.len(), r.recaptures_ms.len()), (3, 3));
    assert_eq!(r.executables, BUCKETS.len());
    assert!(r.index_ms_first > 0.0);
    assert!(r.swaps[1..].iter().all(|s| s.index_ms == 0.0), "{r:?}");
    assert!(r.switch_ms > 0.0 && r.driver_ms > 0.0 && r.verify_ms > 0.0 && r.recapture_ms > 0.0);
    assert!(r.switch_over_driver >= 1.0, "{r:?}");
    assert!(r.nodes_updated > 0);
}
