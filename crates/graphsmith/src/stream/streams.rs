//! Streams and eager work on streams (which a running capture records as nodes). Every
//! operation goes through the capture journal (`journal.rs`): while no capture runs in
//! the context that costs one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;
use graphsmith_model::AccessMode;

pub use crate::stream::Event;

use crate::context::Context;
use crate::context::{all_recently_kept, ActiveCapture, Keep};
use crate::context::{Kind, Op};
use crate::driver::{self, check, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::memory::access;
use crate::memory::{check_host_copy_lengths, host_access, HostBuffer};
use crate::memory::{DeviceBuffer, Element};
use crate::module::{Args, Kernel, LaunchConfig, LaunchFootprint};

/// The legacy default stream (`CU_STREAM_LEGACY`).
const LEGACY: usize = 0x1;

impl Context {
    /// Creates a non-blocking stream (it does not synchronise with the legacy default stream).
    #[track_caller]
    pub fn stream(&self, label: &str) -> Result<Stream> {
        self.new_stream(label, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
    }

    /// Creates a blocking stream: it synchronises implicitly with the legacy default stream,
    /// so legacy-stream work while it captures invalidates the capture
    /// (`CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`). Prefer [`Context::stream`].
    #[track_caller]
    pub fn blocking_stream(&self, label: &str) -> Result<Stream> {
        self.new_stream(label, sys::CUstream_flags::CU_STREAM_DEFAULT as u32)
    }

    /// The legacy default stream (`CU_STREAM_LEGACY`, what `cudaMemcpy` and other synchronous
    /// calls use), labelled `legacy`. graphsmith does not own it; it cannot capture
    /// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    #[track_caller]
    pub fn legacy_stream(&self) -> Result<Stream> {
        let marker = self.event("legacy/marker", false)?;
        Ok(Stream {
            handle: Arc::new(StreamHandle {
                raw: LEGACY as sys::CUstream,
                id: crate::stream::next_stream_id(),
                ctx: self.clone(),
                label: "legacy".into(),
                owned: false,
            }),
            ctx: self.clone(),
            label: "legacy".into(),
            capture: Mutex::new(None),
            capture_hint: AtomicU64::new(0),
            hint_epoch: AtomicU64::new(0),
            after_programmatic: AtomicBool::new(false),
            marker: Some(marker),
        })
    }

    #[track_caller]
    fn new_stream(&self, label: &str, flags: u32) -> Result<Stream> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Stream, label),
                "Context::stream",
                at,
            )
        };
        self.bind().map_err(fail)?;
        // SAFETY: the context is current (bind above).
        let raw = unsafe { driver::stream_create(flags) }.map_err(fail)?;
        let marker = match self.event(&format!("{label}/marker"), false) {
            Ok(marker) => marker,
            Err(e) => {
                // SAFETY: raw was just created and is not used anywhere else.
                let _ = unsafe { driver::stream_destroy(raw) };
                return Err(e);
            }
        };
        Ok(Stream {
            handle: Arc::new(StreamHandle {
                raw,
                id: crate::stream::next_stream_id(),
                ctx: self.clone(),
                label: label.to_string(),
                owned: true,
            }),
            ctx: self.clone(),
            label: label.to_string(),
            capture: Mutex::new(None),
            capture_hint: AtomicU64::new(0),
            hint_epoch: AtomicU64::new(0),
            after_programmatic: AtomicBool::new(false),
            marker: Some(marker),
        })
    }
}

