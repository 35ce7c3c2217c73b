//! The decoder's kernels (`kernels/llama_kernels.cu`, PTX compiled ahead of time): loading
//! them, choosing an instantiation, their launch geometry, and the GEMV launcher.

use graphsmith::model::Dim3;
use graphsmith::{args, sys, Context, DeviceBuffer, Kernel, LaunchConfig, Module, Stream};

use crate::error::{LlamaError, Result};

/// PTX of the decoder's kernels (`kernels/llama_kernels.cu`), compiled ahead of time.
pub const LLAMA_PTX: &str = include_str!("../../../kernels/llama_kernels.ptx");

/// Threads per block of the attention kernel (8 warps share out the positions).
pub const ATTENTION_THREADS: u32 = 256;
/// Threads per block of the GEMV kernels (one warp per output column).
pub const GEMV_THREADS: u32 = 256;
/// Threads per block of the argmax kernel.
pub const ARGMAX_THREADS: u32 = 256;
/// Vocabulary entries per argmax block.
pub const ARGMAX_CHUNK: u32 = ARGMAX_THREADS * 8;

/// Fewest positions per attention block (two per warp): `ATT_MIN_CHUNK` of the kernel.
pub const ATTENTION_MIN_CHUNK: usize = 16;
/// Most attention blocks per (row, key/value head) the decoder launches (the kernel takes any
/// count; this bounds the scratch and the last block's combine).
pub const ATTENTION_MAX_SPLITS: usize = 64;

/// Blocks per (row, key/value head) of the attention's cluster variants
/// (`ll_attention_{1,2,4}_c8`, `ATT_CLUSTER` of the kernel): one thread block cluster, whose
/// blocks combine their partial results in distributed shared memory.
pub const ATTENTION_CLUSTER: usize = 8;
/// Threads per block of the cluster variants (16 warps share out a block's positions).
pub const ATTENTION_CLUSTER_THREADS: u32 = 512;
/// The longest context (the cache's capacity) at which the rule runs the attention as clusters.
/// Its 8 blocks per (row, key/value head) take ever more positions each as the context grows,
/// where the plain kernel splits wider.
pub const ATTENTION_CLUSTER_MAX_CTX: usize = 512;

/// How one step's attention launches: [`AttentionLaunch::for_rows`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionLaunch {
    /// Whether the cluster variant runs (else `ll_attention_*`, combining through global memory).
    pub cluster: bool,
    /// Blocks per (row, key/value head): grid z.
    pub splits: usize,
    /// Threads per block.
    pub threads: u32,
}

impl AttentionLaunch {
    /// The launch for `rows` rows: [`attention_splits`] (capped by `splits_cap`) blocks of
    /// [`ATTENTION_THREADS`]; or one cluster of [`ATTENTION_CLUSTER`] blocks of
    /// [`ATTENTION_CLUSTER_THREADS`], for groups of up to 4 query heads and head_dim up to 128
    /// (the variants that exist), when `cluster` asks for it or, unless it says no, by the
    /// rule: one row, no cap on the splits, at least [`ATTENTION_CLUSTER`] splits by the split
    /// rule and a context of at most [`ATTENTION_CLUSTER_MAX_CTX`]: there one wave of blocks
    /// holds the positions, and combining in distributed shared memory saves the plain kernel's
    /// round trip through global memory and its last block's combine.
    pub fn for_rows(
        rows: usize,
        (kv_heads, group, head_dim): (usize, usize, usize),
        max_ctx: usize,
        sm_count: usize,
        splits_cap: Option<usize>,
        cluster: Option<bool>,
    ) -> AttentionLaunch {
        let mut splits = attention_splits(rows, kv_heads, max_ctx, sm_count);
        if let Some(cap) = splits_cap {
            splits = splits.min(cap.max(1));
        }
        let fits = group <= 4 && head_dim <= 128;
        let rule = rows == 1
            && splits_cap.is_none()
            && splits >= ATTENTION_CLUSTER
            && max_ctx <= ATTENTION_CLUSTER_MAX_CTX;
        if fits && cluster.unwrap_or(rule) {
            AttentionLaunch {
                cluster: true,
                splits: ATTENTION_CLUSTER,
                threads: ATTENTION_CLUSTER_THREADS,
            }
        } else {
            AttentionLaunch {
                cluster: false,
                splits,
                threads: ATTENTION_THREADS,
            }
        }
    }

    /// Dynamic shared memory of one block for `group` query heads of `head_dim`
    /// ([`attention_smem`]).
    pub fn smem(&self, group: usize, head_dim: usize) -> usize {
        attention_smem(group, head_dim, self.splits, self.threads, self.cluster)
    }
}

