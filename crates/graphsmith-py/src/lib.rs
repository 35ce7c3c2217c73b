//! `graphsmith._native`, the extension module behind the `graphsmith` Python package
//! (`python/graphsmith/__init__.py` re-exports it): `doctor` reads a graph file (graphsmith JSON
//! or a `cudaGraphDebugDotPrint` dump) and reports its shape and hazards, `explain` looks a CUDA
//! error up in the failure catalogue. Both are the pure model and analysis crates, as in
//! `graphsmith doctor` and `graphsmith explain`, and need no CUDA. `check_raw_graph` reads a live
//! `CUgraph` (a `torch.cuda.CUDAGraph` kept after capture; `graphsmith.check` in Python) back
//! through the runtime's read-back and checks it the same way.
//!
//! Every failure is a Python exception (`ValueError` for input that is not a graph or not a
//! known code, `OSError` for a file that cannot be read); nothing panics across the FFI (PyO3
//! turns a panic into `PanicException` in any case).

use std::path::PathBuf;

use graphsmith_analysis::doctor::{analyse_file, DoctorError};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

mod check;
mod report;

use report::Report;

/// Reads a graph file (graphsmith JSON or a `cudaGraphDebugDotPrint` dump) and reports its shape
/// and hazards, as `graphsmith doctor FILE` does (the same analysis, text and JSON). Raises
/// `OSError` when the file cannot be read and `ValueError` (naming the line) when it is not a
/// graph.
#[pyfunction]
fn doctor(path: PathBuf) -> PyResult<Report> {
    let shown = path.display().to_string();
    let findings = analyse_file(&path).map_err(|e| match e {
        DoctorError::Read(_) => PyOSError::new_err(format!("{shown}: {e}")),
        DoctorError::Input(_) => PyValueError::new_err(format!("{shown}: {e}")),
    })?;
    Ok(Report {
        path: shown,
        findings,
    })
}

/// The failure catalogue's entries for a CUDA error: a code (`900`), its driver or runtime name
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `cudaErrorStreamCaptureUnsupported`) or an entry
/// id, as `graphsmith explain` prints them. Raises `ValueError` for anything the catalogue does
/// not know.
#[pyfunction]
fn explain(query: &Bound<'_, PyAny>) -> PyResult<String> {
    let query = match query.extract::<i64>() {
        Ok(code) => code.to_string(),
        Err(_) => query.extract::<String>().map_err(|_| {
            PyValueError::new_err("explain() takes a CUDA error code (int) or a name (str)")
        })?,
    };
    graphsmith_analysis::catalogue::explain(&query)
        .map(|found| found.to_string())
        .map_err(|message| PyValueError::new_err(format!("{query:?}: {message}")))
}

/// The extension module `graphsmith._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(explain, m)?)?;
    m.add_function(wrap_pyfunction!(check::check_raw_graph, m)?)?;
    m.add_class::<Report>()?;
    Ok(())
}
