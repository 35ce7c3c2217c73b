//! How the hazard check and the redundant-edge search scale with the size of a graph.
//!
//! Run in release: `cargo run --release -p graphsmith-model --example hazard_scaling`
//! (`-- 10000 100000` to choose sizes; `-- --wide` adds graphs of width 1,000; `-- --worst`
//! times the documented worst case instead).
//!
//! The graphs look like captured inference steps: layers of 4 to 16 concurrent kernels (one
//! lane per stream), each kernel depending on its lane's previous kernel and on 0 to 2 kernels of
//! other lanes in the previous layer, a join node every 4 layers (waiting for every node since
//! the last join that nothing else waits for); an upload node first. Each
//! kernel reads 1 of 64 weight buffers (written by the upload), reads the output of one of its
//! predecessors, and writes its lane's output, rotating through 8 buffers per lane (so about
//! 200 buffers in all, each node touching 2 to 3). One kernel in 10,000 also writes the output of
//! another kernel of its layer: a planted race. Times are the median of several runs.

use std::time::{Duration, Instant};

use graphsmith_model::{Access, AccessMode, Dim3, Graph, KernelParams, NodeId, NodeKind};

/// SplitMix64: a small, good-enough generator, so the example needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const WEIGHTS: u64 = 64;
const ROTATE: u64 = 8;
const JOIN_EVERY: usize = 4;
const BYTES: u64 = 1 << 20;

fn access(buffer: u64, mode: AccessMode) -> Access {
    Access {
        buffer: 0x7f00_0000_0000 + buffer * BYTES,
        label: String::new(),
        offset: 0,
        len: BYTES,
        mode,
    }
}

fn output(lane: u64, layer: usize) -> u64 {
    WEIGHTS + lane * ROTATE + layer as u64 % ROTATE
}

/// A layered graph of about `n` nodes, layers `min_width..=max_width` wide.
fn build(n: usize, min_width: u64, max_width: u64, seed: u64) -> Graph {
    let mut rng = Rng(seed);
    let mut g = Graph::new(format!("layered-{n}"));
    let kernel = NodeKind::Kernel(KernelParams {
        name: "step".into(),
        grid: Dim3::linear(128),
        block: Dim3::linear(256),
        shared_mem_bytes: 0,
        args: vec![],
        cluster: None,
    });
    let weights = (0..WEIGHTS).map(|w| access(w, AccessMode::Write)).collect();
    let upload = g.add_node_with("upload", NodeKind::Empty, None, weights);
    // (node, lane) of the previous layer; a join stands alone.
    let mut prev: Vec<(NodeId, u64)> = vec![(upload, 0)];
    // Nodes since the last join that nothing depends on yet: the join waits for all of them.
    let mut has_successor: Vec<bool> = vec![false];
    let mut since_join: Vec<NodeId> = Vec::new();
    let mut layer = 0usize;
    while g.nodes.len() < n {
        layer += 1;
        // Position in the segment between joins: 0 is a join, 1 the first layer after it.
        let phase = layer % JOIN_EVERY;
        if phase == 0 {
            let join = g.add_node("join", NodeKind::Empty);
            has_successor.push(false);
            for p in since_join.drain(..) {
                if !has_successor[p.index()] {
                    let _ = g.add_edge(p, join);
                    has_successor[p.index()] = true;
                }
            }
            prev = vec![(join, 0)];
            continue;
        }
        let width = min_width + rng.below(max_width - min_width + 1);
        let mut here = Vec::with_capacity(width as usize);
        for lane in 0..width {
            let own = prev.iter().find(|&&(_, l)| l == lane).copied();
            let mut preds: Vec<NodeId> = own.iter().map(|&(p, _)| p).collect();
            for _ in 0..rng.below(3) {
                preds.push(prev[rng.below(prev.len() as u64) as usize].0);
            }
            if preds.is_empty() {
                preds.push(prev[rng.below(prev.len() as u64) as usize].0);
            }
            let mut accesses = vec![
                access(rng.below(WEIGHTS), AccessMode::Read),
                access(output(lane, layer), AccessMode::Write),
            ];
            // Read what a predecessor wrote (not for the first layer or after a join).
            let src = preds[rng.below(preds.len() as u64) as usize];
            if let Some(&(_, l)) = prev.iter().find(|&&(p, _)| p == src) {
                if phase != 1 && layer > 1 {
                    accesses.push(access(output(l, layer - 1), AccessMode::Read));
                }
            }
            if rng.below(10_000) == 0 && width > 1 {
                let other = (lane + 1 + rng.below(width - 1)) % width;
                accesses.push(access(output(other, layer), AccessMode::Write));
            }
            let v = g.add_node_with("", kernel.clone(), None, accesses);
            has_successor.push(false);
            since_join.push(v);
            for p in preds {
                let _ = g.add_edge(p, v);
                has_successor[p.index()] = true;
            }
            here.push((v, lane));
        }
        prev = here;
    }
    g
}

