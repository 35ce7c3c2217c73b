//! `--graphs` inside the traced process: times the graph calls (begin, end, instantiate,
//! upload, create) from the driver callback's entry to its exit, records the driver
//! allocations made while a capture runs, reads the bytes of each instantiated graph's
//! memory-allocation nodes, and counts each executable's launches (with their device time,
//! [`super::graph_activity`]). Off (`None` in the tracer) unless `GRAPHSMITH_TRACE_GRAPHS=1`.
//!
//! The hooks run inside the tracer's callback, behind its reentrancy flag: the driver calls
//! made here (`cuStreamGetCaptureInfo`, the node read-back) come back through the callback and
//! are ignored. No lock is held across a driver call.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys::{self as cs, CUpti_CallbackData, CUpti_driver_api_trace_cbid as D};
use libloading::os::unix::Library;

use super::api::Driver;
use super::api::{self, Capturing, Status};
use super::cbid::{is_legacy, PER_THREAD};
use super::lock::lock;
use super::{graph_activity, python, stack, thread};
use crate::event::{Event, GRAPHS_VAR};
use crate::graphs::event::{
    AllocKind, ExecLaunches, GraphAlloc, GraphCall, GraphCallKind, GraphEvent, GraphLaunches,
};

/// Executables whose launches are counted at once; past it, new ones are not counted.
const MAX_EXECS: usize = 1 << 16;
/// Memory-allocation nodes read per graph at most.
const MAX_NODES: usize = 1 << 20;

/// What a hooked call's parameters hold.
#[derive(Clone, Copy)]
struct Args {
    stream: Option<u64>,
    graph: Option<u64>,
    exec: Option<u64>,
    /// Where the driver writes a handle or an address (graph, executable, pointer).
    out: *mut u64,
    bytes: u64,
    /// `cuMemAllocPitch_v2`: where the pitch is written, and the height.
    pitch: *mut usize,
    height: u64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            stream: None,
            graph: None,
            exec: None,
            out: std::ptr::null_mut(),
            bytes: 0,
            pitch: std::ptr::null_mut(),
            height: 0,
        }
    }
}

type Reader = fn(*const c_void) -> Args;

