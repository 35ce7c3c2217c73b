//! Thread identity: the OS thread id (what `ps -L`, gdb and `nvtxNameOsThread` use) and a name.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::event::Thread;

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
    static COMM: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// This thread's OS id (`gettid`), cached per thread.
pub(crate) fn tid() -> u32 {
    TID.try_with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no preconditions and cannot fail.
            t.set(unsafe { libc::gettid() } as u32);
        }
        t.get()
    })
    // SAFETY: as above (this thread's thread-locals are being destroyed).
    .unwrap_or_else(|_| unsafe { libc::gettid() } as u32)
}

fn given_names() -> &'static Mutex<HashMap<u32, String>> {
    static T: OnceLock<Mutex<HashMap<u32, String>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// Records the name a thread was given with `nvtxNameOsThread` (the NVTX hooks call it).
pub(crate) fn set_given_name(tid: u32, name: String) {
    given_names()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(tid, name);
}

/// The name a thread was given with `nvtxNameOsThread`.
fn given_name(tid: u32) -> Option<String> {
    given_names()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&tid)
        .cloned()
}

/// A thread's name: the one given with `nvtxNameOsThread`, else its `comm`.
pub(crate) fn name(tid: u32) -> String {
    if let Some(n) = given_name(tid) {
        return n;
    }
    std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The calling thread (its `comm` read once per thread).
pub(crate) fn current() -> Thread {
    let tid = tid();
    if let Some(n) = given_name(tid) {
        return Thread { tid, name: n };
    }
    let name = COMM
        .try_with(|c| {
            c.try_borrow_mut()
                .map(|mut c| c.get_or_insert_with(|| name(tid)).clone())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    Thread { tid, name }
}

/// Another thread, by id.
pub(crate) fn other(tid: u32) -> Thread {
    Thread {
        tid,
        name: name(tid),
    }
}
