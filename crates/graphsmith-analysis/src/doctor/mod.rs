//! The doctor: one graph (graphsmith JSON, a `cudaGraphDebugDotPrint` dump, or a live graph read
//! back from the driver) checked for its shape, its hazards (certain and possible), its
//! redundant edges and what the input could not tell (the notes), with the report as text and
//! as JSON. `graphsmith doctor` and the Python package's `graphsmith.doctor` / `graphsmith.check`
//! both call it, so they print the same report.
//!
//! - [`analyse_file`] / [`analyse_text`] read a file or its text (format detected from the first
//!   word); [`analyse_graph`] takes a graph already in the model (a live read-back);
//! - [`Findings`] holds everything found; [`Findings::text`] and [`Findings::json`] render it;
//! - [`Findings::exit_code`]: `1` only on certain hazards, or on possible ones too when strict;
//! - [`analyse_launches_file`]: a launch sequence (`graphsmith doctor --launches`) checked for
//!   races across graphs ([`LaunchFindings`], the same exit-code rule).

mod json;
mod launches;
mod notes;
mod text;

use std::path::Path;

use graphsmith_model::{Edge, Graph, HazardOptions, HazardReport, NodeId, Summary};

pub use launches::{analyse_launches_file, analyse_launches_text, LaunchFindings};
pub use notes::dropped_regions;

/// Where a graph came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// graphsmith JSON (`Graph::to_json`), which starts with `{`.
    Json,
    /// A `cudaGraphDebugDotPrint` dump, which starts with `digraph`.
    DriverDot,
    /// A live graph read back from the driver (`graphsmith.check` in Python).
    Live,
}

impl Format {
    /// The name the text report shows after the file name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "graphsmith JSON",
            Format::DriverDot => "cudaGraphDebugDotPrint DOT",
            Format::Live => "live graph read back from the driver",
        }
    }

    /// The key of the JSON report's `format` field: `json`, `driver_dot` or `live`.
    pub fn key(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::DriverDot => "driver_dot",
            Format::Live => "live",
        }
    }

    /// The file format of `text` from its first word, or a message naming the line where it is
    /// neither.
    pub fn detect(text: &str) -> Result<Format, String> {
        let start = text.trim_start();
        if start.starts_with('{') {
            return Ok(Format::Json);
        }
        if ["digraph", "strict", "graph", "//", "/*"]
            .iter()
            .any(|w| start.starts_with(w))
        {
            return Ok(Format::DriverDot);
        }
        let line = text[..text.len() - start.len()].matches('\n').count() + 1;
        Err(format!(
            "line {line}: neither graphsmith JSON (starts with '{{') nor a DOT dump (starts with \
             'digraph')"
        ))
    }
}

/// Why a graph file could not be checked.
#[derive(Debug)]
pub enum DoctorError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    Read(std::io::Error),
    /// The text is not a graph, or the graph is not one the model accepts (a cycle): the
    /// message names the line where the input is wrong when it can.
    Input(String),
}

impl std::fmt::Display for DoctorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DoctorError::Read(e) => write!(f, "cannot read: {e}"),
            DoctorError::Input(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for DoctorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DoctorError::Read(e) => Some(e),
            DoctorError::Input(_) => None,
        }
    }
}

/// Everything the doctor found about one graph.
#[derive(Clone, Debug)]
pub struct Findings {
    /// Where the graph came from.
    pub format: Format,
    /// The graph, nested graphs included.
    pub graph: Graph,
    /// Its shape.
    pub summary: Summary,
    /// A longest path, by node count.
    pub critical_path: Vec<NodeId>,
    /// Its hazards (certain and possible) and the pairs that could not be judged.
    pub hazards: HazardReport,
    /// Edges that other paths imply.
    pub redundant: Vec<Edge>,
    /// What the input could not tell: kernels without accesses, unjudged pairs, copies without
    /// operands (every nested graph counted: child graphs and conditional bodies).
    pub notes: Vec<String>,
}

