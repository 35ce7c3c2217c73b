//! The measurements behind `graphsmith bench` (bench/SCHEMA.md): chains of N small kernels and a
//! fork/join graph, eager and replayed, with capture, instantiation, upload and updates.

use std::time::Instant;

use graphsmith::{
    args, CaptureMode, CaptureOptions, Context, DeviceBuffer, Exec, Graph, Kernel, LaunchConfig,
    Result, Stream, UpdatePolicy,
};

use crate::{median, time_region};

/// One row of bench/SCHEMA.md: times in microseconds, medians after warm-up.
#[derive(Clone, Debug, Default)]
pub struct BenchRow {
    pub workload: &'static str,
    pub nodes: usize,
    pub eager_submit_us: f64,
    pub eager_device_us: f64,
    pub capture_us: f64,
    /// Capture with the journal off (graphsmith still keeps what the graph references alive).
    pub capture_journal_off_us: f64,
    pub instantiate_us: f64,
    pub upload_us: f64,
    pub replay_submit_us: f64,
    pub replay_device_us: f64,
    pub per_node_update_us: f64,
    pub whole_graph_update_us: f64,
    pub reinstantiate_us: f64,
    pub correct: bool,
}

impl BenchRow {
    /// The row as one JSON line.
    pub fn to_json(&self) -> String {
        format!(
            "{{\"impl\": \"graphsmith\", \"workload\": \"{}\", \"nodes\": {}, \"eager_submit_us\": {:.3}, \"eager_device_us\": {:.3}, \"capture_us\": {:.3}, \"capture_journal_off_us\": {:.3}, \"instantiate_us\": {:.3}, \"upload_us\": {:.3}, \"replay_submit_us\": {:.3}, \"replay_device_us\": {:.3}, \"per_node_update_us\": {:.3}, \"whole_graph_update_us\": {:.3}, \"reinstantiate_us\": {:.3}, \"correct\": {}}}",
            self.workload, self.nodes, self.eager_submit_us, self.eager_device_us, self.capture_us, self.capture_journal_off_us, self.instantiate_us, self.upload_us,
            self.replay_submit_us, self.replay_device_us, self.per_node_update_us, self.whole_graph_update_us, self.reinstantiate_us, self.correct
        )
    }
}

/// Elements per buffer: 256 floats, one block of 256 threads, like the C++ and PyTorch runs.
const LEN: u32 = 256;
/// Parallel branches of the fork/join workload.
pub const BRANCHES: usize = 4;

/// The workloads: `chain` (N kernels in a row on one buffer) and `forkjoin` (a root kernel on
/// buffer 0, then 4 branches, branch k a chain of N/4 kernels on buffer k on its own stream,
/// then a join kernel on buffer 0 after all branches: N + 2 kernels).
struct Work {
    add: Kernel,
    bufs: Vec<DeviceBuffer<f32>>,
    sides: Vec<Stream>,
    forkjoin: bool,
    nodes: usize,
}

impl Work {
    fn issue(&mut self, main: &Stream, a: f32) -> Result<()> {
        let cfg = LaunchConfig::for_elements(LEN);
        if !self.forkjoin {
            for _ in 0..self.nodes {
                main.launch("add", &self.add, cfg, args![&mut self.bufs[0], a, LEN])?;
            }
            return Ok(());
        }
        main.launch("root", &self.add, cfg, args![&mut self.bufs[0], a, LEN])?;
        // Fork every side stream right after the root, before any branch is issued, so that
        // the four branches run in parallel (bench/SCHEMA.md).
        for side in &self.sides {
            side.join(main)?;
        }
        let per_branch = self.nodes / BRANCHES;
        for (k, buf) in self.bufs.iter_mut().enumerate() {
            let s = if k == 0 { main } else { &self.sides[k - 1] };
            for _ in 0..per_branch {
                s.launch("branch", &self.add, cfg, args![&mut *buf, a, LEN])?;
            }
        }
        for side in &self.sides {
            main.join(side)?;
        }
        main.launch("join", &self.add, cfg, args![&mut self.bufs[0], a, LEN])
    }

    fn capture(&mut self, main: &Stream, a: f32) -> Result<Graph> {
        self.capture_with(main, a, true)
    }

    fn capture_with(&mut self, main: &Stream, a: f32, journal: bool) -> Result<Graph> {
        main.begin_capture_with(
            CaptureOptions::new(CaptureMode::ThreadLocal).journal(journal),
            if self.forkjoin { "forkjoin" } else { "chain" },
        )?;
        let issued = self.issue(main, a);
        let graph = main.end_capture();
        issued?;
        graph
    }

