//! graphsmith and plain CUDA C++ timed turn by turn in one process, for a chain of N small
//! kernels: the C++ side is `bench/cpp/chain_ref.cu`, compiled by nvcc into a shared library
//! and loaded here. Separate processes on one machine differ by up to 2x from run to run
//! (the same C++ binary: 310 µs, then 621 µs for the same updates); within one process, with
//! the two sides alternating rep by rep (C++ first on even reps, graphsmith first on odd), both
//! see the same state of the host. Both run in the device's primary context, and by default on
//! the same device buffer (see `GS_REF_SHARE` in `run`).
//!
//! For each N: eager submit and device time of the chain, replay submit and device time,
//! updating every kernel node of the executable, a whole-graph update, instantiation, and
//! capture (begin to end) of the chain and of a fork/join of four streams, with graphsmith's
//! journal on and off (`capture_us`, `capture_journal_off_us`, `capture_forkjoin_us`,
//! `capture_forkjoin_journal_off_us`). Each kind
//! has its own loop (3 warm-up pairs, then `reps` pairs). Prints one JSON object per N: each
//! side's medians, and the median over reps of the per-rep ratio (graphsmith / C++) and, for
//! replay submit, of the per-rep difference. Results are checked on both sides.
//!
//! `interleaved LIBCHAIN_REF.so [nodes,nodes,...] [reps]` (nodes: 10,100,1000,10000 by default,
//! every size the capture, instantiation and update goals name; reps: 200 for N <= 100, where a
//! rep takes microseconds and the host's noise is largest against it, 30 up to 1,000, 20
//! above). After each N's JSON line, stderr gets the ratios next to their goals (capture at
//! most 1.5x with the journal, 1.1x without, from 100 nodes; instantiation 1.05x; whole-graph
//! update 1.10x): a reading aid, the JSON is the record.
//! With `GS_KERNEL_IMAGE=FILE`, graphsmith's side loads its kernel from that cubin or fatbin
//! instead of the built-in PTX; with `GS_INTO_EXEC=1` its executable is made by `into_exec`
//! (from a graph of its own) instead of `instantiate`.

use std::time::Instant;

use graphsmith::{
    args, CaptureMode, CaptureOptions, Context, DeviceBuffer, Event, Exec, Graph, Kernel,
    LaunchConfig, NodeRef, Stream, UpdatePolicy,
};
use graphsmith_workloads::median;

/// The C++ reference's C API (bench/cpp/chain_ref.cu).
struct CppRef {
    _lib: libloading::Library,
    new: unsafe extern "C" fn(i32) -> *mut std::ffi::c_void,
    new_with: unsafe extern "C" fn(i32, graphsmith::sys::CUstream, u64) -> *mut std::ffi::c_void,
    free: unsafe extern "C" fn(*mut std::ffi::c_void),
    eager: unsafe extern "C" fn(*mut std::ffi::c_void, *mut f64, *mut f64),
    replay: unsafe extern "C" fn(*mut std::ffi::c_void, *mut f64, *mut f64),
    per_node: unsafe extern "C" fn(*mut std::ffi::c_void, f32) -> f64,
    whole: unsafe extern "C" fn(*mut std::ffi::c_void, i32) -> f64,
    instantiate: unsafe extern "C" fn(*mut std::ffi::c_void) -> f64,
    capture: unsafe extern "C" fn(*mut std::ffi::c_void, i32) -> f64,
    check: unsafe extern "C" fn(*mut std::ffi::c_void, f32, f32) -> i32,
}

impl CppRef {
    fn load(path: &str) -> Result<CppRef, libloading::Error> {
        // SAFETY: loading runs the library's initialisers: the CUDA runtime's, which registers
        // the module and touches no state of ours.
        let lib = unsafe { libloading::Library::new(path)? };
        // SAFETY: each symbol has the C signature declared in chain_ref.cu's extern "C" block;
        // the function pointers do not outlive `_lib`, which the struct owns.
        unsafe {
            Ok(CppRef {
                new: *lib.get(b"chain_ref_new\0")?,
                new_with: *lib.get(b"chain_ref_new_with\0")?,
                free: *lib.get(b"chain_ref_free\0")?,
                eager: *lib.get(b"chain_ref_eager\0")?,
                replay: *lib.get(b"chain_ref_replay\0")?,
                per_node: *lib.get(b"chain_ref_per_node_update\0")?,
                whole: *lib.get(b"chain_ref_whole_update\0")?,
                instantiate: *lib.get(b"chain_ref_instantiate\0")?,
                capture: *lib.get(b"chain_ref_capture\0")?,
                check: *lib.get(b"chain_ref_check_replay\0")?,
                _lib: lib,
            })
        }
    }
}

