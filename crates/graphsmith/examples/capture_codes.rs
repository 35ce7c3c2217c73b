//! What the driver really does for each trigger in the failure catalogue (docs/failures.md),
//! with raw driver calls only: one line per call, `scenario: call -> CUresult`. Run on a GPU:
//!
//! ```text
//! cargo run --release -p graphsmith --example capture_codes
//! ```
//!
//! The catalogue's "codes seen" columns were filled from this program's output on an H200
//! (driver 580, CUDA 13.0); the GPU tests in `tests/gpu_capture_failures.rs` then check that
//! graphsmith's diagnosis reports the same codes.

use std::ffi::c_void;
use std::ptr::null_mut;

use graphsmith::sys::{self, CUresult, CUstreamCaptureMode as M};
use graphsmith::Context;

const LEGACY: sys::CUstream = 1usize as sys::CUstream;

fn show(scenario: &str, call: &str, rc: CUresult) -> CUresult {
    println!("{scenario}: {call} -> {rc:?} ({})", rc as u32);
    rc
}

/// Capture status and id of a stream, as a string.
fn status(s: sys::CUstream) -> String {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let (mut g, mut d, mut e, mut n) = (null_mut(), std::ptr::null(), std::ptr::null(), 0usize);
    // SAFETY: s is a live stream (or the legacy handle); all out pointers are valid.
    let rc = unsafe {
        sys::cuStreamGetCaptureInfo_v3(s, &mut st, &mut id, &mut g, &mut d, &mut e, &mut n)
    };
    format!("{rc:?} {st:?} id={id} deps={n}")
}

