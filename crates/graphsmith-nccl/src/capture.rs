//! Capturing collectives into graphs. [`Communicator::capture`] first checks, over the
//! bootstrap connection, that every rank is about to capture the same collectives (a rank that
//! captures something else would wait in the graph forever), then captures on this rank and
//! checks that what was issued is what was planned. The [`CommGraph`] and every [`CommExec`]
//! made from it hold the communicator, and drop their graph or executable first, so the
//! communicator is destroyed after every executable that launches its collectives. (An
//! executable dropped while a capture runs in its context is destroyed by the context after
//! that capture, possibly after the communicator: drop these between captures.)

use std::time::Duration;

use graphsmith::{CaptureMode, ErrorKind, Exec, Graph, Stream};

use crate::bootstrap::{BootstrapError, Session};
use crate::collective::{compare_plans, encode_plan, Collective};
use crate::comm::Communicator;
use crate::error::{NcclError, Result};

/// A captured graph holding collectives, with the communicator it needs.
pub struct CommGraph {
    // Field order is drop order: the graph before the communicator.
    graph: Graph,
    comm: Communicator,
}

/// An executable holding collectives, with the communicator it needs: the communicator cannot
/// be destroyed while this exists.
pub struct CommExec {
    // Field order is drop order: the executable (which waits for its launches) first.
    exec: Exec,
    comm: Communicator,
}

impl CommGraph {
    /// The graph (its model names each collective `nccl ...` with its accesses).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The communicator its collectives use.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }

    /// Instantiates an executable that keeps the communicator alive.
    #[track_caller]
    pub fn instantiate(&self) -> Result<CommExec> {
        Ok(CommExec {
            exec: self.graph.instantiate()?,
            comm: self.comm.clone(),
        })
    }

    /// Instantiates, handing the template over.
    #[track_caller]
    pub fn into_exec(self) -> Result<CommExec> {
        let CommGraph { graph, comm } = self;
        Ok(CommExec {
            exec: graph.into_exec()?,
            comm,
        })
    }
}

impl CommExec {
    /// Launches the executable on `stream` (every rank must launch its own, the same number
    /// of times).
    #[track_caller]
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        Ok(self.exec.launch(stream)?)
    }

    /// The executable.
    pub fn exec(&self) -> &Exec {
        &self.exec
    }

    /// The communicator its collectives use.
    pub fn communicator(&self) -> &Communicator {
        &self.comm
    }
}

/// Clears the capture record of a communicator even when the body unwinds.
struct Recording<'a>(&'a Communicator);

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        if let Ok(mut issued) = self.0.inner.issued.lock() {
            *issued = None;
        }
    }
}

impl Communicator {
    /// Checks `plan` against every other rank's (within `timeout`), then captures `body` on
    /// `stream` (thread-local mode) and checks that it issued exactly `plan`'s collectives in
    /// order. Every rank must call it with the same plan; when one differs, every rank gets
    /// [`NcclError::CaptureDiffers`] naming the first differing collective and the ranks, and
    /// nothing is captured. Run [`Communicator::warm_up`] once before the first capture.
    #[track_caller]
    pub fn capture<R>(
        &self,
        session: &mut Session,
        stream: &Stream,
        label: &str,
        plan: &[Collective],
        timeout: Duration,
        body: impl FnOnce(&Stream, &Communicator) -> Result<R>,
    ) -> Result<(CommGraph, R)> {
        match session.agree(&encode_plan(plan), timeout, compare_plans) {
            Ok(()) => {}
            Err(BootstrapError::Disagreement { reason }) => {
                return Err(NcclError::CaptureDiffers {
                    capture: label.to_string(),
                    reason,
                })
            }
            Err(e) => return Err(e.into()),
        }
        if let Ok(mut issued) = self.inner.issued.lock() {
            *issued = Some(Vec::new());
        }
        let recording = Recording(self);
        stream.begin_capture(CaptureMode::ThreadLocal, label)?;
        let out = body(stream, self);
        let ended = stream.end_capture();
        let issued = self
            .inner
            .issued
            .lock()
            .ok()
            .and_then(|mut i| i.take())
            .unwrap_or_default();
        drop(recording);
        let graph = match (out, ended) {
            (_, Err(e)) if matches!(e.kind, ErrorKind::CaptureFailed(_)) => return Err(e.into()),
            (Err(e), _) => return Err(e),
            (Ok(_), Err(e)) => return Err(e.into()),
            (Ok(r), Ok(g)) => (g, r),
        };
        if issued != plan {
            let show = |l: &[Collective]| {
                let names: Vec<String> = l.iter().map(ToString::to_string).collect();
                format!("[{}]", names.join(", "))
            };
            return Err(NcclError::NotAsPlanned {
                capture: label.to_string(),
                rank: self.rank(),
                declared: show(plan),
                captured: show(&issued),
            });
        }
        let (graph, r) = graph;
        Ok((
            CommGraph {
                graph,
                comm: self.clone(),
            },
            r,
        ))
    }
}
