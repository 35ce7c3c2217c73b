//! GPU tests of the failure catalogue (docs/failures.md): each reproduces one failure mode
//! through graphsmith and checks the diagnosis: family, CUDA code, the offending call's line and
//! its range stack. Each prints the diagnosis. After each failure the stream captures again.

mod common;

use std::ffi::c_void;

use common::Gpu;
use graphsmith::model::AccessMode;
use graphsmith::sys::{self, CUresult};
use graphsmith::{
    args, range, CaptureMode, CaptureOptions, Cause, Diagnosis, Error, ErrorKind, Family,
    LaunchConfig, Outcome, Replay,
};

const N: usize = 1024;

fn cfg() -> LaunchConfig {
    LaunchConfig::for_elements(N as u32)
}

/// The diagnosis of a failed capture (printed).
fn diagnosis(err: &Error) -> &Diagnosis {
    println!("{err}\n");
    match &err.kind {
        ErrorKind::CaptureFailed(d) => d,
        other => panic!("expected CaptureFailed, got {other:?}: {err}"),
    }
}

/// Family, code, and the offending operation's name, line (in `before..before + 8`) and ranges.
fn check(d: &Diagnosis, family: Family, code: Option<u32>, op: &str, before: u32, ranges: &[&str]) {
    assert_eq!(d.family, family, "{d}");
    assert_eq!(d.code.map(|c| c.number()), code, "{d}");
    let e = d
        .offending()
        .unwrap_or_else(|| panic!("no offending operation: {d}"));
    assert_eq!(e.op, op, "{d}");
    assert!(
        (before..before + 8).contains(&e.at.line),
        "{d}\nline {} is not the call after line {before}",
        e.at.line
    );
    assert!(e.at.file.ends_with("gpu_capture_failures.rs"), "{d}");
    assert_eq!(e.ranges, ranges, "{d}");
}

/// The stream captures and replays again after a failure.
fn captures_again(gpu: &Gpu, stream: &graphsmith::Stream) {
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("again-x", &[1.0; N]);
    let (graph, ()) = stream
        .capture(CaptureMode::Global, "again", |s| {
            s.launch("add-again", &add, cfg(), args![&mut x, 2.0f32, N as u32])
        })
        .expect("the stream captures again");
    assert_eq!(graph.model().len(), 1);
    let mut exec = graph.instantiate().unwrap();
    exec.launch(stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(gpu.read(&x), vec![3.0; N]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sync_in_capture() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    let layer = range("layer-3");
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let before = line!();
    let at_call = {
        let _attention = range("attention");
        gpu.stream.synchronize().unwrap_err()
    };
    assert_eq!(
        at_call.cuda_code().map(|c| c.number()),
        Some(900),
        "{at_call}"
    );
    assert!(at_call.fix().is_some(), "{at_call}");
    let cascade = gpu
        .stream
        .launch("add-2", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap_err();
    assert_eq!(cascade.cuda_code().map(|c| c.number()), Some(901));
    drop(layer);
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(900),
        "Stream::synchronize",
        before,
        &["layer-3", "attention"],
    );
    assert_eq!(d.catalogue, Some("sync-in-capture"));
    assert_eq!(d.cascade.len(), 1, "{d}");
    assert_eq!(d.cascade[0].label, "add-2");
    assert_eq!(d.capture.end_code.map(|c| c.number()), Some(901));
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn alloc_in_global_capture() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut before = 0;
    let err = gpu
        .stream
        .capture(CaptureMode::Global, "step", |s| {
            s.launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])?;
            let _scratch = range("scratch");
            before = line!();
            let e = s.context().alloc::<f32>("tmp", N).unwrap_err();
            assert_eq!(e.cuda_code().map(|c| c.number()), Some(900), "{e}");
            Err::<(), _>(e)
        })
        .unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(900),
        "Context::alloc",
        before,
        &["capture:step", "scratch"],
    );
    assert_eq!(d.offending().unwrap().label, "tmp");
    assert_eq!(d.catalogue, Some("alloc-in-capture"));
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn alloc_in_relaxed_capture_is_allowed() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    gpu.stream
        .begin_capture(CaptureMode::Relaxed, "relaxed")
        .unwrap();
    let mut y = gpu
        .ctx
        .alloc::<f32>("made-in-capture", N)
        .expect("allowed in relaxed mode");
    gpu.stream
        .launch("add", &add, cfg(), args![&mut y, 1.0f32, N as u32])
        .unwrap();
    let (graph, report) = gpu.stream.end_capture_report().unwrap();
    assert_eq!(graph.model().len(), 1, "the allocation is not a node");
    assert!(report.escapes.is_empty());
    assert_eq!(report.journal.len(), 1, "{:?}", report.journal);
    let entry = graphsmith::catalogue::entry("alloc-in-relaxed-capture").unwrap();
    assert_eq!(entry.family, None);
    gpu.stream.upload(&mut y, &[1.0; N]).unwrap();
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_eq!(gpu.read(&y), vec![2.0; N]);
}

