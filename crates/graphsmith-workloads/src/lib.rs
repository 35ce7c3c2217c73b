//! Reference workloads shared by tests, benchmarks and the tour. The library never needs this
//! crate.

pub mod bench;
pub mod ordering;
pub mod overlap;

use std::time::Instant;

use graphsmith::{
    args, CaptureMode, Context, DeviceBuffer, Event, Exec, Graph, Kernel, LaunchConfig, Result,
    Stream,
};

/// A chain of `nodes` small kernels, each adding `step` to every element of `x`.
pub struct Chain {
    pub nodes: usize,
    pub elements: u32,
    pub step: f32,
    pub x: DeviceBuffer<f32>,
    kernel: Kernel,
}

impl Chain {
    /// Allocates the buffer and loads the kernel.
    pub fn new(ctx: &Context, nodes: usize, elements: u32) -> Result<Chain> {
        let kernel = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
        let x = ctx.alloc::<f32>("chain-x", elements as usize)?;
        Ok(Chain {
            nodes,
            elements,
            step: 0.5,
            x,
            kernel,
        })
    }

    fn config(&self) -> LaunchConfig {
        LaunchConfig::for_elements(self.elements)
    }

    /// Issues the chain on `stream` (eagerly, or into a capture when the stream captures).
    pub fn issue(&mut self, stream: &Stream) -> Result<()> {
        let cfg = self.config();
        for i in 0..self.nodes {
            let label = if i == 0 { "add-first" } else { "add" };
            stream.launch(
                label,
                &self.kernel,
                cfg,
                args![&mut self.x, self.step, self.elements],
            )?;
        }
        Ok(())
    }

    /// Captures the chain into a graph.
    pub fn capture(&mut self, stream: &Stream) -> Result<Graph> {
        stream.begin_capture(CaptureMode::ThreadLocal, "chain")?;
        if let Err(e) = self.issue(stream) {
            let _ = stream.end_capture();
            return Err(e);
        }
        stream.end_capture()
    }

    /// The value every element has after `runs` runs of the chain from `start`, computed on the
    /// host in the same order as the GPU.
    pub fn expected(&self, start: f32, runs: usize) -> f32 {
        let mut v = start;
        for _ in 0..runs * self.nodes {
            v += self.step;
        }
        v
    }
}

/// Host submit time and device time of one measured region, in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    pub submit_us: f64,
    pub device_us: f64,
}

/// The median of `values` (NaN for none).
pub fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Times `work` on `stream` `reps` times after `warmup` runs: host time to submit, device time
/// between two events; returns the medians.
pub fn time_region(
    ctx: &Context,
    stream: &Stream,
    warmup: usize,
    reps: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    let (start, end): (Event, Event) = (ctx.event("start", true)?, ctx.event("end", true)?);
    for _ in 0..warmup {
        work()?;
    }
    stream.synchronize()?;
    let (mut submit, mut device) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for _ in 0..reps {
        stream.record(&start)?;
        let t0 = Instant::now();
        work()?;
        submit.push(t0.elapsed().as_secs_f64() * 1e6);
        stream.record(&end)?;
        end.synchronize()?;
        device.push(end.elapsed_ms_since(&start)? as f64 * 1e3);
    }
    Ok(Timing {
        submit_us: median(&mut submit),
        device_us: median(&mut device),
    })
}

/// The eager-versus-graph comparison the tour shows.
#[derive(Clone, Debug)]
pub struct EagerVsGraph {
    pub nodes: usize,
    pub eager: Timing,
    pub replay: Timing,
    pub capture_ms: f64,
    pub instantiate_ms: f64,
    /// Whether both ways gave the host-computed result.
    pub correct: bool,
}

