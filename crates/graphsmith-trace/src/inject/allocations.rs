//! `--freed` inside the traced process: the driver's allocation and free calls feed the pure
//! [`Tracker`] (`crate::freed`), each instantiated executable's touched ranges are registered
//! after its read-back, and a launch of an executable with frees to check is looked at in the
//! launch callback's *entry*, so that what it finds is in the event log before the launch runs.
//!
//! Calls followed: `cuMemAlloc_v2`, `cuMemAllocPitch_v2`, `cuMemAllocManaged`,
//! `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` (and their per-thread-stream variants) and
//! `cuMemMap` allocate; `cuMemFree_v2`, `cuMemFreeAsync` and `cuMemUnmap` free;
//! `cuGraphExecDestroy` and `cuGraphExecUpdate_v2` end the watch of an executable (after an
//! update its ranges are no longer known). A stream-ordered allocation or free on a capturing
//! stream is a memory node of the graph, not a real one, and is left out.
//!
//! Cost: an allocation takes an unresolved native stack (instruction pointers; symbols are
//! looked up only when reported; the first [`MAX_ALLOC_STACKS`] allocations of a process) and,
//! within a per-process budget, the Python stack; a free
//! takes its stacks only when it overlaps a watched range; a launch compares one counter until
//! the first such free, then asks the tracker (one lock, no CUDA call under it).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::cupti::sys::{self as cs, CUpti_CallbackData, CUpti_driver_api_trace_cbid as D};

use super::{cstr, lock, runtime_name, Args, Capturing, Kind, Spec, Tracer};
use crate::event::{Call, Event, PyFrame, PyMissing, Thread, FREED_VAR};
use crate::freed::{FreedLaunch, Site, Touch, Tracker};
use crate::inject::{python, stack, thread};

/// Allocations per process that take a native stack: a program that allocates in a loop
/// (stream-ordered allocations each step) stops paying for stacks past it.
const MAX_ALLOC_STACKS: u64 = 16_384;
static ALLOC_NATIVE: AtomicU64 = AtomicU64::new(0);
/// Python stacks read per process at allocations, at frees, at launches.
static ALLOC_STACKS: AtomicU64 = AtomicU64::new(0);
static FREE_STACKS: AtomicU64 = AtomicU64::new(0);
static LAUNCH_STACKS: AtomicU64 = AtomicU64::new(0);

/// A call site whose native stack is symbolised only when it is reported.
#[derive(Clone)]
pub(crate) struct LazySite {
    call: String,
    thread: Thread,
    python: Result<Vec<PyFrame>, PyMissing>,
    raw: Arc<Vec<backtrace::Frame>>,
}

impl LazySite {
    /// The calling thread's site: its stacks when `stacks`, else the call alone.
    fn take(call: String, budget: &AtomicU64, stacks: bool) -> LazySite {
        LazySite {
            call,
            thread: thread::current(),
            python: if stacks {
                python::capture(budget)
            } else {
                Ok(Vec::new())
            },
            raw: Arc::new(if stacks { stack::raw() } else { Vec::new() }),
        }
    }

    fn site(&self) -> Site {
        let (python, python_missing) = match &self.python {
            Ok(frames) => (frames.clone(), None),
            Err(m) => (Vec::new(), Some(*m)),
        };
        Site {
            call: self.call.clone(),
            thread: self.thread.clone(),
            python,
            python_missing: python_missing.filter(|m| *m != PyMissing::NotPython),
            backtrace: stack::resolve(&self.raw),
        }
    }
}

struct Memory {
    tracker: Mutex<Tracker<LazySite>>,
    /// Frees recorded (overlapping a watched range): launches look no further while it is 0.
    recorded: AtomicU64,
}