// Each reader is only called with the `functionParams` CUPTI passes for its own callback id
// (see `hooks`), which points to that call's `<name>_params_st`.
macro_rules! read {
    ($ty:ident { $($field:ident => $arg:ident),* }) => {{
        fn read(p: *const c_void) -> Args {
            let p = p.cast::<cs::$ty>();
            let mut a = Args::default();
            // SAFETY: CUPTI passes, for this callback id, a valid pointer to this parameter
            // struct for the duration of the callback; fields are plain handles, sizes and
            // pointers, read by value.
            unsafe {
                $( read!(@set a, p, $field, $arg); )*
            }
            a
        }
        read as Reader
    }};
    (@set $a:ident, $p:ident, $f:ident, stream) => { $a.stream = Some((*$p).$f as u64) };
    (@set $a:ident, $p:ident, $f:ident, graph) => { $a.graph = Some((*$p).$f as u64) };
    (@set $a:ident, $p:ident, $f:ident, exec) => { $a.exec = Some((*$p).$f as u64) };
    (@set $a:ident, $p:ident, $f:ident, out) => { $a.out = (*$p).$f.cast::<u64>() };
    (@set $a:ident, $p:ident, $f:ident, bytes) => { $a.bytes = (*$p).$f as u64 };
    (@set $a:ident, $p:ident, $f:ident, pitch) => { $a.pitch = (*$p).$f.cast::<usize>() };
    (@set $a:ident, $p:ident, $f:ident, height) => { $a.height = (*$p).$f as u64 };
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum What {
    Timed(GraphCallKind),
    Alloc(AllocKind),
    Launch,
}

#[derive(Clone, Copy)]
struct Hook {
    what: What,
    /// A `_ptsz` variant: a NULL stream is the per-thread stream.
    per_thread: bool,
    read: Reader,
}

fn hooks() -> Vec<Option<Hook>> {
    let mut t: Vec<Option<Hook>> = vec![None; D::CUPTI_DRIVER_TRACE_CBID_SIZE as usize];
    let mut set = |id: D, what: What, per_thread: bool, read: Reader| {
        if let Some(s) = t.get_mut(id as usize) {
            *s = Some(Hook {
                what,
                per_thread,
                read,
            });
        }
    };
    use GraphCallKind::*;
    use What::*;
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,
        Timed(Begin),
        false,
        read!(cuStreamBeginCapture_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
        Timed(Begin),
        true,
        read!(cuStreamBeginCapture_ptsz_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
        Timed(Begin),
        false,
        read!(cuStreamBeginCapture_v2_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
        Timed(Begin),
        true,
        read!(cuStreamBeginCapture_v2_ptsz_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,
        Timed(Begin),
        false,
        read!(cuStreamBeginCaptureToGraph_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
        Timed(Begin),
        true,
        read!(cuStreamBeginCaptureToGraph_ptsz_params_st { hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
        Timed(End),
        false,
        read!(cuStreamEndCapture_params_st { hStream => stream, phGraph => out }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
        Timed(End),
        true,
        read!(cuStreamEndCapture_ptsz_params_st { hStream => stream, phGraph => out }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate,
        Timed(Instantiate),
        false,
        read!(cuGraphInstantiate_params_st { phGraphExec => out, hGraph => graph }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
        Timed(Instantiate),
        false,
        read!(cuGraphInstantiate_v2_params_st { phGraphExec => out, hGraph => graph }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
        Timed(Instantiate),
        false,
        read!(cuGraphInstantiateWithFlags_params_st { phGraphExec => out, hGraph => graph }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams,
        Timed(Instantiate),
        false,
        read!(cuGraphInstantiateWithParams_params_st { phGraphExec => out, hGraph => graph }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz,
        Timed(Instantiate),
        true,
        read!(cuGraphInstantiateWithParams_ptsz_params_st { phGraphExec => out, hGraph => graph }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphUpload,
        Timed(Upload),
        false,
        read!(cuGraphUpload_params_st { hGraph => exec, hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphUpload_ptsz,
        Timed(Upload),
        true,
        read!(cuGraphUpload_ptsz_params_st { hGraphExec => exec, hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphCreate,
        Timed(Create),
        false,
        read!(cuGraphCreate_params_st { phGraph => out }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
        Alloc(AllocKind::Device),
        false,
        read!(cuMemAlloc_v2_params_st { dptr => out, bytesize => bytes }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
        Alloc(AllocKind::Pitched),
        false,
        read!(cuMemAllocPitch_v2_params_st { dptr => out, pPitch => pitch, Height => height }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
        Alloc(AllocKind::Managed),
        false,
        read!(cuMemAllocManaged_params_st { dptr => out, bytesize => bytes }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
        Alloc(AllocKind::Physical),
        false,
        read!(cuMemCreate_params_st { size => bytes }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        Launch,
        false,
        read!(cuGraphLaunch_params_st { hGraph => exec, hStream => stream }),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
        Launch,
        true,
        read!(cuGraphLaunch_ptsz_params_st { hGraphExec => exec, hStream => stream }),
    );
    t
}

type GraphGetNodes = unsafe extern "C" fn(u64, *mut u64, *mut usize) -> Status;
type NodeGetType = unsafe extern "C" fn(u64, *mut u32) -> Status;
type AllocNodeGetParams =
    unsafe extern "C" fn(u64, *mut cudarc::driver::sys::CUDA_MEM_ALLOC_NODE_PARAMS) -> Status;

/// The driver functions that read a graph's memory-allocation nodes.
struct NodeApi {
    _lib: Library,
    get_nodes: GraphGetNodes,
    get_type: NodeGetType,
    alloc_params: AllocNodeGetParams,
}

impl NodeApi {
    fn load() -> Option<NodeApi> {
        let lib = api::loaded_libcuda().ok()?;
        Some(NodeApi {
            get_nodes: api::symbol(&lib, "cuGraphGetNodes").ok()?,
            get_type: api::symbol(&lib, "cuGraphNodeGetType").ok()?,
            alloc_params: api::symbol(&lib, "cuGraphMemAllocNodeGetParams").ok()?,
            _lib: lib,
        })
    }

    /// Memory-allocation nodes of a graph's top level, and their bytes.
    fn alloc_nodes(&self, graph: u64) -> (u64, u64) {
        let mut n: usize = 0;
        // SAFETY: cuGraphGetNodes with a NULL array writes only the count; graph was just
        // instantiated by the call whose exit this is, so it is live.
        if unsafe { (self.get_nodes)(graph, std::ptr::null_mut(), &mut n) } != 0 || n == 0 {
            return (0, 0);
        }
        let n = n.min(MAX_NODES);
        let mut nodes = vec![0u64; n];
        let mut got = n;
        // SAFETY: the array holds `got` handles; the driver writes at most that many.
        if unsafe { (self.get_nodes)(graph, nodes.as_mut_ptr(), &mut got) } != 0 {
            return (0, 0);
        }
        nodes.truncate(got.min(n));
        let (mut count, mut bytes) = (0u64, 0u64);
        for node in nodes {
            let mut kind: u32 = 0;
            // SAFETY: node came from cuGraphGetNodes on a live graph; kind is a local.
            if unsafe { (self.get_type)(node, &mut kind) } != 0 || kind != 10 {
                continue;
            }
            let mut p =
                std::mem::MaybeUninit::<cudarc::driver::sys::CUDA_MEM_ALLOC_NODE_PARAMS>::zeroed();
            // SAFETY: node is a memory-allocation node (type 10) of a live graph; p is a zeroed
            // struct of the layout cuda.h gives, which the driver fills.
            if unsafe { (self.alloc_params)(node, p.as_mut_ptr()) } == 0 {
                // SAFETY: zero-initialised, then filled by the driver: every field is plain
                // data (integers and a pointer that is never dereferenced here).
                let p = unsafe { p.assume_init() };
                count += 1;
                bytes = bytes.saturating_add(p.bytesize as u64);
            }
        }
        (count, bytes)
    }
}

/// Launches of one executable since its instantiation.
#[derive(Clone, Copy, Default)]
struct Count {
    instantiated: u64,
    launches: u64,
}

/// A timed call in progress on this thread: its callback id, entry time and (end) capture.
#[derive(Clone, Copy)]
struct Pending {
    cbid: u32,
    start_ns: u64,
    capture: Option<u64>,
    /// [`spent`] at the entry.
    spent_ns: u64,
}

thread_local! {
    static PENDING: Cell<Option<Pending>> = const { Cell::new(None) };
    static SPENT: Cell<u64> = const { Cell::new(0) };
}

/// Times one callback of the tracer: when dropped, adds the time since it was made to this
/// thread's total ([`spent`]), which capture times leave out.
pub(crate) struct Spent(u64);

impl Spent {
    pub(crate) fn start() -> Spent {
        Spent(now_ns())
    }
}

impl Drop for Spent {
    fn drop(&mut self) {
        let took = now_ns().saturating_sub(self.0);
        let _ = SPENT.try_with(|s| s.set(s.get().saturating_add(took)));
    }
}

/// The tracer's time in callbacks on this thread so far, in ns.
fn spent() -> u64 {
    SPENT.try_with(Cell::get).unwrap_or(0)
}

/// `CLOCK_MONOTONIC`, in ns.
pub(crate) fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: t is a local timespec clock_gettime fills; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64).saturating_mul(1_000_000_000) + t.tv_nsec as u64
}

/// `--graphs` state of the process.
pub(crate) struct GraphCost {
    hooks: Vec<Option<Hook>>,
    nodes: Option<NodeApi>,
    counts: Mutex<HashMap<u64, Count>>,
    /// Executables whose handle was instantiated again (the old one was destroyed).
    retired: Mutex<Vec<ExecLaunches>>,
}

impl GraphCost {
    /// `Some` when `GRAPHSMITH_TRACE_GRAPHS=1`.
    pub(crate) fn load() -> Option<GraphCost> {
        (std::env::var(GRAPHS_VAR).as_deref() == Ok("1")).then(|| GraphCost {
            hooks: hooks(),
            nodes: NodeApi::load(),
            counts: Mutex::default(),
            retired: Mutex::default(),
        })
    }

    fn hook(&self, cbid: u32) -> Option<Hook> {
        *self.hooks.get(cbid as usize)?
    }

    fn args(hook: &Hook, data: &CUpti_CallbackData) -> Args {
        if data.functionParams.is_null() {
            return Args::default();
        }
        let mut a = (hook.read)(data.functionParams);
        if a.stream == Some(0) && hook.per_thread {
            a.stream = Some(PER_THREAD);
        }
        a
    }

    /// The driver callback's entry.
    pub(crate) fn enter(&self, tracer: &TracerView<'_>, cbid: u32, data: &CUpti_CallbackData) {
        let Some(hook) = self.hook(cbid) else {
            return;
        };
        match hook.what {
            What::Timed(kind) => {
                let capture = if kind == GraphCallKind::End {
                    let stream = Self::args(&hook, data).stream;
                    capture_of(tracer, stream)
                } else {
                    None
                };
                let start_ns = now_ns();
                let _ = PENDING.try_with(|p| {
                    p.set(Some(Pending {
                        cbid,
                        start_ns,
                        capture,
                        spent_ns: spent(),
                    }))
                });
            }
            What::Launch if graph_activity::on() => {
                if let Some(exec) = Self::args(&hook, data).exec {
                    let gen = lock(&self.counts).get(&exec).map_or(0, |c| c.instantiated);
                    graph_activity::launched(data.correlationId, exec, gen);
                }
            }
            _ => {}
        }
    }

    /// The driver callback's exit, before the tracer's own handling.
    pub(crate) fn exit(
        &self,
        tracer: &TracerView<'_>,
        cbid: u32,
        data: &CUpti_CallbackData,
        code: u32,
        capturing: bool,
    ) {
        let Some(hook) = self.hook(cbid) else {
            return;
        };
        match hook.what {
            What::Timed(kind) => self.timed(tracer, cbid, kind, &hook, data, code),
            What::Alloc(kind) if code == 0 && capturing => {
                let a = Self::args(&hook, data);
                let bytes = if kind == AllocKind::Pitched && !a.pitch.is_null() {
                    // SAFETY: on success cuMemAllocPitch_v2 wrote the pitch through pPitch,
                    // a valid pointer the caller passed.
                    (unsafe { a.pitch.read() } as u64).saturating_mul(a.height)
                } else {
                    a.bytes
                };
                let address = (!a.out.is_null()).then(|| {
                    // SAFETY: on success the allocation wrote the address through dptr, a
                    // valid pointer the caller passed.
                    unsafe { a.out.read() }
                });
                let seq = tracer.next_seq();
                super::emit(|pid| {
                    Event::Graph(GraphEvent::Alloc(GraphAlloc {
                        pid,
                        seq,
                        thread: thread::tid(),
                        kind,
                        bytes,
                        address,
                    }))
                });
            }
            What::Launch => {
                let exec = Self::args(&hook, data).exec;
                if code != 0 {
                    graph_activity::failed(data.correlationId);
                } else if let Some(exec) = exec {
                    let mut counts = lock(&self.counts);
                    if counts.len() < MAX_EXECS || counts.contains_key(&exec) {
                        counts.entry(exec).or_default().launches += 1;
                    }
                }
            }
            _ => {}
        }
    }

    fn timed(
        &self,
        tracer: &TracerView<'_>,
        cbid: u32,
        kind: GraphCallKind,
        hook: &Hook,
        data: &CUpti_CallbackData,
        code: u32,
    ) {
        let pending = PENDING.try_with(|p| p.take()).ok().flatten();
        let Some(pending) = pending.filter(|p| p.cbid == cbid) else {
            return;
        };
        let dur_ns = now_ns().saturating_sub(pending.start_ns);
        // A begin's, at its exit (the work the tracer does for it comes after); an end's, at
        // its entry.
        let spent_ns = if kind == GraphCallKind::End {
            pending.spent_ns
        } else {
            spent()
        };
        let a = Self::args(hook, data);
        let out = (code == 0 && !a.out.is_null()).then(|| {
            // SAFETY: on success the call wrote the handle (graph or executable) through
            // its output pointer, a valid pointer the caller passed.
            unsafe { a.out.read() }
        });
        let mut call = GraphCall {
            call: Some(kind),
            name: cstr(data.functionName),
            thread: thread::tid(),
            start_ns: pending.start_ns,
            dur_ns,
            spent_ns,
            code,
            stream: a.stream,
            ..GraphCall::default()
        };
        match kind {
            GraphCallKind::Begin => {
                call.capture = if code == 0 {
                    capture_of(tracer, a.stream)
                } else {
                    None
                };
                if code == 0 && !python::loaded() {
                    call.backtrace = stack::capture().unwrap_or_default();
                }
            }
            GraphCallKind::End => {
                call.capture = pending.capture;
                call.graph = out;
            }
            GraphCallKind::Instantiate => {
                call.graph = a.graph;
                call.exec = out;
                if let (Some(graph), Some(nodes)) = (a.graph.filter(|_| code == 0), &self.nodes) {
                    (call.mem_nodes, call.mem_node_bytes) = nodes.alloc_nodes(graph);
                }
            }
            GraphCallKind::Upload => call.exec = a.exec,
            GraphCallKind::Create => {
                call.graph = out;
                if code == 0 {
                    if python::loaded() {
                        match python::capture(&python::BEGINS) {
                            Ok(frames) => call.python = frames,
                            Err(missing) => call.python_missing = Some(missing),
                        }
                    } else {
                        call.backtrace = stack::capture().unwrap_or_default();
                    }
                }
            }
        }
        call.seq = tracer.next_seq();
        if let (GraphCallKind::Instantiate, Some(exec)) = (kind, call.exec) {
            self.instantiated(exec, call.seq);
            graph_activity::instantiated(exec, call.seq);
        }
        super::emit(|pid| Event::Graph(GraphEvent::Call(GraphCall { pid, ..call })));
    }

    /// A new executable: launches count from zero (a reused handle's old count is kept).
    fn instantiated(&self, exec: u64, seq: u64) {
        let old = {
            let mut counts = lock(&self.counts);
            if counts.len() >= MAX_EXECS && !counts.contains_key(&exec) {
                return;
            }
            counts.insert(
                exec,
                Count {
                    instantiated: seq,
                    launches: 0,
                },
            )
        };
        if let Some(old) = old.filter(|o| o.launches > 0) {
            let mut retired = lock(&self.retired);
            if retired.len() < MAX_EXECS {
                retired.push(ExecLaunches {
                    exec,
                    instantiated: old.instantiated,
                    launches: old.launches,
                    device: None,
                });
            }
        }
    }

    /// At exit: every executable's launches, with their device time.
    pub(crate) fn at_exit(&self, seq: u64) -> Event {
        let device = graph_activity::finish();
        let mut execs: Vec<ExecLaunches> = graph_activity::lock_at_exit(&self.retired)
            .map(|r| r.clone())
            .unwrap_or_default();
        if let Some(counts) = graph_activity::lock_at_exit(&self.counts) {
            execs.extend(counts.iter().map(|(exec, c)| ExecLaunches {
                exec: *exec,
                instantiated: c.instantiated,
                launches: c.launches,
                device: None,
            }));
        }
        for x in &mut execs {
            x.device = device.times.get(&(x.exec, x.instantiated)).copied();
        }
        execs.sort_by_key(|x| (x.instantiated, x.exec));
        Event::Graph(GraphEvent::Launches(GraphLaunches {
            pid: std::process::id(),
            seq,
            execs,
            device_time_off: device.off,
            records: device.records,
            dropped: device.dropped,
            unmatched: device.unmatched,
        }))
    }
}

fn capture_of(tracer: &TracerView<'_>, stream: Option<u64>) -> Option<u64> {
    match (stream, tracer.driver) {
        (Some(s), Some(d)) if !is_legacy(s) => match d.capturing(s) {
            Capturing::Yes(id) => Some(id),
            _ => None,
        },
        _ => None,
    }
}

fn cstr(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: CUPTI's functionName is a NUL-terminated static string.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// What the hooks read of the tracer: its event sequence and the driver's capture query.
pub(crate) struct TracerView<'a> {
    pub(crate) seq: &'a AtomicU64,
    pub(crate) driver: Option<&'a Driver>,
}

impl TracerView<'_> {
    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(id: D) -> Hook {
        hooks()[id as usize].expect("hooked")
    }

    #[test]
    fn allocations_read_their_size_and_where_the_address_goes() {
        let h = hook(D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2);
        assert!(h.what == What::Alloc(AllocKind::Pitched));
        let mut ptr = 0u64;
        let mut pitch = 0usize;
        let p = cs::cuMemAllocPitch_v2_params_st {
            dptr: &mut ptr,
            pPitch: &mut pitch,
            WidthInBytes: 1000,
            Height: 7,
            ElementSizeBytes: 4,
        };
        let a = (h.read)((&p as *const cs::cuMemAllocPitch_v2_params_st).cast());
        assert_eq!(a.height, 7);
        assert_eq!(a.pitch, &mut pitch as *mut usize);
        assert_eq!(a.out, &mut ptr as *mut u64);

        let h = hook(D::CUPTI_DRIVER_TRACE_CBID_cuMemCreate);
        // SAFETY: an all-zero cuMemCreate_params_st is valid (pointers and integers).
        let mut p: cs::cuMemCreate_params_st = unsafe { std::mem::zeroed() };
        p.size = 2 << 20;
        let a = (h.read)((&p as *const cs::cuMemCreate_params_st).cast());
        assert_eq!(
            (a.bytes, a.out.is_null()),
            (2 << 20, true),
            "a handle, no address"
        );
    }

    #[test]
    fn per_thread_variants_resolve_a_null_stream() {
        let h = hook(D::CUPTI_DRIVER_TRACE_CBID_cuGraphUpload_ptsz);
        assert!(h.what == What::Timed(GraphCallKind::Upload) && h.per_thread);
        let p = cs::cuGraphUpload_ptsz_params_st {
            hGraphExec: 0xe000 as _,
            hStream: std::ptr::null_mut(),
        };
        // SAFETY: CUpti_CallbackData is plain data; all-zero is a valid value.
        let mut data: CUpti_CallbackData = unsafe { std::mem::zeroed() };
        data.functionParams = (&p as *const cs::cuGraphUpload_ptsz_params_st).cast();
        let a = GraphCost::args(&h, &data);
        assert_eq!((a.exec, a.stream), (Some(0xe000), Some(PER_THREAD)));
        let h = hook(D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch);
        assert!(h.what == What::Launch && !h.per_thread);
    }
}
