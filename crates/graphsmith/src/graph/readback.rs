//! Reading any `CUgraph` back into the model. This module only fills a
//! [`graphsmith_analysis::RawGraph`] from the driver (node kinds, kernel names, geometry and
//! every argument's bytes (`cuFuncGetParamInfo` sizes, struct parameters included), copy and set parameters, child graphs, edges with their data) and calls the
//! one conversion, [`graphsmith_analysis::readback::build`], which `graphsmith trace --hazards`
//! uses too: both read the same accesses out of the same graph.

use std::collections::HashMap;

use cudarc::driver::sys;
use graphsmith_analysis::readback::{self as conversion, MAX_DEPTH};
use graphsmith_analysis::{MemoryMap, RawEdge, RawGraph, RawNode};
use graphsmith_model as model;
use model::{Dim3, KernelArg, KernelParams, NodeKind};

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

/// What the driver said about one graph, with what the runtime keeps beside it.
struct Filled {
    raw: RawGraph,
    handles: Vec<sys::CUgraphNode>,
    kernels: Vec<Option<KernelFn>>,
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
    let filled = unsafe { fill(raw, 0) }?;
    let built = conversion::build_with(&filled.raw, label, map, &mut driver::allocation_of);
    Ok(ReadGraph {
        model: built.graph,
        handles: filled.handles,
        kernels: filled.kernels,
    })
}

/// Fills a [`RawGraph`] from the driver.
///
/// # Safety
/// `raw` must be a live graph; its context must be current.
unsafe fn fill(raw: sys::CUgraph, depth: u32) -> Result<Filled, Failure> {
    // SAFETY: raw is live (contract).
    let handles = unsafe { driver::graph_nodes(raw) }?;
    let mut nodes = Vec::with_capacity(handles.len());
    let mut kernels = Vec::with_capacity(handles.len());
    for &node in &handles {
        // SAFETY: node is a live node of raw, whose context is current.
        let (raw_node, kernel) = unsafe { read_node(node, depth) }?;
        nodes.push(raw_node);
        kernels.push(kernel);
    }
    let index: HashMap<usize, usize> = handles
        .iter()
        .enumerate()
        .map(|(i, &h)| (h as usize, i))
        .collect();
    // SAFETY: raw is live.
    let edges = unsafe { driver::graph_edges(raw) }?
        .into_iter()
        .filter_map(|e| {
            Some(RawEdge {
                from: *index.get(&(e.from as usize))?,
                to: *index.get(&(e.to as usize))?,
                from_port: e.from_port,
                to_port: e.to_port,
                ty: e.ty,
            })
        })
        .collect();
    Ok(Filled {
        raw: RawGraph { nodes, edges },
        handles,
        kernels,
    })
}

