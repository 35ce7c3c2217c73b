//! What a launch checks and logs about ordering between executables (docs/ordering.md): the
//! signals its graph waits on must be recordable (never recorded and no live recorder is an
//! error naming the waiting node and its line), and, while the context records launches, the
//! launch is described to the launch log, checked against earlier launches of other
//! executables, and recorded once submitted.

use std::sync::atomic::{AtomicU64, Ordering};

use graphsmith_analysis::launch_order::{GraphInfo, NodeInfo, Op as LogOp, SignalUse};

use crate::context::{Keep, LaunchLog, RaceMode};
use crate::error::{Error, ErrorKind, Result, SourceLine};
use crate::exec::Exec;
use crate::stream::{event_uses_alive, EventUse, Signal, Stream};

static NEXT_EXEC_ID: AtomicU64 = AtomicU64::new(1);

/// A new executable id (never reused): the executable's id in launch logs.
pub(crate) fn next_exec_id() -> u64 {
    NEXT_EXEC_ID.fetch_add(1, Ordering::Relaxed)
}

/// What a launch found before it was submitted, for after.
pub(crate) struct Launching {
    /// The executable's uses of events (records marked recorded once launched).
    uses: Vec<Keep>,
    log: Option<LaunchLog>,
}

fn as_use(k: &Keep) -> Option<&EventUse> {
    (**k).downcast_ref::<EventUse>()
}

impl Exec {
    /// The checks before a launch on `stream`; `None` (nothing to do after) while no graph in
    /// the process records or waits on an event through a node and no launch log records.
    pub(crate) fn before_launch(
        &mut self,
        stream: &Stream,
        at: SourceLine,
    ) -> Result<Option<Launching>> {
        let log = stream.context().launch_log();
        if log.is_none() && !event_uses_alive() {
            return Ok(None);
        }
        let uses: Vec<Keep> = self
            .current()
            .keep
            .iter()
            .filter(|k| as_use(k).is_some())
            .cloned()
            .collect();
        for u in uses.iter().filter_map(as_use) {
            if let Some(kind) = u.unrecorded() {
                return Err(Error::new(kind, self.object(), "Exec::launch", at));
            }
        }
        // Launched into a capture, the executable becomes a node of the graph being captured:
        // nothing is recorded now, and the launch is not in the host's order.
        if stream.capturing_now() {
            return Ok(None);
        }
        if let Some(log) = &log {
            stream.log();
            let version = self.stats.node_updates + self.stats.graph_updates;
            let version = version + self.stats.reinstantiations;
            if !log.knows_graph(self.id, version) {
                log.add_graph(self.describe(&uses, log), version);
            }
            if log.mode() == RaceMode::Refuse {
                let line = at.to_string();
                if let Some(race) = log
                    .races_of_launch(self.id, stream.log_id(), &line)
                    .into_iter()
                    .next()
                {
                    let kind = ErrorKind::CrossGraphRace(Box::new(race));
                    return Err(Error::new(kind, self.object(), "Exec::launch", at));
                }
            }
        }
        Ok(Some(Launching { uses, log }))
    }

    /// After a launch was submitted: its records count as recorded, and the log records it.
    pub(crate) fn after_launch(&self, stream: &Stream, launching: Launching, at: SourceLine) {
        for u in launching.uses.iter().filter_map(as_use) {
            u.launched();
        }
        if let Some(log) = launching.log {
            log.push(LogOp::Launch {
                graph: self.id,
                stream: stream.log_id(),
                line: Some(at.to_string()),
            });
        }
    }

    /// The executable as the launch log describes it: its nodes with their lines and accesses,
    /// and the events its nodes record and wait on.
    fn describe(&self, uses: &[Keep], log: &LaunchLog) -> GraphInfo {
        let nodes = self
            .model()
            .nodes
            .iter()
            .map(|n| NodeInfo {
                label: n.label.clone(),
                line: n
                    .provenance
                    .as_ref()
                    .map(|p| format!("{}:{}:{}", p.file, p.line, p.column)),
                accesses: n.accesses.clone(),
            })
            .collect();
        let (mut records, mut waits) = (Vec::new(), Vec::new());
        for u in uses.iter().filter_map(as_use) {
            log.name_signal(u.event.id, &u.event.label);
            let used = SignalUse {
                signal: u.event.id,
                node: u.node.clone(),
                line: Some(u.at.to_string()),
            };
            if u.record {
                records.push(used);
            } else {
                waits.push(used);
            }
        }
        GraphInfo {
            id: self.id,
            label: self.label().to_string(),
            nodes,
            records,
            waits,
        }
    }

    /// Launches after making `stream` wait for each of `signals` ([`Stream::wait_for`]: a
    /// signal never recorded is refused), as one call.
    #[track_caller]
    pub fn launch_after(&mut self, stream: &Stream, signals: &[&Signal]) -> Result<()> {
        for signal in signals {
            stream.wait_for(signal)?;
        }
        self.launch(stream)
    }
}
