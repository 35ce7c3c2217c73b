//! Kernel nodes: the kernel's symbol, its geometry, its cluster shape and the bytes of every
//! argument (pointers hide in struct parameters too: see `graphsmith_analysis::readback`), each
//! parameter read up to [`MAX_PARAM_BYTES`].

use std::ffi::{c_char, c_void, CStr};
use std::ptr::{null, null_mut};

use cudarc::driver::sys;
use graphsmith_model::{Dim3, KernelArg, KernelParams};

use super::{Reader, State};
use crate::error::check;
use crate::error::ReadError;
use crate::table::{INVALID_VALUE, SUCCESS};

/// Bytes read of one parameter at most; a larger one is an empty placeholder. The driver's
/// limit for all parameters of a kernel together is 32,764 bytes, so no real parameter is
/// over it: the cap bounds what a corrupt layout could make the reader copy.
pub const MAX_PARAM_BYTES: usize = 32 * 1024;
/// Parameters asked of `cuFuncGetParamInfo` per kernel at most.
pub const MAX_PARAMS: usize = 4096;
/// `CU_LAUNCH_PARAM_END`, `CU_LAUNCH_PARAM_BUFFER_POINTER`, `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_END: usize = 0;
const PARAM_BUFFER_POINTER: usize = 1;
const PARAM_BUFFER_SIZE: usize = 2;
/// (key, value) pairs read from an `extra` list at most.
const MAX_EXTRA: usize = 64;

/// A kernel node's function with its parameter layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFunction {
    /// The function the node launches (never null).
    pub func: sys::CUfunction,
    /// The node's library kernel, null when it names a function only.
    pub kern: sys::CUkernel,
    /// (offset, size) of each parameter (`cuFuncGetParamInfo`).
    pub layout: Vec<(usize, usize)>,
    /// The required thread block cluster shape, `None` when none (or not read).
    pub cluster: Option<Dim3>,
    /// Whether every argument was read at its parameter's size (only such an argument list
    /// can be written back to a node).
    pub complete: bool,
}

/// A kernel node as read back.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelNode {
    /// Name, geometry, shared memory, cluster shape and arguments (empty when unread).
    pub params: KernelParams,
    /// Whether the arguments were read (`RawNode::args_unread` is the opposite): false when
    /// the function, its layout or both forms of arguments could not be had.
    pub args_read: bool,
    /// The function and layout, when both were read.
    pub function: Option<KernelFunction>,
}

