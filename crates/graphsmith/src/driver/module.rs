//! Driver calls on libraries (modules), kernels and functions.

use std::ffi::{c_void, CStr};

use cudarc::driver::sys;

use super::{check, Failure};

/// Parameters read per function at most.
const MAX_PARAMS: usize = 4096;

/// Loads an image as a library (`cuLibraryLoadData`, as the CUDA runtime loads `<<<>>>`
/// kernels), with no options.
///
/// # Safety
/// A context must be current; `image` must be a whole cubin, fatbin or NUL-terminated PTX
/// image (the driver takes only a pointer and reads what the image says it holds).
pub(crate) unsafe fn library_load(image: &[u8]) -> Result<sys::CUlibrary, Failure> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: forwarded contract; image is alive for the call (the driver copies what it
    // keeps); no options are passed (null arrays with a count of 0).
    check(
        unsafe {
            sys::cuLibraryLoadData(
                &mut raw,
                image.as_ptr() as *const c_void,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        },
        "cuLibraryLoadData",
    )?;
    Ok(raw)
}

/// Unloads a library (`cuLibraryUnload`).
///
/// # Safety
/// `lib` must come from [`library_load`], be unloaded once, and no work may still use it.
pub(crate) unsafe fn library_unload(lib: sys::CUlibrary) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuLibraryUnload(lib) }, "cuLibraryUnload")
}

/// A library's kernel by name (`cuLibraryGetKernel`).
///
/// # Safety
/// `lib` must be a loaded library.
pub(crate) unsafe fn library_kernel(
    lib: sys::CUlibrary,
    name: &CStr,
) -> Result<sys::CUkernel, Failure> {
    let mut kern = std::ptr::null_mut();
    // SAFETY: lib is loaded (contract); name is NUL-terminated; kern is a local.
    check(
        unsafe { sys::cuLibraryGetKernel(&mut kern, lib, name.as_ptr()) },
        "cuLibraryGetKernel",
    )?;
    Ok(kern)
}

/// A library kernel's function in the current context (`cuKernelGetFunction`).
///
/// # Safety
/// `kern` must be a live library kernel; a context must be current.
pub(crate) unsafe fn kernel_function(kern: sys::CUkernel) -> Result<sys::CUfunction, Failure> {
    let mut func = std::ptr::null_mut();
    // SAFETY: forwarded contract; func is a local.
    check(
        unsafe { sys::cuKernelGetFunction(&mut func, kern) },
        "cuKernelGetFunction",
    )?;
    Ok(func)
}

/// The thread block cluster shape compiled into `func` (`__cluster_dims__`: the
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*` attributes), `None` when it requires none.
///
/// # Safety
/// `func` must be a live function.
pub(crate) unsafe fn required_cluster(
    func: sys::CUfunction,
) -> Result<Option<graphsmith_model::Dim3>, Failure> {
    use sys::CUfunction_attribute as A;
    let get = |attr| {
        let mut v = 0i32;
        // SAFETY: func is live (contract); v is a local.
        check(
            unsafe { sys::cuFuncGetAttribute(&mut v, attr, func) },
            "cuFuncGetAttribute",
        )
        .map(|()| v.max(0) as u32)
    };
    // One call for the usual kernel, compiled without a cluster shape (width 0).
    let width = get(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)?;
    if width == 0 {
        return Ok(None);
    }
    let height = get(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT)?;
    let depth = get(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH)?;
    Ok(Some(graphsmith_model::Dim3::new(
        width,
        height.max(1),
        depth.max(1),
    )))
}

/// (offset, size) of each parameter of `func` (`cuFuncGetParamInfo` until the driver says there
/// are no more).
///
/// # Safety
/// `func` must be a live function.
pub(crate) unsafe fn param_layout(func: sys::CUfunction) -> Result<Vec<(usize, usize)>, Failure> {
    let mut params = Vec::new();
    while params.len() <= MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: func is live (contract); offset and size are locals.
        let rc = unsafe { sys::cuFuncGetParamInfo(func, params.len(), &mut offset, &mut size) };
        match rc {
            sys::CUresult::CUDA_SUCCESS => params.push((offset, size)),
            sys::CUresult::CUDA_ERROR_INVALID_VALUE => break,
            other => check(other, "cuFuncGetParamInfo")?,
        }
    }
    Ok(params)
}
