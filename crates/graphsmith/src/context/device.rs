//! The CUDA context: one device's primary context, retained for as long as any graphsmith object
//! made from it lives.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::context::Records;
use crate::driver::{self, Failure};
use crate::error::{CudaCode, Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};

/// A failure inside `Drop`, kept with the object's label instead of being lost or panicking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropFailure {
    pub object: ObjectRef,
    pub call: &'static str,
    pub code: CudaCode,
}

/// Device limits read once, used to validate launches before the driver sees them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub max_threads_per_block: u32,
    pub max_block: [u32; 3],
    pub max_grid: [u32; 3],
    /// (major, minor): programmatic dependent launch needs 9.0 or newer.
    pub compute_capability: (i32, i32),
}

pub(crate) struct ContextInner {
    pub ordinal: usize,
    pub device: sys::CUdevice,
    pub raw: sys::CUcontext,
    /// The driver's unique id of the context (`cuCtxGetId`); a reset primary context that is
    /// retained again gets a new one, so a changed id means ours is gone.
    pub unique_id: u64,
    pub label: String,
    pub limits: Limits,
    drop_failures: Mutex<Vec<DropFailure>>,
    /// Number of graphsmith captures running in this context; eager operations look up their
    /// capture only while this is non-zero, so eager work pays nothing for the journal.
    pub active_captures: AtomicUsize,
    /// Objects dropped while a capture ran, destroyed when the last capture ends
    /// (`deferred.rs`). A deferred executable holds streams that hold this context: one
    /// left behind by a capture that never ended keeps the context alive (a leak, never a use
    /// after free).
    pub deferred: Mutex<Vec<crate::context::Deferred>>,
    /// Running captures by the driver's capture id.
    pub captures: Mutex<Records>,
    /// The launch log, while launches are recorded (`launch_log.rs`); `logging` says so
    /// without the lock.
    pub launch_log: Mutex<Option<crate::context::LaunchLog>>,
    pub logging: AtomicBool,
}

// SAFETY: CUcontext and CUdevice are plain handles; the driver API is thread-safe for contexts
// (any thread may make a context current), and the mutable state above is behind Mutex/atomics.
unsafe impl Send for ContextInner {}
// SAFETY: as above; no method hands out the raw handle for mutation.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // Objects whose destruction was deferred behind a capture that never ended properly.
        let pending = std::mem::take(self.deferred.get_mut().unwrap_or_else(|p| p.into_inner()));
        for work in pending {
            if let crate::context::Deferred::Destroy(_, what) = work {
                // SAFETY: the context is still retained here, so it is live.
                let _ = unsafe { driver::set_current_context(self.raw) };
                let _ = what.run();
            }
        }
        // SAFETY: the primary context of `device` was retained exactly once in Context::new.
        let released = unsafe { driver::primary_context_release(self.device) };
        // Nothing is left to record the failure in: the context is the log. Ignore, never panic.
        let _ = released;
    }
}

/// One GPU's CUDA context. Cheap to clone (shared ownership); every stream, buffer, module,
/// graph and executable made from it keeps it alive.
///
/// Thread safety: `Context` is `Send + Sync`. Each operation makes the context current on the
/// calling thread first, so objects may be used from any thread.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Context '{}'", self.inner.label)
    }
}

/// Whether a CUDA driver library can be loaded and initialised and has at least one device.
/// Never panics; false on a machine without a GPU.
pub fn gpu_available() -> bool {
    driver_ready().is_ok()
}

/// Loads and initialises the driver, or says why it cannot.
pub(crate) fn driver_ready() -> std::result::Result<(), String> {
    if !driver::library_present() {
        return Err("libcuda.so could not be loaded (no NVIDIA driver installed)".into());
    }
    let said = |f: Failure| format!("{} returned {}", f.call, f.code);
    // SAFETY: the library is present (checked above), so symbol lookup cannot panic for cuInit.
    unsafe { driver::init() }.map_err(said)?;
    // SAFETY: cuInit succeeded.
    let count = unsafe { driver::device_count() }.map_err(said)?;
    if count == 0 {
        return Err("the driver reports no CUDA device".into());
    }
    // SAFETY: cuInit succeeded.
    let version = unsafe { driver::driver_version() }.map_err(said)?;
    // Older drivers lack calls graphsmith makes (cuFuncGetParamInfo, cuLibraryLoadData, ...),
    // which the loader would only discover, with a panic, when first called.
    if version < MIN_DRIVER_VERSION {
        return Err(format!(
            "the driver supports CUDA {}.{}; graphsmith needs a driver for CUDA {}.{} or newer",
            version / 1000,
            version % 1000 / 10,
            MIN_DRIVER_VERSION / 1000,
            MIN_DRIVER_VERSION % 1000 / 10
        ));
    }
    Ok(())
}

/// The oldest driver API graphsmith runs on: CUDA 12.4 (`cuFuncGetParamInfo`).
const MIN_DRIVER_VERSION: i32 = 12040;

fn attribute(device: sys::CUdevice, attr: sys::CUdevice_attribute) -> Result<i32, Failure> {
    // SAFETY: device came from cuDeviceGet.
    unsafe { driver::device_attribute(device, attr) }
}

