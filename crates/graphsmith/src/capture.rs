//! Stream capture: begin, record what graphsmith issues (labels, lines, ranges, accesses), end
//! into a [`Graph`] whose model carries all of it.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model::{Access, Provenance};

use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::Graph;
use crate::stream::Stream;

/// Something a graph must keep alive (a buffer's allocation, a module, an event, a host
/// function, a child graph's resources).
pub(crate) type Keep = Arc<dyn Any + Send + Sync>;

/// The driver's capture modes (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Potentially unsafe calls (e.g. `cuMemAlloc`, synchronisation) are refused on every thread
    /// while this capture runs.
    Global,
    /// Unsafe calls are refused only on the capturing thread.
    ThreadLocal,
    /// Nothing is refused; the caller takes responsibility.
    Relaxed,
}

impl CaptureMode {
    pub(crate) fn raw(self) -> sys::CUstreamCaptureMode {
        use sys::CUstreamCaptureMode as M;
        match self {
            CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// What graphsmith knows of one captured node.
#[derive(Clone, Debug)]
pub(crate) struct NodeMeta {
    pub label: String,
    pub provenance: Provenance,
    pub accesses: Vec<Access>,
}

/// A running capture's journal, by the driver's capture id.
#[derive(Default)]
pub(crate) struct CaptureRecord {
    /// Node handle (as usize) -> what graphsmith issued there.
    pub nodes: HashMap<usize, NodeMeta>,
    pub keep: Vec<Keep>,
}

/// The capture a stream began.
pub(crate) struct ActiveCapture {
    pub id: u64,
    pub label: String,
}

/// The driver's view of a capturing stream.
pub(crate) struct CaptureInfo {
    pub id: u64,
    /// The nodes the next captured node will depend on.
    pub deps: Vec<sys::CUgraphNode>,
}

impl Stream {
    /// `Some` while the stream is capturing (its own capture, or one it joined by a wait).
    pub(crate) fn capture_info(&self) -> Result<Option<CaptureInfo>, Failure> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0u64;
        let mut graph = std::ptr::null_mut();
        let mut deps: *const sys::CUgraphNode = std::ptr::null();
        let mut edge_data: *const sys::CUgraphEdgeData = std::ptr::null();
        let mut count = 0usize;
        // SAFETY: the stream is live; every out pointer is valid. The returned array is owned by
        // the driver and valid until the next call on this stream; it is copied at once.
        check(
            unsafe {
                sys::cuStreamGetCaptureInfo_v3(
                    self.raw,
                    &mut status,
                    &mut id,
                    &mut graph,
                    &mut deps,
                    &mut edge_data,
                    &mut count,
                )
            },
            "cuStreamGetCaptureInfo",
        )?;
        if status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Ok(None);
        }
        let deps = if deps.is_null() || count == 0 {
            Vec::new()
        } else {
            // SAFETY: the driver returned `count` valid node handles at `deps`.
            unsafe { std::slice::from_raw_parts(deps, count) }.to_vec()
        };
        Ok(Some(CaptureInfo { id, deps }))
    }

    /// After an operation was issued: if it was captured by a graphsmith capture, remember its
    /// label, line, ranges and accesses under the node it became, and keep its resources alive.
    pub(crate) fn note_captured(
        &self,
        label: &str,
        at: SourceLine,
        accesses: Vec<Access>,
        keep: Vec<Keep>,
    ) {
        if !self.ctx.captures_active() {
            return;
        }
        let Ok(Some(info)) = self.capture_info() else {
            return;
        };
        let mut captures = match self.ctx.inner.captures.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        let Some(record) = captures.get_mut(&info.id) else {
            return;
        };
        record.keep.extend(keep);
        // After a kernel, copy or memset, the stream's dependency set is exactly the new node.
        if let [node] = info.deps[..] {
            record.nodes.insert(
                node as usize,
                NodeMeta {
                    label: label.to_string(),
                    provenance: crate::range::provenance(at),
                    accesses,
                },
            );
        }
    }

    /// Begins capturing this stream into a new graph labelled `label` (`cuStreamBeginCapture`).
    #[track_caller]
    pub fn begin_capture(&self, mode: CaptureMode, label: &str) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::begin_capture";
        let mut slot = self.capture.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(active) = slot.as_ref() {
            return Err(Error::new(
                ErrorKind::AlreadyCapturing {
                    label: active.label.clone(),
                },
                self.object(),
                op,
                at,
            ));
        }
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: the stream is live and current context's.
        check(
            unsafe { sys::cuStreamBeginCapture_v2(self.raw, mode.raw()) },
            "cuStreamBeginCapture",
        )
        .map_err(fail)?;
        let id = match self.capture_info() {
            Ok(Some(info)) => info.id,
            Ok(None) => 0,
            Err(f) => return Err(fail(f)),
        };
        self.ctx
            .inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, CaptureRecord::default());
        self.ctx
            .inner
            .active_captures
            .fetch_add(1, Ordering::AcqRel);
        *slot = Some(ActiveCapture {
            id,
            label: label.to_string(),
        });
        Ok(())
    }

    /// Ends the capture this stream began and returns the graph (`cuStreamEndCapture`), its
    /// model carrying each node's label, line, ranges and accesses.
    #[track_caller]
    pub fn end_capture(&self) -> Result<Graph> {
        let at = SourceLine::caller();
        let op = "Stream::end_capture";
        let Some(active) = self
            .capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return Err(Error::new(ErrorKind::NotCapturing, self.object(), op, at));
        };
        let record = self.finish_record(active.id);
        let object = ObjectRef::new(ObjectKind::Capture, &active.label);
        let fail = |f: Failure| f.on(object.clone(), op, at);
        self.ctx.bind().map_err(fail)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the stream is live and was put into capture by begin_capture.
        let rc = unsafe { sys::cuStreamEndCapture(self.raw, &mut raw) };
        if let Err(f) = check(rc, "cuStreamEndCapture") {
            if !raw.is_null() {
                // SAFETY: a graph returned with an error is still ours to destroy.
                let _ = unsafe { sys::cuGraphDestroy(raw) };
            }
            return Err(fail(f));
        }
        if raw.is_null() {
            return Err(Error::new(
                ErrorKind::NullHandle {
                    what: "the captured graph",
                },
                object,
                op,
                at,
            ));
        }
        // SAFETY: raw is a graph the driver just handed over; Graph takes ownership.
        unsafe { Graph::from_capture(self.ctx.clone(), raw, &active.label, record, at) }
    }

    /// Captures everything `body` issues on this stream into a graph. The capture is always
    /// ended, also when `body` fails (then its error is returned and the graph discarded).
    #[track_caller]
    pub fn capture<R>(
        &self,
        mode: CaptureMode,
        label: &str,
        body: impl FnOnce(&Stream) -> Result<R>,
    ) -> Result<(Graph, R)> {
        let at = SourceLine::caller();
        let _range = crate::range::range(format!("capture:{label}"));
        self.begin_capture(mode, label)
            .map_err(|e| Error { at, ..e })?;
        match body(self) {
            Ok(value) => {
                let graph = self.end_capture().map_err(|e| Error { at, ..e })?;
                Ok((graph, value))
            }
            Err(error) => {
                self.abandon_capture();
                Err(error)
            }
        }
    }

    /// Ends and discards this stream's capture, if any. Never fails.
    pub(crate) fn abandon_capture(&self) {
        let Some(active) = self
            .capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        drop(self.finish_record(active.id));
        if self.ctx.bind().is_err() {
            return;
        }
        let mut raw = std::ptr::null_mut();
        // SAFETY: the stream is live and capturing; a returned graph is destroyed at once.
        unsafe {
            let _ = sys::cuStreamEndCapture(self.raw, &mut raw);
            if !raw.is_null() {
                let _ = sys::cuGraphDestroy(raw);
            }
        }
    }

    fn finish_record(&self, id: u64) -> CaptureRecord {
        self.ctx
            .inner
            .active_captures
            .fetch_sub(1, Ordering::AcqRel);
        self.ctx
            .inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .unwrap_or_default()
    }
}
