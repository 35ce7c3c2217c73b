//! The CUPTI callback: every driver and runtime API call enters and exits through here.
//!
//! Fast path (no capture running, the call succeeded, not a begin/instantiate/graph launch):
//! one table lookup, one atomic load, return. Everything else is the slow path, where the driver
//! may be asked about a stream (`cuStreamGetCaptureInfo`, never about the legacy stream), and
//! the state lock is taken briefly, never around a CUDA call or a backtrace.
//!
//! A runtime call (`cudaStreamSynchronize`) is a frame on a per-thread stack while it runs; the
//! driver calls it makes are recorded with its name. A failure inside a runtime call is held in
//! the frame and written when the runtime call returns: written if the runtime call failed too
//! (or the code is a capture code), dropped if the runtime swallowed it.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_void, CStr};
use std::ptr::addr_of;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use cudarc::cupti::sys::CUpti_CallbackData;

use super::api::{Capturing, Cupti, Driver};
use super::cbid::{self, is_legacy, Args, Kind, Spec};
use super::lock::lock;
use super::readback::{self, GraphApi};
use super::state::{CaptureTrack, State};
use super::{nvtx, python, stack, thread};
use crate::event::{
    Begin, Call, CapturingRanges, End, Event, Hazards, Instantiate, Mode, HAZARDS_VAR,
};
use crate::explain::is_capture_code;

/// `--freed`: allocations, frees and launches (an `impl Tracer` of its own).
#[path = "allocations.rs"]
mod allocations;
/// `--hazards` across graphs: the launch sequence (an `impl Tracer` of its own).
#[path = "races.rs"]
pub(super) mod races;

const ENTER: u32 = 0;
const NOT_READY: u32 = 600;
/// Failures outside any capture recorded per process.
const MAX_OTHER_FAILURES: u64 = 100;

pub(crate) struct Tracer {
    pub cupti: Cupti,
    pub driver: Option<Driver>,
    driver_specs: Vec<Spec>,
    runtime_specs: Vec<Spec>,
    active: AtomicUsize,
    state: Mutex<State>,
    seq: AtomicU64,
    pub driver_calls: AtomicU64,
    pub runtime_calls: AtomicU64,
    other_failures: AtomicU64,
    pub launches: Mutex<std::collections::BTreeMap<u64, u64>>,
    /// `--hazards` or `--freed`: the read-back functions, or why they are missing; `None` when
    /// neither was asked.
    hazards: Option<Result<GraphApi, String>>,
    /// `--hazards`: the hazard check of each instantiated graph is recorded.
    check_hazards: bool,
    /// `--graphs`: what each graph costs; `None` when not asked.
    pub graphs: Option<super::graph_cost::GraphCost>,
}

/// A runtime call in progress on this thread.
struct Frame {
    name: *const c_char,
    saw_driver: bool,
    pending: Option<Call>,
    /// For an end capture: the stream and the capture it belonged to at entry.
    end_enter: Option<(u64, Option<u64>)>,
}

thread_local! {
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    static DRIVER_END_ENTER: Cell<Option<(u64, Option<u64>)>> = const { Cell::new(None) };
}

/// Resets the reentrancy flag even when the body panics.
struct Busy;
impl Drop for Busy {
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(false));
    }
}

fn enter_busy() -> Option<Busy> {
    BUSY.try_with(|b| {
        if b.get() {
            None
        } else {
            b.set(true);
            Some(Busy)
        }
    })
    .ok()
    .flatten()
}

fn cstr(p: *const c_char) -> Option<String> {
    // SAFETY: CUPTI's functionName is a NUL-terminated static string (or null).
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The runtime call around a driver call on this thread, if any.
fn runtime_name() -> Option<String> {
    FRAMES
        .try_with(|f| f.try_borrow().ok()?.last().and_then(|fr| cstr(fr.name)))
        .ok()
        .flatten()
}

/// What one callback is about.
struct Site<'a> {
    data: &'a CUpti_CallbackData,
    spec: Spec,
    args: Args,
    driver: Option<String>,
    runtime: Option<String>,
    code: u32,
}

impl Site<'_> {
    fn stream(&self) -> Option<u64> {
        self.spec.stream(&self.args)
    }
    fn context(&self) -> u64 {
        self.data.context as u64
    }
    fn name(&self) -> String {
        self.runtime
            .clone()
            .or_else(|| self.driver.clone())
            .unwrap_or_default()
    }
}

fn site_u32(data: &CUpti_CallbackData) -> u32 {
    // SAFETY: callbackSite is a C enum (CUpti_ApiCallbackSite); read as u32 so that no
    // out-of-range value ever becomes a Rust enum.
    unsafe { addr_of!(data.callbackSite).cast::<u32>().read() }
}