impl Context {
    /// Retains the primary context of device `ordinal`.
    #[track_caller]
    pub fn new(ordinal: usize) -> Result<Context> {
        let at = SourceLine::caller();
        let label = format!("gpu{ordinal}");
        let me = ObjectRef::new(ObjectKind::Context, &label);
        driver_ready().map_err(|reason| {
            Error::new(
                ErrorKind::NoDriver { reason },
                me.clone(),
                "Context::new",
                at,
            )
        })?;
        let fail = |f: Failure| f.on(me.clone(), "Context::new", at);
        // SAFETY: the driver is initialised (driver_ready).
        let device = unsafe { driver::device(ordinal as i32) }.map_err(fail)?;
        use sys::CUdevice_attribute as A;
        let limits = Limits {
            max_threads_per_block: attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
                .map_err(fail)? as u32,
            max_block: [
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X).map_err(fail)? as u32,
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y).map_err(fail)? as u32,
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z).map_err(fail)? as u32,
            ],
            max_grid: [
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X).map_err(fail)? as u32,
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y).map_err(fail)? as u32,
                attribute(device, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z).map_err(fail)? as u32,
            ],
            compute_capability: (
                attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(fail)?,
                attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(fail)?,
            ),
        };
        // SAFETY: device is valid; the retain is balanced by the release in ContextInner::drop.
        let raw = unsafe { driver::primary_context_retain(device) }.map_err(fail)?;
        // SAFETY: raw was just retained and is live.
        let unique_id = unsafe { driver::context_id(raw) }.map_err(fail)?;
        let ctx = Context {
            inner: Arc::new(ContextInner {
                ordinal,
                device,
                raw,
                unique_id,
                label,
                limits,
                drop_failures: Mutex::new(Vec::new()),
                active_captures: AtomicUsize::new(0),
                deferred: Mutex::new(Vec::new()),
                captures: Mutex::new(Records::default()),
                launch_log: Mutex::new(None),
                logging: AtomicBool::new(false),
            }),
        };
        ctx.bind().map_err(fail)?;
        Ok(ctx)
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// The context's label (`gpu0`, ...).
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// The raw driver context, for interop. graphsmith keeps ownership.
    pub fn raw(&self) -> sys::CUcontext {
        self.inner.raw
    }

    /// The raw device handle.
    pub fn device(&self) -> sys::CUdevice {
        self.inner.device
    }

    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Context, &self.inner.label)
    }

    /// Makes this context current on the calling thread (a no-op when it already is).
    ///
    /// First checks that the context still exists: other code may have reset the device
    /// (`cudaDeviceReset`, `cuDevicePrimaryCtxReset`), which destroys every handle made in it,
    /// and using such a handle is undefined behaviour in the driver. A gone context is reported
    /// as `CUDA_ERROR_CONTEXT_IS_DESTROYED` from the check that found it.
    pub(crate) fn bind(&self) -> Result<(), Failure> {
        // Fast path, one driver call: the current context is ours and alive (a destroyed or
        // replaced context has no id, or another one).
        // SAFETY: a null context asks for the current context's id.
        if unsafe { driver::context_id(std::ptr::null_mut()) }.ok() == Some(self.inner.unique_id) {
            return Ok(());
        }
        self.bind_checked()
    }

    /// [`Context::bind`] the long way: checks that the primary context is still active and
    /// still ours, then makes it current.
    fn bind_checked(&self) -> Result<(), Failure> {
        // SAFETY: device is a valid device handle (from cuDeviceGet).
        let active = unsafe { driver::primary_context_active(self.inner.device) }?;
        let gone = || Failure {
            call: "context check (primary context no longer active)",
            code: driver::context_destroyed(),
        };
        if !active {
            return Err(gone());
        }
        // SAFETY: the device's primary context is active, so its handle is live.
        let id = unsafe { driver::context_id(self.inner.raw) }.map_err(|_| gone())?;
        if id != self.inner.unique_id {
            return Err(gone());
        }
        // SAFETY: the driver is initialised (a context was retained).
        let current = unsafe { driver::current_context() }?;
        if current != self.inner.raw {
            // SAFETY: raw is a retained primary context, valid until ContextInner drops.
            unsafe { driver::set_current_context(self.inner.raw) }?;
        }
        Ok(())
    }

    /// Waits for all work in this context.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Context::synchronize", at);
        self.bind().map_err(fail)?;
        // SAFETY: the context is current on this thread (bind).
        unsafe { driver::synchronize_context() }.map_err(fail)?;
        if let Some(log) = self.launch_log() {
            log.push(graphsmith_analysis::launch_order::Op::SyncContext {
                line: Some(at.to_string()),
            });
        }
        Ok(())
    }

    /// Free and total device memory in bytes (`cuMemGetInfo`).
    #[track_caller]
    pub fn memory_info(&self) -> Result<(usize, usize)> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Context::memory_info", at);
        self.bind().map_err(fail)?;
        // SAFETY: the context is current on this thread (bind).
        unsafe { driver::memory_info() }.map_err(fail)
    }

    /// Failures that happened inside `Drop` of objects of this context, oldest first. Drop never
    /// panics; this is where its failures go, each with the object's kind and label.
    pub fn drop_failures(&self) -> Vec<DropFailure> {
        match self.inner.drop_failures.lock() {
            Ok(list) => list.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Records a failure from a `Drop`.
    pub(crate) fn record_drop_failure(&self, object: ObjectRef, failure: Failure) {
        let entry = DropFailure {
            object,
            call: failure.call,
            code: failure.code,
        };
        match self.inner.drop_failures.lock() {
            Ok(mut list) => list.push(entry),
            Err(poisoned) => poisoned.into_inner().push(entry),
        }
    }

    /// Runs a driver call in `Drop`: binds the context, and records instead of panicking.
    pub(crate) fn drop_call(
        &self,
        object: impl FnOnce() -> ObjectRef,
        call: impl FnOnce() -> Result<(), Failure>,
    ) {
        if let Err(failure) = self.bind().and_then(|_| call()) {
            self.record_drop_failure(object(), failure);
        }
    }

    pub(crate) fn captures_active(&self) -> bool {
        self.inner.active_captures.load(Ordering::Acquire) > 0
    }
}