fn captured_event_case(synchronize: bool) {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let done = gpu.ctx.event("done", false).unwrap();
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    gpu.stream.record(&done).unwrap();
    let poll = range("poll");
    let before = line!();
    let at_call = if synchronize {
        done.synchronize().unwrap_err()
    } else {
        done.query().unwrap_err()
    };
    drop(poll);
    assert_eq!(
        at_call.cuda_code().map(|c| c.number()),
        Some(907),
        "{at_call}"
    );
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    let op = if synchronize {
        "Event::synchronize"
    } else {
        "Event::query"
    };
    check(d, Family::Invalidated, Some(907), op, before, &["poll"]);
    assert_eq!(d.catalogue, Some("captured-event-wait"));
    assert_eq!(d.offending().unwrap().label, "done");
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_event_query() {
    captured_event_case(false);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_event_synchronize() {
    captured_event_case(true);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn unjoined_fork() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "fork")
        .unwrap();
    gpu.stream
        .launch("add-x", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let branch = range("branch");
    let before = line!();
    side.join(&gpu.stream).unwrap();
    side.launch("add-y", &add, cfg(), args![&mut y, 1.0f32, N as u32])
        .unwrap();
    drop(branch);
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::MemoryDependency,
        Some(904),
        "Stream::launch",
        before,
        &["branch"],
    );
    let Cause::Unjoined(streams) = &d.cause else {
        panic!("{d}")
    };
    assert_eq!(streams.len(), 1, "{d}");
    assert_eq!(streams[0].stream, "side");
    let fork = streams[0].forked.as_ref().unwrap();
    assert_eq!((fork.op, fork.at.line), ("Stream::join", before + 1), "{d}");
    // Both streams are usable afterwards.
    side.synchronize().unwrap();
    captures_again(&gpu, &side);
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn unmatched_end() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    gpu.stream
        .launch("add-x", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    side.join(&gpu.stream).unwrap();
    // graphsmith refuses to end on a stream that did not begin the capture ...
    let refused = side.end_capture().unwrap_err();
    assert_eq!(refused.kind, ErrorKind::NotCapturing, "{refused}");
    // ... the driver, asked directly, breaks the capture.
    let wrong_end = range("wrong-end");
    let before = line!();
    let err = side
        .interop("cuStreamEndCapture on the forked stream", |s| {
            let mut g = std::ptr::null_mut();
            // SAFETY: s is the live side stream; a graph returned would be destroyed.
            let rc = unsafe { sys::cuStreamEndCapture(s, &mut g) };
            if !g.is_null() {
                // SAFETY: a graph returned to us is ours to destroy.
                unsafe { sys::cuGraphDestroy(g) };
            }
            rc
        })
        .unwrap_err();
    drop(wrong_end);
    assert_eq!(err.cuda_code().map(|c| c.number()), Some(903), "{err}");
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(903),
        "Stream::interop",
        before,
        &["wrong-end"],
    );
    assert_eq!(d.catalogue, Some("unmatched-end"));
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sync_copy_escape() {
    let gpu = Gpu::new();
    let fill = gpu.kernel("gs_fill_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[0.0; N]);
    let z = gpu.buffer("z", &[0.0; N]);
    let legacy = gpu.ctx.legacy_stream().unwrap();
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    let stage = range("stage");
    gpu.stream
        .launch("fill-x", &fill, cfg(), args![&mut x, 5.0f32, N as u32])
        .unwrap();
    let before = line!();
    legacy
        .copy("copy-x-to-y", &mut y, &x)
        .expect("no error: it runs eagerly");
    // A raw synchronous copy is no error either.
    // SAFETY: z and y are live allocations of N floats.
    let rc = unsafe { sys::cuMemcpyDtoD_v2(z.device_ptr(), y.device_ptr(), N * 4) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
    drop(stage);
    let (graph, report) = gpu.stream.end_capture_report().unwrap();
    assert_eq!(graph.model().len(), 1, "the copies are not in the graph");
    assert_eq!(report.escapes.len(), 1, "{:?}", report.escapes);
    let escape = &report.escapes[0];
    println!("warning: {escape}\n");
    assert_eq!(escape.op.op, "Stream::copy");
    assert_eq!(escape.op.stream.as_deref(), Some("legacy"));
    assert!(
        (before..before + 3).contains(&escape.op.at.line),
        "{escape}"
    );
    assert_eq!(escape.op.ranges, ["stage"]);
    assert_eq!(escape.op.outcome, Outcome::Eager);
    let entry = escape.catalogue().unwrap();
    assert_eq!(
        (entry.id, entry.family),
        ("sync-copy-escape", Some(Family::MemoryDependency))
    );
    assert_eq!(escape.touching.len(), 1, "{escape}");
    assert_eq!(escape.touching[0].label, "fill-x");
    // It ran at capture time, before the fill it was meant to follow: y holds the old x.
    assert_eq!(gpu.read(&y), vec![1.0; N]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn other_stream_escape() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::ThreadLocal, "step")
        .unwrap();
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let oops = range("oops");
    let before = line!();
    side.launch("add-10", &add, cfg(), args![&mut x, 10.0f32, N as u32])
        .expect("no error: it runs eagerly");
    drop(oops);
    let (graph, report) = gpu.stream.end_capture_report().unwrap();
    side.synchronize().unwrap();
    assert_eq!(
        gpu.read(&x),
        vec![11.0; N],
        "the escaped launch ran at capture time"
    );
    assert_eq!(graph.model().len(), 1, "the graph misses it");
    assert_eq!(report.escapes.len(), 1);
    let escape = &report.escapes[0];
    println!("warning: {escape}\n");
    assert_eq!(
        (escape.op.op, escape.op.label.as_str()),
        ("Stream::launch", "add-10")
    );
    assert!(
        (before..before + 3).contains(&escape.op.at.line),
        "{escape}"
    );
    assert_eq!(escape.op.ranges, ["oops"]);
    assert_eq!(escape.catalogue().unwrap().id, "other-stream-escape");
    assert_eq!(escape.touching.len(), 1);
    assert_eq!(escape.touching[0].label, "add-1");
    assert_eq!(escape.touching[0].accesses[0].mode, AccessMode::Write);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn other_stream_escape_strict() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let strict = CaptureOptions::new(CaptureMode::Global).strict(true);
    let mut before = 0;
    let err = gpu
        .stream
        .capture_with(strict, "step", |s| {
            s.launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])?;
            let _oops = range("oops");
            before = line!();
            let e = side
                .launch("add-10", &add, cfg(), args![&mut x, 10.0f32, N as u32])
                .unwrap_err();
            assert!(matches!(e.kind, ErrorKind::CaptureEscape(_)), "{e}");
            Err::<(), _>(e)
        })
        .unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::MemoryDependency,
        None,
        "Stream::launch",
        before,
        &["capture:step", "oops"],
    );
    assert_eq!(d.catalogue, Some("other-stream-escape"));
    assert_eq!(gpu.read(&x), vec![1.0; N], "refused before it ran");
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn legacy_implicit() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let blocking = gpu.ctx.blocking_stream("blocking").unwrap();
    let legacy = gpu.ctx.legacy_stream().unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[1.0; N]);
    blocking
        .begin_capture(CaptureMode::Relaxed, "step")
        .unwrap();
    blocking
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let zero = range("zero");
    let before = line!();
    let at_call = legacy.memset("zero-y", &mut y, 0.0f32).unwrap_err();
    drop(zero);
    assert_eq!(
        at_call.cuda_code().map(|c| c.number()),
        Some(906),
        "{at_call}"
    );
    let err = blocking.end_capture().unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(906),
        "Stream::memset",
        before,
        &["zero"],
    );
    assert_eq!(d.offending().unwrap().stream.as_deref(), Some("legacy"));
    assert_eq!(d.catalogue, Some("legacy-implicit"));
    captures_again(&gpu, &blocking);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn merge_two_captures() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let other = gpu.ctx.stream("other").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[1.0; N]);
    let ready = gpu.ctx.event("x-ready", false).unwrap();
    gpu.stream.begin_capture(CaptureMode::Global, "a").unwrap();
    other.begin_capture(CaptureMode::Global, "b").unwrap();
    gpu.stream
        .launch("add-x", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    gpu.stream.record(&ready).unwrap();
    other
        .launch("add-y", &add, cfg(), args![&mut y, 1.0f32, N as u32])
        .unwrap();
    let cross = range("cross");
    let before = line!();
    let at_call = other.wait(&ready).unwrap_err();
    drop(cross);
    assert_eq!(
        at_call.cuda_code().map(|c| c.number()),
        Some(902),
        "{at_call}"
    );
    for stream in [&other, &gpu.stream] {
        let err = stream.end_capture().unwrap_err();
        let d = diagnosis(&err);
        check(
            d,
            Family::MemoryDependency,
            Some(902),
            "Stream::wait",
            before,
            &["cross"],
        );
        assert_eq!(d.catalogue, Some("merge"));
    }
    captures_again(&gpu, &other);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn isolation_uncaptured_wait() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[1.0; N]);
    side.launch("eager-y", &add, cfg(), args![&mut y, 1.0f32, N as u32])
        .unwrap();
    let mut before = 0;
    let err = gpu
        .stream
        .capture(CaptureMode::Global, "step", |s| {
            s.launch("add-x", &add, cfg(), args![&mut x, 1.0f32, N as u32])?;
            before = line!();
            s.join(&side)
        })
        .unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::MemoryDependency,
        Some(905),
        "Stream::join",
        before,
        &["capture:step"],
    );
    assert_eq!(d.offending().unwrap().label, "side");
    assert_eq!(d.catalogue, Some("isolation"));
    side.synchronize().unwrap();
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn end_wrong_thread() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::ThreadLocal, "step")
        .unwrap();
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let mut before = 0;
    let err = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("closer".into())
            .spawn_scoped(scope, || {
                before = line!();
                gpu.stream.end_capture().unwrap_err()
            })
            .unwrap()
            .join()
            .unwrap()
    });
    let d = diagnosis(&err);
    assert_eq!(
        (d.family, d.code.map(|c| c.number())),
        (Family::Invalidated, Some(908))
    );
    let me = std::thread::current()
        .name()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        d.cause,
        Cause::WrongThread {
            began_on: me,
            ended_on: "closer".into()
        }
    );
    assert!((before..before + 3).contains(&err.at.line), "{err}");
    assert_eq!(d.capture.ended_at.map(|a| a.line), Some(err.at.line));
    assert_eq!(d.catalogue, Some("end-wrong-thread"));
    // The driver ended the capture: the stream is not capturing any more, and captures again.
    assert_eq!(
        gpu.stream.end_capture().unwrap_err().kind,
        ErrorKind::NotCapturing
    );
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn begin_on_legacy() {
    let gpu = Gpu::new();
    let legacy = gpu.ctx.legacy_stream().unwrap();
    let _setup = range("setup");
    let before = line!();
    let err = legacy
        .begin_capture(CaptureMode::Global, "on-legacy")
        .unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(900),
        "Stream::begin_capture",
        before,
        &["setup"],
    );
    assert_eq!(d.catalogue, Some("begin-on-legacy"));
    assert_eq!(
        legacy.end_capture().unwrap_err().kind,
        ErrorKind::NotCapturing
    );
}

