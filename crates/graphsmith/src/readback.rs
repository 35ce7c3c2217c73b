//! Reading any `CUgraph` back into the model: node kinds, kernel names, geometry and argument
//! bytes, copy and set operands with the memory they touch, child graphs, edges.

use std::collections::HashMap;
use std::ffi::CStr;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::{
    Access, AccessMode, Dim3, KernelArg, KernelParams, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeKind,
};

use crate::context::Context;
use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::KernelFn;

/// Child graphs nest at most this deep before read-back stops descending.
const MAX_DEPTH: u32 = 16;

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
    // SAFETY: raw is live (caller's contract).
    unsafe { read_graph(raw, label) }
        .map(|read| read.model)
        .map_err(fail)
}

/// A graph read back from the driver.
pub(crate) struct ReadGraph {
    pub model: model::Graph,
    /// The driver handle of each model node.
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
    unsafe { read_at_depth(raw, label, 0) }
}

unsafe fn read_at_depth(raw: sys::CUgraph, label: &str, depth: u32) -> Result<ReadGraph, Failure> {
    let mut count = 0usize;
    // SAFETY: raw is live; a null array asks for the count only.
    check(
        unsafe { sys::cuGraphGetNodes(raw, std::ptr::null_mut(), &mut count) },
        "cuGraphGetNodes",
    )?;
    let mut handles = vec![std::ptr::null_mut(); count];
    // The driver refuses a non-null array with a count of 0 (CUDA_ERROR_INVALID_VALUE).
    if count > 0 {
        // SAFETY: handles has room for `count` nodes.
        check(
            unsafe { sys::cuGraphGetNodes(raw, handles.as_mut_ptr(), &mut count) },
            "cuGraphGetNodes",
        )?;
    }
    handles.truncate(count);
    let mut graph = model::Graph::new(label);
    let mut index = HashMap::with_capacity(count);
    let mut kernels = Vec::with_capacity(count);
    for (i, &node) in handles.iter().enumerate() {
        // SAFETY: node is a live node of raw.
        let (kind, kernel) = unsafe { read_node(node, depth) }?;
        let accesses = accesses_of(&kind);
        graph.add_node_with("", kind, None, accesses);
        kernels.push(kernel);
        index.insert(node as usize, i);
    }
    let mut edges = 0usize;
    // SAFETY: null arrays ask for the edge count only.
    check(
        unsafe {
            sys::cuGraphGetEdges_v2(
                raw,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut edges,
            )
        },
        "cuGraphGetEdges",
    )?;
    let mut from = vec![std::ptr::null_mut(); edges];
    let mut to = vec![std::ptr::null_mut(); edges];
    if edges > 0 {
        // SAFETY: both arrays have room for `edges` handles; edge data is not requested.
        check(
            unsafe {
                sys::cuGraphGetEdges_v2(
                    raw,
                    from.as_mut_ptr(),
                    to.as_mut_ptr(),
                    std::ptr::null_mut(),
                    &mut edges,
                )
            },
            "cuGraphGetEdges",
        )?;
    }
    for (f, t) in from.iter().zip(&to).take(edges) {
        if let (Some(&a), Some(&b)) = (index.get(&(*f as usize)), index.get(&(*t as usize))) {
            // Indices come from this graph, so the edge is valid.
            let _ = graph.add_edge(model::NodeId(a as u32), model::NodeId(b as u32));
        }
    }
    Ok(ReadGraph {
        model: graph,
        handles,
        kernels,
    })
}

