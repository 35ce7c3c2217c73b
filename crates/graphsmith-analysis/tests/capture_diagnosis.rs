//! CPU snapshot tests of capture diagnoses: each builds a journal by hand (as a capture would
//! record it), diagnoses it with `graphsmith_analysis::diagnose` and checks the full text, so a worse
//! message is a failing test. No GPU needed.

use graphsmith_analysis::{
    diagnose, CaptureMode, CaptureSummary, Cause, CudaCode, Escape, Family, JournalEntry, Outcome,
    SourceLine,
};
use graphsmith_model::{Access, AccessMode};

/// The driver's codes these journals use, by name.
#[allow(non_snake_case)]
mod R {
    pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: u32 = 900;
    pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: u32 = 901;
    pub const CUDA_ERROR_STREAM_CAPTURE_UNJOINED: u32 = 904;
    pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: u32 = 908;
}

fn at(line: u32) -> SourceLine {
    SourceLine {
        file: "src/model.rs",
        line,
        column: 9,
    }
}

struct J(Vec<JournalEntry>);

impl J {
    fn op(
        mut self,
        op: &'static str,
        label: &str,
        stream: Option<&str>,
        line: u32,
        outcome: Outcome,
    ) -> J {
        self.0.push(JournalEntry {
            seq: self.0.len() as u64 + 1,
            op,
            label: label.into(),
            at: at(line),
            thread: "main".into(),
            stream: stream.map(String::from),
            ranges: vec!["capture:step".into(), "layer-3".into(), "attention".into()],
            accesses: Vec::new(),
            waits_for: None,
            outcome,
        });
        self
    }
    fn waits_for(mut self, stream: &str) -> J {
        self.0.last_mut().unwrap().waits_for = Some(stream.into());
        self
    }
    fn touches(mut self, buffer: u64, label: &str, mode: AccessMode) -> J {
        self.0.last_mut().unwrap().accesses.push(Access {
            buffer,
            label: label.into(),
            offset: 0,
            len: 4096,
            mode,
        });
        self
    }
}

fn failed(call: &'static str, code: u32) -> Outcome {
    Outcome::Failed {
        call,
        code: CudaCode(code),
    }
}

fn summary(end: Option<u32>) -> CaptureSummary {
    CaptureSummary {
        label: "step".into(),
        stream: "main".into(),
        mode: CaptureMode::Global,
        began_at: at(10),
        began_on: "main".into(),
        ended_at: Some(at(30)),
        ended_on: Some("main".into()),
        end_code: end.map(CudaCode),
    }
}

const M: Option<&str> = Some("main");

#[test]
fn sync_in_capture_names_the_first_offending_call_not_the_cascade() {
    let j = J(Vec::new())
        .op("Stream::launch", "qkv", M, 12, Outcome::Captured)
        .op(
            "Stream::synchronize",
            "main",
            M,
            14,
            failed(
                "cuStreamSynchronize",
                R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
            ),
        )
        .op(
            "Stream::launch",
            "softmax",
            M,
            16,
            failed("cuLaunchKernel", R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        )
        .op(
            "Stream::memset",
            "zero-out",
            M,
            17,
            failed("cuMemsetD32Async", R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        );
    let d = diagnose(
        summary(Some(R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)),
        &j.0,
        Vec::new(),
    );
    assert_eq!(d.family, Family::Invalidated);
    assert_eq!(d.code.map(|c| c.number()), Some(900));
    assert_eq!(d.offending().map(|e| e.at.line), Some(14));
    assert_eq!(d.cascade.len(), 2);
    assert_eq!(d.catalogue, Some("sync-in-capture"));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: capture invalidated by a forbidden call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
  first offending call: Stream::synchronize on stream 'main'
    at src/model.rs:14:9 on thread main
    in ranges capture:step > layer-3 > attention
    cuStreamSynchronize returned CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
  cascade: 2 later calls failed, the first with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901): Stream::launch 'softmax' on stream 'main' at src/model.rs:16:9
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main); cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901) at src/model.rs:30:9
  fix: Do not wait inside a capture: a graph cannot block the host. Move the synchronization (and anything that waits for a result, such as PyTorch's .item(), .cpu(), nonzero or a data-dependent shape) out of the captured region: after the capture ends, or after launching the graph. Inside the graph, order work with events (graphsmith: Stream::join).
  see: graphsmith explain sync-in-capture"#,
    );
}

