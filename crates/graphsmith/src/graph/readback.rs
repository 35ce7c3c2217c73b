//! Reading any `CUgraph` back into the model. This module only fills a
//! [`graphsmith_analysis::RawGraph`] from the driver (node kinds, kernel names, geometry and
//! argument bytes, copy and set parameters, child graphs, edges with their data) and calls the
//! one conversion, [`graphsmith_analysis::readback::build`], which `graphsmith trace --hazards`
//! uses too: both read the same accesses out of the same graph.

use std::collections::HashMap;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr::addr_of;

use cudarc::driver::sys;
use graphsmith_analysis::readback::{self as conversion, MAX_DEPTH};
use graphsmith_analysis::{Copy3D, CopySide, RawEdge, RawGraph, RawNode, Set2D};
use graphsmith_model as model;
use model::{Dim3, KernelArg, KernelParams, NodeKind};

use crate::context::Context;
use crate::driver::{check, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::KernelFn;

/// Reads a graph that graphsmith does not own (e.g. captured by another library) into the
/// model. The graph is not modified or destroyed.
///
/// # Safety
/// `raw` must be null or a live `CUgraph` of `ctx` not used by another thread during the call.
#[track_caller]
pub unsafe fn read_raw_graph(
    ctx: &Context,
    raw: sys::CUgraph,
    label: &str,
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
    unsafe { read_graph(raw, label) }
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
    let filled = unsafe { fill(raw, 0) }?;
    let built = conversion::build(&filled.raw, label, &mut allocation_of);
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
    let mut count = 0usize;
    // SAFETY: raw is live (contract); a null array asks for the count only.
    check(
        unsafe { sys::cuGraphGetNodes(raw, std::ptr::null_mut(), &mut count) },
        "cuGraphGetNodes",
    )?;
    let mut handles = vec![std::ptr::null_mut(); count];
    // The driver refuses a non-null array with a count of 0 (CUDA_ERROR_INVALID_VALUE).
    if count > 0 {
        // SAFETY: handles has room for `count` nodes; the driver writes at most that many.
        check(
            unsafe { sys::cuGraphGetNodes(raw, handles.as_mut_ptr(), &mut count) },
            "cuGraphGetNodes",
        )?;
    }
    handles.truncate(count);
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
    let edges = unsafe { read_edges(raw, &index) }?;
    Ok(Filled {
        raw: RawGraph { nodes, edges },
        handles,
        kernels,
    })
}

/// The edges of `raw`, with their `CUgraphEdgeData`, as node indices.
///
/// # Safety
/// `raw` must be a live graph.
unsafe fn read_edges(
    raw: sys::CUgraph,
    index: &HashMap<usize, usize>,
) -> Result<Vec<RawEdge>, Failure> {
    let mut count = 0usize;
    // SAFETY: raw is live; null arrays ask for the edge count only.
    check(
        unsafe {
            sys::cuGraphGetEdges_v2(
                raw,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut count,
            )
        },
        "cuGraphGetEdges",
    )?;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut from = vec![std::ptr::null_mut(); count];
    let mut to = vec![std::ptr::null_mut(); count];
    // SAFETY: CUgraphEdgeData is plain bytes (ports, type, reserved): all zero is valid.
    let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; count];
    // SAFETY: the three arrays have room for `count` entries; the driver writes at most that
    // many and updates `count`.
    check(
        unsafe {
            sys::cuGraphGetEdges_v2(
                raw,
                from.as_mut_ptr(),
                to.as_mut_ptr(),
                data.as_mut_ptr(),
                &mut count,
            )
        },
        "cuGraphGetEdges",
    )?;
    let count = count.min(from.len());
    Ok((0..count)
        .filter_map(|i| {
            Some(RawEdge {
                from: *index.get(&(from[i] as usize))?,
                to: *index.get(&(to[i] as usize))?,
                from_port: data[i].from_port,
                to_port: data[i].to_port,
                ty: data[i].type_,
            })
        })
        .collect())
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
    // The driver writes a C enum; a newer driver may write a value this build does not know,
    // so it is read as an integer, never as a Rust enum.
    let mut ty = MaybeUninit::<T>::zeroed();
    // SAFETY: node is live; ty is a writable, zero-initialised 32-bit slot.
    check(
        unsafe { sys::cuGraphNodeGetType(node, ty.as_mut_ptr()) },
        "cuGraphNodeGetType",
    )?;
    // SAFETY: ty is 32 bits, zero-initialised then written by the driver; read as u32.
    let ty = unsafe { ty.as_ptr().cast::<u32>().read() };
    let is = |t: T| ty == t as u32;
    let raw_node = if is(T::CU_GRAPH_NODE_TYPE_KERNEL) {
        // SAFETY: node is a live kernel node; its context is current (contract).
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
        // SAFETY: node is a live copy node.
        let c = unsafe { read_copy(node) }?;
        RawNode {
            operands: c.operands(),
            ..RawNode::plain(c.kind())
        }
    } else if is(T::CU_GRAPH_NODE_TYPE_MEMSET) {
        // SAFETY: CUDA_MEMSET_NODE_PARAMS holds integers only: all zero is valid.
        let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: node is a live set node; p is a local the driver fills.
        check(
            unsafe { sys::cuGraphMemsetNodeGetParams(node, &mut p) },
            "cuGraphMemsetNodeGetParams",
        )?;
        let s = Set2D {
            dst: p.dst,
            pitch: p.pitch as u64,
            value: p.value,
            element_size: p.elementSize,
            width: p.width as u64,
            height: p.height as u64,
        };
        RawNode {
            operands: vec![s.operand()],
            ..RawNode::plain(s.kind())
        }
    } else if is(T::CU_GRAPH_NODE_TYPE_HOST) {
        // SAFETY: CUDA_HOST_NODE_PARAMS is an optional function pointer and a data pointer:
        // all zero is valid (None, null).
        let mut p: sys::CUDA_HOST_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: node is a live host node; p is a local the driver fills.
        check(
            unsafe { sys::cuGraphHostNodeGetParams(node, &mut p) },
            "cuGraphHostNodeGetParams",
        )?;
        let address = p.fn_.map(|f| f as usize).unwrap_or(0);
        RawNode::plain(NodeKind::Host {
            name: format!("host function at 0x{address:x}"),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_GRAPH) {
        let mut child = std::ptr::null_mut();
        // SAFETY: node is a live child graph node; child is a local.
        check(
            unsafe { sys::cuGraphChildGraphNodeGetGraph(node, &mut child) },
            "cuGraphChildGraphNodeGetGraph",
        )?;
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
        let mut e = std::ptr::null_mut();
        // SAFETY: node is a live event-wait node; e is a local.
        check(
            unsafe { sys::cuGraphEventWaitNodeGetEvent(node, &mut e) },
            "cuGraphEventWaitNodeGetEvent",
        )?;
        RawNode::plain(NodeKind::EventWait {
            event: format!("event 0x{:x}", e as usize),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
        let mut e = std::ptr::null_mut();
        // SAFETY: node is a live event-record node; e is a local.
        check(
            unsafe { sys::cuGraphEventRecordNodeGetEvent(node, &mut e) },
            "cuGraphEventRecordNodeGetEvent",
        )?;
        RawNode::plain(NodeKind::EventRecord {
            event: format!("event 0x{:x}", e as usize),
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        // The parameters hold pool properties with C enums: never assumed initialised; the
        // two integer fields are read through raw pointers.
        let mut p = MaybeUninit::<sys::CUDA_MEM_ALLOC_NODE_PARAMS>::zeroed();
        // SAFETY: node is a live allocation node; p is writable and large enough.
        check(
            unsafe { sys::cuGraphMemAllocNodeGetParams(node, p.as_mut_ptr()) },
            "cuGraphMemAllocNodeGetParams",
        )?;
        let p = p.as_ptr();
        // SAFETY: p points to a zero-initialised, driver-filled struct; both fields are
        // integers (any bit pattern valid).
        let (address, bytes) =
            unsafe { (addr_of!((*p).dptr).read(), addr_of!((*p).bytesize).read()) };
        RawNode::plain(NodeKind::MemAlloc {
            address,
            bytes: bytes as u64,
        })
    } else if is(T::CU_GRAPH_NODE_TYPE_MEM_FREE) {
        let mut ptr = 0;
        // SAFETY: node is a live free node; ptr is a local.
        check(
            unsafe { sys::cuGraphMemFreeNodeGetParams(node, &mut ptr) },
            "cuGraphMemFreeNodeGetParams",
        )?;
        RawNode::plain(NodeKind::MemFree { address: ptr })
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

/// A copy node's `CUDA_MEMCPY3D`, field by field.
///
/// # Safety
/// `node` must be a live copy node.
unsafe fn read_copy(node: sys::CUgraphNode) -> Result<Copy3D, Failure> {
    // CUDA_MEMCPY3D holds C enums (the memory types) without a zero value: the struct is never
    // assumed initialised; each field is read through a raw pointer, the enums as u32.
    let mut p = MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
    // SAFETY: node is a live copy node (contract); p is writable and large enough.
    check(
        unsafe { sys::cuGraphMemcpyNodeGetParams(node, p.as_mut_ptr()) },
        "cuGraphMemcpyNodeGetParams",
    )?;
    let p = p.as_ptr();
    // SAFETY: p points to a zero-initialised, driver-filled CUDA_MEMCPY3D; every field read is
    // an integer or a pointer (any bit pattern valid); the enums are read as their 32-bit value.
    let c = unsafe {
        Copy3D {
            src: CopySide {
                memory_type: addr_of!((*p).srcMemoryType).cast::<u32>().read(),
                device: addr_of!((*p).srcDevice).read(),
                host: addr_of!((*p).srcHost).read() as u64,
                x: addr_of!((*p).srcXInBytes).read() as u64,
                y: addr_of!((*p).srcY).read() as u64,
                z: addr_of!((*p).srcZ).read() as u64,
                pitch: addr_of!((*p).srcPitch).read() as u64,
                height: addr_of!((*p).srcHeight).read() as u64,
            },
            dst: CopySide {
                memory_type: addr_of!((*p).dstMemoryType).cast::<u32>().read(),
                device: addr_of!((*p).dstDevice).read(),
                host: addr_of!((*p).dstHost).read() as u64,
                x: addr_of!((*p).dstXInBytes).read() as u64,
                y: addr_of!((*p).dstY).read() as u64,
                z: addr_of!((*p).dstZ).read() as u64,
                pitch: addr_of!((*p).dstPitch).read() as u64,
                height: addr_of!((*p).dstHeight).read() as u64,
            },
            width: addr_of!((*p).WidthInBytes).read() as u64,
            height: addr_of!((*p).Height).read() as u64,
            depth: addr_of!((*p).Depth).read() as u64,
        }
    };
    Ok(c)
}

/// Reads a kernel node: its parameters for the model, and its kernel with parameter layout
/// (`None` when the kernel cannot be resolved) with whether every argument could be read.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn read_kernel(
    node: sys::CUgraphNode,
) -> Result<(KernelParams, Option<(KernelFn, bool)>), Failure> {
    // SAFETY: CUDA_KERNEL_NODE_PARAMS holds integers and pointers only: all zero is valid.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: node is a live kernel node (contract); p is a local the driver fills.
    check(
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) },
        "cuGraphKernelNodeGetParams",
    )?;
    let mut func = p.func;
    if func.is_null() && !p.kern.is_null() {
        // SAFETY: kern is the node's live library kernel; the node's context is current.
        check(
            unsafe { sys::cuKernelGetFunction(&mut func, p.kern) },
            "cuKernelGetFunction",
        )?;
    }
    let mut name = String::new();
    let mut args = Vec::new();
    let mut kernel = None;
    if !func.is_null() {
        let mut text: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: func is live; text is a local that receives a driver-owned string.
        let rc = unsafe { sys::cuFuncGetName(&mut text, func) };
        if rc == sys::CUresult::CUDA_SUCCESS && !text.is_null() {
            // SAFETY: on success the driver points text at a NUL-terminated string it keeps
            // for the function's lifetime; it is copied at once.
            name = unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned();
        }
        // SAFETY: func is a live function.
        let layout = unsafe { crate::module::param_layout(func) }?;
        // SAFETY: p was filled by the driver for this live node: kernelParams (when set) holds
        // one pointer per parameter of `layout`, `extra` (when set) an END-terminated list.
        args = unsafe { argument_bytes(&p, &layout) };
        // Only a complete argument list can be written back to a node (Exec updates).
        let complete = args.len() == layout.len();
        let layout = std::sync::Arc::new(layout);
        let kern = p.kern;
        kernel = Some((KernelFn { func, kern, layout }, complete));
    }
    let params = KernelParams {
        name,
        grid: Dim3::new(p.gridDimX, p.gridDimY, p.gridDimZ),
        block: Dim3::new(p.blockDimX, p.blockDimY, p.blockDimZ),
        shared_mem_bytes: p.sharedMemBytes,
        args,
    };
    Ok((params, kernel))
}

/// Entries of an `extra` list read at most (pairs of key and value).
const MAX_EXTRA: usize = 64;

/// Copies each argument's bytes out of a kernel node's parameters.
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
                if offset.checked_add(len).is_some_and(|end| end <= size) {
                    // SAFETY: the buffer holds `size` bytes and offset + len <= size.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(buffer.add(offset), len) }.to_vec();
                    out.push(KernelArg {
                        offset: offset as u32,
                        bytes,
                    });
                }
            }
        }
    }
    out
}

/// The allocation a device pointer lies in, as (base, size), when the driver knows it.
pub(crate) fn allocation_of(ptr: u64) -> Option<(u64, u64)> {
    let (mut base, mut size) = (0, 0usize);
    // SAFETY: any pointer value may be asked about; the driver answers NOT_FOUND for foreign ones.
    let rc = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    (rc == sys::CUresult::CUDA_SUCCESS).then_some((base, size as u64))
}
