//! Driver-only A/B experiment (no graphsmith bookkeeping between driver calls), to tell apart
//! what the driver costs for the way graphsmith makes graphs from what graphsmith adds. For a
//! chain of N kernel nodes of the same PTX kernel (`gs_add_scalar_f32`, loaded as a library):
//!
//! - naming: nodes built naming the library kernel (`kern`, graphsmith's builder) or its
//!   function in the context (`func`);
//! - copy: the executable instantiated from the graph itself, or from a `cuGraphClone` copy
//!   (what `Graph::instantiate` does);
//! - captured: the chain captured from a stream with `cuLaunchKernel` naming the function (what
//!   graphsmith's stream launches do).
//!
//! For each way: instantiate, update every node (naming `func`, then `kern`), whole-graph
//! update, and replay device time per node (CUDA events). Each measurement has its own loop
//! (3 warm-up rounds, medians of `reps`); the ways run in a rotated order in each of 3 rounds and
//! the medians of the rounds are printed, one JSON object per way.
//!
//! `driver_ab [nodes] [reps]`

use std::ffi::c_void;
use std::time::Instant;

use graphsmith::sys;
use graphsmith_workloads::median;

fn ok(rc: sys::CUresult, what: &str) {
    assert_eq!(rc, sys::CUresult::CUDA_SUCCESS, "{what}");
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// The kernel's arguments: (float* x, float a, unsigned n).
struct Params {
    ptr: u64,
    a: f32,
    len: u32,
}

impl Params {
    fn node(
        &mut self,
        func: sys::CUfunction,
        kern: sys::CUkernel,
        pointers: &mut [*mut c_void; 3],
    ) -> sys::CUDA_KERNEL_NODE_PARAMS {
        *pointers = [
            &mut self.ptr as *mut u64 as *mut c_void,
            &mut self.a as *mut f32 as *mut c_void,
            &mut self.len as *mut u32 as *mut c_void,
        ];
        sys::CUDA_KERNEL_NODE_PARAMS {
            func,
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 256,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            kernelParams: pointers.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern,
            ctx: std::ptr::null_mut(),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Make {
    Built { name_kernel: bool },
    Captured,
}

#[derive(Clone, Copy)]
struct Way {
    name: &'static str,
    make: Make,
    clone: bool,
}

struct Setup {
    func: sys::CUfunction,
    kern: sys::CUkernel,
    ptr: u64,
    stream: sys::CUstream,
    n: usize,
}

impl Setup {
    /// A chain of `n` nodes made `make`'s way; its node handles in chain order.
    ///
    /// # Safety
    /// The context is current; the handles in `self` are live.
    unsafe fn chain(&self, make: Make, a: f32) -> (sys::CUgraph, Vec<sys::CUgraphNode>) {
        let mut g = std::ptr::null_mut();
        match make {
            Make::Built { name_kernel } => {
                ok(unsafe { sys::cuGraphCreate(&mut g, 0) }, "cuGraphCreate");
                let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(self.n);
                let (func, kern) = if name_kernel {
                    (std::ptr::null_mut(), self.kern)
                } else {
                    (self.func, std::ptr::null_mut())
                };
                for _ in 0..self.n {
                    let mut p = Params {
                        ptr: self.ptr,
                        a,
                        len: 256,
                    };
                    let mut pointers = [std::ptr::null_mut(); 3];
                    let params = p.node(func, kern, &mut pointers);
                    let mut node = std::ptr::null_mut();
                    let deps = nodes.last().map_or(std::ptr::null(), |d| d as *const _);
                    let count = usize::from(!nodes.is_empty());
                    ok(
                        unsafe { sys::cuGraphAddKernelNode_v2(&mut node, g, deps, count, &params) },
                        "cuGraphAddKernelNode",
                    );
                    nodes.push(node);
                }
                (g, nodes)
            }
            Make::Captured => {
                let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
                ok(
                    unsafe { sys::cuStreamBeginCapture_v2(self.stream, mode) },
                    "cuStreamBeginCapture",
                );
                for _ in 0..self.n {
                    let mut p = Params {
                        ptr: self.ptr,
                        a,
                        len: 256,
                    };
                    let mut pointers = [std::ptr::null_mut(); 3];
                    let _ = p.node(self.func, std::ptr::null_mut(), &mut pointers);
                    ok(
                        unsafe {
                            sys::cuLaunchKernel(
                                self.func,
                                1,
                                1,
                                1,
                                256,
                                1,
                                1,
                                0,
                                self.stream,
                                pointers.as_mut_ptr(),
                                std::ptr::null_mut(),
                            )
                        },
                        "cuLaunchKernel",
                    );
                }
                ok(
                    unsafe { sys::cuStreamEndCapture(self.stream, &mut g) },
                    "cuStreamEndCapture",
                );
                // A chain: the order of cuGraphGetNodes is the order of the launches.
                let mut count = self.n;
                let mut nodes = vec![std::ptr::null_mut(); count];
                ok(
                    unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut count) },
                    "cuGraphGetNodes",
                );
                (g, nodes)
            }
        }
    }
}

/// Medians for one way: instantiate, per-node update naming func / kern, whole-graph update,
/// replay device time per node.
///
/// # Safety
/// As [`Setup::chain`].
unsafe fn measure(s: &Setup, way: Way, reps: usize) -> [f64; 5] {
    let (ga, nodes_a) = unsafe { s.chain(way.make, 0.5) };
    let (gb, _) = unsafe { s.chain(way.make, 0.25) };
    // The graph the executable is instantiated from, and its nodes (which address the
    // executable's nodes).
    let (source, nodes) = if way.clone {
        let mut copy = std::ptr::null_mut();
        ok(unsafe { sys::cuGraphClone(&mut copy, ga) }, "cuGraphClone");
        let mapped = nodes_a
            .iter()
            .map(|&n| {
                let mut m = std::ptr::null_mut();
                ok(
                    unsafe { sys::cuGraphNodeFindInClone(&mut m, n, copy) },
                    "cuGraphNodeFindInClone",
                );
                m
            })
            .collect::<Vec<_>>();
        (copy, mapped)
    } else {
        (ga, nodes_a)
    };
    let mut exec = std::ptr::null_mut();
    ok(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, source, 0) },
        "cuGraphInstantiate",
    );
    let mut inst = Vec::new();
    for r in 0..reps + 3 {
        let mut fresh = std::ptr::null_mut();
        let t = Instant::now();
        ok(
            unsafe { sys::cuGraphInstantiateWithFlags(&mut fresh, source, 0) },
            "cuGraphInstantiate",
        );
        let elapsed = us(t);
        ok(
            unsafe { sys::cuGraphExecDestroy(fresh) },
            "cuGraphExecDestroy",
        );
        if r >= 3 {
            inst.push(elapsed);
        }
    }
    let per_node = |func: sys::CUfunction, kern: sys::CUkernel| {
        let mut times = Vec::new();
        for r in 0..reps + 3 {
            let a = if r % 2 == 0 { 0.25 } else { 0.5 };
            let t = Instant::now();
            for &node in &nodes {
                let mut p = Params {
                    ptr: s.ptr,
                    a,
                    len: 256,
                };
                let mut pointers = [std::ptr::null_mut(); 3];
                let params = p.node(func, kern, &mut pointers);
                // SAFETY: exec and node are live; the arguments match the kernel.
                ok(
                    unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, node, &params) },
                    "cuGraphExecKernelNodeSetParams",
                );
            }
            if r >= 3 {
                times.push(us(t));
            }
        }
        median(&mut times)
    };
    let by_func = per_node(s.func, std::ptr::null_mut());
    let by_kern = per_node(std::ptr::null_mut(), s.kern);
    let mut whole = Vec::new();
    for r in 0..reps + 3 {
        // SAFETY: plain C struct of an enum with a zero variant and two handles.
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        let target = if r % 2 == 0 { gb } else { ga };
        let t = Instant::now();
        ok(
            unsafe { sys::cuGraphExecUpdate_v2(exec, target, &mut info) },
            "cuGraphExecUpdate",
        );
        if r >= 3 {
            whole.push(us(t));
        }
    }
    let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
    ok(
        unsafe { sys::cuEventCreate(&mut start, 0) },
        "cuEventCreate",
    );
    ok(unsafe { sys::cuEventCreate(&mut end, 0) }, "cuEventCreate");
    ok(
        unsafe { sys::cuGraphUpload(exec, s.stream) },
        "cuGraphUpload",
    );
    let mut device = Vec::new();
    for r in 0..reps + 3 {
        ok(
            unsafe { sys::cuEventRecord(start, s.stream) },
            "cuEventRecord",
        );
        ok(
            unsafe { sys::cuGraphLaunch(exec, s.stream) },
            "cuGraphLaunch",
        );
        ok(
            unsafe { sys::cuEventRecord(end, s.stream) },
            "cuEventRecord",
        );
        ok(
            unsafe { sys::cuEventSynchronize(end) },
            "cuEventSynchronize",
        );
        let mut ms = 0f32;
        ok(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, start, end) },
            "cuEventElapsedTime",
        );
        if r >= 3 {
            device.push(ms as f64 * 1e3 / s.n as f64);
        }
    }
    unsafe {
        ok(sys::cuEventDestroy_v2(start), "cuEventDestroy");
        ok(sys::cuEventDestroy_v2(end), "cuEventDestroy");
        ok(sys::cuGraphExecDestroy(exec), "cuGraphExecDestroy");
        if way.clone {
            ok(sys::cuGraphDestroy(source), "cuGraphDestroy");
        }
        ok(sys::cuGraphDestroy(ga), "cuGraphDestroy");
        ok(sys::cuGraphDestroy(gb), "cuGraphDestroy");
    }
    [
        median(&mut inst),
        by_func,
        by_kern,
        median(&mut whole),
        median(&mut device),
    ]
}

