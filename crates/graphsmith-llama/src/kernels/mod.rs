//! The decoder's kernels (`kernels/llama_kernels.cu`): loading the PTX (`ptx`), their launch
//! geometry (`geometry`), the GEMV launchers (`launch`), cuBLAS (`cublas`), cuBLASLt
//! (`cublaslt`) and the prefill's
//! kernels (`prefill`).
//!
//! What is `pub` here is the launch-level API the kernel tests drive directly; the decoder
//! uses the rest.

pub(crate) mod cublas;
pub(crate) mod cublaslt;
pub(crate) mod geometry;
pub(crate) mod launch;
pub(crate) mod prefill;
pub(crate) mod ptx;

pub use cublaslt::{AlgoData, MatmulParams, Projection};
pub use geometry::{
    async_smem, attention_splits, AttentionLaunch, GemvGrid, ARGMAX_CHUNK, ARGMAX_THREADS,
    ATTENTION_CLUSTER, ATTENTION_CLUSTER_SMALL, ATTENTION_CLUSTER_SMALL_THREADS,
    ATTENTION_CLUSTER_THREADS, ATTENTION_THREADS,
};
pub use launch::{allow_smem, gemv, gemv_async, gemv_head};
pub use prefill::{
    flash_smem, prefill_attention_smem, PrefillAttentionKind, PrefillAttentionLaunch,
    PrefillKernels, FLASH_HEAD_DIMS, FLASH_KEYS, FLASH_ROWS, FLASH_THREADS,
};
pub use ptx::{GemvKernels, Kernels, LLAMA_PTX};

/// Each of `ks` opted into programmatic dependent launch.
pub(crate) fn all_programmatic<const N: usize>(
    ks: &[graphsmith::Kernel; N],
) -> graphsmith::Result<[graphsmith::Kernel; N]> {
    let mut out = ks.clone();
    for k in &mut out {
        *k = k.clone().programmatic()?;
    }
    Ok(out)
}