fn median(mut xs: Vec<Duration>) -> Duration {
    xs.sort();
    xs[xs.len() / 2]
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut last = None;
    for _ in 0..runs {
        let start = Instant::now();
        let out = f();
        times.push(start.elapsed());
        last = Some(out);
    }
    (median(times), last.expect("at least one run"))
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn row(n: usize, min_width: u64, max_width: u64) {
    let g = build(n, min_width, max_width, 42 + n as u64);
    let runs = if n >= 1_000_000 { 3 } else { 5 };
    let accesses: usize = g.nodes.iter().map(|n| n.accesses.len()).sum();
    let (t_h, report) = time(runs, || g.hazards().expect("a DAG"));
    let (t_r, redundant) = time(runs, || g.redundant_edges().expect("a DAG"));
    let per = |t: Duration| t.as_nanos() as f64 / g.nodes.len() as f64;
    println!(
        "| {:>9} | {:>11} | {:>9} | {:>9} | {:>7} | {:>10.1} | {:>7.0} | {:>9} | {:>10.1} | {:>7.0} |",
        g.nodes.len(),
        format!("{min_width}..{max_width}"),
        g.edges.len(),
        accesses,
        report.hazards.len(),
        t_h.as_secs_f64() * 1e3,
        per(t_h),
        redundant.len(),
        t_r.as_secs_f64() * 1e3,
        per(t_r),
    );
}

/// `k` independent writers of distinct buffers, a join, then a chain of `k` readers of those
/// buffers. With `ladder`, each reader also waits for a node of its own (two predecessors), so
/// its clock is a merge of `k` entries and not a move: the documented O(k²) worst case.
fn worst(k: usize, ladder: bool) {
    let mut g = Graph::new(format!("worst-{k}"));
    let writers: Vec<NodeId> = (0..k as u64)
        .map(|b| {
            g.add_node_with(
                "",
                NodeKind::Empty,
                None,
                vec![access(b, AccessMode::Write)],
            )
        })
        .collect();
    let join = g.add_node("join", NodeKind::Empty);
    for &w in &writers {
        let _ = g.add_edge(w, join);
    }
    let mut prev = join;
    for b in 0..k as u64 {
        let v = g.add_node_with("", NodeKind::Empty, None, vec![access(b, AccessMode::Read)]);
        let _ = g.add_edge(prev, v);
        if ladder {
            let side = g.add_node("side", NodeKind::Empty);
            let _ = g.add_edge(side, v);
        }
        prev = v;
    }
    let (t_h, report) = time(3, || g.hazards().expect("a DAG"));
    let (t_r, _) = time(3, || g.redundant_edges().expect("a DAG"));
    println!(
        "| {} | {k:>6} | {:>6} | {:>10.1} | {:>10.1} | {:>7} |",
        if ladder {
            "fan-in, ladder"
        } else {
            "fan-in, chain "
        },
        g.nodes.len(),
        t_h.as_secs_f64() * 1e3,
        t_r.as_secs_f64() * 1e3,
        report.hazards.len(),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let wide = args.iter().any(|a| a == "--wide");
    if args.iter().any(|a| a == "--worst") {
        println!("| shape          |      k |  nodes | hazards ms | redund. ms | hazards |");
        println!("|----------------|-------:|-------:|-----------:|-----------:|--------:|");
        for ladder in [false, true] {
            for k in [1_000, 10_000, 30_000] {
                worst(k, ladder);
            }
        }
        return;
    }
    let mut sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = vec![10_000, 100_000, 1_000_000];
    }
    println!(
        "|     nodes | layer width |     edges |  accesses | hazards | hazards ms | ns/node | redundant | redund. ms | ns/node |"
    );
    println!(
        "|----------:|------------:|----------:|----------:|--------:|-----------:|--------:|----------:|-----------:|--------:|"
    );
    for &n in &sizes {
        row(n, 4, 16);
    }
    if wide {
        for &n in &sizes {
            row(n, 1_000, 1_000);
        }
    }
    if let Some(mib) = peak_rss_mib() {
        println!("\npeak resident memory: {mib:.0} MiB (graphs included)");
    }
}