fn return_code(data: &CUpti_CallbackData) -> u32 {
    if data.functionReturnValue.is_null() {
        return 0;
    }
    // SAFETY: at API exit, functionReturnValue points to the call's CUresult or cudaError_t,
    // both 32-bit C enums.
    unsafe { data.functionReturnValue.cast::<u32>().read() }
}

impl Tracer {
    pub(crate) fn new(cupti: Cupti, driver: Option<Driver>) -> Tracer {
        Tracer {
            cupti,
            driver,
            driver_specs: cbid::driver_table(),
            runtime_specs: cbid::runtime_table(),
            active: AtomicUsize::new(0),
            state: Mutex::new(State::default()),
            seq: AtomicU64::new(0),
            driver_calls: AtomicU64::new(0),
            runtime_calls: AtomicU64::new(0),
            other_failures: AtomicU64::new(0),
            launches: Mutex::default(),
            hazards: (std::env::var(HAZARDS_VAR).as_deref() == Ok("1") || allocations::enabled())
                .then(GraphApi::load),
            check_hazards: std::env::var(HAZARDS_VAR).as_deref() == Ok("1"),
            graphs: super::graph_cost::GraphCost::load(),
        }
    }

    /// What the `--graphs` hooks read of the tracer.
    fn view(&self) -> super::graph_cost::TracerView<'_> {
        super::graph_cost::TracerView {
            seq: &self.seq,
            driver: self.driver.as_ref(),
        }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn seq_now(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    fn capturing(&self, stream: Option<u64>) -> Capturing {
        match (stream, &self.driver) {
            // The legacy stream never captures (and is never asked: see the module docs).
            (Some(s), _) if is_legacy(s) => Capturing::No,
            (Some(s), Some(d)) => d.capturing(s),
            _ => Capturing::Unknown,
        }
    }

    /// Entry point for both domains, behind the reentrancy guard.
    pub(crate) fn on_callback(&self, domain: u32, cbid: u32, data: &CUpti_CallbackData) {
        let Some(_busy) = enter_busy() else { return };
        // `--graphs`: the tracer's own time on this thread, taken out of capture times.
        let _spent = self
            .graphs
            .as_ref()
            .map(|_| super::graph_cost::Spent::start());
        match domain {
            1 => self.on_driver(cbid, data),
            2 => self.on_runtime(cbid, data),
            _ => {}
        }
    }

    fn read_args(spec: &Spec, data: &CUpti_CallbackData) -> Args {
        match spec.read {
            Some(read) if !data.functionParams.is_null() => read(data.functionParams),
            _ => Args::default(),
        }
    }

    fn on_driver(&self, cbid: u32, data: &CUpti_CallbackData) {
        let spec = self
            .driver_specs
            .get(cbid as usize)
            .copied()
            .unwrap_or(self.driver_specs[0]);
        if site_u32(data) == ENTER {
            self.driver_calls.fetch_add(1, Ordering::Relaxed);
            if let Some(g) = &self.graphs {
                g.enter(&self.view(), cbid, data);
            }
            let _ = FRAMES.try_with(|f| {
                if let Ok(mut f) = f.try_borrow_mut() {
                    if let Some(fr) = f.last_mut() {
                        fr.saw_driver = true;
                    }
                }
            });
            if spec.kind == Kind::End && self.active.load(Ordering::Relaxed) > 0 {
                let args = Self::read_args(&spec, data);
                let stream = spec.stream(&args);
                let at_enter = stream.map(|s| (s, capture_id(self.capturing(Some(s)))));
                let _ = DRIVER_END_ENTER.try_with(|c| c.set(at_enter));
            }
            self.check_launch(&spec, data);
            return;
        }
        let code = return_code(data);
        if code == 0 {
            self.track_memory(cbid, data);
            self.record_order(&spec, cbid, data);
        }
        let active = self.active.load(Ordering::Relaxed);
        if let Some(g) = &self.graphs {
            g.exit(&self.view(), cbid, data, code, active > 0);
        }
        if active == 0 && (code == 0 || code == NOT_READY) {
            match spec.kind {
                Kind::Begin | Kind::Instantiate => {}
                Kind::GraphLaunch => {
                    if let Some(exec) = Self::read_args(&spec, data).graph {
                        *lock(&self.launches).entry(exec).or_insert(0) += 1;
                    }
                    return;
                }
                _ => return,
            }
        }
        let site = Site {
            data,
            spec,
            args: Self::read_args(&spec, data),
            driver: cstr(data.functionName),
            runtime: runtime_name(),
            code,
        };
        let end_enter = if spec.kind == Kind::End {
            DRIVER_END_ENTER.try_with(|c| c.take()).ok().flatten()
        } else {
            None
        };
        self.on_exit(&site, end_enter);
    }

    fn on_runtime(&self, cbid: u32, data: &CUpti_CallbackData) {
        let spec = self
            .runtime_specs
            .get(cbid as usize)
            .copied()
            .unwrap_or(self.runtime_specs[0]);
        if site_u32(data) == ENTER {
            self.runtime_calls.fetch_add(1, Ordering::Relaxed);
            let end_enter = if spec.kind == Kind::End && self.active.load(Ordering::Relaxed) > 0 {
                let stream = spec.stream(&Self::read_args(&spec, data));
                stream.map(|s| (s, capture_id(self.capturing(Some(s)))))
            } else {
                None
            };
            let _ = FRAMES.try_with(|f| {
                if let Ok(mut f) = f.try_borrow_mut() {
                    if f.len() >= 16 {
                        f.clear();
                    }
                    f.push(Frame {
                        name: data.functionName,
                        saw_driver: false,
                        pending: None,
                        end_enter,
                    });
                }
            });
            return;
        }
        let frame = FRAMES
            .try_with(|f| f.try_borrow_mut().ok().and_then(|mut f| f.pop()))
            .ok()
            .flatten();
        let Some(frame) = frame else { return };
        let code = return_code(data);
        if let Some(mut call) = frame.pending {
            if code != 0 || is_capture_code(call.code) {
                call.runtime = cstr(frame.name);
                super::emit(|pid| Event::Call(Call { pid, ..call }));
            }
            return;
        }
        let fallback =
            !frame.saw_driver && matches!(spec.kind, Kind::Begin | Kind::End | Kind::Instantiate);
        if !fallback && (code == 0 || code == NOT_READY) {
            return;
        }
        let site = Site {
            data,
            spec: if fallback {
                spec
            } else {
                self.runtime_specs[0]
            },
            args: if fallback {
                Self::read_args(&spec, data)
            } else {
                Args::default()
            },
            driver: None,
            runtime: cstr(frame.name),
            code,
        };
        self.on_exit(&site, frame.end_enter);
    }

    fn on_exit(&self, site: &Site, end_enter: Option<(u64, Option<u64>)>) {
        match site.spec.kind {
            Kind::Begin if site.code == 0 => return self.on_begin(site),
            Kind::End => return self.on_end(site, end_enter),
            Kind::Instantiate => return self.on_instantiate(site),
            Kind::GraphLaunch if site.code == 0 => {
                if let Some(exec) = site.args.graph {
                    *lock(&self.launches).entry(exec).or_insert(0) += 1;
                }
            }
            _ => {}
        }
        if site.code != 0 && site.code != NOT_READY {
            self.on_failure(site, None, false);
        } else if site.code == 0 && self.active.load(Ordering::Relaxed) > 0 {
            self.on_stream_call(site);
        }
    }

    fn on_begin(&self, site: &Site) {
        let Some(stream) = site.stream() else { return };
        let seq = self.next_seq();
        let id = capture_id(self.capturing(Some(stream))).unwrap_or(u64::MAX - seq);
        let me = thread::current();
        let ranges = nvtx::current_ranges();
        let mode = Mode::from_raw(site.args.mode.unwrap_or(0));
        // Read with no lock held: it may wait for the GIL (see inject/python.rs).
        let (python, python_missing) = split(python::capture(&python::BEGINS));
        lock(&self.state).begin(CaptureTrack {
            id,
            origin: stream,
            context: site.context(),
            mode,
            thread: me.tid,
            streams: Vec::new(),
        });
        self.active.fetch_add(1, Ordering::Relaxed);
        super::emit(|pid| {
            Event::Begin(Begin {
                pid,
                seq,
                capture: id,
                stream,
                context: site.context(),
                mode,
                thread: me,
                ranges,
                driver: site.driver.clone(),
                runtime: site.runtime.clone(),
                python,
                python_missing,
            })
        });
    }

    fn on_end(&self, site: &Site, enter: Option<(u64, Option<u64>)>) {
        let stream = site.stream();
        let capture = match (enter, stream) {
            (Some((s, id)), Some(stream)) if s == stream => id,
            _ => None,
        }
        .or_else(|| stream.and_then(|s| lock(&self.state).open_on(s)));
        let Some(id) = capture else {
            if site.code != 0 {
                let ended = stream.and_then(|s| lock(&self.state).recently_ended(s));
                self.on_failure(site, ended, ended.is_some());
            }
            return;
        };
        if site.code != 0 {
            self.on_failure(site, Some(id), false);
        }
        let is_origin = lock(&self.state).get(id).map(|c| c.origin) == stream;
        if !is_origin {
            return;
        }
        let still = matches!(self.capturing(stream), Capturing::Yes(i) if i == id);
        if still && site.code != 0 {
            return;
        }
        let Some(track) = lock(&self.state).end(id) else {
            return;
        };
        self.active.fetch_sub(1, Ordering::Relaxed);
        let graph = (site.code == 0 && !site.args.out_handle.is_null()).then(|| {
            // SAFETY: on success cuStreamEndCapture wrote the graph handle through phGraph,
            // a valid pointer the caller passed.
            unsafe { site.args.out_handle.read() }
        });
        let seq = self.next_seq();
        super::emit(|pid| {
            Event::End(End {
                pid,
                seq,
                capture: id,
                stream: track.origin,
                thread: thread::current(),
                code: site.code,
                graph,
                ranges: nvtx::current_ranges(),
                streams: track.uses(),
                driver: site.driver.clone(),
                runtime: site.runtime.clone(),
            })
        });
    }

    fn on_instantiate(&self, site: &Site) {
        let Some(graph) = site.args.graph else { return };
        let exec = (site.code == 0 && !site.args.out_handle.is_null()).then(|| {
            // SAFETY: on success the instantiate call wrote the executable through
            // phGraphExec, a valid pointer the caller passed.
            unsafe { site.args.out_handle.read() }
        });
        let mut nodes = std::collections::BTreeMap::new();
        if site.code == 0 {
            if let Some(d) = &self.driver {
                for k in d.node_kinds(graph) {
                    *nodes.entry(cbid::node_kind(k).to_string()).or_insert(0) += 1;
                }
            }
        }
        let seq = self.next_seq();
        super::emit(|pid| {
            Event::Instantiate(Instantiate {
                pid,
                seq,
                graph,
                exec,
                code: site.code,
                thread: thread::current(),
                nodes,
                driver: site.driver.clone(),
                runtime: site.runtime.clone(),
            })
        });
        // Written after the instantiation, so that a crash during the read-back loses nothing
        // already recorded. The read-back's own driver calls come back through on_api while
        // this callback holds the reentrancy flag (BUSY), so they are ignored.
        if let (0, Some(api)) = (site.code, &self.hazards) {
            // SAFETY: the graph was instantiated successfully by the very call whose exit this
            // is, on this thread: it is live and its context is current; CUDA forbids changing
            // a graph from another thread while it is being instantiated.
            let (check, touches, info) = unsafe {
                readback::check_instantiated(
                    api,
                    graph,
                    self.check_hazards,
                    allocations::enabled(),
                    races::enabled(),
                    &|a| self.tracked_allocation(a),
                )
            };
            if let (Some(exec), Some(touches)) = (exec, touches) {
                self.watch(exec, graph, touches);
            }
            if let Some(exec) = exec {
                self.describe(exec, graph, info);
            }
            if self.check_hazards {
                let hazards_seq = self.next_seq();
                super::emit(|pid| {
                    Event::Hazards(Hazards {
                        pid,
                        seq: hazards_seq,
                        instantiate: seq,
                        graph,
                        exec,
                        check,
                    })
                });
            }
        }
    }

    /// Running captures of the call's context, and the ranges of their threads when another
    /// thread is calling.
    fn running(&self, context: u64, me: u32) -> (Vec<u64>, Vec<(u64, u32)>) {
        let state = lock(&self.state);
        let ids = state.active_in(context).map(|c| c.id).collect();
        let others = state
            .active_in(context)
            .filter(|c| c.thread != me)
            .map(|c| (c.id, c.thread))
            .collect();
        (ids, others)
    }

    fn capturing_ranges(others: Vec<(u64, u32)>) -> Vec<CapturingRanges> {
        others
            .into_iter()
            .map(|(capture, tid)| CapturingRanges {
                capture,
                thread: thread::other(tid),
                ranges: nvtx::ranges_of(tid),
            })
            .collect()
    }

    fn on_failure(&self, site: &Site, known: Option<u64>, after_end: bool) {
        let active = self.active.load(Ordering::Relaxed) > 0;
        let capture = known.or_else(|| {
            if !active {
                return None;
            }
            capture_id(self.capturing(site.stream())).or_else(|| {
                site.args
                    .event
                    .and_then(|e| lock(&self.state).event_capture(e))
            })
        });
        let me = thread::current();
        let (ids, others) = self.running(site.context(), me.tid);
        let relevant = capture.is_some() || !ids.is_empty() || after_end;
        if !relevant && self.other_failures.fetch_add(1, Ordering::Relaxed) >= MAX_OTHER_FAILURES {
            return;
        }
        let (code_name, code_text) = match (&self.driver, site.driver.is_some()) {
            (Some(d), true) => d.describe(site.code),
            _ => (None, None),
        };
        let call = Call {
            pid: 0,
            seq: self.next_seq(),
            driver: site.driver.clone(),
            runtime: site.runtime.clone(),
            code: site.code,
            code_name,
            code_text,
            thread: me,
            stream: site.stream(),
            capture,
            after_end,
            active: ids,
            ranges: nvtx::current_ranges(),
            capturing: Self::capturing_ranges(others),
            backtrace: if relevant {
                stack::capture().unwrap_or_default()
            } else {
                Vec::new()
            },
            ..Call::default()
        };
        let call = if relevant { with_python(call) } else { call };
        // Inside a runtime call: held until it returns (see the module docs).
        let held = site.driver.is_some()
            && FRAMES
                .try_with(|f| {
                    let Ok(mut f) = f.try_borrow_mut() else {
                        return false;
                    };
                    match f.last_mut() {
                        Some(fr) => {
                            if fr.pending.is_none() {
                                fr.pending = Some(call.clone());
                            }
                            true
                        }
                        None => false,
                    }
                })
                .unwrap_or(false);
        if !held {
            super::emit(|pid| Event::Call(Call { pid, ..call }));
        }
    }

    /// A successful call on a stream while captures run: captured, or escaped.
    fn on_stream_call(&self, site: &Site) {
        let kind = site.spec.kind;
        if !matches!(
            kind,
            Kind::Work | Kind::EventRecord | Kind::Wait | Kind::GraphLaunch
        ) {
            return;
        }
        let Some(stream) = site.stream() else { return };
        let me = thread::current();
        match self.capturing(Some(stream)) {
            Capturing::Yes(id) => {
                let seq = self.next_seq();
                let ranges = nvtx::current_ranges();
                let mut state = lock(&self.state);
                state.captured(id, stream, &site.name(), seq, &me, ranges);
                match (kind, site.args.event) {
                    (Kind::EventRecord, Some(e)) => state.event_recorded(e, id, stream, seq),
                    (Kind::Wait, Some(e)) => state.event_waited(e, stream),
                    _ => {}
                }
            }
            Capturing::No if kind != Kind::Wait => {
                let escaped: Vec<u64> = lock(&self.state)
                    .active
                    .iter()
                    .filter(|c| c.escapes_from(site.context(), me.tid))
                    .map(|c| c.id)
                    .collect();
                if escaped.is_empty() {
                    return;
                }
                let (_, others) = self.running(site.context(), me.tid);
                let call = Call {
                    pid: 0,
                    seq: self.next_seq(),
                    driver: site.driver.clone(),
                    runtime: site.runtime.clone(),
                    code: 0,
                    thread: me,
                    stream: Some(stream),
                    active: escaped,
                    ranges: nvtx::current_ranges(),
                    capturing: Self::capturing_ranges(others),
                    backtrace: stack::capture().unwrap_or_default(),
                    ..Call::default()
                };
                let call = with_python(call);
                super::emit(|pid| Event::Escape(Call { pid, ..call }));
            }
            _ => {}
        }
    }
}

/// The frames, or none and why.
fn split(
    stack: Result<Vec<crate::event::PyFrame>, crate::event::PyMissing>,
) -> (Vec<crate::event::PyFrame>, Option<crate::event::PyMissing>) {
    match stack {
        Ok(frames) => (frames, None),
        Err(missing) => (Vec::new(), Some(missing)),
    }
}

/// A call with the calling thread's Python stack (read with no lock held).
fn with_python(call: Call) -> Call {
    let (python, python_missing) = split(python::capture(&python::CALLS));
    Call {
        python,
        python_missing,
        ..call
    }
}

fn capture_id(c: Capturing) -> Option<u64> {
    match c {
        Capturing::Yes(id) => Some(id),
        _ => None,
    }
}

/// The callback CUPTI calls. Declared with `u32` for the domain (ABI-identical to the C enum),
/// so that no out-of-range value can become a Rust enum.
pub(crate) extern "C" fn on_api(_user: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(t) = super::tracer() else { return };
        if data.is_null() {
            return;
        }
        // SAFETY: for the driver and runtime API domains (the only ones enabled), CUPTI passes a
        // CUpti_CallbackData valid for the duration of the callback.
        let data = unsafe { &*data.cast::<CUpti_CallbackData>() };
        t.on_callback(domain, cbid, data);
    }));
}
