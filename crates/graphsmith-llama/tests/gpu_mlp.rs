//! GPU tests of the one-row fused MLP (`ll_mlp_1`) and the GEMVs that read its sums
//! (`ll_gemv_sum_norm_1`, `ll_gemv_sum_head_1`), each against a host reference on random
//! inputs, outputs poisoned first, on the tiny, small and 1B configs' shapes (one and two
//! column rounds per warp); and the fused MLP's time against gate/up and down apart on the 1B
//! shapes (printed, not asserted).
//!
//! Run on a machine with an NVIDIA GPU:
//! `cargo test -p graphsmith-llama --release --test gpu_mlp -- --ignored --test-threads=1`

use graphsmith::{Context, DeviceBuffer, Stream};
use graphsmith_llama::kernels::{gemv, GemvGrid, Kernels};
use graphsmith_llama::mlp::{fused_mlp, gemv_after_mlp};

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

fn sm_count(ctx: &Context) -> u32 {
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
}

/// HF RMSNorm of a row (bf16 values as f32), as the kernels compute it.
fn norm(x: &[f32], nw: &[u16], eps: f32) -> Vec<f32> {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    x.iter()
        .zip(nw)
        .map(|(v, &g)| bf(from_bf(g) * bf(v * inv)))
        .collect()
}

fn dot(x: &[f32], w: &[u16]) -> f64 {
    x.iter()
        .zip(w)
        .map(|(a, &b)| *a as f64 * from_bf(b) as f64)
        .sum()
}

/// `w` (`rows` x `cols`) transposed.
fn transpose(w: &[u16], rows: usize, cols: usize) -> Vec<u16> {
    let mut t = vec![0u16; w.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = w[r * cols + c];
        }
    }
    t
}