/// Dynamic shared memory of one attention block (`ll_attention`) of `threads` threads for
/// `group` query heads per key/value head of `head_dim`, launched with `splits` blocks per
/// (row, key/value head): the roped queries, each warp's partial output, max and sum, the
/// combine's weight per block, the new position's K and V, the block's max and sum per head,
/// and, in a `cluster`, the partials the blocks of the cluster exchange (each block's share of
/// the output from every block, and every block's max and sum per head).
pub fn attention_smem(
    group: usize,
    head_dim: usize,
    splits: usize,
    threads: u32,
    cluster: bool,
) -> usize {
    let warps = (threads / 32) as usize;
    let partial = if cluster {
        ATTENTION_CLUSTER * ((group * head_dim).div_ceil(ATTENTION_CLUSTER) + 2 * group)
    } else {
        0
    };
    (group * head_dim * (warps + 1)
        + 2 * warps * group
        + (splits + 1) * group
        + 2 * head_dim
        + 2 * group
        + partial)
        * 4
}

/// Blocks per (row, key/value head) of the attention (grid z), fixed when a step is issued (a
/// captured graph keeps it while positions move on): enough that the `rows * kv_heads * splits`
/// blocks about fill one wave on `sm_count` multiprocessors, but no more than `max_ctx` positions
/// fill with [`ATTENTION_MIN_CHUNK`] each, and at most [`ATTENTION_MAX_SPLITS`]. The kernel
/// sizes each block's chunk from the row's position on the device (`max(ceil(len / splits),
/// ATTENTION_MIN_CHUNK)`), so short contexts use fewer blocks.
pub fn attention_splits(rows: usize, kv_heads: usize, max_ctx: usize, sm_count: usize) -> usize {
    let per_split = (rows * kv_heads).max(1);
    sm_count
        .div_ceil(per_split)
        .min(max_ctx.div_ceil(ATTENTION_MIN_CHUNK))
        .clamp(1, ATTENTION_MAX_SPLITS)
}

/// Floats of the attention's partial results (`part`: per row, key/value head and split, the
/// `group` heads' weighted sums of `head_dim` values, maxima and sums) for steps of 1 to
/// `capacity` rows, each with [`attention_splits`] splits.
pub fn attention_partials_len(
    capacity: usize,
    (kv_heads, group, head_dim): (usize, usize, usize),
    max_ctx: usize,
    sm_count: usize,
) -> usize {
    let slots = (1..=capacity.max(1))
        .map(|rows| rows * attention_splits(rows, kv_heads, max_ctx, sm_count))
        .max()
        .unwrap_or(1);
    slots * kv_heads * group * (head_dim + 2)
}
/// Row counts the GEMV kernels are instantiated for (a batch runs in the smallest that holds it;
/// more rows run in chunks of the largest).
pub(crate) const GEMV_ROWS: [usize; 4] = [1, 2, 4, 8];
/// With [`Gemm::Auto`], batches of at most this many rows use the GEMV kernels: above one row
/// they reach a much smaller share of the memory bandwidth than at one row, and cuBLAS serves
/// such batches faster.
pub const GEMV_AUTO_MAX_ROWS: usize = 1;

/// Which kernels run the projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gemm {
    /// The decoder's own GEMV kernels (norm, SwiGLU and residual fused) for batches of at most
    /// [`GEMV_AUTO_MAX_ROWS`] rows, cuBLAS above.
    #[default]
    Auto,
    /// cuBLAS for every batch (separate norm and SwiGLU kernels).
    Cublas,
    /// The GEMV kernels for every batch (in chunks of 8 rows above 8).
    Gemv,
}

/// The choice named `s` among `choices`, or an error naming `what` and every choice.
fn parse_choice<T: Copy>(s: &str, what: &str, choices: &[(&str, T)]) -> Result<T, String> {
    choices
        .iter()
        .find(|(name, _)| *name == s)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!("unknown {what} {s:?} (want {})", names.join(", "))
        })
}

impl std::str::FromStr for Gemm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Gemm, String> {
        let choices = [
            ("auto", Gemm::Auto),
            ("cublas", Gemm::Cublas),
            ("gemv", Gemm::Gemv),
        ];
        parse_choice(s, "GEMM path", &choices)
    }
}

/// One GEMV variant (prologue, epilogue), instantiated for 1, 2, 4 and 8 rows.
pub struct GemvKernels {
    pub(crate) by_rows: [Kernel; 4],
}

impl GemvKernels {
    fn load(module: &Module, name: &str) -> Result<GemvKernels> {
        Ok(GemvKernels {
            by_rows: [
                module.kernel(&format!("{name}_1"))?,
                module.kernel(&format!("{name}_2"))?,
                module.kernel(&format!("{name}_4"))?,
                module.kernel(&format!("{name}_8"))?,
            ],
        })
    }

