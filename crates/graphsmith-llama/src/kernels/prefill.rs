//! The prefill's kernels (`kernels/llama_kernels.cu`, "Prefill"): RoPE with the KV-cache write
//! for a chunk's rows, the causal attention of each row over its sequence's cache, and the row
//! gather that keeps each sequence's last prompt row for lm_head.

use graphsmith::{Kernel, Module};

use super::all_programmatic;
use crate::error::Result;

/// Threads of an `ll_prefill_attention_*` block (4 warps).
pub const PREFILL_ATTENTION_THREADS: u32 = 128;

/// Threads of an `ll_prefill_rope` and an `ll_gather_rows` block.
pub const PREFILL_ROW_THREADS: u32 = 128;

/// Dynamic shared memory of an `ll_prefill_attention_*` block of `threads` threads, in bytes:
/// each warp's partial (`group * head_dim` floats) and its max and sum per query head.
pub fn prefill_attention_smem(threads: u32, group: usize, head_dim: usize) -> usize {
    let warps = (threads / 32) as usize;
    (warps * group * head_dim + 2 * warps * group) * 4
}

/// The prefill's kernels.
pub struct PrefillKernels {
    /// `ll_prefill_rope`: queries roped in place, roped K and V into the cache.
    pub rope: Kernel,
    /// `ll_prefill_attention_{1,2,4,8}`: by head_dim elements per lane, groups of up to 16.
    pub attention: [Kernel; 4],
    /// `ll_prefill_attention_{1,2,4,8}_g4`: the same for groups of up to 4.
    pub attention_g4: [Kernel; 4],
    /// `ll_gather_rows`: each sequence's last prompt row into the decoder's rows.
    pub gather: Kernel,
}

impl PrefillKernels {
    /// The prefill's kernels of the decoder's module.
    pub(crate) fn load(module: &Module) -> Result<PrefillKernels> {
        let four = |suffix: &str| -> Result<[Kernel; 4]> {
            Ok([
                module.kernel(&format!("ll_prefill_attention_1{suffix}"))?,
                module.kernel(&format!("ll_prefill_attention_2{suffix}"))?,
                module.kernel(&format!("ll_prefill_attention_4{suffix}"))?,
                module.kernel(&format!("ll_prefill_attention_8{suffix}"))?,
            ])
        };
        Ok(PrefillKernels {
            rope: module.kernel("ll_prefill_rope")?,
            attention: four("")?,
            attention_g4: four("_g4")?,
            gather: module.kernel("ll_gather_rows")?,
        })
    }

    /// The same kernels opted into programmatic dependent launch (each waits for its
    /// predecessor before reading anything).
    pub(crate) fn programmatic(&self) -> graphsmith::Result<PrefillKernels> {
        Ok(PrefillKernels {
            rope: self.rope.clone().programmatic()?,
            attention: all_programmatic(&self.attention)?,
            attention_g4: all_programmatic(&self.attention_g4)?,
            gather: self.gather.clone().programmatic()?,
        })
    }

    /// The attention instantiation for `head_dim` (at most 256) and `group` query heads per
    /// key/value head (at most 16), chosen as the decode attention's.
    pub fn attention_for(&self, head_dim: usize, group: usize) -> &Kernel {
        let i = match head_dim {
            0..=32 => 0,
            33..=64 => 1,
            65..=128 => 2,
            _ => 3,
        };
        if group <= 4 {
            &self.attention_g4[i]
        } else {
            &self.attention[i]
        }
    }

    /// Every kernel whose dynamic shared memory may need an opt-in.
    pub(crate) fn attention_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.attention.iter().chain(&self.attention_g4)
    }
}

#[cfg(test)]
mod tests {
    use super::prefill_attention_smem;

    #[test]
    fn attention_shared_memory_counts_every_warp() {
        // 4 warps, 4 query heads of 64: 4 * 4 * 64 partial floats and 2 * 4 * 4 maxima/sums.
        assert_eq!(prefill_attention_smem(128, 4, 64), (1024 + 32) * 4);
    }
}
