//! What the capture journal costs: capturing 1,000 kernel launches with the journal on, with it
//! off (graphsmith still tracks what the graph must keep alive), and with raw driver calls, as
//! medians of many runs; what the first `Graph::model()` costs afterwards (the read-back, and
//! with the journal on the labelling of every node from the journal: ending a capture reads
//! nothing back); and what a named range costs. The issue's limit: the journal costs at most
//! 1.2x capturing without it. Also checks that every node got its label, line and range from
//! the journal. Exits 1 when over the limit or a node is unlabelled.
//!
//! ```text
//! cargo run --release -p graphsmith --example journal_overhead   # on a machine with an NVIDIA GPU
//! ```

use std::time::{Duration, Instant};

use graphsmith::sys::{self, CUresult};
use graphsmith::{args, range, CaptureMode, CaptureOptions, Context, LaunchConfig};

const KERNELS: usize = 1000;
const RUNS: usize = 101;
const WARMUP: usize = 5;
const LIMIT: f64 = 1.2;

#[derive(Default)]
struct Times {
    /// begin + 1,000 launches.
    issue: Vec<Duration>,
    /// begin + launches + end (the graph; freeing it afterwards is not counted).
    total: Vec<Duration>,
    /// The first `model()` of the graph (read back and labelled).
    model: Vec<Duration>,
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ok(rc: CUresult, what: &str) {
    assert_eq!(rc, CUresult::CUDA_SUCCESS, "{what}");
}

fn main() -> graphsmith::Result<()> {
    let ctx = Context::new(0)?;
    let module = ctx.builtin_kernels()?;
    let add = module.kernel("gs_add_scalar_f32")?;
    let stream = ctx.stream("bench")?;
    let n = 256u32;
    let mut x = ctx.alloc::<f32>("x", n as usize)?;
    stream.upload(&mut x, &vec![0.0; n as usize])?;
    let cfg = LaunchConfig::for_elements(n);

    // The raw baseline: the same kernel through the driver alone.
    let ptx = std::ffi::CString::new(graphsmith::BUILTIN_PTX).unwrap();
    let (mut raw_module, mut func) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the context is current (Context::new); ptx is NUL-terminated; the module outlives
    // every use of func below and is unloaded at the end.
    unsafe {
        ok(
            sys::cuModuleLoadData(&mut raw_module, ptx.as_ptr() as *const _),
            "load",
        );
        ok(
            sys::cuModuleGetFunction(&mut func, raw_module, c"gs_add_scalar_f32".as_ptr()),
            "function",
        );
    }

    let modes = ["raw driver", "journal off", "journal on"];
    let mut unlabelled = false;
    let mut times: Vec<Times> = modes.iter().map(|_| Times::default()).collect();
    for run in 0..WARMUP + RUNS {
        for (m, mode) in modes.iter().enumerate() {
            let t0 = Instant::now();
            let (issue, total);
            let mut model_time = None;
            if m == 0 {
                let (mut ptr, mut a, mut len) = (x.device_ptr(), 1.0f32, n);
                let mut params = [
                    &mut ptr as *mut u64 as *mut std::ffi::c_void,
                    &mut a as *mut f32 as *mut std::ffi::c_void,
                    &mut len as *mut u32 as *mut std::ffi::c_void,
                ];
                // SAFETY: stream and func are live; params point at live locals matching the
                // kernel's (float*, float, unsigned) parameters; the graph is destroyed.
                unsafe {
                    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
                    ok(sys::cuStreamBeginCapture_v2(stream.raw(), mode), "begin");
                    for _ in 0..KERNELS {
                        let rc = sys::cuLaunchKernel(
                            func,
                            cfg.grid.x,
                            1,
                            1,
                            cfg.block.x,
                            1,
                            1,
                            0,
                            stream.raw(),
                            params.as_mut_ptr(),
                            std::ptr::null_mut(),
                        );
                        ok(rc, "launch");
                    }
                    issue = t0.elapsed();
                    let mut g = std::ptr::null_mut();
                    ok(sys::cuStreamEndCapture(stream.raw(), &mut g), "end");
                    total = t0.elapsed();
                    sys::cuGraphDestroy(g);
                }
            } else {
                let opts = CaptureOptions::new(CaptureMode::Global).journal(*mode == "journal on");
                stream.begin_capture_with(opts, "bench")?;
                {
                    let _layer = range("layer");
                    for _ in 0..KERNELS {
                        stream.launch("add", &add, cfg, args![&mut x, 1.0f32, n])?;
                    }
                }
                issue = t0.elapsed();
                let graph = stream.end_capture()?;
                total = t0.elapsed();
                let t1 = Instant::now();
                let model = graph.try_model()?;
                model_time = Some(t1.elapsed());
                if *mode == "journal on" {
                    let labelled = model
                        .nodes
                        .iter()
                        .filter(|node| {
                            node.label == "add"
                                && node
                                    .provenance
                                    .as_ref()
                                    .is_some_and(|p| p.ranges.iter().any(|r| r == "layer"))
                        })
                        .count();
                    if labelled != KERNELS || model.nodes.len() != KERNELS {
                        unlabelled = true;
                    }
                }
                drop(graph);
            }
            if run >= WARMUP {
                times[m].issue.push(issue);
                times[m].total.push(total);
                times[m].model.extend(model_time);
            }
        }
    }
    // SAFETY: no graph uses the raw module any more.
    unsafe { sys::cuModuleUnload(raw_module) };

    println!("capturing {KERNELS} kernel launches, median of {RUNS} runs:");
    println!(
        "{:<12} {:>14} {:>14} {:>20}",
        "", "issue (ms)", "capture (ms)", "first model() (ms)"
    );
    let mut med = Vec::new();
    for (m, mode) in modes.iter().enumerate() {
        let (i, t) = (median(&mut times[m].issue), median(&mut times[m].total));
        let model = if times[m].model.is_empty() {
            "-".to_string()
        } else {
            format!("{:.3}", median(&mut times[m].model).as_secs_f64() * 1e3)
        };
        println!(
            "{mode:<12} {:>14.3} {:>14.3} {model:>20}",
            i.as_secs_f64() * 1e3,
            t.as_secs_f64() * 1e3
        );
        med.push((i.as_secs_f64(), t.as_secs_f64()));
    }
    let issue_ratio = med[2].0 / med[1].0;
    let total_ratio = med[2].1 / med[1].1;
    println!(
        "journal on / off: issue x{issue_ratio:.3}, whole capture x{total_ratio:.3} (limit x{LIMIT}); \
         vs raw driver: issue x{:.3}, whole capture x{:.3}",
        med[2].0 / med[0].0,
        med[2].1 / med[0].1
    );

    let pairs = 1_000_000;
    let t0 = Instant::now();
    for _ in 0..pairs {
        let _r = range("layer");
    }
    let ns = t0.elapsed().as_nanos() as f64 / pairs as f64;
    println!("a named range (open and close, no NVTX tool attached): {ns:.1} ns");

    if unlabelled {
        println!("a captured graph's model lacked a node labelled from the journal");
    }
    let pass = issue_ratio <= LIMIT && total_ratio <= LIMIT && !unlabelled;
    println!("{}", if pass { "PASS" } else { "FAIL" });
    if !pass {
        std::process::exit(1);
    }
    Ok(())
}