    /// The instantiations for 1, 2, 4 and 8 rows.
    pub fn by_rows(&self) -> &[Kernel; 4] {
        &self.by_rows
    }

    /// The instantiation for `rows` rows (at most 8) and its row capacity.
    fn for_rows(&self, rows: usize) -> (&Kernel, usize) {
        let i = GEMV_ROWS.iter().position(|&r| rows <= r).unwrap_or(3);
        (&self.by_rows[i], GEMV_ROWS[i])
    }
}
/// Dynamic shared memory a kernel may use without opting in.
pub(crate) const DEFAULT_SMEM: usize = 48 << 10;

/// The decoder's kernels.
pub struct Kernels {
    pub embed: Kernel,
    pub rmsnorm: Kernel,
    /// `ll_attention_{1,2,4,8}`: by head_dim elements per lane, groups of up to 16 query heads
    /// (see [`Kernels::attention_for`]).
    pub attention: [Kernel; 4],
    /// `ll_attention_{1,2,4,8}_g4`: the same for groups of up to 4 (fewer registers).
    pub attention_g4: [Kernel; 4],
    /// `ll_attention_{1,2,4}_c8`: groups of up to 4, head_dim up to 128, in clusters of
    /// [`ATTENTION_CLUSTER`] blocks (see [`AttentionLaunch`]).
    pub attention_c8: [Kernel; 3],
    pub swiglu: Kernel,
    pub argmax: Kernel,
    pub advance: Kernel,
    /// `ll_loop_advance`: `ll_advance` and the bookkeeping of one iteration of the device-side
    /// decode loop in one kernel, the last of the loop's body.
    pub loop_advance: Kernel,
    /// GEMV with the RMSNorm as prologue, bf16 out (q/k/v; gate/up on the unfused path).
    pub gemv_norm: GemvKernels,
    /// GEMV with the RMSNorm as prologue and SwiGLU as epilogue (gate/up: two weight rows per
    /// output column, bf16 activation out).
    pub gemv_norm_swiglu: GemvKernels,
    /// GEMV with the residual add as epilogue (o).
    pub gemv_res: GemvKernels,
    /// GEMV with SwiGLU as prologue and the residual add as epilogue (down).
    pub gemv_swiglu_res: GemvKernels,
    /// GEMV with the final norm as prologue, f32 out (lm_head).
    pub gemv_norm_f32: GemvKernels,
    /// The same, with each row's argmax folded into `best` (lm_head when the argmax is fused).
    pub gemv_head: GemvKernels,
    /// One-row GEMVs whose lanes stream their weights through rings in shared memory
    /// ([`gemv_async`], the rule where [`ring_gemv_rule`] says so): q/k/v with the norm
    /// (triggering after its wait, as `gemv_norm`), gate/up with the norm and SwiGLU, o and
    /// down with the residual.
    pub gemv_async_norm: Kernel,
    pub gemv_async_norm_swiglu: Kernel,
    pub gemv_async_res: Kernel,
    _module: Module,
}

impl Kernels {
    /// Loads the embedded PTX.
    pub fn load(ctx: &Context) -> Result<Kernels> {
        let module = ctx.load_ptx("llama_kernels", LLAMA_PTX)?;
        Ok(Kernels {
            embed: module.kernel("ll_embed")?,
            rmsnorm: module.kernel("ll_rmsnorm")?,
            attention: [
                module.kernel("ll_attention_1")?,
                module.kernel("ll_attention_2")?,
                module.kernel("ll_attention_4")?,
                module.kernel("ll_attention_8")?,
            ],
            attention_g4: [
                module.kernel("ll_attention_1_g4")?,
                module.kernel("ll_attention_2_g4")?,
                module.kernel("ll_attention_4_g4")?,
                module.kernel("ll_attention_8_g4")?,
            ],
            attention_c8: [
                module.kernel("ll_attention_1_c8")?,
                module.kernel("ll_attention_2_c8")?,
                module.kernel("ll_attention_4_c8")?,
            ],
            swiglu: module.kernel("ll_swiglu")?,
            argmax: module.kernel("ll_argmax")?,
            advance: module.kernel("ll_advance")?,
            loop_advance: module.kernel("ll_loop_advance")?,
            // The q/k/v projection lets its dependents start only after its wait (LATE in the
            // kernel source): the attention after it reads before its own wait.
            gemv_norm: GemvKernels::load(&module, "ll_gemv_norm")?.triggering_after_wait(),
            gemv_norm_swiglu: GemvKernels::load(&module, "ll_gemv_norm_swiglu")?,
            gemv_res: GemvKernels::load(&module, "ll_gemv_res")?,
            gemv_swiglu_res: GemvKernels::load(&module, "ll_gemv_swiglu_res")?,
            gemv_norm_f32: GemvKernels::load(&module, "ll_gemv_norm_f32")?,
            gemv_head: GemvKernels::load(&module, "ll_gemv_head")?,
            gemv_async_norm: module.kernel("ll_gemv_async_norm")?.triggers_after_wait(),
            gemv_async_norm_swiglu: module.kernel("ll_gemv_async_norm_swiglu")?,
            gemv_async_res: module.kernel("ll_gemv_async_res")?,
            _module: module,
        })
    }
}