/// One node, with its kernel (for kernel nodes whose arguments could all be read).
///
/// # Safety
/// `node` must be a live node; its graph's context must be current.
unsafe fn read_node(
    node: sys::CUgraphNode,
    depth: u32,
) -> Result<(RawNode, Option<KernelFn>), Failure> {
    use sys::CUgraphNodeType as T;
    // SAFETY: node is live (contract).
    let ty = unsafe { driver::node_type(node) }?;
    let is = |t: T| ty == t as u32;
    let raw_node = if is(T::CU_GRAPH_NODE_TYPE_KERNEL) {
        // SAFETY: node is live and a kernel node (its type was just read); its context is current.
        let (params, function) = unsafe { read_kernel(node) }?;
        let kernel = function.and_then(|(k, complete)| complete.then_some(k));
        let unread = kernel.is_none();
        return Ok((
            RawNode {
                args_unread: unread,
                ..RawNode::plain(NodeKind::Kernel(params))
            },
            kernel,
        ));
    } else if is(T::CU_GRAPH_NODE_TYPE_MEMCPY) {
        // SAFETY: node is live and a copy node (its type was just read); its context is current.
        let c = unsafe { driver::copy_node(node) }?;
        RawNode {
            operands: c.operands(),
            ..RawNode::plain(c.kind())
        }
    } else if is(T::CU_GRAPH_NODE_TYPE_MEMSET) {
        // SAFETY: node is live and a set node (its type was just read); its context is current.
        let s = unsafe { driver::set_node(node) }?;
        RawNode {
            operands: vec![s.operand()],
            ..RawNode::plain(s.kind())
        }
    } else if is(T::CU_GRAPH_NODE_TYPE_HOST) {
        // SAFETY: node is live and a host node (its type was just read); its context is current.
        let address = unsafe { driver::host_node_function(node) }?;
        RawNode::plain(NodeKind::Host {
            name: format!("host function at 0x{address:x}"),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_GRAPH) {
        // SAFETY: node is live and a child graph node (its type was just read); its context is current.
        let child = unsafe { driver::child_graph(node) }?;
        let graph = if depth < MAX_DEPTH && !child.is_null() {
            // SAFETY: the child graph is owned by the node, live while its parent is.
            unsafe { fill(child, depth + 1) }?.raw
        } else {
            RawGraph::default()
        };
        RawNode {
            child: Some(graph),
            ..RawNode::plain(NodeKind::Empty)
        }
    } else if is(T::CU_GRAPH_NODE_TYPE_EMPTY) {
        RawNode::plain(NodeKind::Empty)
    } else if is(T::CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
        // SAFETY: node is live and an event-wait node (its type was just read); its context is current.
        let e = unsafe { driver::event_node_event(node, false) }?;
        RawNode::plain(NodeKind::EventWait {
            event: format!("event 0x{:x}", e as usize),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
        // SAFETY: node is live and an event-record node (its type was just read); its context is current.
        let e = unsafe { driver::event_node_event(node, true) }?;
        RawNode::plain(NodeKind::EventRecord {
            event: format!("event 0x{:x}", e as usize),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        // SAFETY: node is live and an allocation node (its type was just read); its context is current.
        let (address, bytes) = unsafe { driver::alloc_node(node) }?;
        RawNode::plain(NodeKind::MemAlloc { address, bytes })
    } else if is(T::CU_GRAPH_NODE_TYPE_MEM_FREE) {
        // SAFETY: node is live and a free node (its type was just read); its context is current.
        let address = unsafe { driver::free_node(node) }?;
        RawNode::plain(NodeKind::MemFree { address })
    } else if is(T::CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        // The CUDA 13.0 driver API has no call that reads a conditional node's parameters
        // (cuGraphNodeGetParams arrived in 13.2), so its flavour stays unknown here.
        RawNode::plain(NodeKind::Other {
            name: "conditional".into(),
        })
    } else {
        RawNode::plain(NodeKind::Other {
            name: format!("node type {ty}"),
        })
    };
    Ok((raw_node, None))
}

/// Reads a kernel node: its parameters for the model, and its kernel with parameter layout
/// (`None` when the kernel cannot be resolved) with whether every argument could be read.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn read_kernel(
    node: sys::CUgraphNode,
) -> Result<(KernelParams, Option<(KernelFn, bool)>), Failure> {
    // SAFETY: node is a live kernel node; its context is current (contract).
    let p = unsafe { driver::kernel_node_params(node) }?;
    let mut func = p.func;
    if func.is_null() && !p.kern.is_null() {
        // SAFETY: kern is the node's live library kernel; the node's context is current.
        func = unsafe { driver::kernel_function(p.kern) }?;
    }
    let mut name = String::new();
    let mut args = Vec::new();
    let mut kernel = None;
    let mut cluster = None;
    if !func.is_null() {
        // SAFETY: func is a live function.
        name = unsafe { driver::function_name(func) }.unwrap_or_default();
        // SAFETY: func is a live function.
        let layout = unsafe { driver::param_layout(func) }?;
        // SAFETY: func is a live function.
        cluster = unsafe { driver::required_cluster(func) }?;
        // SAFETY: p was filled by the driver for this live node: kernelParams (when set) holds
        // one pointer per parameter of `layout`, `extra` (when set) an END-terminated list.
        args = unsafe { argument_bytes(&p, &layout) };
        // Only a complete argument list can be written back to a node (Exec updates).
        let complete = args.len() == layout.len()
            && args
                .iter()
                .zip(&layout)
                .all(|(a, &(_, size))| a.bytes.len() == size);
        let layout = std::sync::Arc::new(layout);
        let kern = p.kern;
        kernel = Some((
            KernelFn {
                func,
                kern,
                layout,
                programmatic: false,
                triggers_after_wait: false,
                cluster,
            },
            complete,
        ));
    }
    let params = KernelParams {
        name,
        grid: Dim3::new(p.gridDimX, p.gridDimY, p.gridDimZ),
        block: Dim3::new(p.blockDimX, p.blockDimY, p.blockDimZ),
        shared_mem_bytes: p.sharedMemBytes,
        args,
        cluster,
    };
    Ok((params, kernel))
}

/// Entries of an `extra` list read at most (pairs of key and value).
const MAX_EXTRA: usize = 64;

/// Copies each argument's bytes out of a kernel node's parameters: all of them, struct
/// parameters included (the conversion looks for pointers inside them); an empty placeholder
/// for a parameter that cannot be read, so that argument `i` is parameter `i`.
///
/// # Safety
/// `p` must have been filled by the driver for a live kernel node whose parameters `layout`
/// describes: `kernelParams`, when not null, holds one pointer per parameter, each to `size`
/// readable bytes; `extra`, when not null, is a list of (key, value) pointers ending in
/// `CU_LAUNCH_PARAM_END` whose buffer holds the packed arguments.
unsafe fn argument_bytes(
    p: &sys::CUDA_KERNEL_NODE_PARAMS,
    layout: &[(usize, usize)],
) -> Vec<KernelArg> {
    let mut out = Vec::with_capacity(layout.len());
    if !p.kernelParams.is_null() {
        for (i, &(offset, size)) in layout.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (contract); i < layout.len().
            let value = unsafe { *p.kernelParams.add(i) } as *const u8;
            if value.is_null() {
                // An empty placeholder keeps argument i at parameter i.
                out.push(KernelArg {
                    offset: offset as u32,
                    bytes: Vec::new(),
                });
                continue;
            }
            // SAFETY: the pointer names `size` readable bytes of parameter i (contract),
            // copied at once.
            let bytes = unsafe { std::slice::from_raw_parts(value, size) }.to_vec();
            out.push(KernelArg {
                offset: offset as u32,
                bytes,
            });
        }
    } else if !p.extra.is_null() {
        // `extra` is a list of (key, value) pointers ending in CU_LAUNCH_PARAM_END (0):
        // BUFFER_POINTER (1) -> the packed arguments, BUFFER_SIZE (2) -> &size_t.
        let (mut buffer, mut size) = (std::ptr::null::<u8>(), 0usize);
        let mut i = 0;
        while i < 2 * MAX_EXTRA {
            // SAFETY: the list is END-terminated (contract) and i has not passed its END.
            let key = unsafe { *p.extra.add(i) } as usize;
            if key == 0 {
                break;
            }
            // SAFETY: every key before END is followed by its value.
            let value = unsafe { *p.extra.add(i + 1) };
            match key {
                1 => buffer = value as *const u8,
                // SAFETY: BUFFER_SIZE's value points to a size_t (the driver's contract).
                2 if !value.is_null() => size = unsafe { *(value as *const usize) },
                _ => {}
            }
            i += 2;
        }
        if !buffer.is_null() {
            for &(offset, len) in layout {
                let bytes = if offset.checked_add(len).is_some_and(|end| end <= size) {
                    // SAFETY: the buffer holds `size` bytes and offset + len <= size.
                    unsafe { std::slice::from_raw_parts(buffer.add(offset), len) }.to_vec()
                } else {
                    // An empty placeholder keeps argument i at parameter i.
                    Vec::new()
                };
                out.push(KernelArg {
                    offset: offset as u32,
                    bytes,
                });
            }
        }
    }
    out
}
