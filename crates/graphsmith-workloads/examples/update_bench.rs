//! graphsmith's side of the update benchmark (issue 4), the same work as
//! `bench/cpp/update_bench.cu`: a chain of N small kernels; host time (medians) of updating every
//! kernel node of the executable, a whole-graph update, and a fresh instantiation; then a cache
//! hit plus launch against a bare executable launch. Prints one JSON object.
//!
//! `update_bench [nodes] [reps]`

use std::time::Instant;

use graphsmith::{
    args, CacheConfig, CaptureMode, Context, DeviceBuffer, Graph, Kernel, LaunchConfig, NodeRef,
    Oversize, Scope, Stream, UpdatePolicy, Workload,
};
use graphsmith_workloads::median;

fn build(
    ctx: &Context,
    add: &Kernel,
    x: &mut DeviceBuffer<f32>,
    n: usize,
    a: f32,
) -> graphsmith::Result<(Graph, Vec<NodeRef>)> {
    let len = x.len() as u32;
    let cfg = LaunchConfig::for_elements(len);
    let mut g = ctx.graph("chain")?;
    let mut nodes: Vec<NodeRef> = Vec::with_capacity(n);
    for i in 0..n {
        let deps: Vec<&NodeRef> = nodes.last().into_iter().collect();
        let node = g.kernel(
            if i == 0 { "first" } else { "add" },
            add,
            cfg,
            args![&mut *x, a, len],
            &deps,
        )?;
        nodes.push(node);
    }
    Ok((g, nodes))
}

struct Small {
    add: Kernel,
    x: DeviceBuffer<f32>,
}