/// Reads the graph file at `path` and checks it ([`analyse_text`]).
pub fn analyse_file(path: &Path) -> Result<Findings, DoctorError> {
    let text = std::fs::read_to_string(path).map_err(DoctorError::Read)?;
    analyse_text(&text)
}

/// Checks the graph in `text`: graphsmith JSON or a `cudaGraphDebugDotPrint` dump, told apart
/// by the first word ([`Format::detect`]).
pub fn analyse_text(text: &str) -> Result<Findings, DoctorError> {
    let format = Format::detect(text).map_err(DoctorError::Input)?;
    let graph = match format {
        Format::DriverDot => Graph::from_driver_dot(text).map_err(|e| e.to_string()),
        Format::Json | Format::Live => Graph::from_json(text).map_err(|e| e.to_string()),
    }
    .map_err(DoctorError::Input)?;
    analyse_graph(graph, format).map_err(DoctorError::Input)
}

/// Checks `graph`, which came from `format`. A dump's kernels may touch any byte (a dump holds
/// no kernel arguments), so there a kernel beside a copy or set is a possible hazard; elsewhere
/// a kernel without accesses touches nothing. The error is the model's (a cycle).
pub fn analyse_graph(graph: Graph, format: Format) -> Result<Findings, String> {
    let summary = graph.summary().map_err(|e| e.to_string())?;
    let critical_path = graph.longest_path().map_err(|e| e.to_string())?;
    let options = HazardOptions {
        unknown_kernel_memory: format == Format::DriverDot,
    };
    let hazards = graph.hazards_with(&options).map_err(|e| e.to_string())?;
    let redundant = graph.redundant_edges().map_err(|e| e.to_string())?;
    let notes = notes::notes(&graph, format, &hazards);
    Ok(Findings {
        format,
        graph,
        summary,
        critical_path,
        hazards,
        redundant,
        notes,
    })
}

impl Findings {
    /// Number of certain hazards (both sides' directions and bytes known).
    pub fn certain(&self) -> usize {
        self.hazards.certain().count()
    }

    /// Number of possible hazards (a pointer of unknown direction, or a kernel of unknown
    /// memory beside a copy or set): to be confirmed by a person.
    pub fn possible(&self) -> usize {
        self.hazards.possible().count()
    }

    /// Pairs of nodes that no path orders and that could not be judged (a dump's kernels).
    pub fn unjudged(&self) -> u64 {
        self.hazards
            .unjudged_kernel_pairs
            .saturating_add(self.hazards.unjudged_nested_pairs)
    }

    /// Whether the graph passes: no certain hazard, and with `strict` no possible one either.
    pub fn passes(&self, strict: bool) -> bool {
        self.certain() == 0 && !(strict && self.possible() > 0)
    }

    /// The doctor's exit code: 0 when the graph [`passes`](Findings::passes), 1 otherwise.
    /// (Input that cannot be read is 2, decided by the caller.)
    pub fn exit_code(&self, strict: bool) -> u8 {
        if self.passes(strict) {
            0
        } else {
            1
        }
    }

    /// The report as text, as `graphsmith doctor` prints it: `file` and the format, the shape,
    /// the critical path, the memory seen, the hazards (the summary line says how many are
    /// certain and possible, and whether possible ones fail), the redundant edges, then the
    /// notes and `extra_notes` (what the caller wrote, e.g. a DOT file).
    pub fn text(&self, file: &str, extra_notes: &[String], strict: bool) -> String {
        text::render(file, self, extra_notes, strict)
    }

    /// The report as pretty-printed JSON, the same facts as [`Findings::text`]: `file`,
    /// `format`, `summary`, `critical_path`, `memory`, `hazards`, `hazard_counts` (`certain`,
    /// `possible`), `unjudged_pairs`, `redundant_edges`, `notes` (with `extra_notes`), `strict`
    /// and `exit_code`.
    pub fn json(&self, file: &str, extra_notes: &[String], strict: bool) -> String {
        json::render(file, self, extra_notes, strict)
    }
}

/// The label of node `id` of `graph`, or `?` when there is none.
fn label(graph: &Graph, id: NodeId) -> &str {
    graph.node(id).map_or("?", |n| n.label.as_str())
}
