//! The prefill attention kernels launched alone (`gpu_prefill`'s kernel tests and benchmark): a
//! chunk's rows (position and cache slot each) over random bf16 queries and caches, the host's
//! causal attention in f64, and the launch of either kernel as
//! [`PrefillAttentionLaunch`] describes it.

use graphsmith::{args, Context, DeviceBuffer, Stream};
use graphsmith_llama::kernels::{
    allow_smem, flash_smem, Kernels, PrefillAttentionKind, PrefillAttentionLaunch,
};

/// bf16 NaN: the poison of outputs and of cache positions no row may read.
pub const POISON: u16 = 0x7fc1;

/// A padding row of a chunk (position -1, slot -1).
pub const PAD: (i32, i32) = (-1, -1);

/// Cache slots of every problem (sequences of a batch).
pub const SLOTS: usize = 3;

/// (query heads, key/value heads, head_dim).
pub type Shape = (usize, usize, usize);

/// A value in [-1, 1) from (seed, i): splitmix64's finalizer of their mix.
fn noise(seed: u64, i: u64) -> f32 {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(i.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

pub fn to_bf(x: f32) -> u16 {
    half::bf16::from_f32(x).to_bits()
}

pub fn from_bf(b: u16) -> f32 {
    half::bf16::from_bits(b).to_f32()
}

/// The rows of positions `start..start + len` of cache slot `slot`.
pub fn span(slot: i32, start: i32, len: i32) -> Vec<(i32, i32)> {
    (start..start + len).map(|p| (p, slot)).collect()
}

/// One attention problem on the host: the chunk's rows (position, slot), its q/k/v rows (only
/// the queries are read), and the K and V caches `[SLOTS, nkv, max_ctx, head_dim]`: random bf16
/// at every position a row of the slot may read (up to the slot's last row in the chunk), NaN
/// past it, so a kernel that reads past a sequence's end gives NaN.
pub struct Problem {
    pub shape: Shape,
    pub rows: Vec<(i32, i32)>,
    pub max_ctx: usize,
    pub qkv: Vec<u16>,
    pub k: Vec<u16>,
    pub v: Vec<u16>,
}

impl Problem {
    /// Queries and keys in [-2, 2) (scores of a few units after the scale: a softmax neither
    /// flat nor one-hot), values in [-1, 1); `max_ctx` a few positions past the last row.
    pub fn new(shape: Shape, rows: Vec<(i32, i32)>, seed: u64) -> Problem {
        let (nq, nkv, hd) = shape;
        let max_ctx = rows.iter().map(|&(p, _)| p + 1).max().unwrap_or(1).max(1) as usize + 5;
        let qkv = (0..rows.len() * (nq + 2 * nkv) * hd)
            .map(|i| to_bf(2.0 * noise(seed, i as u64)))
            .collect();
        let mut reach = [0usize; SLOTS];
        for &(p, s) in &rows {
            if p >= 0 && s >= 0 {
                reach[s as usize] = reach[s as usize].max(p as usize + 1);
            }
        }
        let cache = |salt: u64, scale: f32| -> Vec<u16> {
            let mut out = vec![POISON; SLOTS * nkv * max_ctx * hd];
            for (s, &n) in reach.iter().enumerate() {
                for h in 0..nkv {
                    let at = (s * nkv + h) * max_ctx * hd;
                    for (i, x) in out[at..at + n * hd].iter_mut().enumerate() {
                        *x = to_bf(scale * noise(seed ^ salt, (at + i) as u64));
                    }
                }
            }
            out
        };
        let (k, v) = (cache(0x6b, 2.0), cache(0x76, 1.0));
        Problem {
            shape,
            rows,
            max_ctx,
            qkv,
            k,
            v,
        }
    }

    /// The softmax scale, as the decoder's: 1 / sqrt(head_dim).
    pub fn scale(&self) -> f32 {
        1.0 / (self.shape.2 as f32).sqrt()
    }

    /// The host's causal attention of every row (`nq * head_dim` values each; zeros for
    /// padding): scores and softmax in f64 over positions `0..=pos` of the row's slot.
    pub fn reference(&self) -> Vec<Vec<Want>> {
        let (nq, nkv, hd) = self.shape;
        let group = nq / nkv;
        let kf: Vec<f64> = self.k.iter().map(|&b| from_bf(b) as f64).collect();
        let vf: Vec<f64> = self.v.iter().map(|&b| from_bf(b) as f64).collect();
        let scale = self.scale() as f64;
        let mut all = Vec::with_capacity(self.rows.len());
        for (r, &(p, s)) in self.rows.iter().enumerate() {
            if p < 0 || s < 0 {
                all.push(vec![Want::default(); nq * hd]);
                continue;
            }
            let (p, s) = (p as usize, s as usize);
            let row = &self.qkv[r * (nq + 2 * nkv) * hd..];
            let mut out = Vec::with_capacity(nq * hd);
            for h in 0..nq {
                let q: Vec<f64> = row[h * hd..(h + 1) * hd]
                    .iter()
                    .map(|&b| from_bf(b) as f64)
                    .collect();
                let base = (s * nkv + h / group) * self.max_ctx * hd;
                let scores: Vec<f64> = (0..=p)
                    .map(|t| {
                        let k = &kf[base + t * hd..base + (t + 1) * hd];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                let mut o = vec![Want::default(); hd];
                for (t, w) in e.iter().enumerate() {
                    let w = w / sum;
                    let v = &vf[base + t * hd..base + (t + 1) * hd];
                    for (oi, vi) in o.iter_mut().zip(v) {
                        oi.value += w * vi;
                        oi.weighted_abs += w * vi.abs();
                        oi.spread += (w * vi) * (w * vi);
                    }
                }
                out.extend(o.into_iter().map(|w| Want {
                    spread: w.spread.sqrt(),
                    ..w
                }));
            }
            all.push(out);
        }
        all
    }
}

/// One output of the host's attention: the value `sum_t w_t v_t` and the two sizes its error
/// bounds take: `sum_t w_t |v_t|` (a bound on what rounding every weight by up to 1/256 of
/// itself can change) and `sqrt(sum_t (w_t v_t)^2)` (the scale of that change when the
/// roundings are independent, as they are).
#[derive(Clone, Copy, Debug, Default)]
pub struct Want {
    pub value: f64,
    pub weighted_abs: f64,
    pub spread: f64,
}

/// A problem on the device. `out` has two rows more than the problem: rows a kernel must not
/// write (they keep the poison). `pos[0]` holds the rows' positions; a benchmark adds the
/// positions of later chunks of the same rows (`add_positions`).
pub struct OnDevice {
    pub qkv: DeviceBuffer<u16>,
    pub k: DeviceBuffer<u16>,
    pub v: DeviceBuffer<u16>,
    pub pos: Vec<DeviceBuffer<i32>>,
    pub slot: DeviceBuffer<i32>,
    pub out: DeviceBuffer<u16>,
}

pub fn upload<T: graphsmith::Element>(
    ctx: &Context,
    st: &Stream,
    label: &str,
    data: &[T],
) -> DeviceBuffer<T> {
    let mut b = ctx
        .alloc::<T>(label, data.len())
        .expect("a device allocation");
    st.upload(&mut b, data).expect("an upload");
    b
}

impl OnDevice {
    pub fn new(ctx: &Context, st: &Stream, pb: &Problem) -> OnDevice {
        let (nq, _, hd) = pb.shape;
        let pos: Vec<i32> = pb.rows.iter().map(|r| r.0).collect();
        let slot: Vec<i32> = pb.rows.iter().map(|r| r.1).collect();
        OnDevice {
            qkv: upload(ctx, st, "flash/qkv", &pb.qkv),
            k: upload(ctx, st, "flash/kcache", &pb.k),
            v: upload(ctx, st, "flash/vcache", &pb.v),
            pos: vec![upload(ctx, st, "flash/pos", &pos)],
            slot: upload(ctx, st, "flash/slot", &slot),
            out: upload(
                ctx,
                st,
                "flash/out",
                &vec![POISON; (pb.rows.len() + 2) * nq * hd],
            ),
        }
    }

    /// Adds positions for the first `pos.len()` rows (the same slots): a later chunk of the
    /// same prompt, launched with `launch`'s `positions` = the index this returns.
    pub fn add_positions(&mut self, ctx: &Context, st: &Stream, pos: &[i32]) -> usize {
        self.pos.push(upload(ctx, st, "flash/pos", pos));
        self.pos.len() - 1
    }

    /// Poisons `out`.
    pub fn poison(&mut self, st: &Stream) {
        let n = self.out.len();
        st.upload(&mut self.out, &vec![POISON; n])
            .expect("the poison upload");
    }
}

/// Lets both kernels of `shape` take their shared memory (the flash kernel's needs the opt-in at
/// head_dim 128).
pub fn allow(kernels: &Kernels, rows: usize, shape: Shape) {
    for kind in [PrefillAttentionKind::Flash, PrefillAttentionKind::Rows] {
        if let Some(l) = PrefillAttentionLaunch::of_kind(rows, shape, kind) {
            let k = kernels
                .prefill
                .attention_kernel(&l, shape.2, shape.0 / shape.1);
            allow_smem(k, l.smem, "prefill attention test").expect("the shared memory opt-in");
        }
    }
    assert!(flash_smem(shape.2) <= 227 * 1024);
}

/// Launches `kind`'s kernel over the first `rows` rows of `d` at the positions
/// `d.pos[positions]` (`max_ctx` positions per slot).
#[allow(clippy::too_many_arguments)]
pub fn launch(
    st: &Stream,
    kernels: &Kernels,
    kind: PrefillAttentionKind,
    shape: Shape,
    rows: usize,
    max_ctx: usize,
    d: &mut OnDevice,
    positions: usize,
) {
    let (nq, nkv, hd) = shape;
    let l = PrefillAttentionLaunch::of_kind(rows, shape, kind)
        .unwrap_or_else(|| panic!("no {kind:?} kernel for {shape:?}"));
    let k = kernels.prefill.attention_kernel(&l, hd, nq / nkv);
    let (nq, nkv, hd, ctx, slots) = (
        nq as i32,
        nkv as i32,
        hd as i32,
        max_ctx as i32,
        SLOTS as i32,
    );
    let scale = 1.0 / (hd as f32).sqrt();
    let r = st.launch(
        "test prefill attention",
        k,
        l.config(),
        args![
            &d.qkv,
            &d.k,
            &d.v,
            &d.pos[positions],
            &d.slot,
            &mut d.out,
            nq,
            nkv,
            hd,
            ctx,
            slots,
            scale,
            rows as i32
        ],
    );
    r.unwrap_or_else(|e| panic!("the {kind:?} attention launch of {shape:?} failed: {e}"));
}

/// The tolerance of one output, with the values at most `vmax` in size (`weighted_abs` of
/// [`Want`] where the host knows it): the output's bf16 rounding (half an ulp, at most
/// |want| / 256) plus P's rounding to bf16 before the P V product (each weight off by at most
/// 1/256 of itself, the weights summing to 1: at most `vmax` / 256), both doubled; f32
/// accumulation and exp2's approximation add far less.
pub fn tolerance(want: f64, vmax: f64) -> f64 {
    (want.abs() + vmax) / 128.0
}

/// The bound on the mean error over many outputs, `n` of them, with `sum_abs` the sum of
/// |want| and `sum_spread` the sum of [`Want`]'s `spread`: the rounding of each output (at most
/// |want| / 256) plus three times the size of the weights' independent roundings (1/256 of
/// `spread` each). It catches what the per-output bound cannot on long rows, where each output
/// is a mean of hundreds of values and small: one position too many in a row's softmax moves it
/// by about 1/pos, above this bound and below the per-output one.
pub fn mean_tolerance(n: usize, sum_abs: f64, sum_spread: f64) -> f64 {
    (sum_abs + 3.0 * sum_spread) / 256.0 / n.max(1) as f64
}

/// Runs the flash kernel on `pb` (out poisoned first) and checks every row against the host:
/// within [`tolerance`], padding rows exact zeros, the two rows past the chunk still poison.
pub fn check(ctx: &Context, st: &Stream, kernels: &Kernels, what: &str, pb: &Problem) {
    let (nq, _, hd) = pb.shape;
    let rows = pb.rows.len();
    let mut d = OnDevice::new(ctx, st, pb);
    launch(
        st,
        kernels,
        PrefillAttentionKind::Flash,
        pb.shape,
        rows,
        pb.max_ctx,
        &mut d,
        0,
    );
    st.synchronize()
        .unwrap_or_else(|e| panic!("{what}: the flash attention failed: {e}"));
    let got = st.download(&d.out).expect("the output download");
    let w = nq * hd;
    for (i, &b) in got[rows * w..].iter().enumerate() {
        assert_eq!(
            b, POISON,
            "{what}: value {i} past the chunk's {rows} rows was written"
        );
    }
    let (mut n, mut sum_err, mut sum_abs, mut sum_spread) = (0usize, 0.0f64, 0.0f64, 0.0f64);
    for (r, want) in pb.reference().iter().enumerate() {
        let o = &got[r * w..(r + 1) * w];
        if pb.rows[r].0 < 0 {
            assert!(
                o.iter().all(|&b| from_bf(b) == 0.0),
                "{what}: padding row {r} is not zeros"
            );
            continue;
        }
        for (i, (&a, want)) in o.iter().zip(want).enumerate() {
            let (a, b) = (from_bf(a) as f64, want.value);
            let t = tolerance(b, want.weighted_abs);
            n += 1;
            sum_err += (a - b).abs();
            sum_abs += b.abs();
            sum_spread += want.spread;
            assert!(
                a.is_finite() && (a - b).abs() <= t,
                "{what}: row {r} (position {}, slot {}) head {} element {}: {a}, want {b} (tolerance {t})",
                pb.rows[r].0,
                pb.rows[r].1,
                i / hd,
                i % hd
            );
        }
    }
    let (mean, bound) = (
        sum_err / n.max(1) as f64,
        mean_tolerance(n, sum_abs, sum_spread),
    );
    assert!(
        mean <= bound,
        "{what}: the mean error over {n} outputs is {mean:e}, above the rounding's {bound:e}"
    );
}

/// The chunk layouts of the kernel test for `n` rows: one sequence from position 0 and from
/// position 333 (a later chunk, its first row mid-tile), each padded to a bucket; and three
/// sequences of different lengths sharing the chunk (slots 2, 0, 1 from positions 0, 70 and 5,
/// a padding row between the first two; with `n` = 1, one row of each).
pub fn layouts(n: i32) -> Vec<(String, Vec<(i32, i32)>)> {
    let bucket = |rows: &mut Vec<(i32, i32)>| {
        let b = (rows.len().next_power_of_two()).max(16);
        rows.resize(b, PAD);
    };
    let mut first = span(0, 0, n);
    bucket(&mut first);
    let mut later = span(1, 333, n);
    bucket(&mut later);
    let (a, b) = if n >= 3 { (n / 4, n / 2) } else { (1, 1) };
    let c = if n >= 3 { n - a - b } else { 1 };
    let mut batch = span(2, 0, a);
    batch.push(PAD);
    batch.extend(span(0, 70, b));
    batch.extend(span(1, 5, c));
    vec![
        (format!("{n} rows from position 0"), first),
        (format!("{n} rows from position 333"), later),
        (format!("3 sequences of {a}, {b} and {c} rows"), batch),
    ]
}
