//! Driver calls for conditional nodes: condition handles, the node with its body graphs, and
//! capturing a stream into an existing graph (a body).

use cudarc::driver::sys;

use super::{check, Failure};

/// Creates a condition handle for a conditional node of `graph` (`cuGraphConditionalHandleCreate`).
/// With `default` set, every launch of the graph starts with the condition at that value
/// (`CU_GRAPH_COND_ASSIGN_DEFAULT`); without, it keeps whatever a kernel last set.
///
/// # Safety
/// `graph` must be live and used by no other thread; `ctx` must be live and current.
pub(crate) unsafe fn condition_handle_create(
    graph: sys::CUgraph,
    ctx: sys::CUcontext,
    default: Option<u32>,
) -> Result<u64, Failure> {
    let mut handle: sys::CUgraphConditionalHandle = 0;
    let (value, flags) = match default {
        Some(v) => (v, sys::CU_GRAPH_COND_ASSIGN_DEFAULT),
        None => (0, 0),
    };
    // SAFETY: forwarded contract; handle is a local.
    check(
        unsafe { sys::cuGraphConditionalHandleCreate(&mut handle, graph, ctx, value, flags) },
        "cuGraphConditionalHandleCreate",
    )?;
    Ok(handle)
}

/// The flavour of a conditional node, as the driver numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CondType {
    If,
    While,
    Switch,
}

/// Adds a conditional node (`cuGraphAddNode_v2` with `CU_GRAPH_NODE_TYPE_CONDITIONAL`) after
/// `deps`, with `size` bodies (IF: 1, or 2 with an ELSE; WHILE: 1; SWITCH: one per case), and
/// returns it with the body graphs the driver created. The bodies belong to the node: they live
/// as long as it does and must never be destroyed by the caller.
///
/// # Safety
/// `graph` and every dependency must be live nodes of one graph used by no other thread;
/// `handle` a condition handle created for `graph` (or a graph containing it) in `ctx`; `ctx`
/// live and current.
pub(crate) unsafe fn add_conditional_node(
    graph: sys::CUgraph,
    deps: &[sys::CUgraphNode],
    handle: u64,
    ty: CondType,
    size: u32,
    ctx: sys::CUcontext,
) -> Result<(sys::CUgraphNode, Vec<sys::CUgraph>), Failure> {
    let type_ = match ty {
        CondType::If => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_IF,
        CondType::While => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_WHILE,
        CondType::Switch => sys::CUgraphConditionalNodeType::CU_GRAPH_COND_TYPE_SWITCH,
    };
    // SAFETY: CUgraphNodeParams is a plain C struct (integers, pointers, a union of such) for
    // which all-zero bytes are a valid value; the fields the driver reads are set below.
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_,
        size,
        // An output: the driver sets it to its own array of `size` body graphs.
        phGraph_out: std::ptr::null_mut(),
        ctx,
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: forwarded contract; node and params are locals; no edge data (full edges).
    check(
        unsafe {
            sys::cuGraphAddNode_v2(
                &mut node,
                graph,
                deps.as_ptr(),
                std::ptr::null(),
                deps.len(),
                &mut params,
            )
        },
        "cuGraphAddNode (conditional)",
    )?;
    // SAFETY: reading the union member this call's node type selects (set above, and the
    // driver writes phGraph_out into it).
    let out = unsafe { params.__bindgen_anon_1.conditional.phGraph_out };
    let bodies: Vec<sys::CUgraph> = if out.is_null() {
        Vec::new()
    } else {
        // SAFETY: the driver documents phGraph_out, after creation, as its array of `size`
        // body graphs, valid for the node's lifetime; they are copied out here.
        unsafe { std::slice::from_raw_parts(out, size as usize) }.to_vec()
    };
    if bodies.len() != size as usize || bodies.iter().any(|b| b.is_null()) {
        return Err(Failure {
            call: "cuGraphAddNode (conditional: returned no body graph)",
            code: super::code(sys::CUresult::CUDA_ERROR_UNKNOWN),
        });
    }
    Ok((node, bodies))
}

/// Begins capturing `stream` into the existing graph `graph` (`cuStreamBeginCaptureToGraph`),
/// the captured work depending on nothing already in it. `cuStreamEndCapture` then returns
/// `graph` itself.
///
/// # Safety
/// `stream` and `graph` must be live and of the current context; `graph` used by no other
/// thread until the capture ends.
pub(crate) unsafe fn begin_capture_to_graph(
    stream: sys::CUstream,
    graph: sys::CUgraph,
    mode: sys::CUstreamCaptureMode,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract; no dependencies.
    check(
        unsafe {
            sys::cuStreamBeginCaptureToGraph(
                stream,
                graph,
                std::ptr::null(),
                std::ptr::null(),
                0,
                mode,
            )
        },
        "cuStreamBeginCaptureToGraph",
    )
}

/// Removes a node from its graph (`cuGraphDestroyNode`).
///
/// # Safety
/// `node` must be a live node of a graph used by no other thread; no handle to it is used
/// afterwards.
pub(crate) unsafe fn destroy_node(node: sys::CUgraphNode) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuGraphDestroyNode(node) },
        "cuGraphDestroyNode",
    )
}
