//! Streams and events, and eager work on streams (which a running capture records as nodes).

use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use graphsmith_model::{Access, AccessMode};

use crate::buffer::{DeviceBuffer, Element};
use crate::capture::{ActiveCapture, Keep};
use crate::context::Context;
use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::kernel::{Args, Kernel, LaunchConfig};

pub(crate) struct EventInner {
    pub raw: sys::CUevent,
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
        self.ctx.drop_call(
            || ObjectRef::new(ObjectKind::Event, &self.label),
            || check(unsafe { sys::cuEventDestroy_v2(raw) }, "cuEventDestroy"),
        );
    }
}

/// A CUDA event with a label. Cheap to clone; graphs that record or wait on it keep it alive.
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventInner>,
}

impl Event {
    /// The event's label.
    pub fn label(&self) -> &str {
        &self.inner.label
    }
    /// Milliseconds between `start` and this event (both recorded with timing enabled, both
    /// complete).
    #[track_caller]
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Event, self.label()),
                "Event::elapsed_ms_since",
                at,
            )
        };
        self.inner.ctx.bind().map_err(fail)?;
        let mut ms = 0.0f32;
        // SAFETY: both events are live (held by self and start).
        check(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, start.inner.raw, self.inner.raw) },
            "cuEventElapsedTime",
        )
        .map_err(fail)?;
        Ok(ms)
    }
    /// Blocks until the event has completed.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Event, self.label()),
                "Event::synchronize",
                at,
            )
        };
        self.inner.ctx.bind().map_err(fail)?;
        // SAFETY: the event is live.
        check(
            unsafe { sys::cuEventSynchronize(self.inner.raw) },
            "cuEventSynchronize",
        )
        .map_err(fail)
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
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: the context is current; raw is a valid out pointer.
        check(
            unsafe { sys::cuEventCreate(&mut raw, flags as u32) },
            "cuEventCreate",
        )
        .map_err(fail)?;
        Ok(Event {
            inner: Arc::new(EventInner {
                raw,
                label: label.to_string(),
                ctx: self.clone(),
            }),
        })
    }

    /// Creates a non-blocking stream (it does not synchronise with the legacy default stream).
    #[track_caller]
    pub fn stream(&self, label: &str) -> Result<Stream> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Stream, label),
                "Context::stream",
                at,
            )
        };
        self.bind().map_err(fail)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the context is current; raw is a valid out pointer.
        check(
            unsafe {
                sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            },
            "cuStreamCreate",
        )
        .map_err(fail)?;
        let marker = match self.event(&format!("{label}/marker"), false) {
            Ok(marker) => marker,
            Err(e) => {
                // SAFETY: raw was just created and is not used anywhere else.
                let _ = unsafe { sys::cuStreamDestroy_v2(raw) };
                return Err(e);
            }
        };
        Ok(Stream {
            raw,
            ctx: self.clone(),
            label: label.to_string(),
            capture: Mutex::new(None),
            marker: Some(marker),
        })
    }
}

/// A CUDA stream with a label. `Send + Sync`: the driver allows submitting to one stream from
/// several threads (the order between threads is then up to them).
pub struct Stream {
    pub(crate) raw: sys::CUstream,
    pub(crate) ctx: Context,
    pub(crate) label: String,
    /// The graphsmith capture this stream began, if any.
    pub(crate) capture: Mutex<Option<ActiveCapture>>,
    /// An event used to hand this stream's progress to another stream ([`Stream::join`]).
    marker: Option<Event>,
}

// SAFETY: CUstream handles may be used from any thread; mutable state is behind a Mutex.
unsafe impl Send for Stream {}
// SAFETY: as above.
unsafe impl Sync for Stream {}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream '{}'", self.label)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.abandon_capture();
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        // SAFETY: raw came from cuStreamCreate and is destroyed once. Pending work completes
        // first (the driver defers the destruction), so nothing in flight is cut off.
        self.ctx.drop_call(
            || ObjectRef::new(ObjectKind::Stream, &self.label),
            || check(unsafe { sys::cuStreamDestroy_v2(raw) }, "cuStreamDestroy"),
        );
    }
}

