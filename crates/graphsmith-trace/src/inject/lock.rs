//! A poisoned lock is still a lock: the tracer must never panic inside another process, so
//! every mutex is taken through [`lock`], which recovers the guard of a lock whose holder
//! panicked (the data a callback left half-written is bookkeeping, never memory safety).

use std::sync::{Mutex, MutexGuard};

/// Takes `m`, recovering the guard if a holder panicked.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
