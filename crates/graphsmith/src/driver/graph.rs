//! Driver calls on graphs, their nodes and executables.

use cudarc::driver::sys;

use super::{check, Failure};

/// Destroys a graph (`cuGraphDestroy`).
///
/// # Safety
/// `graph` must be owned by the caller (created, cloned or returned by an end of capture),
/// destroyed once, and used by no other thread.
pub(crate) unsafe fn graph_destroy(graph: sys::CUgraph) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuGraphDestroy(graph) }, "cuGraphDestroy")
}

/// Destroys an executable (`cuGraphExecDestroy`).
///
/// # Safety
/// `exec` must be owned by the caller, destroyed once, and no launch of it may still run.
pub(crate) unsafe fn exec_destroy(exec: sys::CUgraphExec) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphExecDestroy(exec) },
        "cuGraphExecDestroy",
    )
}

/// Creates an empty graph (`cuGraphCreate`).
///
/// # Safety
/// A context must be current.
pub(crate) unsafe fn graph_create() -> Result<sys::CUgraph, Failure> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: a context is current (contract); raw is a local.
    check(unsafe { sys::cuGraphCreate(&mut raw, 0) }, "cuGraphCreate")?;
    Ok(raw)
}

/// Clones a graph (`cuGraphClone`); the caller owns the copy.
///
/// # Safety
/// `graph` must be live and used by no other thread during the call.
pub(crate) unsafe fn graph_clone(graph: sys::CUgraph) -> Result<sys::CUgraph, Failure> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: forwarded contract; raw is a local.
    check(
        unsafe { sys::cuGraphClone(&mut raw, graph) },
        "cuGraphClone",
    )?;
    Ok(raw)
}

/// The node of `clone` that corresponds to `original` (`cuGraphNodeFindInClone`).
///
/// # Safety
/// `original` must be a node of the graph `clone` was cloned from; both graphs live.
pub(crate) unsafe fn node_in_clone(
    original: sys::CUgraphNode,
    clone: sys::CUgraph,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract; node is a local.
    check(
        unsafe { sys::cuGraphNodeFindInClone(&mut node, original, clone) },
        "cuGraphNodeFindInClone",
    )?;
    Ok(node)
}

/// Writes the driver's DOT dump of a graph (`cuGraphDebugDotPrint`).
///
/// # Safety
/// `graph` must be live.
pub(crate) unsafe fn debug_dot_print(
    graph: sys::CUgraph,
    path: &std::ffi::CStr,
    verbose: bool,
) -> Result<(), Failure> {
    let flags = if verbose {
        sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32
    } else {
        0
    };
    // SAFETY: forwarded contract; path is NUL-terminated.
    check(
        unsafe { sys::cuGraphDebugDotPrint(graph, path.as_ptr(), flags) },
        "cuGraphDebugDotPrint",
    )
}

/// Adds a kernel node (`cuGraphAddKernelNode`) after `deps`.
///
/// # Safety
/// `graph` and every dependency must be live nodes of one graph; `params` must name a live
/// function or library kernel and point to one live argument per parameter (the driver copies
/// the values).
pub(crate) unsafe fn add_kernel_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_KERNEL_NODE_PARAMS,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract; node is a local; deps is a live slice.
    check(
        unsafe {
            sys::cuGraphAddKernelNode_v2(&mut node, graph, deps.as_ptr(), deps.len(), params)
        },
        "cuGraphAddKernelNode",
    )?;
    Ok(node)
}

/// Adds a programmatic edge `from -> to` between two kernel nodes of `graph`
/// (`cuGraphAddDependencies_v2`, from `CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC`, of type
/// `CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`).
///
/// # Safety
/// `graph` must be live and `from` and `to` live kernel nodes of it; a context current.
pub(crate) unsafe fn add_programmatic_edge(
    graph: sys::CUgraph,
    from: sys::CUgraphNode,
    to: sys::CUgraphNode,
) -> Result<(), Failure> {
    let edge = sys::CUgraphEdgeData {
        from_port: 1, // CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        to_port: 0,
        type_: 1, // CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        reserved: [0; 5],
    };
    // SAFETY: forwarded contract; the one-element arrays are locals alive for the call.
    check(
        unsafe { sys::cuGraphAddDependencies_v2(graph, &from, &to, &edge, 1) },
        "cuGraphAddDependencies",
    )
}

/// Adds a copy node (`cuGraphAddMemcpyNode`) after `deps`.
///
/// # Safety
/// As [`add_kernel_node`] for the graph; `params` must describe live memory of `ctx`.
pub(crate) unsafe fn add_memcpy_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_MEMCPY3D,
    ctx: sys::CUcontext,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    check(
        unsafe {
            sys::cuGraphAddMemcpyNode(&mut node, graph, deps.as_ptr(), deps.len(), params, ctx)
        },
        "cuGraphAddMemcpyNode",
    )?;
    Ok(node)
}

