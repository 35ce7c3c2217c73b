//! cuBLASLt through cudarc's dynamically loaded bindings: a handle, per (rows, projection) a
//! matmul descriptor and its layouts made once with the heuristic's candidates
//! (`cublasLtMatmulAlgoGetHeuristic`, best first), a workspace per bucket allocated when the
//! handle is made (so nothing allocates while capturing), and matmuls issued as journaled
//! library calls that declare what they read and write, the workspace included. The algorithm
//! of each matmul is the heuristic's first until one is selected (the search times the
//! candidates, `step/search/lt.rs`) or set from the cache (checked with
//! `cublasLtMatmulAlgoCheck`).

mod params;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::cublas::sys::cublasOperation_t as Op;
use cudarc::cublaslt::sys as lt;
use graphsmith::{sys, Context, DeviceBuffer, LibraryAccess, Stream};

pub use params::{
    bucket_label, describe_status, workspace_bytes, workspace_slot, Element, MatmulParams,
    Projection, ALIGNMENT,
};

use super::cublas::{make_current, make_loadable};
use crate::error::{LlamaError, Result};

/// Heuristic candidates asked for per matmul (the search times them all).
pub const CANDIDATES: usize = 8;

/// An algorithm as the cache keeps it: cuBLASLt's opaque `cublasLtMatmulAlgo_t`, valid for the
/// cuBLASLt version that made it.
pub type AlgoData = [u64; 8];

/// libcublasLt as the workspace's one search for NVIDIA's libraries knows it (it ships beside
/// libcublas).
pub(crate) const CUBLASLT: graphsmith_locate::Library = graphsmith_locate::Library {
    soname: "libcublasLt.so.13",
    prefix: "libcublasLt.so",
    env_var: "GRAPHSMITH_CUBLASLT",
    wheel_dirs: &["nvidia/cu13/lib", "nvidia/cublas/lib", "nvidia/cu12/lib"],
    toolkit_dirs: &["lib64", "targets/x86_64-linux/lib"],
    install: "add its directory to LD_LIBRARY_PATH (it ships beside libcublas, in the CUDA \
              toolkit's lib64 and in the nvidia-cublas Python package)",
};

static LOADED: OnceLock<std::result::Result<String, String>> = OnceLock::new();

/// Makes libcublasLt loadable by cudarc, as [`super::cublas::ensure_cublas`] does libcublas
/// (`$GRAPHSMITH_CUBLASLT`, the loader, then graphsmith-locate's search).
pub fn ensure_cublaslt() -> Result<String> {
    LOADED
        .get_or_init(|| {
            // SAFETY: only tries to dlopen cudarc's candidate names; no cuBLASLt call is made.
            make_loadable(&CUBLASLT, || unsafe { lt::is_culib_present() })
        })
        .clone()
        .map_err(|e| LlamaError::CublasMissing(format!("libcublasLt: {e}")))
}

