//! GPU tests of the decoder's kernels one by one (ignored without a GPU), each against a host
//! reference on random inputs, outputs poisoned first: the fused GEMV variants (rows 1, 3, 8 and
//! 11, which runs in chunks; K odd and K a multiple of 8; more columns than warps in the grid),
//! the ring GEMV's (one row; its rings refilled or not; 1 to 8 warps per column),
//! the decode attention (several positions, a padded row, group sizes 1 to 16, split over 1 to
//! 64 blocks per row and KV head, and as clusters of 8 or 4 blocks combining in distributed
//! shared memory; launched twice) and the argmax
//! with the advance (ties, odd vocabularies, the reset of the packed maximum).
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_kernels -- --ignored --test-threads=1`

use graphsmith::model::Dim3;
use graphsmith::{args, Context, DeviceBuffer, LaunchConfig, Stream};
use graphsmith_llama::kernels::{
    allow_smem, async_smem, attention_splits, gemv, gemv_async, gemv_head, AttentionLaunch,
    GemvKernels, Kernels, ARGMAX_CHUNK, ARGMAX_THREADS, ATTENTION_CLUSTER, ATTENTION_CLUSTER_SMALL,
    ATTENTION_CLUSTER_SMALL_THREADS, ATTENTION_CLUSTER_THREADS, ATTENTION_THREADS,
};
use graphsmith_llama::Config;

/// A small deterministic generator (xorshift64*), uniform in [-1, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        v as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn bf16s(&mut self, n: usize, scale: f32) -> Vec<u16> {
        (0..n).map(|_| to_bf(self.next() * scale)).collect()
    }
}

fn to_bf(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

fn from_bf(b: u16) -> f32 {
    half::bf16::from_bits(b).to_f32()
}

fn bf(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

fn cfg(grid: (u32, u32), block: u32, smem: usize) -> LaunchConfig {
    cfg3((grid.0, grid.1, 1), block, smem)
}

fn cfg3(grid: (u32, u32, u32), block: u32, smem: usize) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 {
            x: grid.0,
            y: grid.1,
            z: grid.2,
        },
        block: Dim3 {
            x: block,
            y: 1,
            z: 1,
        },
        shared_mem_bytes: smem as u32,
    }
}

fn upload<T: graphsmith::Element>(
    ctx: &Context,
    st: &Stream,
    label: &str,
    data: &[T],
) -> DeviceBuffer<T> {
    let mut b = ctx.alloc::<T>(label, data.len()).unwrap();
    st.upload(&mut b, data).unwrap();
    b
}

/// bf16 NaN, the poison of bf16 outputs.
const POISON: u16 = 0x7fc1;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Norm,
    /// The norm as prologue, SwiGLU as epilogue: weights [2n, k] (gate rows, then up rows).
    NormSwiglu,
    Residual,
    SwigluResidual,
    NormF32,
    /// NormF32 with each row's argmax folded into `best`.
    Head,
}

/// The prologue's input row (bf16 values as f32), as the unfused kernels compute it.
fn prologue(v: Variant, x: &[u16], nw: &[u16], k: usize, eps: f32) -> Vec<f32> {
    match v {
        Variant::Norm | Variant::NormF32 | Variant::NormSwiglu | Variant::Head => {
            let xf: Vec<f32> = x.iter().map(|&b| from_bf(b)).collect();
            let ms = xf.iter().map(|v| v * v).sum::<f32>() / k as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            xf.iter()
                .zip(nw)
                .map(|(v, &g)| bf(from_bf(g) * bf(v * inv)))
                .collect()
        }
        Variant::Residual => x.iter().map(|&b| from_bf(b)).collect(),
        Variant::SwigluResidual => (0..k)
            .map(|i| {
                let g = from_bf(x[i]);
                let u = from_bf(x[k + i]);
                bf(bf(g / (1.0 + (-g).exp())) * u)
            })
            .collect(),
    }
}

/// One GEMV variant against the host reference: on the register GEMV (`ring_blocks` `None`),
/// or on the ring GEMV (`gemv_async`, one row) over up to `ring_blocks` blocks.
#[allow(clippy::too_many_arguments)]
fn check_gemv(
    ctx: &Context,
    st: &Stream,
    kernels: &Kernels,
    v: Variant,
    rows: usize,
    n: usize,
    k: usize,
    ring_blocks: Option<u32>,
) {
    let mut rng = Rng(0x9e37_79b9 ^ ((rows * 1000 + n) * 100_000 + k) as u64);
    let eps = 1e-5;
    let xw = if v == Variant::SwigluResidual {
        2 * k
    } else {
        k
    };
    let x = rng.bf16s(rows * xw, 2.0);
    let nw = rng.bf16s(k, 1.5);
    let wrows = if v == Variant::NormSwiglu { 2 * n } else { n };
    let w = rng.bf16s(wrows * k, 0.1);
    let y0: Vec<u16> = match v {
        Variant::Residual | Variant::SwigluResidual => rng.bf16s(rows * n, 3.0),
        _ => vec![POISON; rows * n],
    };
    let (xd, nwd, wd) = (
        upload(ctx, st, "x", &x),
        upload(ctx, st, "nw", &nw),
        upload(ctx, st, "w", &w),
    );
    let g: &GemvKernels = match v {
        Variant::Norm => &kernels.gemv_norm,
        Variant::Residual => &kernels.gemv_res,
        Variant::SwigluResidual => &kernels.gemv_swiglu_res,
        Variant::NormF32 => &kernels.gemv_norm_f32,
        Variant::NormSwiglu => &kernels.gemv_norm_swiglu,
        Variant::Head => &kernels.gemv_head,
    };
    let mut best_rows: Option<Vec<u64>> = None;
    // Few multiprocessors: blocks stride over columns (n is larger than the grid's warps).
    let sms = (2, 8);
    let got: Vec<f32> = if v == Variant::Head {
        let mut y = upload(ctx, st, "y", &vec![f32::NAN; rows * n]);
        let mut best = upload(ctx, st, "best", &vec![0u64; rows]);
        gemv_head(
            st,
            "test gemv head",
            g,
            sms,
            (&xd, &nwd, &wd),
            &mut y,
            &mut best,
            (rows, n, k),
            eps,
        )
        .unwrap();
        st.synchronize().unwrap();
        best_rows = Some(st.download(&best).unwrap());
        st.download(&y).unwrap()
    } else if v == Variant::NormF32 {
        let mut y = upload(ctx, st, "y", &vec![f32::NAN; rows * n]);
        gemv(
            st,
            "test gemv",
            g,
            sms,
            (&xd, &nwd, &wd),
            &mut y,
            rows,
            n,
            k,
            eps,
        )
        .unwrap();
        st.synchronize().unwrap();
        st.download(&y).unwrap()
    } else if let Some(blocks) = ring_blocks {
        assert_eq!(rows, 1, "the ring GEMV takes one row");
        let kernel = match v {
            Variant::Norm => &kernels.gemv_async_norm,
            Variant::NormSwiglu => &kernels.gemv_async_norm_swiglu,
            Variant::Residual => &kernels.gemv_async_res,
            _ => panic!("no ring GEMV for {v:?}"),
        };
        allow_smem(kernel, async_smem(k).unwrap(), "ll_gemv_async_*").unwrap();
        let mut y = upload(ctx, st, "y", &y0);
        gemv_async(
            st,
            "test gemv async",
            kernel,
            blocks,
            (&xd, &nwd, &wd),
            &mut y,
            (n, k),
            eps,
        )
        .unwrap();
        st.synchronize().unwrap();
        st.download(&y).unwrap().into_iter().map(from_bf).collect()
    } else {
        let mut y = upload(ctx, st, "y", &y0);
        gemv(
            st,
            "test gemv",
            g,
            sms,
            (&xd, &nwd, &wd),
            &mut y,
            rows,
            n,
            k,
            eps,
        )
        .unwrap();
        st.synchronize().unwrap();
        st.download(&y).unwrap().into_iter().map(from_bf).collect()
    };
    for r in 0..rows {
        let xs = prologue(v, &x[r * xw..(r + 1) * xw], &nw, k, eps);
        let dot = |row: usize| -> f64 {
            (0..k)
                .map(|i| xs[i] as f64 * from_bf(w[row * k + i]) as f64)
                .sum()
        };
        for o in 0..n {
            let acc = dot(o);
            let (want, scale) = match v {
                Variant::Residual | Variant::SwigluResidual => {
                    let want = bf(from_bf(y0[r * n + o]) + bf(acc as f32));
                    (want, want.abs().max(acc.abs() as f32))
                }
                Variant::NormSwiglu => {
                    // As ll_swiglu on the bf16 gate and up: errors of both enter the product.
                    let (gate, up) = (bf(acc as f32), bf(dot(n + o) as f32));
                    let silu = bf(gate / (1.0 + (-gate).exp()));
                    (bf(silu * up), 2.0 * (gate.abs().max(1.0) * up.abs()))
                }
                _ => {
                    let want = bf(acc as f32);
                    (want, want.abs().max(acc.abs() as f32))
                }
            };
            let have = got[r * n + o];
            // Summation order differs (fp32 on the device, f64 here): a bf16 ulp or two of the
            // larger of the result and the projection, and a little for cancellation.
            let scale = scale.max(1.0);
            assert!(
                have.is_finite() && (have - want).abs() <= scale / 64.0,
                "{v:?} (ring {ring_blocks:?}) rows {rows} n {n} k {k}: y[{r}, {o}] = {have}, want {want}"
            );
        }
        if let Some(best) = &best_rows {
            // The folded argmax is the first largest of the logits the kernel wrote.
            let row = &got[r * n..(r + 1) * n];
            let first_max = (0..n).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            let index = (0xffff_ffffu64 - (best[r] & 0xffff_ffff)) as usize;
            assert!(
                best[r] != 0,
                "{v:?} rows {rows} n {n}: best[{r}] not written"
            );
            assert_eq!(
                index, first_max,
                "{v:?} rows {rows} n {n} k {k}: argmax of row {r}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemv_variants_match_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    for v in [
        Variant::Norm,
        Variant::NormSwiglu,
        Variant::Residual,
        Variant::SwigluResidual,
        Variant::NormF32,
        Variant::Head,
    ] {
        for rows in [1, 3, 8, 11] {
            // K odd (scalar loads), K a multiple of 8 (16-byte loads, with and without a
            // remainder of the 32-lane stride), N odd and N above the grid's warps.
            // With the 2 multiprocessors below, warps_per_column gives 1 to 8 warps per column
            // (8: (3, 2501) with scalar loads, (4, 2048) with vector loads; 4: (12, 1032); 2:
            // (20, 576)); K at most 2,501 keeps 8 rows within the default shared memory.
            for (n, k) in [
                (5, 77),
                (67, 64),
                (130, 576),
                (33, 1000),
                (41, 1032),
                (3, 2501),
                (4, 2048),
                (12, 1032),
                (20, 576),
            ] {
                check_gemv(&ctx, &st, &kernels, v, rows, n, k, None);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ring_gemv_matches_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    for v in [Variant::Norm, Variant::NormSwiglu, Variant::Residual] {
        // One round per column part (K 576, 64) up to 32 (K 8192 at one warp per column); 1
        // to 8 warps per column (few columns over many blocks); more rounds per warp than its
        // ring holds (few blocks), and fewer; groups past the last column.
        for (n, k) in [
            (5, 576),
            (130, 576),
            (67, 2048),
            (41, 8192),
            (9, 1024),
            (700, 64),
        ] {
            for blocks in [1, 3, 7, 16, 264] {
                check_gemv(&ctx, &st, &kernels, v, 1, n, k, Some(blocks));
            }
        }
    }
}

/// The host's decode attention of one row: RoPE on q and the new k, softmax over 0..=p.
#[allow(clippy::too_many_arguments)]
fn host_attention(
    c: &Config,
    row: &[u16],
    kcache: &mut [f32],
    vcache: &mut [f32],
    p: usize,
    cos: &[f32],
    sin: &[f32],
    max_ctx: usize,
) -> Vec<f32> {
    let (nq, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let half = hd / 2;
    let (cs, sn) = (
        &cos[p * half..(p + 1) * half],
        &sin[p * half..(p + 1) * half],
    );
    let rope = |x: &[u16]| -> Vec<f32> {
        (0..hd)
            .map(|i| {
                let xi = from_bf(x[i]);
                if i < half {
                    bf(bf(xi * cs[i]) + bf(-from_bf(x[i + half]) * sn[i]))
                } else {
                    let j = i - half;
                    bf(bf(xi * cs[j]) + bf(from_bf(x[j]) * sn[j]))
                }
            })
            .collect()
    };
    for g in 0..nkv {
        let k = rope(&row[(nq + g) * hd..(nq + g + 1) * hd]);
        let at = (g * max_ctx + p) * hd;
        kcache[at..at + hd].copy_from_slice(&k);
        for i in 0..hd {
            vcache[at + i] = from_bf(row[(nq + nkv + g) * hd + i]);
        }
    }
    let mut out = Vec::new();
    for h in 0..nq {
        let g = h / (nq / nkv);
        let q = rope(&row[h * hd..(h + 1) * hd]);
        let scores: Vec<f64> = (0..=p)
            .map(|t| {
                let kt = &kcache[(g * max_ctx + t) * hd..][..hd];
                q.iter().zip(kt).map(|(a, b)| (a * b) as f64).sum::<f64>() / (hd as f64).sqrt()
            })
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        for i in 0..hd {
            let o: f64 = (0..=p)
                .map(|t| e[t] / sum * vcache[(g * max_ctx + t) * hd + i] as f64)
                .sum();
            out.push(bf(o as f32));
        }
    }
    out
}

/// The plain attention launched with `splits` blocks per (row, KV head).
fn plain(splits: usize) -> AttentionLaunch {
    AttentionLaunch {
        cluster: false,
        splits,
        threads: ATTENTION_THREADS,
    }
}

/// The cluster variants' launches: clusters of 8 blocks of 512 threads, and of 4 of 256.
const CLUSTERS: [AttentionLaunch; 2] = [
    AttentionLaunch {
        cluster: true,
        splits: ATTENTION_CLUSTER,
        threads: ATTENTION_CLUSTER_THREADS,
    },
    AttentionLaunch {
        cluster: true,
        splits: ATTENTION_CLUSTER_SMALL,
        threads: ATTENTION_CLUSTER_SMALL_THREADS,
    },
];

/// Checks the attention of rows at `pos` (negative: padding) in a cache of `max_ctx` positions,
/// launched as `how` says, twice (the counters must be back at 0 after each launch, and the
/// second launch, appending the same K/V again, gives the same out).
#[allow(clippy::too_many_arguments)]
fn check_attention(
    ctx: &Context,
    st: &Stream,
    kernels: &Kernels,
    c: &Config,
    pos: &[i32],
    max_ctx: usize,
    how: AttentionLaunch,
) {
    let splits = how.splits;
    let cl = if how.cluster {
        format!(" (clusters of {splits})")
    } else {
        String::new()
    };
    let rows = pos.len();
    let (nq, nkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    let mut rng = Rng(77 + (rows * hd) as u64);
    let qkv = rng.bf16s(rows * c.qkv_dim(), 2.0);
    let cache_len = rows * nkv * max_ctx * hd;
    let k0 = rng.bf16s(cache_len, 2.0);
    let v0 = rng.bf16s(cache_len, 2.0);
    let (cos, sin) = c.rope_tables(max_ctx);
    let qkvd = upload(ctx, st, "qkv", &qkv);
    let mut kd = upload(ctx, st, "k", &k0);
    let mut vd = upload(ctx, st, "v", &v0);
    let posd = upload(ctx, st, "pos", pos);
    let (cosd, sind) = (upload(ctx, st, "cos", &cos), upload(ctx, st, "sin", &sin));
    let group = nq / nkv;
    let part_len = rows * splits * nkv * group * (hd + 2);
    let mut part = upload(ctx, st, "part", &vec![f32::NAN; part_len]);
    let mut counters = upload(ctx, st, "counters", &vec![0u32; rows * nkv]);
    let mut out = upload(ctx, st, "out", &vec![POISON; rows * nq * hd]);
    for launch in 0..2 {
        st.upload(&mut out, &vec![POISON; rows * nq * hd]).unwrap();
        st.launch(
            "test attention",
            kernels.attention_kernel(hd, group, how),
            cfg3(
                (rows as u32, nkv as u32, splits as u32),
                how.threads,
                how.smem(group, hd),
            ),
            args![
                &qkvd,
                &mut kd,
                &mut vd,
                &posd,
                &cosd,
                &sind,
                &mut out,
                nq as i32,
                nkv as i32,
                hd as i32,
                max_ctx as i32,
                1.0 / (hd as f32).sqrt(),
                &mut part,
                &mut counters,
                // L2 prefetches (of read-only tables here), which change no value: the whole
                // sine table and a piece of the cosine one.
                &sind,
                0u64,
                (sind.bytes() as u64) & !15,
                &cosd,
                16u64,
                (cosd.bytes() as u64 / 2) & !15,
                0u64,
                0u64,
                0u64
            ],
        )
        .unwrap();
        st.synchronize().unwrap();
        let left = st.download(&counters).unwrap();
        assert!(
            left.iter().all(|&n| n == 0),
            "hd {hd} splits {splits}{cl} launch {launch}: counters reset, got {left:?}"
        );
        let got: Vec<f32> = st
            .download(&out)
            .unwrap()
            .into_iter()
            .map(from_bf)
            .collect();
        let kc: Vec<f32> = st.download(&kd).unwrap().into_iter().map(from_bf).collect();
        let vc: Vec<f32> = st.download(&vd).unwrap().into_iter().map(from_bf).collect();
        for (r, &p) in pos.iter().enumerate() {
            let o = &got[r * nq * hd..(r + 1) * nq * hd];
            let per_row = nkv * max_ctx * hd;
            if p < 0 {
                assert!(o.iter().all(|&v| v == 0.0), "padded row {r} is zeroed");
                continue;
            }
            let mut kh: Vec<f32> = k0[r * per_row..(r + 1) * per_row]
                .iter()
                .map(|&b| from_bf(b))
                .collect();
            let mut vh: Vec<f32> = v0[r * per_row..(r + 1) * per_row]
                .iter()
                .map(|&b| from_bf(b))
                .collect();
            let row = &qkv[r * c.qkv_dim()..(r + 1) * c.qkv_dim()];
            let want = host_attention(c, row, &mut kh, &mut vh, p as usize, &cos, &sin, max_ctx);
            assert_eq!(
                &kc[r * per_row..(r + 1) * per_row],
                &kh[..],
                "row {r}: K appended at {p}"
            );
            assert_eq!(
                &vc[r * per_row..(r + 1) * per_row],
                &vh[..],
                "row {r}: V appended at {p}"
            );
            for (i, (a, b)) in o.iter().zip(&want).enumerate() {
                assert!(
                    a.is_finite() && (a - b).abs() <= b.abs().max(0.25) / 64.0,
                    "hd {hd} splits {splits}{cl} row {r} pos {p}: out[{i}] = {a}, want {b}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn attention_matches_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    // tiny: head_dim 16 (half the lanes idle), group 2; small: head_dim 64, group 3; 1b-like
    // heads: head_dim 64, group 4; head_dim 128; groups of 8 and 16 (the kernels for groups
    // above 4, the second with head_dim 40), and head_dim 256 (group 4: shared memory under
    // 48 KiB).
    let tiny = Config::named("tiny").unwrap();
    let small = Config::named("small").unwrap();
    let mut wide = Config::named("1b").unwrap();
    wide.num_attention_heads = 8;
    wide.num_key_value_heads = 2;
    let mut hd128 = wide.clone();
    hd128.head_dim = 128;
    let mut group8 = wide.clone();
    group8.num_attention_heads = 16;
    let mut group16 = wide.clone();
    group16.num_attention_heads = 32;
    group16.head_dim = 40;
    let mut hd256 = wide.clone();
    hd256.head_dim = 256;
    // One query head per key/value head (SmolLM2-1.7B's and Llama-2-7B's attention).
    let mut mha = wide.clone();
    mha.num_key_value_heads = 8;
    // Split counts as the decoder picks them for 132 multiprocessors (and 1: one block per row
    // and KV head); the long context crosses chunk edges (15/16/17 positions) and uses 64 splits.
    for c in [
        &tiny, &small, &wide, &hd128, &group8, &group16, &hd256, &mha,
    ] {
        let nkv = c.num_key_value_heads;
        let cases: [&[i32]; 3] = [&[0], &[5, -1, 47], &[1, 2, 3, 9, 17, 30, 31, 40]];
        for pos in cases {
            for splits in [1, attention_splits(pos.len(), nkv, 48, 132)] {
                check_attention(&ctx, &st, &kernels, c, pos, 48, plain(splits));
            }
        }
        let long: &[i32] = &[299, 150, -1, 15, 16, 17, 33, 64];
        for splits in [attention_splits(long.len(), nkv, 300, 132), 7, 64] {
            check_attention(&ctx, &st, &kernels, c, long, 300, plain(splits));
        }
        // The cluster variant (groups up to 4, head_dim up to 128): one block with positions
        // (up to 16), several with empty ones beside them (17, 33), all eight, and beyond 512
        // positions (two rounds of loads per block).
        if c.num_attention_heads / nkv <= 4 && c.head_dim <= 128 {
            for how in CLUSTERS {
                for pos in cases {
                    check_attention(&ctx, &st, &kernels, c, pos, 48, how);
                }
                check_attention(&ctx, &st, &kernels, c, long, 300, how);
                let longer: &[i32] = &[1099, 600, 513, -1, 511, 16, 130];
                check_attention(&ctx, &st, &kernels, c, longer, 1100, how);
            }
        }
    }
}

fn check_argmax(ctx: &Context, st: &Stream, kernels: &Kernels, rows: usize, vocab: usize) {
    let mut rng = Rng(5 + (rows * vocab) as u64);
    let mut logits: Vec<f32> = (0..rows * vocab).map(|_| rng.next() * 8.0).collect();
    // Ties after rounding to bf16: the row's largest value also sits at a later index (and at
    // an earlier one in odd rows, which must win there).
    for r in 0..rows {
        let row = &mut logits[r * vocab..(r + 1) * vocab];
        let top = vocab / 2 + r;
        row[top] = 9.0;
        row[vocab - 1] = 9.0 + 1e-4;
        if r % 2 == 1 {
            row[r] = 9.0 + 2e-4;
        }
    }
    let pos: Vec<i32> = (0..rows as i32)
        .map(|r| if r == 1 { -1 } else { r })
        .collect();
    let mut ld = upload(ctx, st, "logits", &logits);
    let mut best = upload(ctx, st, "best", &vec![0u64; rows]);
    let mut next = upload(ctx, st, "next", &vec![-7i32; rows]);
    let mut tokens = upload(ctx, st, "tokens", &vec![-7i32; rows]);
    let mut posd = upload(ctx, st, "pos", &pos);
    for round in 0..2 {
        st.launch(
            "test argmax",
            &kernels.argmax,
            cfg(
                ((vocab as u32).div_ceil(ARGMAX_CHUNK), rows as u32),
                ARGMAX_THREADS,
                0,
            ),
            args![&mut ld, &mut best, vocab as i32],
        )
        .unwrap();
        st.launch(
            "test advance",
            &kernels.advance,
            cfg((1, 1), 256, 0),
            args![
                &mut best,
                &mut next,
                &mut tokens,
                &mut posd,
                rows as i32,
                64i32
            ],
        )
        .unwrap();
        st.synchronize().unwrap();
        let got = st.download(&next).unwrap();
        let rounded = st.download(&ld).unwrap();
        assert_eq!(
            st.download(&best).unwrap(),
            vec![0u64; rows],
            "best is reset"
        );
        let toks = st.download(&tokens).unwrap();
        let p = st.download(&posd).unwrap();
        for r in 0..rows {
            let row: Vec<f32> = logits[r * vocab..(r + 1) * vocab]
                .iter()
                .map(|&v| bf(v))
                .collect();
            assert_eq!(
                &rounded[r * vocab..(r + 1) * vocab],
                &row[..],
                "row {r} rounded in place"
            );
            let want = graphsmith_llama::top2(&row).0 as i32;
            if r == 1 {
                assert_eq!(got[r], -1, "a padded row has no next token");
                assert_eq!((toks[r], p[r]), (-7, -1), "a padded row does not advance");
            } else {
                assert_eq!(
                    got[r], want,
                    "round {round}, rows {rows}, vocab {vocab}, row {r}"
                );
                assert_eq!(
                    (toks[r], p[r]),
                    (want, r as i32 + 1 + round),
                    "row {r} advances"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn argmax_and_advance_match_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    for rows in [1, 3, 8] {
        for vocab in [512, 1001, 49152, 128256] {
            check_argmax(&ctx, &st, &kernels, rows, vocab);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gemv_bandwidth_on_1b_shapes() {
    // Not a pass/fail on speed: prints the fraction of the copy bandwidth each GEMV reaches on
    // the 1B config's shapes, checks that the results are finite (outputs poisoned first).
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    let copy = graphsmith_llama::copy_bandwidth(&ctx).unwrap();
    let sms = {
        let mut v = 0i32;
        // SAFETY: the device handle is the context's; v is a valid out pointer.
        let rc = unsafe {
            graphsmith::sys::cuDeviceGetAttribute(
                &mut v,
                graphsmith::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                ctx.device(),
            )
        };
        assert_eq!(rc, graphsmith::sys::CUresult::CUDA_SUCCESS);
        v as u32
    };
    for k in &kernels.gemv_norm.by_rows()[2..] {
        graphsmith_llama::kernels::allow_smem(k, 8 * 8192 * 2, "test").unwrap();
    }
    for k in &kernels.gemv_swiglu_res.by_rows()[2..] {
        graphsmith_llama::kernels::allow_smem(k, 8 * 8192 * 2, "test").unwrap();
    }
    let mut rng = Rng(3);
    for (name, n, k, swiglu) in [
        ("gate/up 16384x2048", 16384, 2048, false),
        ("down 2048x8192", 2048, 8192, true),
        ("lm_head 128256x2048", 128256, 2048, false),
    ] {
        let w = upload(&ctx, &st, "w", &rng.bf16s(n * k, 0.05));
        let nw = upload(&ctx, &st, "nw", &rng.bf16s(k, 1.0));
        for rows in [1usize, 8] {
            let xw = if swiglu { 2 * k } else { k };
            let x = upload(&ctx, &st, "x", &rng.bf16s(rows * xw, 1.0));
            let mut y = upload(&ctx, &st, "y", &vec![POISON; rows * n]);
            let g = if swiglu {
                &kernels.gemv_swiglu_res
            } else {
                &kernels.gemv_norm
            };
            if swiglu {
                st.upload(&mut y, &rng.bf16s(rows * n, 1.0)).unwrap();
            }
            let (a, b) = (
                ctx.event("t0", true).unwrap(),
                ctx.event("t1", true).unwrap(),
            );
            let iters = 20;
            gemv(
                &st,
                "warm",
                g,
                (sms, 8),
                (&x, &nw, &w),
                &mut y,
                rows,
                n,
                k,
                1e-5,
            )
            .unwrap();
            st.record(&a).unwrap();
            for _ in 0..iters {
                gemv(
                    &st,
                    "timed",
                    g,
                    (sms, 8),
                    (&x, &nw, &w),
                    &mut y,
                    rows,
                    n,
                    k,
                    1e-5,
                )
                .unwrap();
            }
            st.record(&b).unwrap();
            b.synchronize().unwrap();
            let us = b.elapsed_ms_since(&a).unwrap() as f64 * 1e3 / iters as f64;
            let tb_s = (n * k * 2) as f64 / (us * 1e-6) / 1e12;
            let out: Vec<f32> = st.download(&y).unwrap().into_iter().map(from_bf).collect();
            assert!(out.iter().all(|v| v.is_finite()), "{name} rows {rows}");
            println!(
                "{name}, rows {rows}: {us:.1} us, {tb_s:.2} TB/s of weights = {:.0}% of the copy bandwidth ({copy:.2} TB/s)",
                100.0 * tb_s / copy
            );
        }
    }
}