fn stream(blocking: bool) -> sys::CUstream {
    let mut s = null_mut();
    let flags = if blocking { 0 } else { 1 };
    // SAFETY: the context is current; s is a valid out pointer.
    let rc = unsafe { sys::cuStreamCreate(&mut s, flags) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
    s
}

fn event() -> sys::CUevent {
    let mut e = null_mut();
    // SAFETY: the context is current.
    let rc = unsafe { sys::cuEventCreate(&mut e, 2) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
    e
}

fn alloc(bytes: usize) -> sys::CUdeviceptr {
    let mut p = 0;
    // SAFETY: the context is current.
    let rc = unsafe { sys::cuMemAlloc_v2(&mut p, bytes) };
    assert_eq!(rc, CUresult::CUDA_SUCCESS);
    p
}

/// Ends the capture on s, prints the code and the node count, destroys the graph.
fn end(scenario: &str, s: sys::CUstream) {
    let mut g = null_mut();
    // SAFETY: s is live; a returned graph is destroyed below.
    let rc = unsafe { sys::cuStreamEndCapture(s, &mut g) };
    let mut n = 0usize;
    if !g.is_null() {
        // SAFETY: g is a live graph.
        unsafe { sys::cuGraphGetNodes(g, null_mut(), &mut n) };
    }
    println!(
        "{scenario}: cuStreamEndCapture -> {rc:?} ({}) graph={} nodes={n}; after: {}",
        rc as u32,
        !g.is_null(),
        status(s)
    );
    if !g.is_null() {
        // SAFETY: g was returned to us.
        unsafe { sys::cuGraphDestroy(g) };
    }
}

fn begin(scenario: &str, s: sys::CUstream, mode: M) -> CUresult {
    // SAFETY: s is live.
    show(scenario, "cuStreamBeginCapture", unsafe {
        sys::cuStreamBeginCapture_v2(s, mode)
    })
}

/// A second capture on the same stream, to show it is usable again.
fn again(scenario: &str, s: sys::CUstream, d: sys::CUdeviceptr) {
    begin(
        &format!("{scenario}/again"),
        s,
        M::CU_STREAM_CAPTURE_MODE_GLOBAL,
    );
    // SAFETY: d is a live allocation of at least 4 bytes.
    show(&format!("{scenario}/again"), "cuMemsetD32Async", unsafe {
        sys::cuMemsetD32Async(d, 1, 1, s)
    });
    end(&format!("{scenario}/again"), s);
}

fn main() {
    let ctx = Context::new(0).expect("a GPU");
    let raw_ctx = ctx.raw();
    let s = stream(false);
    let t = stream(false);
    let b = stream(true);
    let d = alloc(1 << 20);
    let d2 = alloc(1 << 20);
    let n4 = 1usize << 18;
    // SAFETY (whole function): every handle above is live and of the current context; each
    // scenario ends the captures it begins.
    unsafe {
        let sc = "sync";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuMemsetD32Async", sys::cuMemsetD32Async(d, 1, n4, s));
        show(sc, "cuStreamSynchronize", sys::cuStreamSynchronize(s));
        println!("{sc}: status after: {}", status(s));
        show(
            sc,
            "cuMemsetD32Async (after)",
            sys::cuMemsetD32Async(d, 2, n4, s),
        );
        end(sc, s);
        again(sc, s, d);

        for (sc, mode) in [
            ("streamquery", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
            ("ctxsync", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
        ] {
            begin(sc, s, mode);
            if sc == "streamquery" {
                show(sc, "cuStreamQuery", sys::cuStreamQuery(s));
            } else {
                show(sc, "cuCtxSynchronize", sys::cuCtxSynchronize());
            }
            end(sc, s);
        }

        for (sc, mode) in [
            ("alloc-global", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
            ("alloc-threadlocal", M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            ("alloc-relaxed", M::CU_STREAM_CAPTURE_MODE_RELAXED),
        ] {
            begin(sc, s, mode);
            let mut p = 0;
            show(sc, "cuMemAlloc", sys::cuMemAlloc_v2(&mut p, 4096));
            println!("{sc}: status after: {}", status(s));
            if p != 0 {
                show(sc, "cuMemFree", sys::cuMemFree_v2(p));
            }
            end(sc, s);
        }

        let sc = "free-global";
        let p = alloc(4096);
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuMemFree", sys::cuMemFree_v2(p));
        end(sc, s);

        let sc = "alloc-other-thread-global";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        let ctx_addr = raw_ctx as usize;
        std::thread::spawn(move || {
            sys::cuCtxSetCurrent(ctx_addr as sys::CUcontext);
            let mut p = 0;
            show(
                sc,
                "cuMemAlloc (other thread)",
                sys::cuMemAlloc_v2(&mut p, 4096),
            );
            if p != 0 {
                sys::cuMemFree_v2(p);
            }
        })
        .join()
        .unwrap();
        println!("{sc}: status after: {}", status(s));
        end(sc, s);

        for sc in ["eventquery", "eventsync"] {
            let e = event();
            begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
            show(sc, "cuMemsetD32Async", sys::cuMemsetD32Async(d, 1, n4, s));
            show(sc, "cuEventRecord", sys::cuEventRecord(e, s));
            if sc == "eventquery" {
                show(sc, "cuEventQuery", sys::cuEventQuery(e));
            } else {
                show(sc, "cuEventSynchronize", sys::cuEventSynchronize(e));
            }
            println!("{sc}: status after: {}", status(s));
            end(sc, s);
            sys::cuEventDestroy_v2(e);
        }

        let sc = "eventquery-relaxed";
        let e = event();
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_RELAXED);
        show(sc, "cuEventRecord", sys::cuEventRecord(e, s));
        show(sc, "cuEventQuery", sys::cuEventQuery(e));
        end(sc, s);
        sys::cuEventDestroy_v2(e);

        let sc = "unjoined";
        let e = event();
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuEventRecord", sys::cuEventRecord(e, s));
        show(sc, "cuStreamWaitEvent(t)", sys::cuStreamWaitEvent(t, e, 0));
        println!("{sc}: t status: {}", status(t));
        show(
            sc,
            "cuMemsetD32Async(t)",
            sys::cuMemsetD32Async(d2, 3, n4, t),
        );
        end(sc, s);
        println!("{sc}: t after: {}", status(t));
        show(
            sc,
            "cuMemsetD32Async(t) after",
            sys::cuMemsetD32Async(d2, 3, n4, t),
        );
        show(
            sc,
            "cuStreamSynchronize(t) after",
            sys::cuStreamSynchronize(t),
        );
        again(sc, s, d);

        let sc = "unmatched";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuEventRecord", sys::cuEventRecord(e, s));
        show(sc, "cuStreamWaitEvent(t)", sys::cuStreamWaitEvent(t, e, 0));
        let mut g = null_mut();
        show(
            sc,
            "cuStreamEndCapture(t)",
            sys::cuStreamEndCapture(t, &mut g),
        );
        println!(
            "{sc}: graph={} s: {} t: {}",
            !g.is_null(),
            status(s),
            status(t)
        );
        end(sc, s);
        println!("{sc}: t after: {}", status(t));
        sys::cuEventDestroy_v2(e);

        let sc = "sync-memcpy-escape";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuMemsetD32Async", sys::cuMemsetD32Async(d, 1, n4, s));
        show(
            sc,
            "cuMemcpyDtoD (sync)",
            sys::cuMemcpyDtoD_v2(d2, d, 1 << 20),
        );
        let host = vec![7u32; n4];
        show(
            sc,
            "cuMemcpyHtoD (sync)",
            sys::cuMemcpyHtoD_v2(d2, host.as_ptr() as *const c_void, 1 << 20),
        );
        end(sc, s);

        let sc = "other-stream-escape";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(
            sc,
            "cuMemsetD32Async(s)",
            sys::cuMemsetD32Async(d, 1, n4, s),
        );
        show(
            sc,
            "cuMemsetD32Async(t)",
            sys::cuMemsetD32Async(d, 9, n4, t),
        );
        println!("{sc}: t status: {}", status(t));
        end(sc, s);
        show(sc, "cuStreamSynchronize(t)", sys::cuStreamSynchronize(t));

        let sc = "legacy-while-nonblocking";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(
            sc,
            "cuMemsetD32Async(legacy)",
            sys::cuMemsetD32Async(d, 4, n4, LEGACY),
        );
        end(sc, s);

        for (sc, mode) in [
            ("legacy-while-blocking", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
            (
                "legacy-while-blocking-relaxed",
                M::CU_STREAM_CAPTURE_MODE_RELAXED,
            ),
        ] {
            begin(sc, b, mode);
            show(
                sc,
                "cuMemsetD32Async(b)",
                sys::cuMemsetD32Async(d, 1, n4, b),
            );
            show(
                sc,
                "cuMemsetD32Async(legacy)",
                sys::cuMemsetD32Async(d, 4, n4, LEGACY),
            );
            println!("{sc}: b status: {}", status(b));
            show(
                sc,
                "cuMemsetD32Async(b) after",
                sys::cuMemsetD32Async(d, 1, n4, b),
            );
            end(sc, b);
            again(sc, b, d);
        }

        let sc = "merge";
        let e = event();
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        begin(sc, t, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuEventRecord(s)", sys::cuEventRecord(e, s));
        show(
            sc,
            "cuStreamWaitEvent(t, e of s)",
            sys::cuStreamWaitEvent(t, e, 0),
        );
        println!("{sc}: s {} t {}", status(s), status(t));
        end(&format!("{sc}/t"), t);
        end(&format!("{sc}/s"), s);

        let sc = "isolation";
        show(
            sc,
            "cuMemsetD32Async(t)",
            sys::cuMemsetD32Async(d2, 1, n4, t),
        );
        show(
            sc,
            "cuEventRecord(t) outside capture",
            sys::cuEventRecord(e, t),
        );
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(
            sc,
            "cuStreamWaitEvent(s, uncaptured e)",
            sys::cuStreamWaitEvent(s, e, 0),
        );
        show(
            sc,
            "cuMemsetD32Async(s)",
            sys::cuMemsetD32Async(d, 1, n4, s),
        );
        end(sc, s);
        sys::cuStreamSynchronize(t);

        let sc = "isolation-2";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(sc, "cuEventRecord(s)", sys::cuEventRecord(e, s));
        show(
            sc,
            "cuStreamWaitEvent(t, e)",
            sys::cuStreamWaitEvent(t, e, 0),
        );
        show(
            sc,
            "cuMemsetD32Async(t)",
            sys::cuMemsetD32Async(d2, 1, n4, t),
        );
        let e2 = event();
        show(sc, "cuEventRecord(e2, t)", sys::cuEventRecord(e2, t));
        show(
            sc,
            "cuStreamWaitEvent(s, e2)",
            sys::cuStreamWaitEvent(s, e2, 0),
        );
        end(sc, s);
        sys::cuEventDestroy_v2(e);
        sys::cuEventDestroy_v2(e2);

        for (sc, mode) in [
            ("wrongthread-global", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
            (
                "wrongthread-threadlocal",
                M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            ),
            ("wrongthread-relaxed", M::CU_STREAM_CAPTURE_MODE_RELAXED),
        ] {
            begin(sc, s, mode);
            show(sc, "cuMemsetD32Async", sys::cuMemsetD32Async(d, 1, n4, s));
            let (sa, ca) = (s as usize, ctx_addr);
            std::thread::spawn(move || {
                sys::cuCtxSetCurrent(ca as sys::CUcontext);
                let mut g = null_mut();
                let rc = sys::cuStreamEndCapture(sa as sys::CUstream, &mut g);
                println!(
                    "{sc}: cuStreamEndCapture (other thread) -> {rc:?} ({}) graph={} after: {}",
                    rc as u32,
                    !g.is_null(),
                    status(sa as sys::CUstream)
                );
                if !g.is_null() {
                    sys::cuGraphDestroy(g);
                }
            })
            .join()
            .unwrap();
            println!("{sc}: status on main: {}", status(s));
            show(
                sc,
                "cuMemsetD32Async (after)",
                sys::cuMemsetD32Async(d, 1, n4, s),
            );
            end(sc, s);
        }

        let sc = "begin-legacy";
        begin(sc, LEGACY, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        begin(
            &format!("{sc}-null"),
            null_mut(),
            M::CU_STREAM_CAPTURE_MODE_GLOBAL,
        );
        println!("{sc}: legacy status: {}", status(LEGACY));

        let sc = "cublas";
        let lib = dlopen(c"libcublas.so.13".as_ptr(), 2);
        if lib.is_null() {
            println!("{sc}: libcublas.so.13 not found");
        } else {
            type Create = unsafe extern "C" fn(*mut *mut c_void) -> i32;
            type Destroy = unsafe extern "C" fn(*mut c_void) -> i32;
            let create = dlsym(lib, c"cublasCreate_v2".as_ptr());
            let destroy = dlsym(lib, c"cublasDestroy_v2".as_ptr());
            let create: Create = std::mem::transmute(create);
            let destroy: Destroy = std::mem::transmute(destroy);
            for (sc, mode) in [
                ("cublas-global", M::CU_STREAM_CAPTURE_MODE_GLOBAL),
                ("cublas-relaxed", M::CU_STREAM_CAPTURE_MODE_RELAXED),
            ] {
                begin(sc, s, mode);
                let mut h = null_mut();
                let st = create(&mut h);
                println!(
                    "{sc}: cublasCreate_v2 -> status {st}; stream: {}",
                    status(s)
                );
                end(sc, s);
                if !h.is_null() {
                    destroy(h);
                }
            }
            let mut h = null_mut();
            println!("cublas-eager: cublasCreate_v2 -> {}", create(&mut h));
            if !h.is_null() {
                destroy(h);
            }
        }

        let sc = "host-rewritten";
        let mut host = [1u32; 16];
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        show(
            sc,
            "cuMemcpyHtoDAsync (pageable)",
            sys::cuMemcpyHtoDAsync_v2(d, host.as_ptr() as *const c_void, 64, s),
        );
        let mut g = null_mut();
        show(sc, "cuStreamEndCapture", sys::cuStreamEndCapture(s, &mut g));
        if !g.is_null() {
            let mut x = null_mut();
            show(
                sc,
                "cuGraphInstantiate",
                sys::cuGraphInstantiateWithFlags(&mut x, g, 0),
            );
            host.iter_mut().for_each(|v| *v = 2);
            show(sc, "cuGraphLaunch", sys::cuGraphLaunch(x, s));
            show(sc, "cuStreamSynchronize", sys::cuStreamSynchronize(s));
            let mut back = [0u32; 16];
            sys::cuMemcpyDtoH_v2(back.as_mut_ptr() as *mut c_void, d, 64);
            println!(
                "{sc}: device holds {} after rewriting the host to 2 (captured when it held 1)",
                back[0]
            );
            sys::cuGraphExecDestroy(x);
            sys::cuGraphDestroy(g);
        }

        let sc = "relaxed-allocasync";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        let mut p = 0;
        show(sc, "cuMemAllocAsync", sys::cuMemAllocAsync(&mut p, 4096, s));
        show(sc, "cuMemFreeAsync", sys::cuMemFreeAsync(p, s));
        end(sc, s);

        let sc = "exchange-mode";
        begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
        let mut mode = M::CU_STREAM_CAPTURE_MODE_RELAXED;
        show(
            sc,
            "cuThreadExchangeStreamCaptureMode",
            sys::cuThreadExchangeStreamCaptureMode(&mut mode),
        );
        let mut p = 0;
        show(
            sc,
            "cuMemAlloc (relaxed thread)",
            sys::cuMemAlloc_v2(&mut p, 4096),
        );
        sys::cuThreadExchangeStreamCaptureMode(&mut mode);
        end(sc, s);
        if p != 0 {
            sys::cuMemFree_v2(p);
        }

        let sc = "freed-after-capture";
        if std::env::var_os("CAPTURE_CODES_FREE").is_some() {
            let p = alloc(1 << 20);
            begin(sc, s, M::CU_STREAM_CAPTURE_MODE_GLOBAL);
            show(sc, "cuMemsetD32Async", sys::cuMemsetD32Async(p, 5, n4, s));
            let mut g = null_mut();
            show(sc, "cuStreamEndCapture", sys::cuStreamEndCapture(s, &mut g));
            show(sc, "cuMemFree", sys::cuMemFree_v2(p));
            let mut x = null_mut();
            show(
                sc,
                "cuGraphInstantiate",
                sys::cuGraphInstantiateWithFlags(&mut x, g, 0),
            );
            show(sc, "cuGraphLaunch", sys::cuGraphLaunch(x, s));
            show(sc, "cuStreamSynchronize", sys::cuStreamSynchronize(s));
        } else {
            println!("{sc}: skipped (set CAPTURE_CODES_FREE=1; it may poison the context)");
        }
    }
}

extern "C" {
    fn dlopen(filename: *const std::ffi::c_char, flag: i32) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const std::ffi::c_char) -> *mut c_void;
}
