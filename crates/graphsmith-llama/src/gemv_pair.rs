//! GEMV pairs: at one row, two projections in one kernel, met at a grid-wide barrier
//! (`ll_gemv_pair_*` in `kernels/llama_kernels.cu`).
//!
//! Between the o projection and gate/up, and between down and the next layer's q/k/v, the only
//! work is the residual add (the first GEMV's epilogue) and an RMSNorm (the second's prologue).
//! The norm needs the whole new row, so the two GEMVs ran as two kernels. A pair runs them as
//! one: every block does its share of the first, waits at a grid-wide barrier for every other
//! block, then does its share of the second. A layer then takes three kernels (attention, o and
//! gate/up, down and the next q/k/v) where it took five.
//!
//! The barrier only opens if every block of the grid is resident at once. [`launch_pair`]
//! launches at most as many blocks as the occupancy calculator says fit on the device
//! (`cuOccupancyMaxActiveBlocksPerMultiprocessor` times the multiprocessors), and a pair is
//! only used where that is at least one block per multiprocessor. The kernels after a pair start
//! (with programmatic launch) only once every block of the pair has started. Work of another
//! stream or process that holds multiprocessors for the whole of a pair's run (a persistent
//! kernel) would block it: decode with `--tune fuse=0` beside such work.

use graphsmith::{args, sys, DeviceBuffer, Kernel, Stream};

use crate::decoder::Decoder;
use crate::kernels::{grid, warps_per_column, DEFAULT_SMEM, GEMV_THREADS};

/// Whether a batch of one row runs its projections in pairs unless `fuse=N` says otherwise
/// (see `crate::tuning`).
pub const GEMV_PAIRS_RULE: bool = false;

/// One GEMV of a pair: its weights `[n, k]` (gate/up: `[2n, k]`) and warps per output column.
#[derive(Clone, Copy)]
pub struct Stage<'a> {
    pub w: &'a DeviceBuffer<u16>,
    pub n: usize,
    pub k: usize,
    pub wpc: usize,
}

/// Dynamic shared memory of a pair (the kernel source's layout): the staged input row of either
/// GEMV, then the second's norm weights, each padded to 8 elements of 2 bytes.
pub fn pair_smem(k1: usize, k2: usize) -> usize {
    let (a, b) = (k1.next_multiple_of(8), k2.next_multiple_of(8));
    (a.max(b) + b) * 2
}

/// Blocks of one GEMV stage: a group of `wpc` warps per output column, 8 warps per block.
fn stage_blocks(s: &Stage<'_>) -> usize {
    (s.n * s.wpc).div_ceil((GEMV_THREADS / 32) as usize)
}

/// Blocks of `kernel` with `smem` bytes of dynamic shared memory that fit on one multiprocessor
/// at once (0 when the query fails).
fn resident_per_sm(kernel: &Kernel, smem: usize) -> u32 {
    let mut n = 0i32;
    // SAFETY: the function belongs to a loaded module (alive in the decoder's `Kernels`); n is
    // a valid out pointer; the query launches nothing.
    let rc = unsafe {
        sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &mut n,
            kernel.raw(),
            GEMV_THREADS as i32,
            smem,
        )
    };
    if rc == sys::CUresult::CUDA_SUCCESS {
        n.max(0) as u32
    } else {
        0
    }
}

/// The grid of a pair: enough blocks for the larger stage, at most `resident` (every block
/// resident at once) and at least one. `None` when not a block fits.
pub fn pair_blocks(first: &Stage<'_>, second: &Stage<'_>, resident: u32) -> Option<u32> {
    if resident == 0 {
        return None;
    }
    let want = stage_blocks(first).max(stage_blocks(second)).max(1);
    Some((want as u32).min(resident))
}

impl Decoder {
    /// Whether one row's projections run in pairs: the rule or `fuse=N`, and both pairs' shared
    /// memory within the default (no opt-in).
    pub(crate) fn uses_pairs(&self) -> bool {
        let c = &self.config;
        let (h, f, q) = (c.hidden_size, c.intermediate_size, c.q_dim());
        let smem = pair_smem(q, h).max(pair_smem(f, h));
        self.tuning.fuse.unwrap_or(GEMV_PAIRS_RULE) && smem + 4096 <= DEFAULT_SMEM
    }