impl Workload<usize> for Small {
    fn issue(
        &mut self,
        stream: &Stream,
        _shape: &usize,
        _scope: &mut Scope<'_>,
    ) -> graphsmith::Result<()> {
        let len = self.x.len() as u32;
        stream.launch(
            "add",
            &self.add,
            LaunchConfig::for_elements(len),
            args![&mut self.x, 1.0f32, len],
        )
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn main() -> graphsmith::Result<()> {
    let mut argv = std::env::args().skip(1);
    let n: usize = argv.next().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let reps: usize = argv.next().and_then(|v| v.parse().ok()).unwrap_or(20);
    let ctx = Context::new(0)?;
    let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let stream = ctx.stream("bench")?;
    let mut x = ctx.alloc::<f32>("x", 256)?;
    stream.upload(&mut x, &[1.0; 256])?;
    let (ga, nodes) = build(&ctx, &add, &mut x, n, 0.5)?;
    let (gb, _) = build(&ctx, &add, &mut x, n, 0.25)?;
    let mut exec = ga.instantiate()?;
    exec.upload(&stream)?;
    exec.launch(&stream)?;
    stream.synchronize()?;
    let cfg = LaunchConfig::for_elements(256);

    // Each kind of update in its own loop (as bench/cpp/update_bench.cu does), the first three
    // rounds as warm-up. Then per-node updates that each follow a whole-graph update: the
    // first per-node update after one copies the model the executable shares with the graph.
    let value = |r: usize| if r % 2 == 1 { 0.5f32 } else { 0.25f32 };
    let (mut per_node, mut whole, mut inst, mut alternating) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..reps + 3 {
        let v = value(r);
        let t = Instant::now();
        let mut batch = exec.batch()?;
        for node in &nodes {
            batch.set_kernel(node, cfg, args![&mut x, v, 256u32])?;
        }
        if r >= 3 {
            per_node.push(us(t));
        }
    }
    for r in 0..reps + 3 {
        let t = Instant::now();
        exec.update(if r % 2 == 1 { &ga } else { &gb }, UpdatePolicy::InPlace)?;
        if r >= 3 {
            whole.push(us(t));
        }
    }
    for r in 0..reps + 3 {
        let t = Instant::now();
        let fresh = ga.instantiate()?;
        let t_inst = us(t);
        drop(fresh);
        if r >= 3 {
            inst.push(t_inst);
        }
    }
    for r in 0..reps + 3 {
        exec.update(if r % 2 == 1 { &ga } else { &gb }, UpdatePolicy::InPlace)?;
        let v = value(r);
        let t = Instant::now();
        let mut batch = exec.batch()?;
        for node in &nodes {
            batch.set_kernel(node, cfg, args![&mut x, v, 256u32])?;
        }
        if r >= 3 {
            alternating.push(us(t));
        }
    }
    // The driver's own cost: the same updates made directly with the driver, no bookkeeping,
    // naming the kernel as graphsmith's nodes do (the library kernel) and as its context
    // function; then whole-graph updates with cuGraphExecUpdate alone. They leave graphsmith's
    // template behind, so they run last, before a whole-graph update through graphsmith.
    let handles: Vec<graphsmith::sys::CUgraphNode> = {
        let template = exec.template()?;
        nodes.iter().filter_map(|n| template.raw_node(n)).collect()
    };
    let raw_per_node = |func: graphsmith::sys::CUfunction, kern: graphsmith::sys::CUkernel| {
        let mut times = Vec::new();
        for r in 0..reps + 3 {
            let (mut v, mut len, mut ptr) = (value(r), 256u32, x.device_ptr());
            let t = Instant::now();
            for &h in &handles {
                let mut params: [*mut std::ffi::c_void; 3] = [
                    &mut ptr as *mut u64 as *mut _,
                    &mut v as *mut f32 as *mut _,
                    &mut len as *mut u32 as *mut _,
                ];
                let p = graphsmith::sys::CUDA_KERNEL_NODE_PARAMS {
                    func,
                    gridDimX: 1,
                    gridDimY: 1,
                    gridDimZ: 1,
                    blockDimX: 256,
                    blockDimY: 1,
                    blockDimZ: 1,
                    sharedMemBytes: 0,
                    kernelParams: params.as_mut_ptr(),
                    extra: std::ptr::null_mut(),
                    kern,
                    ctx: std::ptr::null_mut(),
                };
                // SAFETY: exec and h are live (h is a node of the graph exec was instantiated
                // from); the three argument pointers match the kernel's parameters and outlive
                // the call.
                let rc = unsafe {
                    graphsmith::sys::cuGraphExecKernelNodeSetParams_v2(exec.raw(), h, &p)
                };
                assert_eq!(rc, graphsmith::sys::CUresult::CUDA_SUCCESS);
            }
            if r >= 3 {
                times.push(us(t));
            }
        }
        median(&mut times)
    };
    let raw_kernel = raw_per_node(std::ptr::null_mut(), add.raw_kernel());
    let raw_function = raw_per_node(add.raw(), std::ptr::null_mut());
    let mut raw_whole = Vec::new();
    for r in 0..reps + 3 {
        let target = if r % 2 == 1 { ga.raw() } else { gb.raw() };
        // SAFETY: plain C struct of an enum with a zero variant and two handles.
        let mut info: graphsmith::sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        let t = Instant::now();
        // SAFETY: exec and both graphs are live; the graphs have the executable's topology.
        let rc = unsafe { graphsmith::sys::cuGraphExecUpdate_v2(exec.raw(), target, &mut info) };
        let elapsed = us(t);
        assert_eq!(rc, graphsmith::sys::CUresult::CUDA_SUCCESS);
        if r >= 3 {
            raw_whole.push(elapsed);
        }
    }

    // The last whole-graph update sets every node to `a` of its graph.
    let r = reps + 2;
    exec.update(if r % 2 == 1 { &ga } else { &gb }, UpdatePolicy::InPlace)?;
    // Correctness after all updates: the last whole-graph update set every node to `a`.
    stream.upload(&mut x, &[1.0; 256])?;
    exec.launch(&stream)?;
    let last = value(r);
    let mut want = 1.0f32;
    for _ in 0..n {
        want += last;
    }
    let got = stream.download(&x)?;
    let correct = got.iter().all(|&v| v == want);

    // A cache hit plus launch, against a bare launch of the same executable kind.
    let small = Small {
        add: add.clone(),
        x: ctx.alloc::<f32>("small", 256)?,
    };
    let config = CacheConfig {
        buckets: vec![1, 2, 4],
        budget_bytes: u64::MAX,
        warmup_runs: 1,
        mode: CaptureMode::ThreadLocal,
        oversize: Oversize::Error,
    };
    let mut cache = graphsmith::GraphCache::new(&ctx, config, small)?;
    cache.run(&3)?;
    let cache_stream_exec_launch = {
        let (mut bare_graph_exec, ()) = {
            let mut y = ctx.alloc::<f32>("bare", 256)?;
            let (g, ()) = stream.capture(CaptureMode::ThreadLocal, "bare", |s| {
                s.launch("add", &add, cfg, args![&mut y, 1.0f32, 256u32])
            })?;
            (g.into_exec()?, ())
        };
        let batch = 100;
        let (mut bare, mut hit) = (Vec::new(), Vec::new());
        for _ in 0..50 {
            stream.synchronize()?;
            let t = Instant::now();
            for _ in 0..batch {
                bare_graph_exec.launch(&stream)?;
            }
            bare.push(us(t) / batch as f64);
            stream.synchronize()?;
            cache.stream().synchronize()?;
            let t = Instant::now();
            for _ in 0..batch {
                cache.run(&3)?;
            }
            hit.push(us(t) / batch as f64);
            cache.stream().synchronize()?;
        }
        (median(&mut bare), median(&mut hit))
    };
    let (bare_launch, cache_hit_launch) = cache_stream_exec_launch;
    println!(
        "{{\"impl\": \"graphsmith\", \"nodes\": {n}, \"per_node_update_us\": {:.1}, \"whole_graph_update_us\": {:.1}, \"instantiate_us\": {:.1}, \"bare_launch_us\": {bare_launch:.2}, \"cache_hit_launch_us\": {cache_hit_launch:.2}, \"per_node_after_whole_update_us\": {:.1}, \"per_node_raw_driver_us\": {raw_kernel:.1}, \"per_node_raw_driver_function_us\": {raw_function:.1}, \"whole_graph_raw_driver_us\": {:.1}, \"correct\": {correct}}}",
        median(&mut per_node),
        median(&mut whole),
        median(&mut inst),
        median(&mut alternating),
        median(&mut raw_whole)
    );
    Ok(())
}
