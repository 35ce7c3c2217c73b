//! A stand-in driver for the reader's tests: `extern "C"` functions with the table's signatures
//! that answer from a per-thread [`Fake`] (graphs, nodes, functions, allocations), log every
//! call by its driver name, and fail the calls a test names. Handles are small integers.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};

use cudarc::driver::sys;
use graphsmith_analysis::{Copy3D, Set2D};

use crate::table::{DriverTable, Status, SUCCESS};

/// `CUDA_ERROR_INVALID_HANDLE`: a handle the fake does not know.
pub const INVALID_HANDLE: Status = 400;

/// A kernel's function: its name, parameter layout and required cluster shape.
#[derive(Default)]
pub struct Function {
    pub name: Option<CString>,
    pub layout: Vec<(usize, usize)>,
    pub cluster: [c_int; 3],
}

/// How a kernel node holds its arguments.
pub enum Args {
    /// `kernelParams`: one pointer per parameter (`None`: a null pointer).
    Params(Vec<Option<Vec<u8>>>),
    /// `extra`: the packed buffer (`None`: no BUFFER_POINTER entry) and the BUFFER_SIZE.
    Extra {
        buffer: Option<Vec<u8>>,
        size: usize,
    },
    /// Neither.
    Neither,
}

pub struct Kernel {
    pub func: usize,
    pub kern: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared: u32,
    pub args: Args,
}

pub enum Node {
    Kernel(Kernel),
    Copy(Copy3D),
    Set(Set2D),
    Host,
    Child(usize),
    Empty,
    EventWait(usize),
    EventRecord(usize),
    Alloc(u64, usize),
    Free(u64),
    /// Any other type, by its number.
    Other(u32),
}

/// A graph: its nodes and its edges (from, to, from port, to port, type).
#[derive(Default)]
pub struct Graph {
    pub nodes: Vec<usize>,
    pub edges: Vec<(usize, usize, u8, u8, u8)>,
}

#[derive(Default)]
pub struct Fake {
    pub graphs: HashMap<usize, Graph>,
    pub nodes: HashMap<usize, Node>,
    pub functions: HashMap<usize, Function>,
    /// Library kernel -> its function.
    pub library_kernels: HashMap<usize, usize>,
    /// (base, size) of each device allocation.
    pub allocations: Vec<(u64, usize)>,
    /// Calls that fail, by driver name, with the code they return.
    pub failing: HashMap<&'static str, Status>,
    /// Every call, in order.
    pub calls: Vec<&'static str>,
    /// Memory handed to the reader (argument bytes, pointer arrays, sizes), kept while the
    /// fake lives.
    pub(super) kept_bytes: Vec<Box<[u8]>>,
    pub(super) kept_pointers: Vec<Box<[*mut c_void]>>,
    // Boxed: the reader holds a pointer to each size while the vector may grow.
    #[allow(clippy::vec_box)]
    pub(super) kept_sizes: Vec<Box<usize>>,
}

mod params;

thread_local! {
    static FAKE: RefCell<Fake> = RefCell::new(Fake::default());
}

/// Makes `fake` this thread's driver.
pub fn install(fake: Fake) {
    FAKE.with(|f| *f.borrow_mut() = fake);
}

/// The calls made so far on this thread.
pub fn calls() -> Vec<&'static str> {
    FAKE.with(|f| f.borrow().calls.clone())
}

/// The host function every host node runs.
extern "C" fn host_function(_: *mut c_void) {}

/// The one pointer to [`host_function`] the fake hands out. Rust does not promise that two
/// casts of a function name give the same address (an optimised build may give two), so the
/// fake and the tests both read this one value.
pub static HOST_FUNCTION: sys::CUhostFn = Some(host_function);

/// Logs `call`, fails it when the test said so, else answers with `f`.
pub(super) fn enter(call: &'static str, f: impl FnOnce(&mut Fake) -> Status) -> Status {
    FAKE.with(|fake| {
        let mut fake = fake.borrow_mut();
        fake.calls.push(call);
        match fake.failing.get(call) {
            Some(&code) => code,
            None => f(&mut fake),
        }
    })
}

/// A table of every fake function.
pub fn full_table() -> DriverTable {
    DriverTable {
        graph_get_nodes: Some(get_nodes),
        node_get_type: Some(node_type),
        graph_get_edges_v2: Some(get_edges_v2),
        graph_get_edges: Some(get_edges_v1),
        kernel_node_get_params: Some(params::kernel_params),
        kernel_get_function: Some(params::kernel_function),
        func_get_name: Some(params::func_name),
        func_get_param_info: Some(params::param_info),
        func_get_attribute: Some(params::func_attribute),
        memcpy_node_get_params: Some(params::memcpy_params),
        memset_node_get_params: Some(params::memset_params),
        host_node_get_params: Some(params::host_params),
        child_graph_node_get_graph: Some(params::child_graph),
        event_record_node_get_event: Some(params::event_record),
        event_wait_node_get_event: Some(params::event_wait),
        mem_alloc_node_get_params: Some(params::alloc_params),
        mem_free_node_get_params: Some(params::free_params),
        mem_get_address_range: Some(params::address_range),
    }
}

