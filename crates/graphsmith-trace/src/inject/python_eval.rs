//! PyTorch's caching-allocator blocks, read in the traced process at an instantiation
//! (`--hazards`): a few lines of Python run through CPython's C API (`PyRun_StringFlags` in a
//! fresh dictionary) call `torch.cuda.memory_snapshot()` when the process has imported torch
//! and initialised CUDA (torch is never imported here), and hand back one text line per segment
//! and block, which `crate::hazard::bounds::parse_snapshot` reads.
//!
//! The GIL, as for Python frames (see the parent module): when the instantiating thread holds
//! it, the snippet runs on that thread (the allocator's mutex is recursive, so a thread that
//! holds it may take the snapshot too). PyTorch releases the GIL around `capture_end` and
//! `replay`, where it instantiates, so the common case is a short-lived helper thread that
//! takes the GIL and runs the snippet while the caller waits, at most [`WAIT`]. The caller holds
//! none of the tracer's locks meanwhile, and PyTorch holds no allocator lock around its
//! `cudaGraphInstantiate`, so the snapshot's mutex is free. Past the wait the caller goes on
//! with the driver's allocations (the report says why) and the helper, if it has not started
//! the snapshot yet, runs nothing. After [`MAX_GIVEUPS`] waits that ran out the helper is not
//! tried again in the process. What cannot be avoided: a program that instantiates while it
//! holds the allocator's mutex and has released the GIL keeps the helper waiting on that mutex
//! (the caller still goes on after [`WAIT`]).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{api, find, handles, Api, Obj};

/// How long an instantiation waits for the helper's snapshot.
pub(crate) const WAIT: Duration = Duration::from_secs(2);
/// Waits that ran out before the helper is given up in the process.
pub(crate) const MAX_GIVEUPS: u64 = 2;
static GIVEUPS: AtomicU64 = AtomicU64::new(0);

/// `Py_file_input`.
const FILE_INPUT: c_int = 257;

/// Sets `_gs_result`: the snapshot's lines, or `!` and why there is none. Never raises.
const SNAPSHOT: &CStr = c"
import sys as _sys
_t = _sys.modules.get('torch')
try:
    if _t is None:
        _gs_result = '!the process has not imported torch'
    elif not _t.cuda.is_initialized():
        _gs_result = '!torch has not initialised CUDA'
    else:
        _lines = []
        for _s in _t.cuda.memory_snapshot():
            _p = _s.get('segment_pool_id')
            if _p is None:
                _p = '-'
            else:
                try:
                    _p = ','.join(str(int(_x)) for _x in _p)
                except TypeError:
                    _p = str(int(_p))
            _base = int(_s['address'])
            _lines.append('S %d %s' % (_base, _p))
            _c = _base
            for _b in _s.get('blocks', ()):
                _n = int(_b.get('size', 0))
                _a = int(_b['address']) if 'address' in _b else _c
                _c = _a + _n
                _lines.append('B %d %d %s' % (_a, _n, _b.get('state', '') or '-'))
        _gs_result = '\\n'.join(_lines)
except Exception as _e:
    _gs_result = '!torch.cuda.memory_snapshot() raised %s: %s' % (type(_e).__name__, _e)
";

/// The functions the snippet needs besides the frame reader's.
struct Run {
    run_string: unsafe extern "C" fn(*const c_char, c_int, Obj, Obj, *mut c_void) -> Obj,
    dict_new: unsafe extern "C" fn() -> Obj,
    dict_get: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    dict_set: unsafe extern "C" fn(Obj, *const c_char, Obj) -> c_int,
    builtins: unsafe extern "C" fn() -> Obj,
}

