//! Driver calls on device memory: allocation, copies, sets, address ranges.

use cudarc::driver::sys;

use super::{check, Failure};

/// Allocates `bytes` of device memory (`cuMemAlloc`).
///
/// # Safety
/// A context must be current on this thread.
pub(crate) unsafe fn mem_alloc(bytes: usize) -> Result<sys::CUdeviceptr, Failure> {
    let mut ptr = 0;
    // SAFETY: a context is current (contract); ptr is a local.
    check(unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) }, "cuMemAlloc")?;
    Ok(ptr)
}

/// Frees an allocation (`cuMemFree`).
///
/// # Safety
/// `ptr` must come from [`mem_alloc`] in the current context, be freed once, and no work may
/// still use it.
pub(crate) unsafe fn mem_free(ptr: sys::CUdeviceptr) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuMemFree_v2(ptr) }, "cuMemFree")
}

/// The allocation a device pointer lies in, as (base, size), when the driver knows it
/// (`cuMemGetAddressRange`); any value may be asked about.
pub(crate) fn allocation_of(ptr: u64) -> Option<(u64, u64)> {
    let (mut base, mut size) = (0, 0usize);
    // SAFETY: any pointer value may be asked about (the driver answers NOT_FOUND for foreign
    // ones); base and size are locals.
    let rc = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) };
    (rc == sys::CUresult::CUDA_SUCCESS).then_some((base, size as u64))
}

/// Sets `n` elements of 1, 2 or 4 bytes (`element`) at `ptr` to the low bits of `bits`
/// (`cuMemsetD8Async`, `cuMemsetD16Async`, `cuMemsetD32Async`).
///
/// # Safety
/// `ptr` must be a live allocation of at least `n * element` bytes and `stream` a live stream,
/// both of the current context.
pub(crate) unsafe fn memset_async(
    ptr: sys::CUdeviceptr,
    bits: u32,
    element: usize,
    n: usize,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    unsafe {
        match element {
            1 => check(
                sys::cuMemsetD8Async(ptr, bits as u8, n, stream),
                "cuMemsetD8Async",
            ),
            2 => check(
                sys::cuMemsetD16Async(ptr, bits as u16, n, stream),
                "cuMemsetD16Async",
            ),
            _ => check(
                sys::cuMemsetD32Async(ptr, bits, n, stream),
                "cuMemsetD32Async",
            ),
        }
    }
}

/// Copies `bytes` from device `src` to device `dst` on `stream` (`cuMemcpyDtoDAsync`).
///
/// # Safety
/// Both allocations must be live and hold `bytes` bytes; `stream` must be live.
pub(crate) unsafe fn copy_device_async(
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, stream) },
        "cuMemcpyDtoDAsync",
    )
}

/// Copies `bytes` from host `src` to device `dst` on `stream` (`cuMemcpyHtoDAsync`).
///
/// # Safety
/// `src` must hold `bytes` readable bytes until the copy has completed (synchronise the
/// stream before it may change); `dst` must be a live allocation of `bytes` bytes.
pub(crate) unsafe fn copy_to_device_async(
    dst: sys::CUdeviceptr,
    src: *const u8,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream) },
        "cuMemcpyHtoDAsync",
    )
}

/// Copies `bytes` from device `src` to host `dst` on `stream` (`cuMemcpyDtoHAsync`).
///
/// # Safety
/// `dst` must have room for `bytes` bytes until the copy has completed; `src` must be a live
/// allocation of `bytes` bytes.
pub(crate) unsafe fn copy_to_host_async(
    dst: *mut u8,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream) },
        "cuMemcpyDtoHAsync",
    )
}

/// Allocates `bytes` of page-locked host memory (`cuMemHostAlloc`, portable to every context),
/// which copies to and from the device can read and write asynchronously.
///
/// # Safety
/// A context must be current on this thread.
pub(crate) unsafe fn mem_host_alloc(bytes: usize) -> Result<*mut u8, Failure> {
    let mut ptr = std::ptr::null_mut();
    // SAFETY: a context is current (contract); ptr is a local.
    check(
        unsafe { sys::cuMemHostAlloc(&mut ptr, bytes, sys::CU_MEMHOSTALLOC_PORTABLE) },
        "cuMemHostAlloc",
    )?;
    Ok(ptr.cast())
}

/// Frees page-locked host memory (`cuMemFreeHost`).
///
/// # Safety
/// `ptr` must come from [`mem_host_alloc`], be freed once, and no work (no copy on any stream,
/// no graph that may still launch) may still use it.
pub(crate) unsafe fn mem_free_host(ptr: *mut u8) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuMemFreeHost(ptr.cast()) }, "cuMemFreeHost")
}

/// The parameters of a 1-D copy of `bytes` between host memory `host` and device memory
/// `device`: into the device when `to_device`, out of it otherwise (`CU_MEMORYTYPE_HOST` on the
/// host side, `CU_MEMORYTYPE_DEVICE` on the other).
pub(crate) fn memcpy_1d_host(
    host: *mut u8,
    device: sys::CUdeviceptr,
    bytes: usize,
    to_device: bool,
) -> sys::CUDA_MEMCPY3D {
    let mut p = super::memcpy_1d(0, 0, bytes);
    let host_type = sys::CUmemorytype::CU_MEMORYTYPE_HOST;
    if to_device {
        p.srcMemoryType = host_type;
        p.srcHost = host.cast_const().cast();
        p.dstDevice = device;
    } else {
        p.srcDevice = device;
        p.dstMemoryType = host_type;
        p.dstHost = host.cast();
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_copy_parameters_name_the_host_side() {
        let host = 0x7000_0000_usize as *mut u8;
        let up = memcpy_1d_host(host, 0xd000, 64, true);
        assert_eq!(up.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        assert_eq!(up.srcHost as usize, 0x7000_0000);
        assert_eq!(up.dstMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);
        assert_eq!((up.dstDevice, up.srcDevice), (0xd000, 0));
        assert!(up.dstHost.is_null());
        let down = memcpy_1d_host(host, 0xd000, 64, false);
        assert_eq!(down.srcMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_DEVICE);
        assert_eq!((down.srcDevice, down.dstDevice), (0xd000, 0));
        assert_eq!(down.dstMemoryType, sys::CUmemorytype::CU_MEMORYTYPE_HOST);
        assert_eq!(down.dstHost as usize, 0x7000_0000);
        assert!(down.srcHost.is_null());
        assert_eq!((down.WidthInBytes, down.Height, down.Depth), (64, 1, 1));
    }
}
