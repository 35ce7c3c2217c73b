//! Kernels: a library kernel, its function in the context and its parameter layout, against
//! which arguments are checked before the driver sees them.

use std::sync::Arc;

use cudarc::driver::sys;

use crate::module::{Args, Module};

/// A kernel of a module, with its parameter layout read from the driver (`cuFuncGetParamInfo`).
#[derive(Clone)]
pub struct Kernel {
    /// The library kernel (what graph kernel nodes name), its function in the context (what
    /// stream launches use) and the (offset, size) of each parameter.
    pub(crate) function: KernelFn,
    pub(crate) name: String,
    pub(crate) module: Module,
    /// Opted into programmatic dependent launch ([`Kernel::programmatic`]).
    pub(crate) programmatic: bool,
}

/// A kernel node's kernel and the (offset, size) of each of its parameters: its function in the
/// context (`func`, always set) and, when the node names a library kernel, that kernel (`kern`).
/// Nodes are built naming the library kernel and updated naming the function: on the H200 the
/// driver applies an update that names the function faster (`bash bench/update_bench.sh`).
#[derive(Clone)]
pub(crate) struct KernelFn {
    pub func: sys::CUfunction,
    pub kern: sys::CUkernel,
    pub layout: Arc<Vec<(usize, usize)>>,
    /// The kernel opted into programmatic dependent launch ([`Kernel::programmatic`]); false
    /// for kernels read back from the driver, which cannot tell.
    pub programmatic: bool,
    /// The kernel lets its dependents start only after its own wait
    /// ([`Kernel::triggers_after_wait`]).
    pub triggers_after_wait: bool,
    /// The thread block cluster shape compiled into the kernel, if any.
    pub cluster: Option<graphsmith_model::Dim3>,
}

// SAFETY: CUfunction and CUkernel are immutable handles into a loaded module or library, usable
// from any thread; the graph that holds them keeps the module alive.
unsafe impl Send for KernelFn {}
// SAFETY: as above; nothing mutates it.
unsafe impl Sync for KernelFn {}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Kernel '{}' ({} params)",
            self.name,
            self.function.layout.len()
        )
    }
}

impl Kernel {
    /// The kernel's symbol name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The raw function handle in the kernel's context, for interop (the kernel keeps its
    /// module loaded).
    pub fn raw(&self) -> sys::CUfunction {
        self.function.func
    }
    /// The raw library kernel handle, for interop.
    pub fn raw_kernel(&self) -> sys::CUkernel {
        self.function.kern
    }
    /// Number of parameters the kernel takes.
    pub fn param_count(&self) -> usize {
        self.function.layout.len()
    }
    /// Opts this kernel into programmatic dependent launch (PDL, compute capability 9.0+).
    ///
    /// The kernel promises that it waits for the work before it (`griddepcontrol.wait`, or
    /// `cudaGridDependencySynchronize()` in CUDA C++) before it reads memory that work writes
    /// and before it writes memory that work reads or writes. It may read other memory (its
    /// weights, say) before the wait, and may let its own dependents start early
    /// (`griddepcontrol.launch_dependents`). A kernel that waits for nothing must still execute
    /// the wait before it finishes: the next kernel's wait counts on it.
    ///
    /// A launch of an opted-in kernel right after a launch of another opted-in kernel on the same
    /// stream then lets the driver start it early (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
    /// SERIALIZATION`); captured, the two become kernel nodes joined by a programmatic edge. After
    /// any other operation (a copy, a memset, an event, a library call, a kernel that did not
    /// opt in) the launch is an ordinary one. The hazard checker counts a programmatic edge as
    /// ordering only what the consumer does after its wait (docs/doctor.md).
    ///
    /// Fails with [`ErrorKind::FeatureUnsupported`](crate::ErrorKind::FeatureUnsupported) on a
    /// device below compute capability 9.0.
    #[track_caller]
    pub fn programmatic(mut self) -> crate::Result<Kernel> {
        let (major, minor) = self.module.inner.ctx.inner.limits.compute_capability;
        if major < 9 {
            return Err(crate::Error::new(
                crate::ErrorKind::FeatureUnsupported(Box::new(crate::error::Unsupported {
                    feature: "programmatic dependent launch",
                    needs: "compute capability 9.0 or newer",
                    found: format!("the device has {major}.{minor}"),
                })),
                crate::error::ObjectRef::new(crate::error::ObjectKind::Kernel, &self.name),
                "Kernel::programmatic",
                crate::SourceLine::caller(),
            ));
        }
        self.programmatic = true;
        self.function.programmatic = true;
        Ok(self)
    }
    /// Whether the kernel opted into programmatic dependent launch.
    pub fn is_programmatic(&self) -> bool {
        self.programmatic
    }
    /// States that this [programmatic](Kernel::programmatic) kernel lets its dependents start
    /// only after its own wait (`griddepcontrol.launch_dependents` after
    /// `griddepcontrol.wait`). Then everything before it has finished when a dependent starts,
    /// and the hazard checker orders what such a dependent reads before its own wait
    /// ([`BeforeWait`](crate::module::BeforeWait)) after all of that (docs/doctor.md, "A trigger
    /// after the wait"). Stating it of a kernel that triggers earlier hides real races.
    pub fn triggers_after_wait(mut self) -> Kernel {
        self.function.triggers_after_wait = true;
        self
    }
    /// Checks that `args` fit this kernel's parameters.
    pub(crate) fn check_args(&self, args: &Args<'_>) -> std::result::Result<(), String> {
        check_layout(&self.name, &self.function.layout, args)
    }
}

/// Checks `args` against a kernel's parameter layout: one argument per parameter, each of the
/// parameter's size.
pub(crate) fn check_layout(
    name: &str,
    layout: &[(usize, usize)],
    args: &Args<'_>,
) -> std::result::Result<(), String> {
    if args.len() != layout.len() {
        return Err(format!(
            "kernel '{name}' takes {} parameters, {} were given",
            layout.len(),
            args.len()
        ));
    }
    for (i, ((_, size), value)) in layout.iter().zip(args.values()).enumerate() {
        if *size != value.len() {
            return Err(format!(
                "parameter {i} of kernel '{name}' is {size} bytes, the argument is {} bytes",
                value.len()
            ));
        }
    }
    Ok(())
}
