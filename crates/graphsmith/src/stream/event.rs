//! Events: recorded on streams, waited on by streams, queried and synchronised by the host.
//! `Event::query` and `Event::synchronize` are journaled: on an event recorded inside a running
//! capture the driver refuses both (`CUDA_ERROR_CAPTURED_EVENT`) and invalidates the capture.

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::context::Op;
use crate::driver::{self, check, Failure};
use crate::error::{ObjectKind, ObjectRef, Result, SourceLine};

pub(crate) struct EventInner {
    pub raw: sys::CUevent,
    /// Unique in the process (never reused, unlike `raw`): the event's id in launch logs.
    pub id: u64,
    pub label: String,
    pub ctx: Context,
}

// SAFETY: CUevent handles are thread-safe driver objects.
unsafe impl Send for EventInner {}
// SAFETY: as above.
unsafe impl Sync for EventInner {}

impl Drop for EventInner {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        // SAFETY: raw came from cuEventCreate and is destroyed once; graphs that use it hold an
        // Arc<EventInner>.
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Event, &self.label),
            crate::context::Destroy::Event(raw),
        );
    }
}

/// A CUDA event with a label. Cheap to clone; graphs that record or wait on it keep it alive.
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventInner>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event '{}'", self.inner.label)
    }
}

impl Event {
    /// The event's label.
    pub fn label(&self) -> &str {
        &self.inner.label
    }
    fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Event, self.label())
    }

    /// Milliseconds between `start` and this event (both recorded with timing enabled, both
    /// complete).
    #[track_caller]
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Event::elapsed_ms_since", at);
        self.inner.ctx.bind().map_err(fail)?;
        // SAFETY: both events are live (held by self and start).
        unsafe { driver::event_elapsed_ms(start.inner.raw, self.inner.raw) }.map_err(fail)
    }

    /// Blocks until the event has completed (`cuEventSynchronize`).
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_at(SourceLine::caller())
    }

    pub(crate) fn synchronize_at(&self, at: SourceLine) -> Result<()> {
        let op = "Event::synchronize";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.inner.ctx.bind().map_err(fail)?;
        let raw = self.inner.raw;
        self.inner.ctx.issue_unstreamed(self.op(op, at), fail, || {
            // SAFETY: the event is live (held by self).
            unsafe { driver::event_synchronize(raw) }
        })
    }

    /// Whether the work before the event's last record has completed (`cuEventQuery`).
    #[track_caller]
    pub fn query(&self) -> Result<bool> {
        let at = SourceLine::caller();
        let op = "Event::query";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.inner.ctx.bind().map_err(fail)?;
        let raw = self.inner.raw;
        let done = Cell::new(true);
        self.inner.ctx.issue_unstreamed(self.op(op, at), fail, || {
            // SAFETY: the event is live (held by self).
            done.set(unsafe { driver::event_done(raw) }?);
            Ok(())
        })?;
        Ok(done.get())
    }

    fn op(&self, name: &'static str, at: SourceLine) -> Op<'_> {
        Op::other(name, self.label(), at)
    }
}

impl Context {
    /// Creates an event; `timing` enables [`Event::elapsed_ms_since`].
    #[track_caller]
    pub fn event(&self, label: &str, timing: bool) -> Result<Event> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Event, label),
                "Context::event",
                at,
            )
        };
        self.bind().map_err(fail)?;
        // SAFETY: the context is current (bind above).
        let raw = unsafe { driver::event_create(timing) }.map_err(fail)?;
        Ok(Event {
            inner: Arc::new(EventInner {
                raw,
                id: crate::stream::next_event_id(),
                label: label.to_string(),
                ctx: self.clone(),
            }),
        })
    }

    /// Runs raw driver or library calls that are not on a stream as one graphsmith operation,
    /// so that a running capture journals them (line, thread, ranges) when they fail: e.g. a
    /// library handle created while capturing. `call` returns the outcome as a `CUresult`
    /// (map a library's status to the CUDA code behind it).
    #[track_caller]
    pub fn interop(&self, label: &str, call: impl FnOnce() -> sys::CUresult) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Context::interop";
        let fail = |f: Failure| f.on(ObjectRef::new(ObjectKind::Context, label), op, at);
        self.bind().map_err(fail)?;
        self.issue_unstreamed(Op::other(op, label, at), fail, || {
            check(call(), "interop call")
        })
    }
}