/// A CUDA stream with a label. `Send + Sync`: the driver allows submitting to one stream from
/// several threads (the order between threads is then up to them).
pub struct Stream {
    /// Owns `raw`: executables launched on the stream hold it too, so the stream outlives
    /// their work and they can wait on it (see [`crate::Exec`]).
    pub(crate) handle: Arc<StreamHandle>,
    pub(crate) ctx: Context,
    pub(crate) label: String,
    /// The graphsmith capture this stream began, if any.
    pub(crate) capture: Mutex<Option<ActiveCapture>>,
    /// The id of the graphsmith capture this stream was last seen taking part in (0: none),
    /// with the journal bit; valid while no capture has ended since `hint_epoch`.
    pub(crate) capture_hint: AtomicU64,
    pub(crate) hint_epoch: AtomicU64,
    /// Whether the last operation issued through graphsmith on this stream was a launch of a
    /// kernel that opted into programmatic dependent launch ([`Kernel::programmatic`]): only
    /// then may the next opted-in launch use the programmatic attribute. Set by
    /// [`Stream::launch`]; cleared by [`Stream::other_work`], which every other operation
    /// that puts work on the stream or begins or ends its capture calls.
    pub(crate) after_programmatic: AtomicBool,
    /// An event used to hand this stream's progress to another stream ([`Stream::join`]).
    marker: Option<Event>,
}

/// The driver stream behind a [`Stream`], destroyed when the last holder lets go.
pub(crate) struct StreamHandle {
    pub(crate) raw: sys::CUstream,
    /// Unique in the process (never reused, unlike `raw`): the stream's id in launch logs.
    pub(crate) id: u64,
    ctx: Context,
    label: String,
    /// Whether graphsmith created the stream (and destroys it); not for the legacy stream.
    owned: bool,
}

// SAFETY: CUstream handles may be used from any thread; the fields are never mutated.
unsafe impl Send for StreamHandle {}
// SAFETY: as above.
unsafe impl Sync for StreamHandle {}

impl StreamHandle {
    /// Waits for everything submitted to the stream so far (`cuStreamSynchronize`), unless the
    /// stream is capturing (a synchronisation would invalidate the capture): then returns
    /// `Ok(false)` and waits for nothing. The context must be current.
    pub(crate) fn wait_unless_capturing(&self) -> Result<bool, Failure> {
        // SAFETY: raw is live (owned by self).
        if !unsafe { driver::stream_idle_for_capture(self.raw) } {
            // Capturing, or (legacy stream) another stream captures in a way that forbids
            // touching it: do not wait now.
            return Ok(false);
        }
        // SAFETY: raw is live and not capturing.
        unsafe { driver::stream_synchronize(self.raw) }?;
        Ok(true)
    }
}

impl StreamHandle {
    /// Whether the stream has finished all its work (`cuStreamQuery`, no wait); `false` while
    /// it captures (a query would invalidate the capture). The context must be current.
    pub(crate) fn idle_unless_capturing(&self) -> Result<bool, Failure> {
        // SAFETY: raw is live (owned by self).
        if !unsafe { driver::stream_idle_for_capture(self.raw) } {
            return Ok(false);
        }
        // SAFETY: raw is live and not capturing.
        unsafe { driver::stream_done(self.raw) }
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        if self.raw.is_null() || !self.owned {
            return;
        }
        let raw = self.raw;
        // SAFETY: raw came from cuStreamCreate and is destroyed once, by its last holder.
        // Pending work completes first (the driver defers the destruction).
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Stream, &self.label),
            crate::context::Destroy::Stream(raw),
        );
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream '{}'", self.label)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The driver stream itself goes with the last holder of `handle`.
        self.abandon_capture();
    }
}