/// Compares a diagnosis text with its snapshot, printing both in full on a mismatch.
fn snapshot(got: &str, want: &str) {
    assert!(
        got == want,
        "diagnosis text changed.\n--- got:\n{got}\n--- want:\n{want}\n"
    );
}

#[test]
fn unjoined_fork_names_the_stream_its_fork_and_its_last_work() {
    let j = J(Vec::new())
        .op("Stream::launch", "qkv", M, 12, Outcome::Captured)
        .op("Stream::join", "main", Some("side"), 13, Outcome::Captured)
        .waits_for("main")
        .op(
            "Stream::launch",
            "bias",
            Some("side"),
            14,
            Outcome::Captured,
        )
        .op("Stream::launch", "softmax", M, 15, Outcome::Captured)
        .op(
            "Stream::join",
            "main",
            Some("joined"),
            16,
            Outcome::Captured,
        )
        .waits_for("main")
        .op(
            "Stream::launch",
            "norm",
            Some("joined"),
            17,
            Outcome::Captured,
        )
        .op("Stream::join", "joined", M, 18, Outcome::Captured)
        .waits_for("joined");
    let d = diagnose(
        summary(Some(R::CUDA_ERROR_STREAM_CAPTURE_UNJOINED)),
        &j.0,
        Vec::new(),
    );
    assert_eq!(d.family, Family::MemoryDependency);
    assert_eq!(d.code.map(|c| c.number()), Some(904));
    let Cause::Unjoined(streams) = &d.cause else {
        panic!("{d}")
    };
    assert_eq!(streams.len(), 1, "only 'side' is unjoined: {d}");
    assert_eq!(d.offending().map(|e| e.at.line), Some(14));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: memory dependency violated, CUDA_ERROR_STREAM_CAPTURE_UNJOINED (904)
  stream 'side' never joined back
    forked by Stream::join 'main' on stream 'side'
      at src/model.rs:13:9 on thread main
      in ranges capture:step > layer-3 > attention
    last operation: Stream::launch 'bias' on stream 'side'
      at src/model.rs:14:9 on thread main
      in ranges capture:step > layer-3 > attention
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main); cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_UNJOINED (904) at src/model.rs:30:9
  fix: Before ending the capture, make the origin stream wait for every stream that joined it: record an event on the side stream and wait on it from the origin (graphsmith: origin.join(&side)).
  see: graphsmith explain unjoined-fork"#,
    );
}

#[test]
fn invalidation_by_a_raw_call_is_placed_between_two_journal_entries() {
    let j = J(Vec::new())
        .op("Stream::launch", "qkv", M, 12, Outcome::Captured)
        .op("Stream::launch", "proj", M, 13, Outcome::Captured)
        .op(
            "Stream::launch",
            "softmax",
            M,
            16,
            failed("cuLaunchKernel", R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        );
    let d = diagnose(
        summary(Some(R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)),
        &j.0,
        Vec::new(),
    );
    assert_eq!(d.family, Family::Invalidated);
    assert_eq!(d.catalogue, Some("invalidated-outside"));
    assert!(d.cascade.is_empty(), "{d}");
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: capture invalidated by a forbidden call, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)
  invalidated by a call graphsmith did not issue (raw CUDA or a library), made
  after the last operation still captured: Stream::launch 'proj' on stream 'main'
    at src/model.rs:13:9 on thread main
    in ranges capture:step > layer-3 > attention
  and before the first that saw it invalidated: Stream::launch 'softmax' on stream 'main'
    at src/model.rs:16:9 on thread main
    in ranges capture:step > layer-3 > attention
    cuLaunchKernel returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901)
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main); cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901) at src/model.rs:30:9
  fix: Look between the two lines for a raw CUDA or library call; wrap it in Stream::interop to have it journaled, then apply the fix of its own entry.
  see: graphsmith explain invalidated-outside"#,
    );
}

#[test]
fn ending_on_the_wrong_thread_names_both_threads() {
    let mut s = summary(Some(R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD));
    s.ended_on = Some("worker-1".into());
    let j = J(Vec::new()).op("Stream::launch", "qkv", M, 12, Outcome::Captured);
    let d = diagnose(s, &j.0, Vec::new());
    assert_eq!(d.catalogue, Some("end-wrong-thread"));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: capture invalidated by a forbidden call, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (908)
  begun on thread main at src/model.rs:10:9
  ended on thread worker-1 at src/model.rs:30:9
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main); cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (908) at src/model.rs:30:9
  fix: End the capture on the thread that began it (graphsmith's Stream::capture does), or capture in Relaxed mode when a capture must span threads.
  see: graphsmith explain end-wrong-thread"#,
    );
}

