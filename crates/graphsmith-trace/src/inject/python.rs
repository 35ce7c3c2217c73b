//! Python frames at failing calls, escapes and capture begins: when the calling thread runs
//! Python (PyTorch), its Python stack is read in the process through CPython's C API, found at
//! run time (`dlsym`, in the executable or a loaded `libpython3.X.so`; libpython is never
//! linked), so that a process without Python is left alone ([`PyMissing::NotPython`]).
//!
//! The GIL decides how the frames are read:
//! - the calling thread holds it (`PyGILState_Check`, and it is the thread state the
//!   interpreter runs): the frames are read at once, on the calling thread;
//! - it released it: PyTorch releases the GIL around its operators, `torch.cuda.synchronize`
//!   and `capture_begin`, so this is the common case. The calling thread must not take the GIL
//!   back itself: a thread that holds the GIL may be waiting on a lock the caller holds (the
//!   caching allocator's), a deadlock. A short-lived helper thread takes the GIL instead
//!   (`PyGILState_Ensure`) and reads the caller's frames from the caller's thread state
//!   (`PyThreadState_GetFrame`, as `sys._current_frames` does) while the caller waits, at most
//!   [`WAIT`]. The caller's frames cannot change meanwhile: it is blocked inside the CUDA call.
//!   Past the wait the caller goes on without Python frames ([`PyMissing::GilBusy`]); the
//!   helper, once it has the GIL, sees the request withdrawn, reads nothing and releases it.
//!   After [`MAX_GIVEUPS`] such waits the helper is not tried again in the process.
//!
//! Every new reference is released (`Py_DecRef`), a Python error raised while reading is
//! cleared and the one pending before (if any) restored. At most [`MAX_STACKS`] stacks per
//! process for capture begins and as many for calls (so that many captures cannot use up what
//! the failing call needs), [`MAX_FRAMES`] frames each.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::event::{Origin, PyFrame, PyMissing};

/// Python stacks read per process.
pub(crate) const MAX_STACKS: u64 = 64;
/// Frames kept per stack, innermost first.
pub(crate) const MAX_FRAMES: usize = 64;
/// How long a call that released the GIL waits for the helper to read its frames.
pub(crate) const WAIT: Duration = Duration::from_millis(500);
/// Waits that ran out before the helper is given up in the process.
pub(crate) const MAX_GIVEUPS: u64 = 2;

/// Stacks read at capture begins.
pub(crate) static BEGINS: AtomicU64 = AtomicU64::new(0);
/// Stacks read at failing calls and escapes.
pub(crate) static CALLS: AtomicU64 = AtomicU64::new(0);
static GIVEUPS: AtomicU64 = AtomicU64::new(0);

type Obj = *mut c_void;

/// How the pending Python error is saved and restored around the reading.
enum ErrApi {
    /// Python 3.12 and later.
    Raised {
        get: unsafe extern "C" fn() -> Obj,
        set: unsafe extern "C" fn(Obj),
    },
    /// Before 3.12 (deprecated since, still exported).
    Fetch {
        fetch: unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj),
        restore: unsafe extern "C" fn(Obj, Obj, Obj),
    },
}

/// The saved error, restored by [`Api::restore_error`].
enum Saved {
    Raised(Obj),
    Fetched(Obj, Obj, Obj),
}

/// CPython's functions the reader calls.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    /// `Py_IsFinalizing` (3.13) or `_Py_IsFinalizing` (3.7 to 3.12).
    is_finalizing: Option<unsafe extern "C" fn() -> c_int>,
    gil_check: unsafe extern "C" fn() -> c_int,
    /// `PyThreadState_GetUnchecked` (3.13) or `_PyThreadState_UncheckedGet`: the thread state
    /// that runs now (holds the GIL), never a fatal error.
    running_state: Option<unsafe extern "C" fn() -> Obj>,
    this_thread_state: unsafe extern "C" fn() -> Obj,
    /// "C-unwind": before Python 3.14 a thread that asks for the GIL while the interpreter
    /// finalises is ended with `pthread_exit`, a forced unwind out of this call.
    gil_ensure: unsafe extern "C-unwind" fn() -> c_int,
    gil_release: unsafe extern "C" fn(c_int),
    thread_frame: unsafe extern "C" fn(Obj) -> Obj,
    frame_code: unsafe extern "C" fn(Obj) -> Obj,
    frame_back: unsafe extern "C" fn(Obj) -> Obj,
    frame_line: unsafe extern "C" fn(Obj) -> c_int,
    get_attr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    as_utf8: unsafe extern "C" fn(Obj) -> *const c_char,
    decref: unsafe extern "C" fn(Obj),
    err_clear: unsafe extern "C" fn(),
    err: ErrApi,
}

