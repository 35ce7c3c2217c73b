//! Reading any `CUgraph` back into the model. The driver layer fills a
//! [`graphsmith_analysis::RawGraph`] with graphsmith-readback's reader (node kinds, kernel
//! names, geometry and every argument's bytes (`cuFuncGetParamInfo` sizes, struct parameters
//! included), copy and set parameters, child graphs, edges with their data); this module calls
//! the one conversion, [`graphsmith_analysis::readback::build`], and keeps each node's handle
//! and kernel. `graphsmith trace --hazards` uses the same reader and conversion: both read the
//! same accesses out of the same graph.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_analysis::readback as conversion;
use graphsmith_analysis::MemoryMap;
use graphsmith_model as model;
use graphsmith_readback::KernelFunction;
use model::KernelParams;

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::KernelFn;

/// Reads a graph that graphsmith does not own (e.g. captured by another library) into the
/// model. The graph is not modified or destroyed. A kernel's pointers, in its pointer-sized
/// and struct parameters alike, are bounded by the driver's allocations
/// (`cuMemGetAddressRange`); [`read_raw_graph_in`] bounds them by finer regions first.
///
/// # Safety
/// `raw` must be null or a live `CUgraph` of `ctx` not used by another thread during the call.
#[track_caller]
pub unsafe fn read_raw_graph(
    ctx: &Context,
    raw: sys::CUgraph,
    label: &str,
) -> Result<model::Graph> {
    // SAFETY: forwarded contract.
    unsafe { read_raw_graph_in(ctx, raw, label, &MemoryMap::default()) }
}

/// [`read_raw_graph`] with a memory map: an address in one of `map`'s regions (e.g. PyTorch's
/// caching-allocator blocks, so that two tensors of one `cudaMalloc` segment stay two
/// buffers) is an access of that region, labelled with its label; only the other addresses
/// are asked of the driver (see `graphsmith_analysis::readback`).
///
/// # Safety
/// As [`read_raw_graph`].
#[track_caller]
pub unsafe fn read_raw_graph_in(
    ctx: &Context,
    raw: sys::CUgraph,
    label: &str,
    map: &MemoryMap,
) -> Result<model::Graph> {
    let at = SourceLine::caller();
    let me = ObjectRef::new(ObjectKind::Graph, label);
    if raw.is_null() {
        return Err(Error::new(
            ErrorKind::NullHandle {
                what: "the CUgraph handle",
            },
            me,
            "read_raw_graph",
            at,
        ));
    }
    let fail = |f: Failure| f.on(me.clone(), "read_raw_graph", at);
    ctx.bind().map_err(fail)?;
    // SAFETY: raw is live and not used elsewhere (caller's contract); its context is current.
    unsafe { read_graph_in(raw, label, map) }
        .map(|read| read.model)
        .map_err(fail)
}

/// A graph read back from the driver.
pub(crate) struct ReadGraph {
    pub model: model::Graph,
    /// The driver handle of each model node (same order as `model.nodes`).
    pub handles: Vec<sys::CUgraphNode>,
    /// The function and parameter layout of each kernel node (`None` for other nodes).
    pub kernels: Vec<Option<KernelFn>>,
}

/// Reads `raw` into a model, with the driver handle (and, for kernels, the function) of each
/// model node.
///
/// # Safety
/// `raw` must be a live graph; its context must be current.
pub(crate) unsafe fn read_graph(raw: sys::CUgraph, label: &str) -> Result<ReadGraph, Failure> {
    // SAFETY: forwarded contract.
    unsafe { read_graph_in(raw, label, &MemoryMap::default()) }
}

/// [`read_graph`], addresses looked up in `map` before the driver's allocations.
///
/// # Safety
/// As [`read_graph`].
unsafe fn read_graph_in(
    raw: sys::CUgraph,
    label: &str,
    map: &MemoryMap,
) -> Result<ReadGraph, Failure> {
    // SAFETY: forwarded contract.
    let read = unsafe { driver::read_graph_back(raw) }?;
    let built = conversion::build_with(&read.raw, label, map, &mut driver::allocation_of);
    // Only a kernel whose every argument was read can have its arguments written back to a
    // node (Exec updates).
    let kernels = read
        .kernels
        .into_iter()
        .map(|k| k.filter(|k| k.complete).map(kernel_fn))
        .collect();
    Ok(ReadGraph {
        model: built.graph,
        handles: read.handles,
        kernels,
    })
}

/// A kernel read back as the runtime's kernel: not opted into programmatic launch (the driver
/// cannot tell).
fn kernel_fn(k: KernelFunction) -> KernelFn {
    KernelFn {
        func: k.func,
        kern: k.kern,
        layout: Arc::new(k.layout),
        programmatic: false,
        triggers_after_wait: false,
        cluster: k.cluster,
    }
}

/// Reads a kernel node: its parameters for the model, and its kernel with parameter layout
/// (`None` when the kernel cannot be resolved) with whether every argument could be read.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn read_kernel(
    node: sys::CUgraphNode,
) -> Result<(KernelParams, Option<(KernelFn, bool)>), Failure> {
    // SAFETY: forwarded contract.
    let k = unsafe { driver::read_kernel_node(node) }?;
    let kernel = k.function.map(|f| {
        let complete = f.complete;
        (kernel_fn(f), complete)
    });
    Ok((k.params, kernel))
}
