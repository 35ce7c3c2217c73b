//! What `doctor` and `check` report: the graph, its summary, its hazards and notes on what could
//! not be checked, as the Python class `graphsmith.Report`.

use graphsmith_model::{Graph, HazardReport, NodeKind, Summary};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The two file formats `doctor` reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Json,
    DriverDot,
    /// A live graph read back from the driver.
    Live,
}

impl Format {
    fn key(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::DriverDot => "driver_dot",
            Format::Live => "live",
        }
    }

    /// The format of `text`, or the line where it is neither.
    pub(crate) fn detect(text: &str) -> Result<Format, String> {
        let start = text.trim_start();
        if start.starts_with('{') {
            Ok(Format::Json)
        } else if ["digraph", "strict", "graph", "//", "/*"]
            .iter()
            .any(|w| start.starts_with(w))
        {
            Ok(Format::DriverDot)
        } else {
            let line = text[..text.len() - start.len()].matches('\n').count() + 1;
            Err(format!(
                "line {line}: neither graphsmith JSON (starts with '{{') nor a \
                 cudaGraphDebugDotPrint dump (starts with 'digraph')"
            ))
        }
    }
}

/// What `graphsmith.doctor` found in one graph file.
#[pyclass(frozen, module = "graphsmith")]
pub(crate) struct Report {
    pub path: String,
    pub format: Format,
    pub graph: Graph,
    pub summary: Summary,
    pub hazards: HazardReport,
    pub notes: Vec<String>,
}

#[pymethods]
impl Report {
    /// The file that was read, or the label of a live graph.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// `"json"` (graphsmith JSON), `"driver_dot"` (a `cudaGraphDebugDotPrint` dump) or `"live"`
    /// (a graph read back from the driver by `check`).
    #[getter]
    fn format(&self) -> &'static str {
        self.format.key()
    }

    /// The graph's shape as text: nodes, edges, kinds, depth, width, roots, leaves.
    #[getter]
    fn summary(&self) -> String {
        self.summary.to_string()
    }

    /// Number of nodes.
    #[getter]
    fn nodes(&self) -> usize {
        self.summary.nodes
    }

    /// Number of (distinct) edges.
    #[getter]
    fn edges(&self) -> usize {
        self.summary.edges
    }

    /// The certain hazards (pairs of nodes that no path orders and that touch the same bytes,
    /// one of them writing, both directions known), one line each, naming both nodes and the
    /// buffer.
    #[getter]
    fn hazards(&self) -> Vec<String> {
        self.hazards.certain().map(|h| h.to_string()).collect()
    }

    /// The possible hazards, reported apart: pairs of nodes that no path orders whose only
    /// conflicts involve a pointer of unknown direction (it may write), or a kernel whose
    /// memory is unknown (a DOT dump). Each is to be confirmed by a person.
    #[getter]
    fn possible_hazards(&self) -> Vec<String> {
        self.hazards.possible().map(|h| h.to_string()).collect()
    }

    /// True when no hazard was found, certain or possible.
    #[getter]
    fn clean(&self) -> bool {
        self.hazards.is_clean()
    }

    /// What could not be checked (kernels whose memory is unknown, copies without operands).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// The graph in DOT, hazards drawn in red (render it with Graphviz's `dot -Tsvg`).
    fn to_dot(&self) -> String {
        self.graph.to_dot_with(&self.hazards.dot_options())
    }

    /// The graph as SVG, hazards drawn in red, rendered by Graphviz's `dot` (which must be on
    /// PATH: `apt install graphviz`, `conda install graphviz`, ...). Raises `RuntimeError`
    /// naming Graphviz when `dot` is missing or fails.
    fn to_svg(&self) -> PyResult<String> {
        render_svg(&self.to_dot()).map_err(pyo3::exceptions::PyRuntimeError::new_err)
    }

    /// The report as JSON: path, format, summary and the hazard report.
    fn to_json(&self) -> PyResult<String> {
        let value = serde_json::json!({
            "path": self.path,
            "format": self.format.key(),
            "summary": self.summary,
            "hazards": self.hazards,
            "notes": self.notes,
        });
        serde_json::to_string_pretty(&value)
            .map_err(|e| PyValueError::new_err(format!("cannot write the report as JSON: {e}")))
    }

    fn __repr__(&self) -> String {
        format!(
            "<graphsmith.Report {} ({}): {} nodes, {} edges, {} hazard(s), {} possible>",
            self.path,
            self.format.key(),
            self.summary.nodes,
            self.summary.edges,
            self.hazards.certain().count(),
            self.hazards.possible().count()
        )
    }

    fn __str__(&self) -> String {
        text(&self.path, &self.summary, &self.hazards, &self.notes)
    }
}

