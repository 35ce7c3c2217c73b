//! Stream capture: begin, journal what graphsmith issues (labels, lines, ranges, accesses, what
//! the driver answered), end into a [`Graph`] whose model carries all of it, or into a
//! [`Diagnosis`] that names the first offending operation. The capture is always ended, also
//! when it failed, so the stream can capture again.

use std::sync::atomic::Ordering;

use crate::context::{raw_mode, ActiveCapture, CaptureMode, CaptureOptions, CaptureRecord};
use crate::driver::{self, Failure};
use crate::error::SourceLine;
use crate::error::{CudaCode, Error, ErrorKind, ObjectKind, ObjectRef, Result};
use crate::graph::Graph;
use crate::stream::new_record;
use crate::stream::Stream;
use graphsmith_analysis::{diagnose, CaptureSummary, Diagnosis, Escape, JournalEntry};

/// What a capture that ended well leaves besides its graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureReport {
    pub capture: String,
    /// Silent escapes: graphsmith work that ran outside the capture while it ran.
    pub escapes: Vec<Escape>,
    /// Every journaled operation, oldest first.
    pub journal: Vec<JournalEntry>,
}

impl CaptureReport {
    /// Warnings: the escapes.
    pub fn warnings(&self) -> &[Escape] {
        &self.escapes
    }
}

impl CaptureRecord {
    fn summary(&self, end: Option<CudaCode>, at: Option<SourceLine>) -> CaptureSummary {
        CaptureSummary {
            label: self.label.clone(),
            stream: self.streams.get(&self.origin).cloned().unwrap_or_default(),
            mode: self.options.mode,
            began_at: self.began_at,
            began_on: self.thread_label.to_string(),
            ended_at: at,
            ended_on: at.map(|_| crate::ranges::thread().1.to_string()),
            end_code: end,
        }
    }

    pub(crate) fn diagnosis(&self, end: Option<CudaCode>, at: Option<SourceLine>) -> Diagnosis {
        diagnose(self.summary(end, at), &self.journal(), self.escapes())
    }
}

impl Stream {
    /// Begins capturing this stream into a new graph labelled `label` (`cuStreamBeginCapture`),
    /// with the journal on and strict mode off.
    #[track_caller]
    pub fn begin_capture(&self, mode: CaptureMode, label: &str) -> Result<()> {
        self.begin_capture_with(CaptureOptions::new(mode), label)
    }

    /// Begins a capture with [`CaptureOptions`].
    #[track_caller]
    pub fn begin_capture_with(&self, options: CaptureOptions, label: &str) -> Result<()> {
        self.begin_capture_in(options, label, None, SourceLine::caller())
    }