fn run_api() -> Option<&'static Run> {
    static RUN: OnceLock<Option<Run>> = OnceLock::new();
    RUN.get_or_init(|| {
        let h = &handles();
        Some(Run {
            run_string: func!(
                h,
                c"PyRun_StringFlags"
                    as unsafe extern "C" fn(*const c_char, c_int, Obj, Obj, *mut c_void) -> Obj
            )?,
            dict_new: func!(h, c"PyDict_New" as unsafe extern "C" fn() -> Obj)?,
            dict_get: func!(
                h,
                c"PyDict_GetItemString" as unsafe extern "C" fn(Obj, *const c_char) -> Obj
            )?,
            dict_set: func!(
                h,
                c"PyDict_SetItemString" as unsafe extern "C" fn(Obj, *const c_char, Obj) -> c_int
            )?,
            builtins: func!(h, c"PyEval_GetBuiltins" as unsafe extern "C" fn() -> Obj)?,
        })
    })
    .as_ref()
}

/// Runs [`SNAPSHOT`] and returns `_gs_result`.
///
/// # Safety
/// The calling thread holds the GIL.
unsafe fn run_snapshot(api: &Api, run: &Run) -> Result<String, String> {
    // SAFETY (all calls below): the caller holds the GIL; every new reference is released
    // exactly once, borrowed ones (builtins, the result) are not; the pending error is saved
    // before and restored after.
    unsafe {
        let saved = api.save_error();
        let globals = (run.dict_new)();
        let out = if globals.is_null() {
            Err("PyDict_New failed".to_string())
        } else {
            let builtins = (run.builtins)();
            if !builtins.is_null() {
                (run.dict_set)(globals, c"__builtins__".as_ptr(), builtins);
            }
            let done = (run.run_string)(
                SNAPSHOT.as_ptr(),
                FILE_INPUT,
                globals,
                globals,
                std::ptr::null_mut(),
            );
            let out = if done.is_null() {
                Err("the snapshot's Python code failed to run".to_string())
            } else {
                (api.decref)(done);
                let value = (run.dict_get)(globals, c"_gs_result".as_ptr());
                let utf8 = if value.is_null() {
                    std::ptr::null()
                } else {
                    (api.as_utf8)(value)
                };
                if utf8.is_null() {
                    Err("the snapshot's Python code left no result".to_string())
                } else {
                    let text = CStr::from_ptr(utf8).to_string_lossy().into_owned();
                    match text.strip_prefix('!') {
                        Some(why) => Err(why.to_string()),
                        None => Ok(text),
                    }
                }
            };
            (api.decref)(globals);
            out
        };
        (api.err_clear)();
        api.restore_error(saved);
        out
    }
}

/// The caching allocator's snapshot as text (see [`SNAPSHOT`]), or why it was not read.
pub(crate) fn allocator_snapshot() -> Result<String, String> {
    let api = api().map_err(|m| match m {
        crate::event::PyMissing::NotPython => "not a Python process".to_string(),
        other => format!("Python is loaded but {}", other.text()),
    })?;
    let Some(run) = run_api() else {
        return Err("this Python lacks PyRun_StringFlags or the dict API".to_string());
    };
    if !api.running() {
        return Err("the interpreter was not running".to_string());
    }
    // SAFETY: reads this thread's entry of the GIL state's thread-local key; no GIL needed.
    let mine = unsafe { (api.this_thread_state)() };
    // SAFETY: both may be called without the GIL (they read, never wait).
    let holds = !mine.is_null()
        && unsafe {
            (api.gil_check)() == 1 && api.running_state.is_none_or(|running| running() == mine)
        };
    if holds {
        // SAFETY: this thread holds the GIL.
        return unsafe { run_snapshot(api, run) };
    }
    if GIVEUPS.load(Ordering::Relaxed) >= MAX_GIVEUPS {
        return Err(format!(
            "the GIL was not free within {} s twice in this process; no longer asked",
            WAIT.as_secs()
        ));
    }
    via_helper(api, run)
}

enum Slot {
    Waiting,
    Running,
    Done(Result<String, String>),
    NotRunning,
    Withdrawn,
}

struct Request {
    api: &'static Api,
    run: &'static Run,
    slot: Mutex<Slot>,
    done: Condvar,
}

fn lock(req: &Request) -> std::sync::MutexGuard<'_, Slot> {
    req.slot.lock().unwrap_or_else(|e| e.into_inner())
}

