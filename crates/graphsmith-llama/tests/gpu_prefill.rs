//! GPU tests (ignored without a GPU): the chunked prefill against a step-by-step prefill of the
//! same prompts on a model of its own: the logits of each sequence's last prompt token and its
//! first new token, every written position of the KV cache (both caches poisoned with NaN
//! first), and decode steps after it, within the bf16 tolerance of `check`; for chunk sizes that
//! divide the prompt and ones that do not, prompts longer than a chunk, batch 1 and a batch of
//! 8 prompts of different lengths, eager and graphs (graph replays bit-identical to the first
//! prefill, every prefill graph hazard-free); head_dims 16 (the rows kernel), 64 and 128 (the
//! tensor-core kernel), grouped and multi-head attention.
//!
//! The tensor-core prefill attention (`ll_prefill_flash_*`) alone against a host reference of
//! causal attention (`flash`), and a benchmark of it against the rows kernel (prints, never
//! asserts timings).
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_prefill -- --ignored --test-threads=1`

mod common;
mod flash;

use graphsmith::Context;
use graphsmith_llama::kernels::{Kernels, PrefillAttentionKind, FLASH_HEAD_DIMS};
use graphsmith_llama::{
    generate_with, random_weights, top2, Config, HostWeights, Mode, Model, PrefillMode, Tolerance,
};

fn gpu() -> Context {
    Context::new(0).expect("these tests need a CUDA GPU (Context::new(0) failed)")
}

fn config(name: &str, seed: u64) -> (Config, HostWeights) {
    let c = Config::named(name).expect("a named config");
    let w = random_weights(&c, seed);
    (c, w)
}

/// Prompts of `lens` tokens with ids spread over the vocabulary (never all zeros).
fn prompts(lens: &[usize], vocab: usize) -> Vec<Vec<i32>> {
    lens.iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n)
                .map(|i| ((i * 131 + s * 977 + 7) % vocab.min(4096)) as i32)
                .collect()
        })
        .collect()
}

fn bf16(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// What a prefill left: per sequence its last prompt token's logits and its first new token,
/// and per layer the written positions of the K and V caches (sequence by sequence, head by
/// head, position by position).
struct Prefilled {
    logits: Vec<Vec<f32>>,
    next: Vec<i32>,
    kv: Vec<(Vec<f32>, Vec<f32>)>,
}

fn written_kv(
    model: &mut Model,
    c: &Config,
    lens: &[usize],
    max_ctx: usize,
) -> Vec<(Vec<f32>, Vec<f32>)> {
    let (nkv, hd) = (c.num_key_value_heads, c.head_dim);
    (0..c.num_hidden_layers)
        .map(|l| {
            let (k, v) = model.kv_cache(l).expect("the caches are read");
            let pick = |cache: &[u16]| {
                let mut out = Vec::new();
                for (s, &n) in lens.iter().enumerate() {
                    for h in 0..nkv {
                        let at = (s * nkv + h) * max_ctx * hd;
                        out.extend(cache[at..at + n * hd].iter().map(|&b| bf16(b)));
                    }
                }
                out
            };
            (pick(&k), pick(&v))
        })
        .collect()
}

fn new_model(
    ctx: &Context,
    c: &Config,
    w: &HostWeights,
    rows: usize,
    max_ctx: usize,
    mode: Mode,
) -> Model {
    let mut m = common::model(ctx, c, w, (rows, max_ctx), mode);
    m.poison_kv_cache().expect("the caches are poisoned");
    m.poison_logits().expect("the logits are poisoned");
    m
}

/// The reference: every sequence stepped one token at a time, together (a sequence whose
/// prompt has ended is padding); each sequence's logits taken right after its last token.
fn by_steps(
    ctx: &Context,
    c: &Config,
    w: &HostWeights,
    ps: &[Vec<i32>],
    max_ctx: usize,
    mode: Mode,
) -> (Model, Prefilled) {
    let lens: Vec<usize> = ps.iter().map(|p| p.len()).collect();
    let mut m = new_model(ctx, c, w, ps.len(), max_ctx, mode);
    let v = c.vocab_size;
    let mut logits = vec![Vec::new(); ps.len()];
    let mut next = vec![-1; ps.len()];
    for t in 0..lens.iter().copied().max().unwrap_or(0) {
        let rows: Vec<(i32, i32)> = ps
            .iter()
            .map(|p| {
                if t < p.len() {
                    (p[t], t as i32)
                } else {
                    (0, -1)
                }
            })
            .collect();
        m.step(&rows).expect("a step");
        if lens.iter().any(|&n| n == t + 1) {
            let all = m.logits(ps.len()).expect("logits");
            let toks = m.next_tokens(ps.len()).expect("next tokens");
            for (s, &n) in lens.iter().enumerate() {
                if n == t + 1 {
                    logits[s] = all[s * v..(s + 1) * v].to_vec();
                    next[s] = toks[s];
                }
            }
        }
    }
    let kv = written_kv(&mut m, c, &lens, max_ctx);
    (m, Prefilled { logits, next, kv })
}

/// The same prompts prefilled in chunks of `chunk` rows.
fn chunked(m: &mut Model, c: &Config, ps: &[Vec<i32>], chunk: usize, max_ctx: usize) -> Prefilled {
    let lens: Vec<usize> = ps.iter().map(|p| p.len()).collect();
    let views: Vec<&[i32]> = ps.iter().map(|p| p.as_slice()).collect();
    let run = m.prefill(&views, chunk).expect("the prefill runs");
    let rows: usize = lens.iter().sum();
    assert_eq!(run.tokens, rows);
    assert_eq!(
        run.buckets.len(),
        rows.div_ceil(chunk),
        "chunks of a prefill of {rows} rows in chunks of {chunk}"
    );
    let v = c.vocab_size;
    let all = m.logits(ps.len()).expect("logits");
    let logits = (0..ps.len())
        .map(|s| all[s * v..(s + 1) * v].to_vec())
        .collect();
    let next = m.next_tokens(ps.len()).expect("next tokens");
    let kv = written_kv(m, c, &lens, max_ctx);
    Prefilled { logits, next, kv }
}

/// Logits within `check`'s tolerance of the reference's (and the argmax equal where the
/// reference's top-2 margin exceeds it), every written cache value finite and within the
/// tolerance of the reference layer's largest value.
fn assert_close(what: &str, ours: &Prefilled, reference: &Prefilled) {
    let tol = Tolerance::default();
    for (s, (a, b)) in ours.logits.iter().zip(&reference.logits).enumerate() {
        assert_eq!(a.len(), b.len(), "{what}: sequence {s}: logits");
        let t = tol.at(b);
        let (i, diff) = a
            .iter()
            .zip(b)
            .map(|(x, y)| {
                if x.is_nan() {
                    f32::INFINITY
                } else {
                    (x - y).abs()
                }
            })
            .enumerate()
            .fold((0, 0.0f32), |m, (i, d)| if d > m.1 { (i, d) } else { m });
        assert!(
            diff <= t,
            "{what}: sequence {s}: logit {i} differs by {diff} (tolerance {t}): {} against {}",
            a[i],
            b[i]
        );
        let (top, margin) = top2(b);
        if margin > t {
            assert_eq!(top2(a).0, top, "{what}: sequence {s}: argmax");
            assert_eq!(
                ours.next[s], top as i32,
                "{what}: sequence {s}: first new token"
            );
            assert_eq!(
                reference.next[s], top as i32,
                "{what}: sequence {s}: reference's token"
            );
        }
    }
    for (l, ((k, v), (rk, rv))) in ours.kv.iter().zip(&reference.kv).enumerate() {
        for (name, a, b) in [("K", k, rk), ("V", v, rv)] {
            assert_eq!(a.len(), b.len());
            assert!(
                b.iter().all(|x| x.is_finite()),
                "{what}: layer {l} {name}: the reference left a position unwritten"
            );
            let t = tol.at(b);
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(
                    x.is_finite() && (x - y).abs() <= t,
                    "{what}: layer {l} {name} cache value {i}: {x} against {y} (tolerance {t})"
                );
            }
        }
    }
}

/// Decode steps after the prefill on both models: each step's logits within the tolerance.
fn assert_decode_goes_on(
    what: &str,
    ours: &mut Model,
    reference: &mut Model,
    c: &Config,
    ps: &[Vec<i32>],
    first: &[i32],
) {
    let v = c.vocab_size;
    let mut toks = first.to_vec();
    for i in 0..4 {
        let rows: Vec<(i32, i32)> = ps
            .iter()
            .zip(&toks)
            .map(|(p, &t)| (t, (p.len() + i) as i32))
            .collect();
        ours.step(&rows).expect("a step after the prefill");
        reference.step(&rows).expect("a step");
        let (a, b) = (
            ours.logits(ps.len()).unwrap(),
            reference.logits(ps.len()).unwrap(),
        );
        for s in 0..ps.len() {
            let (x, y) = (&a[s * v..(s + 1) * v], &b[s * v..(s + 1) * v]);
            let t = Tolerance::default().at(y);
            let diff = x
                .iter()
                .zip(y)
                .map(|(p, q)| {
                    if p.is_nan() {
                        f32::INFINITY
                    } else {
                        (p - q).abs()
                    }
                })
                .fold(0.0f32, f32::max);
            assert!(diff <= t, "{what}: decode step {i} after the prefill, sequence {s}: logits differ by {diff} (tolerance {t})");
        }
        toks = reference.next_tokens(ps.len()).unwrap();
    }
}

/// Chunked prefills of `lens` (each chunk size, eager and graphs) against step by step, on the
/// named config.
fn compare(name: &str, seed: u64, lens: &[usize], chunks: &[usize]) {
    let c = Config::named(name).expect("a named config");
    compare_config(&c, seed, lens, chunks);
}

/// [`compare`] on any config (random weights from `seed`).
fn compare_config(c: &Config, seed: u64, lens: &[usize], chunks: &[usize]) {
    let ctx = gpu();
    let name = c.name.as_str();
    let w = random_weights(c, seed);
    let c = c.clone();
    let ps = prompts(lens, c.vocab_size);
    let max_ctx = lens.iter().copied().max().unwrap_or(1) + 8;
    for mode in [Mode::Eager, Mode::Graphs] {
        let (mut reference_model, reference) = by_steps(&ctx, &c, &w, &ps, max_ctx, mode);
        for &chunk in chunks {
            let what = format!("{name} {lens:?} {mode:?} chunks of {chunk}");
            let mut m = new_model(&ctx, &c, &w, ps.len(), max_ctx, mode);
            let got = chunked(&mut m, &c, &ps, chunk, max_ctx);
            assert_close(&what, &got, &reference);
            if mode == Mode::Graphs {
                // The second prefill replays the graphs the first captured: the same bits.
                m.poison_logits().unwrap();
                let again = chunked(&mut m, &c, &ps, chunk, max_ctx);
                assert_eq!(
                    again.logits, got.logits,
                    "{what}: a replayed prefill differs from the first"
                );
                assert_eq!(
                    again.kv, got.kv,
                    "{what}: a replayed prefill's cache differs from the first"
                );
                let reports = m.prefill_hazard_reports().unwrap();
                assert!(!reports.is_empty(), "{what}: no prefill graph was captured");
                for (b, r) in reports {
                    assert!(
                        r.hazards.is_empty(),
                        "{what}: prefill bucket {b}: {:?}",
                        r.hazards
                    );
                }
            }
            assert_decode_goes_on(
                &what,
                &mut m,
                &mut reference_model,
                &c,
                &ps,
                &reference.next,
            );
            // The reference model stepped on: made again for the next chunk size.
            (reference_model, _) = by_steps(&ctx, &c, &w, &ps, max_ctx, mode);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn one_prompt_longer_than_a_chunk_matches_step_by_step() {
    // 300 rows: chunks of 16 and 100 divide it, 64 and 128 do not; 512 holds it whole.
    compare("tiny", 3, &[300], &[16, 64, 100, 128, 512]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_batch_of_different_lengths_matches_step_by_step() {
    // The batch8 set's lengths, then with two prompts longer than a chunk.
    compare("tiny", 5, &[5, 17, 32, 9, 48, 23, 41, 12], &[32, 100, 512]);
    compare("tiny", 6, &[5, 170, 32, 9, 300, 23, 41, 12], &[64, 200]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_small_config_matches_step_by_step() {
    // 9 query heads over 3 of head_dim 64 (the _2 kernels), 30 layers.
    compare("small", 8, &[200], &[64, 512]);
    compare("small", 9, &[33, 7, 120], &[48]);
}

/// A 2-layer config of `nq` query heads over `nkv` key/value heads of `head_dim`.
fn heads(name: &str, nq: usize, nkv: usize, head_dim: usize) -> Config {
    Config {
        name: name.into(),
        hidden_size: 256,
        intermediate_size: 512,
        num_attention_heads: nq,
        num_key_value_heads: nkv,
        head_dim,
        max_position_embeddings: 4096,
        ..Config::named("tiny").expect("the tiny config")
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn head_dim_128_and_multi_head_attention_match_step_by_step() {
    // The tensor-core kernel at head_dim 128 (groups of 4 and 1) and 64 (group 1): one prompt
    // over several chunks (tiles of 64 rows cut mid-prompt), and a batch sharing chunks.
    for (i, c) in [
        heads("hd128-gqa", 8, 2, 128),
        heads("hd128-mha", 4, 4, 128),
        heads("hd64-mha", 4, 4, 64),
    ]
    .iter()
    .enumerate()
    {
        compare_config(c, 20 + i as u64, &[300], &[100, 512]);
        compare_config(c, 30 + i as u64, &[5, 170, 41], &[64, 200]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_2048_token_prompt_prefills_in_chunks() {
    let ctx = gpu();
    let (c, w) = config("small", 12);
    let ps = prompts(&[2048], c.vocab_size);
    let max_ctx = 2048 + 8;
    let (_, reference) = by_steps(&ctx, &c, &w, &ps, max_ctx, Mode::Graphs);
    let mut m = new_model(&ctx, &c, &w, 1, max_ctx, Mode::Graphs);
    let got = chunked(&mut m, &c, &ps, 512, max_ctx);
    assert_close("small 2048 graphs chunks of 512", &got, &reference);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn bad_prefill_requests_are_refused_with_their_reason() {
    let ctx = gpu();
    let (c, w) = config("tiny", 1);
    let mut m = common::model(&ctx, &c, &w, (2, 16), Mode::Eager);
    let long = vec![1i32; 17];
    let three: [&[i32]; 3] = [&[1], &[2], &[3]];
    let err = |m: &mut Model, ps: &[&[i32]], chunk| m.prefill(ps, chunk).unwrap_err().to_string();
    assert_eq!(
        err(&mut m, &[&long], 64),
        "bad input: prompt 0 of 17 tokens is longer than the context of 16"
    );
    assert_eq!(
        err(&mut m, &three, 64),
        "bad input: Model::prefill: a batch of 3 sequences, but the model was made for at most 2; \
         make the model with a capacity of at least 3 (`Model::new`'s rows, or `bench --batch 3`)"
    );
    assert_eq!(
        err(&mut m, &[&[1, 2]], 0),
        "bad input: a prefill chunk of 0 rows: want 1 to 2048"
    );
    assert_eq!(
        err(&mut m, &[&[1, 9999]], 16),
        "bad input: token id 9999 of prefill row 1 is outside the vocabulary of 512"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn generate_reports_the_time_to_first_token_both_ways() {
    let ctx = gpu();
    let (c, w) = config("tiny", 4);
    let prompt = &prompts(&[300], c.vocab_size)[0];
    for mode in [Mode::Eager, Mode::Graphs] {
        let mut chunked = common::model(&ctx, &c, &w, (1, 340), mode);
        let g = generate_with(&mut chunked, prompt, 8, PrefillMode::Chunks(128)).unwrap();
        let mut stepped = common::model(&ctx, &c, &w, (1, 340), mode);
        let s = generate_with(&mut stepped, prompt, 8, PrefillMode::Steps).unwrap();
        for (what, t) in [("chunks", g.ttft), ("steps", s.ttft)] {
            assert!(
                t.device_ms.is_finite() && t.device_ms > 0.0 && t.wall_ms >= t.device_ms * 0.5,
                "{mode:?} {what}: {t:?}"
            );
        }
        // 300 rows in chunks of 128: buckets 128 and 64, captured before the timing.
        let captured = if mode == Mode::Graphs { 2 } else { 0 };
        assert_eq!(g.ttft.graphs_captured, captured, "{mode:?}");
        assert_eq!((g.tokens.len(), s.tokens.len()), (8, 8));
        assert_eq!(g.prefill, PrefillMode::Chunks(128));
        println!(
            "{mode:?}: time to first token of 300 tokens {:.3} ms device / {:.3} ms wall in chunks of 128, {:.3} / {:.3} ms step by step",
            g.ttft.device_ms, g.ttft.wall_ms, s.ttft.device_ms, s.ttft.wall_ms
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn flash_attention_matches_a_host_reference() {
    // ll_prefill_flash_{64,128} alone, outputs poisoned first: groups of 1, 3, 4 and 8 query
    // heads per KV head (2 KV heads), chunks of 1, 17, 64 and 512 rows from position 0, from
    // mid-sequence, and three sequences of different lengths in one chunk.
    let ctx = gpu();
    let st = ctx.stream("test").expect("a stream");
    let kernels = Kernels::load(&ctx).expect("the decoder's kernels load");
    for hd in FLASH_HEAD_DIMS {
        for group in [1, 3, 4, 8] {
            let shape = (2 * group, 2, hd);
            flash::allow(&kernels, 1, shape);
            for n in [1, 17, 64, 512] {
                for (i, (what, rows)) in flash::layouts(n).into_iter().enumerate() {
                    let what = format!("head_dim {hd}, group {group}: {what}");
                    let seed = (hd * 1000 + group * 100 + n as usize) as u64 * 3 + i as u64;
                    let pb = flash::Problem::new(shape, rows, seed);
                    flash::check(&ctx, &st, &kernels, &what, &pb);
                }
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn flash_attention_against_the_rows_kernel_timed() {
    // Not a pass/fail on speed: one layer's prefill attention of a 512- and a 2,048-token
    // prompt (chunks of 512 rows, the decoder's default, and the prompt as one chunk), the rows
    // kernel and the flash kernel alternated turn by turn, device time with CUDA events (medians
    // of 30 after 3 warm-ups); the two kernels' outputs agree within the flash tolerance.
    let ctx = gpu();
    let st = ctx.stream("bench").expect("a stream");
    let kernels = Kernels::load(&ctx).expect("the decoder's kernels load");
    let (a, b) = (
        ctx.event("t0", true).expect("an event"),
        ctx.event("t1", true).expect("an event"),
    );
    for (name, shape) in [
        ("hd 64, 32q/8kv", (32, 8, 64)),
        ("hd 128, 32q/8kv", (32, 8, 128)),
        ("hd 128, 32q/32kv", (32, 32, 128)),
    ] {
        for tokens in [512i32, 2048] {
            let chunkings: &[i32] = if tokens == 512 { &[512] } else { &[512, 2048] };
            for &chunk in chunkings {
                let pb = flash::Problem::new(shape, flash::span(0, 0, tokens), 7);
                flash::allow(&kernels, chunk as usize, shape);
                // The prompt's first `chunk` rows' queries serve every chunk (positions move on).
                let mut d = flash::OnDevice::new(&ctx, &st, &pb);
                let chunks: Vec<usize> = (0..tokens / chunk)
                    .map(|c| {
                        let pos: Vec<i32> = (c * chunk..(c + 1) * chunk).collect();
                        d.add_positions(&ctx, &st, &pos)
                    })
                    .collect();
                let run = |kind: PrefillAttentionKind, d: &mut flash::OnDevice| -> f32 {
                    st.record(&a).expect("record");
                    for &c in &chunks {
                        let n = chunk as usize;
                        flash::launch(&st, &kernels, kind, shape, n, pb.max_ctx, d, c);
                    }
                    st.record(&b).expect("record");
                    b.synchronize().expect("the timed launches run");
                    b.elapsed_ms_since(&a).expect("elapsed time")
                };
                let kinds = [PrefillAttentionKind::Rows, PrefillAttentionKind::Flash];
                let mut times = [Vec::new(), Vec::new()];
                for turn in 0..33 {
                    for (i, &kind) in kinds.iter().enumerate() {
                        let t = run(kind, &mut d);
                        if turn >= 3 {
                            times[i].push(t);
                        }
                    }
                }
                // The last chunk's outputs of both kernels (rows first, then flash).
                let mut outs = Vec::new();
                for kind in kinds {
                    d.poison(&st);
                    run(kind, &mut d);
                    outs.push(st.download(&d.out).expect("the output download"));
                }
                let w = shape.0 * shape.2;
                for (i, (&x, &y)) in outs[1]
                    .iter()
                    .zip(&outs[0])
                    .take(chunk as usize * w)
                    .enumerate()
                {
                    let (x, y) = (flash::from_bf(x) as f64, flash::from_bf(y) as f64);
                    let t = flash::tolerance(y, 1.0);
                    assert!(
                        x.is_finite() && (x - y).abs() <= t,
                        "{name}, {tokens} tokens: flash {x} against rows {y} at output {i} (tolerance {t})"
                    );
                }
                let med = |v: &mut Vec<f32>| {
                    v.sort_by(f32::total_cmp);
                    v[v.len() / 2]
                };
                let (old, new) = (med(&mut times[0]), med(&mut times[1]));
                println!(
                    "{name}, {tokens} tokens in chunks of {chunk}: rows kernel {old:.3} ms, flash {new:.3} ms ({:.1}x) per layer",
                    old / new
                );
            }
        }
    }
}
