//! Driver calls that read a graph back: its nodes and edges, each node's type and parameters.
//! C enums the driver writes (node types, memory types) are read as integers, never as Rust
//! enums: a newer driver may write values this build does not know.

use std::mem::MaybeUninit;
use std::ptr::addr_of;

use cudarc::driver::sys;
use graphsmith_analysis::{Copy3D, CopySide, Set2D};

use super::{check, Failure};

/// The nodes of a graph, in the driver's order (`cuGraphGetNodes`).
///
/// # Safety
/// `graph` must be live and used by no other thread during the call.
pub(crate) unsafe fn graph_nodes(graph: sys::CUgraph) -> Result<Vec<sys::CUgraphNode>, Failure> {
    let mut count = 0usize;
    // SAFETY: graph is live (contract); a null array asks for the count only.
    check(
        unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) },
        "cuGraphGetNodes",
    )?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // The driver refuses a non-null array with a count of 0 (CUDA_ERROR_INVALID_VALUE).
    if count > 0 {
        // SAFETY: nodes has room for `count` handles; the driver writes at most that many and
        // updates `count`.
        check(
            unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) },
            "cuGraphGetNodes",
        )?;
    }
    nodes.truncate(count);
    Ok(nodes)
}

/// One edge: its ends and its `CUgraphEdgeData` (from port, to port, type).
pub(crate) struct Edge {
    pub from: sys::CUgraphNode,
    pub to: sys::CUgraphNode,
    pub from_port: u8,
    pub to_port: u8,
    pub ty: u8,
}

/// The edges of a graph with their data (`cuGraphGetEdges`).
///
/// A count-only query (null arrays) fails with `CUDA_ERROR_LOSSY_QUERY` when any edge carries
/// data (a programmatic edge, as libraries such as cuBLAS make on Hopper), so the edges are
/// read into arrays with room for `capacity` entries, doubled while the driver fills them all.
///
/// # Safety
/// `graph` must be live and used by no other thread during the call.
pub(crate) unsafe fn graph_edges(graph: sys::CUgraph) -> Result<Vec<Edge>, Failure> {
    let mut capacity = 64usize;
    loop {
        let mut from = vec![std::ptr::null_mut(); capacity];
        let mut to = vec![std::ptr::null_mut(); capacity];
        // SAFETY: CUgraphEdgeData is plain bytes (ports, type, reserved): all zero is valid.
        let mut data: Vec<sys::CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; capacity];
        let mut count = capacity;
        // SAFETY: graph is live (contract); the three arrays have room for `count` entries; the
        // driver writes at most that many and sets `count` to the number it returned.
        check(
            unsafe {
                sys::cuGraphGetEdges_v2(
                    graph,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    data.as_mut_ptr(),
                    &mut count,
                )
            },
            "cuGraphGetEdges",
        )?;
        if count >= capacity && capacity < (1 << 28) {
            // Possibly cut short: ask again with more room.
            capacity *= 4;
            continue;
        }
        let count = count.min(capacity);
        return Ok((0..count)
            .map(|i| Edge {
                from: from[i],
                to: to[i],
                from_port: data[i].from_port,
                to_port: data[i].to_port,
                ty: data[i].type_,
            })
            .collect());
    }
}

/// A node's type as its `CUgraphNodeType` integer (`cuGraphNodeGetType`).
///
/// # Safety
/// `node` must be a live node.
pub(crate) unsafe fn node_type(node: sys::CUgraphNode) -> Result<u32, Failure> {
    let mut ty = MaybeUninit::<sys::CUgraphNodeType>::zeroed();
    // SAFETY: node is live (contract); ty is a writable, zero-initialised 32-bit slot.
    check(
        unsafe { sys::cuGraphNodeGetType(node, ty.as_mut_ptr()) },
        "cuGraphNodeGetType",
    )?;
    // SAFETY: ty is 32 bits, zero-initialised then written by the driver; read as u32.
    Ok(unsafe { ty.as_ptr().cast::<u32>().read() })
}

/// A kernel node's parameters (`cuGraphKernelNodeGetParams`); the argument pointers in them
/// point to driver-owned memory that lives as long as the node.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn kernel_node_params(
    node: sys::CUgraphNode,
) -> Result<sys::CUDA_KERNEL_NODE_PARAMS, Failure> {
    // SAFETY: CUDA_KERNEL_NODE_PARAMS holds integers and pointers only: all zero is valid.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: node is a live kernel node (contract); p is a local the driver fills.
    check(
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) },
        "cuGraphKernelNodeGetParams",
    )?;
    Ok(p)
}