/// Adds a set node (`cuGraphAddMemsetNode`) after `deps`.
///
/// # Safety
/// As [`add_kernel_node`] for the graph; `params` must describe a live allocation of `ctx`.
pub(crate) unsafe fn add_memset_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_MEMSET_NODE_PARAMS,
    ctx: sys::CUcontext,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    check(
        unsafe {
            sys::cuGraphAddMemsetNode(&mut node, graph, deps.as_ptr(), deps.len(), params, ctx)
        },
        "cuGraphAddMemsetNode",
    )?;
    Ok(node)
}

/// Adds a host-function node (`cuGraphAddHostNode`) after `deps`.
///
/// # Safety
/// As [`add_kernel_node`] for the graph; `params.userData` must stay valid for as long as the
/// graph and every executable made from it can run the function.
pub(crate) unsafe fn add_host_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    params: &sys::CUDA_HOST_NODE_PARAMS,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphAddHostNode(&mut node, graph, deps.as_ptr(), deps.len(), params) },
        "cuGraphAddHostNode",
    )?;
    Ok(node)
}

/// Adds an event record (`record`) or event wait node after `deps`
/// (`cuGraphAddEventRecordNode`, `cuGraphAddEventWaitNode`).
///
/// # Safety
/// As [`add_kernel_node`] for the graph; `event` must stay live as long as the graph and its
/// executables.
pub(crate) unsafe fn add_event_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    event: sys::CUevent,
    record: bool,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    let (d, n) = (deps.as_ptr(), deps.len());
    // SAFETY: forwarded contract.
    if record {
        check(
            unsafe { sys::cuGraphAddEventRecordNode(&mut node, graph, d, n, event) },
            "cuGraphAddEventRecordNode",
        )?;
    } else {
        // SAFETY: forwarded contract.
        check(
            unsafe { sys::cuGraphAddEventWaitNode(&mut node, graph, d, n, event) },
            "cuGraphAddEventWaitNode",
        )?;
    }
    Ok(node)
}

/// Adds an empty node (`cuGraphAddEmptyNode`) after `deps`.
///
/// # Safety
/// As [`add_kernel_node`] for the graph.
pub(crate) unsafe fn add_empty_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphAddEmptyNode(&mut node, graph, deps.as_ptr(), deps.len()) },
        "cuGraphAddEmptyNode",
    )?;
    Ok(node)
}

/// Adds a child graph node holding a copy of `child` (`cuGraphAddChildGraphNode`).
///
/// # Safety
/// As [`add_kernel_node`] for the graph; `child` must be a live graph of the same context.
pub(crate) unsafe fn add_child_graph_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    child: sys::CUgraph,
) -> Result<sys::CUgraphNode, Failure> {
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract.
    check(
        unsafe {
            sys::cuGraphAddChildGraphNode(&mut node, graph, deps.as_ptr(), deps.len(), child)
        },
        "cuGraphAddChildGraphNode",
    )?;
    Ok(node)
}

/// Sets a template kernel node's parameters (`cuGraphKernelNodeSetParams`).
///
/// # Safety
/// `node` must be a live kernel node used by no other thread; `params` as in
/// [`add_kernel_node`].
pub(crate) unsafe fn set_kernel_node(
    node: sys::CUgraphNode,
    params: &sys::CUDA_KERNEL_NODE_PARAMS,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphKernelNodeSetParams_v2(node, params) },
        "cuGraphKernelNodeSetParams",
    )
}

/// Sets a template copy node's parameters (`cuGraphMemcpyNodeSetParams`).
///
/// # Safety
/// `node` must be a live copy node used by no other thread; `params` must describe live
/// memory.
pub(crate) unsafe fn set_memcpy_node(
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMCPY3D,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphMemcpyNodeSetParams(node, params) },
        "cuGraphMemcpyNodeSetParams",
    )
}

/// Sets a template set node's parameters (`cuGraphMemsetNodeSetParams`).
///
/// # Safety
/// `node` must be a live set node used by no other thread; `params` must describe a live
/// allocation.
pub(crate) unsafe fn set_memset_node(
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMSET_NODE_PARAMS,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphMemsetNodeSetParams(node, params) },
        "cuGraphMemsetNodeSetParams",
    )
}

/// Instantiates a graph (`cuGraphInstantiateWithFlags`, no flags); the caller owns the
/// executable.
///
/// # Safety
/// `graph` must be live and used by no other thread during the call.
pub(crate) unsafe fn instantiate(graph: sys::CUgraph) -> Result<sys::CUgraphExec, Failure> {
    let mut exec = std::ptr::null_mut();
    // SAFETY: forwarded contract; exec is a local.
    check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
        "cuGraphInstantiate",
    )?;
    Ok(exec)
}

