//! The catalogue's entries. Codes and behaviour in `seen` were measured on an H200 (driver
//! 580.159, CUDA 13.0) with `examples/capture_codes.rs`; each entry's test checks graphsmith's
//! diagnosis of it on the GPU.

use super::{Code, Entry, Family};

const fn code(number: u32, driver: &'static str, runtime: &'static str) -> Code {
    Code {
        number,
        driver,
        runtime,
    }
}

pub const INVALID_VALUE: Code = code(1, "CUDA_ERROR_INVALID_VALUE", "cudaErrorInvalidValue");
pub const ILLEGAL_STATE: Code = code(401, "CUDA_ERROR_ILLEGAL_STATE", "cudaErrorIllegalState");
pub const UNSUPPORTED: Code = code(
    900,
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    "cudaErrorStreamCaptureUnsupported",
);
pub const INVALIDATED: Code = code(
    901,
    "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    "cudaErrorStreamCaptureInvalidated",
);
pub const MERGE: Code = code(
    902,
    "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    "cudaErrorStreamCaptureMerge",
);
pub const UNMATCHED: Code = code(
    903,
    "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
    "cudaErrorStreamCaptureUnmatched",
);
pub const UNJOINED: Code = code(
    904,
    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    "cudaErrorStreamCaptureUnjoined",
);
pub const ISOLATION: Code = code(
    905,
    "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
    "cudaErrorStreamCaptureIsolation",
);
pub const IMPLICIT: Code = code(
    906,
    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    "cudaErrorStreamCaptureImplicit",
);
pub const CAPTURED_EVENT: Code = code(907, "CUDA_ERROR_CAPTURED_EVENT", "cudaErrorCapturedEvent");
pub const WRONG_THREAD: Code = code(
    908,
    "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    "cudaErrorStreamCaptureWrongThread",
);