impl GemvKernels {
    /// The same kernels, stated to trigger their dependents after their wait
    /// ([`Kernel::triggers_after_wait`]).
    fn triggering_after_wait(self) -> GemvKernels {
        GemvKernels {
            by_rows: self.by_rows.map(Kernel::triggers_after_wait),
        }
    }

    fn programmatic(&self) -> graphsmith::Result<GemvKernels> {
        let [a, b, c, d] = &self.by_rows;
        Ok(GemvKernels {
            by_rows: [
                a.clone().programmatic()?,
                b.clone().programmatic()?,
                c.clone().programmatic()?,
                d.clone().programmatic()?,
            ],
        })
    }
}

impl Kernels {
    /// The same kernels opted into programmatic dependent launch (each kernel waits for its
    /// predecessor with `griddepcontrol.wait` before touching what it wrote: see
    /// `kernels/llama_kernels.cu`). Fails on a device below compute capability 9.0.
    pub fn programmatic(&self) -> graphsmith::Result<Kernels> {
        let all = |ks: &[Kernel; 4]| -> graphsmith::Result<[Kernel; 4]> {
            let [a, b, c, d] = ks;
            Ok([
                a.clone().programmatic()?,
                b.clone().programmatic()?,
                c.clone().programmatic()?,
                d.clone().programmatic()?,
            ])
        };
        Ok(Kernels {
            embed: self.embed.clone().programmatic()?,
            rmsnorm: self.rmsnorm.clone().programmatic()?,
            attention: all(&self.attention)?,
            attention_g4: all(&self.attention_g4)?,
            attention_c8: {
                let [a, b, c] = &self.attention_c8;
                [
                    a.clone().programmatic()?,
                    b.clone().programmatic()?,
                    c.clone().programmatic()?,
                ]
            },
            swiglu: self.swiglu.clone().programmatic()?,
            argmax: self.argmax.clone().programmatic()?,
            advance: self.advance.clone().programmatic()?,
            loop_advance: self.loop_advance.clone().programmatic()?,
            gemv_norm: self.gemv_norm.programmatic()?,
            gemv_norm_swiglu: self.gemv_norm_swiglu.programmatic()?,
            gemv_res: self.gemv_res.programmatic()?,
            gemv_swiglu_res: self.gemv_swiglu_res.programmatic()?,
            gemv_norm_f32: self.gemv_norm_f32.programmatic()?,
            gemv_head: self.gemv_head.programmatic()?,
            gemv_async_norm: self.gemv_async_norm.clone().programmatic()?,
            gemv_async_norm_swiglu: self.gemv_async_norm_swiglu.clone().programmatic()?,
            gemv_async_res: self.gemv_async_res.clone().programmatic()?,
            _module: self._module.clone(),
        })
    }

    /// Whether these kernels are opted into programmatic dependent launch.
    pub fn is_programmatic(&self) -> bool {
        self.embed.is_programmatic()
    }
}

/// Whether the decoder's kernels use programmatic dependent launch (PDL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pdl {
    /// On where the device has it (compute capability 9.0 or newer), off elsewhere.
    #[default]
    Auto,
    /// On; a device without it is an error naming the feature.
    On,
    /// Off: every launch waits for its predecessor to finish.
    Off,
}

impl std::str::FromStr for Pdl {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Pdl, String> {
        let choices = [("auto", Pdl::Auto), ("on", Pdl::On), ("off", Pdl::Off)];
        parse_choice(s, "--pdl", &choices)
    }
}

impl Kernels {
    /// The attention instantiation for `head_dim` (at most 256) and `group` query heads per
    /// key/value head (at most 16): lanes hold head_dim / 32 elements each, rounded up to 1, 2,
    /// 4 or 8; groups of up to 4 take the smaller `_g4` kernels.
    pub fn attention_for(&self, head_dim: usize, group: usize) -> &Kernel {
        self.attention_kernel(head_dim, group, false)
    }