impl Stream {
    /// The stream's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }
    /// The context of this stream.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Stream, &self.label)
    }

    /// Launches a kernel. While the stream captures, this becomes a kernel node labelled
    /// `label`, with the accesses of `args` and the caller's line.
    #[track_caller]
    pub fn launch(
        &self,
        label: &str,
        kernel: &Kernel,
        cfg: LaunchConfig,
        mut args: Args<'_>,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::launch";
        let node = || ObjectRef::new(ObjectKind::Node, label);
        cfg.validate(&self.ctx.inner.limits)
            .map_err(|reason| Error::new(ErrorKind::InvalidGeometry { reason }, node(), op, at))?;
        kernel
            .check_args(&args)
            .map_err(|reason| Error::new(ErrorKind::ArgMismatch { reason }, node(), op, at))?;
        let fail = |f: Failure| f.on(node(), op, at);
        self.ctx.bind().map_err(fail)?;
        let mut pointers = args.pointers();
        let (g, b) = (cfg.grid, cfg.block);
        // SAFETY: func is alive (kernel holds its module); argument count and sizes were checked
        // against cuFuncGetParamInfo above; the pointers point into `args`, alive for the call.
        check(
            unsafe {
                sys::cuLaunchKernel(
                    kernel.func,
                    g.x,
                    g.y,
                    g.z,
                    b.x,
                    b.y,
                    b.z,
                    cfg.shared_mem_bytes,
                    self.raw,
                    pointers.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
            "cuLaunchKernel",
        )
        .map_err(fail)?;
        let mut keep: Vec<Keep> = args.keep.into_iter().map(|a| a as Keep).collect();
        keep.push(Arc::new(kernel.module.clone()) as Keep);
        self.note_captured(label, at, args.accesses, keep);
        Ok(())
    }

    /// Sets every element of `dst` to `value` (`cuMemsetD8/D16/D32Async`).
    #[track_caller]
    pub fn memset<T: Element>(
        &self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        value: T,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::memset";
        let fail = |f: Failure| f.on(ObjectRef::new(ObjectKind::Node, label), op, at);
        let bits = crate::builder::memset_bits(value).map_err(|reason| {
            Error::new(ErrorKind::InvalidInput { reason }, dst.object(), op, at)
        })?;
        self.ctx.bind().map_err(fail)?;
        let (ptr, n) = (dst.alloc.ptr, dst.len());
        // SAFETY: ptr is a live allocation of n elements of T (held by dst); the stream is live.
        let (rc, call) = unsafe {
            match std::mem::size_of::<T>() {
                1 => (
                    sys::cuMemsetD8Async(ptr, bits as u8, n, self.raw),
                    "cuMemsetD8Async",
                ),
                2 => (
                    sys::cuMemsetD16Async(ptr, bits as u16, n, self.raw),
                    "cuMemsetD16Async",
                ),
                _ => (
                    sys::cuMemsetD32Async(ptr, bits, n, self.raw),
                    "cuMemsetD32Async",
                ),
            }
        };
        check(rc, call).map_err(fail)?;
        let access = Access {
            buffer: ptr,
            label: dst.label().to_string(),
            offset: 0,
            len: dst.bytes() as u64,
            mode: AccessMode::Write,
        };
        self.note_captured(label, at, vec![access], vec![dst.alloc.clone() as Keep]);
        Ok(())
    }

    /// Copies `src` into `dst` on the device (`cuMemcpyDtoDAsync`); the lengths must match.
    #[track_caller]
    pub fn copy<T: Element>(
        &self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::copy";
        if dst.len() != src.len() {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!(
                        "copy of {} elements from '{}' into {} elements of '{}'",
                        src.len(),
                        src.label(),
                        dst.len(),
                        dst.label()
                    ),
                },
                ObjectRef::new(ObjectKind::Node, label),
                op,
                at,
            ));
        }
        let fail = |f: Failure| f.on(ObjectRef::new(ObjectKind::Node, label), op, at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: both allocations are live and at least dst.bytes() long (lengths checked).
        check(
            unsafe {
                sys::cuMemcpyDtoDAsync_v2(dst.alloc.ptr, src.alloc.ptr, dst.bytes(), self.raw)
            },
            "cuMemcpyDtoDAsync",
        )
        .map_err(fail)?;
        let accesses = vec![
            Access {
                buffer: src.alloc.ptr,
                label: src.label().into(),
                offset: 0,
                len: src.bytes() as u64,
                mode: AccessMode::Read,
            },
            Access {
                buffer: dst.alloc.ptr,
                label: dst.label().into(),
                offset: 0,
                len: dst.bytes() as u64,
                mode: AccessMode::Write,
            },
        ];
        self.note_captured(
            label,
            at,
            accesses,
            vec![dst.alloc.clone() as Keep, src.alloc.clone() as Keep],
        );
        Ok(())
    }

    /// Copies host data into `dst` and waits until the copy is done. Refused while the stream
    /// captures (the graph would keep a pointer to `src`, which may not live as long).
    #[track_caller]
    pub fn upload<T: Element>(&self, dst: &mut DeviceBuffer<T>, src: &[T]) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::upload";
        self.refuse_in_capture(op, at, "a host-to-device copy from a borrowed slice")?;
        if dst.len() != src.len() {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!(
                        "upload of {} elements into '{}' of {} elements",
                        src.len(),
                        dst.label(),
                        dst.len()
                    ),
                },
                dst.object(),
                op,
                at,
            ));
        }
        let fail = |f: Failure| f.on(dst.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: src is a live host slice of dst.bytes() bytes; dst is a live allocation of the
        // same size; the stream is synchronised below before src can go away.
        check(
            unsafe {
                sys::cuMemcpyHtoDAsync_v2(
                    dst.alloc.ptr,
                    src.as_ptr() as *const _,
                    dst.bytes(),
                    self.raw,
                )
            },
            "cuMemcpyHtoDAsync",
        )
        .map_err(fail)?;
        // SAFETY: the stream is live.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
        .map_err(fail)
    }

    /// Waits for the stream, then copies `src` to a new host vector.
    #[track_caller]
    pub fn download<T: Element>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let at = SourceLine::caller();
        let op = "Stream::download";
        self.refuse_in_capture(op, at, "a device-to-host copy into a Vec")?;
        let fail = |f: Failure| f.on(src.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let mut out: Vec<T> = Vec::with_capacity(src.len());
        // SAFETY: out has capacity for src.len() elements; the copy writes all src.bytes() bytes
        // and the stream is synchronised before set_len; T is valid for any bit pattern (Element).
        unsafe {
            check(
                sys::cuMemcpyDtoHAsync_v2(
                    out.as_mut_ptr() as *mut _,
                    src.alloc.ptr,
                    src.bytes(),
                    self.raw,
                ),
                "cuMemcpyDtoHAsync",
            )
            .map_err(fail)?;
            check(sys::cuStreamSynchronize(self.raw), "cuStreamSynchronize").map_err(fail)?;
            out.set_len(src.len());
        }
        Ok(out)
    }

    /// Blocks until all work on the stream is done.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Stream::synchronize", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: the stream is live.
        check(
            unsafe { sys::cuStreamSynchronize(self.raw) },
            "cuStreamSynchronize",
        )
        .map_err(fail)
    }

    /// Records `event` on this stream.
    #[track_caller]
    pub fn record(&self, event: &Event) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Stream::record", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: stream and event are live and of the same context.
        check(
            unsafe { sys::cuEventRecord(event.inner.raw, self.raw) },
            "cuEventRecord",
        )
        .map_err(fail)
    }

    /// Makes later work on this stream wait for `event`.
    #[track_caller]
    pub fn wait(&self, event: &Event) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Stream::wait", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: stream and event are live.
        check(
            unsafe { sys::cuStreamWaitEvent(self.raw, event.inner.raw, 0) },
            "cuStreamWaitEvent",
        )
        .map_err(fail)
    }

    /// Makes later work on this stream wait for all work submitted to `other` so far. During a
    /// capture this is how streams fork (a side stream joins the capture) and join back.
    #[track_caller]
    pub fn join(&self, other: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        let marker = other.marker.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::NullHandle {
                    what: "the stream's marker event",
                },
                other.object(),
                "Stream::join",
                at,
            )
        })?;
        let fail = |f: Failure| f.on(self.object(), "Stream::join", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: both streams and the marker event are live and of the same context.
        unsafe {
            check(
                sys::cuEventRecord(marker.inner.raw, other.raw),
                "cuEventRecord",
            )
            .map_err(fail)?;
            check(
                sys::cuStreamWaitEvent(self.raw, marker.inner.raw, 0),
                "cuStreamWaitEvent",
            )
            .map_err(fail)
        }
    }

    fn refuse_in_capture(&self, op: &'static str, at: SourceLine, what: &str) -> Result<()> {
        if !self.ctx.captures_active() {
            return Ok(());
        }
        match self.capture_info() {
            Ok(Some(_)) => Err(Error::new(
                ErrorKind::NotAllowedDuringCapture {
                    reason: format!("{what} cannot be part of a graph"),
                },
                self.object(),
                op,
                at,
            )),
            Ok(None) => Ok(()),
            Err(f) => Err(f.on(self.object(), op, at)),
        }
    }
}