/// The C++ side's chain, freed when dropped (also when a graphsmith call fails midway). Made
/// after graphsmith's side, so it is dropped first: it may use that side's stream and buffer.
struct CppChain<'l> {
    lib: &'l CppRef,
    raw: *mut std::ffi::c_void,
}

impl Drop for CppChain<'_> {
    fn drop(&mut self) {
        // SAFETY: raw came from chain_ref_new(_with) and is freed once, here.
        unsafe { (self.lib.free)(self.raw) }
    }
}

/// graphsmith's side: the same chain, built twice (adding 0.5 and 0.25) with the builder.
struct Side {
    add: Kernel,
    x: DeviceBuffer<f32>,
    stream: Stream,
    /// The side streams of the fork/join capture.
    sides: Vec<Stream>,
    start: Event,
    end: Event,
    graphs: [Graph; 2],
    nodes: Vec<NodeRef>,
    exec: Exec,
    n: usize,
}

const LEN: u32 = 256;
/// Branches of the fork/join capture (as `chain_ref_capture`).
const BRANCHES: usize = 4;

fn build(
    ctx: &Context,
    add: &Kernel,
    x: &mut DeviceBuffer<f32>,
    n: usize,
    a: f32,
) -> graphsmith::Result<(Graph, Vec<NodeRef>)> {
    let cfg = LaunchConfig::for_elements(LEN);
    let mut g = ctx.graph("chain")?;
    let mut nodes: Vec<NodeRef> = Vec::with_capacity(n);
    for i in 0..n {
        let deps: Vec<&NodeRef> = nodes.last().into_iter().collect();
        let label = if i == 0 { "first" } else { "add" };
        nodes.push(g.kernel(label, add, cfg, args![&mut *x, a, LEN], &deps)?);
    }
    Ok((g, nodes))
}

impl Side {
    fn new(ctx: &Context, n: usize, image: Option<&[u8]>) -> graphsmith::Result<Side> {
        // `image`: a cubin or fatbin of kernels/graphsmith_kernels.cu to load instead of the
        // built-in PTX (GS_KERNEL_IMAGE), to tell the kernel's code apart from everything else.
        let module = match image {
            Some(image) => ctx.load_image("GS_KERNEL_IMAGE", image)?,
            None => ctx.builtin_kernels()?,
        };
        let add = module.kernel("gs_add_scalar_f32")?;
        let mut x = ctx.alloc::<f32>("x", LEN as usize)?;
        let stream = ctx.stream("interleaved")?;
        stream.upload(&mut x, &[1.0; LEN as usize])?;
        let (g0, nodes) = build(ctx, &add, &mut x, n, 0.5)?;
        let (g1, _) = build(ctx, &add, &mut x, n, 0.25)?;
        // GS_INTO_EXEC: the executable is instantiated from a graph of its own without the
        // template shared with another graph (`into_exec`), to tell sharing's effect on launches apart.
        let (mut exec, nodes) = if std::env::var_os("GS_INTO_EXEC").is_some() {
            let (own, own_nodes) = build(ctx, &add, &mut x, n, 0.5)?;
            (own.into_exec()?, own_nodes)
        } else {
            (g0.instantiate()?, nodes)
        };
        exec.upload(&stream)?;
        exec.launch(&stream)?;
        stream.synchronize()?;
        let sides = (1..BRANCHES)
            .map(|k| ctx.stream(&format!("side{k}")))
            .collect::<graphsmith::Result<Vec<_>>>()?;
        Ok(Side {
            sides,
            start: ctx.event("start", true)?,
            end: ctx.event("end", true)?,
            add,
            x,
            stream,
            graphs: [g0, g1],
            nodes,
            exec,
            n,
        })
    }

    /// Host submit time and device time (µs) of `work` on the idle stream.
    fn timed(&mut self, replay: bool) -> graphsmith::Result<(f64, f64)> {
        self.stream.record(&self.start)?;
        let t = Instant::now();
        if replay {
            self.exec.launch(&self.stream)?;
        } else {
            let cfg = LaunchConfig::for_elements(LEN);
            for _ in 0..self.n {
                self.stream
                    .launch("add", &self.add, cfg, args![&mut self.x, 0.5f32, LEN])?;
            }
        }
        let submit = us(t);
        self.stream.record(&self.end)?;
        self.end.synchronize()?;
        Ok((submit, self.end.elapsed_ms_since(&self.start)? as f64 * 1e3))
    }