impl Stream {
    /// The stream's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUstream {
        self.handle.raw
    }
    /// The context of this stream.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Stream, &self.label)
    }

    /// Notes that something other than a launch of an opted-in kernel goes on this stream (an
    /// operation through [`Stream::issue`], a graph launch or upload, the beginning or end of a
    /// capture): the next opted-in launch must not get the programmatic attribute, which would
    /// let it overlap that work.
    pub(crate) fn other_work(&self) {
        self.after_programmatic.store(false, Ordering::Release);
    }

    fn op<'a>(&self, name: &'static str, label: &'a str, at: SourceLine, kind: Kind) -> Op<'a> {
        Op {
            name,
            label,
            at,
            kind,
            accesses: Vec::new(),
            keep: Vec::new(),
            footprint: None,
            waits_for: None,
            target: None,
        }
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
        let (g, b) = (cfg.grid, cfg.block);
        // Programmatic only between two opted-in kernels of this stream; `issue` clears the
        // flag for every other operation.
        let programmatic = kernel.programmatic
            && self
                .after_programmatic
                .swap(kernel.programmatic, Ordering::AcqRel);
        // SAFETY: func is alive (kernel holds its module); argument count and sizes were
        // checked against cuFuncGetParamInfo above; the pointers point into `args`, alive and
        // unchanged for the call.
        let launch = |pointers: &mut [*mut std::ffi::c_void]| unsafe {
            driver::launch_kernel(
                kernel.function.func,
                [g.x, g.y, g.z],
                [b.x, b.y, b.z],
                cfg.shared_mem_bytes,
                self.raw(),
                pointers,
                programmatic,
            )
        };
        if !self.ctx.captures_active() {
            // Eager fast path: nothing to journal, nothing for a graph to keep.
            let result = launch(args.pointers().as_mut_slice()).map_err(fail);
            self.after_programmatic
                .store(kernel.programmatic && result.is_ok(), Ordering::Release);
            return result;
        }
        // The arguments' buffers and the module (its own `Arc`, so the capture keeps it once for
        // many launches) are read only if the capture needs them: nothing is built here.
        let (mut pointers, buffers) = args.pointers_and_buffers();
        let footprint = LaunchFootprint {
            buffers,
            module: &kernel.module.inner,
            triggers_after_wait: kernel.function.triggers_after_wait,
        };
        // With the journal off, a launch whose buffers and module this thread already kept for
        // the capture (its record holds them until the capture ends) has nothing to record:
        // it costs what an eager launch costs, plus the capture check and one look at them.
        if let Some((id, false)) = self.confirmed_capture() {
            if all_recently_kept(id, footprint.keep_ids()) {
                let result = launch(pointers.as_mut_slice()).map_err(fail);
                self.after_programmatic
                    .store(kernel.programmatic && result.is_ok(), Ordering::Release);
                return result;
            }
        }
        let journal = Op {
            footprint: Some(&footprint),
            target: Some(kernel.function.func as u64),
            ..self.op(op, label, at, Kind::Work)
        };
        let result = self.issue(journal, fail, || launch(pointers.as_mut_slice()));
        self.after_programmatic
            .store(kernel.programmatic && result.is_ok(), Ordering::Release);
        result
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
        let bits = crate::memory::memset_bits(value).map_err(|reason| {
            Error::new(ErrorKind::InvalidInput { reason }, dst.object(), op, at)
        })?;
        self.ctx.bind().map_err(fail)?;
        let (ptr, n) = (dst.alloc.ptr, dst.len());
        let journal = Op {
            accesses: vec![access(dst, AccessMode::Write)],
            keep: vec![dst.alloc.clone() as Keep],
            target: Some(ptr),
            ..self.op(op, label, at, Kind::Work)
        };
        self.issue(journal, fail, || {
            // SAFETY: ptr is a live allocation of n elements of T (held by dst); the stream is
            // live.
            unsafe { driver::memset_async(ptr, bits, std::mem::size_of::<T>(), n, self.raw()) }
        })
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
        crate::memory::check_copy_lengths(
            dst,
            src,
            || ObjectRef::new(ObjectKind::Node, label),
            op,
            at,
        )?;
        let fail = |f: Failure| f.on(ObjectRef::new(ObjectKind::Node, label), op, at);
        self.ctx.bind().map_err(fail)?;
        let journal = Op {
            accesses: vec![
                access(src, AccessMode::Read),
                access(dst, AccessMode::Write),
            ],
            keep: vec![dst.alloc.clone() as Keep, src.alloc.clone() as Keep],
            target: Some(dst.alloc.ptr),
            ..self.op(op, label, at, Kind::Work)
        };
        let (d, s, bytes) = (dst.alloc.ptr, src.alloc.ptr, dst.bytes());
        self.issue(journal, fail, || {
            // SAFETY: both allocations are live and at least `bytes` long (lengths checked).
            unsafe { driver::copy_device_async(d, s, bytes, self.raw()) }
        })
    }

    /// Copies all of page-locked `src` into `dst` (`cuMemcpyHtoDAsync`) without waiting: the
    /// copy runs on a copy engine, beside kernels on other streams. Lengths must match. While
    /// the stream captures this becomes a copy node, and the graph keeps `src` alive; eagerly,
    /// write `src` again only after the stream is synchronised.
    #[track_caller]
    pub fn copy_from_host<T: Element>(
        &self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        src: &HostBuffer<T>,
    ) -> Result<()> {
        self.host_copy(label, "Stream::copy_from_host", dst, src, true)
    }

    /// Copies all of `src` into page-locked `dst` (`cuMemcpyDtoHAsync`) without waiting; read
    /// `dst` once the stream is synchronised. Lengths must match. While the stream captures this
    /// becomes a copy node, and the graph keeps `dst` alive.
    #[track_caller]
    pub fn copy_to_host<T: Element>(
        &self,
        label: &str,
        dst: &mut HostBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        self.host_copy(label, "Stream::copy_to_host", src, dst, false)
    }

    /// An asynchronous copy between all of `host` and all of `device`: into the device when
    /// `to_device`, out of it otherwise.
    #[track_caller]
    fn host_copy<T: Element>(
        &self,
        label: &str,
        op: &'static str,
        device: &DeviceBuffer<T>,
        host: &HostBuffer<T>,
        to_device: bool,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let node = || ObjectRef::new(ObjectKind::Node, label);
        check_host_copy_lengths(host, device, to_device, node, op, at)?;
        let fail = |f: Failure| f.on(node(), op, at);
        self.ctx.bind().map_err(fail)?;
        let (read, write) = if to_device {
            (AccessMode::Read, AccessMode::Write)
        } else {
            (AccessMode::Write, AccessMode::Read)
        };
        let (h, d, bytes) = (host.alloc.ptr, device.alloc.ptr, device.bytes());
        let journal = Op {
            accesses: vec![host_access(host, read), access(device, write)],
            keep: vec![host.alloc.clone() as Keep, device.alloc.clone() as Keep],
            target: Some(if to_device { d } else { h as u64 }),
            ..self.op(op, label, at, Kind::Work)
        };
        self.issue(journal, fail, || {
            // SAFETY: both allocations are live (held by the borrowed buffers) and `bytes` long
            // (lengths checked); a captured copy's graph keeps them alive, and an eager copy's
            // host memory is freed only after the context is synchronised.
            unsafe {
                if to_device {
                    driver::copy_to_device_async(d, h, bytes, self.raw())
                } else {
                    driver::copy_to_host_async(h, d, bytes, self.raw())
                }
            }
        })
    }

    /// Copies host data into `dst` and waits until the copy is done. Refused while the stream
    /// captures (the graph would keep a pointer to `src`, which may not live as long).
    #[track_caller]
    pub fn upload<T: Element>(&self, dst: &mut DeviceBuffer<T>, src: &[T]) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::upload";
        let label = dst.label().to_string();
        let what = "a host-to-device copy from a borrowed slice";
        self.refuse_host_copy(self.op(op, &label, at, Kind::Work), what)?;
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
        let journal = Op {
            accesses: vec![access(dst, AccessMode::Write)],
            ..self.op(op, &label, at, Kind::Work)
        };
        let (ptr, bytes) = (dst.alloc.ptr, dst.bytes());
        self.issue(journal, fail, || {
            // SAFETY: src is a live host slice of `bytes` bytes; dst is a live allocation of the
            // same size; the stream is synchronised before src can go away.
            unsafe {
                driver::copy_to_device_async(ptr, src.as_ptr().cast(), bytes, self.raw())?;
                driver::stream_synchronize(self.raw())
            }
        })?;
        self.log_sync(at);
        Ok(())
    }

    /// Waits for the stream, then copies `src` to a new host vector. Refused while the stream
    /// captures.
    #[track_caller]
    pub fn download<T: Element>(&self, src: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let at = SourceLine::caller();
        let op = "Stream::download";
        let what = "a device-to-host copy into a Vec";
        self.refuse_host_copy(self.op(op, src.label(), at, Kind::Work), what)?;
        let fail = |f: Failure| f.on(src.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let mut out: Vec<T> = Vec::with_capacity(src.len());
        let journal = Op {
            accesses: vec![access(src, AccessMode::Read)],
            ..self.op(op, src.label(), at, Kind::Work)
        };
        let (ptr, bytes, n) = (src.alloc.ptr, src.bytes(), src.len());
        self.issue(journal, fail, || {
            // SAFETY: out has capacity for n elements; the copy writes all `bytes` bytes and the
            // stream is synchronised before set_len; T is valid for any bit pattern (Element).
            unsafe {
                driver::copy_to_host_async(out.as_mut_ptr().cast(), ptr, bytes, self.raw())?;
                driver::stream_synchronize(self.raw())?;
                out.set_len(n);
            }
            Ok(())
        })?;
        self.log_sync(at);
        Ok(out)
    }

    /// Blocks until all work on the stream is done (`cuStreamSynchronize`). Inside a capture
    /// the driver refuses it and invalidates the capture; the journal names this call.
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::synchronize";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        self.issue(self.op(op, &self.label, at, Kind::Other), fail, || {
            // SAFETY: the stream is live.
            unsafe { driver::stream_synchronize(self.raw()) }
        })?;
        self.log_sync(at);
        Ok(())
    }

    /// Records `event` on this stream.
    #[track_caller]
    pub fn record(&self, event: &Event) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::record";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let ev = event.inner.raw;
        let kind = Kind::Record { event: ev as usize };
        self.issue(self.op(op, event.label(), at, kind), fail, || {
            // SAFETY: stream and event are live and of the same context.
            unsafe { driver::event_record(ev, self.raw()) }
        })?;
        self.log_event(event, true, at);
        Ok(())
    }

    /// Makes later work on this stream wait for `event`. During a capture, waiting on an event
    /// recorded in it forks this stream into the capture.
    #[track_caller]
    pub fn wait(&self, event: &Event) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::wait";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let ev = event.inner.raw;
        let kind = Kind::Wait {
            event: Some(ev as usize),
        };
        self.issue(self.op(op, event.label(), at, kind), fail, || {
            // SAFETY: stream and event are live.
            unsafe { driver::stream_wait_event(self.raw(), ev) }
        })?;
        self.log_event(event, false, at);
        Ok(())
    }

    /// Makes later work on this stream wait for all work submitted to `other` so far. During a
    /// capture this is how streams fork (a side stream joins the capture) and join back.
    #[track_caller]
    pub fn join(&self, other: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::join";
        let marker = other.marker.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::NullHandle {
                    what: "the stream's marker event",
                },
                other.object(),
                op,
                at,
            )
        })?;
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let journal = Op {
            waits_for: Some((other.raw() as usize, other.label.as_str())),
            ..self.op(op, &other.label, at, Kind::Wait { event: None })
        };
        let m = marker.inner.raw;
        self.issue(journal, fail, || {
            // SAFETY: both streams and the marker event are live and of the same context.
            unsafe {
                driver::event_record(m, other.raw())?;
                driver::stream_wait_event(self.raw(), m)
            }
        })?;
        other.log_event(marker, true, at);
        self.log_event(marker, false, at);
        Ok(())
    }

    /// Runs raw driver or library calls on this stream's handle as one graphsmith operation,
    /// journaled like the others (line, thread, ranges, and the code when it fails). `call`
    /// returns the outcome as a `CUresult` (map a library's status to the CUDA code behind it).
    #[track_caller]
    pub fn interop(
        &self,
        label: &str,
        call: impl FnOnce(sys::CUstream) -> sys::CUresult,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::interop";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let raw = self.raw();
        self.issue(self.op(op, label, at, Kind::Other), fail, || {
            check(call(raw), "interop call")
        })
    }
}
