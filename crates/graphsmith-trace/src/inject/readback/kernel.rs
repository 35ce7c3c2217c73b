//! Kernel nodes: the kernel's symbol, its geometry and the bytes of every argument (pointers
//! hide in struct parameters too: see `graphsmith_analysis::readback`).

use std::ffi::{c_char, c_void, CStr};

use cudarc::driver::sys::CUDA_KERNEL_NODE_PARAMS_v2;
use graphsmith_model::{Dim3, KernelArg, KernelParams, NodeKind};

use super::{GraphApi, INVALID_VALUE, MAX_PARAMS};
use crate::hazard::RawNode;

/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
/// Pairs read from an `extra` list at most.
const MAX_EXTRA: usize = 64;
/// Bytes read per parameter at most (the driver's limit for all parameters is 32,764).
const MAX_PARAM_BYTES: usize = 32 * 1024;

impl GraphApi {
    /// A kernel node. When its parameters cannot be read, the node says so (`args_unread`) and
    /// its memory is not checked.
    ///
    /// # Safety
    /// `node` is a live kernel node; the context of its kernel is current on this thread.
    pub(super) unsafe fn kernel(&self, node: u64) -> RawNode {
        // SAFETY: CUDA_KERNEL_NODE_PARAMS_v2 holds raw pointers and integers: all zero is valid.
        let mut p: CUDA_KERNEL_NODE_PARAMS_v2 = unsafe { std::mem::zeroed() };
        let read = match self.kernel_params {
            // SAFETY: node is a live kernel node; p is a local of the v2 layout the _v2
            // function fills.
            Some(get) => (unsafe { get(node, &mut p) }) == 0,
            None => false,
        };
        let mut func = if read { p.func as u64 } else { 0 };
        if read && func == 0 && !p.kern.is_null() {
            if let Some(get_function) = self.kernel_function {
                let mut f = 0u64;
                // SAFETY: kern is the node's library kernel; its context is current (contract);
                // f is a local.
                if unsafe { get_function(&mut f, p.kern as u64) } == 0 {
                    func = f;
                }
            }
        }
        let name = if func == 0 {
            String::new()
        } else {
            // SAFETY: func is the node's live function.
            unsafe { self.name_of(func) }
        };
        let args = if func == 0 {
            None
        } else {
            // SAFETY: func is the node's live function; p was filled by the driver for it.
            unsafe { self.layout(func) }.and_then(|layout| unsafe { argument_bytes(&p, &layout) })
        };
        RawNode {
            kind: NodeKind::Kernel(KernelParams {
                name,
                grid: Dim3::new(p.gridDimX, p.gridDimY, p.gridDimZ),
                block: Dim3::new(p.blockDimX, p.blockDimY, p.blockDimZ),
                shared_mem_bytes: p.sharedMemBytes,
                args: args.clone().unwrap_or_default(),
                // Not read here (unknown): the tracer analyses hazards, which do not depend on
                // it, and never updates the program's executables.
                cluster: None,
            }),
            operands: Vec::new(),
            child: None,
            args_unread: args.is_none(),
        }
    }

    /// # Safety
    /// `func` is a live `CUfunction`.
    unsafe fn name_of(&self, func: u64) -> String {
        let Some(get) = self.func_name else {
            return String::new();
        };
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: func is live; text receives a driver-owned NUL-terminated string.
        if unsafe { get(&mut text, func) } != 0 || text.is_null() {
            return String::new();
        }
        // SAFETY: non-null and NUL-terminated, owned by the driver while func lives.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// (offset, size) of each parameter, or `None` when the driver cannot say.
    ///
    /// # Safety
    /// `func` is a live `CUfunction`.
    unsafe fn layout(&self, func: u64) -> Option<Vec<(usize, usize)>> {
        let get = self.param_info?;
        let mut params = Vec::new();
        while params.len() < MAX_PARAMS {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: func is live; offset and size are locals.
            match unsafe { get(func, params.len(), &mut offset, &mut size) } {
                0 => params.push((offset, size)),
                INVALID_VALUE => return Some(params),
                _ => return None,
            }
        }
        Some(params)
    }
}

/// The arguments of a kernel node, one per parameter in order, with every parameter's bytes
/// (struct parameters included: the conversion looks for pointers inside them); an empty
/// placeholder for one that cannot be read or is larger than [`MAX_PARAM_BYTES`]. `None` when
/// the node holds neither form of arguments although the kernel has parameters.
///
/// # Safety
/// `p` was filled by `cuGraphKernelNodeGetParams_v2` for a live node whose function has
/// `layout`: `kernelParams`, when set, holds one pointer per parameter, each to that
/// parameter's bytes; otherwise `extra`, when set, is a `CU_LAUNCH_PARAM_END`-terminated list of
/// key/value pointers. Both are owned by the driver while the node lives.
unsafe fn argument_bytes(
    p: &CUDA_KERNEL_NODE_PARAMS_v2,
    layout: &[(usize, usize)],
) -> Option<Vec<KernelArg>> {
    if layout.is_empty() {
        return Some(Vec::new());
    }
    let copy = |offset: usize, value: *const u8, size: usize| {
        let bytes = if value.is_null() || size > MAX_PARAM_BYTES {
            Vec::new()
        } else {
            // SAFETY: value points to the parameter's `size` bytes (the caller's contract for
            // each call below), copied at once.
            unsafe { std::slice::from_raw_parts(value, size) }.to_vec()
        };
        KernelArg {
            offset: offset as u32,
            bytes,
        }
    };
    if !p.kernelParams.is_null() {
        let out = layout
            .iter()
            .enumerate()
            .map(|(i, &(offset, size))| {
                // SAFETY: kernelParams holds one pointer per parameter (contract), each to
                // `size` bytes.
                let value = unsafe { *p.kernelParams.add(i) } as *const u8;
                copy(offset, value, size)
            })
            .collect();
        return Some(out);
    }
    if p.extra.is_null() {
        return None;
    }
    let (mut buffer, mut size): (*const u8, usize) = (std::ptr::null(), 0);
    for i in 0..MAX_EXTRA {
        // SAFETY: the list is terminated by CU_LAUNCH_PARAM_END (contract); reading stops
        // there, and each key is followed by its value.
        let key = unsafe { *p.extra.add(2 * i) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: as above.
        let value: *mut c_void = unsafe { *p.extra.add(2 * i + 1) };
        match key {
            PARAM_BUFFER_POINTER => buffer = value as *const u8,
            // SAFETY: the value of BUFFER_SIZE points to a size_t.
            PARAM_BUFFER_SIZE if !value.is_null() => size = unsafe { *(value as *const usize) },
            _ => {}
        }
    }
    if buffer.is_null() {
        return None;
    }
    let out = layout
        .iter()
        .map(|&(offset, len)| {
            if offset.checked_add(len).is_none_or(|end| end > size) {
                return copy(offset, std::ptr::null(), len);
            }
            // SAFETY: the buffer holds `size` bytes, and offset + len <= size.
            copy(offset, unsafe { buffer.add(offset) }, len)
        })
        .collect();
    Some(out)
}