/// One matmul's descriptor, layouts, candidates and algorithm, made once.
struct Plan {
    desc: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatrixLayout_t,
    b: lt::cublasLtMatrixLayout_t,
    d: lt::cublasLtMatrixLayout_t,
    /// The heuristic's candidates that it says work, best first.
    candidates: Vec<lt::cublasLtMatmulAlgo_t>,
    /// The algorithm the matmul runs with.
    algo: lt::cublasLtMatmulAlgo_t,
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each was made by its create call in `CublasLt::plan` and is destroyed once;
        // no matmul is pending on the host side (cuBLASLt copies what a launch needs). A
        // failure cannot be reported from drop and leaks the object only.
        // A plan whose making failed part way holds nulls, which are skipped.
        unsafe {
            for layout in [self.d, self.b, self.a] {
                if !layout.is_null() {
                    let _ = lt::cublasLtMatrixLayoutDestroy(layout);
                }
            }
            if !self.desc.is_null() {
                let _ = lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

/// A cuBLASLt handle with a workspace per bucket and the plans of the matmuls it ran.
pub struct CublasLt {
    handle: lt::cublasLtHandle_t,
    version: usize,
    /// The buckets (ascending) whose workspaces these are, then one above them.
    buckets: Vec<usize>,
    workspaces: RefCell<Vec<DeviceBuffer<u8>>>,
    plans: RefCell<HashMap<(usize, Projection), Plan>>,
    /// Whether algorithms were chosen by measuring (or read from the cache).
    chosen: Cell<bool>,
    /// The last failed call, for [`CublasLt::take_failure`].
    failure: RefCell<Option<LlamaError>>,
}

// SAFETY: a cuBLASLt handle may be used from any thread as long as calls on it are not
// concurrent; every method takes `&self` from an owner used by one thread at a time (the
// decoder holds it behind `&mut`), so it moves between threads but is never shared.
unsafe impl Send for CublasLt {}

/// `st` as a `Result`, the error naming `call`, the matmul and its rows.
fn check(
    st: lt::cublasStatus_t,
    call: &'static str,
    matmul: &str,
    bucket: &str,
) -> Result<(), LlamaError> {
    if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Ok(());
    }
    Err(LlamaError::CublasLt {
        call,
        bucket: bucket.to_string(),
        matmul: matmul.to_string(),
        status: describe_status(&format!("{st:?}")),
    })
}

fn data_type(e: Element) -> lt::cudaDataType {
    match e {
        Element::Bf16 => lt::cudaDataType::CUDA_R_16BF,
        Element::F32 => lt::cudaDataType::CUDA_R_32F,
    }
}

impl CublasLt {
    /// A handle with a workspace for each of `buckets` (ascending) and one above them.
    pub fn new(ctx: &Context, label: &str, buckets: &[usize]) -> Result<CublasLt> {
        ensure_cublaslt()?;
        let mut workspaces = Vec::new();
        for slot in 0..=buckets.len() {
            let name = match buckets.get(slot) {
                Some(b) => format!("{label}/workspace.{b}"),
                None => format!("{label}/workspace.above"),
            };
            workspaces.push(ctx.alloc::<u8>(&name, workspace_bytes(slot, buckets))?);
        }
        make_current(ctx, "cublasLtCreate")?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: handle is a valid out pointer; the context is current.
        let st = unsafe { lt::cublasLtCreate(&mut handle) };
        if st != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            return Err(LlamaError::Cublas {
                call: "cublasLtCreate",
                label: label.to_string(),
                status: describe_status(&format!("{st:?}")),
            });
        }
        // SAFETY: a plain query of the loaded library.
        let version = unsafe { lt::cublasLtGetVersion() };
        Ok(CublasLt {
            handle,
            version,
            buckets: buckets.to_vec(),
            workspaces: RefCell::new(workspaces),
            plans: RefCell::default(),
            chosen: Cell::new(false),
            failure: RefCell::default(),
        })
    }

    /// The loaded cuBLASLt's version (`cublasLtGetVersion`): algorithms are kept per version.
    pub fn version(&self) -> usize {
        self.version
    }

    /// Whether algorithms were chosen by measuring or read from the cache.
    pub fn has_chosen(&self) -> bool {
        self.chosen.get()
    }

    /// Marks the algorithms as chosen.
    pub fn set_chosen(&self) {
        self.chosen.set(true);
    }

    /// Makes the plan of `projection` at `m.rows` rows, once (host calls only, none on a stream).
    pub fn prepare(&self, projection: Projection, m: MatmulParams) -> Result<()> {
        if self.plans.borrow().contains_key(&(m.rows, projection)) {
            return Ok(());
        }
        let plan = self.plan(projection, m)?;
        self.plans.borrow_mut().insert((m.rows, projection), plan);
        Ok(())
    }

    fn plan(&self, projection: Projection, m: MatmulParams) -> Result<Plan> {
        let bucket = bucket_label(m.rows, &self.buckets);
        let name = projection.name();
        let fail = |st, call| check(st, call, name, &bucket);
        let d = m.descriptor();
        let mut plan = Plan {
            desc: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            d: std::ptr::null_mut(),
            candidates: Vec::new(),
            algo: lt::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        let op_t = Op::CUBLAS_OP_T;
        let op_n = Op::CUBLAS_OP_N;
        let op_size = std::mem::size_of::<Op>();
        // SAFETY: every out pointer is a field of `plan` (destroyed by its Drop when set); the
        // attribute buffers are host values of the attribute's type and size.
        unsafe {
            fail(
                lt::cublasLtMatmulDescCreate(
                    &mut plan.desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType::CUDA_R_32F,
                ),
                "cublasLtMatmulDescCreate",
            )?;
            let transa = if d.transpose_a { &op_t } else { &op_n };
            for (attr, value) in [
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    transa,
                ),
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                    &op_n,
                ),
            ] {
                let st = lt::cublasLtMatmulDescSetAttribute(
                    plan.desc,
                    attr,
                    value as *const Op as *const c_void,
                    op_size,
                );
                fail(st, "cublasLtMatmulDescSetAttribute")?;
            }
            for (out, l) in [(&mut plan.a, d.a), (&mut plan.b, d.b), (&mut plan.d, d.d)] {
                let st =
                    lt::cublasLtMatrixLayoutCreate(out, data_type(l.element), l.rows, l.cols, l.ld);
                fail(st, "cublasLtMatrixLayoutCreate")?;
            }
        }
        plan.candidates = self.heuristic(&plan, m, (name, &bucket))?;
        plan.algo = plan.candidates.first().copied().unwrap_or(plan.algo);
        Ok(plan)
    }

