//! The half of the tracer that runs inside the traced process, as `libgraphsmith_trace.so`.
//!
//! Two entry points, both `extern "C"`, both behind `catch_unwind` (a panic never crosses into
//! the host) and both returning success even when the tracer cannot attach (the host must run
//! as if untraced):
//! - `InitializeInjection`: CUDA calls it at `cuInit` when `CUDA_INJECTION64_PATH` names this
//!   library. It subscribes to CUPTI's driver and runtime API callbacks ([`callback`]).
//! - `InitializeInjectionNvtx2`: each NVTX instance calls it on its first NVTX call when
//!   `NVTX_INJECTION64_PATH` names this library ([`nvtx`]).
//!
//! Inside someone else's process the tracer writes nothing but its event log (no stderr, the
//! panic hook of this library's own std is silenced), holds no lock across a CUDA call, and
//! flushes each event as it happens, so a crash or `_exit` loses nothing already recorded.

mod api;
mod callback;
mod cbid;
mod graph_activity;
mod graph_cost;
mod lock;
mod nvtx;
mod python;
mod readback;
pub(crate) mod sink;
mod stack;
mod state;
mod thread;

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Once, OnceLock};

use cudarc::cupti::sys::{CUpti_CallbackDomain, CUpti_CallbackFunc, CUpti_SubscriberHandle};

use crate::event::{Event, Exit, Start, Untraced, UntracedReason};
use api::{Cupti, CuptiError, Driver};
use callback::Tracer;

static TRACER: OnceLock<Tracer> = OnceLock::new();

pub(crate) fn tracer() -> Option<&'static Tracer> {
    TRACER.get()
}

/// Writes an event (built with this process's id) when an event log is open.
pub(crate) fn emit(event: impl FnOnce(u32) -> Event) {
    if let Some(s) = sink::sink() {
        s.write(&event(std::process::id()));
    }
}

/// Silences this library's panic hook: a panic is caught at the entry point and must not print
/// into the host's stderr. (The library carries its own std, so the host's hook is untouched.)
pub(crate) fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::panic::set_hook(Box::new(|_| {})));
}

extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        let Some(sink) = sink::sink() else { return };
        let (driver_calls, runtime_calls, graph_launches, seq) = match tracer() {
            Some(t) => (
                t.driver_calls.load(Ordering::Relaxed),
                t.runtime_calls.load(Ordering::Relaxed),
                // try_lock: a thread that died holding it must not hang the exit.
                t.launches
                    .try_lock()
                    .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
                    .unwrap_or_default(),
                t.seq_now(),
            ),
            None => Default::default(),
        };
        // `--graphs`: launches and their device time (flushes CUPTI's activity buffers).
        if let Some(g) = tracer().and_then(|t| t.graphs.as_ref()) {
            sink.write(&g.at_exit(seq));
        }
        // `--hazards`: the launch sequence's summary (and `--launches-out`'s file).
        for e in callback::races::at_exit(seq) {
            sink.write(&e);
        }
        sink.write(&Event::Exit(Exit {
            pid: std::process::id(),
            seq,
            driver_calls,
            runtime_calls,
            graph_launches,
            backtraces_skipped: stack::SKIPPED.load(Ordering::Relaxed),
            events_dropped: sink.dropped.load(Ordering::Relaxed),
        }));
    });
}

fn untraced(reason: UntracedReason, detail: String) {
    emit(|pid| {
        Event::Untraced(Untraced {
            pid,
            reason,
            detail,
        })
    });
}

fn attach() {
    let Some(_) = sink::sink() else {
        // Nowhere to write: tracing would only cost the host time.
        return;
    };
    // SAFETY: at_exit is an extern "C" fn without arguments that never unwinds (catch_unwind).
    unsafe { libc::atexit(at_exit) };
    let cupti = match Cupti::load() {
        Ok(c) => c,
        Err(CuptiError::Missing(d)) => return untraced(UntracedReason::CuptiMissing, d),
        Err(CuptiError::Incomplete(d)) => return untraced(UntracedReason::CuptiIncomplete, d),
    };
    let tracer = TRACER.get_or_init(|| Tracer::new(cupti, Driver::load()));
    let cupti = &tracer.cupti;
    let mut subscriber: CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: on_api has the C signature CUPTI calls (userdata, domain, cbid, data) with the
    // domain as a 32-bit C enum, ABI-identical to the u32 it is declared with; the transmute
    // only restores the declared enum type of the parameter.
    let callback: CUpti_CallbackFunc = Some(unsafe {
        std::mem::transmute::<
            extern "C" fn(*mut std::ffi::c_void, u32, u32, *const std::ffi::c_void),
            unsafe extern "C" fn(
                *mut std::ffi::c_void,
                CUpti_CallbackDomain,
                u32,
                *const std::ffi::c_void,
            ),
        >(callback::on_api)
    });
    // SAFETY: subscriber is a local the call fills; the callback lives as long as the library,
    // which stays loaded (CUDA never unloads its injection).
    let r = unsafe { (cupti.subscribe)(&mut subscriber, callback, std::ptr::null_mut()) };
    if r != 0 {
        let reason = if r == 39 {
            UntracedReason::CuptiTaken
        } else {
            UntracedReason::CuptiFailed
        };
        return untraced(
            reason,
            format!("cuptiSubscribe: {} ({})", cupti.describe(r), cupti.origin),
        );
    }
    for domain in [
        CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
        CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
    ] {
        // SAFETY: subscriber was just returned by cuptiSubscribe.
        let r = unsafe { (cupti.enable_domain)(1, subscriber, domain) };
        if r != 0 {
            return untraced(
                UntracedReason::CuptiFailed,
                format!("cuptiEnableDomain({domain:?}): {}", cupti.describe(r)),
            );
        }
    }
    if tracer.graphs.is_some() {
        // `--graphs`: device time of graph launches (a reason is kept when it cannot start).
        graph_activity::start(cupti);
    }
    let mut version = 0u32;
    // SAFETY: version is a local the call fills.
    unsafe { (cupti.get_version)(&mut version) };
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    emit(|pid| {
        Event::Start(Start {
            pid,
            exe,
            cupti: cupti.origin.clone(),
            cupti_version: version,
        })
    });
}

/// CUDA's injection entry point (`CUDA_INJECTION64_PATH`). Always returns 1: a tracer that
/// cannot attach says so in its event log and leaves the process alone.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        quiet_panics();
        static ONCE: Once = Once::new();
        ONCE.call_once(attach);
    }));
    api::INJECTION_OK
}

pub use nvtx::InitializeInjectionNvtx2;