/// The fused MLP on `(h, f)` over `sms` multiprocessors' worth of blocks, then q/k/v-like and
/// lm_head-like GEMVs reading `x + sums`, each against the host.
#[allow(clippy::too_many_arguments)]
fn check_mlp(
    ctx: &Context,
    st: &Stream,
    kernels: &Kernels,
    h: usize,
    f: usize,
    sms: u32,
    which: usize,
) {
    let mut rng = Rng(0x5eed ^ (h * 100_000 + f) as u64);
    let eps = 1e-5;
    let x = rng.bf16s(h, 2.0);
    let nw = rng.bf16s(h, 1.5);
    let wgu = rng.bf16s(2 * f * h, 0.1);
    let down = rng.bf16s(h * f, 0.1);
    let (xd, nwd, gud, dtd) = (
        upload(ctx, st, "x", &x),
        upload(ctx, st, "nw", &nw),
        upload(ctx, st, "gate_up", &wgu),
        upload(ctx, st, "down_t", &transpose(&down, h, f)),
    );
    let mut sums = upload(ctx, st, "sums", &vec![0.0f32; h]);
    // Poison: the kernel must zero it.
    let mut zero = upload(ctx, st, "zero", &vec![f32::NAN; h]);
    fused_mlp(
        st,
        "test mlp",
        &kernels.mlp,
        which,
        sms,
        (&xd, &nwd, &gud, &dtd),
        &mut sums,
        &mut zero,
        (f, h),
        eps,
    )
    .unwrap();
    st.synchronize().unwrap();
    let got: Vec<f32> = st.download(&sums).unwrap();
    assert!(
        st.download(&zero).unwrap().iter().all(|&v| v == 0.0),
        "h {h} f {f} block {which}: the previous sums are zeroed"
    );
    // Host: the norm, gate/up, SwiGLU as HF rounds it, down in f64.
    let xs = norm(&x.iter().map(|&b| from_bf(b)).collect::<Vec<_>>(), &nw, eps);
    let act: Vec<f32> = (0..f)
        .map(|o| {
            let gate = bf(dot(&xs, &wgu[o * h..(o + 1) * h]) as f32);
            let up = bf(dot(&xs, &wgu[(f + o) * h..(f + o + 1) * h]) as f32);
            bf(bf(gate / (1.0 + (-gate).exp())) * up)
        })
        .collect();
    for j in 0..h {
        let row = &down[j * f..(j + 1) * f];
        let want = dot(&act, row);
        let mag: f64 = act
            .iter()
            .zip(row)
            .map(|(a, &w)| (*a as f64 * from_bf(w) as f64).abs())
            .sum();
        // f32 sums in another order (and the activations' bf16 rounding, which can differ by
        // an ulp where a gate or up sum sits on a rounding edge): a few parts in 10^3 of the
        // terms' magnitude.
        let tol = 4e-3 * mag + 1e-4;
        assert!(
            got[j].is_finite() && ((got[j] as f64) - want).abs() <= tol,
            "h {h} f {f} block {which}: sums[{j}] = {}, want {want} (tolerance {tol})",
            got[j]
        );
    }
    // The GEMVs after it: the residual x + bf16(sums) into x_out, normed, projected.
    let prev = rng.bf16s(h, 2.0);
    let prevd = upload(ctx, st, "prev", &prev);
    let xin: Vec<f32> = prev
        .iter()
        .zip(&got)
        .map(|(&p, &s)| bf(from_bf(p) + bf(s)))
        .collect();
    let xn = norm(&xin, &nw, eps);
    let n = 3 * h / 2 + 5;
    let w = rng.bf16s(n * h, 0.1);
    let wd = upload(ctx, st, "w", &w);
    let grid_of = GemvGrid {
        sm_count: sms,
        max_rows: 1,
        warps_per_column: None,
        blocks_per_sm: None,
    };
    for head in [false, true] {
        let mut x_out = upload(ctx, st, "x_out", &vec![0x7fc1u16; h]);
        let got_y: Vec<f32> = if head {
            let mut y = upload(ctx, st, "logits", &vec![f32::NAN; n]);
            let mut best = upload(ctx, st, "best", &[0u64]);
            gemv_after_mlp(
                st,
                "test head after mlp",
                &kernels.gemv_sum_head,
                grid_of,
                (&prevd, &nwd, &wd),
                (&sums, &mut x_out),
                &mut y,
                Some(&mut best),
                (n, h),
                eps,
            )
            .unwrap();
            st.synchronize().unwrap();
            let y = st.download(&y).unwrap();
            let b = st.download(&best).unwrap()[0];
            let first_max = (0..n).fold(0, |m, i| if y[i] > y[m] { i } else { m });
            assert_eq!((0xffff_ffffu64 - (b & 0xffff_ffff)) as usize, first_max);
            y
        } else {
            let mut y = upload(ctx, st, "y", &vec![0x7fc1u16; n]);
            gemv_after_mlp(
                st,
                "test q/k/v after mlp",
                &kernels.gemv_sum_norm,
                grid_of,
                (&prevd, &nwd, &wd),
                (&sums, &mut x_out),
                &mut y,
                None,
                (n, h),
                eps,
            )
            .unwrap();
            st.synchronize().unwrap();
            st.download(&y).unwrap().into_iter().map(from_bf).collect()
        };
        let out: Vec<f32> = st
            .download(&x_out)
            .unwrap()
            .into_iter()
            .map(from_bf)
            .collect();
        assert_eq!(out, xin, "h {h} head {head}: the residual stream written");
        for o in 0..n {
            let acc = dot(&xn, &w[o * h..(o + 1) * h]);
            let want = bf(acc as f32);
            let scale = want.abs().max(acc.abs() as f32).max(1.0);
            assert!(
                got_y[o].is_finite() && (got_y[o] - want).abs() <= scale / 64.0,
                "h {h} head {head}: y[{o}] = {}, want {want}",
                got_y[o]
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_mlp_and_the_gemvs_after_it_match_a_host_reference() {
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    let sms = sm_count(&ctx);
    // tiny, small, 1B (two column rounds per warp), and few multiprocessors (more rounds).
    for (h, f, s, which) in [
        (64, 128, sms, 0),
        (576, 1536, sms, 0),
        (2048, 8192, sms, 0),
        (2048, 8192, sms, 1),
        (2048, 8192, sms, 2),
        (2048, 8192, 16, 2),
        (4096, 1000, 2, 0),
    ] {
        check_mlp(&ctx, &st, &kernels, h, f, s, which);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_mlp_time_on_1b_shapes() {
    // Not a pass/fail on speed: prints the fused MLP's time and gate/up + down's apart.
    let ctx = Context::new(0).unwrap();
    let st = ctx.stream("test").unwrap();
    let kernels = Kernels::load(&ctx).unwrap();
    let sms = sm_count(&ctx);
    let (h, f) = (2048, 8192);
    let mut rng = Rng(7);
    let x = upload(&ctx, &st, "x", &rng.bf16s(h, 1.0));
    let nw = upload(&ctx, &st, "nw", &rng.bf16s(h, 1.0));
    let gu = upload(&ctx, &st, "gate_up", &rng.bf16s(2 * f * h, 0.05));
    let down = upload(&ctx, &st, "down", &rng.bf16s(h * f, 0.05));
    let mut act = upload(&ctx, &st, "act", &vec![0u16; f]);
    let mut hid = upload(&ctx, &st, "hidden", &rng.bf16s(h, 1.0));
    let mut sums = [
        upload(&ctx, &st, "sums a", &vec![0.0f32; h]),
        upload(&ctx, &st, "sums b", &vec![0.0f32; h]),
    ];
    let iters = 50;
    let time = |run: &mut dyn FnMut(usize)| -> f64 {
        run(0);
        let (a, b) = (
            ctx.event("t0", true).unwrap(),
            ctx.event("t1", true).unwrap(),
        );
        st.record(&a).unwrap();
        for i in 0..iters {
            run(i + 1);
        }
        st.record(&b).unwrap();
        b.synchronize().unwrap();
        b.elapsed_ms_since(&a).unwrap() as f64 * 1e3 / iters as f64
    };
    let g = GemvGrid {
        sm_count: sms,
        max_rows: 1,
        warps_per_column: None,
        blocks_per_sm: None,
    };
    let apart = time(&mut |_| {
        gemv(
            &st,
            "gate/up",
            &kernels.gemv_norm_swiglu,
            g,
            (&hid, &nw, &gu),
            &mut act,
            1,
            f,
            h,
            1e-5,
        )
        .unwrap();
        gemv(
            &st,
            "down",
            &kernels.gemv_res,
            g,
            (&act, &down, &down),
            &mut hid,
            1,
            h,
            f,
            1e-5,
        )
        .unwrap();
    });
    let bytes = (3 * f * h * 2) as f64;
    println!(
        "1B MLP, one row: gate/up + down apart {apart:.1} us ({:.2} TB/s)",
        bytes / (apart * 1e-6) / 1e12
    );
    for which in 0..3 {
        let fused = time(&mut |i| {
            let [a, b] = &mut sums;
            let (s, z) = if i % 2 == 0 { (a, b) } else { (b, a) };
            fused_mlp(
                &st,
                "mlp",
                &kernels.mlp,
                which,
                sms,
                (&x, &nw, &gu, &down),
                s,
                z,
                (f, h),
                1e-5,
            )
            .unwrap();
        });
        println!(
            "1B MLP, one row: fused in blocks of {} threads {fused:.1} us ({:.2} TB/s)",
            256 << which,
            bytes / (fused * 1e-6) / 1e12
        );
    }
    let s: Vec<f32> = st.download(&sums[0]).unwrap();
    assert!(s.iter().all(|v| v.is_finite()));
}