impl Reader<'_> {
    /// Reads one kernel node: `cuGraphKernelNodeGetParams_v2`, the function of a library
    /// kernel (`cuKernelGetFunction`), its name, layout and cluster shape, then the bytes of
    /// every argument.
    ///
    /// # Safety
    /// `node` is a live kernel node; the context of its kernel is current on this thread.
    pub unsafe fn kernel(&self, node: sys::CUgraphNode) -> Result<KernelNode, ReadError> {
        let mut state = State {
            budget: 0,
            params_over_cap: 0,
        };
        // SAFETY: forwarded contract.
        unsafe { self.kernel_node(node, &mut state) }
    }

    /// # Safety
    /// As [`Reader::kernel`].
    pub(crate) unsafe fn kernel_node(
        &self,
        node: sys::CUgraphNode,
        state: &mut State,
    ) -> Result<KernelNode, ReadError> {
        // SAFETY: CUDA_KERNEL_NODE_PARAMS_v2 holds raw pointers and integers: all zero is valid.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS_v2 = unsafe { std::mem::zeroed() };
        // SAFETY: node is a live kernel node (contract); p is a local of the v2 layout.
        let read = self
            .optional(unsafe { self.kernel_params(node, &mut p) })?
            .is_some();
        let mut func = if read { p.func } else { null_mut() };
        if read && func.is_null() && !p.kern.is_null() {
            // SAFETY: kern is the node's live library kernel; its context is current.
            if let Some(f) = self.optional(unsafe { self.kernel_function(p.kern) })? {
                func = f;
            }
        }
        let mut params = KernelParams {
            name: String::new(),
            grid: Dim3::new(p.gridDimX, p.gridDimY, p.gridDimZ),
            block: Dim3::new(p.blockDimX, p.blockDimY, p.blockDimZ),
            shared_mem_bytes: p.sharedMemBytes,
            args: Vec::new(),
            cluster: None,
        };
        if func.is_null() {
            return Ok(KernelNode {
                params,
                args_read: false,
                function: None,
            });
        }
        // SAFETY: func is the node's live function.
        params.name = unsafe { self.function_name(func) }.unwrap_or_default();
        // SAFETY: func is the node's live function.
        let layout = self.optional(unsafe { self.layout(func) })?;
        // SAFETY: func is the node's live function.
        params.cluster = self.optional(unsafe { self.cluster(func) })?.flatten();
        let args = layout.as_ref().and_then(|layout| {
            // SAFETY: p was filled by the driver for this live node, whose function has
            // `layout`: kernelParams (when set) holds one pointer per parameter, `extra` (when
            // set) an END-terminated list; both owned by the driver while the node lives.
            unsafe { argument_bytes(&p, layout, &mut state.params_over_cap) }
        });
        let args_read = args.is_some();
        params.args = args.unwrap_or_default();
        let function = layout.map(|layout| KernelFunction {
            complete: params.args.len() == layout.len()
                && params
                    .args
                    .iter()
                    .zip(&layout)
                    .all(|(a, &(_, size))| a.bytes.len() == size),
            func,
            kern: p.kern,
            layout,
            cluster: params.cluster,
        });
        Ok(KernelNode {
            params,
            args_read,
            function,
        })
    }

    /// # Safety
    /// `node` is a live kernel node.
    unsafe fn kernel_params(
        &self,
        node: sys::CUgraphNode,
        p: &mut sys::CUDA_KERNEL_NODE_PARAMS_v2,
    ) -> Result<(), ReadError> {
        const CALL: &str = "cuGraphKernelNodeGetParams";
        let get = self
            .table
            .kernel_node_get_params
            .ok_or(ReadError::Missing { call: CALL })?;
        // SAFETY: get is cuGraphKernelNodeGetParams_v2 (Reader::new's contract), which fills
        // the v2 layout p has; node is a live kernel node.
        check(unsafe { get(node, p) }, CALL)
    }

    /// # Safety
    /// `kern` is a live library kernel; its context is current.
    unsafe fn kernel_function(&self, kern: sys::CUkernel) -> Result<sys::CUfunction, ReadError> {
        const CALL: &str = "cuKernelGetFunction";
        let get = self
            .table
            .kernel_get_function
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut f = null_mut();
        // SAFETY: get is cuKernelGetFunction (Reader::new's contract); kern is live and its
        // context current; f is a local.
        check(unsafe { get(&mut f, kern) }, CALL)?;
        Ok(f)
    }

    /// A function's name (`cuFuncGetName`), copied; `None` when the driver gives none.
    ///
    /// # Safety
    /// `func` is a live `CUfunction`.
    unsafe fn function_name(&self, func: sys::CUfunction) -> Option<String> {
        let get = self.table.func_get_name?;
        let mut text: *const c_char = null();
        // SAFETY: get is cuFuncGetName (Reader::new's contract); func is live; text receives a
        // driver-owned NUL-terminated string.
        if unsafe { get(&mut text, func) } != SUCCESS || text.is_null() {
            return None;
        }
        // SAFETY: non-null and NUL-terminated, owned by the driver while func lives; copied at
        // once.
        Some(
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// (offset, size) of each parameter (`cuFuncGetParamInfo` until it answers
    /// `CUDA_ERROR_INVALID_VALUE`, past the last one), at most [`MAX_PARAMS`].
    ///
    /// # Safety
    /// `func` is a live `CUfunction`.
    unsafe fn layout(&self, func: sys::CUfunction) -> Result<Vec<(usize, usize)>, ReadError> {
        const CALL: &str = "cuFuncGetParamInfo";
        let get = self
            .table
            .func_get_param_info
            .ok_or(ReadError::Missing { call: CALL })?;
        let mut params = Vec::new();
        while params.len() < MAX_PARAMS {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: get is cuFuncGetParamInfo (Reader::new's contract); func is live; offset
            // and size are locals.
            match unsafe { get(func, params.len(), &mut offset, &mut size) } {
                SUCCESS => params.push((offset, size)),
                INVALID_VALUE => break,
                code => return Err(ReadError::Call { call: CALL, code }),
            }
        }
        Ok(params)
    }

    /// The thread block cluster shape compiled into `func` (`__cluster_dims__`: the
    /// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*` attributes), `None` when it requires none.
    ///
    /// # Safety
    /// `func` is a live `CUfunction`.
    unsafe fn cluster(&self, func: sys::CUfunction) -> Result<Option<Dim3>, ReadError> {
        use sys::CUfunction_attribute as A;
        const CALL: &str = "cuFuncGetAttribute";
        let get = self
            .table
            .func_get_attribute
            .ok_or(ReadError::Missing { call: CALL })?;
        let attribute = |attr| {
            let mut v = 0i32;
            // SAFETY: get is cuFuncGetAttribute (Reader::new's contract); func is live; v is a
            // local.
            check(unsafe { get(&mut v, attr, func) }, CALL).map(|()| v.max(0) as u32)
        };
        // One call for the usual kernel, compiled without a cluster shape (width 0).
        let width = attribute(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)?;
        if width == 0 {
            return Ok(None);
        }
        let height = attribute(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT)?;
        let depth = attribute(A::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH)?;
        Ok(Some(Dim3::new(width, height.max(1), depth.max(1))))
    }
}

/// The arguments of a kernel node, one per parameter in order, with every parameter's bytes
/// (struct parameters included: the conversion looks for pointers inside them); an empty
/// placeholder for one that cannot be read or is larger than [`MAX_PARAM_BYTES`] (counted in
/// `over_cap`), so that argument `i` stays parameter `i`. `None` when the node holds neither
/// form of arguments although the kernel has parameters.
///
/// # Safety
/// `p` was filled by `cuGraphKernelNodeGetParams_v2` for a live node whose function has
/// `layout`: `kernelParams`, when set, holds one pointer per parameter, each to that
/// parameter's bytes; otherwise `extra`, when set, is a `CU_LAUNCH_PARAM_END`-terminated list of
/// key/value pointers whose buffer holds the packed arguments. Both are owned by the driver
/// while the node lives.
pub(crate) unsafe fn argument_bytes(
    p: &sys::CUDA_KERNEL_NODE_PARAMS_v2,
    layout: &[(usize, usize)],
    over_cap: &mut usize,
) -> Option<Vec<KernelArg>> {
    if layout.is_empty() {
        return Some(Vec::new());
    }
    let mut copy = |offset: usize, value: *const u8, size: usize| {
        let bytes = if value.is_null() {
            Vec::new()
        } else if size > MAX_PARAM_BYTES {
            *over_cap += 1;
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
                // `size` bytes; i < layout.len().
                let value = unsafe { *p.kernelParams.add(i) } as *const u8;
                copy(offset, value, size)
            })
            .collect();
        return Some(out);
    }
    if p.extra.is_null() {
        return None;
    }
    let (mut buffer, mut size): (*const u8, usize) = (null(), 0);
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
            // SAFETY: the value of BUFFER_SIZE points to a size_t (the driver's contract).
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
                return copy(offset, null(), len);
            }
            // SAFETY: the buffer holds `size` bytes, and offset + len <= size.
            copy(offset, unsafe { buffer.add(offset) }, len)
        })
        .collect();
    Some(out)
}
