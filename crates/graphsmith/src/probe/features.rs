//! The feature trials behind [`crate::probe::probe`]: each builds a tiny graph with the feature,
//! instantiates it, and cleans up, reporting the driver's answer.

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{check, Failure};
use crate::error::{Result, SourceLine};
use crate::module::LaunchConfig;
use crate::probe::Feature;

/// A graph destroyed on drop, for trials.
struct TrialGraph(sys::CUgraph);

impl TrialGraph {
    fn new() -> std::result::Result<Self, Failure> {
        let mut g = std::ptr::null_mut();
        // SAFETY: the context is current (bound by the caller); g is a valid out pointer.
        check(unsafe { sys::cuGraphCreate(&mut g, 0) }, "cuGraphCreate")?;
        Ok(Self(g))
    }
    fn instantiate(&self, flags: u64) -> std::result::Result<(), Failure> {
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

fn kernel_node(
    g: &TrialGraph,
    func: sys::CUfunction,
    deps: &[sys::CUgraphNode],
) -> std::result::Result<sys::CUgraphNode, Failure> {
    let cfg = LaunchConfig::for_elements(1);
    let params = sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: cfg.grid.x,
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

fn exec_update() -> std::result::Result<(), Failure> {
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

fn conditional(
    ctx: &Context,
    kind: sys::CUgraphConditionalNodeType,
) -> std::result::Result<(), Failure> {
    let g = TrialGraph::new()?;
    let mut handle = 0;
    // SAFETY: g and the context are live.
    check(
        unsafe { sys::cuGraphConditionalHandleCreate(&mut handle, g.0, ctx.raw(), 0, 0) },
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
        ctx: ctx.raw(),
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

fn device_launch(func: sys::CUfunction) -> std::result::Result<(), Failure> {
    let g = TrialGraph::new()?;
    kernel_node(&g, func, &[])?;
    g.instantiate(sys::CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH.0 as u64)
}

fn programmatic_edge(func: sys::CUfunction) -> std::result::Result<(), Failure> {
    let g = TrialGraph::new()?;
    let a = kernel_node(&g, func, &[])?;
    let b = kernel_node(&g, func, &[])?;
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

fn memory_nodes(ctx: &Context) -> std::result::Result<(), Failure> {
    let g = TrialGraph::new()?;
    // SAFETY: plain C struct; zero is a valid starting value.
    let mut p: sys::CUDA_MEM_ALLOC_NODE_PARAMS = unsafe { std::mem::zeroed() };
    p.poolProps.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = ctx.ordinal() as i32;
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

/// Runs every trial.
#[track_caller]
pub(crate) fn all(ctx: &Context) -> Result<Vec<Feature>> {
    let at = SourceLine::caller();
    ctx.bind().map_err(|f| f.on(ctx.object(), "probe", at))?;
    let module = ctx.builtin_kernels()?;
    let empty = module.kernel("gs_empty")?;
    use sys::CUgraphConditionalNodeType as C;
    Ok(vec![
        Feature::from_trial(
            "exec update",
            "cuGraphExecUpdate on an instantiated graph",
            exec_update(),
        ),
        Feature::from_trial(
            "conditional IF",
            "IF node added and instantiated",
            conditional(ctx, C::CU_GRAPH_COND_TYPE_IF),
        ),
        Feature::from_trial(
            "conditional WHILE",
            "WHILE node added and instantiated",
            conditional(ctx, C::CU_GRAPH_COND_TYPE_WHILE),
        ),
        Feature::from_trial(
            "conditional SWITCH",
            "SWITCH node added and instantiated",
            conditional(ctx, C::CU_GRAPH_COND_TYPE_SWITCH),
        ),
        Feature::from_trial(
            "device launch",
            "instantiated with DEVICE_LAUNCH",
            device_launch(empty.func),
        ),
        Feature::from_trial(
            "programmatic edges",
            "programmatic edge between two kernels",
            programmatic_edge(empty.func),
        ),
        Feature::from_trial(
            "memory nodes",
            "alloc and free nodes instantiated",
            memory_nodes(ctx),
        ),
    ])
}