/// Launches an executable on a stream (`cuGraphLaunch`).
///
/// # Safety
/// `exec` and `stream` must be live and of one context; no other thread may launch, upload or
/// update `exec` during the call.
pub(crate) unsafe fn launch(exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuGraphLaunch(exec, stream) }, "cuGraphLaunch")
}

/// Uploads an executable's resources (`cuGraphUpload`).
///
/// # Safety
/// As [`launch`].
pub(crate) unsafe fn upload(exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuGraphUpload(exec, stream) }, "cuGraphUpload")
}

/// Sets a kernel node's parameters in an executable (`cuGraphExecKernelNodeSetParams`).
///
/// # Safety
/// `exec` must be live and used by no other thread; `node` a kernel node of the graph it was
/// instantiated from; `params` as in [`add_kernel_node`].
pub(crate) unsafe fn exec_set_kernel_node(
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_KERNEL_NODE_PARAMS,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, params) },
        "cuGraphExecKernelNodeSetParams",
    )
}

/// Sets a set node's parameters in an executable (`cuGraphExecMemsetNodeSetParams`).
///
/// # Safety
/// As [`exec_set_kernel_node`], for a set node; `params` must describe a live allocation of
/// `ctx`.
pub(crate) unsafe fn exec_set_memset_node(
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMSET_NODE_PARAMS,
    ctx: sys::CUcontext,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphExecMemsetNodeSetParams(exec, node, params, ctx) },
        "cuGraphExecMemsetNodeSetParams",
    )
}

/// Sets a copy node's parameters in an executable (`cuGraphExecMemcpyNodeSetParams`).
///
/// # Safety
/// As [`exec_set_kernel_node`], for a copy node; `params` must describe live memory of `ctx`.
pub(crate) unsafe fn exec_set_memcpy_node(
    exec: sys::CUgraphExec,
    node: sys::CUgraphNode,
    params: &sys::CUDA_MEMCPY3D,
    ctx: sys::CUcontext,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphExecMemcpyNodeSetParams(exec, node, params, ctx) },
        "cuGraphExecMemcpyNodeSetParams",
    )
}

/// Why the driver refused an in-place update.
pub(crate) struct UpdateRefused {
    /// `CUgraphExecUpdateResult`'s name (read as an integer, named from CUDA 13.0's values).
    pub result: String,
    pub error_node: sys::CUgraphNode,
    pub error_from_node: sys::CUgraphNode,
}

/// Updates `exec` in place to `graph`'s parameters (`cuGraphExecUpdate`): `Ok(None)` when it
/// did, `Ok(Some(why))` when the driver refused the update as impossible.
///
/// # Safety
/// `exec` and `graph` must be live and used by no other thread during the call.
pub(crate) unsafe fn exec_update(
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
) -> Result<Option<UpdateRefused>, Failure> {
    // The result info holds a C enum the driver fills: never assumed initialised as a Rust
    // value; its fields are read through raw pointers, the enum as an integer.
    let mut info = std::mem::MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
    // SAFETY: forwarded contract; info is writable and large enough.
    let rc = unsafe { sys::cuGraphExecUpdate_v2(exec, graph, info.as_mut_ptr()) };
    if rc == sys::CUresult::CUDA_SUCCESS {
        return Ok(None);
    }
    if rc != sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
        return check(rc, "cuGraphExecUpdate").map(|()| None);
    }
    let p = info.as_ptr();
    // SAFETY: p points to a zero-initialised, driver-filled struct; the enum is read as its
    // 32-bit value and the node fields are pointers (any bit pattern valid).
    let (result, error_node, error_from_node) = unsafe {
        (
            std::ptr::addr_of!((*p).result).cast::<u32>().read(),
            std::ptr::addr_of!((*p).errorNode).read(),
            std::ptr::addr_of!((*p).errorFromNode).read(),
        )
    };
    let name = match result {
        0 => "CU_GRAPH_EXEC_UPDATE_SUCCESS".to_string(),
        1 => "CU_GRAPH_EXEC_UPDATE_ERROR".to_string(),
        2 => "CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED".to_string(),
        3 => "CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED".to_string(),
        4 => "CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED".to_string(),
        5 => "CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED".to_string(),
        6 => "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED".to_string(),
        7 => "CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE".to_string(),
        8 => "CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED".to_string(),
        other => format!("CUgraphExecUpdateResult {other}"),
    };
    Ok(Some(UpdateRefused {
        result: name,
        error_node,
        error_from_node,
    }))
}