/// Every entry, in the order docs/failures.md lists them.
pub static ENTRIES: &[Entry] = &[
    Entry {
        id: "sync-in-capture",
        title: "Synchronizing while a capture runs",
        family: Some(Family::Invalidated),
        codes: &[UNSUPPORTED, INVALIDATED],
        ops: &["Stream::synchronize", "Context::synchronize"],
        trigger: "cudaStreamSynchronize/cuStreamSynchronize on the capturing stream (likewise cuStreamQuery and cuCtxSynchronize) while the capture runs.",
        seen: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) at the call (cuStreamSynchronize, cuStreamQuery and cuCtxSynchronize alike). The capture is invalidated: every later call on its streams returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901), far from the cause, and so does cuStreamEndCapture, with no graph. The stream can capture again afterwards.",
        reports: "The Stream::synchronize call as the first offending operation, with its line, thread, stream and range stack and code 900; the later 901s as one cascade line; end's 901.",
        fix: "Do not wait inside a capture: a graph cannot block the host. Move the synchronization (and anything that waits for a result, such as PyTorch's .item(), .cpu(), nonzero or a data-dependent shape) out of the captured region: after the capture ends, or after launching the graph. Inside the graph, order work with events (graphsmith: Stream::join).",
        test: "gpu_capture_failures::sync_in_capture",
    },
    Entry {
        id: "alloc-in-capture",
        title: "cuMemAlloc/cudaMalloc (or cuMemFree) in a global or thread-local capture",
        family: Some(Family::Invalidated),
        codes: &[UNSUPPORTED, INVALIDATED],
        ops: &["Context::alloc"],
        trigger: "Allocating or freeing device memory with cuMemAlloc/cudaMalloc/cuMemFree while a capture in global mode runs (from any thread), or in thread-local mode on the capturing thread.",
        seen: "900 at cuMemAlloc (and at cuMemFree) in global and thread-local mode. In global mode an allocation on another thread also fails with 900 and invalidates this capture. End returns 901.",
        reports: "Context::alloc as the first offending operation. A failed operation on no captured stream is put in the journal of every running capture it invalidated, so an allocation on another thread is named too, with that thread.",
        fix: "Allocate before the capture (each replay reuses the buffers), or allocate inside the graph with stream-ordered allocation (cuMemAllocAsync becomes a memory node), or, if the allocation must happen here, capture in Relaxed mode (it then runs once, at capture time).",
        test: "gpu_capture_failures::alloc_in_global_capture",
    },
    Entry {
        id: "alloc-in-relaxed-capture",
        title: "cuMemAlloc/cudaMalloc in a relaxed capture (allowed)",
        family: None,
        codes: &[],
        ops: &[],
        trigger: "Allocating device memory while a capture in Relaxed mode runs (or after cuThreadExchangeStreamCaptureMode switched the thread to relaxed).",
        seen: "CUDA_SUCCESS; the capture stays active and the graph gets no node for it: the allocation happened once, eagerly. cublasCreate in a relaxed capture succeeds the same way.",
        reports: "Nothing: it is allowed. The journal records the operations around it as usual.",
        fix: "None needed. The allocation is not replayed; it must outlive every executable that uses it (a DeviceBuffer does: graphs keep it alive).",
        test: "gpu_capture_failures::alloc_in_relaxed_capture_is_allowed",
    },
    Entry {
        id: "captured-event-wait",
        title: "Querying or synchronizing an event recorded in the capture",
        family: Some(Family::Invalidated),
        codes: &[CAPTURED_EVENT, INVALIDATED],
        ops: &["Event::query", "Event::synchronize"],
        trigger: "cudaEventQuery/cuEventQuery or cudaEventSynchronize/cuEventSynchronize on an event last recorded inside the running capture.",
        seen: "CUDA_ERROR_CAPTURED_EVENT (907) at cuEventQuery and at cuEventSynchronize, in every mode (relaxed too); the capture is invalidated and end returns 901.",
        reports: "Event::query or Event::synchronize as the first offending operation, code 907.",
        fix: "A captured event completes only when the graph runs: inside the capture, wait on it with cudaStreamWaitEvent (graphsmith: Stream::wait); query or synchronize it after launching the graph.",
        test: "gpu_capture_failures::captured_event_query, gpu_capture_failures::captured_event_synchronize",
    },
    Entry {
        id: "unjoined-fork",
        title: "A forked stream never joined back",
        family: Some(Family::MemoryDependency),
        codes: &[UNJOINED],
        ops: &[],
        trigger: "A second stream joins the capture (it waits on an event recorded in it) and does work, but the origin stream never waits for it before cuStreamEndCapture.",
        seen: "Every call succeeds; cuStreamEndCapture returns CUDA_ERROR_STREAM_CAPTURE_UNJOINED (904) and no graph. Afterwards the forked stream is out of capture and usable.",
        reports: "Each forked stream that never joined back, by label, with the operation that forked it and its last operation (lines and ranges).",
        fix: "Before ending the capture, make the origin stream wait for every stream that joined it: record an event on the side stream and wait on it from the origin (graphsmith: origin.join(&side)).",
        test: "gpu_capture_failures::unjoined_fork",
    },
    Entry {
        id: "unmatched-end",
        title: "Ending a capture on a stream that did not begin it",
        family: Some(Family::Invalidated),
        codes: &[UNMATCHED, INVALIDATED],
        ops: &[],
        trigger: "cuStreamEndCapture on a stream that was forked into a capture rather than the stream that began it.",
        seen: "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED (903) and no graph; the capture is invalidated and the origin's cuStreamEndCapture then returns 901.",
        reports: "graphsmith refuses Stream::end_capture on a stream that did not begin a graphsmith capture (NotCapturing) before the driver sees it, so the capture stays valid. A raw cuStreamEndCapture on the forked stream shows up as an invalidation outside graphsmith, placed between two journal entries.",
        fix: "End the capture on the stream that began it.",
        test: "gpu_capture_failures::unmatched_end",
    },
    Entry {
        id: "sync-copy-escape",
        title: "A synchronous or other-stream copy while a non-blocking stream captures",
        family: Some(Family::MemoryDependency),
        codes: &[],
        ops: &["Stream::copy", "Stream::copy_from_host", "Stream::copy_to_host"],
        trigger: "A synchronous cudaMemcpy/cuMemcpyDtoD/cuMemcpyHtoD (legacy stream), or a copy on any stream outside the capture, while a non-blocking stream captures.",
        seen: "No error at all: the copies return CUDA_SUCCESS, run at once, and the graph does not contain them (1 node captured out of 3 calls).",
        reports: "A copy issued through graphsmith on a stream that is not part of the capture (Context::legacy_stream or any other) is a silent escape: a warning in the capture report (an error at the call in strict mode) naming the copy and the captured nodes that touch the same memory. Raw cudaMemcpy calls are invisible to graphsmith.",
        fix: "Issue the copy on the capturing stream so it becomes a memcpy node; move host data in before the capture.",
        test: "gpu_capture_failures::sync_copy_escape",
    },
    Entry {
        id: "other-stream-escape",
        title: "A kernel launched on another stream while a stream captures",
        family: Some(Family::MemoryDependency),
        codes: &[],
        ops: &["Stream::launch", "Stream::memset"],
        trigger: "A launch (or memset) on a stream that is not part of the running capture, from the capturing thread, while a non-blocking stream captures.",
        seen: "No error: the work runs eagerly at once and the graph misses it (1 node captured out of 2 launches).",
        reports: "A silent escape: a warning in the capture report, or an error at the call in strict mode (CaptureOptions::strict), naming the escaping launch, its line and ranges, and the captured nodes touching the same memory. Eager work from other threads is reported only when it touches memory the capture touches.",
        fix: "Fork the other stream into the capture first (side.join(&origin)) and join it back before ending (origin.join(&side)), or issue the work on the capturing stream.",
        test: "gpu_capture_failures::other_stream_escape, gpu_capture_failures::other_stream_escape_strict",
    },
    Entry {
        id: "legacy-implicit",
        title: "Legacy-stream work while a blocking stream captures",
        family: Some(Family::Invalidated),
        codes: &[IMPLICIT, INVALIDATED],
        ops: &[
            "Stream::launch",
            "Stream::memset",
            "Stream::copy",
            "Stream::copy_from_host",
            "Stream::copy_to_host",
        ],
        trigger: "Work on the legacy (NULL) stream while a blocking stream (created without CU_STREAM_NON_BLOCKING) captures: the legacy stream synchronizes implicitly with every blocking stream.",
        seen: "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (906) at the legacy-stream call, in every mode (relaxed too); the capture is invalidated; later calls and end return 901. With a non-blocking capturing stream the same call succeeds and escapes instead (sync-copy-escape).",
        reports: "The legacy-stream operation as the first offending operation (a failed operation on a stream outside the capture goes to each capture it invalidated), code 906.",
        fix: "Capture on non-blocking streams (graphsmith's Context::stream makes them) and issue nothing on the legacy stream while capturing.",
        test: "gpu_capture_failures::legacy_implicit",
    },
    Entry {
        id: "merge",
        title: "Waiting on an event recorded in another capture",
        family: Some(Family::MemoryDependency),
        codes: &[MERGE, INVALIDATED],
        ops: &["Stream::wait", "Stream::join"],
        trigger: "A stream that captures graph A waits on an event last recorded in a different, concurrently running capture B.",
        seen: "CUDA_ERROR_STREAM_CAPTURE_MERGE (902) at cuStreamWaitEvent; both captures are invalidated and each end returns 901.",
        reports: "The Stream::wait (or join) as the first offending operation, code 902.",
        fix: "Two captures cannot depend on each other. Capture both streams into one graph (fork the second from the first), or connect two graphs with event record and wait nodes, or order the launches of their executables.",
        test: "gpu_capture_failures::merge_two_captures",
    },
    Entry {
        id: "isolation",
        title: "Waiting on work outside the capture",
        family: Some(Family::MemoryDependency),
        codes: &[ISOLATION, INVALIDATED],
        ops: &["Stream::wait", "Stream::join"],
        trigger: "The capturing stream waits on an event recorded outside any capture (e.g. joins a stream that never joined the capture).",
        seen: "CUDA_ERROR_STREAM_CAPTURE_ISOLATION (905) at cuStreamWaitEvent; the capture is invalidated; the next call and end return 901.",
        reports: "The Stream::wait or Stream::join as the first offending operation, code 905.",
        fix: "Finish (or wait for) the uncaptured work before begin_capture, or make it part of the capture; a replay would not include it. For a dependency between graphs use an event wait node (Graph::event_wait).",
        test: "gpu_capture_failures::isolation_uncaptured_wait",
    },
    Entry {
        id: "end-wrong-thread",
        title: "Ending a capture from another thread",
        family: Some(Family::Invalidated),
        codes: &[WRONG_THREAD, ILLEGAL_STATE],
        ops: &["Stream::end_capture"],
        trigger: "cuStreamEndCapture from a thread other than the one that began a global or thread-local capture.",
        seen: "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (908) and no graph, and the capture is over: the stream no longer captures, and ending it again on the right thread returns CUDA_ERROR_ILLEGAL_STATE (401). In relaxed mode any thread may end the capture.",
        reports: "The thread that began the capture and the thread that ended it, with both lines.",
        fix: "End the capture on the thread that began it (graphsmith's Stream::capture does), or capture in Relaxed mode when a capture must span threads.",
        test: "gpu_capture_failures::end_wrong_thread",
    },
    Entry {
        id: "begin-on-legacy",
        title: "Beginning a capture on the legacy (NULL) stream",
        family: Some(Family::Invalidated),
        codes: &[UNSUPPORTED],
        ops: &["Stream::begin_capture"],
        trigger: "cudaStreamBeginCapture/cuStreamBeginCapture on cudaStreamLegacy (CU_STREAM_LEGACY) or the NULL stream.",
        seen: "900 at cuStreamBeginCapture; nothing was begun.",
        reports: "Stream::begin_capture on Context::legacy_stream() fails with a diagnosis naming the begin call, code 900.",
        fix: "Capture on a stream you created, not the legacy (NULL) stream (graphsmith: Context::stream).",
        test: "gpu_capture_failures::begin_on_legacy",
    },
    Entry {
        id: "library-handle-in-capture",
        title: "Creating a library handle inside a capture",
        family: Some(Family::Invalidated),
        codes: &[UNSUPPORTED, INVALIDATED],
        ops: &["Context::interop", "Stream::interop"],
        trigger: "cublasCreate (likewise cuDNN handles, cuFFT plans) while a global-mode capture runs: the library allocates its workspace with cudaMalloc.",
        seen: "cublasCreate_v2 returns CUBLAS_STATUS_NOT_INITIALIZED (1): its internal cudaMalloc was refused (900, like cuMemAlloc; the code stays inside cuBLAS, whose runtime is its own: the process's cudaGetLastError reports nothing). The capture is invalidated and end returns 901. In a relaxed capture it succeeds.",
        reports: "The library call as the first offending operation when it is wrapped in Context::interop or Stream::interop, with the code the wrapper maps the library's status to (the test maps CUBLAS_STATUS_NOT_INITIALIZED to CUDA_ERROR_NOT_INITIALIZED, 3); unwrapped, the invalidation is placed between the last operation still captured and the first that saw 901.",
        fix: "Create library handles, plans and workspaces before capturing and reuse them in every capture.",
        test: "gpu_capture_failures::library_handle_in_capture",
    },
    Entry {
        id: "invalidated-outside",
        title: "Capture invalidated by a call graphsmith did not issue",
        family: Some(Family::Invalidated),
        codes: &[INVALIDATED],
        ops: &[],
        trigger: "Any forbidden raw driver or runtime call, or library call, made directly rather than through graphsmith (e.g. a raw cuStreamSynchronize).",
        seen: "The raw call gets its own code (900, 906, 907, ...), which graphsmith never sees; graphsmith's later calls on the capture's streams and cuStreamEndCapture return 901.",
        reports: "The last operation that was still captured and the first that saw 901, each with line and ranges: the culprit was called between them.",
        fix: "Look between the two lines for a raw CUDA or library call; wrap it in Stream::interop to have it journaled, then apply the fix of its own entry.",
        test: "gpu_capture_failures::invalidated_outside",
    },
    Entry {
        id: "host-rewritten",
        title: "Host memory rewritten under a captured host-to-device copy",
        family: Some(Family::MemoryDependency),
        codes: &[],
        ops: &["Stream::upload", "Stream::download"],
        trigger: "cudaMemcpyAsync/cuMemcpyHtoDAsync from host memory inside a capture, then the host memory changes (or is freed) before a replay.",
        seen: "No error: the copy becomes a memcpy node that reads the host pointer at every launch. After the host data changed from 1 to 2, the replay copied 2.",
        reports: "Stream::upload and Stream::download inside a capture are refused before the driver sees them (NotAllowedDuringCapture): the graph would keep a pointer into a borrowed slice. Through Stream::capture the refusal becomes a diagnosis with the line and ranges.",
        fix: "Upload before the capture, or copy from a device buffer inside the graph. If host data must flow at every replay, keep it in a host buffer that lives as long as the executable and change it only between launches.",
        test: "gpu_capture_failures::host_rewritten_upload_refused",
    },
    Entry {
        id: "freed-after-capture",
        title: "A buffer freed after capture",
        family: Some(Family::StaleParameters),
        codes: &[INVALID_VALUE],
        ops: &[],
        trigger: "cuMemFree/cudaFree of memory a captured graph uses, before instantiating or launching it.",
        seen: "Raw: cuMemFree succeeds; cuGraphInstantiate then returns CUDA_ERROR_INVALID_VALUE (1). An executable made before the free would run on freed memory.",
        reports: "Prevented by ownership: a captured graph and every executable made from it keep each buffer they reference alive (an Arc), so dropping the DeviceBuffer frees nothing while they live.",
        fix: "None needed with graphsmith buffers. With raw pointers, free only after destroying every graph and executable that uses them.",
        test: "gpu_capture_failures::freed_after_capture_is_prevented",
    },
];

