//! Races across graphs: a launch sequence (launches of executables on streams, signal records
//! and waits inside graphs and on streams, host synchronisations) checked for two launches of
//! different executables whose nodes touch the same bytes, at least one writing, with no order
//! between the launches.
//!
//! - [`LaunchSequence`] is the input and its file format (`graphsmith-launches`, version 1,
//!   JSON through serde; docs/ordering.md): the runtime's launch log writes it, a tracer can
//!   fill it (graphs, streams and signals are integer ids, nodes a label and an optional line);
//! - [`Checker`] orders the operations one by one with vector clocks over streams (the
//!   runtime's launch log asks it about each launch before the launch is submitted);
//! - [`check`] runs a whole sequence and returns a [`LaunchReport`]: each [`Race`] names both
//!   graphs, both nodes (label and line), the buffer and its byte range, and the missing wait.
//!
//! Order is kept per launch: a graph that records a signal counts as recorded once its whole
//! launch is done, and a graph that waits on a signal waits before any of its nodes. A race
//! between a node after the record node and a waiter is therefore not seen (docs/ordering.md,
//! "What it cannot see").

mod checker;
mod report;

use graphsmith_model::Access;
use serde::{Deserialize, Serialize};

pub use checker::Checker;
pub use report::{LaunchReport, MissingWait, Race, RaceSide};

/// The value of [`LaunchSequence::format`].
pub const FORMAT: &str = "graphsmith-launches";
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;

/// A launch sequence: what was launched where, and every order the host gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaunchSequence {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u32,
    /// Streams by id, with their labels.
    #[serde(default)]
    pub streams: Vec<Named>,
    /// Signals (events) by id, with their labels.
    #[serde(default)]
    pub signals: Vec<Named>,
    /// The executables launched, by id.
    #[serde(default)]
    pub graphs: Vec<GraphInfo>,
    /// The operations in the order the host issued them.
    #[serde(default)]
    pub ops: Vec<Op>,
}

impl Default for LaunchSequence {
    fn default() -> Self {
        Self {
            format: FORMAT.to_string(),
            version: VERSION,
            streams: Vec::new(),
            signals: Vec::new(),
            graphs: Vec::new(),
            ops: Vec::new(),
        }
    }
}

/// A stream or a signal: an integer id and a label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub id: u64,
    pub label: String,
}

/// One executable (a graph instantiated once): its nodes with what they touch, and the signals
/// its nodes record and wait on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphInfo {
    /// Unique per executable: two executables of one graph are two ids.
    pub id: u64,
    pub label: String,
    #[serde(default)]
    pub nodes: Vec<NodeInfo>,
    /// Signals recorded by the graph's nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub records: Vec<SignalUse>,
    /// Signals waited on by the graph's nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<SignalUse>,
}

/// One node: its label, the line that made it when known, and the bytes it touches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accesses: Vec<Access>,
}

/// A node that records or waits on a signal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalUse {
    pub signal: u64,
    /// The node's label.
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
}

/// One operation of the host, in issue order. `line` is the caller's line when known.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// An executable launched on a stream.
    Launch {
        graph: u64,
        stream: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// A signal recorded on a stream (after the work submitted to it so far).
    Record {
        signal: u64,
        stream: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// Later work on a stream waits for a signal's latest record.
    Wait {
        signal: u64,
        stream: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// The host waited for a stream.
    SyncStream {
        stream: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// The host waited for a signal's latest record.
    SyncSignal {
        signal: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// The host waited for every launch of an executable so far.
    SyncGraph {
        graph: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
    /// The host waited for all work of the context.
    SyncContext {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<String>,
    },
}

impl LaunchSequence {
    /// Reads a sequence from its JSON text; the message names the line and column where the
    /// text is wrong, or the format or version it does not know.
    pub fn from_json(text: &str) -> Result<LaunchSequence, String> {
        let seq: LaunchSequence = serde_json::from_str(text).map_err(|e| {
            format!(
                "line {}, column {}: not a launch sequence: {e}",
                e.line(),
                e.column()
            )
        })?;
        if seq.format != FORMAT {
            return Err(format!(
                "format '{}' is not '{FORMAT}' (a graph file? run `graphsmith doctor FILE` \
                 without --launches)",
                seq.format
            ));
        }
        if seq.version != VERSION {
            return Err(format!(
                "version {} of '{FORMAT}' is not known (this graphsmith reads version {VERSION})",
                seq.version
            ));
        }
        Ok(seq)
    }

    /// The sequence as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

/// Checks a whole sequence: every race between launches of different executables.
pub fn check(seq: &LaunchSequence) -> LaunchReport {
    let mut checker = Checker::new();
    for s in &seq.streams {
        checker.name_stream(s.id, &s.label);
    }
    for s in &seq.signals {
        checker.name_signal(s.id, &s.label);
    }
    for g in &seq.graphs {
        checker.add_graph(g.clone());
    }
    for op in &seq.ops {
        checker.push(op);
    }
    checker.report()
}
