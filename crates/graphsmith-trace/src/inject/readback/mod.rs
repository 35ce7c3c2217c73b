//! `--hazards` inside the traced process: reads an instantiated `CUgraph` back with driver
//! calls into a [`RawGraph`] and hands it to the pure check ([`crate::hazard::check`]).
//!
//! Runs inside the instantiate callback, so every driver call here triggers a nested CUPTI
//! callback, which the tracer's per-thread reentrancy flag ignores (`callback::enter_busy`).
//! Functions are resolved from the libcuda the process already loaded (never linked, never
//! through cudarc's loader, which panics on a missing symbol); a missing function is a
//! "not checked" line in the report, never a failure of the host.
//!
//! Driver functions and the signatures they are called with (cuda.h, CUDA 12.3 to 13.x):
//! - `cuGraphGetNodes(CUgraph, CUgraphNode*, size_t*)`, `cuGraphNodeGetType(CUgraphNode,
//!   CUgraphNodeType*)`;
//! - `cuGraphGetEdges_v2(CUgraph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData*,
//!   size_t*)` (in CUDA 13 headers `cuGraphGetEdges` is this function); on a driver without it,
//!   the 4-argument `cuGraphGetEdges` (all edges plain);
//! - `cuGraphKernelNodeGetParams_v2(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*)`,
//!   `cuKernelGetFunction(CUfunction*, CUkernel)`, `cuFuncGetName(const char**, CUfunction)`,
//!   `cuFuncGetParamInfo(CUfunction, size_t, size_t* offset, size_t* size)` (12.4+);
//! - `cuGraphMemcpyNodeGetParams(CUgraphNode, CUDA_MEMCPY3D*)`,
//!   `cuGraphMemsetNodeGetParams(CUgraphNode, CUDA_MEMSET_NODE_PARAMS*)`,
//!   `cuGraphChildGraphNodeGetGraph(CUgraphNode, CUgraph*)`;
//! - `cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr)`.

use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::mem::MaybeUninit;
use std::ptr::{addr_of, null_mut};

use cudarc::driver::sys::{
    CUDA_KERNEL_NODE_PARAMS_v2, CUgraphEdgeData, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
};
use graphsmith_model::NodeKind;
use libloading::os::unix::{Library, RTLD_LAZY};

use super::api::Status;
use super::cbid::node_kind;
use crate::explain::code_label;
use crate::hazard::{self, Copy3D, CopySide, HazardCheck, RawEdge, RawGraph, RawNode, Set2D};

mod kernel;

/// Nodes read per graph at most (child graphs included), and edges per graph.
const MAX_NODES: usize = 1 << 20;
const MAX_EDGES: usize = 1 << 22;
/// Kernel parameters read per kernel at most.
const MAX_PARAMS: usize = 4096;
/// `CUDA_ERROR_INVALID_VALUE`: what `cuFuncGetParamInfo` answers past the last parameter.
const INVALID_VALUE: Status = 1;

type GetNodes = unsafe extern "C" fn(u64, *mut u64, *mut usize) -> Status;
type NodeType = unsafe extern "C" fn(u64, *mut u32) -> Status;
type GetEdgesV2 =
    unsafe extern "C" fn(u64, *mut u64, *mut u64, *mut CUgraphEdgeData, *mut usize) -> Status;
type GetEdgesV1 = unsafe extern "C" fn(u64, *mut u64, *mut u64, *mut usize) -> Status;
type KernelNodeParams = unsafe extern "C" fn(u64, *mut CUDA_KERNEL_NODE_PARAMS_v2) -> Status;
type KernelGetFunction = unsafe extern "C" fn(*mut u64, u64) -> Status;
type FuncGetName = unsafe extern "C" fn(*mut *const c_char, u64) -> Status;
type FuncGetParamInfo = unsafe extern "C" fn(u64, usize, *mut usize, *mut usize) -> Status;
type MemcpyNodeParams = unsafe extern "C" fn(u64, *mut CUDA_MEMCPY3D) -> Status;
type MemsetNodeParams = unsafe extern "C" fn(u64, *mut CUDA_MEMSET_NODE_PARAMS) -> Status;
type ChildGraph = unsafe extern "C" fn(u64, *mut u64) -> Status;
type AddressRange = unsafe extern "C" fn(*mut u64, *mut usize, u64) -> Status;
type ErrorName = unsafe extern "C" fn(Status, *mut *const c_char) -> Status;