unsafe fn read_node(
    node: sys::CUgraphNode,
    depth: u32,
) -> Result<(NodeKind, Option<KernelFn>), Failure> {
    use sys::CUgraphNodeType as T;
    let mut ty = T::CU_GRAPH_NODE_TYPE_EMPTY;
    // SAFETY: node is live; ty is a valid out pointer.
    check(
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) },
        "cuGraphNodeGetType",
    )?;
    let mut kernel = None;
    // SAFETY (all arms): node is live and of the type just read; out structs are plain C data.
    let kind = match ty {
        T::CU_GRAPH_NODE_TYPE_KERNEL => {
            let (params, function) = unsafe { read_kernel(node) }?;
            kernel = function.and_then(|(k, complete)| complete.then_some(k));
            NodeKind::Kernel(params)
        }
        T::CU_GRAPH_NODE_TYPE_MEMCPY => {
            // CUDA_MEMCPY3D holds enums without a zero value: let the driver fill it.
            let mut p = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
            check(
                unsafe { sys::cuGraphMemcpyNodeGetParams(node, p.as_mut_ptr()) },
                "cuGraphMemcpyNodeGetParams",
            )?;
            // SAFETY: on success the driver wrote every field, enums included.
            let p = unsafe { p.assume_init() };
            let side = |ty: sys::CUmemorytype, dev: sys::CUdeviceptr, host: u64, x: usize| {
                let (space, base) = match ty {
                    sys::CUmemorytype::CU_MEMORYTYPE_DEVICE
                    | sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED => (MemorySpace::Device, dev),
                    sys::CUmemorytype::CU_MEMORYTYPE_HOST => (MemorySpace::Host, host),
                    sys::CUmemorytype::CU_MEMORYTYPE_ARRAY => (MemorySpace::Array, 0),
                };
                MemRef {
                    space,
                    address: base + x as u64,
                }
            };
            NodeKind::Memcpy(MemcpyParams {
                src: side(
                    p.srcMemoryType,
                    p.srcDevice,
                    p.srcHost as u64,
                    p.srcXInBytes,
                ),
                dst: side(
                    p.dstMemoryType,
                    p.dstDevice,
                    p.dstHost as u64,
                    p.dstXInBytes,
                ),
                bytes: (p.WidthInBytes * p.Height.max(1) * p.Depth.max(1)) as u64,
            })
        }
        T::CU_GRAPH_NODE_TYPE_MEMSET => {
            let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
            check(
                unsafe { sys::cuGraphMemsetNodeGetParams(node, &mut p) },
                "cuGraphMemsetNodeGetParams",
            )?;
            NodeKind::Memset(MemsetParams {
                dst: p.dst,
                element_size: p.elementSize,
                value: p.value,
                width: p.width as u64,
                height: p.height as u64,
                pitch: p.pitch as u64,
            })
        }
        T::CU_GRAPH_NODE_TYPE_HOST => {
            let mut p: sys::CUDA_HOST_NODE_PARAMS = unsafe { std::mem::zeroed() };
            check(
                unsafe { sys::cuGraphHostNodeGetParams(node, &mut p) },
                "cuGraphHostNodeGetParams",
            )?;
            let address = p.fn_.map(|f| f as usize).unwrap_or(0);
            NodeKind::Host {
                name: format!("host function at 0x{address:x}"),
            }
        }
        T::CU_GRAPH_NODE_TYPE_GRAPH => {
            let mut child = std::ptr::null_mut();
            check(
                unsafe { sys::cuGraphChildGraphNodeGetGraph(node, &mut child) },
                "cuGraphChildGraphNodeGetGraph",
            )?;
            let graph = if depth < MAX_DEPTH {
                unsafe { read_at_depth(child, "child", depth + 1) }?.model
            } else {
                model::Graph::new("child (not read: nested too deep)")
            };
            NodeKind::ChildGraph {
                graph: Box::new(graph),
            }
        }
        T::CU_GRAPH_NODE_TYPE_EMPTY => NodeKind::Empty,
        T::CU_GRAPH_NODE_TYPE_WAIT_EVENT => {
            let mut e = std::ptr::null_mut();
            check(
                unsafe { sys::cuGraphEventWaitNodeGetEvent(node, &mut e) },
                "cuGraphEventWaitNodeGetEvent",
            )?;
            NodeKind::EventWait {
                event: format!("event 0x{:x}", e as usize),
            }
        }
        T::CU_GRAPH_NODE_TYPE_EVENT_RECORD => {
            let mut e = std::ptr::null_mut();
            check(
                unsafe { sys::cuGraphEventRecordNodeGetEvent(node, &mut e) },
                "cuGraphEventRecordNodeGetEvent",
            )?;
            NodeKind::EventRecord {
                event: format!("event 0x{:x}", e as usize),
            }
        }
        T::CU_GRAPH_NODE_TYPE_MEM_ALLOC => {
            let mut p: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
            check(
                unsafe { sys::cuGraphMemAllocNodeGetParams(node, &mut p) },
                "cuGraphMemAllocNodeGetParams",
            )?;
            NodeKind::MemAlloc {
                address: p.dptr,
                bytes: p.bytesize as u64,
            }
        }
        T::CU_GRAPH_NODE_TYPE_MEM_FREE => {
            let mut ptr = 0;
            check(
                unsafe { sys::cuGraphMemFreeNodeGetParams(node, &mut ptr) },
                "cuGraphMemFreeNodeGetParams",
            )?;
            NodeKind::MemFree { address: ptr }
        }
        // The CUDA 13.0 driver API has no call that reads a conditional node's parameters
        // (cuGraphNodeGetParams arrived in 13.2), so its flavour stays unknown here.
        T::CU_GRAPH_NODE_TYPE_CONDITIONAL => NodeKind::Other {
            name: "conditional".into(),
        },
        other => NodeKind::Other {
            name: format!("{other:?}"),
        },
    };
    Ok((kind, kernel))
}

