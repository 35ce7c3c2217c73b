//! Driver parameter structs built field by field (several hold C enums for which all-zero bits
//! are not a valid value, so none is zero-initialised).

use cudarc::driver::sys;

use graphsmith_model::Dim3;

/// A 1-D device-to-device copy description. Every field is set: the struct holds enums for
/// which all-zero bits are not a valid value.
pub(crate) fn memcpy_1d(
    src: sys::CUdeviceptr,
    dst: sys::CUdeviceptr,
    bytes: usize,
) -> sys::CUDA_MEMCPY3D {
    let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    let null = std::ptr::null_mut();
    sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: device,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: null as _,
        reserved0: null,
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: device,
        dstHost: null,
        dstDevice: dst,
        dstArray: null as _,
        reserved1: null,
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
    }
}

/// Kernel node parameters naming `func`, or the library kernel `kern` when `func` is null (the
/// driver reads `kern` only then).
pub(crate) fn kernel_params(
    func: sys::CUfunction,
    kern: sys::CUkernel,
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    pointers: *mut *mut std::ffi::c_void,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: grid.x,
        gridDimY: grid.y,
        gridDimZ: grid.z,
        blockDimX: block.x,
        blockDimY: block.y,
        blockDimZ: block.z,
        sharedMemBytes: shared_mem_bytes,
        kernelParams: pointers,
        extra: std::ptr::null_mut(),
        kern,
        ctx: std::ptr::null_mut(),
    }
}
