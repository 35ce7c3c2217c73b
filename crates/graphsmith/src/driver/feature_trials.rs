//! The driver sequences behind `graphsmith probe`'s feature trials: each builds a tiny graph
//! with the feature, instantiates it and cleans up, returning the driver's answer.

use cudarc::driver::sys;

use super::{check, Failure};

/// A graph destroyed on drop, for trials.
struct TrialGraph(sys::CUgraph);

impl TrialGraph {
    fn new() -> Result<Self, Failure> {
        let mut g = std::ptr::null_mut();
        // SAFETY: the context is current (bound by the caller); g is a valid out pointer.
        check(unsafe { sys::cuGraphCreate(&mut g, 0) }, "cuGraphCreate")?;
        Ok(Self(g))
    }
    fn instantiate(&self, flags: u64) -> Result<(), Failure> {
        let mut exec = std::ptr::null_mut();
        // SAFETY: self.0 is live; exec is destroyed right after.
        check(
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, self.0, flags) },
            "cuGraphInstantiate",
        )?;
        // SAFETY: exec was just created.
        check(
            unsafe { sys::cuGraphExecDestroy(exec) },
            "cuGraphExecDestroy",
        )
    }
}

impl Drop for TrialGraph {
    fn drop(&mut self) {
        // SAFETY: the trial graph is owned here and destroyed once.
        let _ = unsafe { sys::cuGraphDestroy(self.0) };
    }
}

/// # Safety
/// A context must be current; `func` must be a live function without parameters.
unsafe fn kernel_node(
    g: &TrialGraph,
    func: sys::CUfunction,
    deps: &[sys::CUgraphNode],
) -> Result<sys::CUgraphNode, Failure> {
    let params = sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 32,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: g is live; func takes no parameters (gs_empty), so null kernelParams is valid.
    check(
        unsafe { sys::cuGraphAddKernelNode_v2(&mut node, g.0, deps.as_ptr(), deps.len(), &params) },
        "cuGraphAddKernelNode",
    )?;
    Ok(node)
}

/// Whether `cuGraphExecUpdate` works on a small graph.
///
/// # Safety
/// A context must be current on this thread.
pub(crate) unsafe fn trial_exec_update() -> Result<(), Failure> {
    let g = TrialGraph::new()?;
    let mut node = std::ptr::null_mut();
    // SAFETY: g is live.
    check(
        unsafe { sys::cuGraphAddEmptyNode(&mut node, g.0, std::ptr::null(), 0) },
        "cuGraphAddEmptyNode",
    )?;
    let mut exec = std::ptr::null_mut();
    // SAFETY: g is live.
    check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g.0, 0) },
        "cuGraphInstantiate",
    )?;
    // SAFETY: plain C struct, zero is valid before the call fills it.
    let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    // SAFETY: exec and g are live and compatible (same topology).
    let rc = check(
        unsafe { sys::cuGraphExecUpdate_v2(exec, g.0, &mut info) },
        "cuGraphExecUpdate",
    );
    // SAFETY: exec was created above.
    let _ = unsafe { sys::cuGraphExecDestroy(exec) };
    rc
}

/// Whether a conditional node of `kind` can be added and instantiated.
///
/// # Safety
/// A context must be current on this thread and be `ctx`.
pub(crate) unsafe fn trial_conditional(
    ctx: sys::CUcontext,
    kind: sys::CUgraphConditionalNodeType,
) -> Result<(), Failure> {
    let g = TrialGraph::new()?;
    let mut handle = 0;
    // SAFETY: g and the context are live.
    check(
        unsafe { sys::cuGraphConditionalHandleCreate(&mut handle, g.0, ctx, 0, 0) },
        "cuGraphConditionalHandleCreate",
    )?;
    // SAFETY: plain C struct/union; zero is a valid starting value.
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: kind,
        size: 1,
        phGraph_out: std::ptr::null_mut(),
        ctx,
    };
    let mut node = std::ptr::null_mut();
    // SAFETY: g is live; params is a valid conditional description; the driver fills the body
    // graph array, owned by the node.
    check(
        unsafe {
            sys::cuGraphAddNode_v2(
                &mut node,
                g.0,
                std::ptr::null(),
                std::ptr::null(),
                0,
                &mut params,
            )
        },
        "cuGraphAddNode",
    )?;
    g.instantiate(0)
}

/// Whether a graph instantiates for device launch.
///
/// # Safety
/// A context must be current on this thread; `func` must be a live function without parameters.
pub(crate) unsafe fn trial_device_launch(func: sys::CUfunction) -> Result<(), Failure> {
    let g = TrialGraph::new()?;
    // SAFETY: forwarded contract (a current context, a live parameterless func).
    unsafe { kernel_node(&g, func, &[]) }?;
    g.instantiate(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64)
}

/// Whether a programmatic edge between two kernels instantiates.
///
/// # Safety
/// A context must be current on this thread; `func` must be a live function without parameters.
pub(crate) unsafe fn trial_programmatic_edge(func: sys::CUfunction) -> Result<(), Failure> {
    let g = TrialGraph::new()?;
    // SAFETY: forwarded contract (a current context, a live parameterless func).
    let a = unsafe { kernel_node(&g, func, &[]) }?;
    // SAFETY: as above.
    let b = unsafe { kernel_node(&g, func, &[]) }?;
    let edge = sys::CUgraphEdgeData {
        from_port: 1, // CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        to_port: 0,
        type_: 1, // CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        reserved: [0; 5],
    };
    // SAFETY: a and b are live kernel nodes of g.
    check(
        unsafe { sys::cuGraphAddDependencies_v2(g.0, &a, &b, &edge, 1) },
        "cuGraphAddDependencies",
    )?;
    g.instantiate(0)
}

/// Whether allocation and free nodes instantiate.
///
/// # Safety
/// A context must be current on this thread on device `ordinal`.
pub(crate) unsafe fn trial_memory_nodes(ordinal: i32) -> Result<(), Failure> {
    let g = TrialGraph::new()?;
    // SAFETY: plain C struct; zero is a valid starting value.
    let mut p: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
    p.poolProps.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = ordinal;
    p.bytesize = 1 << 20;
    let mut alloc = std::ptr::null_mut();
    // SAFETY: g is live; p describes a 1 MiB device allocation.
    check(
        unsafe { sys::cuGraphAddMemAllocNode(&mut alloc, g.0, std::ptr::null(), 0, &mut p) },
        "cuGraphAddMemAllocNode",
    )?;
    let mut free = std::ptr::null_mut();
    // SAFETY: p.dptr was filled by the alloc node; the free node depends on it.
    check(
        unsafe { sys::cuGraphAddMemFreeNode(&mut free, g.0, &alloc, 1, p.dptr) },
        "cuGraphAddMemFreeNode",
    )?;
    g.instantiate(0)
}
