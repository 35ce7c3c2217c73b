//! The prefill's kernels (`kernels/llama_kernels.cu`, "Prefill"): RoPE with the KV-cache write
//! for a chunk's rows, the causal attention of each row over its sequence's cache, and the row
//! gather that keeps each sequence's last prompt row for lm_head. The attention runs on tensor
//! cores (`ll_prefill_flash_*`) for the head_dims it exists for, else one block per (row, KV
//! head) (`ll_prefill_attention_*`): [`PrefillAttentionLaunch`] chooses and says how it launches.

use graphsmith::{Kernel, LaunchConfig, Module};

use super::all_programmatic;
use super::geometry::grid;
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

/// Query rows per `ll_prefill_flash_*` block (`FA_BM` of the kernel: 4 warps of 16 rows).
pub const FLASH_ROWS: usize = 64;

/// Positions of K and V per shared-memory tile of `ll_prefill_flash_*` (`FA_BN`).
pub const FLASH_KEYS: usize = 64;

/// Threads of an `ll_prefill_flash_*` block (`FA_WARPS` warps).
pub const FLASH_THREADS: u32 = 128;

/// The head_dims `ll_prefill_flash_*` is compiled for (its template argument).
pub const FLASH_HEAD_DIMS: [usize; 2] = [64, 128];

/// Dynamic shared memory of an `ll_prefill_flash_*` block, in bytes: each tile row's position,
/// slot and pass end (3 ints), then the tile's queries and two buffers each of K and V, rows of
/// `head_dim + 8` bf16 (16 bytes of padding keep ldmatrix free of bank conflicts).
pub fn flash_smem(head_dim: usize) -> usize {
    3 * FLASH_ROWS * 4 + (FLASH_ROWS + 4 * FLASH_KEYS) * (head_dim + 8) * 2
}

/// Which prefill attention kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillAttentionKind {
    /// `ll_prefill_flash_{64,128}`: tiles of [`FLASH_ROWS`] query rows of one query head on
    /// tensor cores.
    Flash,
    /// `ll_prefill_attention_*`: one block per (row, KV head) on CUDA cores (any head_dim up to
    /// 256).
    Rows,
}

/// How a chunk's prefill attention launches: the kernel, grid, threads and shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefillAttentionLaunch {
    /// The kernel.
    pub kind: PrefillAttentionKind,
    /// Grid x and y: (row tiles, query heads) for [`PrefillAttentionKind::Flash`], (rows, KV
    /// heads) for [`PrefillAttentionKind::Rows`].
    pub grid: (u32, u32),
    /// Threads per block.
    pub threads: u32,
    /// Dynamic shared memory per block, in bytes.
    pub smem: usize,
}

impl PrefillAttentionLaunch {
    /// The launch the decoder makes for a chunk of `rows` rows of `(query heads, KV heads,
    /// head_dim)`: the flash kernel where one exists for the head_dim, else the rows kernel.
    pub fn for_chunk(rows: usize, shape: (usize, usize, usize)) -> PrefillAttentionLaunch {
        PrefillAttentionLaunch::of_kind(rows, shape, PrefillAttentionKind::Flash)
            .unwrap_or_else(|| PrefillAttentionLaunch::rows(rows, shape))
    }

    /// The launch of `kind`, or `None` when `kind` is [`PrefillAttentionKind::Flash`] and no
    /// flash kernel exists for the head_dim.
    pub fn of_kind(
        rows: usize,
        shape: (usize, usize, usize),
        kind: PrefillAttentionKind,
    ) -> Option<PrefillAttentionLaunch> {
        let (nq, _, head_dim) = shape;
        match kind {
            PrefillAttentionKind::Rows => Some(PrefillAttentionLaunch::rows(rows, shape)),
            PrefillAttentionKind::Flash if FLASH_HEAD_DIMS.contains(&head_dim) => {
                Some(PrefillAttentionLaunch {
                    kind,
                    grid: (rows.div_ceil(FLASH_ROWS).max(1) as u32, nq as u32),
                    threads: FLASH_THREADS,
                    smem: flash_smem(head_dim),
                })
            }
            PrefillAttentionKind::Flash => None,
        }
    }

    fn rows(rows: usize, (nq, nkv, head_dim): (usize, usize, usize)) -> PrefillAttentionLaunch {
        let group = nq / nkv.max(1);
        PrefillAttentionLaunch {
            kind: PrefillAttentionKind::Rows,
            grid: (rows as u32, nkv as u32),
            threads: PREFILL_ATTENTION_THREADS,
            smem: prefill_attention_smem(PREFILL_ATTENTION_THREADS, group, head_dim),
        }
    }

    /// The launch configuration.
    pub fn config(&self) -> LaunchConfig {
        grid(self.grid.0, self.grid.1, self.threads, self.smem as u32)
    }
}

