//! What the launch-order check found: races with their missing waits, as text and JSON.

use std::fmt::Write as _;

use graphsmith_model::AccessMode;
use serde::{Deserialize, Serialize};

/// One side of a race: a node of a launched executable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaceSide {
    /// The launch's number in the sequence (1 for the first launch).
    pub launch: usize,
    pub graph: u64,
    pub graph_label: String,
    pub stream: u64,
    pub stream_label: String,
    /// The node's label.
    pub node: String,
    /// The line that made the node, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// How the node touches the bytes.
    pub mode: AccessMode,
    /// The line of the launch, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_line: Option<String>,
}

/// The wait that would order the two launches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingWait {
    /// The stream that should wait: the second launch's.
    pub stream: u64,
    pub stream_label: String,
    /// A signal the first executable records, when it records one: the second should wait on
    /// it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_label: Option<String>,
    /// The fix in words.
    pub fix: String,
}

impl MissingWait {
    pub(super) fn new(first: &RaceSide, second: &RaceSide, signal: Option<(u64, String)>) -> Self {
        let fix = match &signal {
            Some((_, label)) => format!(
                "make launch #{} of '{}' wait on signal '{label}', which '{}' records: a \
                 Graph::wait_for node in '{}', or Stream::wait_for on stream '{}' before the \
                 launch",
                second.launch,
                second.graph_label,
                first.graph_label,
                second.graph_label,
                second.stream_label
            ),
            None => format!(
                "record a signal on stream '{}' after launch #{} of '{}' (Stream::signal, or a \
                 Graph::signal node at the end of '{}') and make stream '{}' wait on it \
                 (Stream::wait_for) before launch #{} of '{}'",
                first.stream_label,
                first.launch,
                first.graph_label,
                first.graph_label,
                second.stream_label,
                second.launch,
                second.graph_label
            ),
        };
        let (signal, signal_label) = match signal {
            Some((id, label)) => (Some(id), Some(label)),
            None => (None, None),
        };
        Self {
            stream: second.stream,
            stream_label: second.stream_label.clone(),
            signal,
            signal_label,
            fix,
        }
    }
}

/// Two launches of different executables whose nodes touch the same bytes, at least one
/// writing, with no order between the launches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Race {
    /// The earlier launch, in the host's order.
    pub first: RaceSide,
    pub second: RaceSide,
    /// The buffer's identity (its base address) and label.
    pub buffer: u64,
    pub buffer_label: String,
    /// The bytes both touch, from the buffer's start.
    pub offset: u64,
    pub len: u64,
    /// Both directions known; otherwise one side's pointer has an unknown direction and the
    /// race is only possible.
    pub certain: bool,
    /// Other pairs of nodes of the same two executables that conflict on this buffer (the
    /// same missing wait orders them).
    #[serde(default)]
    pub more_pairs: usize,
    pub missing_wait: MissingWait,
}

fn verb(mode: AccessMode) -> &'static str {
    match mode {
        AccessMode::Read => "read",
        AccessMode::Write => "write",
        AccessMode::ReadWrite => "read-write",
        AccessMode::Unknown => "access of unknown direction",
    }
}

fn side_text(s: &RaceSide) -> String {
    let line = s
        .line
        .as_deref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    let at = s
        .launch_line
        .as_deref()
        .map(|l| format!(", launched at {l}"))
        .unwrap_or_default();
    format!(
        "{} by node '{}'{line} of graph '{}' (launch #{} on stream '{}'{at})",
        verb(s.mode),
        s.node,
        s.graph_label,
        s.launch,
        s.stream_label
    )
}

impl std::fmt::Display for Race {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let buffer = if self.buffer_label.is_empty() {
            format!("{:#x}", self.buffer)
        } else {
            format!("'{}' ({:#x})", self.buffer_label, self.buffer)
        };
        writeln!(
            f,
            "{} race on buffer {buffer}, bytes {}..{}:",
            if self.certain { "certain" } else { "possible" },
            self.offset,
            self.offset.saturating_add(self.len)
        )?;
        writeln!(f, "  {}", side_text(&self.first))?;
        writeln!(f, "  {}", side_text(&self.second))?;
        if self.more_pairs > 0 {
            writeln!(
                f,
                "  and {} more pair{} of nodes of these executables on this buffer",
                self.more_pairs,
                if self.more_pairs == 1 { "" } else { "s" }
            )?;
        }
        write!(
            f,
            "  no signal, stream or host order between the launches; missing wait: {}",
            self.missing_wait.fix
        )
    }
}

/// Everything the check of a launch sequence found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchReport {
    pub launches: usize,
    /// Executables launched.
    pub graphs: usize,
    pub streams: usize,
    pub races: Vec<Race>,
    /// What the sequence could not tell, or waits that order nothing.
    pub notes: Vec<String>,
}

impl LaunchReport {
    /// Races whose both directions are known.
    pub fn certain(&self) -> usize {
        self.races.iter().filter(|r| r.certain).count()
    }

    /// Races with a side of unknown direction.
    pub fn possible(&self) -> usize {
        self.races.len() - self.certain()
    }

    /// The report as text: the counts, each race with its missing wait, then the notes.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} launches of {} executables on {} streams",
            self.launches, self.graphs, self.streams
        );
        let _ = writeln!(
            out,
            "cross-graph races: {} ({} certain, {} possible)",
            self.races.len(),
            self.certain(),
            self.possible()
        );
        for (i, r) in self.races.iter().enumerate() {
            let _ = writeln!(out, "race {}: {r}", i + 1);
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {n}");
        }
        out
    }
}