fn memory() -> Option<&'static Memory> {
    static MEMORY: OnceLock<Option<Memory>> = OnceLock::new();
    MEMORY
        .get_or_init(|| {
            (std::env::var(FREED_VAR).as_deref() == Ok("1")).then(|| Memory {
                tracker: Mutex::new(Tracker::default()),
                recorded: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Whether `--freed` asked for the watch.
pub(crate) fn enabled() -> bool {
    memory().is_some()
}

#[derive(Clone, Copy)]
enum Op {
    Alloc,
    Free,
    Forget,
}

/// What a call's parameters say: the address (or executable), the size when the call gives
/// it, the stream of a stream-ordered call.
struct Mem {
    address: u64,
    size: Option<u64>,
    stream: Option<u64>,
}

type Read = fn(*const c_void) -> Option<Mem>;

/// Reads `*p` when `p` is not null.
///
/// # Safety
/// `p` is null or points to a readable `T`.
unsafe fn out<T: Copy>(p: *const T) -> Option<T> {
    // SAFETY: forwarded contract.
    (!p.is_null()).then(|| unsafe { p.read() })
}

// Each reader below is only called with the `functionParams` CUPTI passes, at the call's exit,
// for its own callback id (see `table`): a valid pointer to that call's `<name>_params_st`,
// whose out-pointers the caller passed and the successful call wrote.
macro_rules! reader {
    ($ty:ident, |$p:ident| $body:expr) => {{
        fn read(raw: *const c_void) -> Option<Mem> {
            let $p = raw.cast::<cs::$ty>();
            // SAFETY: see the comment above the macro.
            unsafe { $body }
        }
        read as Read
    }};
}

fn table() -> &'static [Option<(Op, Read)>] {
    static TABLE: OnceLock<Vec<Option<(Op, Read)>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![None; D::CUPTI_DRIVER_TRACE_CBID_SIZE as usize];
        let mut set = |id: D, op: Op, read: Read| {
            if let Some(slot) = t.get_mut(id as usize) {
                *slot = Some((op, read));
            }
        };
        use Op::*;
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
            Alloc,
            reader!(cuMemAlloc_v2_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
            Alloc,
            reader!(cuMemAllocManaged_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
            Alloc,
            reader!(cuMemAllocPitch_v2_params_st, |p| {
                let pitch = out((*p).pPitch)? as u64;
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some(pitch.saturating_mul((*p).Height as u64)),
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
            Alloc,
            reader!(cuMemAllocAsync_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
            Alloc,
            reader!(cuMemAllocAsync_ptsz_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
            Alloc,
            reader!(cuMemAllocFromPoolAsync_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
            Alloc,
            reader!(cuMemAllocFromPoolAsync_ptsz_params_st, |p| {
                Some(Mem {
                    address: out((*p).dptr)?,
                    size: Some((*p).bytesize as u64),
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemMap,
            Alloc,
            reader!(cuMemMap_params_st, |p| {
                Some(Mem {
                    address: (*p).ptr,
                    size: Some((*p).size as u64),
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
            Free,
            reader!(cuMemFree_v2_params_st, |p| {
                Some(Mem {
                    address: (*p).dptr,
                    size: None,
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
            Free,
            reader!(cuMemFreeAsync_params_st, |p| {
                Some(Mem {
                    address: (*p).dptr,
                    size: None,
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
            Free,
            reader!(cuMemFreeAsync_ptsz_params_st, |p| {
                Some(Mem {
                    address: (*p).dptr,
                    size: None,
                    stream: Some((*p).hStream as u64),
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
            Free,
            reader!(cuMemUnmap_params_st, |p| {
                Some(Mem {
                    address: (*p).ptr,
                    size: Some((*p).size as u64),
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy,
            Forget,
            reader!(cuGraphExecDestroy_params_st, |p| {
                Some(Mem {
                    address: (*p).hGraphExec as u64,
                    size: None,
                    stream: None,
                })
            }),
        );
        set(
            D::CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2,
            Forget,
            reader!(cuGraphExecUpdate_v2_params_st, |p| {
                Some(Mem {
                    address: (*p).hGraphExec as u64,
                    size: None,
                    stream: None,
                })
            }),
        );
        t
    })
}

/// `cudaFree (cuMemFree_v2)`: the runtime call around the driver call, when there is one.
fn call_name(data: &CUpti_CallbackData) -> String {
    Call {
        driver: cstr(data.functionName),
        runtime: runtime_name(),
        ..Call::default()
    }
    .name()
}

impl Tracer {
    /// At a successful driver call's exit: an allocation, a free or the end of an executable.
    pub(super) fn track_memory(&self, cbid: u32, data: &CUpti_CallbackData) {
        let Some(m) = memory() else { return };
        let Some((op, read)) = table().get(cbid as usize).copied().flatten() else {
            return;
        };
        if data.functionParams.is_null() {
            return;
        }
        let Some(mem) = read(data.functionParams) else {
            return;
        };
        if let Some(s) = mem.stream {
            if self.active.load(Ordering::Relaxed) > 0
                && matches!(self.capturing(Some(s)), Capturing::Yes(_))
            {
                return;
            }
        }
        match op {
            Op::Alloc => {
                let Some(size) = mem.size else { return };
                let stacks = ALLOC_NATIVE.fetch_add(1, Ordering::Relaxed) < MAX_ALLOC_STACKS;
                let site = LazySite::take(call_name(data), &ALLOC_STACKS, stacks);
                lock(&m.tracker).allocated(mem.address, size, site);
            }
            Op::Free => {
                let (range, relevant) = {
                    let t = lock(&m.tracker);
                    let range = t.range_of(mem.address, mem.size);
                    (range, range.is_some_and(|(b, s)| t.relevant(b, s)))
                };
                let Some((base, size)) = range else { return };
                // The stacks are taken with no lock held (Python's may wait for the GIL).
                let site = LazySite::take(call_name(data), &FREE_STACKS, relevant);
                let mut t = lock(&m.tracker);
                let before = t.frees_seen();
                t.freed(base, size, site);
                if t.frees_seen() > before {
                    m.recorded.fetch_add(1, Ordering::Relaxed);
                }
            }
            Op::Forget => lock(&m.tracker).forget(mem.address),
        }
    }

    /// The allocation the tracker saw holding `address` (stream-ordered and pool allocations
    /// included, which the driver's address range may not bound as tightly).
    pub(super) fn tracked_allocation(&self, address: u64) -> Option<(u64, u64)> {
        memory().and_then(|m| lock(&m.tracker).holding(address))
    }

    /// After an instantiation's read-back: the ranges the executable touches.
    pub(super) fn watch(&self, exec: u64, graph: u64, touches: Vec<Touch>) {
        if let Some(m) = memory() {
            lock(&m.tracker).instantiated(exec, graph, touches);
        }
    }

    /// At a graph launch's entry, before it runs: the nodes touching memory freed since the
    /// executable was instantiated, written to the event log.
    pub(super) fn check_launch(&self, spec: &Spec, data: &CUpti_CallbackData) {
        let Some(m) = memory() else { return };
        if m.recorded.load(Ordering::Relaxed) == 0 || spec.kind != Kind::GraphLaunch {
            return;
        }
        let args: Args = Self::read_args(spec, data);
        let Some(exec) = args.graph else { return };
        let found = {
            let mut t = lock(&m.tracker);
            if !t.pending(exec) {
                return;
            }
            t.launch(exec)
        };
        if found.is_empty() {
            return;
        }
        let launch = LazySite::take(call_name(data), &LAUNCH_STACKS, true).site();
        // One free's sites are shared by every node it hits: symbolised once.
        let mut sites: HashMap<*const Vec<backtrace::Frame>, Site> = HashMap::new();
        let mut site = |s: &LazySite| {
            sites
                .entry(Arc::as_ptr(&s.raw))
                .or_insert_with(|| s.site())
                .clone()
        };
        for f in found {
            let seq = self.next_seq();
            let event = FreedLaunch {
                pid: 0,
                seq,
                exec: f.exec,
                graph: f.graph,
                node: f.touch.node,
                node_kind: f.touch.kind,
                node_label: f.touch.label,
                start: f.start,
                len: f.len,
                freed_base: f.freed.base,
                freed_bytes: f.freed.size,
                allocated: f.freed.allocated.as_ref().map(&mut site),
                freed: site(&f.freed.freed),
                launch: launch.clone(),
            };
            super::super::emit(|pid| Event::Freed(FreedLaunch { pid, ..event }));
        }
    }
}