/// Runs the chain eagerly and as a replayed graph, checks both against the host, and times
/// both (medians of `reps` after warm-up).
pub fn eager_vs_graph(ctx: &Context, nodes: usize, reps: usize) -> Result<EagerVsGraph> {
    let stream = ctx.stream("tour")?;
    let mut chain = Chain::new(ctx, nodes, 256)?;
    let n = chain.elements as usize;

    // Correctness first: one eager run and one replay from a known start, checked on the host.
    stream.upload(&mut chain.x, &vec![1.0; n])?;
    chain.issue(&stream)?;
    let eager_ok = stream
        .download(&chain.x)?
        .iter()
        .all(|&v| v == chain.expected(1.0, 1));
    let t0 = Instant::now();
    let graph = chain.capture(&stream)?;
    let capture_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t0 = Instant::now();
    let mut exec: Exec = graph.instantiate()?;
    let instantiate_ms = t0.elapsed().as_secs_f64() * 1e3;
    exec.upload(&stream)?;
    stream.upload(&mut chain.x, &vec![2.0; n])?;
    exec.launch(&stream)?;
    let graph_ok = stream
        .download(&chain.x)?
        .iter()
        .all(|&v| v == chain.expected(2.0, 1));

    let eager = time_region(ctx, &stream, 3, reps, || chain.issue(&stream))?;
    let replay = time_region(ctx, &stream, 3, reps, || exec.launch(&stream))?;
    Ok(EagerVsGraph {
        nodes,
        eager,
        replay,
        capture_ms,
        instantiate_ms,
        correct: eager_ok && graph_ok,
    })
}

/// An attention block: Q, K and V projections of one input on three forked
/// streams, then an attention kernel. With `racy`, attention waits only for its neighbour (the
/// V projection), so it races with the Q and K writers; otherwise it waits for all three.
pub struct Attention {
    pub n: usize,
    pub x: DeviceBuffer<f32>,
    pub w: [DeviceBuffer<f32>; 3],
    pub qkv: [DeviceBuffer<f32>; 3],
    pub out: DeviceBuffer<f32>,
    proj: Kernel,
    attention: Kernel,
}

/// The mangled names of the C++ kernels (`kernels/mangled_names.txt`).
pub const PROJ_KERNEL: &str = "_Z4projPKfS0_Pfii";
pub const ATTENTION_KERNEL: &str = "_Z9attentionPKfS0_S0_Pfi";

impl Attention {
    /// Buffers of `n` elements (weights `n x n`), filled with deterministic non-zero values.
    pub fn new(ctx: &Context, stream: &Stream, n: usize) -> Result<Attention> {
        let module = ctx.builtin_kernels()?;
        let fill = |label: &str, len: usize, seed: u32| -> Result<DeviceBuffer<f32>> {
            let mut b = ctx.alloc::<f32>(label, len)?;
            let values: Vec<f32> = (0..len)
                .map(|i| {
                    (((i as u32).wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 1000.0 - 0.5
                })
                .collect();
            stream.upload(&mut b, &values)?;
            Ok(b)
        };
        Ok(Attention {
            n,
            x: fill("x", n, 1)?,
            w: [
                fill("w_q", n * n, 2)?,
                fill("w_k", n * n, 3)?,
                fill("w_v", n * n, 4)?,
            ],
            qkv: [fill("q", n, 5)?, fill("k", n, 6)?, fill("v", n, 7)?],
            out: fill("attn_out", n, 8)?,
            proj: module.kernel(PROJ_KERNEL)?,
            attention: module.kernel(ATTENTION_KERNEL)?,
        })
    }

    /// Issues the step on `main` with three side streams (eagerly, or into a capture).
    pub fn issue(&mut self, main: &Stream, sides: &[Stream; 3], racy: bool) -> Result<()> {
        let n = self.n as i32;
        let cfg = LaunchConfig::for_elements(self.n as u32);
        let names = ["q-proj", "k-proj", "v-proj"];
        let [q, k, v] = &mut self.qkv;
        let outs = [q, k, v];
        for ((side, (w, out)), name) in sides.iter().zip(self.w.iter().zip(outs)).zip(names) {
            side.join(main)?;
            side.launch(name, &self.proj, cfg, args![&self.x, w, out, n, n])?;
        }
        // Attention runs on the V stream: it always follows v-proj (its neighbour).
        if !racy {
            sides[2].join(&sides[0])?;
            sides[2].join(&sides[1])?;
        }
        let [q, k, v] = &self.qkv;
        sides[2].launch(
            "attention",
            &self.attention,
            cfg,
            args![q, k, v, &mut self.out, n],
        )?;
        for side in sides {
            main.join(side)?;
        }
        Ok(())
    }

    /// Captures the step into a graph.
    pub fn capture(&mut self, main: &Stream, sides: &[Stream; 3], racy: bool) -> Result<Graph> {
        let label = if racy {
            "attention-racy"
        } else {
            "attention-fixed"
        };
        main.begin_capture(CaptureMode::Global, label)?;
        if let Err(e) = self.issue(main, sides, racy) {
            let _ = main.end_capture();
            return Err(e);
        }
        main.end_capture()
    }
}