/// The driver functions the read-back calls.
pub(crate) struct GraphApi {
    _lib: Library,
    get_nodes: GetNodes,
    node_type: NodeType,
    edges_v2: Option<GetEdgesV2>,
    edges_v1: Option<GetEdgesV1>,
    address_range: AddressRange,
    kernel_params: Option<KernelNodeParams>,
    kernel_function: Option<KernelGetFunction>,
    func_name: Option<FuncGetName>,
    param_info: Option<FuncGetParamInfo>,
    memcpy_params: Option<MemcpyNodeParams>,
    memset_params: Option<MemsetNodeParams>,
    child_graph: Option<ChildGraph>,
    error_name: Option<ErrorName>,
}

fn symbol<T: Copy>(lib: &Library, name: &str) -> Option<T> {
    // SAFETY: each call site names a driver function with the C signature T it has in cuda.h
    // (see the module docs); the pointer is used only while `lib` (kept in GraphApi) is open.
    unsafe { lib.get::<T>(name.as_bytes()) }.ok().map(|s| *s)
}

fn required<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    symbol(lib, name).ok_or_else(|| {
        format!("the driver (libcuda.so.1) has no {name}: update the driver to check hazards")
    })
}

impl GraphApi {
    /// Resolves the functions from the libcuda the process loaded.
    pub(crate) fn load() -> Result<GraphApi, String> {
        // SAFETY: libcuda.so.1 is already loaded (the driver called InitializeInjection);
        // RTLD_NOLOAD only takes a reference to it, running no initialiser.
        let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_LAZY | libc::RTLD_NOLOAD) }
            .map_err(|e| format!("libcuda.so.1 could not be opened again: {e}"))?;
        let edges_v2 = symbol(&lib, "cuGraphGetEdges_v2");
        let edges_v1 = if edges_v2.is_none() {
            symbol(&lib, "cuGraphGetEdges")
        } else {
            None
        };
        if edges_v2.is_none() && edges_v1.is_none() {
            return Err("the driver (libcuda.so.1) has no cuGraphGetEdges_v2".into());
        }
        Ok(GraphApi {
            get_nodes: required(&lib, "cuGraphGetNodes")?,
            node_type: required(&lib, "cuGraphNodeGetType")?,
            address_range: required(&lib, "cuMemGetAddressRange_v2")?,
            edges_v2,
            edges_v1,
            kernel_params: symbol(&lib, "cuGraphKernelNodeGetParams_v2"),
            kernel_function: symbol(&lib, "cuKernelGetFunction"),
            func_name: symbol(&lib, "cuFuncGetName"),
            param_info: symbol(&lib, "cuFuncGetParamInfo"),
            memcpy_params: symbol(&lib, "cuGraphMemcpyNodeGetParams"),
            memset_params: symbol(&lib, "cuGraphMemsetNodeGetParams"),
            child_graph: symbol(&lib, "cuGraphChildGraphNodeGetGraph"),
            error_name: symbol(&lib, "cuGetErrorName"),
            _lib: lib,
        })
    }

    fn failed(&self, call: &str, code: Status) -> String {
        let mut name: *const c_char = std::ptr::null();
        let known = match self.error_name {
            // SAFETY: cuGetErrorName writes a pointer to a static string, or fails.
            Some(f) => (unsafe { f(code, &mut name) }) == 0 && !name.is_null(),
            None => false,
        };
        // SAFETY: non-null, NUL-terminated, static in libcuda (checked just above).
        let name = known.then(|| {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        });
        format!("{call} returned {}", code_label(code, name.as_deref()))
    }

    /// The allocation holding a device address, as (base, size).
    pub(crate) fn allocation_of(&self, address: u64) -> Option<(u64, u64)> {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: any value may be asked about; the driver answers an error for an address
        // in no allocation. base and size are locals.
        let r = unsafe { (self.address_range)(&mut base, &mut size, address) };
        (r == 0).then_some((base, size as u64))
    }

    /// Reads a graph back.
    ///
    /// # Safety
    /// `graph` must be a live `CUgraph` that no other thread changes during the call, and the
    /// context of its kernels current on this thread.
    pub(crate) unsafe fn read(&self, graph: u64) -> Result<RawGraph, String> {
        let mut budget = MAX_NODES;
        // SAFETY: forwarded contract.
        unsafe { self.read_at(graph, 0, &mut budget) }
    }

    /// # Safety
    /// As [`GraphApi::read`].
    unsafe fn read_at(
        &self,
        graph: u64,
        depth: u32,
        budget: &mut usize,
    ) -> Result<RawGraph, String> {
        let mut n = 0usize;
        // SAFETY: graph is live (contract); a NULL array asks for the count only.
        let r = unsafe { (self.get_nodes)(graph, null_mut(), &mut n) };
        if r != 0 {
            return Err(self.failed("cuGraphGetNodes", r));
        }
        if n > *budget {
            return Err(format!(
                "the graph has more than {MAX_NODES} nodes (child graphs included)"
            ));
        }
        let mut handles = vec![0u64; n];
        if n > 0 {
            let mut got = n;
            // SAFETY: handles has room for `got` node handles; the driver writes at most that
            // many and updates `got`.
            let r = unsafe { (self.get_nodes)(graph, handles.as_mut_ptr(), &mut got) };
            if r != 0 {
                return Err(self.failed("cuGraphGetNodes", r));
            }
            handles.truncate(got.min(n));
        }
        *budget -= handles.len();
        let mut nodes = Vec::with_capacity(handles.len());
        for &h in &handles {
            // SAFETY: h is a node of the live graph.
            nodes.push(unsafe { self.node(h, depth, budget) }?);
        }
        let index: HashMap<u64, usize> = handles.iter().enumerate().map(|(i, &h)| (h, i)).collect();
        // SAFETY: graph is live.
        let edges = unsafe { self.edges(graph, &index) }?;
        Ok(RawGraph { nodes, edges })
    }

    /// # Safety
    /// `graph` is a live `CUgraph`.
    unsafe fn edges(
        &self,
        graph: u64,
        index: &HashMap<u64, usize>,
    ) -> Result<Vec<RawEdge>, String> {
        // A count-only query fails with CUDA_ERROR_LOSSY_QUERY when an edge carries data (a
        // programmatic edge), so read into arrays with room to spare, growing them while the
        // driver fills them all.
        let mut n = 64usize;
        let (from, to, data, got) = loop {
            let (mut from, mut to) = (vec![0u64; n], vec![0u64; n]);
            // SAFETY: CUgraphEdgeData is three bytes and a reserved byte array: all zero is valid.
            let mut data: Vec<CUgraphEdgeData> = vec![unsafe { std::mem::zeroed() }; n];
            let mut got = n;
            let r = match (self.edges_v2, self.edges_v1) {
                // SAFETY: the three arrays have room for `got` entries; the driver writes at
                // most that many and updates `got`.
                (Some(f), _) => unsafe {
                    f(
                        graph,
                        from.as_mut_ptr(),
                        to.as_mut_ptr(),
                        data.as_mut_ptr(),
                        &mut got,
                    )
                },
                // SAFETY: as above, without edge data.
                (None, Some(f)) => unsafe {
                    f(graph, from.as_mut_ptr(), to.as_mut_ptr(), &mut got)
                },
                (None, None) => return Ok(Vec::new()),
            };
            if r != 0 {
                return Err(self.failed("cuGraphGetEdges", r));
            }
            if got >= n {
                if n >= MAX_EDGES {
                    return Err(format!("the graph has more than {MAX_EDGES} edges"));
                }
                n = (n * 4).min(MAX_EDGES);
                continue;
            }
            break (from, to, data, got);
        };
        let got = got.min(n);
        Ok((0..got)
            .filter_map(|i| {
                Some(RawEdge {
                    from: *index.get(&from[i])?,
                    to: *index.get(&to[i])?,
                    from_port: data[i].from_port,
                    to_port: data[i].to_port,
                    ty: data[i].type_,
                })
            })
            .collect())
    }

    /// # Safety
    /// `node` is a node of a live graph.
    unsafe fn node(&self, node: u64, depth: u32, budget: &mut usize) -> Result<RawNode, String> {
        let mut t = 0u32;
        // SAFETY: node is live; t is a local (the enum read as its 32-bit value).
        let r = unsafe { (self.node_type)(node, &mut t) };
        if r != 0 {
            return Err(self.failed("cuGraphNodeGetType", r));
        }
        Ok(match t {
            // SAFETY: node is live and a kernel node (CU_GRAPH_NODE_TYPE_KERNEL, just read); its
            // kernel's context is current (read's contract).
            0 => unsafe { self.kernel(node) },
            // SAFETY: node is live and a copy node (CU_GRAPH_NODE_TYPE_MEMCPY).
            1 => unsafe { self.memcpy(node) },
            // SAFETY: node is live and a set node (CU_GRAPH_NODE_TYPE_MEMSET).
            2 => unsafe { self.memset(node) },
            // SAFETY: node is live and a child graph node (CU_GRAPH_NODE_TYPE_GRAPH).
            4 => unsafe { self.child(node, depth, budget) }?,
            3 => RawNode::plain(NodeKind::Host {
                name: String::new(),
            }),
            5 => RawNode::plain(NodeKind::Empty),
            6 => RawNode::plain(NodeKind::EventWait {
                event: String::new(),
            }),
            7 => RawNode::plain(NodeKind::EventRecord {
                event: String::new(),
            }),
            other => RawNode::plain(NodeKind::Other {
                name: node_kind(other).to_string(),
            }),
        })
    }

    /// # Safety
    /// `node` is a live child graph node.
    unsafe fn child(&self, node: u64, depth: u32, budget: &mut usize) -> Result<RawNode, String> {
        let mut graph = 0u64;
        let read = match self.child_graph {
            // SAFETY: node is a live child graph node; graph is a local.
            Some(f) => (unsafe { f(node, &mut graph) }) == 0 && graph != 0,
            None => false,
        };
        let child = if read && depth < graphsmith_analysis::readback::MAX_DEPTH {
            // SAFETY: the child graph is owned by the node, live while its parent is.
            unsafe { self.read_at(graph, depth + 1, budget) }?
        } else {
            RawGraph::default()
        };
        Ok(RawNode {
            child: Some(child),
            ..RawNode::plain(NodeKind::Empty)
        })
    }

    /// # Safety
    /// `node` is a live copy node.
    unsafe fn memcpy(&self, node: u64) -> RawNode {
        let unknown = || {
            RawNode::plain(NodeKind::Other {
                name: "memcpy".into(),
            })
        };
        let Some(get) = self.memcpy_params else {
            return unknown();
        };
        // CUDA_MEMCPY3D holds enums without a zero value: the struct is never assumed
        // initialised; each field is read through a raw pointer, enums as u32.
        let mut p = MaybeUninit::<CUDA_MEMCPY3D>::zeroed();
        // SAFETY: p is writable and large enough for a CUDA_MEMCPY3D.
        if unsafe { get(node, p.as_mut_ptr()) } != 0 {
            return unknown();
        }
        let p = p.as_ptr();
        // SAFETY: p points to a zero-initialised (then driver-filled) CUDA_MEMCPY3D; every
        // field read is an integer or a pointer (any bit pattern valid), enums read as u32.
        let c = unsafe {
            Copy3D {
                src: CopySide {
                    memory_type: addr_of!((*p).srcMemoryType).cast::<u32>().read(),
                    device: (*p).srcDevice,
                    host: (*p).srcHost as u64,
                    x: (*p).srcXInBytes as u64,
                    y: (*p).srcY as u64,
                    z: (*p).srcZ as u64,
                    pitch: (*p).srcPitch as u64,
                    height: (*p).srcHeight as u64,
                },
                dst: CopySide {
                    memory_type: addr_of!((*p).dstMemoryType).cast::<u32>().read(),
                    device: (*p).dstDevice,
                    host: (*p).dstHost as u64,
                    x: (*p).dstXInBytes as u64,
                    y: (*p).dstY as u64,
                    z: (*p).dstZ as u64,
                    pitch: (*p).dstPitch as u64,
                    height: (*p).dstHeight as u64,
                },
                width: (*p).WidthInBytes as u64,
                height: (*p).Height as u64,
                depth: (*p).Depth as u64,
            }
        };
        RawNode {
            kind: c.kind(),
            operands: c.operands(),
            child: None,
            args_unread: false,
        }
    }

    /// # Safety
    /// `node` is a live set node.
    unsafe fn memset(&self, node: u64) -> RawNode {
        let unknown = || {
            RawNode::plain(NodeKind::Other {
                name: "memset".into(),
            })
        };
        let Some(get) = self.memset_params else {
            return unknown();
        };
        // SAFETY: CUDA_MEMSET_NODE_PARAMS holds integers only: all zero is valid.
        let mut p: CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: p is a local the driver fills.
        if unsafe { get(node, &mut p) } != 0 {
            return unknown();
        }
        let s = Set2D {
            dst: p.dst,
            pitch: p.pitch as u64,
            value: p.value,
            element_size: p.elementSize,
            width: p.width as u64,
            height: p.height as u64,
        };
        RawNode {
            kind: s.kind(),
            operands: vec![s.operand()],
            child: None,
            args_unread: false,
        }
    }
}

/// The hazard check of a graph just instantiated: read back, modelled, checked. A panic in
/// the pure part is caught here and becomes a "not checked" reason.
///
/// # Safety
/// As [`GraphApi::read`]: `graph` was just instantiated by the calling thread.
pub(crate) unsafe fn check_instantiated(api: &Result<GraphApi, String>, graph: u64) -> HazardCheck {
    let api = match api {
        Ok(a) => a,
        Err(reason) => {
            return HazardCheck::NotChecked {
                reason: reason.clone(),
            }
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        match unsafe { api.read(graph) } {
            Ok(raw) => hazard::check(&raw, &mut |a| api.allocation_of(a)),
            Err(reason) => HazardCheck::NotChecked { reason },
        }
    }));
    result.unwrap_or_else(|_| HazardCheck::NotChecked {
        reason: "the hazard check failed inside graphsmith trace (a bug: please report it)".into(),
    })
}