#[test]
fn a_refused_upload_is_a_memory_dependency_with_no_code() {
    let mut s = summary(None);
    s.mode = CaptureMode::ThreadLocal;
    let j = J(Vec::new())
        .op("Stream::launch", "qkv", M, 12, Outcome::Captured)
        .op(
            "Stream::upload",
            "weights",
            M,
            13,
            Outcome::Refused {
                reason: "a host-to-device copy from a borrowed slice cannot be part of a graph"
                    .into(),
            },
        );
    let d = diagnose(s, &j.0, Vec::new());
    assert_eq!((d.family, d.code), (Family::MemoryDependency, None));
    assert_eq!(d.catalogue, Some("host-rewritten"));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: memory dependency violated
  first offending call: Stream::upload 'weights' on stream 'main'
    at src/model.rs:13:9 on thread main
    in ranges capture:step > layer-3 > attention
    refused: a host-to-device copy from a borrowed slice cannot be part of a graph
  capture: begun on stream 'main' at src/model.rs:10:9 (ThreadLocal mode, thread main)
  fix: Upload before the capture, or copy from a device buffer inside the graph. If host data must flow at every replay, keep it in a host buffer that lives as long as the executable and change it only between launches.
  see: graphsmith explain host-rewritten"#,
    );
}

#[test]
fn a_strict_escape_names_the_captured_nodes_on_the_same_memory() {
    let j = J(Vec::new())
        .op("Stream::launch", "fill-x", M, 12, Outcome::Captured)
        .touches(0x7000_0000, "x", AccessMode::Write)
        .op(
            "Stream::launch",
            "scale-x",
            Some("side"),
            13,
            Outcome::Eager,
        )
        .touches(0x7000_0000, "x", AccessMode::ReadWrite)
        .touches(0x7100_0000, "y", AccessMode::Write);
    let escape = Escape {
        capture: "step".into(),
        op: j.0[1].clone(),
        touching: vec![j.0[0].clone()],
    };
    let d = diagnose(summary(None), &j.0, vec![escape]);
    assert_eq!((d.family, d.code), (Family::MemoryDependency, None));
    assert_eq!(d.catalogue, Some("other-stream-escape"));
    assert_eq!(d.offending().map(|e| e.at.line), Some(13));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: memory dependency violated
  escaping call: Stream::launch 'scale-x' on stream 'side'
    at src/model.rs:13:9 on thread main
    in ranges capture:step > layer-3 > attention
    ran eagerly, outside the capture: the graph will not replay it
    captured Stream::launch 'fill-x' on stream 'main' at src/model.rs:12:9 touches the same memory: x
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main)
  fix: Fork the other stream into the capture first (side.join(&origin)) and join it back before ending (origin.join(&side)), or issue the work on the capturing stream.
  see: graphsmith explain other-stream-escape"#,
    );
}

#[test]
fn a_failed_op_on_another_thread_keeps_its_thread() {
    let mut j = J(Vec::new())
        .op("Stream::launch", "qkv", M, 12, Outcome::Captured)
        .op(
            "Context::alloc",
            "scratch",
            None,
            40,
            failed("cuMemAlloc", R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
        );
    j.0[1].thread = "loader".into();
    j.0[1].ranges = vec!["prefetch".into()];
    let d = diagnose(
        summary(Some(R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)),
        &j.0,
        Vec::new(),
    );
    assert_eq!(d.catalogue, Some("alloc-in-capture"));
    snapshot(
        &d.to_string(),
        r#"capture 'step' failed: capture invalidated by a forbidden call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
  first offending call: Context::alloc 'scratch'
    at src/model.rs:40:9 on thread loader
    in ranges prefetch
    cuMemAlloc returned CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900)
  capture: begun on stream 'main' at src/model.rs:10:9 (Global mode, thread main); cuStreamEndCapture returned CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901) at src/model.rs:30:9
  fix: Allocate before the capture (each replay reuses the buffers), or allocate inside the graph with stream-ordered allocation (cuMemAllocAsync becomes a memory node), or, if the allocation must happen here, capture in Relaxed mode (it then runs once, at capture time).
  see: graphsmith explain alloc-in-capture"#,
    );
}