    /// The heuristic's candidates for `plan` (those it says work), best first; none is an error.
    fn heuristic(
        &self,
        plan: &Plan,
        m: MatmulParams,
        (name, bucket): (&str, &str),
    ) -> Result<Vec<lt::cublasLtMatmulAlgo_t>> {
        let fail = |st, call| check(st, call, name, bucket);
        let ws = workspace_bytes(workspace_slot(m.rows, &self.buckets), &self.buckets) as u64;
        let mut pref = std::ptr::null_mut();
        // SAFETY: pref is a valid out pointer.
        fail(
            unsafe { lt::cublasLtMatmulPreferenceCreate(&mut pref) },
            "cublasLtMatmulPreferenceCreate",
        )?;
        // SAFETY: every attribute is given a host value of its documented type (uint64_t for
        // the workspace, uint32_t for the alignments); pref is live until destroyed below; the
        // results array holds CANDIDATES entries, the count asked for.
        let found = unsafe {
            use lt::cublasLtMatmulPreferenceAttributes_t as P;
            let align = ALIGNMENT as u32;
            let mut results: [lt::cublasLtMatmulHeuristicResult_t; CANDIDATES] = std::mem::zeroed();
            let mut count = 0i32;
            let mut st = lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            );
            for attr in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ] {
                if st == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    st = lt::cublasLtMatmulPreferenceSetAttribute(
                        pref,
                        attr,
                        &align as *const u32 as *const c_void,
                        4,
                    );
                }
            }
            let set = fail(st, "cublasLtMatmulPreferenceSetAttribute");
            let got = set.and_then(|()| {
                let st = lt::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    plan.desc,
                    plan.a,
                    plan.b,
                    plan.d,
                    plan.d,
                    pref,
                    CANDIDATES as i32,
                    results.as_mut_ptr(),
                    &mut count,
                );
                fail(st, "cublasLtMatmulAlgoGetHeuristic")
            });
            let _ = lt::cublasLtMatmulPreferenceDestroy(pref);
            got?;
            let n = (count.max(0) as usize).min(CANDIDATES);
            results[..n]
                .iter()
                // The status is read as the integer it is (0: success), never as an enum.
                .filter(|r| std::ptr::addr_of!(r.state).cast::<u32>().read() == 0)
                .filter(|r| r.workspaceSize as u64 <= ws)
                .map(|r| r.algo)
                .collect::<Vec<_>>()
        };
        if found.is_empty() {
            return fail(
                lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED,
                "cublasLtMatmulAlgoGetHeuristic",
            )
            .map(|()| found);
        }
        Ok(found)
    }

    /// How many candidates the heuristic gave `projection` at `rows` rows (0 before
    /// [`CublasLt::prepare`]).
    pub fn candidate_count(&self, rows: usize, projection: Projection) -> usize {
        self.plans
            .borrow()
            .get(&(rows, projection))
            .map_or(0, |p| p.candidates.len())
    }

    /// Runs `projection` at `rows` rows with its `i`-th candidate from now on.
    pub fn select(&self, rows: usize, projection: Projection, i: usize) {
        if let Some(p) = self.plans.borrow_mut().get_mut(&(rows, projection)) {
            if let Some(&algo) = p.candidates.get(i) {
                p.algo = algo;
            }
        }
    }

    /// The algorithm `projection` runs with at `rows` rows, as the cache keeps it.
    pub fn algo(&self, rows: usize, projection: Projection) -> Option<AlgoData> {
        self.plans
            .borrow()
            .get(&(rows, projection))
            .map(|p| p.algo.data)
    }

    /// Sets the algorithm of `projection` at `m.rows` rows to `data` (from the cache) if
    /// cuBLASLt accepts it for this matmul and its workspace (`cublasLtMatmulAlgoCheck`);
    /// otherwise the algorithm stays the heuristic's first and the error says why.
    pub fn set_algo(&self, projection: Projection, m: MatmulParams, data: AlgoData) -> Result<()> {
        self.prepare(projection, m)?;
        let mut plans = self.plans.borrow_mut();
        let Some(plan) = plans.get_mut(&(m.rows, projection)) else {
            return Ok(());
        };
        let algo = lt::cublasLtMatmulAlgo_t { data };
        // SAFETY: plain data, overwritten by the call.
        let mut result: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: the plan's descriptor and layouts are live; algo and result are host values.
        let st = unsafe {
            lt::cublasLtMatmulAlgoCheck(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.d,
                plan.d,
                &algo,
                &mut result,
            )
        };
        let bucket = bucket_label(m.rows, &self.buckets);
        check(st, "cublasLtMatmulAlgoCheck", projection.name(), &bucket)?;
        let ws = workspace_bytes(workspace_slot(m.rows, &self.buckets), &self.buckets);
        if result.workspaceSize > ws {
            return check(
                lt::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE,
                "cublasLtMatmulAlgoCheck (workspace)",
                projection.name(),
                &bucket,
            );
        }
        plan.algo = algo;
        Ok(())
    }

    /// `y[rows, n] = x[rows, k] @ w[n, k]^T (+ y when `m.accumulate`)` with the plan's
    /// algorithm: one journaled library call on `stream` that reads `x` and `w`, writes `y`
    /// (reads it too when accumulating) and the bucket's workspace.
    #[track_caller]
    pub fn matmul(
        &self,
        stream: &Stream,
        label: &str,
        (projection, m): (Projection, MatmulParams),
        x: (u64, LibraryAccess),
        w: (u64, LibraryAccess),
        y: (u64, LibraryAccess),
    ) -> graphsmith::Result<()> {
        let bucket = bucket_label(m.rows, &self.buckets);
        let planned = self.prepare(projection, m);
        let slot = workspace_slot(m.rows, &self.buckets);
        let mut workspaces = self.workspaces.borrow_mut();
        let ws = &mut workspaces[slot.min(self.buckets.len())];
        let (ws_ptr, ws_bytes) = (ws.device_ptr(), workspace_bytes(slot, &self.buckets));
        let ws_access = graphsmith::write(ws);
        let mut failure: Option<LlamaError> = planned.err();
        let misaligned = [x.0, w.0, y.0].iter().any(|p| p % ALIGNMENT != 0);
        if failure.is_none() && misaligned {
            failure = Some(LlamaError::CublasLt {
                call: "cublasLtMatmul",
                bucket: bucket.clone(),
                matmul: projection.name().to_string(),
                status: format!(
                    "an operand is not {ALIGNMENT}-byte aligned (x {:#x}, w {:#x}, y {:#x}): pass whole buffers",
                    x.0, w.0, y.0
                ),
            });
        }
        let plans = self.plans.borrow();
        let plan = plans.get(&(m.rows, projection));
        let (alpha, beta) = (1.0f32, m.descriptor().beta);
        let (xp, wp, yp) = (x.0, w.0, y.0);
        let result = stream.library_call(label, &[x.1, w.1], &[y.1, ws_access], |raw| {
            let Some(plan) = plan.filter(|_| failure.is_none()) else {
                return sys::CUresult::CUDA_ERROR_INVALID_VALUE;
            };
            // SAFETY: the handle and the plan are live; x, w and y are device buffers the
            // caller sized for these shapes (`MatmulParams::bytes`) and kept alive by the
            // call's declared accesses, aligned as the heuristic was told (checked above);
            // the workspace is this bucket's, of ws_bytes, the most the algorithm was chosen
            // for; alpha and beta are host f32 (the default pointer mode).
            let st = unsafe {
                lt::cublasLtMatmul(
                    self.handle,
                    plan.desc,
                    &alpha as *const f32 as *const c_void,
                    wp as *const c_void,
                    plan.a,
                    xp as *const c_void,
                    plan.b,
                    &beta as *const f32 as *const c_void,
                    yp as *const c_void,
                    plan.d,
                    yp as *mut c_void,
                    plan.d,
                    &plan.algo,
                    ws_ptr as *mut c_void,
                    ws_bytes,
                    raw as lt::cudaStream_t,
                )
            };
            match check(st, "cublasLtMatmul", projection.name(), &bucket) {
                Ok(()) => sys::CUresult::CUDA_SUCCESS,
                Err(e) => {
                    failure = Some(e);
                    sys::CUresult::CUDA_ERROR_UNKNOWN
                }
            }
        });
        if let Some(e) = failure {
            *self.failure.borrow_mut() = Some(e);
        }
        result
    }

    /// The matmul that failed last with a cuBLASLt status or before it was issued (the
    /// runtime error of that call carries a CUDA code only), as an error naming the call, the
    /// matmul, its bucket and the status.
    pub fn take_failure(&self) -> Option<LlamaError> {
        self.failure.borrow_mut().take()
    }
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        // The plans first: their descriptors belong to no handle but are freed before it.
        self.plans.get_mut().clear();
        // SAFETY: handle came from cublasLtCreate and is destroyed once. A failure cannot be
        // reported from drop and leaks the handle only.
        let _ = unsafe { lt::cublasLtDestroy(self.handle) };
    }
}
