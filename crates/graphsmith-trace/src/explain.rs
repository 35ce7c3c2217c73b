//! The hook from a failing call to graphsmith's failure catalogue, and code labels.
//!
//! The tracer records the driver's own name for each failing code (`cuGetErrorName`) in the
//! process. What the report adds is the catalogue entry: which failure mode this is and how to
//! fix it. There is one catalogue, `graphsmith_analysis::catalogue` (printed by
//! `graphsmith explain`); [`Builtin`] looks failing calls up in it. The [`Catalogue`] trait lets
//! a caller plug in another lookup (tests, a library user).

use graphsmith_analysis::catalogue::classify_call;
use graphsmith_analysis::CudaCode;

/// A failure mode a failing call matches.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Explained {
    /// The catalogue id (`sync-in-capture`), for `graphsmith explain <id>`.
    pub id: String,
    pub title: String,
    pub fix: String,
}

/// Looks a failing call up in a failure catalogue.
pub trait Catalogue {
    /// `call` is the runtime or driver function name (`cudaStreamSynchronize`), `code` the
    /// result it returned.
    fn lookup(&self, call: &str, code: u32) -> Option<Explained>;
}

/// graphsmith's failure catalogue (`graphsmith_analysis::catalogue`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtin;

impl Catalogue for Builtin {
    fn lookup(&self, call: &str, code: u32) -> Option<Explained> {
        classify_call(call, code).map(|e| Explained {
            id: e.id.to_string(),
            title: e.title.to_string(),
            fix: e.fix.to_string(),
        })
    }
}

/// Codes that mean "not allowed while capturing" (900 to 908).
pub fn is_capture_code(code: u32) -> bool {
    CudaCode(code).is_capture_code()
}

/// `900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`: the name the process recorded, else the name
/// CUDA 13.0 gives the code, else the number alone.
pub fn code_label(code: u32, recorded: Option<&str>) -> String {
    match (recorded, CudaCode(code).description()) {
        (Some(name), _) => format!("{code} {name}"),
        (None, Some(_)) => format!("{code} {}", CudaCode(code).name()),
        (None, None) => format!("{code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_calls_get_the_catalogue_entry() {
        let b = Builtin;
        let found = b.lookup("cudaStreamSynchronize", 900).unwrap();
        let entry = graphsmith_analysis::catalogue::entry("sync-in-capture").unwrap();
        assert_eq!(
            (found.id.as_str(), found.title.as_str(), found.fix.as_str()),
            (entry.id, entry.title, entry.fix)
        );
        assert_eq!(b.lookup("cudaMalloc", 900).unwrap().id, "alloc-in-capture");
        assert!(b.lookup("cudaMemcpy", 1).is_none());
    }

    #[test]
    fn labels_prefer_the_recorded_name() {
        assert_eq!(
            code_label(900, None),
            "900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
        );
        assert_eq!(code_label(2, None), "2 CUDA_ERROR_OUT_OF_MEMORY");
        assert_eq!(code_label(42, Some("CUDA_ERROR_X")), "42 CUDA_ERROR_X");
        assert_eq!(code_label(42, None), "42");
    }
}