    /// The instantiation [`AttentionLaunch`] asks for: with `cluster`, the `_c8` kernel (which
    /// exists for groups of up to 4 and head_dim up to 128, as `AttentionLaunch::for_rows`
    /// requires).
    pub fn attention_kernel(&self, head_dim: usize, group: usize, cluster: bool) -> &Kernel {
        let i = match head_dim {
            0..=32 => 0,
            33..=64 => 1,
            65..=128 => 2,
            _ => 3,
        };
        if cluster && i < 3 && group <= 4 {
            &self.attention_c8[i]
        } else if group <= 4 {
            &self.attention_g4[i]
        } else {
            &self.attention[i]
        }
    }
}

pub(crate) fn grid(x: u32, y: u32, block: u32, smem: u32) -> LaunchConfig {
    grid3((x, y, 1), block, smem)
}

pub(crate) fn grid3((x, y, z): (u32, u32, u32), block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 { x, y, z },
        block: Dim3 {
            x: block,
            y: 1,
            z: 1,
        },
        shared_mem_bytes: smem,
    }
}

/// How a GEMV is spread over the GPU: the multiprocessors, the most rows one launch takes
/// (the largest instantiation whose shared memory was allowed), and the warps per output column
/// (`None`: [`warps_per_column`]'s choice). A `(sm_count, max_rows)` pair converts into it.
#[derive(Clone, Copy, Debug)]
pub struct GemvGrid {
    pub sm_count: u32,
    pub max_rows: usize,
    pub warps_per_column: Option<usize>,
    /// At most this many resident blocks per multiprocessor (`None`: as many as fit, up to 4).
    pub blocks_per_sm: Option<u32>,
}

impl From<(u32, usize)> for GemvGrid {
    fn from((sm_count, max_rows): (u32, usize)) -> GemvGrid {
        GemvGrid {
            sm_count,
            max_rows,
            warps_per_column: None,
            blocks_per_sm: None,
        }
    }
}

/// Launches one GEMV variant `y[rows, n] (op)= prologue(x)[rows, k] @ w[n, k]^T` for `rows`
/// rows, in chunks of at most `max_rows` (1 to 8: the largest instantiation whose shared memory
/// the kernels were allowed); `inputs` is (x, norm weight, w)
/// (the norm weight is only read by the norm variants; others pass any buffer). The grid covers
/// the `n` columns with a group of [`warps_per_column`] warps each, capped at a few blocks per
/// multiprocessor (each block stages its rows' input once, then strides over columns).
/// `gemv_norm_swiglu` reads weight rows `o` and `n + o` for output column `o`.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn gemv<T: graphsmith::Element>(
    stream: &Stream,
    label: &str,
    kernels: &GemvKernels,
    sms: impl Into<GemvGrid>,
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    y: &mut DeviceBuffer<T>,
    rows: usize,
    n: usize,
    k: usize,
    eps: f32,
) -> graphsmith::Result<()> {
    launch_gemv(
        stream,
        label,
        kernels,
        sms.into(),
        inputs,
        y,
        None,
        (rows, n, k),
        eps,
    )
}

