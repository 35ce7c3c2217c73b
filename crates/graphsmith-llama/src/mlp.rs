//! One row's MLP in one kernel (`ll_mlp_1`): gate/up with the post-attention norm and SwiGLU,
//! then the down projection split over the FFN dimension, each block adding its partial sums
//! into an f32 buffer per layer. Gate/up and down need no kernel boundary between them: a
//! block's down rows need only its own activations. The residual add moves into the kernel
//! after it: the next layer's q/k/v (or lm_head) reads the residual stream as
//! `bf16(hidden + bf16(sums))`, rounded as down's residual epilogue rounds, and its block 0
//! writes that sum into the other of two residual buffers, which that layer's o projection
//! then adds into.
//!
//! The sums must be zero when their MLP starts: each MLP zeroes the previous layer's sums
//! (read by the q/k/v projection before it), the first layer's MLP the last layer's (read by
//! the previous step's lm_head), so a model needs at least two layers.

use graphsmith::{args, DeviceBuffer, Element, Kernel, Stream};

use crate::config::Config;
use crate::kernels::{gemv_config, grid, GemvGrid};

/// The kernel's column rounds per warp at most (`MLP_MAX_ROUNDS` in the kernel source).
const MLP_MAX_ROUNDS: usize = 8;

/// Threads per multiprocessor the kernels are built for (`__launch_bounds__(T, 1024 / T)`).
const MLP_THREADS_PER_SM: usize = 1024;

/// The block sizes the kernel is instantiated for (`ll_mlp_256`, `_512`, `_1024`).
pub const MLP_THREADS: [u32; 3] = [256, 512, 1024];

/// Row groups of blocks of `threads` threads on rows of `h` (see the kernel source): 1 at 256
/// threads; more where `h / 8` times them is the block (`None`: that block size does not take
/// this `h`).
pub fn mlp_row_groups(threads: u32, h: usize) -> Option<usize> {
    let rg = threads as usize / 256;
    (rg == 1 || h / 8 * rg == threads as usize).then_some(rg)
}

/// Whether the fused MLP serves `config`: the residual row in whole 16-byte pieces that one
/// block's threads hold in one round (the prologue of `gemv`'s PRO 3 and of the MLP), and two
/// layers or more (see the module's note on zeroing).
pub fn fused_mlp_fits(config: &Config) -> bool {
    let h = config.hidden_size;
    h.is_multiple_of(8) && h <= 8192 && config.num_hidden_layers >= 2
}

/// The fused MLP's grid for `f` FFN columns in blocks of `threads`: as many column rounds per
/// warp as one wave of [`MLP_THREADS_PER_SM`] threads per multiprocessor needs, then as few
/// blocks as cover the columns in that many rounds (so that every warp has the same number of
/// columns).
pub fn mlp_blocks(f: usize, sm_count: u32, threads: u32) -> u32 {
    let warps = threads as usize / 32;
    let wave = sm_count.max(1) as usize * MLP_THREADS_PER_SM / 32;
    let rounds = f.div_ceil(wave).clamp(1, MLP_MAX_ROUNDS);
    f.div_ceil(rounds * warps).max(1) as u32
}

/// Launches the fused MLP in blocks of `MLP_THREADS[which]` threads for layer inputs (hidden,
/// post-attention norm, gate/up weights, down weights transposed), adding into `sums` and
/// zeroing `zero`. A block size that does not take the model's `h` runs as blocks of 256.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn fused_mlp(
    stream: &Stream,
    label: &str,
    kernels: &[Kernel; 3],
    which: usize,
    sm_count: u32,
    inputs: (
        &DeviceBuffer<u16>,
        &DeviceBuffer<u16>,
        &DeviceBuffer<u16>,
        &DeviceBuffer<u16>,
    ),
    sums: &mut DeviceBuffer<f32>,
    zero: &mut DeviceBuffer<f32>,
    (f, h): (usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    let (x, nw, gate_up, down_t) = inputs;
    let which = if mlp_row_groups(MLP_THREADS[which], h).is_some() {
        which
    } else {
        0
    };
    let threads = MLP_THREADS[which];
    let rg = mlp_row_groups(threads, h).unwrap_or(1);
    // At least one thread per element of `zero`.
    let blocks = mlp_blocks(f, sm_count, threads).max((h as u32).div_ceil(threads));
    let smem = h * 2 + if rg > 1 { rg * h * 4 } else { 0 };
    stream.launch(
        label,
        &kernels[which],
        grid(blocks, 1, threads, smem as u32),
        args![x, nw, gate_up, down_t, sums, zero, f as i32, h as i32, eps],
    )
}

/// A one-row GEMV whose input is `x + bf16(sums)` with the norm (`ll_gemv_sum_norm_1`, or with
/// `best`, `ll_gemv_sum_head_1`); block 0 writes that input into `x_out`.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn gemv_after_mlp<T: Element>(
    stream: &Stream,
    label: &str,
    kernel: &Kernel,
    grid_of: GemvGrid,
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    (sums, x_out): (&DeviceBuffer<f32>, &mut DeviceBuffer<u16>),
    y: &mut DeviceBuffer<T>,
    best: Option<&mut DeviceBuffer<u64>>,
    (n, k): (usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    let (x, nw, w) = inputs;
    let (cfg, wpc) = gemv_config(grid_of, 1, n, k);
    let (nn, kk, wp) = (n as i32, k as i32, wpc as i32);
    match best {
        None => stream.launch(
            label,
            kernel,
            cfg,
            args![x, nw, w, y, 0i32, 1i32, nn, kk, eps, wp, sums, x_out],
        ),
        Some(best) => stream.launch(
            label,
            kernel,
            cfg,
            args![x, nw, w, y, 0i32, 1i32, nn, kk, eps, wp, sums, x_out, best],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_warp_takes_the_same_number_of_columns_in_one_wave() {
        // 1B: 8,192 columns on 132 multiprocessors: two rounds, 512 blocks of 256 (528 fit),
        // 256 of 512, 128 of 1,024.
        assert_eq!(mlp_blocks(8192, 132, 256), 512);
        assert_eq!(mlp_blocks(8192, 132, 512), 256);
        assert_eq!(mlp_blocks(8192, 132, 1024), 128);
        // small: 1,536 columns, one round.
        assert_eq!(mlp_blocks(1536, 132, 256), 192);
        assert_eq!(mlp_blocks(128, 132, 256), 16);
        for threads in MLP_THREADS {
            let warps = threads as usize / 32;
            for (f, sms) in [(8192, 132), (1536, 132), (14336, 132), (5, 1), (100_000, 2)] {
                let b = mlp_blocks(f, sms, threads) as usize;
                let rounds = f.div_ceil(b * warps);
                assert!(rounds <= MLP_MAX_ROUNDS, "{f} on {sms}");
                assert!(b * warps * rounds >= f);
            }
        }
        assert_eq!(mlp_row_groups(256, 576), Some(1));
        assert_eq!(mlp_row_groups(1024, 2048), Some(4));
        assert_eq!(mlp_row_groups(512, 2048), Some(2));
        assert_eq!(mlp_row_groups(512, 576), None);
    }

    #[test]
    fn the_fused_mlp_needs_whole_pieces_and_two_layers() {
        let mut c = Config::named("1b").unwrap();
        assert!(fused_mlp_fits(&c));
        c.num_hidden_layers = 1;
        assert!(!fused_mlp_fits(&c));
        let mut c = Config::named("small").unwrap();
        assert!(fused_mlp_fits(&c));
        c.hidden_size = 580;
        assert!(!fused_mlp_fits(&c));
    }
}
