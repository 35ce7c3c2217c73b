//! The kernels' launch geometry: block sizes, the attention's splits, clusters and shared
//! memory, the GEMV instantiations' rows, warps per column and blocks per multiprocessor.

use graphsmith::model::Dim3;
use graphsmith::LaunchConfig;

/// Threads per block of the attention kernel (8 warps share out the positions).
pub const ATTENTION_THREADS: u32 = 256;

/// Threads per block of the GEMV kernels (one warp per output column).
pub(crate) const GEMV_THREADS: u32 = 256;

/// Threads per block of the argmax kernel.
pub const ARGMAX_THREADS: u32 = 256;

/// Vocabulary entries per argmax block.
pub const ARGMAX_CHUNK: u32 = ARGMAX_THREADS * 8;

/// Fewest positions per attention block (two per warp): `ATT_MIN_CHUNK` of the kernel.
pub(crate) const ATTENTION_MIN_CHUNK: usize = 16;

/// Most attention blocks per (row, key/value head) the decoder launches (the kernel takes any
/// count; this bounds the scratch and the last block's combine).
pub(crate) const ATTENTION_MAX_SPLITS: usize = 64;

/// Blocks per (row, key/value head) of the attention's larger cluster variants
/// (`ll_attention_{1,2,4}_c8`): one thread block cluster, whose blocks combine their partial
/// results in distributed shared memory.
pub const ATTENTION_CLUSTER: usize = 8;

/// Threads per block of the `_c8` variants (16 warps share out a block's positions; one block
/// per multiprocessor).
pub const ATTENTION_CLUSTER_THREADS: u32 = 512;

/// Blocks per (row, key/value head) of the smaller cluster variants (`ll_attention_{1,2,4}_c4`),
/// for models with too many key/value heads for clusters of [`ATTENTION_CLUSTER`] in one wave.
pub const ATTENTION_CLUSTER_SMALL: usize = 4;

/// Threads per block of the `_c4` variants (8 warps; up to two blocks per multiprocessor).
pub const ATTENTION_CLUSTER_SMALL_THREADS: u32 = 256;

/// Resident `_c4` blocks per multiprocessor (their `__launch_bounds__`).
const ATTENTION_CLUSTER_SMALL_PER_SM: usize = 2;

/// The longest context (the cache's capacity) at which the rule runs the attention as clusters.
/// Its 8 blocks per (row, key/value head) take ever more positions each as the context grows,
/// where the plain kernel splits wider.
pub(crate) const ATTENTION_CLUSTER_MAX_CTX: usize = 512;

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
    /// [`ATTENTION_THREADS`]; or one cluster per (row, key/value head), for groups of up to 4
    /// query heads and head_dim up to 128 (the variants that exist), when `cluster` asks for it
    /// or, unless it says no, by the rule: one row, no cap on the splits, a context of at most
    /// `ATTENTION_CLUSTER_MAX_CTX`, and a cluster size ([`cluster_size`]) that the split rule
    /// would fill too. There one wave of blocks holds the positions, and combining in
    /// distributed shared memory saves the plain kernel's round trip through global memory and
    /// its last block's combine.
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
        let size = cluster_size(rows, kv_heads, sm_count);
        let rule = rows == 1
            && splits_cap.is_none()
            && splits >= size
            && max_ctx <= ATTENTION_CLUSTER_MAX_CTX;
        if fits && cluster.unwrap_or(rule) {
            AttentionLaunch::cluster_of(size)
        } else {
            AttentionLaunch {
                cluster: false,
                splits,
                threads: ATTENTION_THREADS,
            }
        }
    }

    /// The cluster variant of `size` blocks per cluster ([`ATTENTION_CLUSTER`] or
    /// [`ATTENTION_CLUSTER_SMALL`]) with its threads per block.
    pub fn cluster_of(size: usize) -> AttentionLaunch {
        let threads = if size == ATTENTION_CLUSTER_SMALL {
            ATTENTION_CLUSTER_SMALL_THREADS
        } else {
            ATTENTION_CLUSTER_THREADS
        };
        AttentionLaunch {
            cluster: true,
            splits: size,
            threads,
        }
    }

    /// Dynamic shared memory of one block for `group` query heads of `head_dim`
    /// (`attention_smem`).
    pub fn smem(&self, group: usize, head_dim: usize) -> usize {
        attention_smem(group, head_dim, self.splits, self.threads, self.cluster)
    }
}