/// Where CPython's symbols may be: the global scope first, then each loaded libpython (loaded
/// with `RTLD_LOCAL` by an embedding host, its symbols are not global).
fn handles() -> Vec<*mut c_void> {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for each loaded object, and `out` is the
        // Vec handed to it below, alive for the whole iteration.
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<Vec<u8>>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: dlpi_name is a NUL-terminated path owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
            let file = name.rsplit(|b| *b == b'/').next().unwrap_or_default();
            if file.starts_with(b"libpython3") {
                out.push(name.to_vec());
            }
        }
        0
    }
    let mut names: Vec<Vec<u8>> = Vec::new();
    // SAFETY: `each` only reads the info it is given and writes into `names`, which outlives
    // the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut names as *mut Vec<Vec<u8>>).cast()) };
    let mut handles = vec![libc::RTLD_DEFAULT];
    for mut name in names {
        name.push(0);
        // SAFETY: name is NUL-terminated; RTLD_NOLOAD only returns a handle to a library that
        // is already loaded (never loads one), which is never closed.
        let h = unsafe { libc::dlopen(name.as_ptr().cast(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            handles.push(h);
        }
    }
    handles
}

fn find(handles: &[*mut c_void], name: &CStr) -> Option<*mut c_void> {
    handles.iter().find_map(|h| {
        // SAFETY: h is RTLD_DEFAULT or a handle dlopen returned; name is NUL-terminated.
        let p = unsafe { libc::dlsym(*h, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    })
}

/// Turns a symbol's address into a function pointer of the type it is declared with.
macro_rules! func {
    ($handles:expr, $name:literal as $ty:ty) => {
        find($handles, $name).map(|p| {
            // SAFETY: the symbol is CPython's function of that name, whose C signature is $ty
            // (stable C API, Python 3.9 and later).
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        })
    };
}

impl Api {
    fn load() -> Result<Api, PyMissing> {
        let h = &handles();
        let Some(is_initialized) = func!(h, c"Py_IsInitialized" as unsafe extern "C" fn() -> c_int)
        else {
            return Err(PyMissing::NotPython);
        };
        let err = match (
            func!(
                h,
                c"PyErr_GetRaisedException" as unsafe extern "C" fn() -> Obj
            ),
            func!(h, c"PyErr_SetRaisedException" as unsafe extern "C" fn(Obj)),
            func!(
                h,
                c"PyErr_Fetch" as unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj)
            ),
            func!(h, c"PyErr_Restore" as unsafe extern "C" fn(Obj, Obj, Obj)),
        ) {
            (Some(get), Some(set), _, _) => ErrApi::Raised { get, set },
            (_, _, Some(fetch), Some(restore)) => ErrApi::Fetch { fetch, restore },
            _ => return Err(PyMissing::Unsupported),
        };
        let is_finalizing = func!(h, c"Py_IsFinalizing" as unsafe extern "C" fn() -> c_int)
            .or_else(|| func!(h, c"_Py_IsFinalizing" as unsafe extern "C" fn() -> c_int));
        let running_state = func!(
            h,
            c"PyThreadState_GetUnchecked" as unsafe extern "C" fn() -> Obj
        )
        .or_else(|| {
            func!(
                h,
                c"_PyThreadState_UncheckedGet" as unsafe extern "C" fn() -> Obj
            )
        });
        let api = (|| {
            Some(Api {
                is_initialized,
                is_finalizing,
                gil_check: func!(h, c"PyGILState_Check" as unsafe extern "C" fn() -> c_int)?,
                running_state,
                this_thread_state: func!(
                    h,
                    c"PyGILState_GetThisThreadState" as unsafe extern "C" fn() -> Obj
                )?,
                gil_ensure: func!(
                    h,
                    c"PyGILState_Ensure" as unsafe extern "C-unwind" fn() -> c_int
                )?,
                gil_release: func!(h, c"PyGILState_Release" as unsafe extern "C" fn(c_int))?,
                thread_frame: func!(
                    h,
                    c"PyThreadState_GetFrame" as unsafe extern "C" fn(Obj) -> Obj
                )?,
                frame_code: func!(h, c"PyFrame_GetCode" as unsafe extern "C" fn(Obj) -> Obj)?,
                frame_back: func!(h, c"PyFrame_GetBack" as unsafe extern "C" fn(Obj) -> Obj)?,
                frame_line: func!(
                    h,
                    c"PyFrame_GetLineNumber" as unsafe extern "C" fn(Obj) -> c_int
                )?,
                get_attr: func!(
                    h,
                    c"PyObject_GetAttrString" as unsafe extern "C" fn(Obj, *const c_char) -> Obj
                )?,
                as_utf8: func!(
                    h,
                    c"PyUnicode_AsUTF8" as unsafe extern "C" fn(Obj) -> *const c_char
                )?,
                decref: func!(h, c"Py_DecRef" as unsafe extern "C" fn(Obj))?,
                err_clear: func!(h, c"PyErr_Clear" as unsafe extern "C" fn())?,
                err,
            })
        })();
        api.ok_or(PyMissing::Unsupported)
    }

    /// The interpreter runs and is not finalising.
    fn running(&self) -> bool {
        // SAFETY: both may be called at any time, with or without the GIL.
        unsafe { (self.is_initialized)() == 1 && self.is_finalizing.is_none_or(|f| f() == 0) }
    }

    /// # Safety
    /// The calling thread holds the GIL.
    unsafe fn save_error(&self) -> Saved {
        match self.err {
            // SAFETY: the caller holds the GIL.
            ErrApi::Raised { get, .. } => Saved::Raised(unsafe { get() }),
            ErrApi::Fetch { fetch, .. } => {
                let (mut t, mut v, mut tb) = (
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
                // SAFETY: the caller holds the GIL; the three out-pointers are locals.
                unsafe { fetch(&mut t, &mut v, &mut tb) };
                Saved::Fetched(t, v, tb)
            }
        }
    }

    /// # Safety
    /// The calling thread holds the GIL; `saved` came from [`Api::save_error`] on this thread.
    unsafe fn restore_error(&self, saved: Saved) {
        match (&self.err, saved) {
            // SAFETY: the caller holds the GIL; the references saved are handed back.
            (ErrApi::Raised { set, .. }, Saved::Raised(e)) => unsafe { set(e) },
            // SAFETY: as above.
            (ErrApi::Fetch { restore, .. }, Saved::Fetched(t, v, tb)) => unsafe {
                restore(t, v, tb)
            },
            _ => {}
        }
    }

    /// A string attribute of an object, copied.
    ///
    /// # Safety
    /// The calling thread holds the GIL; `obj` is a live object.
    unsafe fn attr(&self, obj: Obj, name: &CStr) -> Option<String> {
        // SAFETY: the caller holds the GIL and obj is live; name is NUL-terminated.
        let value = unsafe { (self.get_attr)(obj, name.as_ptr()) };
        if value.is_null() {
            // SAFETY: the caller holds the GIL.
            unsafe { (self.err_clear)() };
            return None;
        }
        // SAFETY: value is a live object (a new reference); a non-str sets an error, cleared.
        let utf8 = unsafe { (self.as_utf8)(value) };
        let text = if utf8.is_null() {
            // SAFETY: the caller holds the GIL.
            unsafe { (self.err_clear)() };
            None
        } else {
            // SAFETY: the UTF-8 buffer is NUL-terminated and lives as long as `value`: it is
            // copied before the reference is released.
            Some(
                unsafe { CStr::from_ptr(utf8) }
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        // SAFETY: releases the new reference GetAttrString returned.
        unsafe { (self.decref)(value) };
        text
    }

    /// The frames of a thread state, innermost first.
    ///
    /// # Safety
    /// The calling thread holds the GIL; `tstate` is a live thread state whose thread runs no
    /// Python code meanwhile (it is the calling thread, or is blocked waiting for this read).
    unsafe fn read(&self, tstate: Obj) -> Vec<PyFrame> {
        // SAFETY (all calls below): the caller holds the GIL; each object is a live new
        // reference, released exactly once.
        unsafe {
            let saved = self.save_error();
            let mut frames = Vec::new();
            let mut frame = (self.thread_frame)(tstate);
            while !frame.is_null() && frames.len() < MAX_FRAMES {
                let code = (self.frame_code)(frame);
                let line = (self.frame_line)(frame);
                let (mut file, mut function) = (String::new(), String::new());
                if !code.is_null() {
                    file = self.attr(code, c"co_filename").unwrap_or_default();
                    function = self
                        .attr(code, c"co_qualname")
                        .or_else(|| self.attr(code, c"co_name"))
                        .unwrap_or_default();
                    (self.decref)(code);
                }
                let back = (self.frame_back)(frame);
                (self.decref)(frame);
                frame = back;
                frames.push(PyFrame {
                    origin: Origin::of(&file),
                    file,
                    line: u32::try_from(line).unwrap_or(0),
                    function,
                });
            }
            if !frame.is_null() {
                (self.decref)(frame);
            }
            (self.err_clear)();
            self.restore_error(saved);
            frames
        }
    }
}

fn api() -> Result<&'static Api, PyMissing> {
    static API: OnceLock<Result<Api, PyMissing>> = OnceLock::new();
    API.get_or_init(Api::load).as_ref().map_err(|m| *m)
}

/// Whether the process has CPython loaded (its stacks can be read).
pub(crate) fn loaded() -> bool {
    !matches!(api(), Err(PyMissing::NotPython))
}

/// The calling thread's Python stack, innermost first, or why there is none; `budget` counts
/// the stacks read ([`BEGINS`] or [`CALLS`]).
pub(crate) fn capture(budget: &AtomicU64) -> Result<Vec<PyFrame>, PyMissing> {
    let api = api()?;
    if !api.running() {
        return Err(PyMissing::NotRunning);
    }
    // SAFETY: reads this thread's entry of the GIL state's thread-local key; no GIL needed.
    let mine = unsafe { (api.this_thread_state)() };
    if mine.is_null() {
        return Err(PyMissing::NoThreadState);
    }
    if budget.fetch_add(1, Ordering::Relaxed) >= MAX_STACKS {
        return Err(PyMissing::Budget);
    }
    // SAFETY: both may be called without the GIL (they read, never wait).
    let holds = unsafe {
        (api.gil_check)() == 1 && api.running_state.is_none_or(|running| running() == mine)
    };
    if holds {
        // SAFETY: this thread holds the GIL and `mine` is its own thread state.
        return Ok(unsafe { api.read(mine) });
    }
    if GIVEUPS.load(Ordering::Relaxed) >= MAX_GIVEUPS {
        return Err(PyMissing::GilBusy);
    }
    via_helper(api, mine)
}

fn via_helper(api: &'static Api, tstate: Obj) -> Result<Vec<PyFrame>, PyMissing> {
    let tstate = tstate as usize;
    // Exclusive: the caller cannot stop waiting while its frames are read.
    let read = move || {
        // SAFETY: run_with_gil runs this on the helper thread while it holds the GIL; the
        // caller's thread is blocked waiting for the result (exclusive), inside a CUDA call: it
        // runs no Python code, and its thread state lives.
        unsafe { api.read(tstate as Obj) }
    };
    match helper::run_with_gil(api, WAIT, true, read) {
        helper::Outcome::Done(frames) => Ok(frames),
        helper::Outcome::NotRunning => Err(PyMissing::NotRunning),
        helper::Outcome::NoHelper => Err(PyMissing::NoHelper),
        helper::Outcome::TimedOut => {
            GIVEUPS.fetch_add(1, Ordering::Relaxed);
            Err(PyMissing::GilBusy)
        }
    }
}

/// The helper thread both readers use.
#[path = "python_helper.rs"]
mod helper;

/// PyTorch's caching-allocator blocks, read through the same API (`--hazards`).
#[path = "python_eval.rs"]
pub(crate) mod eval;

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