    fn per_node(&mut self, a: f32) -> graphsmith::Result<f64> {
        let cfg = LaunchConfig::for_elements(LEN);
        let t = Instant::now();
        {
            let mut batch = self.exec.batch()?;
            for node in &self.nodes {
                batch.set_kernel(node, cfg, args![&mut self.x, a, LEN])?;
            }
        }
        Ok(us(t))
    }

    fn whole(&mut self, which: usize) -> graphsmith::Result<f64> {
        let t = Instant::now();
        self.exec
            .update(&self.graphs[which], UpdatePolicy::InPlace)?;
        Ok(us(t))
    }

    fn instantiate(&mut self) -> graphsmith::Result<f64> {
        let t = Instant::now();
        let fresh = self.graphs[0].instantiate()?;
        let elapsed = us(t);
        drop(fresh);
        Ok(elapsed)
    }

    /// Host time of capturing the workload, from `begin_capture` to `end_capture` (the graph
    /// is dropped untimed), as `chain_ref_capture` does in C++ from `cudaStreamBeginCapture` to
    /// `cudaStreamEndCapture`; graphsmith's figure includes making the `Graph` that
    /// `end_capture` returns (no read-back: the model is made when first asked for), its
    /// counterpart of the `cudaGraph_t` C++ gets, and building each launch's `Args`: the chain, or the fork/join
    /// (a root kernel, three side streams joined to the stream, floor(n/4) kernels on each of
    /// the four, the sides joined back, a final kernel); with the journal on or off.
    fn capture(&mut self, forkjoin: bool, journal: bool) -> graphsmith::Result<f64> {
        let cfg = LaunchConfig::for_elements(LEN);
        let options = CaptureOptions::new(CaptureMode::ThreadLocal).journal(journal);
        let (main, add, x) = (&self.stream, &self.add, &mut self.x);
        let t = Instant::now();
        main.begin_capture_with(options, "capture")?;
        let issued = (|| -> graphsmith::Result<()> {
            if !forkjoin {
                for _ in 0..self.n {
                    main.launch("add", add, cfg, args![&mut *x, 0.5f32, LEN])?;
                }
                return Ok(());
            }
            main.launch("root", add, cfg, args![&mut *x, 0.5f32, LEN])?;
            for side in &self.sides {
                side.join(main)?;
            }
            for k in 0..BRANCHES {
                let s = if k == 0 { main } else { &self.sides[k - 1] };
                for _ in 0..self.n / BRANCHES {
                    s.launch("branch", add, cfg, args![&mut *x, 0.5f32, LEN])?;
                }
            }
            for side in &self.sides {
                main.join(side)?;
            }
            main.launch("join", add, cfg, args![&mut *x, 0.5f32, LEN])
        })();
        let graph = main.end_capture();
        let elapsed = us(t);
        issued?;
        drop(graph?);
        Ok(elapsed)
    }