/// Blocks per cluster of the attention's cluster variant for `rows` rows of `kv_heads`
/// key/value heads: clusters of [`ATTENTION_CLUSTER`] blocks of 512 threads, one per
/// multiprocessor, where they fit one wave of `sm_count` multiprocessors; else clusters of
/// [`ATTENTION_CLUSTER_SMALL`] blocks of 256 threads where those do (two per multiprocessor:
/// 32 key/value heads on an H200); else the larger ones (several waves either way).
pub fn cluster_size(rows: usize, kv_heads: usize, sm_count: usize) -> usize {
    let pairs = rows * kv_heads;
    let large = pairs * ATTENTION_CLUSTER <= sm_count;
    let small = pairs * ATTENTION_CLUSTER_SMALL <= sm_count * ATTENTION_CLUSTER_SMALL_PER_SM;
    if !large && small {
        ATTENTION_CLUSTER_SMALL
    } else {
        ATTENTION_CLUSTER
    }
}

/// Dynamic shared memory of one attention block (`ll_attention`) of `threads` threads for
/// `group` query heads per key/value head of `head_dim`, launched with `splits` blocks per
/// (row, key/value head): the roped queries, each warp's partial output, max and sum, the
/// combine's weight per block, the new position's K and V, the block's max and sum per head,
/// and, in a `cluster`, the partials the blocks of the cluster exchange (each block's share of
/// the output from every block, and every block's max and sum per head).
pub(crate) fn attention_smem(
    group: usize,
    head_dim: usize,
    splits: usize,
    threads: u32,
    cluster: bool,
) -> usize {
    let warps = (threads / 32) as usize;
    // In a cluster, `splits` is the cluster's size.
    let partial = if cluster {
        splits * ((group * head_dim).div_ceil(splits) + 2 * group)
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
/// fill with `ATTENTION_MIN_CHUNK` each, and at most `ATTENTION_MAX_SPLITS`. The kernel
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
pub(crate) fn attention_partials_len(
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

/// Dynamic shared memory a kernel may use without opting in.
pub(crate) const DEFAULT_SMEM: usize = 48 << 10;

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
/// (`None`: `warps_per_column`'s choice). A `(sm_count, max_rows)` pair converts into it.
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
pub(crate) fn warps_per_column(n: usize, k: usize, sm_count: usize) -> usize {
    warps_per_column_within(n, k, sm_count * 4 * (GEMV_THREADS / 32) as usize)
}

/// The most warps per output column that can all take part in a column of `k` weights: the
/// first power of two that covers its 512-byte slices, at most 8 (more leave warps idle).
pub(crate) fn warps_per_column_max(k: usize) -> usize {
    column_slices(k).next_power_of_two().min(8)
}

/// [`warps_per_column`] for a grid of `want` warps.
pub(crate) fn warps_per_column_within(n: usize, k: usize, want: usize) -> usize {
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
pub(crate) const QKV_WARPS_PER_COLUMN: usize = 1;

/// Rounds in each lane's ring of a [`gemv_async`] (`GEMV_RING` in the kernel source).
pub(crate) const GEMV_RING: usize = 4;

/// Bytes of one round of one warp: 4 pieces of 16 bytes per lane (`GEMV_U`).
const ROUND_BYTES: usize = 4 * 16 * 32;

/// Blocks per multiprocessor of a [`gemv_async`] unless tuned otherwise.
pub(crate) const GEMV_ASYNC_BLOCKS_PER_SM: u32 = 2;

/// Dynamic shared memory of a `gemv_async` block (the warps' rings, then the input row), or
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
pub(crate) fn ring_gemv_rule(largest_bytes: usize, sm_count: u32) -> bool {
    let warps =
        sm_count as usize * GEMV_ASYNC_BLOCKS_PER_SM as usize * (GEMV_THREADS as usize / 32);
    largest_bytes <= warps * GEMV_RING * ROUND_BYTES
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
        use super::{
            AttentionLaunch, ATTENTION_CLUSTER, ATTENTION_CLUSTER_SMALL,
            ATTENTION_CLUSTER_SMALL_THREADS, ATTENTION_CLUSTER_THREADS,
        };
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
        // 32 key/value heads (SmolLM2-1.7B, Llama-2-7B): clusters of 8 would take two waves,
        // clusters of 4 blocks of 256 threads (two per multiprocessor) take one, and the split
        // rule's 5 blocks fill them.
        let mha = (32, 1, 64);
        let c4 = at(1, mha, 105, None, None);
        assert!(c4.cluster && c4.splits == ATTENTION_CLUSTER_SMALL);
        assert_eq!(c4.threads, ATTENTION_CLUSTER_SMALL_THREADS);
        assert!(at(1, (32, 1, 128), 2049, None, Some(true)).cluster);
        assert!(!at(1, mha, 2049, None, None).cluster); // beyond 512 positions
        assert!(!at(1, mha, 48, None, None).cluster); // 3 splits by the split rule
        assert!(!at(1, mha, 105, Some(4), None).cluster);
        // More pairs than clusters of 4 fit in a wave: the larger clusters, when asked for.
        assert_eq!(at(3, mha, 105, None, Some(true)).splits, ATTENTION_CLUSTER);
    }

    #[test]
    fn the_cluster_size_is_the_one_that_fits_a_wave() {
        use super::{cluster_size, ATTENTION_CLUSTER, ATTENTION_CLUSTER_SMALL};
        assert_eq!(cluster_size(1, 8, 132), ATTENTION_CLUSTER); // 64 blocks
        assert_eq!(cluster_size(1, 16, 132), ATTENTION_CLUSTER); // 128 blocks
        assert_eq!(cluster_size(1, 17, 132), ATTENTION_CLUSTER_SMALL); // 68 of 264 slots
        assert_eq!(cluster_size(1, 32, 132), ATTENTION_CLUSTER_SMALL); // 128 of 264
        assert_eq!(cluster_size(1, 66, 132), ATTENTION_CLUSTER_SMALL); // 264 of 264
        assert_eq!(cluster_size(1, 67, 132), ATTENTION_CLUSTER); // neither fits
        assert_eq!(cluster_size(2, 32, 132), ATTENTION_CLUSTER_SMALL);
        assert_eq!(cluster_size(4, 32, 132), ATTENTION_CLUSTER);
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
        // head, the new position's K and V, the block's max and sum per head.
        assert_eq!(
            attention_smem(3, 64, 12, 256, false),
            (3 * 64 * 9 + 16 * 3 + 13 * 3 + 2 * 64 + 2 * 3) * 4
        );
        // In a cluster of 8 (16 warps) or 4 (8 warps), besides: the cluster's blocks' shares
        // of the 192 outputs (24 or 48 each) and their 3 maxima and sums.
        assert_eq!(
            attention_smem(3, 64, 8, 512, true),
            (3 * 64 * 17 + 32 * 3 + 9 * 3 + 2 * 64 + 2 * 3 + 8 * (24 + 6)) * 4
        );
        assert_eq!(
            attention_smem(3, 64, 4, 256, true),
            (3 * 64 * 9 + 16 * 3 + 5 * 3 + 2 * 64 + 2 * 3 + 4 * (48 + 6)) * 4
        );
    }
}
