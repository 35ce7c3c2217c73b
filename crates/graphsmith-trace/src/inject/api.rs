//! The CUPTI and driver functions the tracer calls, resolved by the tracer itself: cudarc's
//! dynamic loader panics on a missing library or symbol and picks libcupti by bare name, while
//! the tracer must (a) never panic inside someone else's process and (b) use the very libcupti
//! the process already loaded, if any (a second copy of CUPTI in one process does not see the
//! first copy's subscribers; see docs/trace.md).

use std::ffi::{c_char, c_int, c_void, CStr};

use cudarc::cupti::sys::{CUpti_CallbackDomain, CUpti_CallbackFunc, CUpti_SubscriberHandle};
use graphsmith_readback::DriverTable;
use libloading::os::unix::{Library, RTLD_LAZY, RTLD_NOW};

/// `CUptiResult` and `CUresult` are C enums; the tracer reads them as integers.
pub(crate) type Status = u32;

type Subscribe =
    unsafe extern "C" fn(*mut CUpti_SubscriberHandle, CUpti_CallbackFunc, *mut c_void) -> Status;
type EnableDomain =
    unsafe extern "C" fn(u32, CUpti_SubscriberHandle, CUpti_CallbackDomain) -> Status;
type GetVersion = unsafe extern "C" fn(*mut u32) -> Status;
type ResultString = unsafe extern "C" fn(Status, *mut *const c_char) -> Status;

/// libcupti, as found.
pub(crate) struct Cupti {
    _lib: Library,
    /// Where it came from, for the report.
    pub origin: String,
    pub subscribe: Subscribe,
    pub enable_domain: EnableDomain,
    pub get_version: GetVersion,
    pub result_string: ResultString,
}

/// Why libcupti could not be used.
pub(crate) enum CuptiError {
    Missing(String),
    Incomplete(String),
}

fn loaded_cupti() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|f| f.starts_with("libcupti.so"))
        })
        .map(str::to_string)
}

fn open(path: &str) -> Result<Library, String> {
    // SAFETY: loading libcupti runs its initialisers, which only set up CUPTI's own state; the
    // library stays loaded for the life of the process (the handle is never dropped while the
    // subscription lives: Cupti is kept in a static).
    unsafe { Library::open(Some(path), RTLD_NOW) }.map_err(|e| format!("{path}: {e}"))
}

pub(crate) fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: each call site names the symbol with the C signature T it has in cupti.h or
    // cuda.h; the pointer is copied out and used only while the library stays loaded.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{name}: {e}"))
}

impl Cupti {
    /// The process's own libcupti if one is loaded, else `GRAPHSMITH_CUPTI` (set by
    /// `graphsmith trace`), else the library path.
    pub(crate) fn load() -> Result<Cupti, CuptiError> {
        let mut tried = Vec::new();
        let mut candidates: Vec<(String, String)> = Vec::new();
        if let Some(p) = loaded_cupti() {
            candidates.push((p.clone(), format!("{p}, already loaded by the process")));
        }
        if let Ok(p) = std::env::var("GRAPHSMITH_CUPTI") {
            if !p.is_empty() {
                candidates.push((p.clone(), format!("{p}, found by graphsmith trace")));
            }
        }
        for name in ["libcupti.so.13", "libcupti.so"] {
            candidates.push((name.to_string(), format!("{name} on the library path")));
        }
        for (path, origin) in candidates {
            match open(&path) {
                Ok(lib) => return Cupti::resolve(lib, origin),
                Err(e) => tried.push(e),
            }
        }
        Err(CuptiError::Missing(tried.join("; ")))
    }

    fn resolve(lib: Library, origin: String) -> Result<Cupti, CuptiError> {
        Ok(Cupti {
            subscribe: symbol(&lib, "cuptiSubscribe").map_err(CuptiError::Incomplete)?,
            enable_domain: symbol(&lib, "cuptiEnableDomain").map_err(CuptiError::Incomplete)?,
            get_version: symbol(&lib, "cuptiGetVersion").map_err(CuptiError::Incomplete)?,
            result_string: symbol(&lib, "cuptiGetResultString").map_err(CuptiError::Incomplete)?,
            _lib: lib,
            origin,
        })
    }

    /// Another function of the same libcupti (`--graphs` resolves its activity API with it).
    pub(crate) fn symbol<T: Copy>(&self, name: &str) -> Result<T, String> {
        symbol(&self._lib, name)
    }