/// The prefill's kernels.
pub struct PrefillKernels {
    /// `ll_prefill_rope`: queries roped in place, roped K and V into the cache.
    pub rope: Kernel,
    /// `ll_prefill_attention_{1,2,4,8}`: by head_dim elements per lane, groups of up to 16.
    pub attention: [Kernel; 4],
    /// `ll_prefill_attention_{1,2,4,8}_g4`: the same for groups of up to 4.
    pub attention_g4: [Kernel; 4],
    /// `ll_prefill_flash_{64,128}`: by head_dim ([`FLASH_HEAD_DIMS`]), on tensor cores.
    pub flash: [Kernel; 2],
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
            flash: [
                module.kernel("ll_prefill_flash_64")?,
                module.kernel("ll_prefill_flash_128")?,
            ],
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
            flash: all_programmatic(&self.flash)?,
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

    /// The flash kernel for `head_dim`, if there is one.
    pub fn flash_for(&self, head_dim: usize) -> Option<&Kernel> {
        let i = FLASH_HEAD_DIMS.iter().position(|&d| d == head_dim)?;
        self.flash.get(i)
    }

    /// The kernel `launch` runs for `head_dim` and `group` query heads per KV head (the rows
    /// kernel where no flash kernel exists for the head_dim).
    pub fn attention_kernel(
        &self,
        launch: &PrefillAttentionLaunch,
        head_dim: usize,
        group: usize,
    ) -> &Kernel {
        match launch.kind {
            PrefillAttentionKind::Flash => self
                .flash_for(head_dim)
                .unwrap_or_else(|| self.attention_for(head_dim, group)),
            PrefillAttentionKind::Rows => self.attention_for(head_dim, group),
        }
    }

    /// Every kernel whose dynamic shared memory may need an opt-in.
    pub(crate) fn attention_kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.attention.iter().chain(&self.attention_g4)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        flash_smem, prefill_attention_smem, PrefillAttentionKind, PrefillAttentionLaunch,
        FLASH_THREADS, PREFILL_ATTENTION_THREADS,
    };

    /// The most dynamic shared memory a block may opt into on sm_90 (227 KB).
    const SM90_SMEM_OPTIN: usize = 227 * 1024;

    #[test]
    fn flash_launches_tiles_of_64_rows_per_query_head() {
        // (rows, (nq, nkv, head_dim)) -> (grid, smem): 1B-like heads at 512 and 2,048 rows, an
        // MHA 7B-like shape, a single row, a chunk not a multiple of the tile, SmolLM2-135M.
        let cases = [
            (512, (32, 8, 64), (8, 32), 46_848),
            (2048, (32, 8, 64), (32, 32), 46_848),
            (2048, (32, 32, 128), (32, 32), 87_808),
            (512, (24, 8, 128), (8, 24), 87_808),
            (1, (32, 8, 128), (1, 32), 87_808),
            (17, (9, 3, 64), (1, 9), 46_848),
            (65, (9, 3, 64), (2, 9), 46_848),
        ];
        for (rows, shape, grid, smem) in cases {
            let l = PrefillAttentionLaunch::for_chunk(rows, shape);
            let want = PrefillAttentionLaunch {
                kind: PrefillAttentionKind::Flash,
                grid,
                threads: FLASH_THREADS,
                smem,
            };
            assert_eq!(l, want, "{rows} rows of {shape:?}");
            assert_eq!(smem, flash_smem(shape.2));
            assert!(l.smem <= SM90_SMEM_OPTIN);
            let c = l.config();
            assert_eq!((c.grid.x, c.grid.y, c.grid.z), (grid.0, grid.1, 1));
            assert_eq!((c.block.x, c.block.y, c.block.z), (128, 1, 1));
            assert_eq!(c.shared_mem_bytes as usize, smem);
        }
    }

    #[test]
    fn other_head_dims_take_the_rows_kernel() {
        // tiny (head_dim 16), and head_dims 32, 80 and 256: no flash kernel.
        for (shape, smem) in [
            ((4, 2, 16), prefill_attention_smem(128, 2, 16)),
            ((8, 8, 32), prefill_attention_smem(128, 1, 32)),
            ((32, 8, 80), prefill_attention_smem(128, 4, 80)),
            ((16, 2, 256), prefill_attention_smem(128, 8, 256)),
        ] {
            let l = PrefillAttentionLaunch::for_chunk(100, shape);
            let want = PrefillAttentionLaunch {
                kind: PrefillAttentionKind::Rows,
                grid: (100, shape.1 as u32),
                threads: PREFILL_ATTENTION_THREADS,
                smem,
            };
            assert_eq!(l, want, "{shape:?}");
            assert!(l.smem <= SM90_SMEM_OPTIN);
            assert_eq!(
                PrefillAttentionLaunch::of_kind(100, shape, PrefillAttentionKind::Flash),
                None
            );
        }
        // The rows kernel asked for where the flash one exists (the benchmark's baseline).
        let rows = PrefillAttentionLaunch::of_kind(512, (32, 8, 64), PrefillAttentionKind::Rows);
        assert_eq!(
            rows.map(|l| (l.kind, l.grid, l.smem)),
            Some((
                PrefillAttentionKind::Rows,
                (512, 8),
                prefill_attention_smem(128, 4, 64)
            ))
        );
    }

    #[test]
    fn attention_shared_memory_counts_every_warp() {
        // 4 warps, 4 query heads of 64: 4 * 4 * 64 partial floats and 2 * 4 * 4 maxima/sums.
        assert_eq!(prefill_attention_smem(128, 4, 64), (1024 + 32) * 4);
    }
}
