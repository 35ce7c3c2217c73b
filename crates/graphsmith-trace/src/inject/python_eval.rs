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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::{api, find, handles, helper, Api, Obj};

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

fn via_helper(api: &'static Api, run: &'static Run) -> Result<String, String> {
    // Not exclusive: the caller may give up while the snapshot runs (it reads no state of the
    // caller's), and goes on with the driver's allocations.
    let snapshot = move || {
        // SAFETY: run_with_gil runs this on the helper thread while it holds the GIL.
        unsafe { run_snapshot(api, run) }
    };
    match helper::run_with_gil(api, WAIT, false, snapshot) {
        helper::Outcome::Done(result) => result,
        helper::Outcome::NotRunning => Err("the interpreter was not running".to_string()),
        helper::Outcome::NoHelper => {
            Err("no helper thread could be started to take the GIL".to_string())
        }
        helper::Outcome::TimedOut => {
            GIVEUPS.fetch_add(1, Ordering::Relaxed);
            Err(format!(
                "the thread does not hold the GIL and the snapshot was not read within {} s",
                WAIT.as_secs()
            ))
        }
    }
}
