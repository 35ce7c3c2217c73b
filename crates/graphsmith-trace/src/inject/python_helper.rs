//! The helper thread of both Python readers (the frames, in the parent module; the allocator's
//! snapshot, `python_eval.rs`) when the calling thread does not hold the GIL: a short-lived
//! detached thread takes the GIL (`PyGILState_Ensure`) and runs the job while the caller waits,
//! at most a given time. Past it the caller goes on without the result; the helper, once it
//! has the GIL, sees the request withdrawn and runs nothing (or, when the job had already
//! started, drops its result).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::Api;

/// What the caller gets.
pub(super) enum Outcome<T> {
    Done(T),
    /// The interpreter was not running when the helper started.
    NotRunning,
    /// No helper thread could be started.
    NoHelper,
    /// The helper did not finish within the wait.
    TimedOut,
}

enum Slot<T> {
    Waiting,
    Running,
    Done(T),
    NotRunning,
    Withdrawn,
}

struct Handoff<T> {
    slot: Mutex<Slot<T>>,
    done: Condvar,
}

fn lock<T>(h: &Handoff<T>) -> MutexGuard<'_, Slot<T>> {
    h.slot.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the helper thread runs: `true` when it holds the GIL, `false` when the interpreter was
/// not running.
struct Task {
    api: &'static Api,
    run: Box<dyn FnOnce(bool) + Send>,
}

/// Runs `job` on a helper thread that holds the GIL while it runs, and waits at most `wait` for
/// its result. With `exclusive`, the job runs under the hand-off's lock, so the caller cannot
/// stop waiting while it runs (the frame reader: the caller's frames must not change during the
/// read); otherwise the caller may give up during the job, whose result is then dropped.
pub(super) fn run_with_gil<T: Send + 'static>(
    api: &'static Api,
    wait: Duration,
    exclusive: bool,
    job: impl FnOnce() -> T + Send + 'static,
) -> Outcome<T> {
    let handoff = Arc::new(Handoff {
        slot: Mutex::new(Slot::Waiting),
        done: Condvar::new(),
    });
    let h = Arc::clone(&handoff);
    let run = move |has_gil: bool| {
        let mut slot = lock(&h);
        if !matches!(*slot, Slot::Waiting) {
            return;
        }
        if !has_gil {
            *slot = Slot::NotRunning;
            h.done.notify_one();
            return;
        }
        let result = if exclusive {
            job()
        } else {
            *slot = Slot::Running;
            drop(slot);
            let result = job();
            slot = lock(&h);
            if !matches!(*slot, Slot::Running) {
                return;
            }
            result
        };
        *slot = Slot::Done(result);
        h.done.notify_one();
    };
    let task = Box::into_raw(Box::new(Task {
        api,
        run: Box::new(run),
    }))
    .cast::<c_void>();
    // SAFETY: helper_main is ABI-identical as "C" and "C-unwind"; only a forced unwind (the
    // interpreter ending a thread) may leave it, which pthread_create's caller allows.
    let start = unsafe {
        std::mem::transmute::<
            extern "C-unwind" fn(*mut c_void) -> *mut c_void,
            extern "C" fn(*mut c_void) -> *mut c_void,
        >(helper_main)
    };
    // SAFETY: attr is initialised before use and destroyed after; the thread is detached and
    // owns the task (released by it, or here when it could not be started).
    let started = unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        let mut ok = libc::pthread_attr_init(&mut attr) == 0;
        if ok {
            libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
            libc::pthread_attr_setstacksize(&mut attr, 1024 * 1024);
            let mut tid: libc::pthread_t = 0;
            ok = libc::pthread_create(&mut tid, &attr, start, task) == 0;
            libc::pthread_attr_destroy(&mut attr);
        }
        if !ok {
            drop(Box::from_raw(task.cast::<Task>()));
        }
        ok
    };
    if !started {
        return Outcome::NoHelper;
    }
    let deadline = Instant::now() + wait;
    let mut slot = lock(&handoff);
    loop {
        match std::mem::replace(&mut *slot, Slot::Waiting) {
            Slot::Done(result) => return Outcome::Done(result),
            Slot::NotRunning => return Outcome::NotRunning,
            Slot::Running => *slot = Slot::Running,
            Slot::Waiting | Slot::Withdrawn => {}
        }
        let now = Instant::now();
        if now >= deadline {
            *slot = Slot::Withdrawn;
            return Outcome::TimedOut;
        }
        slot = match handoff.done.wait_timeout(slot, deadline - now) {
            Ok((s, _)) => s,
            Err(e) => e.into_inner().0,
        };
    }
}

/// The helper thread: takes the GIL, runs the task, releases the GIL. Until the GIL is held its
/// frame holds no value with a destructor (the task is a raw pointer), so the interpreter may
/// end the thread inside `PyGILState_Ensure`.
extern "C-unwind" fn helper_main(arg: *mut c_void) -> *mut c_void {
    let task = arg.cast::<Task>();
    // SAFETY: `arg` is the task run_with_gil handed over, alive until serve() releases it.
    let api: &'static Api = unsafe { (*task).api };
    if !api.running() {
        serve(task, false);
        return std::ptr::null_mut();
    }
    // SAFETY: PyGILState_Ensure may be called from any thread once the interpreter runs.
    let gil = unsafe { (api.gil_ensure)() };
    serve(task, true);
    // SAFETY: releases exactly the GIL state Ensure returned, on the same thread.
    unsafe { (api.gil_release)(gil) };
    std::ptr::null_mut()
}

fn serve(task: *mut Task, has_gil: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: takes back the task run_with_gil handed to this thread (once).
        let task = unsafe { Box::from_raw(task) };
        (task.run)(has_gil);
    }));
}