extern "C" {
    fn dlopen(filename: *const std::ffi::c_char, flag: i32) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
}

type CublasCreate = unsafe extern "C" fn(*mut *mut c_void) -> i32;
type CublasDestroy = unsafe extern "C" fn(*mut c_void) -> i32;

/// cuBLAS, loaded at run time.
fn cublas() -> (CublasCreate, CublasDestroy) {
    let lib = [c"libcublas.so.13", c"libcublas.so"]
        .iter()
        // SAFETY: NUL-terminated library names; RTLD_NOW.
        .map(|n| unsafe { dlopen(n.as_ptr(), 2) })
        .find(|h| !h.is_null())
        .expect("libcublas (CUDA 13) is needed for this test");
    let sym = |name: &std::ffi::CStr| {
        // SAFETY: lib is a live library handle; the name is NUL-terminated.
        let p = unsafe { dlsym(lib, name.as_ptr()) };
        assert!(!p.is_null(), "{name:?} not found");
        p
    };
    // SAFETY: the symbols have these C signatures (cublas_api.h).
    unsafe {
        (
            std::mem::transmute::<*mut c_void, CublasCreate>(sym(c"cublasCreate_v2")),
            std::mem::transmute::<*mut c_void, CublasDestroy>(sym(c"cublasDestroy_v2")),
        )
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn library_handle_in_capture() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let (create, destroy) = cublas();
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    let mut handle = std::ptr::null_mut();
    let mut status = 0;
    let setup = range("blas-setup");
    let before = line!();
    let at_call = gpu
        .ctx
        .interop("cublasCreate", || {
            // SAFETY: handle is a valid out pointer.
            status = unsafe { create(&mut handle) };
            match status {
                0 => CUresult::CUDA_SUCCESS,
                // CUBLAS_STATUS_NOT_INITIALIZED: cuBLAS could not set itself up.
                1 => CUresult::CUDA_ERROR_NOT_INITIALIZED,
                _ => CUresult::CUDA_ERROR_UNKNOWN,
            }
        })
        .unwrap_err();
    drop(setup);
    println!("cublasCreate_v2 returned status {status}");
    assert_eq!(status, 1, "CUBLAS_STATUS_NOT_INITIALIZED");
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::Invalidated,
        Some(3),
        "Context::interop",
        before,
        &["blas-setup"],
    );
    assert_eq!(d.catalogue, Some("library-handle-in-capture"));
    assert_eq!(d.capture.end_code.map(|c| c.number()), Some(901));
    assert!(at_call.to_string().contains("cublasCreate"), "{at_call}");
    // Created before the capture, the handle is fine.
    // SAFETY: as above.
    assert_eq!(unsafe { create(&mut handle) }, 0);
    // SAFETY: handle was just created.
    unsafe { destroy(handle) };
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn invalidated_outside() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    let _work = range("work");
    let before = line!();
    gpu.stream
        .launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    // SAFETY: the stream is live; a raw synchronize inside the capture is the failure under test.
    let rc = unsafe { sys::cuStreamSynchronize(gpu.stream.raw()) };
    assert_eq!(rc, CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    let after_line = line!();
    let _ = gpu
        .stream
        .launch("add-2", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap_err();
    drop(_work);
    let err = gpu.stream.end_capture().unwrap_err();
    let d = diagnosis(&err);
    assert_eq!(
        (d.family, d.code.map(|c| c.number())),
        (Family::Invalidated, Some(901))
    );
    assert_eq!(d.catalogue, Some("invalidated-outside"));
    let Cause::Outside {
        after: Some(a),
        before: Some(b),
    } = &d.cause
    else {
        panic!("{d}")
    };
    assert_eq!(a.label, "add-1");
    assert!((before..before + 4).contains(&a.at.line), "{d}");
    assert_eq!(b.label, "add-2");
    assert!((after_line..after_line + 4).contains(&b.at.line), "{d}");
    assert_eq!(a.ranges, ["work"]);
    assert_eq!(b.ranges, ["work"]);
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn host_rewritten_upload_refused() {
    let gpu = Gpu::new();
    let mut w = gpu.buffer("weights", &[0.0; N]);
    // The hazard, with raw calls: a captured host-to-device copy reads the host at each replay.
    let mut host = vec![1.0f32; N];
    // SAFETY: the stream, w and host are live; the graph and executable are destroyed below,
    // before host.
    unsafe {
        let s = gpu.stream.raw();
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
        assert_eq!(
            sys::cuStreamBeginCapture_v2(s, mode),
            CUresult::CUDA_SUCCESS
        );
        let rc =
            sys::cuMemcpyHtoDAsync_v2(w.device_ptr(), host.as_ptr() as *const c_void, N * 4, s);
        assert_eq!(rc, CUresult::CUDA_SUCCESS);
        let mut g = std::ptr::null_mut();
        assert_eq!(sys::cuStreamEndCapture(s, &mut g), CUresult::CUDA_SUCCESS);
        let mut exec = std::ptr::null_mut();
        assert_eq!(
            sys::cuGraphInstantiateWithFlags(&mut exec, g, 0),
            CUresult::CUDA_SUCCESS
        );
        host.iter_mut().for_each(|v| *v = 2.0);
        assert_eq!(sys::cuGraphLaunch(exec, s), CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuStreamSynchronize(s), CUresult::CUDA_SUCCESS);
        sys::cuGraphExecDestroy(exec);
        sys::cuGraphDestroy(g);
    }
    assert_eq!(
        gpu.read(&w),
        vec![2.0; N],
        "the replay copied the rewritten host data"
    );
    // graphsmith refuses the host copy inside a capture, before the driver sees it.
    let mut before = 0;
    let err = gpu
        .stream
        .capture(CaptureMode::Global, "load", |s| {
            let _r = range("weights");
            before = line!();
            s.upload(&mut w, &host)
        })
        .unwrap_err();
    let d = diagnosis(&err);
    check(
        d,
        Family::MemoryDependency,
        None,
        "Stream::upload",
        before,
        &["capture:load", "weights"],
    );
    assert!(matches!(
        d.offending().unwrap().outcome,
        Outcome::Refused { .. }
    ));
    assert_eq!(d.catalogue, Some("host-rewritten"));
    captures_again(&gpu, &gpu.stream);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn freed_after_capture_is_prevented() {
    let gpu = Gpu::new();
    // Raw: freeing memory a captured graph uses makes instantiation fail.
    // SAFETY: p is allocated, used in the capture, freed once; the graph is destroyed.
    unsafe {
        let s = gpu.stream.raw();
        let mut p = 0;
        assert_eq!(sys::cuMemAlloc_v2(&mut p, 1 << 20), CUresult::CUDA_SUCCESS);
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
        assert_eq!(
            sys::cuStreamBeginCapture_v2(s, mode),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            sys::cuMemsetD32Async(p, 5, 1 << 18, s),
            CUresult::CUDA_SUCCESS
        );
        let mut g = std::ptr::null_mut();
        assert_eq!(sys::cuStreamEndCapture(s, &mut g), CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuMemFree_v2(p), CUresult::CUDA_SUCCESS);
        let mut exec = std::ptr::null_mut();
        let rc = sys::cuGraphInstantiateWithFlags(&mut exec, g, 0);
        println!("raw: cuGraphInstantiate after cuMemFree -> {rc:?}");
        assert_eq!(rc, CUresult::CUDA_ERROR_INVALID_VALUE);
        sys::cuGraphDestroy(g);
    }
    // graphsmith: the graph keeps the buffer alive; dropping the handle frees nothing.
    let copy = gpu.kernel("gs_copy_f32");
    let n = 16 << 20;
    let src = gpu.buffer("src", &vec![4.0; n]);
    let mut dst = gpu.poisoned("dst", n);
    let (graph, ()) = gpu
        .stream
        .capture(CaptureMode::Global, "copy", |s| {
            s.launch(
                "copy",
                &copy,
                LaunchConfig::for_elements(n as u32),
                args![&src, &mut dst, n as u32],
            )
        })
        .unwrap();
    let (free_before, _) = gpu.ctx.memory_info().unwrap();
    drop(src);
    let (free_after, _) = gpu.ctx.memory_info().unwrap();
    assert!(
        free_after < free_before + (n * 4) / 2,
        "src was freed under the graph"
    );
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_eq!(gpu.read(&dst), vec![4.0; n]);
    let entry = graphsmith::catalogue::entry("freed-after-capture").unwrap();
    assert_eq!(entry.family, Some(Family::StaleParameters));
    drop(exec);
    drop(graph);
    let (free_end, _) = gpu.ctx.memory_info().unwrap();
    assert!(
        free_end >= free_after + (n * 4) / 2,
        "freed once the graph and exec are gone"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn journal_labels_nodes_with_line_thread_ranges_and_accesses() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let side = gpu.ctx.stream("side").unwrap();
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[1.0; N]);
    gpu.stream
        .begin_capture(CaptureMode::Global, "step")
        .unwrap();
    let layer = range("layer-0");
    let before = line!();
    gpu.stream
        .launch("add-x", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        .unwrap();
    side.join(&gpu.stream).unwrap();
    side.launch("add-y", &add, cfg(), args![&mut y, 1.0f32, N as u32])
        .unwrap();
    gpu.stream.join(&side).unwrap();
    drop(layer);
    let (graph, report) = gpu.stream.end_capture_report().unwrap();
    for e in &report.journal {
        println!("{e}");
    }
    assert!(report.escapes.is_empty());
    let ops: Vec<(&str, Option<&str>)> = report
        .journal
        .iter()
        .map(|e| (e.op, e.stream.as_deref()))
        .collect();
    assert_eq!(
        ops,
        [
            ("Stream::launch", Some("test")),
            ("Stream::join", Some("side")),
            ("Stream::launch", Some("side")),
            ("Stream::join", Some("test"))
        ]
    );
    assert_eq!(report.journal[3].waits_for.as_deref(), Some("side"));
    let node = graph
        .model()
        .nodes
        .iter()
        .find(|n| n.label == "add-y")
        .expect("labelled");
    let p = node.provenance.as_ref().unwrap();
    assert_eq!(p.ranges, ["layer-0"]);
    assert!((before..before + 8).contains(&p.line));
    assert_eq!(p.thread.as_deref(), std::thread::current().name());
    assert_eq!(node.accesses[0].label, "y");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn capture_or_eager_falls_back_with_the_diagnosis() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut runs = 0;
    let mut before = 0;
    let (replay, value) = gpu
        .stream
        .capture_or_eager(CaptureMode::Global, "step", |s| {
            runs += 1;
            s.launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])?;
            before = line!();
            s.synchronize()?;
            s.launch("add-2", &add, cfg(), args![&mut x, 2.0f32, N as u32])?;
            Ok(runs)
        })
        .unwrap();
    assert_eq!((runs, value), (2, 2), "captured once, then run eagerly");
    let Replay::Eager(d) = &replay else {
        panic!("the capture should have failed")
    };
    println!("fell back: {d}\n");
    check(
        d,
        Family::Invalidated,
        Some(900),
        "Stream::synchronize",
        before,
        &["capture:step"],
    );
    gpu.stream.synchronize().unwrap();
    assert_eq!(gpu.read(&x), vec![4.0; N], "only the eager run touched x");
    // Without the failure it captures.
    let (replay, ()) = gpu
        .stream
        .capture_or_eager(CaptureMode::Global, "step", |s| {
            s.launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        })
        .unwrap();
    assert_eq!(replay.graph().map(|g| g.model().len()), Some(1));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn journal_off_still_keeps_buffers_alive() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let opts = CaptureOptions::new(CaptureMode::Global).journal(false);
    let (graph, ()) = gpu
        .stream
        .capture_with(opts, "quiet", |s| {
            s.launch("add-1", &add, cfg(), args![&mut x, 1.0f32, N as u32])
        })
        .unwrap();
    let node = &graph.model().nodes[0];
    assert_ne!(node.label, "add-1", "no journal, no label");
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_eq!(gpu.read(&x), vec![2.0; N]);
}

/// With the journal off, a launch whose buffers and module the capture keeps already goes
/// straight to the driver: every buffer of the chain is still kept, also one whose handle is
/// dropped before the graph is instantiated and launched (twice).
#[test]
#[ignore = "needs a CUDA GPU"]
fn journal_off_chains_keep_every_buffer_alive() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let copy = gpu.kernel("gs_copy_f32");
    let mut x = gpu.buffer("x", &[1.0; N]);
    let mut y = gpu.buffer("y", &[10.0; N]);
    let opts = CaptureOptions::new(CaptureMode::Global).journal(false);
    let (graph, ()) = gpu
        .stream
        .capture_with(opts, "quiet-chain", |s| {
            for _ in 0..3 {
                s.launch("y", &add, cfg(), args![&mut y, 1.0f32, N as u32])?;
            }
            s.launch("copy", &copy, cfg(), args![&y, &mut x, N as u32])?;
            for _ in 0..2 {
                s.launch("x", &add, cfg(), args![&mut x, 1.0f32, N as u32])?;
            }
            Ok(())
        })
        .unwrap();
    drop(y);
    assert_eq!(graph.model().len(), 6);
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_eq!(gpu.read(&x), vec![15.0; N]);
    // y lives on in the graph: it went on from 13.
    exec.launch(&gpu.stream).unwrap();
    assert_eq!(gpu.read(&x), vec![18.0; N]);
}
