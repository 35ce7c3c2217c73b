//! The fake's node parameter functions: kernels and their functions, copies, sets, host, child
//! graph, event, allocation and free nodes, and address look-ups.

use std::ffi::{c_char, c_int, c_void};
use std::ptr::addr_of_mut;

use cudarc::driver::sys;

use super::{enter, Args, Node, HOST_FUNCTION, INVALID_HANDLE};
use crate::table::{Status, INVALID_VALUE, SUCCESS};

/// A key of an `extra` list (`CU_LAUNCH_PARAM_*`): a number in a pointer.
fn key(k: usize) -> *mut c_void {
    std::ptr::without_provenance_mut(k)
}

pub(super) unsafe extern "C" fn kernel_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_KERNEL_NODE_PARAMS_v2,
) -> Status {
    enter("cuGraphKernelNodeGetParams", |f| {
        let Some(Node::Kernel(k)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        let (mut params, mut extra) = (std::ptr::null_mut(), std::ptr::null_mut());
        let mut bytes = Vec::new();
        let mut pointers = Vec::new();
        let mut sizes = Vec::new();
        match &k.args {
            Args::Params(args) => {
                let mut array: Vec<*mut c_void> = Vec::new();
                for a in args {
                    match a {
                        Some(b) => {
                            let mut b: Box<[u8]> = b.clone().into_boxed_slice();
                            array.push(b.as_mut_ptr().cast());
                            bytes.push(b);
                        }
                        None => array.push(std::ptr::null_mut()),
                    }
                }
                let mut array = array.into_boxed_slice();
                params = array.as_mut_ptr();
                pointers.push(array);
            }
            Args::Extra { buffer, size } => {
                let mut size = Box::new(*size);
                let mut list: Vec<*mut c_void> = Vec::new();
                if let Some(b) = buffer {
                    let mut b: Box<[u8]> = b.clone().into_boxed_slice();
                    list.extend([key(1), b.as_mut_ptr().cast()]);
                    bytes.push(b);
                }
                // An entry the reader does not know is skipped.
                list.extend([key(7), std::ptr::null_mut()]);
                let size_ptr: *mut usize = &mut *size;
                list.extend([key(2), size_ptr.cast(), std::ptr::null_mut()]);
                let mut list = list.into_boxed_slice();
                extra = list.as_mut_ptr();
                pointers.push(list);
                sizes.push(size);
            }
            Args::Neither => {}
        }
        // SAFETY: p points to the reader's zeroed local of the v2 layout.
        let p = unsafe { &mut *p };
        p.func = k.func as sys::CUfunction;
        p.kern = k.kern as sys::CUkernel;
        [p.gridDimX, p.gridDimY, p.gridDimZ] = k.grid;
        [p.blockDimX, p.blockDimY, p.blockDimZ] = k.block;
        p.sharedMemBytes = k.shared;
        p.kernelParams = params;
        p.extra = extra;
        f.kept_bytes.extend(bytes);
        f.kept_pointers.extend(pointers);
        f.kept_sizes.extend(sizes);
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn kernel_function(
    func: *mut sys::CUfunction,
    kern: sys::CUkernel,
) -> Status {
    enter("cuKernelGetFunction", |f| {
        let Some(&found) = f.library_kernels.get(&(kern as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: func points to the reader's local.
        unsafe { *func = found as sys::CUfunction };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn func_name(
    name: *mut *const c_char,
    func: sys::CUfunction,
) -> Status {
    enter("cuFuncGetName", |f| {
        match f.functions.get(&(func as usize)).map(|g| &g.name) {
            // SAFETY: name points to the reader's local; the string lives as long as the fake.
            Some(Some(text)) => unsafe { *name = text.as_ptr() },
            _ => return INVALID_HANDLE,
        }
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn param_info(
    func: sys::CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> Status {
    enter("cuFuncGetParamInfo", |f| {
        let Some(g) = f.functions.get(&(func as usize)) else {
            return INVALID_HANDLE;
        };
        let Some(&(o, s)) = g.layout.get(index) else {
            return INVALID_VALUE;
        };
        // SAFETY: offset and size point to the reader's locals.
        unsafe { (*offset, *size) = (o, s) };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn func_attribute(
    value: *mut c_int,
    attribute: sys::CUfunction_attribute,
    func: sys::CUfunction,
) -> Status {
    use sys::CUfunction_attribute as A;
    enter("cuFuncGetAttribute", |f| {
        let Some(g) = f.functions.get(&(func as usize)) else {
            return INVALID_HANDLE;
        };
        let v = match attribute {
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH => g.cluster[0],
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT => g.cluster[1],
            A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH => g.cluster[2],
            _ => return INVALID_VALUE,
        };
        // SAFETY: value points to the reader's local.
        unsafe { *value = v };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn memcpy_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_MEMCPY3D,
) -> Status {
    enter("cuGraphMemcpyNodeGetParams", |f| {
        let Some(Node::Copy(c)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed CUDA_MEMCPY3D; each field is written through
        // a raw pointer, the memory types as their 32-bit values.
        unsafe {
            addr_of_mut!((*p).srcMemoryType)
                .cast::<u32>()
                .write(c.src.memory_type);
            addr_of_mut!((*p).srcDevice).write(c.src.device);
            addr_of_mut!((*p).srcHost).write(c.src.host as *const c_void);
            addr_of_mut!((*p).srcXInBytes).write(c.src.x as usize);
            addr_of_mut!((*p).srcY).write(c.src.y as usize);
            addr_of_mut!((*p).srcZ).write(c.src.z as usize);
            addr_of_mut!((*p).srcPitch).write(c.src.pitch as usize);
            addr_of_mut!((*p).srcHeight).write(c.src.height as usize);
            addr_of_mut!((*p).dstMemoryType)
                .cast::<u32>()
                .write(c.dst.memory_type);
            addr_of_mut!((*p).dstDevice).write(c.dst.device);
            addr_of_mut!((*p).dstHost).write(c.dst.host as *mut c_void);
            addr_of_mut!((*p).dstXInBytes).write(c.dst.x as usize);
            addr_of_mut!((*p).dstY).write(c.dst.y as usize);
            addr_of_mut!((*p).dstZ).write(c.dst.z as usize);
            addr_of_mut!((*p).dstPitch).write(c.dst.pitch as usize);
            addr_of_mut!((*p).dstHeight).write(c.dst.height as usize);
            addr_of_mut!((*p).WidthInBytes).write(c.width as usize);
            addr_of_mut!((*p).Height).write(c.height as usize);
            addr_of_mut!((*p).Depth).write(c.depth as usize);
        }
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn memset_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_MEMSET_NODE_PARAMS,
) -> Status {
    enter("cuGraphMemsetNodeGetParams", |f| {
        let Some(Node::Set(s)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed local.
        let p = unsafe { &mut *p };
        p.dst = s.dst;
        p.pitch = s.pitch as usize;
        p.value = s.value;
        p.elementSize = s.element_size;
        p.width = s.width as usize;
        p.height = s.height as usize;
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn host_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_HOST_NODE_PARAMS,
) -> Status {
    enter("cuGraphHostNodeGetParams", |f| {
        let Some(Node::Host) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed local.
        unsafe { (*p).fn_ = HOST_FUNCTION };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn child_graph(
    node: sys::CUgraphNode,
    graph: *mut sys::CUgraph,
) -> Status {
    enter("cuGraphChildGraphNodeGetGraph", |f| {
        let Some(Node::Child(g)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: graph points to the reader's local.
        unsafe { *graph = *g as sys::CUgraph };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn event_record(
    node: sys::CUgraphNode,
    event: *mut sys::CUevent,
) -> Status {
    enter("cuGraphEventRecordNodeGetEvent", |f| {
        let Some(Node::EventRecord(e)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: event points to the reader's local.
        unsafe { *event = *e as sys::CUevent };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn event_wait(
    node: sys::CUgraphNode,
    event: *mut sys::CUevent,
) -> Status {
    enter("cuGraphEventWaitNodeGetEvent", |f| {
        let Some(Node::EventWait(e)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: event points to the reader's local.
        unsafe { *event = *e as sys::CUevent };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn alloc_params(
    node: sys::CUgraphNode,
    p: *mut sys::CUDA_MEM_ALLOC_NODE_PARAMS,
) -> Status {
    enter("cuGraphMemAllocNodeGetParams", |f| {
        let Some(&Node::Alloc(address, bytes)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: p points to the reader's zeroed struct; the two integer fields are written
        // through raw pointers.
        unsafe {
            addr_of_mut!((*p).dptr).write(address);
            addr_of_mut!((*p).bytesize).write(bytes);
        }
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn free_params(
    node: sys::CUgraphNode,
    address: *mut sys::CUdeviceptr,
) -> Status {
    enter("cuGraphMemFreeNodeGetParams", |f| {
        let Some(&Node::Free(a)) = f.nodes.get(&(node as usize)) else {
            return INVALID_HANDLE;
        };
        // SAFETY: address points to the reader's local.
        unsafe { *address = a };
        SUCCESS
    })
}

pub(super) unsafe extern "C" fn address_range(
    base: *mut sys::CUdeviceptr,
    size: *mut usize,
    address: sys::CUdeviceptr,
) -> Status {
    enter("cuMemGetAddressRange_v2", |f| {
        let Some(&(b, s)) = f
            .allocations
            .iter()
            .find(|&&(b, s)| address >= b && address < b + s as u64)
        else {
            return 500;
        };
        // SAFETY: base and size point to the reader's locals.
        unsafe { (*base, *size) = (b, s) };
        SUCCESS
    })
}
