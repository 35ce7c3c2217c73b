//! Modules, kernels, launch geometry and kernel arguments that record what they touch.

use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::sync::Arc;

use smallvec::SmallVec;

use cudarc::driver::sys;
use graphsmith_model::{Access, AccessMode, Dim3};

use crate::context::Keep;
use crate::context::{Context, Limits};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::memory::{Allocation, DeviceBuffer, Element, View, ViewMut};

/// A module is loaded as a library (`cuLibraryLoadData`, context-independent loading, as the
/// CUDA runtime loads `<<<>>>` kernels), and graph kernel nodes name the library kernel (`kern`)
/// as the runtime's do. On the H200 this made graphsmith's per-node updates, whole-graph updates
/// and instantiation of a 1,000-kernel chain 35%, 27% and 28% cheaper than with module functions
/// (`bash bench/update_bench.sh`, runs before and after, plain C++ unchanged between them).
pub(crate) struct ModuleInner {
    raw: sys::CUlibrary,
    label: String,
    ctx: Context,
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

/// A kernel of a module, with its parameter layout read from the driver (`cuFuncGetParamInfo`).
#[derive(Clone)]
pub struct Kernel {
    /// The library kernel (what graph kernel nodes name), its function in the context (what
    /// stream launches use) and the (offset, size) of each parameter.
    pub(crate) function: KernelFn,
    pub(crate) name: String,
    pub(crate) module: Module,
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
        Ok(Kernel {
            function: KernelFn {
                func,
                kern,
                layout: Arc::new(params),
            },
            name: name.to_string(),
            module: self.clone(),
        })
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

/// Grid, block and dynamic shared memory of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element, 256 threads per block.
    pub fn for_elements(n: u32) -> Self {
        Self {
            grid: Dim3::linear(n.div_ceil(256).max(1)),
            block: Dim3::linear(256),
            shared_mem_bytes: 0,
        }
    }

    /// Checks the geometry against the device limits.
    pub(crate) fn validate(&self, limits: &Limits) -> std::result::Result<(), String> {
        let (g, b) = (self.grid, self.block);
        let axes = ["x", "y", "z"];
        for (i, (gv, bv)) in [(g.x, b.x), (g.y, b.y), (g.z, b.z)].into_iter().enumerate() {
            if gv == 0 || bv == 0 {
                return Err(format!(
                    "grid {g} and block {b} must be at least 1 on every axis"
                ));
            }
            if bv > limits.max_block[i] {
                return Err(format!(
                    "block {b}: {} = {bv} exceeds the device's limit of {}",
                    axes[i], limits.max_block[i]
                ));
            }
            if gv > limits.max_grid[i] {
                return Err(format!(
                    "grid {g}: {} = {gv} exceeds the device's limit of {}",
                    axes[i], limits.max_grid[i]
                ));
            }
        }
        if b.volume() > limits.max_threads_per_block as u64 {
            return Err(format!(
                "block {b} has {} threads; this device allows at most {} per block",
                b.volume(),
                limits.max_threads_per_block
            ));
        }
        Ok(())
    }
}

/// Kernel arguments, in order. Device buffers passed by shared borrow are recorded as reads,
/// by mutable borrow as writes; the borrow lasts as long as the `Args`, so a buffer cannot be
/// written elsewhere while a launch of it is being built.
///
/// ```ignore
/// let args = Args::new().arg(&x).arg(&mut y).arg(2.0f32).arg(n);
/// ```
///
/// All values live in one byte buffer, so building arguments costs a few allocations however
/// many there are; the accesses and keep-alives are only materialised when a graph needs them.
pub struct Args<'a> {
    data: ArgData,
    _borrows: PhantomData<&'a mut ()>,
}

/// One pointer per argument value, as the driver takes them (`void**`), handed out under a
/// borrow of the values: while this guard lives they can be neither moved nor changed, so the
/// pointers stay valid; the borrow ends with the guard, without a manual `drop`.
pub(crate) struct ArgPointers<'a> {
    pointers: SmallVec<[*mut c_void; 8]>,
    _values: PhantomData<&'a mut ArgData>,
}

impl ArgPointers<'_> {
    /// The `void**` array for the driver.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut *mut c_void {
        self.pointers.as_mut_ptr()
    }
    /// The pointers as a slice.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [*mut c_void] {
        &mut self.pointers
    }
    /// The pointers, in argument order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = *mut c_void> + '_ {
        self.pointers.iter().copied()
    }
}

/// What [`Args`] hold, without the borrows: kept by an executable after a per-node update.
pub(crate) struct ArgData {
    /// Every value, each starting at a multiple of 8 bytes.
    bytes: SmallVec<[u8; 64]>,
    /// (start, length) of each value in `bytes`.
    spans: SmallVec<[(usize, usize); 8]>,
    /// The buffers passed, with the range and direction of each.
    pub(crate) buffers: SmallVec<[BufferArg; 4]>,
}

/// A buffer argument: what it touches, and the allocation a graph must keep alive.
pub(crate) struct BufferArg {
    pub(crate) alloc: Arc<Allocation>,
    offset: u64,
    len: u64,
    mode: AccessMode,
}

