//! cuBLAS through cudarc's dynamically loaded bindings: finding the library (NVIDIA's Python
//! wheels, the CUDA toolkit, the loader's path), a handle with its own workspace (given before
//! any capture, so nothing allocates while capturing), and bf16 GEMMs with fp32 compute issued
//! as journaled library calls that declare what they read and write.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use cudarc::cublas::sys as cb;
use graphsmith::{sys, Context, DeviceBuffer, LibraryAccess, Stream};

use crate::error::{LlamaError, Result};

/// Bytes of cuBLAS workspace per handle.
const WORKSPACE_BYTES: usize = 32 << 20;

static LOADED: OnceLock<std::result::Result<String, String>> = OnceLock::new();

/// libcublas as the workspace's one search for NVIDIA's libraries knows it.
pub(crate) const CUBLAS: graphsmith_locate::Library = graphsmith_locate::Library {
    soname: "libcublas.so.13",
    prefix: "libcublas.so",
    env_var: "GRAPHSMITH_CUBLAS",
    wheel_dirs: &["nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib"],
    toolkit_dirs: &["lib64", "targets/x86_64-linux/lib"],
    install: "add its directory to LD_LIBRARY_PATH (it ships in the CUDA toolkit's lib64 and in \
              the nvidia-cublas Python package)",
};

/// Opens `path` (and libcublasLt beside it first) globally and for good, so that cudarc's
/// loader, which asks for `libcublas.so.<major>` by name, gets it.
fn preload(path: &Path) -> std::result::Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    if let Some(dir) = path.parent() {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut lt: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("libcublasLt.so"))
                })
                .collect();
            lt.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
            if let Some(lt) = lt.first() {
                // SAFETY: loading a shared library runs its initialisers; libcublasLt is
                // NVIDIA's library, loaded once and never unloaded (forgotten below).
                if let Ok(lib) = unsafe { Library::open(Some(lt), RTLD_NOW | RTLD_GLOBAL) } {
                    std::mem::forget(lib);
                }
            }
        }
    }
    // SAFETY: as above, for libcublas itself.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| format!("found {} but cannot load it: {e}", path.display()))?;
    std::mem::forget(lib);
    Ok(())
}

/// Makes libcublas loadable by cudarc: `$GRAPHSMITH_CUBLAS` (the file or its directory) if set,
/// else what the loader finds by name, else the first found by graphsmith-locate's search
/// (NVIDIA's wheels, the CUDA toolkit, the loader's path). The error lists where it looked.
pub fn ensure_cublas() -> Result<String> {
    LOADED
        .get_or_init(|| {
            // SAFETY: only tries to dlopen cudarc's candidate names; no cuBLAS call is made.
            make_loadable(&CUBLAS, || unsafe { cb::is_culib_present() })
        })
        .clone()
        .map_err(LlamaError::CublasMissing)
}

/// Makes `lib` loadable by cudarc (whose loader asks for it by name; `present` says whether it
/// can): by name unless `lib.env_var` is set, else the file graphsmith-locate finds, opened
/// globally. Returns where it came from, or where the search looked.
pub(crate) fn make_loadable(
    lib: &graphsmith_locate::Library,
    present: impl Fn() -> bool,
) -> std::result::Result<String, String> {
    // By name first (the error then lists that place too), unless the variable is set.
    let search = graphsmith_locate::Search {
        by_name: true,
        ..graphsmith_locate::Search::from_env(lib)
    };
    if search.explicit.is_none() && present() {
        return Ok("found by the loader".to_string());
    }
    let path = search.locate(lib).map_err(|e| e.to_string())?.path;
    preload(&path)?;
    if present() {
        return Ok(path.display().to_string());
    }
    Err(format!(
        "loaded {} but cudarc still cannot open {} by name",
        path.display(),
        lib.prefix
    ))
}

/// Makes `ctx` current on this thread before `call` (a library's handle creation) looks for it.
pub(crate) fn make_current(ctx: &Context, call: &str) -> Result<()> {
    // SAFETY: ctx.raw() is the live context `ctx` owns.
    let rc = unsafe { sys::cuCtxSetCurrent(ctx.raw()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::CublasMissing(format!(
            "cuCtxSetCurrent before {call} failed: {rc:?}"
        )));
    }
    Ok(())
}

fn status_name(status: cb::cublasStatus_t) -> String {
    format!("{status:?}")
}

/// A cuBLAS handle with its own workspace; set to the stream of each call (and its workspace
/// set again then, as cublasSetStream resets it).
pub struct Cublas {
    handle: cb::cublasHandle_t,
    /// The last failed call's (label, status), for [`Cublas::take_failure`].
    failure: std::cell::RefCell<Option<(String, String)>>,
    /// The stream the handle is set to (a call on another stream sets it again).
    stream: std::cell::Cell<sys::CUstream>,
    _workspace: DeviceBuffer<u8>,
}

// SAFETY: a cuBLAS handle may be used from any thread as long as calls on it are not
// concurrent; every method takes `&self` from an owner that is used by one thread at a time
// (the decoder holds it behind `&mut`), so the handle moves between threads but is never shared.
unsafe impl Send for Cublas {}

