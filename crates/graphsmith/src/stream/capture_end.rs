//! Ending a stream's capture in the driver, whatever state it is in: for `end_capture` (the
//! graph layer turns the result into a `Graph` or a diagnosis) and when a stream is dropped
//! while it captures.

use std::sync::atomic::Ordering;

use cudarc::driver::sys;

use crate::context::CaptureRecord;
use crate::driver::{self, Failure};
use crate::error::CudaCode;
use crate::stream::Stream;

/// How `cuStreamEndCapture` went.
pub(crate) struct Ended {
    pub label: String,
    pub record: Option<CaptureRecord>,
    pub graph: std::result::Result<sys::CUgraph, Failure>,
}

impl Stream {
    /// Ends and discards this stream's capture, if any. Never fails.
    pub(crate) fn abandon_capture(&self) {
        if let Some(Ended { graph: Ok(raw), .. }) = self.end_raw() {
            // SAFETY: the driver handed us raw; nothing else refers to it; it is discarded.
            let _ = unsafe { driver::graph_destroy(raw) };
        }
    }

    /// Ends this stream's graphsmith capture in the driver, whatever state it is in, and takes
    /// its record. `None` when the stream began no capture.
    pub(crate) fn end_raw(&self) -> Option<Ended> {
        self.end_raw_keeping(std::ptr::null_mut())
    }

    /// [`Stream::end_raw`] for a capture into an existing graph `keep` (a conditional node's
    /// body, which its node owns): `keep` is never destroyed, even when the driver returns it
    /// with an error.
    pub(crate) fn end_raw_keeping(&self, keep: sys::CUgraph) -> Option<Ended> {
        let active = self
            .capture
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        let record = self
            .ctx
            .inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&active.id);
        super::CAPTURE_EPOCH.fetch_add(1, Ordering::AcqRel);
        self.capture_hint.store(0, Ordering::Release);
        // The last launch of the capture is a node of its graph, not work on the stream.
        self.other_work();
        let graph = self.ctx.bind().and_then(|()| {
            // SAFETY: the stream is live and was put into capture by begin_capture.
            let (ended, raw) = unsafe { driver::end_capture(self.raw()) };
            if let Err(f) = ended {
                if !raw.is_null() && raw != keep {
                    // SAFETY: a graph returned with an error is still ours to destroy.
                    let _ = unsafe { driver::graph_destroy(raw) };
                }
                return Err(f);
            }
            if raw.is_null() {
                return Err(Failure {
                    call: "cuStreamEndCapture (returned no graph)",
                    code: CudaCode(sys::CUresult::CUDA_ERROR_UNKNOWN as u32),
                });
            }
            Ok(raw)
        });
        // Only now, with the capture ended in the driver, may deferred work run.
        self.ctx.capture_gone();
        Some(Ended {
            label: active.label,
            record,
            graph,
        })
    }
}