/// The tracer's table: no host, event, allocation, free or attribute functions.
pub fn tracer_table() -> DriverTable {
    DriverTable {
        graph_get_edges: None,
        func_get_attribute: None,
        host_node_get_params: None,
        event_record_node_get_event: None,
        event_wait_node_get_event: None,
        mem_alloc_node_get_params: None,
        mem_free_node_get_params: None,
        ..full_table()
    }
}

unsafe extern "C" fn get_nodes(
    graph: sys::CUgraph,
    nodes: *mut sys::CUgraphNode,
    count: *mut usize,
) -> Status {
    enter("cuGraphGetNodes", |f| {
        let Some(g) = f.graphs.get(&(graph as usize)) else {
            return INVALID_HANDLE;
        };
        if nodes.is_null() {
            // SAFETY: count points to the reader's local.
            unsafe { *count = g.nodes.len() };
            return SUCCESS;
        }
        // SAFETY: nodes has room for *count handles (the reader's contract with the driver).
        let n = unsafe { *count }.min(g.nodes.len());
        for (i, &h) in g.nodes.iter().take(n).enumerate() {
            // SAFETY: i < n <= the room in nodes.
            unsafe { *nodes.add(i) = h as sys::CUgraphNode };
        }
        // SAFETY: count points to the reader's local.
        unsafe { *count = n };
        SUCCESS
    })
}

unsafe extern "C" fn node_type(node: sys::CUgraphNode, ty: *mut u32) -> Status {
    use sys::CUgraphNodeType as T;
    enter("cuGraphNodeGetType", |f| {
        let t = match f.nodes.get(&(node as usize)) {
            None => return INVALID_HANDLE,
            Some(Node::Kernel(_)) => T::CU_GRAPH_NODE_TYPE_KERNEL as u32,
            Some(Node::Copy(_)) => T::CU_GRAPH_NODE_TYPE_MEMCPY as u32,
            Some(Node::Set(_)) => T::CU_GRAPH_NODE_TYPE_MEMSET as u32,
            Some(Node::Host) => T::CU_GRAPH_NODE_TYPE_HOST as u32,
            Some(Node::Child(_)) => T::CU_GRAPH_NODE_TYPE_GRAPH as u32,
            Some(Node::Empty) => T::CU_GRAPH_NODE_TYPE_EMPTY as u32,
            Some(Node::EventWait(_)) => T::CU_GRAPH_NODE_TYPE_WAIT_EVENT as u32,
            Some(Node::EventRecord(_)) => T::CU_GRAPH_NODE_TYPE_EVENT_RECORD as u32,
            Some(Node::Alloc(..)) => T::CU_GRAPH_NODE_TYPE_MEM_ALLOC as u32,
            Some(Node::Free(_)) => T::CU_GRAPH_NODE_TYPE_MEM_FREE as u32,
            Some(Node::Other(t)) => *t,
        };
        // SAFETY: ty points to the reader's local.
        unsafe { *ty = t };
        SUCCESS
    })
}

/// Both edge functions: writes at most *count edges, sets *count to the number written.
///
/// # Safety
/// from and to have room for *count entries, and data too when not null.
unsafe fn edges(
    graph: sys::CUgraph,
    from: *mut sys::CUgraphNode,
    to: *mut sys::CUgraphNode,
    data: *mut sys::CUgraphEdgeData,
    count: *mut usize,
    f: &mut Fake,
) -> Status {
    let Some(g) = f.graphs.get(&(graph as usize)) else {
        return INVALID_HANDLE;
    };
    // SAFETY: count points to the reader's local.
    let n = unsafe { *count }.min(g.edges.len());
    for (i, &(a, b, from_port, to_port, ty)) in g.edges.iter().take(n).enumerate() {
        // SAFETY: i < n <= the room in each array (contract).
        unsafe {
            *from.add(i) = a as sys::CUgraphNode;
            *to.add(i) = b as sys::CUgraphNode;
            if !data.is_null() {
                let d = &mut *data.add(i);
                d.from_port = from_port;
                d.to_port = to_port;
                d.type_ = ty;
            }
        }
    }
    // SAFETY: count points to the reader's local.
    unsafe { *count = n };
    SUCCESS
}

unsafe extern "C" fn get_edges_v2(
    graph: sys::CUgraph,
    from: *mut sys::CUgraphNode,
    to: *mut sys::CUgraphNode,
    data: *mut sys::CUgraphEdgeData,
    count: *mut usize,
) -> Status {
    // SAFETY: the reader gives arrays with room for *count entries.
    enter("cuGraphGetEdges_v2", |f| unsafe {
        edges(graph, from, to, data, count, f)
    })
}

unsafe extern "C" fn get_edges_v1(
    graph: sys::CUgraph,
    from: *mut sys::CUgraphNode,
    to: *mut sys::CUgraphNode,
    count: *mut usize,
) -> Status {
    // SAFETY: as get_edges_v2, without edge data.
    enter("cuGraphGetEdges", |f| unsafe {
        edges(graph, from, to, std::ptr::null_mut(), count, f)
    })
}