    /// CUPTI's text for a result.
    pub(crate) fn describe(&self, status: Status) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: cuptiGetResultString writes a pointer to a static string (or leaves it null).
        let r = unsafe { (self.result_string)(status, &mut text) };
        if r != 0 || text.is_null() {
            return format!("CUPTI error {status}");
        }
        // SAFETY: non-null, NUL-terminated, static in libcupti.
        let s = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{s} ({status})")
    }
}

type GetCaptureInfoV3 = unsafe extern "C" fn(
    u64,
    *mut u32,
    *mut u64,
    *mut c_void,
    *mut c_void,
    *mut c_void,
    *mut usize,
) -> Status;
type GetCaptureInfoV2 =
    unsafe extern "C" fn(u64, *mut u32, *mut u64, *mut c_void, *mut c_void, *mut usize) -> Status;
type GraphGetNodes = unsafe extern "C" fn(u64, *mut u64, *mut usize) -> Status;
type NodeGetType = unsafe extern "C" fn(u64, *mut u32) -> Status;
type ErrorText = unsafe extern "C" fn(Status, *mut *const c_char) -> Status;

/// The libcuda the process loaded, never loading one: the tracer runs once the driver has
/// called `InitializeInjection`.
pub(crate) fn loaded_libcuda() -> Result<Library, libloading::Error> {
    // SAFETY: libcuda.so.1 is already loaded (the driver called InitializeInjection);
    // RTLD_NOLOAD only takes a reference to it, running no initialiser.
    unsafe { Library::open(Some("libcuda.so.1"), RTLD_LAZY | libc::RTLD_NOLOAD) }
}

/// The driver functions the tracer calls from inside callbacks (each call triggers a nested
/// callback, which the tracer's reentrancy guard ignores).
pub(crate) struct Driver {
    _lib: Library,
    info_v3: Option<GetCaptureInfoV3>,
    info_v2: Option<GetCaptureInfoV2>,
    graph_get_nodes: Option<GraphGetNodes>,
    node_get_type: Option<NodeGetType>,
    error_name: Option<ErrorText>,
    error_string: Option<ErrorText>,
}

/// A stream's capture status: `CUstreamCaptureStatus` and the capture id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capturing {
    No,
    /// Active or invalidated, with the driver's capture id.
    Yes(u64),
    /// The driver could not say.
    Unknown,
}

impl Driver {
    /// The libcuda that loaded the tracer (the process has it already).
    pub(crate) fn load() -> Option<Driver> {
        let lib = loaded_libcuda().ok()?;
        Some(Driver {
            info_v3: symbol(&lib, "cuStreamGetCaptureInfo_v3").ok(),
            info_v2: symbol(&lib, "cuStreamGetCaptureInfo_v2").ok(),
            graph_get_nodes: symbol(&lib, "cuGraphGetNodes").ok(),
            node_get_type: symbol(&lib, "cuGraphNodeGetType").ok(),
            error_name: symbol(&lib, "cuGetErrorName").ok(),
            error_string: symbol(&lib, "cuGetErrorString").ok(),
            _lib: lib,
        })
    }

    /// Whether a stream captures. Never asks about the legacy stream (the caller checks).
    pub(crate) fn capturing(&self, stream: u64) -> Capturing {
        let mut status: u32 = 0;
        let mut id: u64 = 0;
        let null: *mut c_void = std::ptr::null_mut();
        let no_count: *mut usize = std::ptr::null_mut();
        let r = if let Some(f) = self.info_v3 {
            // SAFETY: cuStreamGetCaptureInfo_v3(stream, status*, id*, graph*, deps**, edges**,
            // n*): the optional outputs may be NULL; status and id point to locals.
            unsafe { f(stream, &mut status, &mut id, null, null, null, no_count) }
        } else if let Some(f) = self.info_v2 {
            // SAFETY: cuStreamGetCaptureInfo_v2(stream, status*, id*, graph*, deps**, n*), the
            // optional outputs NULL, as above.
            unsafe { f(stream, &mut status, &mut id, null, null, no_count) }
        } else {
            return Capturing::Unknown;
        };
        match (r, status) {
            (0, 0) => Capturing::No,
            (0, _) => Capturing::Yes(id),
            _ => Capturing::Unknown,
        }
    }

