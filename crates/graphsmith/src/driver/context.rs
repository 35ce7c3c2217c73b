//! Driver calls on the driver itself, devices and contexts.

use cudarc::driver::sys;

use super::{check, code, Failure};

/// Whether `libcuda` can be opened (no symbol is called).
pub(crate) fn library_present() -> bool {
    // SAFETY: only tries to open the library; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// `cuInit(0)`.
///
/// # Safety
/// The driver library must be present ([`library_present`]): the loader panics on a missing
/// symbol.
pub(crate) unsafe fn init() -> Result<(), Failure> {
    // SAFETY: the library is present (contract).
    check(unsafe { sys::cuInit(0) }, "cuInit")
}

/// The number of devices (`cuDeviceGetCount`).
///
/// # Safety
/// The driver must be initialised ([`init`]).
pub(crate) unsafe fn device_count() -> Result<i32, Failure> {
    let mut count = 0;
    // SAFETY: the driver is initialised (contract); count is a local.
    check(
        unsafe { sys::cuDeviceGetCount(&mut count) },
        "cuDeviceGetCount",
    )?;
    Ok(count)
}

/// The driver's CUDA version, e.g. 13000 (`cuDriverGetVersion`).
///
/// # Safety
/// The driver must be initialised ([`init`]).
pub(crate) unsafe fn driver_version() -> Result<i32, Failure> {
    let mut version = 0;
    // SAFETY: the driver is initialised (contract); version is a local.
    check(
        unsafe { sys::cuDriverGetVersion(&mut version) },
        "cuDriverGetVersion",
    )?;
    Ok(version)
}

/// The device with this ordinal (`cuDeviceGet`).
///
/// # Safety
/// The driver must be initialised ([`init`]).
pub(crate) unsafe fn device(ordinal: i32) -> Result<sys::CUdevice, Failure> {
    let mut device = 0;
    // SAFETY: the driver is initialised (contract); device is a local.
    check(
        unsafe { sys::cuDeviceGet(&mut device, ordinal) },
        "cuDeviceGet",
    )?;
    Ok(device)
}

/// One attribute of a device (`cuDeviceGetAttribute`).
///
/// # Safety
/// `device` must come from [`device`].
pub(crate) unsafe fn device_attribute(
    device: sys::CUdevice,
    attr: sys::CUdevice_attribute,
) -> Result<i32, Failure> {
    let mut value = 0;
    // SAFETY: device is valid (contract); value is a local.
    check(
        unsafe { sys::cuDeviceGetAttribute(&mut value, attr, device) },
        "cuDeviceGetAttribute",
    )?;
    Ok(value)
}

/// Retains the device's primary context (`cuDevicePrimaryCtxRetain`).
///
/// # Safety
/// `device` must come from [`device`]; each retain must be balanced by one
/// [`primary_context_release`].
pub(crate) unsafe fn primary_context_retain(
    device: sys::CUdevice,
) -> Result<sys::CUcontext, Failure> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: device is valid (contract); raw is a local.
    check(
        unsafe { sys::cuDevicePrimaryCtxRetain(&mut raw, device) },
        "cuDevicePrimaryCtxRetain",
    )?;
    Ok(raw)
}

/// Releases a retain of the device's primary context (`cuDevicePrimaryCtxRelease`).
///
/// # Safety
/// Balances exactly one [`primary_context_retain`] of `device`.
pub(crate) unsafe fn primary_context_release(device: sys::CUdevice) -> Result<(), Failure> {
    // SAFETY: balances one retain (contract).
    check(
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) },
        "cuDevicePrimaryCtxRelease",
    )
}

/// Whether the device's primary context is active (`cuDevicePrimaryCtxGetState`).
///
/// # Safety
/// `device` must come from [`device`].
pub(crate) unsafe fn primary_context_active(device: sys::CUdevice) -> Result<bool, Failure> {
    let (mut flags, mut active) = (0u32, 0i32);
    // SAFETY: device is valid (contract); both are locals.
    check(
        unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) },
        "cuDevicePrimaryCtxGetState",
    )?;
    Ok(active != 0)
}

/// The unique id of a context (`cuCtxGetId`); a null context asks for the current one's.
///
/// # Safety
/// `ctx` must be null or a live context.
pub(crate) unsafe fn context_id(ctx: sys::CUcontext) -> Result<u64, Failure> {
    let mut id = 0u64;
    // SAFETY: ctx is null or live (contract); id is a local.
    check(unsafe { sys::cuCtxGetId(ctx, &mut id) }, "cuCtxGetId")?;
    Ok(id)
}

/// The context current on this thread (`cuCtxGetCurrent`), null when none.
///
/// # Safety
/// The driver must be initialised.
pub(crate) unsafe fn current_context() -> Result<sys::CUcontext, Failure> {
    let mut current = std::ptr::null_mut();
    // SAFETY: the driver is initialised (contract); current is a local.
    check(
        unsafe { sys::cuCtxGetCurrent(&mut current) },
        "cuCtxGetCurrent",
    )?;
    Ok(current)
}

/// Makes `ctx` current on this thread (`cuCtxSetCurrent`).
///
/// # Safety
/// `ctx` must be a live (retained) context.
pub(crate) unsafe fn set_current_context(ctx: sys::CUcontext) -> Result<(), Failure> {
    // SAFETY: ctx is live (contract).
    check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")
}

/// Waits for all work of the current context (`cuCtxSynchronize`).
///
/// # Safety
/// A context must be current on this thread.
pub(crate) unsafe fn synchronize_context() -> Result<(), Failure> {
    // SAFETY: a context is current (contract).
    check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
}

/// Free and total device memory of the current context (`cuMemGetInfo`).
///
/// # Safety
/// A context must be current on this thread.
pub(crate) unsafe fn memory_info() -> Result<(usize, usize), Failure> {
    let (mut free, mut total) = (0, 0);
    // SAFETY: a context is current (contract); both are locals.
    check(
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        "cuMemGetInfo",
    )?;
    Ok((free, total))
}

/// The code a context check reports when the context is gone.
pub(crate) fn context_destroyed() -> crate::error::CudaCode {
    code(sys::CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED)
}

/// A device's name (`cuDeviceGetName`).
///
/// # Safety
/// `device` must come from [`device`].
pub(crate) unsafe fn device_name(device: sys::CUdevice) -> Result<String, Failure> {
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: device is valid (contract); name has room for 256 bytes, which the driver fills
    // with a NUL-terminated string.
    check(
        unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, device) },
        "cuDeviceGetName",
    )?;
    // Never read past the buffer, whatever the driver wrote.
    name[255] = 0;
    // SAFETY: name is NUL-terminated within the buffer (the last byte is 0).
    Ok(unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}