/// [`gemv`] with `gemv_head`: the f32 logits of lm_head, and each row's argmax folded into
/// `best[r]` (as `ll_argmax` does; `best` is 0 before the step and `ll_advance` resets it).
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn gemv_head(
    stream: &Stream,
    label: &str,
    kernels: &GemvKernels,
    sms: impl Into<GemvGrid>,
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    logits: &mut DeviceBuffer<f32>,
    best: &mut DeviceBuffer<u64>,
    (rows, n, k): (usize, usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    launch_gemv(
        stream,
        label,
        kernels,
        sms.into(),
        inputs,
        logits,
        Some(best),
        (rows, n, k),
        eps,
    )
}

#[track_caller]
#[allow(clippy::too_many_arguments)]
fn launch_gemv<T: graphsmith::Element>(
    stream: &Stream,
    label: &str,
    kernels: &GemvKernels,
    grid_of: GemvGrid,
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    y: &mut DeviceBuffer<T>,
    mut best: Option<&mut DeviceBuffer<u64>>,
    (rows, n, k): (usize, usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    let (x, nw, w) = inputs;
    let warps = (GEMV_THREADS / 32) as usize;
    let (sm_count, max_rows) = (grid_of.sm_count, grid_of.max_rows);
    let wpc = grid_of
        .warps_per_column
        .unwrap_or_else(|| warps_per_column(n, k, sm_count as usize));
    let mut row0 = 0;
    while row0 < rows {
        let chunk = (rows - row0).min(max_rows.clamp(1, 8));
        let (kernel, cap) = kernels.for_rows(chunk);
        let smem = cap * k.next_multiple_of(8) * 2;
        // Resident blocks per multiprocessor: at most 4 (64 registers x 256 threads), fewer
        // when the staged rows take more shared memory; the grid is one wave of them.
        let per_sm = ((200usize << 10) / smem.max(1)).clamp(1, 4) as u32;
        let per_sm = grid_of
            .blocks_per_sm
            .map_or(per_sm, |b| per_sm.min(b.max(1)));
        let blocks = ((n * wpc).div_ceil(warps) as u32)
            .min(sm_count * per_sm)
            .max(1);
        let cfg = grid(blocks, 1, GEMV_THREADS, smem as u32);
        let (r0, c, nn, kk, wp) = (row0 as i32, chunk as i32, n as i32, k as i32, wpc as i32);
        match best.as_deref_mut() {
            None => stream.launch(
                label,
                kernel,
                cfg,
                args![x, nw, w, &mut *y, r0, c, nn, kk, eps, wp],
            )?,
            Some(best) => stream.launch(
                label,
                kernel,
                cfg,
                args![x, nw, w, &mut *y, r0, c, nn, kk, eps, wp, &mut *best],
            )?,
        }
        row0 += chunk;
    }
    Ok(())
}

/// A GEMV column of `k` bf16 weights in slices of 512 bytes, rounded up (at least one): what
/// one warp reads in one round, a 16-byte piece per lane.
fn column_slices(k: usize) -> usize {
    (k / 8).div_ceil(32).max(1)
}

/// Warps per output column of a GEMV (1, 2, 4 or 8): enough that the columns' warps about fill
/// the GPU (4 blocks of 8 warps per multiprocessor), up to the first power of two that covers
/// the column's 512-byte slices of weights (one 16-byte piece per lane), so that no lane reads
/// more pieces than the others (the small config's o columns of 2.25 slices take 4 warps). The
/// q/k/v projection takes fewer ([`QKV_WARPS_PER_COLUMN`]).
pub fn warps_per_column(n: usize, k: usize, sm_count: usize) -> usize {
    warps_per_column_within(n, k, sm_count * 4 * (GEMV_THREADS / 32) as usize)
}

/// [`warps_per_column`] for a grid of `want` warps.
pub fn warps_per_column_within(n: usize, k: usize, want: usize) -> usize {
    let slices = column_slices(k);
    let mut wpc = 1;
    while wpc < 8 && n * wpc * 2 <= want && wpc < slices {
        wpc *= 2;
    }
    wpc
}

/// Warps per output column of the q/k/v projection at one row: one, whatever the shape. The
/// attention's blocks start while this projection runs (programmatic launch) and load before
/// their wait, but only where its blocks have left registers free; with more warps per column
/// its blocks fill the multiprocessors and the attention starts later, which costs more than
/// the longer columns save (also where [`warps_per_column`] would give 2 or 4).
pub const QKV_WARPS_PER_COLUMN: usize = 1;

/// Rounds in each lane's ring of a [`gemv_async`] (`GEMV_RING` in the kernel source).
pub const GEMV_RING: usize = 4;

/// Bytes of one round of one warp: 4 pieces of 16 bytes per lane (`GEMV_U`).
const ROUND_BYTES: usize = 4 * 16 * 32;

/// Blocks per multiprocessor of a [`gemv_async`] unless tuned otherwise.
pub const GEMV_ASYNC_BLOCKS_PER_SM: u32 = 2;

/// Dynamic shared memory of a [`gemv_async`] block (the warps' rings, then the input row), or
/// `None` when the shape is not one it takes (K a multiple of 8, at most 8,192).
pub fn async_smem(k: usize) -> Option<usize> {
    if k == 0 || !k.is_multiple_of(8) || k > 8192 {
        return None;
    }
    Some((GEMV_THREADS as usize / 32) * GEMV_RING * ROUND_BYTES + k * 2)
}

/// Whether a model's one-row projections run on [`gemv_async`]: when the largest of a layer's
/// projections (`largest_bytes` of weights) is no more than its rings hold, so that every
/// projection is requested whole before its programmatic wait (the caller checks that every K
/// is one it takes, [`async_smem`]). Larger projections stream through the rings, which the
/// register GEMV's four blocks per multiprocessor do faster (on an H200 the small config's
/// projections of at most 3.5 MB fit rings of 17 MB; the 1B config's gate/up of 67 MB does
/// not).
pub fn ring_gemv_rule(largest_bytes: usize, sm_count: u32) -> bool {
    let warps =
        sm_count as usize * GEMV_ASYNC_BLOCKS_PER_SM as usize * (GEMV_THREADS as usize / 32);
    largest_bytes <= warps * GEMV_RING * ROUND_BYTES
}

/// One row of `y[n] (op)= prologue(x)[k] @ w[n, k]^T` on a `ll_gemv_async_*` kernel over up to
/// `blocks` blocks, [`warps_per_column_within`] them per output column. The caller checks K
/// with [`async_smem`] and allowed the kernel that much shared memory.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn gemv_async(
    stream: &Stream,
    label: &str,
    kernel: &Kernel,
    blocks: u32,
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    y: &mut DeviceBuffer<u16>,
    (n, k): (usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    let (x, nw, w) = inputs;
    let warps = (GEMV_THREADS / 32) as usize;
    let wpc = warps_per_column_within(n, k, blocks as usize * warps);
    let blocks = (n * wpc).div_ceil(warps).min(blocks as usize).max(1) as u32;
    let smem = async_smem(k).unwrap_or(0);
    stream.launch(
        label,
        kernel,
        grid(blocks, 1, GEMV_THREADS, smem as u32),
        args![x, nw, w, &mut *y, 0i32, n as i32, k as i32, eps, wpc as i32],
    )
}

/// An attribute of the context's device.
pub(crate) fn device_attribute(
    ctx: &Context,
    attr: sys::CUdevice_attribute,
    name: &str,
) -> Result<i32> {
    let mut value = 0i32;
    // SAFETY: the device handle is the context's; value is a valid out pointer.
    let rc = unsafe { sys::cuDeviceGetAttribute(&mut value, attr, ctx.device()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::Input(format!(
            "cuDeviceGetAttribute({name}) failed: {rc:?}"
        )));
    }
    Ok(value)
}

/// Lets `kernel` use `bytes` of dynamic shared memory (above the 48 KiB default).
pub fn allow_smem(kernel: &Kernel, bytes: usize, name: &str) -> Result<()> {
    // SAFETY: the function belongs to a loaded module (alive in the decoder's `Kernels`); the
    // context is current (the module load bound it on this thread).
    let rc = unsafe {
        sys::cuFuncSetAttribute(
            kernel.raw(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::Input(format!(
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {bytes}) on {name} failed: {rc:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::warps_per_column;

    #[test]
    fn warps_per_column_fills_the_gpu_without_idle_warps() {
        // H200: 132 multiprocessors.
        assert_eq!(warps_per_column(576, 576, 132), 4); // small o: 2.25 slices of 512 B
        assert_eq!(warps_per_column(960, 576, 132), 4); // small q/k/v's shape (it takes 1)
        assert_eq!(warps_per_column(576, 1536, 132), 4); // small down
        assert_eq!(warps_per_column(2048, 2048, 132), 2); // 1B o
        assert_eq!(warps_per_column(3072, 2048, 132), 1); // 1B q/k/v
        assert_eq!(warps_per_column(3072, 576, 132), 1); // small gate/up
        assert_eq!(warps_per_column(2048, 8192, 132), 2); // 1B down
        assert_eq!(warps_per_column(128_256, 2048, 132), 1); // 1B lm_head
        assert_eq!(warps_per_column(1, 64, 132), 1); // one slice: one warp
        assert_eq!(warps_per_column(1, 1 << 20, 132), 8); // never above 8

        // The shapes of the GPU test (2 multiprocessors).
        assert_eq!(warps_per_column(3, 2501, 2), 8);
        assert_eq!(warps_per_column(4, 2048, 2), 8);
        assert_eq!(warps_per_column(12, 1032, 2), 4);
        assert_eq!(warps_per_column(20, 576, 2), 2);
    }

    #[test]
    fn the_ring_gemv_serves_models_whose_projections_fit_its_rings() {
        use super::{async_smem, ring_gemv_rule};
        let bf = |n: usize, k: usize| n * k * 2;
        // H200 (132 multiprocessors): rings of 264 blocks x 8 warps x 4 rounds x 2 KiB, 17.3 MB.
        // The small config: gate/up (2 x 1536 x 576) is its largest projection.
        assert!(ring_gemv_rule(bf(3072, 576), 132));
        // The 1B config: gate/up (2 x 8192 x 2048) streams.
        assert!(!ring_gemv_rule(bf(16_384, 2048), 132));
        // The limits of K.
        assert_eq!(async_smem(576), Some(8 * 4 * 2048 + 1152));
        assert_eq!(async_smem(577), None);
        assert_eq!(async_smem(8192), Some(8 * 4 * 2048 + 16_384));
        assert_eq!(async_smem(8200), None);
        assert_eq!(async_smem(0), None);
    }

    #[test]
    fn the_cluster_attention_runs_by_the_rule_or_when_asked_for_and_served() {
        use super::{AttentionLaunch, ATTENTION_CLUSTER, ATTENTION_CLUSTER_THREADS};
        let at = |rows, shape, ctx, cap, force| {
            AttentionLaunch::for_rows(rows, shape, ctx, 132, cap, force)
        };
        let small = (3, 3, 64);
        // Without clusters: the split rule's blocks, capped by `splits=N`.
        let plain = at(1, small, 321, None, Some(false));
        assert!(!plain.cluster && plain.splits == 21 && plain.threads == 256);
        assert_eq!(at(1, small, 321, Some(4), None).splits, 4);
        // The rule: clusters at one row with 8 splits or more and a context up to 512, unless
        // the splits are capped.
        assert!(at(1, small, 321, None, None).cluster);
        assert!(at(1, small, 512, None, None).cluster);
        assert!(!at(1, small, 513, None, None).cluster);
        assert!(!at(2, small, 321, None, None).cluster);
        assert!(!at(1, small, 100, None, None).cluster); // 7 splits
        assert!(!at(1, small, 321, Some(64), None).cluster);
        // A group of 8: no cluster variant.
        assert!(!at(1, (2, 8, 64), 321, None, None).cluster);
        // Asked for: 8 blocks of 512 threads, for groups of up to 4 and head_dim up to 128.
        let c = at(1, small, 321, None, Some(true));
        assert!(c.cluster && c.splits == ATTENTION_CLUSTER);
        assert_eq!(c.threads, ATTENTION_CLUSTER_THREADS);
        assert!(at(1, (8, 4, 64), 321, None, Some(true)).cluster); // 1B config
        assert!(at(64, small, 4096, None, Some(true)).cluster);
        assert!(!at(1, (2, 8, 64), 321, None, Some(true)).cluster);
        assert!(!at(1, (8, 4, 256), 321, None, Some(true)).cluster);
        // 16 warps' partials: more shared memory than 8 warps'.
        assert!(c.smem(3, 64) > plain.smem(3, 64));
    }

    #[test]
    fn attention_splits_fill_one_wave_with_chunks_of_16_positions() {
        use super::{attention_partials_len, attention_smem, attention_splits};
        // Small config (3 KV heads), H200 (132 multiprocessors), the bench's context (177).
        assert_eq!(attention_splits(1, 3, 177, 132), 12); // 177 / 16 caps the 44 of one wave
        assert_eq!(attention_splits(1, 3, 4096, 132), 44); // 3 x 44 = 132 blocks
        assert_eq!(attention_splits(8, 3, 177, 132), 6); // 24 blocks per split
        assert_eq!(attention_splits(64, 3, 177, 132), 1); // 192 blocks already
        assert_eq!(attention_splits(1, 8, 4096, 132), 17); // 1B config
        assert_eq!(attention_splits(1, 1, 1 << 20, 1024), 64); // never above 64
        assert_eq!(attention_splits(1, 3, 16, 132), 1); // one chunk holds the context
        assert_eq!(attention_splits(1, 3, 17, 132), 2);
        assert_eq!(attention_splits(0, 0, 0, 0), 1); // degenerate: one block
                                                     // The GPU test's shapes (max_ctx 48 and 300, 2 multiprocessors would give 1).
        assert_eq!(attention_splits(1, 3, 48, 132), 3);
        assert_eq!(attention_splits(3, 2, 300, 132), 19);
        // Scratch: the most slots over 1..=capacity rows (batch 1: 12 splits, batch 7: 7 x 7,
        // batch 8: 8 x 6, batch 43: 43 x 2 = 86, batch 64: 64 x 1).
        assert_eq!(
            attention_partials_len(1, (3, 3, 64), 177, 132),
            12 * 3 * 3 * 66
        );
        assert_eq!(
            attention_partials_len(8, (3, 3, 64), 177, 132),
            49 * 3 * 3 * 66
        );
        assert_eq!(
            attention_partials_len(64, (3, 3, 64), 177, 132),
            86 * 3 * 3 * 66
        );
        // Shared memory: queries, 8 warps' partials, maxima and sums, 13 combine weights per
        // head, the new position's K and V, the block's max and sum per head (and in a cluster
        // 8 blocks' shares of 24 outputs and their 3 maxima and sums).
        assert_eq!(
            attention_smem(3, 64, 12, 256, false),
            (3 * 64 * 9 + 16 * 3 + 13 * 3 + 2 * 64 + 2 * 3) * 4
        );
        assert_eq!(
            attention_smem(3, 64, 12, 256, true),
            (3 * 64 * 9 + 16 * 3 + 13 * 3 + 2 * 64 + 2 * 3 + 8 * (24 + 6)) * 4
        );
    }

    #[test]
    fn choices_parse_and_name_every_choice_when_unknown() {
        use super::{Gemm, Pdl};
        assert_eq!("cublas".parse::<Gemm>(), Ok(Gemm::Cublas));
        assert_eq!("off".parse::<Pdl>(), Ok(Pdl::Off));
        assert_eq!(
            "fast".parse::<Gemm>(),
            Err("unknown GEMM path \"fast\" (want auto, cublas, gemv)".to_string())
        );
        assert_eq!(
            "yes".parse::<Pdl>(),
            Err("unknown --pdl \"yes\" (want auto, on, off)".to_string())
        );
    }
}
