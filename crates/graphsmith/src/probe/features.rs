//! The feature trials behind [`crate::probe::probe`]: each builds a tiny graph with the feature,
//! instantiates it, and cleans up, reporting the driver's answer.

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver;
use crate::error::{Result, SourceLine};
use crate::probe::Feature;

/// Runs every trial.
#[track_caller]
pub(crate) fn all(ctx: &Context) -> Result<Vec<Feature>> {
    let at = SourceLine::caller();
    ctx.bind().map_err(|f| f.on(ctx.object(), "probe", at))?;
    let module = ctx.builtin_kernels()?;
    let empty = module.kernel("gs_empty")?;
    use sys::CUgraphConditionalNodeType as C;
    let (raw, func, ordinal) = (ctx.raw(), empty.function.func, ctx.ordinal() as i32);
    // SAFETY (each trial below): the context is current (bound above) and is `raw`; `func` is
    // the parameterless gs_empty, kept loaded by `module` for the whole function; `ordinal` is
    // the context's device.
    let update = unsafe { driver::trial_exec_update() };
    // SAFETY: as above.
    let cond_if = unsafe { driver::trial_conditional(raw, C::CU_GRAPH_COND_TYPE_IF) };
    // SAFETY: as above.
    let cond_while = unsafe { driver::trial_conditional(raw, C::CU_GRAPH_COND_TYPE_WHILE) };
    // SAFETY: as above.
    let cond_switch = unsafe { driver::trial_conditional(raw, C::CU_GRAPH_COND_TYPE_SWITCH) };
    // SAFETY: as above.
    let device_launch = unsafe { driver::trial_device_launch(func) };
    // SAFETY: as above.
    let programmatic = unsafe { driver::trial_programmatic_edge(func) };
    // SAFETY: as above.
    let memory = unsafe { driver::trial_memory_nodes(ordinal) };
    Ok(vec![
        Feature::from_trial(
            "exec update",
            "cuGraphExecUpdate on an instantiated graph",
            update,
        ),
        Feature::from_trial("conditional IF", "IF node added and instantiated", cond_if),
        Feature::from_trial(
            "conditional WHILE",
            "WHILE node added and instantiated",
            cond_while,
        ),
        Feature::from_trial(
            "conditional SWITCH",
            "SWITCH node added and instantiated",
            cond_switch,
        ),
        Feature::from_trial(
            "device launch",
            "instantiated with DEVICE_LAUNCH",
            device_launch,
        ),
        Feature::from_trial(
            "programmatic edges",
            "programmatic edge between two kernels",
            programmatic,
        ),
        Feature::from_trial("memory nodes", "alloc and free nodes instantiated", memory),
    ])
}
