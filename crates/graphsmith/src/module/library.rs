//! Modules: images loaded as libraries (`cuLibraryLoadData`, as the CUDA runtime loads `<<<>>>`
//! kernels), and their kernels looked up by name.

use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::module::{Kernel, KernelFn};

/// A module is loaded as a library (`cuLibraryLoadData`, context-independent loading, as the
/// CUDA runtime loads `<<<>>>` kernels), and graph kernel nodes name the library kernel (`kern`)
/// as the runtime's do. On the H200 this made graphsmith's per-node updates, whole-graph updates
/// and instantiation of a 1,000-kernel chain 35%, 27% and 28% cheaper than with module functions
/// (`bash bench/update_bench.sh`, runs before and after, plain C++ unchanged between them).
pub(crate) struct ModuleInner {
    raw: sys::CUlibrary,
    label: String,
    pub(crate) ctx: Context,
}

// SAFETY: a CUlibrary handle may be used from any thread once loaded; graphsmith only reads it.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        // Kernels, graphs and executables that use its kernels hold an Arc<ModuleInner>, so none
        // outlives it; it is unloaded once (swapped out above).
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Module, &self.label),
            crate::context::Destroy::Library(raw),
        );
    }
}

/// A loaded module (PTX or cubin). Cheap to clone.
#[derive(Clone)]
pub struct Module {
    pub(crate) inner: Arc<ModuleInner>,
}

impl Context {
    /// Loads a module from PTX text (`cuLibraryLoadData`; the driver compiles it for the
    /// device).
    #[track_caller]
    pub fn load_ptx(&self, label: &str, ptx: &str) -> Result<Module> {
        let at = SourceLine::caller();
        let image = CString::new(ptx).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput {
                    reason: "PTX text contains a NUL byte".into(),
                },
                ObjectRef::new(ObjectKind::Module, label),
                "Context::load_ptx",
                at,
            )
        })?;
        self.load_library(label, image.as_bytes_with_nul(), "Context::load_ptx", at)
    }

    /// Loads a module from a cubin or fatbin image, or NUL-terminated PTX
    /// (`cuLibraryLoadData`). The image is checked first: an image that is none of these, or is
    /// truncated (its headers reach past the slice), is refused here, because the driver would
    /// read past it. A cubin runs only on devices of the architecture it was built for. With
    /// CUDA's lazy loading (the default), other faults in the code surface when a kernel is
    /// first looked up ([`Module::kernel`], naming the kernel and the driver's code).
    #[track_caller]
    pub fn load_image(&self, label: &str, image: &[u8]) -> Result<Module> {
        let at = SourceLine::caller();
        if let Err(reason) = crate::module::classify(image) {
            return Err(Error::new(
                ErrorKind::InvalidInput { reason },
                ObjectRef::new(ObjectKind::Module, label),
                "Context::load_image",
                at,
            ));
        }
        self.load_library(label, image, "Context::load_image", at)
    }

    fn load_library(
        &self,
        label: &str,
        image: &[u8],
        op: &'static str,
        at: SourceLine,
    ) -> Result<Module> {
        let me = ObjectRef::new(ObjectKind::Module, label);
        let fail = |f: Failure| f.on(me.clone(), op, at);
        self.bind().map_err(fail)?;
        // SAFETY: the context is current (bind above); the image was checked by image.rs (a PTX
        // image is NUL-terminated, a cubin or fatbin carries its own size).
        let raw = unsafe { driver::library_load(image) }.map_err(fail)?;
        Ok(Module {
            inner: Arc::new(ModuleInner {
                raw,
                label: label.to_string(),
                ctx: self.clone(),
            }),
        })
    }

    /// graphsmith's own test and benchmark kernels (`kernels/graphsmith_kernels.cu`, shipped
    /// as PTX).
    #[track_caller]
    pub fn builtin_kernels(&self) -> Result<Module> {
        self.load_ptx("graphsmith-kernels", crate::BUILTIN_PTX)
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module '{}'", self.inner.label)
    }
}

impl Module {
    /// The module's label.
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// Looks up a kernel by its symbol name and reads its parameter layout.
    #[track_caller]
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let at = SourceLine::caller();
        let me = ObjectRef::new(ObjectKind::Kernel, name);
        let c_name = CString::new(name).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput {
                    reason: "kernel name contains a NUL byte".into(),
                },
                me.clone(),
                "Module::kernel",
                at,
            )
        })?;
        let fail = |f: Failure| f.on(me.clone(), "Module::kernel", at);
        self.inner.ctx.bind().map_err(fail)?;
        // SAFETY: the library is loaded (kept alive by self).
        let kern = unsafe { driver::library_kernel(self.inner.raw, &c_name) }.map_err(fail)?;
        // SAFETY: kern is a live kernel of the loaded library; the context is current.
        let func = unsafe { driver::kernel_function(kern) }.map_err(fail)?;
        // SAFETY: func was just returned by the driver for a loaded module.
        let params = unsafe { driver::param_layout(func) }.map_err(fail)?;
        // SAFETY: as above.
        let cluster = unsafe { driver::required_cluster(func) }.map_err(fail)?;
        Ok(Kernel {
            function: KernelFn {
                func,
                kern,
                layout: Arc::new(params),
                programmatic: false,
                triggers_after_wait: false,
                cluster,
            },
            name: name.to_string(),
            module: self.clone(),
            programmatic: false,
        })
    }
}