fn via_helper(api: &'static Api, run: &'static Run) -> Result<String, String> {
    let req = Arc::new(Request {
        api,
        run,
        slot: Mutex::new(Slot::Waiting),
        done: Condvar::new(),
    });
    let raw = Arc::into_raw(Arc::clone(&req)).cast_mut().cast::<c_void>();
    // SAFETY: helper_main is ABI-identical as "C" and "C-unwind"; only a forced unwind (the
    // interpreter ending a thread) may leave it, which pthread_create's caller allows.
    let start = unsafe {
        std::mem::transmute::<
            extern "C-unwind" fn(*mut c_void) -> *mut c_void,
            extern "C" fn(*mut c_void) -> *mut c_void,
        >(helper_main)
    };
    // SAFETY: attr is initialised before use and destroyed after; the thread is detached and
    // owns the reference `raw` (released by it, or here when it could not be started).
    let started = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut ok = libc::pthread_attr_init(&mut attr) == 0;
        if ok {
            libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
            libc::pthread_attr_setstacksize(&mut attr, 1024 * 1024);
            let mut tid: libc::pthread_t = 0;
            ok = libc::pthread_create(&mut tid, &attr, start, raw) == 0;
            libc::pthread_attr_destroy(&mut attr);
        }
        if !ok {
            drop(Arc::from_raw(raw.cast::<Request>()));
        }
        ok
    };
    if !started {
        return Err("no helper thread could be started to take the GIL".to_string());
    }
    let deadline = Instant::now() + WAIT;
    let mut slot = lock(&req);
    loop {
        match std::mem::replace(&mut *slot, Slot::Waiting) {
            Slot::Done(result) => return result,
            Slot::NotRunning => return Err("the interpreter was not running".to_string()),
            Slot::Running => *slot = Slot::Running,
            Slot::Waiting | Slot::Withdrawn => {}
        }
        let now = Instant::now();
        if now >= deadline {
            *slot = Slot::Withdrawn;
            GIVEUPS.fetch_add(1, Ordering::Relaxed);
            return Err(format!(
                "the thread does not hold the GIL and the snapshot was not read within {} s",
                WAIT.as_secs()
            ));
        }
        slot = match req.done.wait_timeout(slot, deadline - now) {
            Ok((s, _)) => s,
            Err(e) => e.into_inner().0,
        };
    }
}

/// The helper thread: takes the GIL, runs the snippet unless the request was withdrawn,
/// releases the GIL. Until the GIL is held its frame holds no value with a destructor, so the
/// interpreter may end the thread inside `PyGILState_Ensure`.
extern "C-unwind" fn helper_main(arg: *mut c_void) -> *mut c_void {
    let req = arg.cast_const().cast::<Request>();
    // SAFETY: `arg` is the reference via_helper handed over; the Request is alive until it is
    // released in serve().
    let api: &'static Api = unsafe { (*req).api };
    if !api.running() {
        serve(req, false);
        return std::ptr::null_mut();
    }
    // SAFETY: PyGILState_Ensure may be called from any thread once the interpreter runs.
    let gil = unsafe { (api.gil_ensure)() };
    serve(req, true);
    // SAFETY: releases exactly the GIL state Ensure returned, on the same thread.
    unsafe { (api.gil_release)(gil) };
    std::ptr::null_mut()
}

fn serve(req: *const Request, has_gil: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: takes back the reference via_helper handed to this thread.
        let req = unsafe { Arc::from_raw(req) };
        {
            let mut slot = lock(&req);
            if !matches!(*slot, Slot::Waiting) {
                return;
            }
            if !has_gil {
                *slot = Slot::NotRunning;
                req.done.notify_one();
                return;
            }
            // Not held while the snippet runs: the caller must be free to give up.
            *slot = Slot::Running;
        }
        // SAFETY: this thread holds the GIL.
        let result = unsafe { run_snapshot(req.api, req.run) };
        let mut slot = lock(&req);
        if matches!(*slot, Slot::Running) {
            *slot = Slot::Done(result);
            req.done.notify_one();
        }
    }));
}