fn main() -> graphsmith::Result<()> {
    let mut argv = std::env::args().skip(1);
    let n: usize = argv.next().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let reps: usize = argv.next().and_then(|v| v.parse().ok()).unwrap_or(20);
    let ctx = graphsmith::Context::new(0)?;
    let kernel = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let x = ctx.alloc::<f32>("x", 256)?;
    let stream = ctx.stream("ab")?;
    let setup = Setup {
        func: kernel.raw(),
        kern: kernel.raw_kernel(),
        ptr: x.device_ptr(),
        stream: stream.raw(),
        n,
    };
    let ways = [
        Way {
            name: "built naming kern, from the graph",
            make: Make::Built { name_kernel: true },
            clone: false,
        },
        Way {
            name: "built naming func, from the graph",
            make: Make::Built { name_kernel: false },
            clone: false,
        },
        Way {
            name: "built naming kern, from a clone (graphsmith)",
            make: Make::Built { name_kernel: true },
            clone: true,
        },
        Way {
            name: "built naming func, from a clone",
            make: Make::Built { name_kernel: false },
            clone: true,
        },
        Way {
            name: "captured naming func, from the graph",
            make: Make::Captured,
            clone: false,
        },
        Way {
            name: "captured naming func, from a clone (graphsmith)",
            make: Make::Captured,
            clone: true,
        },
    ];
    let rounds = 3;
    let mut results = vec![Vec::new(); ways.len()];
    for round in 0..rounds {
        for k in 0..ways.len() {
            let i = (k + round) % ways.len();
            // SAFETY: Context::new made the context current; every handle in setup is live.
            results[i].push(unsafe { measure(&setup, ways[i], reps) });
        }
    }
    let names = [
        "instantiate_us",
        "per_node_update_func_us",
        "per_node_update_kern_us",
        "whole_graph_update_us",
        "replay_device_per_node_us",
    ];
    for (way, runs) in ways.iter().zip(&results) {
        let mut fields = vec![format!("\"way\": \"{}\", \"nodes\": {n}", way.name)];
        for (j, name) in names.iter().enumerate() {
            let mut v: Vec<f64> = runs.iter().map(|r| r[j]).collect();
            fields.push(format!("\"{name}\": {:.3}", median(&mut v)));
        }
        println!("{{{}}}", fields.join(", "));
    }
    Ok(())
}