impl Default for Args<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> Args<'a> {
    /// No arguments yet.
    pub fn new() -> Self {
        Self {
            data: ArgData {
                bytes: SmallVec::new(),
                spans: SmallVec::new(),
                buffers: SmallVec::new(),
            },
            _borrows: PhantomData,
        }
    }

    /// Appends one argument.
    #[allow(clippy::should_implement_trait)]
    pub fn arg(mut self, value: impl KernelArg<'a>) -> Self {
        value.push_to(&mut self);
        self
    }

    /// Appends one argument in place (what [`args!`](crate::args) uses: no move of `self`).
    pub fn push(&mut self, value: impl KernelArg<'a>) {
        value.push_to(self);
    }

    /// The values and buffers, for keeping after the borrows end.
    pub(crate) fn into_data(self) -> ArgData {
        self.data
    }

    pub(crate) fn push_bytes(&mut self, value: &[u8]) {
        self.data.push_bytes(value);
    }
    /// Number of arguments.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }
    /// The bytes of each argument, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.data.values()
    }
    /// See [`ArgData::pointers`].
    pub(crate) fn pointers(&mut self) -> ArgPointers<'_> {
        self.data.pointers()
    }
    /// The memory the arguments touch, for the model.
    pub(crate) fn take_accesses(&self) -> Vec<Access> {
        self.data.take_accesses()
    }
    /// The allocations a graph using these arguments must keep alive.
    pub(crate) fn keep(&self) -> Vec<Keep> {
        self.data.keep()
    }

    fn push_buffer<T: Element>(
        &mut self,
        buffer: &DeviceBuffer<T>,
        start: usize,
        len: usize,
        mode: AccessMode,
    ) {
        let size = std::mem::size_of::<T>() as u64;
        let offset = start as u64 * size;
        self.push_bytes(&(buffer.alloc.ptr + offset).to_le_bytes());
        self.data.buffers.push(BufferArg {
            alloc: buffer.alloc.clone(),
            offset,
            len: len as u64 * size,
            mode,
        });
    }
}

impl ArgData {
    /// Appends one value's bytes, 8-byte aligned within the buffer.
    pub(crate) fn push_bytes(&mut self, value: &[u8]) {
        const ZEROS: [u8; 8] = [0; 8];
        let len = self.bytes.len();
        let start = len.next_multiple_of(8);
        self.bytes.extend_from_slice(&ZEROS[..start - len]);
        self.bytes.extend_from_slice(value);
        self.spans.push((start, value.len()));
    }

    /// Number of arguments.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The bytes of each argument, in order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.spans
            .iter()
            .map(|&(start, len)| &self.bytes[start..start + len])
    }

    /// Pointers to each argument's bytes, as `cuLaunchKernel` and kernel nodes take them.
    /// The guard borrows `self` mutably, so the values can be neither moved nor changed while
    /// the pointers are in use.
    pub(crate) fn pointers(&mut self) -> ArgPointers<'_> {
        let base = self.bytes.as_mut_ptr();
        let pointers = self
            .spans
            .iter()
            // SAFETY: every span lies inside `bytes` (push_bytes), so each offset stays in
            // bounds of the one allocation.
            .map(|&(start, _)| unsafe { base.add(start) } as *mut c_void)
            .collect();
        ArgPointers {
            pointers,
            _values: PhantomData,
        }
    }

    /// The memory the arguments touch, for the model.
    pub(crate) fn take_accesses(&self) -> Vec<Access> {
        self.buffers
            .iter()
            .map(|b| Access {
                buffer: b.alloc.ptr,
                label: b.alloc.label.clone(),
                offset: b.offset,
                len: b.len,
                mode: b.mode,
            })
            .collect()
    }

    /// The allocations a graph using these arguments must keep alive.
    pub(crate) fn keep(&self) -> Vec<Keep> {
        self.buffers
            .iter()
            .map(|b| b.alloc.clone() as Keep)
            .collect()
    }
}

/// Something that can be passed to a kernel.
pub trait KernelArg<'a> {
    /// Appends the argument's bytes (and, for buffers, its access and keep-alive).
    fn push_to(self, args: &mut Args<'a>);
}

impl<'a, T: Element> KernelArg<'a> for &'a DeviceBuffer<T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self, 0, self.len(), AccessMode::Read);
    }
}

impl<'a, T: Element> KernelArg<'a> for &'a mut DeviceBuffer<T> {
    fn push_to(self, args: &mut Args<'a>) {
        let len = self.len();
        args.push_buffer(self, 0, len, AccessMode::Write);
    }
}

impl<'a, T: Element> KernelArg<'a> for View<'a, T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self.buffer, self.start, self.len, AccessMode::Read);
    }
}

impl<'a, T: Element> KernelArg<'a> for ViewMut<'a, T> {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_buffer(self.buffer, self.start, self.len, AccessMode::Write);
    }
}

macro_rules! scalar_args {
    ($($t:ty),*) => { $(
        impl<'a> KernelArg<'a> for $t {
            fn push_to(self, args: &mut Args<'a>) {
                args.push_bytes(&self.to_le_bytes());
            }
        }
    )* };
}
scalar_args!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

/// Builds [`Args`] from a list: `args![&x, &mut y, 2.0f32, n]`.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {{
        #[allow(unused_mut)]
        let mut args = $crate::Args::new();
        $(args.push($a);)*
        args
    }};
}
