//! The driver functions the reader calls, as a table of C function pointers with the driver's
//! types (cudarc's `sys`). Who fills it decides where the functions come from: the runtime from
//! the libcuda cudarc loaded, the tracer from the libcuda the traced process loaded, the tests
//! from fakes that answer with canned data.
//!
//! Results are read as `u32` ([`Status`]), never as cudarc's `CUresult` enum: a newer driver
//! may return a code this build's enum does not know, and an unknown value in a Rust enum is
//! undefined behaviour. For the same reason the node type the driver writes is a `u32`.
//!
//! Signatures, as in cuda.h (CUDA 12.3 to 13.x):
//! - `cuGraphGetNodes(CUgraph, CUgraphNode*, size_t*)`, `cuGraphNodeGetType(CUgraphNode,
//!   CUgraphNodeType*)`;
//! - `cuGraphGetEdges_v2(CUgraph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData*,
//!   size_t*)` (in CUDA 13 headers `cuGraphGetEdges` is this function); on a driver without it,
//!   the 4-argument `cuGraphGetEdges` (all edges plain);
//! - `cuGraphKernelNodeGetParams_v2(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*)`,
//!   `cuKernelGetFunction(CUfunction*, CUkernel)`, `cuFuncGetName(const char**, CUfunction)`,
//!   `cuFuncGetParamInfo(CUfunction, size_t, size_t* offset, size_t* size)` (12.4+),
//!   `cuFuncGetAttribute(int*, CUfunction_attribute, CUfunction)`;
//! - `cuGraphMemcpyNodeGetParams(CUgraphNode, CUDA_MEMCPY3D*)`,
//!   `cuGraphMemsetNodeGetParams(CUgraphNode, CUDA_MEMSET_NODE_PARAMS*)`,
//!   `cuGraphHostNodeGetParams(CUgraphNode, CUDA_HOST_NODE_PARAMS*)`,
//!   `cuGraphChildGraphNodeGetGraph(CUgraphNode, CUgraph*)`,
//!   `cuGraphEventRecordNodeGetEvent`/`cuGraphEventWaitNodeGetEvent(CUgraphNode, CUevent*)`,
//!   `cuGraphMemAllocNodeGetParams(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS*)`,
//!   `cuGraphMemFreeNodeGetParams(CUgraphNode, CUdeviceptr*)`;
//! - `cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr)`.

use std::ffi::{c_char, c_int};

use cudarc::driver::sys;

/// A `CUresult`, read as its integer value (0 is `CUDA_SUCCESS`).
pub type Status = u32;

/// `CUDA_SUCCESS`.
pub const SUCCESS: Status = 0;
/// `CUDA_ERROR_INVALID_VALUE`: what `cuFuncGetParamInfo` answers past the last parameter.
pub const INVALID_VALUE: Status = 1;

pub type GetNodes = unsafe extern "C" fn(sys::CUgraph, *mut sys::CUgraphNode, *mut usize) -> Status;
pub type NodeGetType = unsafe extern "C" fn(sys::CUgraphNode, *mut u32) -> Status;
pub type GetEdgesV2 = unsafe extern "C" fn(
    sys::CUgraph,
    *mut sys::CUgraphNode,
    *mut sys::CUgraphNode,
    *mut sys::CUgraphEdgeData,
    *mut usize,
) -> Status;
pub type GetEdgesV1 = unsafe extern "C" fn(
    sys::CUgraph,
    *mut sys::CUgraphNode,
    *mut sys::CUgraphNode,
    *mut usize,
) -> Status;
pub type KernelNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUDA_KERNEL_NODE_PARAMS_v2) -> Status;
pub type KernelGetFunction = unsafe extern "C" fn(*mut sys::CUfunction, sys::CUkernel) -> Status;
pub type FuncGetName = unsafe extern "C" fn(*mut *const c_char, sys::CUfunction) -> Status;
pub type FuncGetParamInfo =
    unsafe extern "C" fn(sys::CUfunction, usize, *mut usize, *mut usize) -> Status;
pub type FuncGetAttribute =
    unsafe extern "C" fn(*mut c_int, sys::CUfunction_attribute, sys::CUfunction) -> Status;
pub type MemcpyNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUDA_MEMCPY3D) -> Status;
pub type MemsetNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUDA_MEMSET_NODE_PARAMS) -> Status;
pub type HostNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUDA_HOST_NODE_PARAMS) -> Status;
pub type ChildGraphNodeGetGraph =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUgraph) -> Status;
pub type EventNodeGetEvent = unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUevent) -> Status;
pub type MemAllocNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUDA_MEM_ALLOC_NODE_PARAMS) -> Status;
pub type MemFreeNodeGetParams =
    unsafe extern "C" fn(sys::CUgraphNode, *mut sys::CUdeviceptr) -> Status;
pub type MemGetAddressRange =
    unsafe extern "C" fn(*mut sys::CUdeviceptr, *mut usize, sys::CUdeviceptr) -> Status;

/// The driver functions the reader may call; `None` where the driver (or whoever filled the
/// table) has none. Which are needed, and what a missing one means, is the reader's
/// [`crate::Policy`]'s business: the graph's nodes, their types and its edges are always
/// needed; without a node's parameter function, a lenient read keeps the node with what it
/// knows and a strict read fails.
///
/// Every pointer must be the driver function of that name with the signature of its type (see
/// the module docs), callable for as long as the table is used: [`crate::Reader::new`], the
/// only way to call them, takes that as its contract.
#[derive(Clone, Copy, Debug, Default)]
pub struct DriverTable {
    pub graph_get_nodes: Option<GetNodes>,
    pub node_get_type: Option<NodeGetType>,
    pub graph_get_edges_v2: Option<GetEdgesV2>,
    /// Asked only when `graph_get_edges_v2` is `None`.
    pub graph_get_edges: Option<GetEdgesV1>,
    pub kernel_node_get_params: Option<KernelNodeGetParams>,
    pub kernel_get_function: Option<KernelGetFunction>,
    pub func_get_name: Option<FuncGetName>,
    pub func_get_param_info: Option<FuncGetParamInfo>,
    /// The kernel's required cluster shape; without it the shape is not read (`None`).
    pub func_get_attribute: Option<FuncGetAttribute>,
    pub memcpy_node_get_params: Option<MemcpyNodeGetParams>,
    pub memset_node_get_params: Option<MemsetNodeGetParams>,
    pub host_node_get_params: Option<HostNodeGetParams>,
    pub child_graph_node_get_graph: Option<ChildGraphNodeGetGraph>,
    pub event_record_node_get_event: Option<EventNodeGetEvent>,
    pub event_wait_node_get_event: Option<EventNodeGetEvent>,
    pub mem_alloc_node_get_params: Option<MemAllocNodeGetParams>,
    pub mem_free_node_get_params: Option<MemFreeNodeGetParams>,
    pub mem_get_address_range: Option<MemGetAddressRange>,
}