/// Reads a kernel node: its parameters for the model, and its kernel with parameter layout
/// (`None` when the kernel cannot be resolved) with whether every argument could be read.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn read_kernel(
    node: sys::CUgraphNode,
) -> Result<(KernelParams, Option<(KernelFn, bool)>), Failure> {
    // SAFETY: plain C struct; node is a live kernel node.
    let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
    check(
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) },
        "cuGraphKernelNodeGetParams",
    )?;
    let mut func = p.func;
    if func.is_null() && !p.kern.is_null() {
        // SAFETY: kern is a live library kernel; the node's context is current.
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
        // SAFETY: func is live; text receives a driver-owned NUL-terminated string.
        if unsafe { sys::cuFuncGetName(&mut text, func) } == sys::CUresult::CUDA_SUCCESS
            && !text.is_null()
        {
            name = unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned();
        }
        // SAFETY: func is live.
        let layout = unsafe { crate::kernel::param_layout(func) }?;
        // SAFETY: kernelParams (when set) holds one pointer per parameter, each to `size` bytes
        // owned by the driver for the node's lifetime; `extra` is the alternative buffer form.
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

/// Copies each argument's bytes out of a kernel node's parameters.
unsafe fn argument_bytes(
    p: &sys::CUDA_KERNEL_NODE_PARAMS,
    layout: &[(usize, usize)],
) -> Vec<KernelArg> {
    let mut out = Vec::with_capacity(layout.len());
    if !p.kernelParams.is_null() {
        for (i, &(offset, size)) in layout.iter().enumerate() {
            // SAFETY: see read_kernel: one valid pointer per parameter.
            let value = unsafe { *p.kernelParams.add(i) } as *const u8;
            if value.is_null() {
                continue;
            }
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
        loop {
            // SAFETY: the list is terminated by END, per the driver's contract for `extra`.
            let key = unsafe { *p.extra.add(i) } as usize;
            if key == 0 || i > 64 {
                break;
            }
            let value = unsafe { *p.extra.add(i + 1) };
            match key {
                1 => buffer = value as *const u8,
                2 if !value.is_null() => size = unsafe { *(value as *const usize) },
                _ => {}
            }
            i += 2;
        }
        if !buffer.is_null() {
            for &(offset, len) in layout {
                if offset + len <= size {
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

fn device_access(address: u64, len: u64, mode: AccessMode) -> Access {
    let (buffer, offset) = match allocation_of(address) {
        Some((base, _)) => (base, address - base),
        None => (address, 0),
    };
    Access {
        buffer,
        label: String::new(),
        offset,
        len,
        mode,
    }
}

/// The memory a copy or set node touches (device sides only).
fn accesses_of(kind: &NodeKind) -> Vec<Access> {
    match kind {
        NodeKind::Memcpy(p) => {
            let mut out = Vec::new();
            if p.src.space == MemorySpace::Device {
                out.push(device_access(p.src.address, p.bytes, AccessMode::Read));
            }
            if p.dst.space == MemorySpace::Device {
                out.push(device_access(p.dst.address, p.bytes, AccessMode::Write));
            }
            out
        }
        NodeKind::Memset(p) if p.height <= 1 => {
            vec![device_access(p.dst, p.bytes(), AccessMode::Write)]
        }
        NodeKind::Memset(p) => vec![device_access(
            p.dst,
            p.pitch * (p.height - 1) + p.width * p.element_size as u64,
            AccessMode::Write,
        )],
        NodeKind::Kernel(k) => kernel_accesses(k),
        _ => Vec::new(),
    }
}

/// The memory a kernel of a graph graphsmith did not build may touch: every 8-byte argument
/// whose value points into a live allocation (`cuMemGetAddressRange`) is taken as an access
/// from that point to the allocation's end. The direction comes from the demangled C++
/// signature where there is one (`const T*` is a read); otherwise it is `Unknown`, which the
/// hazard checker reports as a possible hazard rather than dropping.
fn kernel_accesses(k: &graphsmith_model::KernelParams) -> Vec<Access> {
    let modes = crate::signature::pointer_modes(&k.name);
    let mut out = Vec::new();
    for (i, arg) in k.args.iter().enumerate() {
        let Ok(bytes) = <[u8; 8]>::try_from(arg.bytes.as_slice()) else {
            continue;
        };
        let ptr = u64::from_le_bytes(bytes);
        if ptr == 0 {
            continue;
        }
        let Some((base, size)) = allocation_of(ptr) else {
            continue;
        };
        let mode = match modes.as_ref().and_then(|m| m.get(i).copied().flatten()) {
            Some(mode) => mode,
            None => AccessMode::Unknown,
        };
        let offset = ptr - base;
        out.push(Access {
            buffer: base,
            label: String::new(),
            offset,
            len: size - offset,
            mode,
        });
    }
    out
}