/// The report as text: path, summary, certain hazards, possible hazards apart, notes.
pub(crate) fn text(
    path: &str,
    summary: &Summary,
    hazards: &HazardReport,
    notes: &[String],
) -> String {
    let mut text = format!("{path}\n{summary}");
    let certain: Vec<String> = hazards.certain().map(|h| h.to_string()).collect();
    let possible: Vec<String> = hazards.possible().map(|h| h.to_string()).collect();
    if certain.is_empty() {
        text.push_str("\nhazards: none");
    } else {
        text.push_str(&format!("\nhazards: {}", certain.len()));
        for h in &certain {
            text.push_str(&format!("\n  {h}"));
        }
    }
    if !possible.is_empty() {
        text.push_str(&format!(
            "\npossible hazards (a pointer of unknown direction, or a kernel of unknown memory: \
             confirm by hand): {}",
            possible.len()
        ));
        for h in &possible {
            text.push_str(&format!("\n  {h}"));
        }
    }
    for note in notes {
        text.push_str(&format!("\nnote: {note}"));
    }
    text
}

/// The note for regions of a memory map left out (empty, or overlapping another).
pub(crate) fn dropped_regions(dropped: usize, given: usize) -> String {
    format!(
        "{dropped} of {given} memory region(s) were left out (empty, or overlapping another \
         region): pointers into them are bounded by the driver's allocations instead"
    )
}

/// Notes on what the hazard check of `graph` could not see.
pub(crate) fn notes(graph: &Graph, format: Format) -> Vec<String> {
    let (kernels, without) = count_kernels(graph);
    let mut notes = Vec::new();
    if without > 0 {
        let why = match format {
            Format::DriverDot => {
                "a DOT dump does not hold kernel arguments: a kernel that no path orders with a \
                 copy or set is reported as a possible hazard on the copy's or set's bytes"
            }
            Format::Json => "the JSON lists none: their hazards cannot be checked",
            Format::Live => {
                "no 8-byte word of their arguments, struct parameters included, points into a \
                 known allocator block or device allocation: their hazards cannot be checked"
            }
        };
        notes.push(format!(
            "{without} of {kernels} kernel node(s) have no known memory accesses ({why})"
        ));
    }
    notes
}

/// Kernel nodes, and those without accesses, child graphs included.
fn count_kernels(graph: &Graph) -> (usize, usize) {
    let (mut all, mut without) = (0, 0);
    let mut todo = vec![graph];
    while let Some(g) = todo.pop() {
        for n in &g.nodes {
            match &n.kind {
                NodeKind::Kernel(_) => {
                    all += 1;
                    if n.accesses.is_empty() {
                        without += 1;
                    }
                }
                NodeKind::ChildGraph { graph } => todo.push(graph),
                _ => {}
            }
        }
    }
    (all, without)
}

/// Runs Graphviz's `dot -Tsvg` on `dot_text` and returns the SVG.
fn render_svg(dot_text: &str) -> Result<String, String> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("dot")
        .arg("-Tsvg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                "to_svg() needs Graphviz's `dot` on PATH (apt install graphviz, conda install \
                 graphviz); to_dot() gives the DOT text without it"
                    .to_string()
            } else {
                format!("cannot run Graphviz's `dot`: {e}")
            }
        })?;
    // Written from another thread, so a large graph cannot fill both pipes and stall.
    let mut stdin = child.stdin.take();
    let text = dot_text.to_string();
    let writer = std::thread::spawn(move || match stdin.as_mut() {
        Some(pipe) => pipe.write_all(text.as_bytes()),
        None => Ok(()),
    });
    let out = child
        .wait_with_output()
        .map_err(|e| format!("Graphviz's `dot` did not finish: {e}"))?;
    let written = writer.join().unwrap_or(Ok(()));
    if !out.status.success() {
        return Err(format!(
            "Graphviz's `dot -Tsvg` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    written.map_err(|e| format!("cannot send the graph to Graphviz's `dot`: {e}"))?;
    String::from_utf8(out.stdout).map_err(|e| format!("Graphviz's `dot` wrote no UTF-8: {e}"))
}
