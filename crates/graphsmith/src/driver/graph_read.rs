//! Reading a graph back: graphsmith-readback's reader over the driver functions cudarc loaded
//! (the same symbols of the same libcuda that cudarc's `sys::cu*` call), strict (the first
//! failed call is the read's [`Failure`]).

use std::sync::OnceLock;

use cudarc::driver::sys;
use graphsmith_readback::{DriverTable, KernelNode, Limits, Policy, Read, ReadError, Reader};

use super::Failure;
use crate::error::CudaCode;

/// `CUDA_ERROR_OUT_OF_MEMORY`: a graph with more edges than [`Limits::GENEROUS`] allows.
const OUT_OF_MEMORY: u32 = 2;
/// `CUDA_ERROR_NOT_FOUND`: a driver function libcuda does not export.
const NOT_FOUND: u32 = 500;

/// The read-back's driver functions, resolved once from cudarc's libcuda.
fn table() -> &'static DriverTable {
    static TABLE: OnceLock<DriverTable> = OnceLock::new();
    TABLE.get_or_init(|| {
        // SAFETY: a graph is read only in a context the runtime made current, so cudarc has
        // loaded libcuda already (culib returns it, loading nothing); it stays loaded for the
        // life of the process.
        let lib = unsafe { sys::culib() };
        macro_rules! get {
            ($name:literal) => {
                // SAFETY: each field's type is the C signature of the function of that name in
                // cuda.h (graphsmith_readback::table), the name cudarc's sys loads for it; the
                // pointer is used only while libcuda stays loaded (for the process's life).
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .ok()
                    .map(|s| *s)
            };
        }
        DriverTable {
            graph_get_nodes: get!("cuGraphGetNodes"),
            node_get_type: get!("cuGraphNodeGetType"),
            graph_get_edges_v2: get!("cuGraphGetEdges_v2"),
            graph_get_edges: None,
            kernel_node_get_params: get!("cuGraphKernelNodeGetParams_v2"),
            kernel_get_function: get!("cuKernelGetFunction"),
            func_get_name: get!("cuFuncGetName"),
            func_get_param_info: get!("cuFuncGetParamInfo"),
            func_get_attribute: get!("cuFuncGetAttribute"),
            memcpy_node_get_params: get!("cuGraphMemcpyNodeGetParams"),
            memset_node_get_params: get!("cuGraphMemsetNodeGetParams"),
            host_node_get_params: get!("cuGraphHostNodeGetParams"),
            child_graph_node_get_graph: get!("cuGraphChildGraphNodeGetGraph"),
            event_record_node_get_event: get!("cuGraphEventRecordNodeGetEvent"),
            event_wait_node_get_event: get!("cuGraphEventWaitNodeGetEvent"),
            mem_alloc_node_get_params: get!("cuGraphMemAllocNodeGetParams"),
            mem_free_node_get_params: get!("cuGraphMemFreeNodeGetParams"),
            mem_get_address_range: get!("cuMemGetAddressRange_v2"),
        }
    })
}

fn reader() -> Reader<'static> {
    // SAFETY: every function in the table was resolved by its cuda.h name with that name's
    // signature, from a libcuda that stays loaded.
    unsafe { Reader::new(table(), Policy::Strict, Limits::GENEROUS) }
}

/// A failed read as the runtime's failure: the call and its code; a missing function is
/// `CUDA_ERROR_NOT_FOUND` of that call, too many edges `CUDA_ERROR_OUT_OF_MEMORY` of
/// `cuGraphGetEdges`.
fn failure(e: ReadError) -> Failure {
    let (call, code) = match e {
        ReadError::Call { call, code } => (call, code),
        ReadError::Missing { call } => (call, NOT_FOUND),
        ReadError::TooManyNodes { .. } => ("cuGraphGetNodes", OUT_OF_MEMORY),
        ReadError::TooManyEdges { .. } => ("cuGraphGetEdges", OUT_OF_MEMORY),
    };
    Failure {
        call,
        code: CudaCode(code),
    }
}

/// Reads a graph back: nodes in the driver's order (child graphs included), their types and
/// parameters, every kernel argument's bytes, and edges with their data.
///
/// # Safety
/// `graph` must be live and used by no other thread during the call; the context of its
/// kernels must be current.
pub(crate) unsafe fn read_graph_back(graph: sys::CUgraph) -> Result<Read, Failure> {
    // SAFETY: forwarded contract.
    unsafe { reader().read(graph) }.map_err(failure)
}

/// Reads one kernel node back: its parameters, function, layout and arguments.
///
/// # Safety
/// `node` must be a live kernel node; its context must be current.
pub(crate) unsafe fn read_kernel_node(node: sys::CUgraphNode) -> Result<KernelNode, Failure> {
    // SAFETY: forwarded contract.
    unsafe { reader().kernel(node) }.map_err(failure)
}