    /// Begins a capture into a new graph, or into `into` (`cuStreamBeginCaptureToGraph`).
    pub(crate) fn begin_capture_in(
        &self,
        options: CaptureOptions,
        label: &str,
        into: Option<cudarc::driver::sys::CUgraph>,
        at: SourceLine,
    ) -> Result<()> {
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
        // The first launch captured depends on nothing before the capture.
        self.other_work();
        // Counted before the driver begins, so no other thread destroys anything (which may be
        // an unsafe call) once the capture exists in the driver.
        self.ctx
            .inner
            .active_captures
            .fetch_add(1, Ordering::AcqRel);
        // SAFETY: the stream is live and of the current context.
        let begun = match into {
            // SAFETY: as above; the caller owns `graph` and uses it on this thread only.
            Some(graph) => unsafe {
                driver::begin_capture_to_graph(self.raw(), graph, raw_mode(options.mode))
            },
            // SAFETY: as above.
            None => unsafe { driver::begin_capture(self.raw(), raw_mode(options.mode)) },
        };
        if let Err(f) = begun {
            self.ctx.capture_gone();
            if !matches!(f.code.number(), 900..=908) {
                return Err(fail(f));
            }
            // Diagnose a refused begin like any capture failure (e.g. the legacy stream).
            let mut record = new_record(label, options, self, at);
            let begin = crate::context::Op::other(op, label, at);
            record.push_failed(&begin, self.raw() as usize, f);
            let diagnosis = record.diagnosis(None, None);
            return Err(Error::new(
                ErrorKind::CaptureFailed(Box::new(diagnosis)),
                ObjectRef::new(ObjectKind::Capture, label),
                op,
                at,
            ));
        }
        let id = match crate::context::stream_status(self.raw()) {
            Ok(crate::context::Status::Active(id)) => id,
            Ok(_) => 0,
            Err(f) => {
                // SAFETY: the stream is live; the capture just begun is discarded.
                let (_, raw) = unsafe { driver::end_capture(self.raw()) };
                // A capture into an existing graph (a conditional node's body) hands that graph
                // back, which its owner keeps.
                if !raw.is_null() && Some(raw) != into {
                    // SAFETY: the driver handed us raw; nothing else refers to it.
                    let _ = unsafe { driver::graph_destroy(raw) };
                }
                self.ctx.capture_gone();
                return Err(fail(f));
            }
        };
        let record = new_record(label, options, self, at);
        self.ctx
            .inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, record);
        let epoch = crate::stream::CAPTURE_EPOCH.load(Ordering::Acquire);
        self.set_capture_hint(id, options.journal, epoch);
        *slot = Some(ActiveCapture {
            id,
            label: label.to_string(),
            into: into.map(|g| g as usize),
        });
        Ok(())
    }

    /// Ends the capture this stream began and returns the graph (`cuStreamEndCapture`), its
    /// model carrying each node's label, line, ranges and accesses. The model is read back from
    /// the driver when first asked for ([`Graph::model`]), not here: ending a capture costs the
    /// driver's `cuStreamEndCapture` (and, in strict mode, a look at the journal for escapes).
    ///
    /// When the capture failed, the error is [`ErrorKind::CaptureFailed`] with a [`Diagnosis`]
    /// naming the first offending operation; the capture is ended either way and the stream
    /// can capture again. In strict mode, escapes found only now (work of another thread on
    /// memory the capture touched) fail it too.
    ///
    /// A capture into an existing graph ([`Stream::capture_into`]) is not ended here: that is
    /// refused ([`ErrorKind::InvalidInput`]) and the capture goes on; `capture_into` ends it
    /// when its closure returns.
    #[track_caller]
    pub fn end_capture(&self) -> Result<Graph> {
        let at = SourceLine::caller();
        self.finish(at, "Stream::end_capture", false)
            .map(|(g, _)| g)
    }

    /// [`Stream::end_capture`], also returning the [`CaptureReport`]: the journal and the
    /// silent escapes (warnings) of a capture that ended well.
    #[track_caller]
    pub fn end_capture_report(&self) -> Result<(Graph, CaptureReport)> {
        let at = SourceLine::caller();
        self.finish(at, "Stream::end_capture", true)
    }

    fn finish(
        &self,
        at: SourceLine,
        op: &'static str,
        report: bool,
    ) -> Result<(Graph, CaptureReport)> {
        self.refuse_ending_capture_into(op, at)?;
        let ended = self
            .end_raw()
            .ok_or_else(|| Error::new(ErrorKind::NotCapturing, self.object(), op, at))?;
        // Made only for an error: a capture that ended well allocates nothing here.
        let object = || ObjectRef::new(ObjectKind::Capture, &ended.label);
        let failed =
            |d: Diagnosis| Error::new(ErrorKind::CaptureFailed(Box::new(d)), object(), op, at);
        let raw = match ended.graph {
            Ok(raw) => raw,
            Err(f) => {
                return Err(match &ended.record {
                    Some(rec)
                        if matches!(f.code.number(), 900..=908)
                            || f.call == "cuStreamEndCapture" =>
                    {
                        failed(rec.diagnosis(Some(f.code), Some(at)))
                    }
                    _ => f.on(object(), op, at),
                })
            }
        };
        let Some(mut record) = ended.record else {
            // SAFETY: the driver handed us raw; nobody else owns it.
            let _ = unsafe { driver::graph_destroy(raw) };
            return Err(Error::new(
                ErrorKind::NullHandle {
                    what: "the capture's journal",
                },
                object(),
                op,
                at,
            ));
        };
        // The escapes are looked for only where someone reads them: strict mode, or a report.
        let escapes = if record.options.strict || report {
            record.escapes()
        } else {
            Vec::new()
        };
        if record.options.strict && !escapes.is_empty() {
            // SAFETY: the driver handed us raw; nobody else owns it.
            let _ = unsafe { driver::graph_destroy(raw) };
            return Err(failed(record.diagnosis(None, Some(at))));
        }
        let report = if report {
            CaptureReport {
                capture: record.label.clone(),
                journal: record.journal(),
                escapes,
            }
        } else {
            CaptureReport::default()
        };
        let journal = std::mem::take(&mut record.entries);
        let keep = std::mem::take(&mut record.keep);
        // SAFETY: raw is a graph the driver just handed over; Graph takes ownership.
        let graph =
            unsafe { Graph::from_capture(self.ctx.clone(), raw, &ended.label, journal, keep) };
        Ok((graph, report))
    }

    /// Refuses to end a capture into an existing graph (`Stream::capture_into`, which ends it
    /// itself and keeps the graph): ending it here would take the graph, which its conditional
    /// node owns, and leave `capture_into` nothing to end. The capture goes on.
    fn refuse_ending_capture_into(&self, op: &'static str, at: SourceLine) -> Result<()> {
        let slot = self.capture.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(active) if active.into.is_some() => {
                Err(ending_capture_into(&active.label, op, at))
            }
            _ => Ok(()),
        }
    }

    /// Captures everything `body` issues on this stream into a graph. The capture is always
    /// ended. When `body` fails because of the capture (an operation the capture refused, or
    /// one that broke it), the error is a [`Diagnosis`] ([`ErrorKind::CaptureFailed`]); other
    /// errors of `body` are returned as they are.
    #[track_caller]
    pub fn capture<R>(
        &self,
        mode: CaptureMode,
        label: &str,
        body: impl FnOnce(&Stream) -> Result<R>,
    ) -> Result<(Graph, R)> {
        self.capture_with(CaptureOptions::new(mode), label, body)
    }

    /// [`Stream::capture`] with [`CaptureOptions`].
    #[track_caller]
    pub fn capture_with<R>(
        &self,
        options: impl Into<CaptureOptions>,
        label: &str,
        body: impl FnOnce(&Stream) -> Result<R>,
    ) -> Result<(Graph, R)> {
        let at = SourceLine::caller();
        let op = "Stream::capture";
        let _range = crate::ranges::range(format!("capture:{label}"));
        self.begin_capture_with(options.into(), label)
            .map_err(|e| Error { at, op, ..e })?;
        match body(self) {
            Ok(value) => {
                let (graph, _) = self
                    .finish(at, op, false)
                    .map_err(|e| Error { at, op, ..e })?;
                Ok((graph, value))
            }
            Err(error) => {
                let Some(ended) = self.end_raw() else {
                    return Err(error);
                };
                let end_code = match &ended.graph {
                    Ok(raw) => {
                        // SAFETY: the driver handed us raw; the body failed, so it is discarded.
                        let _ = unsafe { driver::graph_destroy(*raw) };
                        None
                    }
                    Err(f) => Some(f.code),
                };
                let broke = end_code.is_some() || capture_related(&error);
                match ended.record {
                    Some(rec) if broke && !matches!(error.kind, ErrorKind::CaptureFailed(_)) => {
                        Err(Error::new(
                            ErrorKind::CaptureFailed(Box::new(rec.diagnosis(end_code, Some(at)))),
                            ObjectRef::new(ObjectKind::Capture, &ended.label),
                            op,
                            at,
                        ))
                    }
                    _ => Err(error),
                }
            }
        }
    }
}

/// Whether an error of a capture body came from the capture (a refusal or a capture code).
fn capture_related(error: &Error) -> bool {
    match &error.kind {
        ErrorKind::NotAllowedDuringCapture { .. }
        | ErrorKind::CaptureEscape(_)
        | ErrorKind::CaptureFailed(_) => true,
        _ => error
            .cuda_code()
            .is_some_and(|c| matches!(c.number(), 900..=908)),
    }
}

/// The error of ending, with `op` at `at`, capture `label`, which captures into an existing graph
/// (`Stream::capture_into`).
pub(crate) fn ending_capture_into(label: &str, op: &'static str, at: SourceLine) -> Error {
    Error::new(
        ErrorKind::InvalidInput {
            reason: format!(
                "capture '{label}' adds to an existing graph (Stream::capture_into), which ends \
                 the capture itself and keeps the graph; return from the closure; capture_into \
                 ends the capture"
            ),
        },
        ObjectRef::new(ObjectKind::Capture, label),
        op,
        at,
    )
}
