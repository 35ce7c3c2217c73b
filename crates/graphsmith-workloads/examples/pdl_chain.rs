//! A chain of N small kernels replayed with and without programmatic dependent launch (PDL),
//! graphsmith and plain CUDA C++ timed turn by turn in one process (as `interleaved` does). The
//! C++ side is `bench/cpp/pdl_chain_ref.cu`, compiled by nvcc into a shared library and loaded
//! here; both sides capture the chain from a stream (with PDL, every launch after the first
//! carries the programmatic attribute, so the kernels are joined by programmatic edges) and
//! replay it on a buffer of 256 floats. graphsmith's kernels are `gs_add_scalar_f32` and, opted
//! in with `Kernel::programmatic`, `gs_pdl_add_scalar_f32`; C++'s are the same sources.
//!
//! For each N and each of PDL off and on: the replay's device time per node on each side
//! (CUDA events around one replay; 3 warm-up pairs, then `reps` pairs, C++ first on even reps),
//! their medians and the median of the per-rep ratio (graphsmith / C++). Results are checked
//! on both sides, and graphsmith's captured graph must hold N - 1 programmatic edges with PDL
//! and none without. One JSON object per line.
//!
//! `pdl_chain LIBPDL_CHAIN_REF.so [nodes,nodes,...] [reps]` (default 100,1000 and 30).

use graphsmith::model::EdgeType;
use graphsmith::{args, CaptureMode, Context, Kernel, LaunchConfig};
use graphsmith_workloads::median;

type Raw = *mut std::ffi::c_void;

/// The C++ reference's C API (bench/cpp/pdl_chain_ref.cu).
struct CppRef {
    _lib: libloading::Library,
    new: unsafe extern "C" fn(i32, i32, graphsmith::sys::CUstream) -> Raw,
    free: unsafe extern "C" fn(Raw, i32),
    replay: unsafe extern "C" fn(Raw) -> f64,
    check: unsafe extern "C" fn(Raw, f32, f32) -> i32,
}

impl CppRef {
    fn load(path: &str) -> Result<CppRef, libloading::Error> {
        // SAFETY: loading runs the library's initialisers: the CUDA runtime's, which registers
        // the module and touches no state of ours.
        let lib = unsafe { libloading::Library::new(path)? };
        // SAFETY: each symbol has the C signature declared in pdl_chain_ref.cu's extern "C"
        // block; the function pointers do not outlive `_lib`, which the struct owns.
        unsafe {
            Ok(CppRef {
                new: *lib.get(b"pdl_ref_new\0")?,
                free: *lib.get(b"pdl_ref_free\0")?,
                replay: *lib.get(b"pdl_ref_replay\0")?,
                check: *lib.get(b"pdl_ref_check\0")?,
                _lib: lib,
            })
        }
    }
}

/// The C++ side's chain, freed when dropped.
struct CppChain<'l> {
    lib: &'l CppRef,
    raw: Raw,
}

impl Drop for CppChain<'_> {
    fn drop(&mut self) {
        // SAFETY: raw came from pdl_ref_new with its own stream and is freed once, here.
        unsafe { (self.lib.free)(self.raw, 1) }
    }
}

const LEN: usize = 256;

fn run(
    cpp: &CppRef,
    ctx: &Context,
    kernels: (&Kernel, &Kernel),
    n: usize,
    pdl: bool,
    reps: usize,
) -> graphsmith::Result<String> {
    let kernel = if pdl { kernels.1 } else { kernels.0 };
    let stream = ctx.stream("pdl-chain")?;
    let mut x = ctx.alloc::<f32>("x", LEN)?;
    let cfg = LaunchConfig::for_elements(LEN as u32);
    stream.begin_capture(CaptureMode::ThreadLocal, "pdl-chain")?;
    for _ in 0..n {
        stream.launch("add", kernel, cfg, args![&mut x, 0.5f32, LEN as u32])?;
    }
    let graph = stream.end_capture()?;
    let programmatic = graph
        .model()
        .edges
        .iter()
        .filter(|e| e.ty == EdgeType::Programmatic)
        .count();
    let want_edges = if pdl { n - 1 } else { 0 };
    let mut exec = graph.instantiate()?;
    // Both sides checked: 1.0 plus 0.5 per node, exact in f32 for these N.
    let want = 1.0 + 0.5 * n as f32;
    stream.upload(&mut x, &[1.0; LEN])?;
    exec.launch(&stream)?;
    let ours_ok = stream.download(&x)?.iter().all(|&v| v == want);
    // SAFETY: a null stream makes the reference create its own; the chain is freed by CppChain.
    let theirs = CppChain {
        lib: cpp,
        raw: unsafe { (cpp.new)(n as i32, pdl as i32, std::ptr::null_mut()) },
    };
    // SAFETY: theirs.raw is a live chain of this library.
    let theirs_ok = unsafe { (cpp.check)(theirs.raw, 1.0, want) } == 1;
    let (a, b) = (ctx.event("start", true)?, ctx.event("end", true)?);
    let mut ours = Vec::new();
    let mut cpp_us = Vec::new();
    let mut ratios = Vec::new();
    for rep in 0..reps + 3 {
        let mut time_ours = || -> graphsmith::Result<f64> {
            stream.record(&a)?;
            exec.launch(&stream)?;
            stream.record(&b)?;
            b.synchronize()?;
            Ok(b.elapsed_ms_since(&a)? as f64 * 1e3)
        };
        // SAFETY: theirs.raw is a live chain of this library.
        let time_cpp = || unsafe { (cpp.replay)(theirs.raw) };
        let (o, c) = if rep % 2 == 0 {
            let c = time_cpp();
            (time_ours()?, c)
        } else {
            let o = time_ours()?;
            (o, time_cpp())
        };
        if rep >= 3 {
            ours.push(o / n as f64);
            cpp_us.push(c / n as f64);
            ratios.push(o / c);
        }
    }
    Ok(format!(
        "{{\"impl\": \"pdl_chain\", \"nodes\": {n}, \"pdl\": {pdl}, \"reps\": {reps}, \
         \"graphsmith_replay_device_per_node_us\": {:.4}, \"cpp_replay_device_per_node_us\": {:.4}, \
         \"ratio_median\": {:.4}, \"programmatic_edges\": {programmatic}, \"correct\": {}}}",
        median(&mut ours),
        median(&mut cpp_us),
        median(&mut ratios),
        ours_ok && theirs_ok && programmatic == want_edges
    ))
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let Some(lib) = argv.get(1) else {
        eprintln!("usage: pdl_chain LIBPDL_CHAIN_REF.so [nodes,nodes,...] [reps]");
        std::process::exit(2);
    };
    let nodes: Vec<usize> = argv
        .get(2)
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1000]);
    let reps: usize = argv.get(3).and_then(|s| s.parse().ok()).unwrap_or(30);
    let cpp = match CppRef::load(lib) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pdl_chain: cannot load {lib}: {e}");
            std::process::exit(1);
        }
    };
    let result = (|| -> graphsmith::Result<()> {
        let ctx = Context::new(0)?;
        let module = ctx.builtin_kernels()?;
        let plain = module.kernel("gs_add_scalar_f32")?;
        let pdl = module.kernel("gs_pdl_add_scalar_f32")?.programmatic()?;
        for &n in &nodes {
            for with_pdl in [false, true] {
                println!(
                    "{}",
                    run(&cpp, &ctx, (&plain, &pdl), n.max(1), with_pdl, reps)?
                );
            }
        }
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("pdl_chain: {e}");
        std::process::exit(1);
    }
}
