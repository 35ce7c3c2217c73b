//! `check_raw_graph`: a live `CUgraph` (from `torch.cuda.CUDAGraph.raw_cuda_graph()`, through
//! `graphsmith.check` in Python) read back into the model with the runtime's read-back, the one
//! `graphsmith trace --hazards` uses, and checked by the one doctor (`graphsmith_analysis::doctor`).

use graphsmith::Context;
use graphsmith_analysis::doctor::{analyse_graph, dropped_regions, Format};
use graphsmith_analysis::{MemoryMap, Region};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::report::Report;

/// Reads the `CUgraph` whose handle is `handle` (an integer, as PyTorch's
/// `CUDAGraph.raw_cuda_graph()` returns it) on device `device` and checks it for hazards.
///
/// `regions`, when given, is the memory map of the read-back: `(address, size, label)` of each
/// region (PyTorch's caching-allocator blocks, from `torch.cuda.memory_snapshot()` in
/// `graphsmith.check`). A kernel's pointer into a region touches that region only, so two
/// tensors of one `cudaMalloc` segment never look like one buffer; other pointers are bounded
/// by the driver's allocations.
///
/// The graph is only read, never changed or destroyed. The caller keeps the graph alive and
/// unchanged during the call (`graphsmith.check` holds the `CUDAGraph` and runs with the GIL
/// held). Raises `ValueError` for a null handle and `RuntimeError` (naming the driver call and
/// the CUDA code) when the driver cannot read it.
#[pyfunction]
#[pyo3(signature = (handle, device, label = "torch.cuda.CUDAGraph", regions = None))]
pub(crate) fn check_raw_graph(
    handle: usize,
    device: usize,
    label: &str,
    regions: Option<Vec<(u64, u64, String)>>,
) -> PyResult<Report> {
    if handle == 0 {
        return Err(PyValueError::new_err(format!(
            "{label}: the CUgraph handle is null (no graph was kept: capture with \
             torch.cuda.CUDAGraph(keep_graph=True))"
        )));
    }
    let given = regions.as_ref().map_or(0, Vec::len);
    let map = MemoryMap::new(
        regions
            .unwrap_or_default()
            .into_iter()
            .map(|(base, size, name)| Region::new(base, size, name)),
    );
    let ctx = Context::new(device).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let raw = handle as graphsmith::sys::CUgraph;
    // SAFETY: `raw` is non-null and, by this function's contract (upheld by graphsmith.check,
    // which holds the CUDAGraph object and the GIL), a live CUgraph that no other thread uses
    // during the call; the read-back only queries it.
    let graph = unsafe { graphsmith::read_raw_graph_in(&ctx, raw, label, &map) }
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let mut findings = analyse_graph(graph, Format::Live)
        .map_err(|e| PyValueError::new_err(format!("{label}: {e}")))?;
    if map.dropped() > 0 {
        findings.notes.push(dropped_regions(map.dropped(), given));
    }
    Ok(Report {
        path: label.to_string(),
        findings,
    })
}