impl Cublas {
    /// A handle on `stream` with a workspace of its own, set before any capture.
    pub fn new(ctx: &Context, stream: &Stream, label: &str) -> Result<Cublas> {
        ensure_cublas()?;
        let workspace = ctx.alloc::<u8>(&format!("{label}/workspace"), WORKSPACE_BYTES)?;
        let fail = |call: &'static str, status| LlamaError::Cublas {
            call,
            label: label.to_string(),
            status: status_name(status),
        };
        make_current(ctx, "cublasCreate")?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: handle is a valid out pointer; the context is current.
        let st = unsafe { cb::cublasCreate_v2(&mut handle) };
        if st != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(fail("cublasCreate", st));
        }
        let me = Cublas {
            handle,
            failure: Default::default(),
            stream: std::cell::Cell::new(stream.raw()),
            _workspace: workspace,
        };
        // SAFETY: handle is live; the stream is live (the caller keeps it for the handle's
        // life); the workspace is device memory of WORKSPACE_BYTES owned by `me`. The stream is
        // set first because cublasSetStream resets the workspace to the default pool.
        unsafe {
            let st = cb::cublasSetStream_v2(handle, stream.raw() as cb::cudaStream_t);
            if st != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(fail("cublasSetStream", st));
            }
            let ws = me._workspace.device_ptr() as *mut std::ffi::c_void;
            let st = cb::cublasSetWorkspace_v2(handle, ws, WORKSPACE_BYTES);
            if st != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(fail("cublasSetWorkspace", st));
            }
            let st = cb::cublasSetMathMode(handle, cb::cublasMath_t::CUBLAS_DEFAULT_MATH);
            if st != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                return Err(fail("cublasSetMathMode", st));
            }
        }
        Ok(me)
    }

    /// `y[rows, n] = x[rows, k] @ w[n, k]^T (+ y when accumulate)`, bf16 in, fp32 compute; `y`
    /// is bf16, or f32 when `y_f32`. One journaled library call on `stream` (the handle's own).
    #[allow(clippy::too_many_arguments)]
    #[track_caller]
    pub fn gemm(
        &self,
        stream: &Stream,
        label: &str,
        x: (u64, LibraryAccess),
        w: (u64, LibraryAccess),
        y: (u64, LibraryAccess),
        rows: usize,
        n: usize,
        k: usize,
        accumulate: bool,
        y_f32: bool,
    ) -> graphsmith::Result<()> {
        let alpha = 1.0f32;
        let beta = if accumulate { 1.0f32 } else { 0.0f32 };
        let handle = self.handle;
        let bf16 = cb::cudaDataType::CUDA_R_16BF;
        let y_type = if y_f32 {
            cb::cudaDataType::CUDA_R_32F
        } else {
            bf16
        };
        let mut status = cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS;
        let ws = self._workspace.device_ptr() as *mut std::ffi::c_void;
        let (xp, wp, yp) = (x.0, w.0, y.0);
        let result = stream.library_call(label, &[x.1, w.1], &[y.1], |raw| {
            if raw != self.stream.get() {
                // SAFETY: handle is live, raw is the live stream this call runs on; the
                // workspace is set again because cublasSetStream resets it.
                let st = unsafe {
                    let st = cb::cublasSetStream_v2(handle, raw as cb::cudaStream_t);
                    if st == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                        cb::cublasSetWorkspace_v2(handle, ws, WORKSPACE_BYTES)
                    } else {
                        st
                    }
                };
                if st != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    status = st;
                    return sys::CUresult::CUDA_ERROR_UNKNOWN;
                }
                self.stream.set(raw);
            }
            // Column-major view: y^T (n x rows) = w (k x n)^T * x^T (k x rows).
            // SAFETY: handle is live with its stream and workspace set; the three pointers are
            // device buffers the caller sized for these shapes (checked by the caller) and
            // kept alive by the call's declared accesses; alpha and beta are host f32.
            status = unsafe {
                cb::cublasGemmEx(
                    handle,
                    cb::cublasOperation_t::CUBLAS_OP_T,
                    cb::cublasOperation_t::CUBLAS_OP_N,
                    n as i32,
                    rows as i32,
                    k as i32,
                    &alpha as *const f32 as *const _,
                    wp as *const _,
                    bf16,
                    k as i32,
                    xp as *const _,
                    bf16,
                    k as i32,
                    &beta as *const f32 as *const _,
                    yp as *mut _,
                    y_type,
                    n as i32,
                    cb::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            };
            if status == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                sys::CUresult::CUDA_SUCCESS
            } else {
                sys::CUresult::CUDA_ERROR_UNKNOWN
            }
        });
        if status != cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            *self.failure.borrow_mut() = Some((label.to_string(), status_name(status)));
        }
        result
    }

    /// The GEMM that failed last with a cuBLAS status (the runtime error of that call carries
    /// `CUDA_ERROR_UNKNOWN`), as an error naming the GEMM and the status.
    pub fn take_failure(&self) -> Option<LlamaError> {
        self.failure
            .borrow_mut()
            .take()
            .map(|(label, status)| LlamaError::Cublas {
                call: "cublasGemmEx",
                label,
                status,
            })
    }
}

impl Drop for Cublas {
    fn drop(&mut self) {
        // SAFETY: handle came from cublasCreate and is destroyed once; cuBLAS waits for its
        // pending work. A failure cannot be reported from drop and leaks the handle only.
        let _ = unsafe { cb::cublasDestroy_v2(self.handle) };
    }
}

/// A GEMM operand: the buffer's device address and its declared access.
pub fn operand<T: graphsmith::Element>(b: &DeviceBuffer<T>) -> (u64, LibraryAccess) {
    (b.device_ptr(), graphsmith::read(b))
}

/// A GEMM output written (or, with `accumulate`, read and written).
pub fn output<T: graphsmith::Element>(
    b: &mut DeviceBuffer<T>,
    accumulate: bool,
) -> (u64, LibraryAccess) {
    let p = b.device_ptr();
    let a = if accumulate {
        graphsmith::read_write(b)
    } else {
        graphsmith::write(b)
    };
    (p, a)
}
