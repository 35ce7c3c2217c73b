//! `graphsmith.Report`, what `doctor` and `check` return: the findings of
//! `graphsmith_analysis::doctor` (the one doctor, shared with `graphsmith doctor`) with the file
//! or graph they are about. Its text and JSON are the command's.

use graphsmith_analysis::doctor::Findings;
use pyo3::prelude::*;

/// What `graphsmith.doctor` found in one graph file, or `graphsmith.check` in a live graph.
#[pyclass(frozen, module = "graphsmith")]
pub(crate) struct Report {
    pub path: String,
    pub findings: Findings,
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
        self.findings.format.key()
    }

    /// The graph's shape as text: nodes, edges, kinds, depth, width, roots, leaves.
    #[getter]
    fn summary(&self) -> String {
        self.findings.summary.to_string()
    }

    /// Number of nodes.
    #[getter]
    fn nodes(&self) -> usize {
        self.findings.summary.nodes
    }

    /// Number of (distinct) edges.
    #[getter]
    fn edges(&self) -> usize {
        self.findings.summary.edges
    }

    /// The certain hazards (pairs of nodes that no path orders and that touch the same bytes,
    /// one of them writing, both directions known), one line each, naming both nodes and the
    /// buffer. Hazards inside child graphs and conditional bodies say where they are.
    #[getter]
    fn hazards(&self) -> Vec<String> {
        self.findings
            .hazards
            .certain()
            .map(|h| h.to_string())
            .collect()
    }

    /// The possible hazards, reported apart: pairs of nodes that no path orders whose only
    /// conflicts involve a pointer of unknown direction (it may write), or a kernel whose
    /// memory is unknown (a DOT dump). Each is to be confirmed by a person.
    #[getter]
    fn possible_hazards(&self) -> Vec<String> {
        self.findings
            .hazards
            .possible()
            .map(|h| h.to_string())
            .collect()
    }

    /// Number of possible hazards (`len(possible_hazards)`).
    #[getter]
    fn possible(&self) -> usize {
        self.findings.possible()
    }

    /// True when no certain hazard was found: what `graphsmith doctor` exits 0 on. Possible
    /// hazards do not count here; `strict_clean` counts them too.
    #[getter]
    fn clean(&self) -> bool {
        self.findings.passes(false)
    }

    /// True when no hazard was found, certain or possible: what `graphsmith doctor --strict`
    /// exits 0 on.
    #[getter]
    fn strict_clean(&self) -> bool {
        self.findings.passes(true)
    }

    /// Number of unordered pairs that could not be judged (a dump's kernels, whose memory is
    /// unknown): not hazards, explained in `notes`.
    #[getter]
    fn unjudged_pairs(&self) -> u64 {
        self.findings.unjudged()
    }

    /// What could not be checked (kernels whose memory is unknown, pairs not judged, copies
    /// without operands), every nested graph counted: child graphs and conditional bodies.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.findings.notes.clone()
    }

    /// The exit code `graphsmith doctor` gives this graph: 0 when `clean` (with `strict`, when
    /// `strict_clean`), 1 otherwise.
    #[pyo3(signature = (strict = false))]
    fn exit_code(&self, strict: bool) -> u8 {
        self.findings.exit_code(strict)
    }

    /// The graph in DOT, hazards drawn in red (render it with Graphviz's `dot -Tsvg`).
    fn to_dot(&self) -> String {
        self.findings
            .graph
            .to_dot_with(&self.findings.hazards.dot_options())
    }

    /// The graph as SVG, hazards drawn in red, rendered by Graphviz's `dot` (which must be on
    /// PATH: `apt install graphviz`, `conda install graphviz`, ...). Raises `RuntimeError`
    /// naming Graphviz when `dot` is missing or fails.
    fn to_svg(&self) -> PyResult<String> {
        render_svg(&self.to_dot()).map_err(pyo3::exceptions::PyRuntimeError::new_err)
    }

    /// The report as JSON, the same object `graphsmith doctor --json` prints (`file`, `format`,
    /// `summary`, `critical_path`, `memory`, `hazards`, `hazard_counts`, `unjudged_pairs`,
    /// `redundant_edges`, `notes`, `strict`, `exit_code`); `strict` as `--strict`.
    #[pyo3(signature = (strict = false))]
    fn to_json(&self, strict: bool) -> String {
        self.findings.json(&self.path, &[], strict)
    }

    /// The report as text, as `graphsmith doctor` prints it; `strict` as `--strict` (the
    /// hazards' summary line says whether possible hazards fail). `str(report)` is
    /// `report.text()`.
    #[pyo3(signature = (strict = false))]
    fn text(&self, strict: bool) -> String {
        self.findings.text(&self.path, &[], strict)
    }

    fn __repr__(&self) -> String {
        format!(
            "<graphsmith.Report {} ({}): {} nodes, {} edges, {} hazard(s), {} possible>",
            self.path,
            self.findings.format.key(),
            self.findings.summary.nodes,
            self.findings.summary.edges,
            self.findings.certain(),
            self.findings.possible()
        )
    }

    fn __str__(&self) -> String {
        self.text(false)
    }
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
