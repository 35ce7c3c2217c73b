//! Destruction deferred behind running captures. While a graphsmith capture runs in a context,
//! destroying or freeing a driver object (`cuMemFree`, `cuGraphDestroy`, `cuGraphExecDestroy`,
//! ...) may count as an unsafe call and invalidate the capture, and an executable cannot wait
//! for its work without synchronising. So `Drop` hands such work to the context, which does it
//! when the last capture ends ([`Context::run_deferred`]).

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::{self, Failure};
use crate::error::ObjectRef;

/// One driver object to destroy or free.
pub(crate) enum Destroy {
    Free(sys::CUdeviceptr),
    /// Page-locked host memory (`memory/host.rs`): the context is synchronised first, so that
    /// no copy issued eagerly on any stream still reads or writes it.
    FreeHost(*mut u8),
    Graph(sys::CUgraph),
    Event(sys::CUevent),
    Stream(sys::CUstream),
    Library(sys::CUlibrary),
    Exec(sys::CUgraphExec),
}

// SAFETY: each variant holds a driver handle owned by nobody else any more (its owner gave it
// up in Drop); driver handles may be used from any thread.
unsafe impl Send for Destroy {}

impl Destroy {
    /// Makes the call. The handle's context must be current.
    pub(crate) fn run(self) -> Result<(), Failure> {
        // SAFETY (every arm): the handle came from the matching create call of this context,
        // its owner gave it up (nothing uses it any more), and it is destroyed exactly once,
        // here (self is consumed).
        unsafe {
            match self {
                Destroy::Free(ptr) => driver::mem_free(ptr),
                Destroy::FreeHost(ptr) => {
                    driver::synchronize_context().and_then(|()| driver::mem_free_host(ptr))
                }
                Destroy::Graph(g) => driver::graph_destroy(g),
                Destroy::Event(e) => driver::event_destroy(e),
                Destroy::Stream(s) => driver::stream_destroy(s),
                Destroy::Library(l) => driver::library_unload(l),
                Destroy::Exec(e) => driver::exec_destroy(e),
            }
        }
    }
}

/// Work left for the end of the running captures.
pub(crate) enum Deferred {
    Destroy(ObjectRef, Destroy),
    /// An executable whose work must be waited for first.
    Exec(Box<dyn Retired>),
}

/// An executable dropped while its work could not be waited for (a capture was running),
/// implemented by the executable layer above.
pub(crate) trait Retired: Send {
    /// Waits for the executable's work and destroys it; gives itself back when it still
    /// cannot wait (a stream is capturing).
    fn finish(self: Box<Self>, ctx: &Context) -> Option<Box<dyn Retired>>;
}

impl Context {
    /// Destroys or frees a driver object now, or when the running captures end. Never panics;
    /// failures go to [`Context::drop_failures`].
    pub(crate) fn destroy(&self, object: impl FnOnce() -> ObjectRef, what: Destroy) {
        if self.captures_active() {
            self.defer(Deferred::Destroy(object(), what));
            return;
        }
        self.drop_call(object, || what.run());
    }

    /// One graphsmith capture is over in the driver (ended, or its begin failed): when it was
    /// the last, does the deferred work.
    pub(crate) fn capture_gone(&self) {
        let before = self
            .inner
            .active_captures
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        if before == 1 {
            self.run_deferred();
        }
    }

    pub(crate) fn defer(&self, work: Deferred) {
        self.inner
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(work);
    }

    /// Does the work deferred while captures ran, oldest first. Executables whose streams are
    /// still capturing (a capture graphsmith does not know of) stay deferred.
    pub(crate) fn run_deferred(&self) {
        let pending = std::mem::take(
            &mut *self
                .inner
                .deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for work in pending {
            match work {
                // Another capture may have begun since the last one ended.
                Deferred::Destroy(object, what) if self.captures_active() => {
                    self.defer(Deferred::Destroy(object, what))
                }
                Deferred::Destroy(object, what) => self.drop_call(|| object, || what.run()),
                Deferred::Exec(exec) => {
                    if let Some(exec) = exec.finish(self) {
                        self.defer(Deferred::Exec(exec));
                    }
                }
            }
        }
    }
}
