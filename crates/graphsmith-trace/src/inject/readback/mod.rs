//! `--hazards` inside the traced process: reads an instantiated `CUgraph` back with
//! graphsmith-readback's reader, over the driver functions the tracer resolved itself
//! ([`super::api::GraphDriver`]), into a [`RawGraph`], and hands it to the pure check
//! ([`crate::hazard::check_bounded`]), bounded by PyTorch's caching-allocator blocks when the
//! process runs PyTorch (`super::python::eval`), else by the driver's allocations.
//!
//! Runs inside the instantiate callback, so every driver call here triggers a nested CUPTI
//! callback, which the tracer's per-thread reentrancy flag ignores (`callback::enter_busy`).
//! The read is lenient ([`Policy::Lenient`]): a node whose parameters cannot be read is kept
//! with what is known of it (a kernel's unread arguments are counted in the report), and a
//! missing function is a "not checked" line in the report, never a failure of the host. The
//! reader holds no lock, and a panic in the pure part is caught before it reaches the driver.

use std::ffi::{c_char, CStr};

use cudarc::driver::sys;
use graphsmith_readback::{Limits, Policy, ReadError, Reader};

use super::api::{GraphDriver, Status};
use super::python;
use crate::explain::code_label;
use crate::freed::{self, Touch};
use crate::hazard::{self, HazardCheck, RawGraph};
use crate::races::{self, GraphInfo};

/// The driver functions the read-back calls.
pub(crate) struct GraphApi {
    driver: GraphDriver,
}

impl GraphApi {
    /// Resolves the functions from the libcuda the process loaded.
    pub(crate) fn load() -> Result<GraphApi, String> {
        GraphDriver::load().map(|driver| GraphApi { driver })
    }

    fn reader(&self) -> Reader<'_> {
        // SAFETY: GraphDriver::load resolved every function in the table by its cuda.h name,
        // with that name's signature, from the libcuda it keeps open while self lives.
        unsafe { Reader::new(&self.driver.table, Policy::Lenient, Limits::BOUNDED) }
    }

    fn failed(&self, call: &str, code: Status) -> String {
        let mut name: *const c_char = std::ptr::null();
        let known = match self.driver.error_name {
            // SAFETY: cuGetErrorName writes a pointer to a static string, or fails.
            Some(f) => (unsafe { f(code, &mut name) }) == 0 && !name.is_null(),
            None => false,
        };
        // SAFETY: non-null, NUL-terminated, static in libcuda (checked just above).
        let name = known.then(|| {
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        });
        format!("{call} returned {}", code_label(code, name.as_deref()))
    }

    /// The allocation holding a device address, as (base, size).
    pub(crate) fn allocation_of(&self, address: u64) -> Option<(u64, u64)> {
        self.reader().allocation_of(address)
    }

    /// Reads a graph back.
    ///
    /// # Safety
    /// `graph` must be a live `CUgraph` that no other thread changes during the call, and the
    /// context of its kernels current on this thread.
    pub(crate) unsafe fn read(&self, graph: u64) -> Result<RawGraph, String> {
        // SAFETY: forwarded contract.
        match unsafe { self.reader().read(graph as usize as sys::CUgraph) } {
            Ok(read) => Ok(read.raw),
            Err(ReadError::Call { call, code }) => Err(self.failed(call, code)),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// The hazard check of a graph just instantiated (when `hazards`), the ranges its nodes
/// touch (when `touches`, for `--freed`) and its description for the launch-order check (when
/// `describe`, unlabelled): read back once, modelled, checked. The allocator's
/// blocks are asked for only for the hazard check; `tracked` gives the allocations `--freed`
/// saw, asked before the driver. A panic in the pure part is caught here and
/// becomes a "not checked" reason.
///
/// # Safety
/// As [`GraphApi::read`]: `graph` was just instantiated by the calling thread.
pub(crate) unsafe fn check_instantiated(
    api: &Result<GraphApi, String>,
    graph: u64,
    hazards: bool,
    touches: bool,
    describe: bool,
    tracked: &dyn Fn(u64) -> Option<(u64, u64)>,
) -> (HazardCheck, Option<Vec<Touch>>, Option<GraphInfo>) {
    let api = match api {
        Ok(a) => a,
        Err(reason) => {
            let check = HazardCheck::NotChecked {
                reason: reason.clone(),
            };
            return (check, None, None);
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        match unsafe { api.read(graph) } {
            Ok(raw) => {
                // Read with no lock held: it may wait for the GIL (inject/python_eval.rs).
                let snapshot = if hazards {
                    python::eval::allocator_snapshot()
                        .map(|text| hazard::bounds::parse_snapshot(&text))
                } else {
                    Err("not asked".to_string())
                };
                // The allocations `--freed` saw first (exact for pool allocations), then the
                // driver's.
                let (built, bounds) = hazard::bounds::build_bounded(&raw, snapshot, &mut |a| {
                    tracked(a).or_else(|| api.allocation_of(a))
                });
                let check = if hazards {
                    hazard::bounds::check_with_bounds(&built, bounds)
                } else {
                    HazardCheck::NotChecked {
                        reason: "not asked".to_string(),
                    }
                };
                (
                    check,
                    touches.then(|| freed::touches(&built.graph)),
                    describe.then(|| races::graph_info("", &built.graph)),
                )
            }
            Err(reason) => (HazardCheck::NotChecked { reason }, None, None),
        }
    }));
    result.unwrap_or_else(|_| {
        let check = HazardCheck::NotChecked {
            reason: "the hazard check failed inside graphsmith trace (a bug: please report it)"
                .into(),
        };
        (check, None, None)
    })
}