/// The top of docs/failures.md.
pub const DOC_HEADER: &str = "# Capture failure catalogue

<!-- Generated from crates/graphsmith-analysis/src/catalogue/entries.rs by catalogue::markdown(); a CPU
test fails when the two differ. Regenerate with
GRAPHSMITH_BLESS=1 cargo test -p graphsmith --test catalogue_doc. -->

Every capture failure mode graphsmith knows, each with what the driver really does. The codes
and behaviour under \"Seen on the H200\" were measured on an NVIDIA H200, driver 580.159, CUDA
13.0, with raw driver calls (`cargo run --release -p graphsmith --example capture_codes`). Each
entry names the GPU test that reproduces it through graphsmith and checks the diagnosis: family,
CUDA code, the offending call's line and its range stack; on that H200 all of them pass
(`crates/graphsmith/tests/gpu_capture_failures.rs`).

CUDA-graph tutorials commonly describe three families of capture failures, quoting log lines
(\"invalid context\", \"kernel launch mismatch\", \"memory dependency violation\") that no
CUDA version prints. The claim found in them is that failures fall into these families; here
they map onto real codes:

- **capture invalidated by a forbidden call** (\"invalid context\"): 900, 903, 906, 907, 908,
  then 901 everywhere after;
- **parameters or pointers changed after capture** (\"kernel launch mismatch\");
- **memory dependency violated** (\"memory dependency violation\"): 902, 904, 905, and work that
  silently runs outside the graph (no code at all).

`graphsmith explain <code|name|id>` prints the entries for a code (`900`,
`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, `cudaErrorStreamCaptureUnsupported`) without a GPU.
A failed capture's error (`ErrorKind::CaptureFailed`) carries a `Diagnosis` that points to its
entry.
";