/// A copy node's `CUDA_MEMCPY3D`, field by field.
///
/// # Safety
/// `node` must be a live copy node.
pub(crate) unsafe fn copy_node(node: sys::CUgraphNode) -> Result<Copy3D, Failure> {
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

/// A set node's parameters (`cuGraphMemsetNodeGetParams`).
///
/// # Safety
/// `node` must be a live set node.
pub(crate) unsafe fn set_node(node: sys::CUgraphNode) -> Result<Set2D, Failure> {
    // SAFETY: CUDA_MEMSET_NODE_PARAMS holds integers only: all zero is valid.
    let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: node is a live set node (contract); p is a local the driver fills.
    check(
        unsafe { sys::cuGraphMemsetNodeGetParams(node, &mut p) },
        "cuGraphMemsetNodeGetParams",
    )?;
    Ok(Set2D {
        dst: p.dst,
        pitch: p.pitch as u64,
        value: p.value,
        element_size: p.elementSize,
        width: p.width as u64,
        height: p.height as u64,
    })
}

/// The address of a host node's function (`cuGraphHostNodeGetParams`), 0 when none.
///
/// # Safety
/// `node` must be a live host node.
pub(crate) unsafe fn host_node_function(node: sys::CUgraphNode) -> Result<usize, Failure> {
    // SAFETY: CUDA_HOST_NODE_PARAMS is an optional function pointer and a data pointer: all
    // zero is valid (None, null).
    let mut p: sys::CUDA_HOST_NODE_PARAMS = unsafe { std::mem::zeroed() };
    // SAFETY: node is a live host node (contract); p is a local the driver fills.
    check(
        unsafe { sys::cuGraphHostNodeGetParams(node, &mut p) },
        "cuGraphHostNodeGetParams",
    )?;
    Ok(p.fn_.map(|f| f as usize).unwrap_or(0))
}

/// A child graph node's graph (`cuGraphChildGraphNodeGetGraph`), owned by the node.
///
/// # Safety
/// `node` must be a live child graph node.
pub(crate) unsafe fn child_graph(node: sys::CUgraphNode) -> Result<sys::CUgraph, Failure> {
    let mut child = std::ptr::null_mut();
    // SAFETY: node is a live child graph node (contract); child is a local.
    check(
        unsafe { sys::cuGraphChildGraphNodeGetGraph(node, &mut child) },
        "cuGraphChildGraphNodeGetGraph",
    )?;
    Ok(child)
}

/// The event of an event record (`record`) or wait node (`cuGraphEventRecordNodeGetEvent`,
/// `cuGraphEventWaitNodeGetEvent`).
///
/// # Safety
/// `node` must be a live event node of that kind.
pub(crate) unsafe fn event_node_event(
    node: sys::CUgraphNode,
    record: bool,
) -> Result<sys::CUevent, Failure> {
    let mut e = std::ptr::null_mut();
    if record {
        // SAFETY: node is a live event-record node (contract); e is a local.
        check(
            unsafe { sys::cuGraphEventRecordNodeGetEvent(node, &mut e) },
            "cuGraphEventRecordNodeGetEvent",
        )?;
    } else {
        // SAFETY: node is a live event-wait node (contract); e is a local.
        check(
            unsafe { sys::cuGraphEventWaitNodeGetEvent(node, &mut e) },
            "cuGraphEventWaitNodeGetEvent",
        )?;
    }
    Ok(e)
}

/// An allocation node's address and size (`cuGraphMemAllocNodeGetParams`).
///
/// # Safety
/// `node` must be a live allocation node.
pub(crate) unsafe fn alloc_node(node: sys::CUgraphNode) -> Result<(u64, u64), Failure> {
    // The parameters hold pool properties with C enums: never assumed initialised; the two
    // integer fields are read through raw pointers.
    let mut p = MaybeUninit::<sys::CUDA_MEM_ALLOC_NODE_PARAMS>::zeroed();
    // SAFETY: node is a live allocation node (contract); p is writable and large enough.
    check(
        unsafe { sys::cuGraphMemAllocNodeGetParams(node, p.as_mut_ptr()) },
        "cuGraphMemAllocNodeGetParams",
    )?;
    let p = p.as_ptr();
    // SAFETY: p points to a zero-initialised, driver-filled struct; both fields are integers
    // (any bit pattern valid).
    let (address, bytes) = unsafe { (addr_of!((*p).dptr).read(), addr_of!((*p).bytesize).read()) };
    Ok((address, bytes as u64))
}

/// The address a free node frees (`cuGraphMemFreeNodeGetParams`).
///
/// # Safety
/// `node` must be a live free node.
pub(crate) unsafe fn free_node(node: sys::CUgraphNode) -> Result<u64, Failure> {
    let mut ptr = 0;
    // SAFETY: node is a live free node (contract); ptr is a local.
    check(
        unsafe { sys::cuGraphMemFreeNodeGetParams(node, &mut ptr) },
        "cuGraphMemFreeNodeGetParams",
    )?;
    Ok(ptr)
}