    /// Each buffer's value after one run from `start`, computed on the host in GPU order.
    fn expected(&self, start: f32, a: f32) -> Vec<f32> {
        let add = |mut v: f32, times: usize| {
            for _ in 0..times {
                v += a;
            }
            v
        };
        if !self.forkjoin {
            return vec![add(start, self.nodes)];
        }
        let per_branch = self.nodes / BRANCHES;
        let mut out = vec![add(add(start, 1), per_branch)];
        out.extend((1..BRANCHES).map(|_| add(start, per_branch)));
        out[0] = add(out[0], 1);
        out
    }
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// Measures one workload at one size. `reps` timed repetitions after warm-up; `progress` is
/// called between phases.
pub fn bench(
    ctx: &Context,
    workload: &'static str,
    nodes: usize,
    reps: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<BenchRow> {
    let forkjoin = workload == "forkjoin";
    let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let main = ctx.stream("bench")?;
    let count = if forkjoin { BRANCHES } else { 1 };
    let mut bufs = Vec::with_capacity(count);
    for k in 0..count {
        let mut b = ctx.alloc::<f32>(&format!("x{k}"), LEN as usize)?;
        main.upload(&mut b, &vec![1.0; LEN as usize])?;
        bufs.push(b);
    }
    let sides = (1..count)
        .map(|k| ctx.stream(&format!("side{k}")))
        .collect::<Result<Vec<_>>>()?;
    let mut w = Work {
        add,
        bufs,
        sides,
        forkjoin,
        nodes,
    };
    let mut row = BenchRow {
        workload,
        nodes,
        ..BenchRow::default()
    };

    progress("eager");
    let eager = time_region(ctx, &main, 3, reps, || w.issue(&main, 0.5))?;
    row.eager_submit_us = eager.submit_us;
    row.eager_device_us = eager.device_us;

    progress("capture");
    let mut capture = Vec::new();
    let mut graph = None;
    for r in 0..reps.min(5) + 1 {
        let t = Instant::now();
        let g = w.capture(&main, 0.5)?;
        if r > 0 {
            capture.push(us(t));
        }
        graph = Some(g);
    }
    let graph = graph.expect("captured at least once");
    row.capture_us = median(&mut capture);
    let mut capture_off = Vec::new();
    for r in 0..reps.min(5) + 1 {
        let t = Instant::now();
        let g = w.capture_with(&main, 0.5, false)?;
        let elapsed = us(t);
        drop(g);
        if r > 0 {
            capture_off.push(elapsed);
        }
    }
    row.capture_journal_off_us = median(&mut capture_off);
    // The second graph, with the other scalar, is the target of whole-graph updates.
    let other = w.capture(&main, 0.25)?;

    progress("instantiate");
    let (mut inst, mut upload) = (Vec::new(), Vec::new());
    for r in 0..reps.min(5) + 1 {
        let t = Instant::now();
        let mut e = graph.instantiate()?;
        let t_inst = us(t);
        let t = Instant::now();
        e.upload(&main)?;
        main.synchronize()?;
        let t_upload = us(t);
        if r > 0 {
            inst.push(t_inst);
            upload.push(t_upload);
        }
    }
    row.instantiate_us = median(&mut inst);
    row.upload_us = median(&mut upload);
    let mut exec: Exec = graph.instantiate()?;
    exec.upload(&main)?;

    progress("replay");
    let replay = time_region(ctx, &main, 3, reps, || exec.launch(&main))?;
    row.replay_submit_us = replay.submit_us;
    row.replay_device_us = replay.device_us;

    progress("updates");
    let cfg = LaunchConfig::for_elements(LEN);
    let (mut per_node, mut whole, mut reinst) = (Vec::new(), Vec::new(), Vec::new());
    let rounds = reps.min(10) + 2;
    let mut last = 0.5f32;
    for r in 0..rounds {
        let a = if r % 2 == 0 { 0.25f32 } else { 0.5f32 };
        let target = if r % 2 == 0 { &other } else { &graph };
        // Handles to the kernel nodes of the executable's own template, with the buffer each
        // one updates (outside the timed region).
        let kernels: Vec<_> = exec
            .template()?
            .node_refs()
            .into_iter()
            .filter_map(|n| {
                let node = exec.model().node(n.id())?;
                let buf = node.accesses.first()?.buffer;
                (node.kind.name() == "kernel").then(|| {
                    (
                        n,
                        w.bufs
                            .iter()
                            .position(|b| b.device_ptr() == buf)
                            .unwrap_or(0),
                    )
                })
            })
            .collect();
        let t = Instant::now();
        let mut batch = exec.batch()?;
        for (node, k) in &kernels {
            batch.set_kernel(node, cfg, args![&mut w.bufs[*k], a, LEN])?;
        }
        let t_nodes = us(t);
        let t = Instant::now();
        exec.update(target, UpdatePolicy::InPlace)?;
        let t_whole = us(t);
        let t = Instant::now();
        let fresh = target.instantiate()?;
        drop(std::mem::replace(&mut exec, fresh));
        let t_reinst = us(t);
        last = a;
        if r >= 2 {
            per_node.push(t_nodes);
            whole.push(t_whole);
            reinst.push(t_reinst);
        }
    }
    row.per_node_update_us = median(&mut per_node);
    row.whole_graph_update_us = median(&mut whole);
    row.reinstantiate_us = median(&mut reinst);

    // Correctness: poisoned, reset to 1.0, one eager run and one replay, each checked bit for
    // bit against the host (the executable now carries the last round's `a`).
    let want = w.expected(1.0, last);
    row.correct = true;
    for replay in [false, true] {
        for b in w.bufs.iter_mut() {
            main.upload(b, &vec![f32::NAN; LEN as usize])?;
            main.upload(b, &vec![1.0; LEN as usize])?;
        }
        if replay {
            exec.launch(&main)?;
        } else {
            w.issue(&main, last)?;
        }
        for (b, v) in w.bufs.iter().zip(&want) {
            row.correct &= main.download(b)?.iter().all(|x| x.to_bits() == v.to_bits());
        }
    }
    Ok(row)
}
