//! GPU tests (ignored without a GPU): eager against graphs, logits against a host f32 forward
//! pass of the tiny model with the same bf16 rounding points, hazard checks of every captured
//! bucket, the weight swap, the oversize fallback, the memory and buckets of a graphs-mode
//! model made for fewer sequences than the largest bucket, and the tour's decode.
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_decode -- --ignored --test-threads=1`

mod common;

use graphsmith::model::NodeKind;
use graphsmith::Context;
use graphsmith_llama::buckets_for_capacity;
use graphsmith_llama::{
    generate, random_weights, top2, tour_decode_with, Config, DecoderOptions, Gemm, HostWeights,
    Mode, Model, StepPath, Tuning, BUCKETS,
};

fn bf(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

fn f(v: &[u16]) -> Vec<f32> {
    v.iter()
        .map(|&b| half::bf16::from_bits(b).to_f32())
        .collect()
}

/// `y[n] = sum_k x[k] w[n, k]` in f32.
fn matvec(x: &[f32], w: &[f32], n: usize) -> Vec<f32> {
    let k = x.len();
    (0..n)
        .map(|i| {
            w[i * k..(i + 1) * k]
                .iter()
                .zip(x)
                .map(|(a, b)| a * b)
                .sum()
        })
        .collect()
}

fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, g)| bf(g * bf(v * inv))).collect()
}

/// The tiny model on the host, f32 with bf16 rounding where HF (and the kernels) round.
struct HostModel {
    c: Config,
    w: HostWeights,
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Per layer, per row: (position -> k, v) of kv_dim each.
    k: Vec<Vec<Vec<Vec<f32>>>>,
    v: Vec<Vec<Vec<Vec<f32>>>>,
}

impl HostModel {
    fn new(c: &Config, w: &HostWeights, rows: usize, ctx: usize) -> HostModel {
        let (cos, sin) = c.rope_tables(ctx);
        let empty = vec![vec![vec![Vec::new(); ctx]; rows]; c.num_hidden_layers];
        HostModel {
            c: c.clone(),
            w: w.clone(),
            cos,
            sin,
            k: empty.clone(),
            v: empty,
        }
    }

    fn rope(&self, x: &[f32], p: usize) -> Vec<f32> {
        let half = x.len() / 2;
        let (c, s) = (
            &self.cos[p * half..(p + 1) * half],
            &self.sin[p * half..(p + 1) * half],
        );
        (0..x.len())
            .map(|i| {
                if i < half {
                    bf(bf(x[i] * c[i]) + bf(-x[i + half] * s[i]))
                } else {
                    let j = i - half;
                    bf(bf(x[i] * c[j]) + bf(x[j] * s[j]))
                }
            })
            .collect()
    }

    fn step(&mut self, row: usize, tok: usize, p: usize) -> Vec<f32> {
        let c = self.c.clone();
        let (h, hd, nq, nkv, ff) = (
            c.hidden_size,
            c.head_dim,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.intermediate_size,
        );
        let mut x = f(&self.w.embed[tok * h..(tok + 1) * h]);
        for l in 0..c.num_hidden_layers {
            let lw = self.w.layers[l].clone();
            let xn = rmsnorm(&x, &f(&lw.input_norm), c.rms_norm_eps);
            let qkv: Vec<f32> = matvec(&xn, &f(&lw.qkv), c.qkv_dim())
                .into_iter()
                .map(bf)
                .collect();
            let mut kk = Vec::new();
            for g in 0..nkv {
                kk.extend(self.rope(&qkv[(nq + g) * hd..(nq + g + 1) * hd], p));
            }
            self.k[l][row][p] = kk;
            self.v[l][row][p] = qkv[(nq + nkv) * hd..].to_vec();
            let mut attn = Vec::new();
            for head in 0..nq {
                let g = head / (nq / nkv);
                let q = self.rope(&qkv[head * hd..(head + 1) * hd], p);
                let scores: Vec<f32> = (0..=p)
                    .map(|t| {
                        q.iter()
                            .zip(&self.k[l][row][t][g * hd..(g + 1) * hd])
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            / (hd as f32).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let e: Vec<f32> = scores.iter().map(|s| (s - m).exp()).collect();
                let sum: f32 = e.iter().sum();
                for i in 0..hd {
                    attn.push(bf((0..=p)
                        .map(|t| e[t] / sum * self.v[l][row][t][g * hd + i])
                        .sum()));
                }
            }
            // HF rounds the projection to bf16, then adds the residual in bf16.
            let o = matvec(&attn, &f(&lw.o), h);
            x = x.iter().zip(&o).map(|(a, b)| bf(a + bf(*b))).collect();
            let xn = rmsnorm(&x, &f(&lw.post_norm), c.rms_norm_eps);
            let gu: Vec<f32> = matvec(&xn, &f(&lw.gate_up), 2 * ff)
                .into_iter()
                .map(bf)
                .collect();
            let act: Vec<f32> = (0..ff)
                .map(|i| bf(bf(gu[i] / (1.0 + (-gu[i]).exp())) * gu[ff + i]))
                .collect();
            let d = matvec(&act, &f(&lw.down), h);
            x = x.iter().zip(&d).map(|(a, b)| bf(a + bf(*b))).collect();
        }
        let xn = rmsnorm(&x, &f(&self.w.final_norm), c.rms_norm_eps);
        matvec(&xn, &f(self.w.head()), c.vocab_size)
            .into_iter()
            .map(bf)
            .collect()
    }
}

fn tiny() -> (Config, HostWeights) {
    let c = Config::named("tiny").unwrap();
    let w = random_weights(&c, 11);
    (c, w)
}

fn noop(_: usize, _: usize) {}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiny_logits_match_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let (c, w) = tiny();
    let prompts: [&[usize]; 3] = [&[1, 17, 300, 45, 9, 88], &[400, 2], &[7, 7, 7, 7]];
    let steps = 10;
    // Hand-set launch choices spread the same sums differently: they must pass the same check
    // (with L2 prefetches of every weight and with none).
    // (`cpa=0`: one row on the register GEMV, which the ring GEMV's rule takes for this model.)
    let wide: Tuning = "qkv=8,o=8,gate_up=8,down=8,head=8,splits=1,pf=64,cpa=0"
        .parse()
        .unwrap();
    let narrow: Tuning = "qkv=1,o=1,gate_up=1,down=1,head=1,splits=64,blocks=1,pf=0,cpa=0"
        .parse()
        .unwrap();
    // The attention as thread block clusters (`cluster=1`; tests/gpu_kernels.rs checks its
    // combine at length).
    let clustered: Tuning = "cluster=1".parse().unwrap();
    // The ring GEMV for some projections only, at one block per multiprocessor.
    let rings: Tuning = "cpa=5,cpab=1".parse().unwrap();
    // Three prompts in one batch, and the first alone (one row: the GEMV kernels' one-row
    // instantiations, which the decode benchmarks at batch 1 run).
    let cases = [
        (Mode::Eager, Gemm::Gemv, Tuning::default(), 3),
        (Mode::Graphs, Gemm::Gemv, Tuning::default(), 3),
        (Mode::Eager, Gemm::Cublas, Tuning::default(), 3),
        (Mode::Graphs, Gemm::Cublas, Tuning::default(), 3),
        (Mode::Graphs, Gemm::Gemv, wide, 3),
        (Mode::Graphs, Gemm::Gemv, narrow, 3),
        (Mode::Eager, Gemm::Auto, Tuning::default(), 1),
        (Mode::Graphs, Gemm::Auto, Tuning::default(), 1),
        (Mode::Graphs, Gemm::Auto, wide, 1),
        (Mode::Graphs, Gemm::Auto, narrow, 1),
        (Mode::Graphs, Gemm::Auto, clustered, 1),
        (Mode::Graphs, Gemm::Auto, rings, 1),
        (Mode::Eager, Gemm::Auto, rings, 1),
        (Mode::Eager, Gemm::Gemv, clustered, 3),
    ];
    check_host_reference(&ctx, &c, &w, &prompts, steps, cases);
}

type Case = (Mode, Gemm, Tuning, usize);

/// Teacher-forced decoding of `prompts` for `steps` steps in each case (mode, projections,
/// tuning, batch), every logit against the host
/// model's, the argmax where the host's top-2 margin is clear, the attention's counters and
/// the fused o projection's sums 0 between steps.
fn check_host_reference(
    ctx: &Context,
    c: &Config,
    w: &HostWeights,
    prompts: &[&[usize]],
    steps: usize,
    cases: impl IntoIterator<Item = Case>,
) {
    for (mode, gemm, tuning, batch) in cases {
        let options = DecoderOptions {
            gemm,
            tuning,
            ..DecoderOptions::default()
        };
        let mut model = Model::new(ctx, c.clone(), w, (batch, 32), mode, options, noop).unwrap();
        let mut host = HostModel::new(c, w, batch, 32);
        // Teacher-forced on the host model's own greedy tokens.
        let mut seqs: Vec<Vec<usize>> = prompts[..batch].iter().map(|p| p.to_vec()).collect();
        let mut worst = 0.0f32;
        for t in 0..steps {
            let rows: Vec<(i32, i32)> = seqs
                .iter()
                .map(|s| (s[t.min(s.len() - 1)] as i32, t as i32))
                .collect();
            model.poison_logits().unwrap();
            model.step(&rows).unwrap();
            let logits = model.logits(batch).unwrap();
            let next = model.next_tokens(batch).unwrap();
            for (r, s) in seqs.iter_mut().enumerate() {
                let want = host.step(r, s[t.min(s.len() - 1)], t);
                let got = &logits[r * c.vocab_size..(r + 1) * c.vocab_size];
                assert!(
                    got.iter().all(|v| v.is_finite()),
                    "{mode:?} {gemm:?} {tuning} step {t} row {r}: NaN left in the logits"
                );
                let diff = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                worst = worst.max(diff);
                let (their_top, margin) = top2(&want);
                if margin > 0.02 {
                    assert_eq!(
                        next[r] as usize, their_top,
                        "{mode:?} {gemm:?} {tuning} step {t} row {r}: argmax"
                    );
                }
                assert_eq!(
                    next[r] as usize,
                    top2(got).0,
                    "the argmax kernel agrees with the logits"
                );
                if t + 1 >= s.len() {
                    s.push(their_top);
                }
            }
        }
        assert!(
            model.attention_counters().unwrap().iter().all(|&n| n == 0),
            "{mode:?} {gemm:?} {tuning}: the attention's counters are 0 between steps"
        );
        println!("{mode:?} {gemm:?} {tuning}: largest |logit - host| = {worst}");
        assert!(
            worst < 0.02,
            "{mode:?} {gemm:?} {tuning}: largest difference {worst}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tiny_eager_and_graphs_decode_the_same() {
    let ctx = Context::new(0).unwrap();
    let (c, w) = tiny();
    let prompt = [3, 141, 59, 26, 5, 358];
    let mut eager = common::model(&ctx, &c, &w, (1, 64), Mode::Eager);
    let e = generate(&mut eager, &prompt, 40).unwrap();
    let le = eager.logits(1).unwrap();
    let mut graphs = common::model(&ctx, &c, &w, (1, 64), Mode::Graphs);
    graphs.poison_logits().unwrap();
    let g = generate(&mut graphs, &prompt, 40).unwrap();
    let lg = graphs.logits(1).unwrap();
    assert_eq!(e.tokens, g.tokens);
    assert_eq!(le, lg, "same kernels and GEMMs, same bits");
    assert!(
        g.tokens
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 1,
        "a degenerate decode: {:?}",
        g.tokens
    );
    println!(
        "eager {:.0} tokens/s, graphs {:.0} tokens/s",
        e.decode_tokens_per_s, g.decode_tokens_per_s
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_captured_bucket_is_hazard_free_and_gemms_are_journaled() {
    let ctx = Context::new(0).unwrap();
    let (c, w) = tiny();
    let mut model = common::model(&ctx, &c, &w, (64, 32), Mode::Graphs);
    model.capture_all().unwrap();
    let reports = model.hazard_reports().unwrap();
    assert_eq!(
        reports.iter().map(|r| r.0).collect::<Vec<_>>(),
        BUCKETS.to_vec()
    );
    for (bucket, report) in &reports {
        assert!(report.is_clean(), "bucket {bucket}: {report:?}");
    }
    // The attention states what it reads before its programmatic wait (its position and the
    // cache), and the q/k/v projection before it that it triggers after its own wait, so the
    // checks above cover that ordering. (Within one step graph nothing before the attention
    // writes what it reads early; the late trigger matters where steps follow each other as
    // programmatic launches, in eager mode: the previous step's advance wrote the position.)
    let one = model.graph_model(1).unwrap();
    let attention: Vec<_> = one
        .nodes
        .iter()
        .filter(|n| n.label.starts_with("rope + kv append"))
        .collect();
    assert_eq!(attention.len(), c.num_hidden_layers);
    for n in &attention {
        let read: Vec<&str> = n
            .accesses_before_wait
            .iter()
            .map(|a| a.label.as_str())
            .collect();
        assert_eq!(read.len(), 3, "{}: {read:?}", n.label);
    }
    if model.uses_pdl() {
        let late = one.nodes.iter().filter(|n| n.triggers_after_wait).count();
        assert_eq!(late, c.num_hidden_layers, "one q/k/v projection per layer");
    }
    let g = model.graph_model(8).unwrap();
    let gemms: Vec<_> = g
        .nodes
        .iter()
        .filter(|n| n.label.starts_with("gemm ") || n.label.starts_with("gemv "))
        .collect();
    // Four GEMMs per layer and the lm_head, each a kernel node with its declared accesses
    // (bucket 8 runs the decoder's GEMV kernels; bucket 64 cuBLAS, checked below).
    assert_eq!(
        gemms.len(),
        4 * c.num_hidden_layers + 1,
        "{:?}",
        g.nodes.iter().map(|n| &n.label).collect::<Vec<_>>()
    );
    for n in &gemms {
        assert!(
            matches!(n.kind, NodeKind::Kernel(_)),
            "{} is {:?}",
            n.label,
            n.kind.name()
        );
        assert!(n.accesses.len() >= 3, "{}: {:?}", n.label, n.accesses);
        let p = n
            .provenance
            .as_ref()
            .expect("a captured GEMM has its caller's line");
        assert!(p.file.ends_with("layers.rs"), "{p:?}");
        assert!(
            p.ranges.iter().any(|r| r.starts_with("layer ")) || n.label.contains("lm_head"),
            "{p:?}"
        );
    }
    let g64 = model.graph_model(64).unwrap();
    let cublas = g64
        .nodes
        .iter()
        .filter(|n| n.label.starts_with("gemm "))
        .count();
    // cuBLAS may split a GEMM into more than one kernel.
    assert!(cublas > 4 * c.num_hidden_layers, "bucket 64 runs cuBLAS");
    println!(
        "bucket 8: {} nodes ({} per layer)",
        g.nodes.len(),
        (g.nodes.len() - 6) / c.num_hidden_layers
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn weight_swap_in_place_gives_the_new_models_results() {
    let ctx = Context::new(0).unwrap();
    let (c, w) = tiny();
    let w2 = random_weights(&c, 12);
    let prompt = [9, 8, 7, 6, 5];
    // Capacity 64: the model holds every bucket, and the swap switches each one.
    let mut model = common::model(&ctx, &c, &w, (64, 64), Mode::Graphs);
    model.capture_all().unwrap();
    let before = generate(&mut model, &prompt, 24).unwrap();
    let before_logits = model.logits(1).unwrap();
    let report = model.swap_weights(&w2).unwrap();
    assert_eq!(report.executables, BUCKETS.len());
    assert_eq!(report.method, "relocate");
    assert!(report.nodes_updated > 0);
    model.poison_logits().unwrap();
    let after = generate(&mut model, &prompt, 24).unwrap();
    let swapped_logits = model.logits(1).unwrap();
    let mut fresh = common::model(&ctx, &c, &w2, (1, 64), Mode::Eager);
    let want = generate(&mut fresh, &prompt, 24).unwrap();
    // Random tiny models may greedily emit the same tokens; their logits differ.
    assert_ne!(
        before_logits, swapped_logits,
        "the two models' logits must differ for the test to mean anything"
    );
    assert!(swapped_logits.iter().all(|v| v.is_finite()));
    // Same kernels on the same rows (graphs replay what eager launches): the same bits.
    assert_eq!(after.tokens, want.tokens);
    assert_eq!(swapped_logits, fresh.logits(1).unwrap());
    println!(
        "tokens before {:?}, after {:?}",
        before.tokens, after.tokens
    );
    for (bucket, r) in model.hazard_reports().unwrap() {
        assert!(r.is_clean(), "bucket {bucket} after the swap: {r:?}");
    }
    let recapture = model.recapture_all().unwrap();
    println!(
        "switch {:.3} ms ({} nodes), re-capture {recapture:.3} ms, freed {} bytes",
        report.switch_ms, report.nodes_updated, report.freed_bytes
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_batch_above_the_largest_bucket_runs_eagerly_with_its_reason() {
    let ctx = Context::new(0).unwrap();
    let (c, w) = tiny();
    let mut model = common::model(&ctx, &c, &w, (65, 8), Mode::Graphs);
    let rows = vec![(1, 0); 65];
    model.poison_logits().unwrap();
    let path = model.step(&rows).unwrap();
    assert_eq!(
        path,
        StepPath::Fallback {
            reason: "larger than every bucket".into()
        }
    );
    assert!(model.logits(65).unwrap().iter().all(|v| v.is_finite()));
    let path = model.step(&rows[..3]).unwrap();
    assert_eq!(path, StepPath::Graph { bucket: 4 });
    let err = model.step(&[]).unwrap_err().to_string();
    assert_eq!(err, "bad input: a batch of zero sequences");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tour_decode_eager_equals_graphs() {
    let ctx = Context::new(0).unwrap();
    let t = tour_decode_with(&ctx, "small", 16, 64).unwrap();
    println!("{t:?}");
    assert!(t.equal);
    assert_eq!(t.hazards, 0);
    assert!(t.graphs_tokens_per_s > 0.0 && t.eager_tokens_per_s > 0.0);
}

/// Device memory in use now (the free memory's complement), bytes.
fn used_now(ctx: &Context) -> u64 {
    let (free, total) = ctx.memory_info().expect("cuMemGetInfo");
    total.saturating_sub(free) as u64
}

/// Runs `model` (capacity 1) from token 7 at position 0 through `segments` of free-running
/// steps (each step's argmax feeds the next, on the device), its KV cache and logits poisoned
/// first; returns the logits after the first step and after each segment.
fn long_decode(model: &mut Model, segments: &[usize]) -> Vec<Vec<f32>> {
    model.poison_kv_cache().unwrap();
    model.poison_logits().unwrap();
    model.step(&[(7, 0)]).unwrap();
    let mut out = vec![model.logits(1).unwrap()];
    for &n in segments {
        model.poison_logits().unwrap();
        model.run_free(1, n).unwrap();
        out.push(model.logits(1).unwrap());
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graphs_model_of_one_sequence_holds_one_sequences_kv_cache() {
    let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
    let c = Config::named("small").unwrap();
    let w = random_weights(&c, 3);
    let max_ctx = 4096;
    // Positions 0, then 1..=511, ..=2047, ..=4094: every step attends over all before it.
    let segments = [511, 1536, 2047];
    let weights = c.weight_bytes();
    let kv_one =
        (2 * c.num_hidden_layers * c.num_key_value_heads * max_ctx * c.head_dim * 2) as u64;
    // What a model holds besides its weights and KV cache: activations and logits of its rows,
    // the kernels' module, cuBLAS's handle and workspace, the step graph (a 64-row decoder's
    // KV cache alone would be 63 more sequences', about 5.9 GB here).
    let margin: u64 = 256 << 20;

    let before = used_now(&ctx);
    let mut eager = common::model(&ctx, &c, &w, (1, max_ctx), Mode::Eager);
    let want = long_decode(&mut eager, &segments);
    let eager_used = used_now(&ctx).saturating_sub(before);
    drop(eager);

    let before = used_now(&ctx);
    let mut graphs = common::model(&ctx, &c, &w, (1, max_ctx), Mode::Graphs);
    let got = long_decode(&mut graphs, &segments);
    let graphs_used = used_now(&ctx).saturating_sub(before);
    println!(
        "small, capacity 1, context {max_ctx}: weights {} MiB, one sequence's KV cache {} MiB; eager held {} MiB, graphs {} MiB",
        weights >> 20,
        kv_one >> 20,
        eager_used >> 20,
        graphs_used >> 20
    );
    assert_eq!(graphs.buckets(), [1]);
    assert!(graphs.node_count(1).is_some() && graphs.node_count(2).is_none());
    assert!(
        graphs_used <= weights + kv_one + margin,
        "graphs mode held {graphs_used} bytes: weights {weights} + one sequence's KV cache {kv_one} + {margin}"
    );
    assert!(
        graphs_used <= eager_used + (128 << 20),
        "graphs mode held {graphs_used} bytes, an eager model of the same capacity {eager_used}"
    );
    assert_eq!(got.len(), want.len());
    for (i, (gl, el)) in got.iter().zip(&want).enumerate() {
        let what = format!("checkpoint {i}: graphs' logits against eager's");
        common::assert_close(&what, el, gl, c.vocab_size);
    }
    // Positions 0 and 4094 give other logits (a test on logits that never changed would mean
    // nothing), whatever tokens the random model repeats.
    assert_ne!(got[0], got[got.len() - 1]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_capacity_3_model_runs_batches_up_to_3_in_bucket_4_and_refuses_more() {
    let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
    let (c, w) = tiny();
    let refusal = |call: &str, batch: usize| {
        format!(
            "bad input: {call}: a batch of {batch} sequences, but the model was made for at most 3; \
             make the model with a capacity of at least {batch} (`Model::new`'s rows, or `bench --batch {batch}`)"
        )
    };
    // Every step at position 0 (tokens told apart by `t`): it writes each row's position 0 and
    // attends over that alone. At position t a row would read positions 0..t, which rows that
    // join a later, larger batch never wrote (the caches are poisoned, so that would be NaN).
    let rows = |batch: usize, t: i32| -> Vec<(i32, i32)> {
        (0..batch)
            .map(|r| ((r as i32 * 97 + t * 13 + 5) % 512, 0))
            .collect()
    };
    let mut eager = common::model(&ctx, &c, &w, (3, 32), Mode::Eager);
    let mut graphs = common::model(&ctx, &c, &w, (3, 32), Mode::Graphs);
    eager.poison_kv_cache().unwrap();
    graphs.poison_kv_cache().unwrap();
    assert_eq!(graphs.buckets(), buckets_for_capacity(3));
    assert_eq!(graphs.buckets(), [1, 2, 4]);
    for (t, (batch, bucket)) in [(1, 1), (2, 2), (3, 4)].into_iter().enumerate() {
        let r = rows(batch, t as i32);
        eager.poison_logits().unwrap();
        graphs.poison_logits().unwrap();
        assert_eq!(eager.step(&r).unwrap(), StepPath::Eager);
        assert_eq!(graphs.step(&r).unwrap(), StepPath::Graph { bucket });
        let (e, g) = (eager.logits(batch).unwrap(), graphs.logits(batch).unwrap());
        let what = format!("batch {batch}: graphs' logits against eager's");
        common::assert_close(&what, &e, &g, c.vocab_size);
    }
    // Both modes refuse a batch above the capacity alike, before anything runs; bucket 4 has
    // room for a fourth row, but the model was made for three.
    for model in [&mut eager, &mut graphs] {
        for batch in [4, 5] {
            let mode = model.mode();
            let got = model.step(&rows(batch, 3)).unwrap_err().to_string();
            assert_eq!(got, refusal("Model::step", batch), "{mode:?}");
            let got = model.run_free(batch, 1).unwrap_err().to_string();
            assert_eq!(got, refusal("Model::run_free", batch), "{mode:?}");
            let prompt: &[i32] = &[1, 2, 3];
            let got = model
                .prefill(&vec![prompt; batch], 16)
                .unwrap_err()
                .to_string();
            assert_eq!(got, refusal("Model::prefill", batch), "{mode:?}");
        }
    }
    let got = graphs.decode_loop(5, 4, None).unwrap_err().to_string();
    assert_eq!(got, refusal("Model::decode_loop", 5));
    // The model captures its own buckets and no others.
    graphs.capture_all().unwrap();
    let held: Vec<usize> = graphs
        .hazard_reports()
        .unwrap()
        .iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(held, [1, 2, 4]);
    assert_eq!(graphs.node_count(8), None);
    // A batch of 3 still runs after the refusals.
    assert_eq!(
        graphs.step(&rows(3, 4)).unwrap(),
        StepPath::Graph { bucket: 4 }
    );
}
