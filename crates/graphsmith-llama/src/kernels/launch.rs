//! Launching the GEMV kernels, and the device attributes and shared-memory opt-ins their
//! launches need.

use graphsmith::{args, sys, Context, DeviceBuffer, Kernel, Stream};

use super::geometry::{
    async_smem, grid, warps_per_column, warps_per_column_within, GemvGrid, GEMV_THREADS,
};
use super::ptx::GemvKernels;
use crate::error::{LlamaError, Result};

/// Launches one GEMV variant `y[rows, n] (op)= prologue(x)[rows, k] @ w[n, k]^T` for `rows`
/// rows, in chunks of at most `max_rows` (1 to 8: the largest instantiation whose shared memory
/// the kernels were allowed); `inputs` is (x, norm weight, w)
/// (the norm weight is only read by the norm variants; others pass any buffer). The grid covers
/// the `n` columns with a group of `warps_per_column` warps each, capped at a few blocks per
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

/// One row of `y[n] (op)= prologue(x)[k] @ w[n, k]^T` on a `ll_gemv_async_*` kernel over up to
/// `blocks` blocks, `warps_per_column_within` them per output column. The caller checks K
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
