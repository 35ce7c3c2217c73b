//! A stand-in driver for the reader's tests: `extern "C"` functions with the table's signatures
//! that answer from a per-thread [`Fake`] (graphs, nodes, functions, allocations), log every
//! call by its driver name, and fail the calls a test names. Handles are small integers.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::addr_of_mut;

use cudarc::driver::sys;
use graphsmith_analysis::{Copy3D, Set2D};

use crate::table::{DriverTable, Status, INVALID_VALUE, SUCCESS};

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
    kept_bytes: Vec<Box<[u8]>>,
    kept_pointers: Vec<Box<[*mut c_void]>>,
    // Boxed: the reader holds a pointer to each size while the vector may grow.
    #[allow(clippy::vec_box)]
    kept_sizes: Vec<Box<usize>>,
}

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
pub extern "C" fn host_function(_: *mut c_void) {}

/// Logs `call`, fails it when the test said so, else answers with `f`.
fn enter(call: &'static str, f: impl FnOnce(&mut Fake) -> Status) -> Status {
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
        kernel_node_get_params: Some(kernel_params),
        kernel_get_function: Some(kernel_function),
        func_get_name: Some(func_name),
        func_get_param_info: Some(param_info),
        func_get_attribute: Some(func_attribute),
        memcpy_node_get_params: Some(memcpy_params),
        memset_node_get_params: Some(memset_params),
        host_node_get_params: Some(host_params),
        child_graph_node_get_graph: Some(child_graph),
        event_record_node_get_event: Some(event_record),
        event_wait_node_get_event: Some(event_wait),
        mem_alloc_node_get_params: Some(alloc_params),
        mem_free_node_get_params: Some(free_params),
        mem_get_address_range: Some(address_range),
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

/// A key of an `extra` list (`CU_LAUNCH_PARAM_*`): a number in a pointer.
fn key(k: usize) -> *mut c_void {
    std::ptr::without_provenance_mut(k)
}

unsafe extern "C" fn kernel_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_KERNEL_NODE_PARAMS_v2,
) -> Status {
    enter("cuGraphKernelNodeGetParams", |f| {
        let Some(Node::Kernel(k)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        let (mut params, mut extra) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut bytes = Vec::new();
        let mut pointers = Vec::new();
        let mut sizes = Vec::new();
        match &k.args {
            Args::Params(args) => {
                let mut array: Vec<*mut c_void> = Vec::new();
                for a in args {
                    match a {
                        Some(b) => {
                            let mut b: Box<[u8]> = b.clone().into_boxed_slice();
                            array.push(b.as_mut_ptr().cast());
                            bytes.push(b);
                        }
                        None => array.push(std::ptr::null_mut()),
                    }
                }
                let mut array = array.into_boxed_slice();
                params = array.as_mut_ptr();
                pointers.push(array);
            }
            Args::Extra { buffer, size } => {
                let mut size = Box::new(*size);
                let mut list: Vec<*mut c_void> = Vec::new();
                if let Some(b) = buffer {
                    let mut b: Box<[u8]> = b.clone().into_boxed_slice();
                    list.extend([key(1), b.as_mut_ptr().cast()]);
                    bytes.push(b);
                }
                // An entry the reader does not know is skipped.
                list.extend([key(7), std::ptr::null_mut()]);
                let size_ptr: *mut usize = &mut *size;
                list.extend([key(2), size_ptr.cast(), std::ptr::null_mut()]);
                let mut list = list.into_boxed_slice();
                extra = list.as_mut_ptr();
                pointers.push(list);
                sizes.push(size);
            }
            Args::Neither => {}
        }
        // SAFETY: p points to the reader's zeroed local of the v2 layout.
        let p = unsafe { &mut *p };
        p.func = k.func as sys::CUfunction;
        p.kern = k.kern as sys::CUkernel;
        [p.gridDimX, p.gridDimY, p.gridDimZ] = k.grid;
        [p.blockDimX, p.blockDimY, p.blockDimZ] = k.block;
        p.sharedMemBytes = k.shared;
        p.kernelParams = params;
        p.extra = extra;
        f.kept_bytes.extend(bytes);
        f.kept_pointers.extend(pointers);
        f.kept_sizes.extend(sizes);
        SUCCESS
    })
}

unsafe extern "C" fn kernel_function(func: *mut sys::CUfunction, kern: sys::CUkernel) -> Status {
    enter("cuKernelGetFunction", |f| {
        let Some(&found) = f.library_kernels.get(&(kern as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: func points to the reader's local.
        unsafe { *func = found as sys::CUfunction };
        SUCCESS
    })
}

unsafe extern "C" fn func_name(name: *mut *const c_char, func: sys::CUfunction) -> Status {
    enter("cuFuncGetName", |f| {
        match f.functions.get(&(func as usize)).map(|g| &g.name) {
            // SAFETY: name points to the reader's local; the string lives as long as the fake.
            Some(Some(text)) => unsafe { *name = text.as_ptr() },
            _ => return INVALID_HANDLE,
        }
        SUCCESS
    })
}

unsafe extern "C" fn param_info(
    func: sys::CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> Status {
    enter("cuFuncGetParamInfo", |f| {
        let Some(g) = f.functions.get(&(func as usize)) else {
            return INVALID_HANDLE;
        };
        let Some(&(o, s)) = g.layout.get(index) else {
            return INVALID_VALUE;
        };
        // SAFETY: offset and size point to the reader's locals.
        unsafe { (*offset, *size) = (o, s) };
        SUCCESS
    })
}

unsafe extern "C" fn func_attribute(
    value: *mut c_int,
    attribute: sys::CUfunction_attribute,
    func: sys::CUfunction,
) -> Status {
    use sys::CUfunction_attribute as A;
    enter("cuFuncGetAttribute", |f| {
        let Some(g) = f.functions.get(&(func as usize)) else {
            return INVALID_HANDLE;
        };
        let v = match attribute {
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH => g.cluster[0],
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT => g.cluster[1],
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH => g.cluster[2],
            _ => return INVALID_VALUE,
        };
        // SAFETY: value points to the reader's local.
        unsafe { *value = v };
        SUCCESS
    })
}

unsafe extern "C" fn memcpy_params(node: sys::CUgraphNode, p: *mut sys::CUDA_MEMCPY3D) -> Status {
    enter("cuGraphMemcpyNodeGetParams", |f| {
        let Some(Node::Copy(c)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed CUDA_MEMCPY3D; each field is written through
        // a raw pointer, the memory types as their 32-bit values.
        unsafe {
            addr_of_mut!((*p).srcMemoryType)
                .cast::<u32>()
                .write(c.src.memory_type);
            addr_of_mut!((*p).srcDevice).write(c.src.device);
            addr_of_mut!((*p).srcHost).write(c.src.host as *const c_void);
            addr_of_mut!((*p).srcXInBytes).write(c.src.x as usize);
            addr_of_mut!((*p).srcY).write(c.src.y as usize);
            addr_of_mut!((*p).srcZ).write(c.src.z as usize);
            addr_of_mut!((*p).srcPitch).write(c.src.pitch as usize);
            addr_of_mut!((*p).srcHeight).write(c.src.height as usize);
            addr_of_mut!((*p).dstMemoryType)
                .cast::<u32>()
                .write(c.dst.memory_type);
            addr_of_mut!((*p).dstDevice).write(c.dst.device);
            addr_of_mut!((*p).dstHost).write(c.dst.host as *mut c_void);
            addr_of_mut!((*p).dstXInBytes).write(c.dst.x as usize);
            addr_of_mut!((*p).dstY).write(c.dst.y as usize);
            addr_of_mut!((*p).dstZ).write(c.dst.z as usize);
            addr_of_mut!((*p).dstPitch).write(c.dst.pitch as usize);
            addr_of_mut!((*p).dstHeight).write(c.dst.height as usize);
            addr_of_mut!((*p).WidthInBytes).write(c.width as usize);
            addr_of_mut!((*p).Height).write(c.height as usize);
            addr_of_mut!((*p).Depth).write(c.depth as usize);
        }
        SUCCESS
    })
}

unsafe extern "C" fn memset_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_MEMSET_NODE_PARAMS,
) -> Status {
    enter("cuGraphMemsetNodeGetParams", |f| {
        let Some(Node::Set(s)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed local.
        let p = unsafe { &mut *p };
        p.dst = s.dst;
        p.pitch = s.pitch as usize;
        p.value = s.value;
        p.elementSize = s.element_size;
        p.width = s.width as usize;
        p.height = s.height as usize;
        SUCCESS
    })
}

unsafe extern "C" fn host_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_HOST_NODE_PARAMS,
) -> Status {
    enter("cuGraphHostNodeGetParams", |f| {
        let Some(Node::Host) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed local.
        unsafe { (*p).fn_ = Some(host_function) };
        SUCCESS
    })
}

unsafe extern "C" fn child_graph(node: sys::CUgraphNode, graph: *mut sys::CUgraph) -> Status {
    enter("cuGraphChildGraphNodeGetGraph", |f| {
        let Some(Node::Child(g)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: graph points to the reader's local.
        unsafe { *graph = *g as sys::CUgraph };
        SUCCESS
    })
}

unsafe extern "C" fn event_record(node: sys::CUgraphNode, event: *mut sys::CUevent) -> Status {
    enter("cuGraphEventRecordNodeGetEvent", |f| {
        let Some(Node::EventRecord(e)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: event points to the reader's local.
        unsafe { *event = *e as sys::CUevent };
        SUCCESS
    })
}

unsafe extern "C" fn event_wait(node: sys::CUgraphNode, event: *mut sys::CUevent) -> Status {
    enter("cuGraphEventWaitNodeGetEvent", |f| {
        let Some(Node::EventWait(e)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: event points to the reader's local.
        unsafe { *event = *e as sys::CUevent };
        SUCCESS
    })
}

unsafe extern "C" fn alloc_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_MEM_ALLOC_NODE_PARAMS,
) -> Status {
    enter("cuGraphMemAllocNodeGetParams", |f| {
        let Some(&Node::Alloc(address, bytes)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed struct; the two integer fields are written
        // through raw pointers.
        unsafe {
            addr_of_mut!((*p).dptr).write(address);
            addr_of_mut!((*p).bytesize).write(bytes);
        }
        SUCCESS
    })
}

unsafe extern "C" fn free_params(node: sys::CUgraphNode, address: *mut sys::CUdeviceptr) -> Status {
    enter("cuGraphMemFreeNodeGetParams", |f| {
        let Some(&Node::Free(a)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: address points to the reader's local.
        unsafe { *address = a };
        SUCCESS
    })
}

unsafe extern "C" fn address_range(
    base: *mut sys::CUdeviceptr,
    size: *mut usize,
    address: sys::CUdeviceptr,
) -> Status {
    enter("cuMemGetAddressRange_v2", |f| {
        let Some(&(b, s)) = f
            .allocations
            .iter()
            .find(|&&(b, s)| address >= b && address < b + s as u64)
        else {
            return 500;
        };
        // SAFETY: base and size point to the reader's locals.
        unsafe { (*base, *size) = (b, s) };
        SUCCESS
    })
}