    /// One row in pairs: q/k/v of layer 0 alone, then per layer the attention, o with gate/up,
    /// and down with the next layer's q/k/v (the last layer's down with lm_head and the argmax).
    /// Falls back to [`Decoder::issue_layers_gemv`]'s five kernels per layer when a pair's blocks
    /// cannot all be resident at once.
    pub(crate) fn issue_layers_gemv_pairs(&mut self, stream: &Stream) -> graphsmith::Result<()> {
        let c = self.config.clone();
        let (h, f, q, eps) = (
            c.hidden_size,
            c.intermediate_size,
            c.q_dim(),
            c.rms_norm_eps,
        );
        let sm = self.sm_count;
        let cap = self.tuning.gemv_blocks_per_sm.unwrap_or(u32::MAX);
        let wpc = |i: usize, n: usize, k: usize| {
            self.tuning.warps_per_column[i].unwrap_or_else(|| warps_per_column(n, k, sm as usize))
        };
        let (wq, wo, wg, wd, wh) = (
            wpc(0, c.qkv_dim(), h),
            wpc(1, h, q),
            wpc(2, f, h),
            wpc(3, h, f),
            wpc(4, c.vocab_size, h),
        );
        let pairs = &self.kernels.pairs;
        let resident =
            |k: &Kernel, k1: usize, k2: usize| resident_per_sm(k, pair_smem(k1, k2)).min(cap) * sm;
        let (r_og, r_dq, r_dh) = (
            resident(&pairs.o_gate_up, q, h),
            resident(&pairs.down_qkv, f, h),
            resident(&pairs.down_head, f, h),
        );
        if r_og < sm || r_dq < sm || r_dh < sm {
            return self.issue_layers_gemv(stream, 1);
        }
        let first = &self.weights.layers[0];
        crate::kernels::gemv(
            stream,
            "gemv q/k/v + input norm",
            &self.kernels.gemv_norm,
            self.gemv_grid(0),
            (&self.hidden, &first.input_norm, &first.qkv),
            &mut self.qkv,
            1,
            c.qkv_dim(),
            h,
            eps,
        )?;
        let layers = c.num_hidden_layers;
        for l in 0..layers {
            let range = graphsmith::range(format!("layer {l}"));
            self.attention(stream, l, 1, true)?;
            let lw = &self.weights.layers[l];
            let o = Stage {
                w: &lw.o,
                n: h,
                k: q,
                wpc: wo,
            };
            let gu = Stage {
                w: &lw.gate_up,
                n: f,
                k: h,
                wpc: wg,
            };
            launch_pair(
                stream,
                "gemv o + residual | gate/up + post-attention norm + swiglu",
                &self.kernels.pairs.o_gate_up,
                r_og,
                (&self.attn, o),
                &mut self.hidden,
                (&lw.post_norm, gu),
                &mut self.act,
                (eps, &mut self.grid_barrier, None),
            )?;
            let down = Stage {
                w: &lw.down,
                n: h,
                k: f,
                wpc: wd,
            };
            match self.weights.layers.get(l + 1) {
                Some(next) => launch_pair(
                    stream,
                    "gemv down + residual | next q/k/v + input norm",
                    &self.kernels.pairs.down_qkv,
                    r_dq,
                    (&self.act, down),
                    &mut self.hidden,
                    (
                        &next.input_norm,
                        Stage {
                            w: &next.qkv,
                            n: c.qkv_dim(),
                            k: h,
                            wpc: wq,
                        },
                    ),
                    &mut self.qkv,
                    (eps, &mut self.grid_barrier, None),
                )?,
                None => {
                    let w = &self.weights;
                    launch_pair(
                        stream,
                        "gemv down + residual | lm_head + final norm + argmax",
                        &self.kernels.pairs.down_head,
                        r_dh,
                        (&self.act, down),
                        &mut self.hidden,
                        (
                            &w.final_norm,
                            Stage {
                                w: w.head(),
                                n: c.vocab_size,
                                k: h,
                                wpc: wh,
                            },
                        ),
                        &mut self.logits,
                        (eps, &mut self.grid_barrier, Some(&mut self.best)),
                    )?
                }
            }
            drop(range);
        }
        Ok(())
    }
}

/// Launches one pair with `resident` blocks at most: `first` reads `x1` and adds into `hidden`;
/// `second` reads `hidden` through the norm with weights `nw2` and writes `y2` (with `best`, the
/// argmax of lm_head too). `bar` is the grid barrier's counter (zero once, never reset).
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn launch_pair<T: graphsmith::Element>(
    stream: &Stream,
    label: &str,
    kernel: &Kernel,
    resident: u32,
    (x1, first): (&DeviceBuffer<u16>, Stage<'_>),
    hidden: &mut DeviceBuffer<u16>,
    (nw2, second): (&DeviceBuffer<u16>, Stage<'_>),
    y2: &mut DeviceBuffer<T>,
    (eps, bar, best): (f32, &mut DeviceBuffer<u32>, Option<&mut DeviceBuffer<u64>>),
) -> graphsmith::Result<()> {
    let blocks = pair_blocks(&first, &second, resident).unwrap_or(1);
    let smem = pair_smem(first.k, second.k) as u32;
    let cfg = grid(blocks, 1, GEMV_THREADS, smem);
    let (n1, k1, w1) = (first.n as i32, first.k as i32, first.wpc as i32);
    let (n2, k2, w2) = (second.n as i32, second.k as i32, second.wpc as i32);
    match best {
        None => stream.launch(
            label,
            kernel,
            cfg,
            args![
                x1,
                first.w,
                &mut *hidden,
                n1,
                k1,
                w1,
                nw2,
                second.w,
                &mut *y2,
                n2,
                k2,
                w2,
                eps,
                &mut *bar
            ],
        ),
        Some(best) => stream.launch(
            label,
            kernel,
            cfg,
            args![
                x1,
                first.w,
                &mut *hidden,
                n1,
                k1,
                w1,
                nw2,
                second.w,
                &mut *y2,
                n2,
                k2,
                w2,
                eps,
                &mut *bar,
                &mut *best
            ],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::pair_smem;

    #[test]
    fn pair_shared_memory_holds_either_row_and_the_norm_weights() {
        // Small config: o (K = 576) with gate/up (K = 576); down (K = 1,536) with q/k/v.
        assert_eq!(pair_smem(576, 576), (576 + 576) * 2);
        assert_eq!(pair_smem(1536, 576), (1536 + 576) * 2);
        // Rows not a multiple of 8 are padded.
        assert_eq!(pair_smem(10, 3), (16 + 8) * 2);
    }
}
