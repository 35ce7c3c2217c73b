//! Capturing a stream into an existing graph, such as a conditional node's body
//! (`cuStreamBeginCaptureToGraph`), journaled like any capture: the captured nodes join the
//! graph's model with their labels, lines, ranges and accesses.

use std::collections::HashMap;

use crate::context::{CaptureMode, CaptureOptions, CaptureRecord};
use crate::driver;
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Body, Graph};
use crate::stream::Stream;

impl Stream {
    /// Captures everything `work` issues on this stream into a conditional node's [`Body`]
    /// with `cuStreamBeginCaptureToGraph`: the captured nodes depend on nothing already in the
    /// body, and join its model as a capture's nodes do. The capture is
    /// always ended; when it or `work` fails, the nodes it added are removed again, so the
    /// body is as it was, and the error is the capture's diagnosis
    /// ([`ErrorKind::CaptureFailed`]) or `work`'s own error.
    ///
    /// ```ignore
    /// let (_, [then_body, else_body]) = g.if_else("branch", h, &[&set])?;
    /// stream.capture_into(&mut g.body(&then_body)?, CaptureMode::ThreadLocal, |s| {
    ///     s.launch("add1", &add, cfg, args![&mut x, 1.0f32, n])
    /// })?;
    /// ```
    #[track_caller]
    pub fn capture_into<R>(
        &self,
        body: &mut Body<'_>,
        mode: CaptureMode,
        work: impl FnOnce(&Stream) -> Result<R>,
    ) -> Result<R> {
        let at = SourceLine::caller();
        let op = "Stream::capture_into";
        // Through the graph's `editable` hook: refused while an executable shares it.
        let graph = body.graph_mut(op, at)?;
        let label = graph.label.to_string();
        let raw = graph.raw;
        let _range = crate::ranges::range(format!("capture:{label}"));
        self.begin_capture_in(CaptureOptions::new(mode), &label, Some(raw), at)
            .map_err(|e| Error { at, op, ..e })?;
        let result = work(self);
        let ended = self
            .end_raw_keeping(raw)
            .ok_or_else(|| Error::new(ErrorKind::NotCapturing, self.object(), op, at))?;
        let object = || ObjectRef::new(ObjectKind::Capture, &label);
        let diagnosed = |rec: &CaptureRecord, code| {
            Error::new(
                ErrorKind::CaptureFailed(Box::new(rec.diagnosis(code, Some(at)))),
                object(),
                op,
                at,
            )
        };
        let failure = match (&result, &ended.graph, &ended.record) {
            (Ok(_), Ok(_), Some(rec)) if rec.options.strict && !rec.escapes().is_empty() => {
                Some(diagnosed(rec, None))
            }
            (Ok(_), Ok(_), Some(_)) => None,
            (Ok(_), Ok(_), None) => None,
            (Ok(_), Err(f), Some(rec)) => Some(diagnosed(rec, Some(f.code))),
            (Ok(_), Err(f), None) => Some(f.on(object(), op, at)),
            (Err(e), ended_graph, Some(rec))
                if !matches!(e.kind, ErrorKind::CaptureFailed(_))
                    && (ended_graph.is_err() || capture_related(e)) =>
            {
                Some(diagnosed(rec, ended_graph.as_ref().err().map(|f| f.code)))
            }
            (Err(_), _, _) => None,
        };
        let merged = match (failure, result, ended.record) {
            (None, Ok(value), Some(record)) => graph.merge_captured(record, op, at).map(|()| value),
            (None, Ok(_), None) => Err(Error::new(
                ErrorKind::NullHandle {
                    what: "the capture's journal",
                },
                object(),
                op,
                at,
            )),
            (Some(error), _, _) | (None, Err(error), _) => Err(error),
        };
        if merged.is_err() {
            graph.remove_unknown_nodes();
        }
        merged
    }
}

/// Whether an error of the captured work came from the capture (a refusal or a capture code).
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

impl Graph {
    /// Adds to the model the nodes the driver holds that the model does not (those just
    /// captured), labelled from the capture's journal as a captured graph's nodes are
    /// (`graph/captured_nodes.rs`), with the edges that reach them (their types included).
    fn merge_captured(
        &mut self,
        mut record: CaptureRecord,
        op: &'static str,
        at: SourceLine,
    ) -> Result<()> {
        let fail = |f: crate::driver::Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let read = {
            let _guard = self.raw_guard();
            // SAFETY: self.raw is live (owned by self or by the node whose body it is); calls
            // on it are serialised (the guard while shared, &mut self otherwise).
            unsafe { crate::graph::read_graph(self.raw, &self.label) }.map_err(fail)?
        };
        let crate::graph::ReadGraph {
            model: mut read_model,
            handles: read_handles,
            kernels: read_kernels,
        } = read;
        crate::graph::label_captured(
            &mut read_model,
            &read_handles,
            &read_kernels,
            std::mem::take(&mut record.entries),
        );
        let known: HashMap<usize, usize> = self
            .handles()
            .iter()
            .enumerate()
            .map(|(i, &h)| (h as usize, i))
            .collect();
        let mut ids = Vec::with_capacity(read_handles.len());
        let mut added = Vec::new();
        for (i, &handle) in read_handles.iter().enumerate() {
            if let Some(&id) = known.get(&(handle as usize)) {
                ids.push(id);
                continue;
            }
            let node = &read_model.nodes[i];
            let model = self.model_mut();
            let id = model.add_node_with(
                node.label.clone(),
                node.kind.clone(),
                node.provenance.clone(),
                node.accesses.clone(),
            );
            ids.push(id.index());
            added.push((handle, read_kernels.get(i).cloned().flatten()));
        }
        for (handle, kernel) in added {
            self.handles_mut().push(handle);
            self.kernels_mut().push(kernel);
        }
        // The nodes are the graph's now, whatever follows: so are the buffers they use.
        std::sync::Arc::make_mut(&mut self.keep).extend(record.keep);
        for e in &read_model.edges {
            let (from, to) = (ids[e.from.index()], ids[e.to.index()]);
            if known.contains_key(&(read_handles[e.from.index()] as usize))
                && known.contains_key(&(read_handles[e.to.index()] as usize))
            {
                continue;
            }
            let model = self.model_mut();
            let (from, to) = (model.nodes[from].id, model.nodes[to].id);
            model.add_typed_edge(from, to, e.ty).map_err(|err| {
                Error::new(
                    ErrorKind::InvalidGraph(Box::new(err)),
                    self.object(),
                    op,
                    at,
                )
            })?;
        }
        Ok(())
    }

    /// Removes from the driver's graph every node the model does not know (what a failed
    /// capture into it left behind). Best effort: failures leave those nodes in place.
    fn remove_unknown_nodes(&mut self) {
        if self.ctx.bind().is_err() {
            return;
        }
        let _guard = self.raw_guard();
        // SAFETY: self.raw is live (owned by self or by the node whose body it is); calls on
        // it are serialised (the guard while shared, &mut self otherwise).
        let Ok(read) = (unsafe { crate::graph::read_graph(self.raw, &self.label) }) else {
            return;
        };
        let known = self.handles();
        for handle in read.handles {
            if !known.contains(&handle) {
                // SAFETY: handle is a node of self.raw that no model node or NodeRef names.
                let _ = unsafe { driver::destroy_node(handle) };
            }
        }
    }
}