    /// Node counts of a graph by kind.
    pub(crate) fn node_kinds(&self, graph: u64) -> Vec<u32> {
        let (Some(get_nodes), Some(get_type)) = (self.graph_get_nodes, self.node_get_type) else {
            return Vec::new();
        };
        let mut n: usize = 0;
        // SAFETY: cuGraphGetNodes with a NULL array writes only the count.
        if unsafe { get_nodes(graph, std::ptr::null_mut(), &mut n) } != 0 || n == 0 {
            return Vec::new();
        }
        let n = n.min(1 << 20);
        let mut nodes = vec![0u64; n];
        let mut got = n;
        // SAFETY: the array holds `got` node handles; the driver writes at most that many and
        // updates `got`.
        if unsafe { get_nodes(graph, nodes.as_mut_ptr(), &mut got) } != 0 {
            return Vec::new();
        }
        nodes.truncate(got.min(n));
        nodes
            .iter()
            .filter_map(|&node| {
                let mut t: u32 = 0;
                // SAFETY: node came from cuGraphGetNodes on a live graph; t is a local.
                (unsafe { get_type(node, &mut t) } == 0).then_some(t)
            })
            .collect()
    }

    fn text(f: Option<ErrorText>, code: Status) -> Option<String> {
        let f = f?;
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName/String write a pointer to a static string, or fail.
        if unsafe { f(code, &mut p) } != 0 || p.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated, static in libcuda.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// `cuGetErrorName` and `cuGetErrorString` of a code.
    pub(crate) fn describe(&self, code: Status) -> (Option<String>, Option<String>) {
        (
            Self::text(self.error_name, code),
            Self::text(self.error_string, code),
        )
    }
}

/// The driver functions `--hazards` reads graphs back with, as graphsmith-readback's table,
/// resolved from the libcuda the process loaded (never through cudarc's loader, which panics on
/// a missing symbol). Left out on purpose, so that the read-back makes the calls it always
/// made: host, event, allocation and free node parameters and the kernels' cluster shapes
/// (the hazard check needs none of them; such nodes keep their kind without their details).
pub(crate) struct GraphDriver {
    _lib: Library,
    pub table: DriverTable,
    pub error_name: Option<ErrorText>,
}

fn required<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    symbol(lib, name).map_err(|_| {
        format!("the driver (libcuda.so.1) has no {name}: update the driver to check hazards")
    })
}

impl GraphDriver {
    /// Resolves the functions; a missing one the read-back cannot do without is the reason the
    /// hazards are not checked.
    pub(crate) fn load() -> Result<GraphDriver, String> {
        let lib =
            loaded_libcuda().map_err(|e| format!("libcuda.so.1 could not be opened again: {e}"))?;
        let graph_get_edges_v2 = symbol(&lib, "cuGraphGetEdges_v2").ok();
        let graph_get_edges = if graph_get_edges_v2.is_none() {
            symbol(&lib, "cuGraphGetEdges").ok()
        } else {
            None
        };
        if graph_get_edges_v2.is_none() && graph_get_edges.is_none() {
            return Err("the driver (libcuda.so.1) has no cuGraphGetEdges_v2".into());
        }
        let table = DriverTable {
            graph_get_nodes: Some(required(&lib, "cuGraphGetNodes")?),
            node_get_type: Some(required(&lib, "cuGraphNodeGetType")?),
            mem_get_address_range: Some(required(&lib, "cuMemGetAddressRange_v2")?),
            graph_get_edges_v2,
            graph_get_edges,
            kernel_node_get_params: symbol(&lib, "cuGraphKernelNodeGetParams_v2").ok(),
            kernel_get_function: symbol(&lib, "cuKernelGetFunction").ok(),
            func_get_name: symbol(&lib, "cuFuncGetName").ok(),
            func_get_param_info: symbol(&lib, "cuFuncGetParamInfo").ok(),
            memcpy_node_get_params: symbol(&lib, "cuGraphMemcpyNodeGetParams").ok(),
            memset_node_get_params: symbol(&lib, "cuGraphMemsetNodeGetParams").ok(),
            child_graph_node_get_graph: symbol(&lib, "cuGraphChildGraphNodeGetGraph").ok(),
            func_get_attribute: None,
            host_node_get_params: None,
            event_record_node_get_event: None,
            event_wait_node_get_event: None,
            mem_alloc_node_get_params: None,
            mem_free_node_get_params: None,
        };
        Ok(GraphDriver {
            table,
            error_name: symbol(&lib, "cuGetErrorName").ok(),
            _lib: lib,
        })
    }
}

/// `InitializeInjection` and the callback never return an error to CUDA; this documents the
/// return value the driver expects from the injection entry point.
pub(crate) const INJECTION_OK: c_int = 1;

/// The loaded libraries are shared between threads (the callbacks run on the application's);
/// a library handle and plain function pointers are `Send + Sync` without any `unsafe impl`.
#[cfg(test)]
mod thread_safety {
    #[test]
    fn loaded_apis_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<super::Cupti>();
        send_sync::<super::Driver>();
        send_sync::<super::GraphDriver>();
        send_sync::<crate::inject::readback::GraphApi>();
    }
}
