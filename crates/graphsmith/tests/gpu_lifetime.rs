//! GPU tests: ownership and lifetimes. No leaks over 10,000 cycles, buffers kept alive by
//! executables, executables driven from 16 threads.

mod common;

use common::{assert_same, inputs, Gpu};
use graphsmith::{args, CaptureMode, LaunchConfig, UpdatePolicy};

const N: usize = 1024;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn ten_thousand_build_instantiate_launch_drop_cycles_do_not_leak() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let cycle = |i: usize| {
        let mut x = gpu.ctx.alloc::<f32>("x", N).unwrap();
        let mut g = gpu.ctx.graph("cycle").unwrap();
        let set = g.memset("set", &mut x, 1.0f32, &[]).unwrap();
        g.kernel("add", &add, cfg, args![&mut x, 2.0f32, N as u32], &[&set])
            .unwrap();
        let mut exec = g.instantiate().unwrap();
        exec.launch(&gpu.stream).unwrap();
        if i.is_multiple_of(1000) {
            assert_same("cycle", &gpu.read(&x), &vec![3.0; N]);
        }
        // Alternate drop orders: buffer first, or graph and exec first.
        if i.is_multiple_of(2) {
            drop(x);
            drop(g);
            drop(exec);
        } else {
            drop(exec);
            drop(g);
            drop(x);
        }
        // Captured graphs too.
        let mut y = gpu.ctx.alloc::<f32>("y", N).unwrap();
        let (cg, ()) = gpu
            .stream
            .capture(CaptureMode::ThreadLocal, "cycle-capture", |s| {
                s.memset("set-y", &mut y, 4.0f32)
            })
            .unwrap();
        let mut ce = cg.instantiate().unwrap();
        ce.launch(&gpu.stream).unwrap();
    };
    for i in 0..200 {
        cycle(i);
    }
    gpu.ctx.synchronize().unwrap();
    let (free_before, _) = gpu.ctx.memory_info().unwrap();
    let rss_before = rss_bytes();
    for i in 0..10_000 {
        cycle(i);
    }
    gpu.ctx.synchronize().unwrap();
    let (free_after, _) = gpu.ctx.memory_info().unwrap();
    let rss_after = rss_bytes();
    println!("device free before {free_before} after {free_after}; RSS before {rss_before} after {rss_after}");
    assert_eq!(
        free_after, free_before,
        "device memory changed over 10,000 cycles"
    );
    assert!(
        rss_after <= rss_before + 4 * 1024 * 1024,
        "host RSS grew from {rss_before} to {rss_after}"
    );
    assert!(
        gpu.ctx.drop_failures().is_empty(),
        "{:?}",
        gpu.ctx.drop_failures()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn buffer_dropped_by_user_stays_valid_for_the_executable() {
    let gpu = Gpu::new();
    let copy = gpu.kernel("gs_copy_f32");
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let src_values = inputs(N, 21);
    let src = gpu.buffer("src", &src_values);
    let mut out = gpu.poisoned("out", N);
    let mut g = gpu.ctx.graph("uses-src").unwrap();
    let c = g
        .kernel("copy", &copy, cfg, args![&src, &mut out, N as u32], &[])
        .unwrap();
    g.kernel("add", &add, cfg, args![&mut out, 1.0f32, N as u32], &[&c])
        .unwrap();
    let mut exec = g.instantiate().unwrap();
    drop(g);
    drop(src); // the user lets go; the executable still holds the allocation
               // Churn the allocator: had `src` been freed, these could take its memory and overwrite it.
    let mut churn = Vec::new();
    for i in 0..64 {
        churn.push(gpu.buffer("churn", &vec![-7.0 - i as f32; N]));
    }
    let want: Vec<f32> = src_values.iter().map(|v| v + 1.0).collect();
    for _ in 0..3 {
        gpu.poison(&mut out);
        exec.launch(&gpu.stream).unwrap();
        assert_same("replay after drop", &gpu.read(&out), &want);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn sixteen_threads_each_launch_their_own_executable_1000_times() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let results: Vec<(Vec<f32>, Vec<f32>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let (ctx, add) = (gpu.ctx.clone(), add.clone());
                scope.spawn(move || {
                    let stream = ctx.stream(&format!("thread-{t}")).unwrap();
                    let start = inputs(N, 100 + t);
                    let mut x = ctx.alloc::<f32>(&format!("x{t}"), N).unwrap();
                    stream.upload(&mut x, &start).unwrap();
                    let step = (t + 1) as f32 * 0.5;
                    let (graph, ()) = stream
                        .capture(CaptureMode::ThreadLocal, &format!("g{t}"), |s| {
                            s.launch(
                                "add",
                                &add,
                                LaunchConfig::for_elements(N as u32),
                                args![&mut x, step, N as u32],
                            )
                        })
                        .unwrap();
                    let mut exec = graph.instantiate().unwrap();
                    for _ in 0..1000 {
                        exec.launch(&stream).unwrap();
                    }
                    let got = stream.download(&x).unwrap();
                    let want: Vec<f32> = start
                        .iter()
                        .map(|&v| {
                            let mut v = v;
                            for _ in 0..1000 {
                                v += step;
                            }
                            v
                        })
                        .collect();
                    (got, want)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, (got, want)) in results.iter().enumerate() {
        assert_same(&format!("thread {t}"), got, want);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn executable_dropped_during_a_capture_is_destroyed_after_its_work_when_the_capture_ends() {
    let gpu = Gpu::new();
    let spin = gpu.kernel("gs_spin");
    let copy = gpu.kernel("gs_copy_f32");
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let src_values = inputs(N, 33);
    let src = gpu.buffer("src", &src_values);
    let mut out = gpu.poisoned("out", N);
    let mut g = gpu.ctx.graph("slow-copy").unwrap();
    let one = LaunchConfig::for_elements(1);
    let wait = g
        .kernel("spin", &spin, one, args![200_000_000u64], &[])
        .unwrap();
    g.kernel(
        "copy",
        &copy,
        cfg,
        args![&src, &mut out, N as u32],
        &[&wait],
    )
    .unwrap();
    let mut exec = g.into_exec().unwrap();
    drop(src); // only the executable holds it now
    let work = gpu.ctx.stream("work").unwrap();
    exec.launch(&work).unwrap();

    // While another stream captures, dropping the executable must not wait (that would
    // invalidate the capture): it is destroyed when the capture ends, after its work.
    let side = gpu.ctx.stream("side").unwrap();
    let mut y = gpu.buffer("y", &vec![1.0; N]);
    side.begin_capture(CaptureMode::ThreadLocal, "during-drop")
        .unwrap();
    let active = graphsmith::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    assert_eq!(capture_status(&side), active, "after begin");
    side.launch("add", &add, cfg, args![&mut y, 1.0f32, N as u32])
        .unwrap();
    assert_eq!(capture_status(&side), active, "after the launch");
    drop(exec);
    assert_eq!(
        capture_status(&side),
        active,
        "after dropping the executable"
    );
    let graph = side.end_capture().expect("the capture survives the drop");
    assert_eq!(graph.model().nodes.len(), 1);
    // `out` is read on another stream without waiting for `work`: the deferred destruction
    // waited for the copy when the capture ended.
    assert_same("copied before destruction", &gpu.read(&out), &src_values);
    assert!(
        gpu.ctx.drop_failures().is_empty(),
        "{:?}",
        gpu.ctx.drop_failures()
    );
}

fn capture_status(stream: &graphsmith::Stream) -> graphsmith::sys::CUstreamCaptureStatus {
    let mut status = graphsmith::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is live; status is a valid out pointer.
    let rc = unsafe { graphsmith::sys::cuStreamIsCapturing(stream.raw(), &mut status) };
    assert_eq!(rc, graphsmith::sys::CUresult::CUDA_SUCCESS);
    status
}

/// A graph with a slow kernel, then a host function that records `tag` into `seen` (the host
/// function's closure is freed when nothing holds the graph's resources any more).
fn slow_then_host(
    gpu: &Gpu,
    label: &str,
    seen: &std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
    tag: u32,
) -> graphsmith::Graph {
    let spin = gpu.kernel("gs_spin");
    let mut g = gpu.ctx.graph(label).unwrap();
    let wait = g
        .kernel(
            "spin",
            &spin,
            LaunchConfig::for_elements(1),
            args![100_000_000u64],
            &[],
        )
        .unwrap();
    let seen = seen.clone();
    g.host("record", move || seen.lock().unwrap().push(tag), &[&wait])
        .unwrap();
    g
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn resources_of_an_updated_away_graph_outlive_the_launches_that_use_them() {
    let gpu = Gpu::new();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let a = slow_then_host(&gpu, "a", &seen, 1);
    let b = slow_then_host(&gpu, "b", &seen, 2);
    let c = slow_then_host(&gpu, "c", &seen, 3);
    let mut exec = a.instantiate().unwrap();
    // Host nodes: the executable's template becomes a driver copy of `b`, sharing its
    // resources (the host function's closure among them).
    exec.update(&b, UpdatePolicy::InPlace).unwrap();
    exec.launch(&gpu.stream).unwrap();
    // While that launch still spins, update away from `b` and drop it: the closure must stay
    // alive until the launch has run it.
    exec.update(&c, UpdatePolicy::InPlace).unwrap();
    drop(b);
    drop(a);
    gpu.stream.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![2]);
    exec.launch(&gpu.stream).unwrap();
    gpu.stream.synchronize().unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![2, 3]);
    assert!(
        gpu.ctx.drop_failures().is_empty(),
        "{:?}",
        gpu.ctx.drop_failures()
    );
}
