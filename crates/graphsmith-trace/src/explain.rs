//! Names and meanings of CUDA result codes, and the hook to graphsmith's failure catalogue.
//!
//! The tracer records the driver's own name and text for each failing code (`cuGetErrorName`,
//! `cuGetErrorString`) in the process, so the report never guesses a meaning. What it adds is the
//! catalogue entry: which failure mode this is and how to fix it. The catalogue lives in the
//! runtime crate (`graphsmith::catalogue`, printed by `graphsmith explain`); the report takes it
//! through the [`Catalogue`] trait so that this crate does not depend on the runtime, and
//! [`Builtin`] covers the capture codes until the CLI plugs the full catalogue in.

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

/// The capture codes, with the ids of graphsmith's catalogue.
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtin;

fn entry(id: &str, title: &str, fix: &str) -> Option<Explained> {
    Some(Explained {
        id: id.to_string(),
        title: title.to_string(),
        fix: fix.to_string(),
    })
}

fn is_sync(call: &str) -> bool {
    ["Synchronize", "StreamQuery", "DeviceSynchronize"]
        .iter()
        .any(|s| call.contains(s))
        && !call.contains("Event")
}

fn is_alloc(call: &str) -> bool {
    let c = call.to_ascii_lowercase();
    (c.contains("malloc") || c.contains("memalloc") || c.contains("free")) && !c.contains("async")
}

impl Catalogue for Builtin {
    fn lookup(&self, call: &str, code: u32) -> Option<Explained> {
        match code {
            900 if call.contains("BeginCapture") => entry(
                "begin-on-legacy",
                "Beginning a capture on the legacy (NULL) stream",
                "Capture on a stream you created (non-blocking).",
            ),
            900 if is_alloc(call) => entry(
                "alloc-in-capture",
                "cudaMalloc/cuMemAlloc (or free) in a global or thread-local capture",
                "Allocate before the capture, use stream-ordered allocation (cudaMallocAsync becomes a memory node), or capture in relaxed mode.",
            ),
            900 if is_sync(call) => entry(
                "sync-in-capture",
                "Synchronizing while a capture runs",
                "Do not wait inside a capture: a graph cannot block the host. Move the synchronization (and any .item(), .cpu(), nonzero or data-dependent shape) out of the captured region.",
            ),
            900 => entry(
                "invalidated-outside",
                "A call that is not allowed while a stream captures",
                "Move the call out of the captured region, or before begin capture.",
            ),
            901 => entry(
                "invalidated-outside",
                "The capture had already been invalidated by an earlier call",
                "Look at the first failing call of this capture: it invalidated the capture.",
            ),
            902 => entry(
                "merge",
                "Waiting on an event recorded in another capture",
                "Capture both streams into one graph (fork the second from the first), or order the two graphs' launches.",
            ),
            903 => entry(
                "unmatched-end",
                "Ending a capture on a stream that did not begin it",
                "End the capture on the stream that began it.",
            ),
            904 => entry(
                "unjoined-fork",
                "A forked stream never joined back",
                "Before ending the capture, make the origin stream wait for every stream that joined it (record an event on the side stream, wait on it from the origin).",
            ),
            905 => entry(
                "isolation",
                "Waiting on work outside the capture",
                "Finish the uncaptured work before begin capture, or make it part of the capture.",
            ),
            906 => entry(
                "legacy-implicit",
                "Legacy-stream work while a blocking stream captures",
                "Capture on non-blocking streams and issue nothing on the legacy stream while capturing.",
            ),
            907 => entry(
                "captured-event-wait",
                "Querying or synchronizing an event recorded in the capture",
                "A captured event completes only when the graph runs: wait on it with cudaStreamWaitEvent inside the capture, query it after launching the graph.",
            ),
            908 => entry(
                "end-wrong-thread",
                "Ending a capture from another thread",
                "End the capture on the thread that began it, or capture in relaxed mode when a capture must span threads.",
            ),
            _ => None,
        }
    }
}

/// Driver and runtime names of the codes a capture report meets most, for a code the tracer
/// could not name in the process (a runtime-only failure).
pub fn code_names(code: u32) -> Option<(&'static str, &'static str)> {
    Some(match code {
        0 => ("CUDA_SUCCESS", "cudaSuccess"),
        1 => ("CUDA_ERROR_INVALID_VALUE", "cudaErrorInvalidValue"),
        2 => ("CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation"),
        400 => (
            "CUDA_ERROR_INVALID_HANDLE",
            "cudaErrorInvalidResourceHandle",
        ),
        401 => ("CUDA_ERROR_ILLEGAL_STATE", "cudaErrorIllegalState"),
        600 => ("CUDA_ERROR_NOT_READY", "cudaErrorNotReady"),
        700 => ("CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress"),
        900 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
            "cudaErrorStreamCaptureUnsupported",
        ),
        901 => (
            "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            "cudaErrorStreamCaptureInvalidated",
        ),
        902 => (
            "CUDA_ERROR_STREAM_CAPTURE_MERGE",
            "cudaErrorStreamCaptureMerge",
        ),
        903 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
            "cudaErrorStreamCaptureUnmatched",
        ),
        904 => (
            "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
            "cudaErrorStreamCaptureUnjoined",
        ),
        905 => (
            "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
            "cudaErrorStreamCaptureIsolation",
        ),
        906 => (
            "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
            "cudaErrorStreamCaptureImplicit",
        ),
        907 => ("CUDA_ERROR_CAPTURED_EVENT", "cudaErrorCapturedEvent"),
        908 => (
            "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
            "cudaErrorStreamCaptureWrongThread",
        ),
        _ => return None,
    })
}

/// Codes that mean "not allowed while capturing" (and 401, what a second end gets).
pub fn is_capture_code(code: u32) -> bool {
    (900..=908).contains(&code)
}

/// `900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` or the driver's own name for the code.
pub fn code_label(code: u32, recorded: Option<&str>) -> String {
    match (recorded, code_names(code)) {
        (Some(name), _) => format!("{code} {name}"),
        (None, Some((driver, _))) => format!("{code} {driver}"),
        (None, None) => format!("{code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_and_alloc_are_told_apart() {
        let b = Builtin;
        assert_eq!(
            b.lookup("cudaStreamSynchronize", 900).unwrap().id,
            "sync-in-capture"
        );
        assert_eq!(b.lookup("cudaMalloc", 900).unwrap().id, "alloc-in-capture");
        assert_eq!(
            b.lookup("cuMemAlloc_v2", 900).unwrap().id,
            "alloc-in-capture"
        );
        assert_eq!(
            b.lookup("cudaEventSynchronize", 907).unwrap().id,
            "captured-event-wait"
        );
        assert_eq!(
            b.lookup("cudaStreamBeginCapture", 900).unwrap().id,
            "begin-on-legacy"
        );
        assert!(b.lookup("cudaMemcpy", 1).is_none());
    }

    #[test]
    fn labels_prefer_the_recorded_name() {
        assert_eq!(
            code_label(900, None),
            "900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
        );
        assert_eq!(code_label(42, Some("CUDA_ERROR_X")), "42 CUDA_ERROR_X");
        assert_eq!(code_label(42, None), "42");
    }
}