    fn check(&mut self, start: f32, want: f32) -> graphsmith::Result<bool> {
        self.stream.upload(&mut self.x, &[start; LEN as usize])?;
        self.exec.launch(&self.stream)?;
        Ok(self.stream.download(&self.x)?.iter().all(|&v| v == want))
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Pairs of (C++, graphsmith) figures, one per rep.
#[derive(Default)]
struct Pairs(Vec<(f64, f64)>);

impl Pairs {
    fn push(&mut self, rep: usize, warmup: usize, pair: (f64, f64)) {
        if rep >= warmup {
            self.0.push(pair);
        }
    }

    /// The median over reps of the per-rep ratio graphsmith / C++.
    fn ratio(&self) -> f64 {
        let mut ratio: Vec<f64> = self.0.iter().map(|p| p.1 / p.0).collect();
        median(&mut ratio)
    }

    /// `"name": {"cpp": .., "graphsmith": .., "ratio": .., "diff": ..}`, each figure divided
    /// by `per`; ratio and diff are medians of the per-rep values.
    fn json(&self, name: &str, per: f64) -> String {
        let mut cpp: Vec<f64> = self.0.iter().map(|p| p.0 / per).collect();
        let mut gs: Vec<f64> = self.0.iter().map(|p| p.1 / per).collect();
        let mut diff: Vec<f64> = self.0.iter().map(|p| (p.1 - p.0) / per).collect();
        format!(
            "\"{name}\": {{\"cpp\": {:.4}, \"graphsmith\": {:.4}, \"ratio\": {:.4}, \"diff\": {:.4}}}",
            median(&mut cpp),
            median(&mut gs),
            self.ratio(),
            median(&mut diff)
        )
    }
}

/// Runs `cpp` and `gs` alternately (C++ first on even reps), `warmup + reps` times.
fn alternate(
    warmup: usize,
    reps: usize,
    mut cpp: impl FnMut(usize) -> (f64, f64),
    mut gs: impl FnMut(usize) -> graphsmith::Result<(f64, f64)>,
) -> graphsmith::Result<(Pairs, Pairs)> {
    let (mut first, mut second) = (Pairs::default(), Pairs::default());
    for r in 0..warmup + reps {
        let (c, g) = if r % 2 == 0 {
            let c = cpp(r);
            (c, gs(r)?)
        } else {
            let g = gs(r)?;
            (cpp(r), g)
        };
        first.push(r, warmup, (c.0, g.0));
        second.push(r, warmup, (c.1, g.1));
    }
    Ok((first, second))
}

fn run(
    ctx: &Context,
    lib: &CppRef,
    n: usize,
    reps: usize,
    image: Option<&[u8]>,
    share: &str,
) -> graphsmith::Result<String> {
    let warmup = 3;
    let mut gs = Side::new(ctx, n, image)?;
    // What the C++ side borrows from graphsmith's (GS_REF_SHARE=buffer|stream|both|none; default
    // buffer). The buffer, because a chain of kernels this small is sensitive to where its 1 KB
    // lies: on the H200 the same C++ chain took 0.973 µs per node on its own buffer and 1.005 µs
    // on graphsmith's, as fast as graphsmith's own chain on it. Sharing it compares the two
    // ways of submitting the same work, not two addresses.
    let stream = if share == "stream" || share == "both" {
        gs.stream.raw()
    } else {
        std::ptr::null_mut()
    };
    let buffer = if share == "buffer" || share == "both" {
        gs.x.device_ptr()
    } else {
        0
    };
    // SAFETY: chain_ref_new(_with) returns a live handle (it exits on any CUDA error); it is
    // used only through the library's functions below and freed once, when `cpp_chain` drops,
    // before `gs` (whose stream and buffer it may use).
    let cpp_chain = CppChain {
        lib,
        raw: unsafe {
            if share == "none" {
                (lib.new)(n as i32)
            } else {
                (lib.new_with)(n as i32, stream, buffer)
            }
        },
    };
    let c = cpp_chain.raw;
    let step = |r: usize| if r % 2 == 1 { 0.5f32 } else { 0.25f32 };
    // SAFETY (every call on `c` below): `c` is the live handle made above.
    let timed_cpp = |f: unsafe extern "C" fn(*mut std::ffi::c_void, *mut f64, *mut f64)| {
        let (mut s, mut d) = (0.0, 0.0);
        unsafe { f(c, &mut s, &mut d) };
        (s, d)
    };
    let (eager_submit, eager_device) =
        alternate(warmup, reps, |_| timed_cpp(lib.eager), |_| gs.timed(false))?;
    let (replay_submit, replay_device) =
        alternate(warmup, reps, |_| timed_cpp(lib.replay), |_| gs.timed(true))?;
    let (per_node, _) = alternate(
        warmup,
        reps,
        |r| (unsafe { (lib.per_node)(c, step(r)) }, 0.0),
        |r| Ok((gs.per_node(step(r))?, 0.0)),
    )?;
    let (whole, _) = alternate(
        warmup,
        reps,
        |r| (unsafe { (lib.whole)(c, (r % 2) as i32 ^ 1) }, 0.0),
        |r| Ok((gs.whole((r % 2) ^ 1)?, 0.0)),
    )?;
    let (instantiate, _) = alternate(
        warmup,
        reps,
        |_| (unsafe { (lib.instantiate)(c) }, 0.0),
        |_| Ok((gs.instantiate()?, 0.0)),
    )?;
    // Capture, chain and fork/join, journal on and off (C++ has no journal: the same figure).
    let mut captures = Vec::new();
    let mut capture_ratios = Vec::new();
    for (forkjoin, journal, name) in [
        (false, true, "capture_us"),
        (false, false, "capture_journal_off_us"),
        (true, true, "capture_forkjoin_us"),
        (true, false, "capture_forkjoin_journal_off_us"),
    ] {
        let (pairs, _) = alternate(
            warmup,
            reps,
            |_| (unsafe { (lib.capture)(c, forkjoin as i32) }, 0.0),
            |_| Ok((gs.capture(forkjoin, journal)?, 0.0)),
        )?;
        captures.push(pairs.json(name, 1.0));
        capture_ratios.push(pairs.ratio());
    }
    let goal = |ratio: f64, limit: f64| {
        let verdict = if ratio <= limit { "ok" } else { "over" };
        format!("{ratio:.3}x (goal {limit}x: {verdict})")
    };
    let capture_goal = |ratio: f64, limit: f64| {
        if n >= 100 {
            goal(ratio, limit)
        } else {
            format!("{ratio:.3}x (no goal below 100 nodes)")
        }
    };
    eprintln!(
        "interleaved: N={n}: capture chain {} journal on, {} off; fork/join {} on, {} off; \
         instantiate {}; whole-graph update {}",
        capture_goal(capture_ratios[0], 1.5),
        capture_goal(capture_ratios[1], 1.1),
        capture_goal(capture_ratios[2], 1.5),
        capture_goal(capture_ratios[3], 1.1),
        goal(instantiate.ratio(), 1.05),
        goal(whole.ratio(), 1.10),
    );
    // The last whole-graph update chose graph ((last % 2) ^ 1): 0 adds 0.5, 1 adds 0.25.
    let last = warmup + reps - 1;
    let step_last = if (last % 2) ^ 1 == 0 { 0.5f32 } else { 0.25 };
    let mut want = 1.0f32;
    for _ in 0..n {
        want += step_last;
    }
    let cpp_ok = unsafe { (lib.check)(c, 1.0, want) } == 1;
    let gs_ok = gs.check(1.0, want)?;
    let nf = n as f64;
    Ok(format!(
        "{{\"impl\": \"interleaved\", \"workload\": \"chain\", \"nodes\": {n}, \"reps\": {reps}, \"shared\": \"{share}\", {}, {}, {}, {}, {}, {}, {}, {}, \"correct_cpp\": {cpp_ok}, \"correct_graphsmith\": {gs_ok}}}",
        eager_submit.json("eager_submit_us", 1.0),
        eager_device.json("eager_device_per_node_us", nf),
        replay_submit.json("replay_submit_us", 1.0),
        replay_device.json("replay_device_per_node_us", nf),
        per_node.json("per_node_update_us", 1.0),
        whole.json("whole_graph_update_us", 1.0),
        instantiate.json("instantiate_us", 1.0),
        captures.join(", "),
    ))
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let Some(path) = argv.next() else {
        eprintln!("usage: interleaved LIBCHAIN_REF.so [nodes,nodes,...] [reps]");
        std::process::exit(2);
    };
    let sizes: Vec<usize> = argv
        .next()
        .unwrap_or_else(|| "10,100,1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect();
    let reps: Option<usize> = argv.next().and_then(|v| v.parse().ok());
    let result = (|| -> Result<(), String> {
        let ctx = Context::new(0).map_err(|e| e.to_string())?;
        let lib = CppRef::load(&path).map_err(|e| format!("loading {path}: {e}"))?;
        let share = std::env::var("GS_REF_SHARE").unwrap_or_else(|_| "buffer".into());
        if !["buffer", "stream", "both", "none"].contains(&share.as_str()) {
            return Err(format!(
                "GS_REF_SHARE={share}: expected buffer, stream, both or none"
            ));
        }
        let image = match std::env::var_os("GS_KERNEL_IMAGE") {
            Some(p) => Some(std::fs::read(&p).map_err(|e| format!("reading {p:?}: {e}"))?),
            None => None,
        };
        for &n in &sizes {
            let reps = reps
                .unwrap_or(match n {
                    0..=100 => 200,
                    101..=1000 => 30,
                    _ => 20,
                })
                .max(1);
            eprintln!("interleaved: chain of {n}, {reps} reps");
            println!(
                "{}",
                run(&ctx, &lib, n, reps, image.as_deref(), &share).map_err(|e| e.to_string())?
            );
        }
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("interleaved: {e}");
        std::process::exit(1);
    }
}
