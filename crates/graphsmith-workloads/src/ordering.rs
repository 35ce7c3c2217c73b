//! The cost of ordering one graph after another (docs/overlap.md, "Ordering between graphs"):
//! a branch (N small kernels on its own buffer) and a trunk (a kernel reading the branch's
//! buffer, then N - 1 small kernels on its own) joined five ways, timed turn by turn in one
//! process with CUDA events (end-to-end from before the branch to after the trunk):
//!
//! - `event nodes`: two graphs on two streams; the branch graph ends with an event record node,
//!   the trunk graph begins with an event wait node on that event;
//! - `one graph`: the branch and the trunk as one graph, the trunk's first kernel after the
//!   branch's last;
//! - `host polling`: the branch graph, an event recorded after it, `cuEventQuery` in a loop on
//!   the host until it completes, then the trunk graph on the other stream;
//! - `stream wait`: the branch graph, an event recorded after it, `cuStreamWaitEvent` on the
//!   trunk's stream, then the trunk graph;
//! - `one stream`: both graphs launched on one stream (launch order alone).
//!
//! The GPU's idle time is the end-to-end time less the two graphs' own times (each timed alone).

use graphsmith::{args, Context, DeviceBuffer, Event, Exec, Graph, Kernel, LaunchConfig, NodeRef};
use graphsmith::{Result, Stream};

use crate::median;

/// Elements per buffer: one block of 256 threads per kernel.
const LEN: u32 = 256;
/// What each small kernel adds.
const STEP: f32 = 0.5;
/// The trunk's first kernel: `trunk = A * branch + trunk`.
const A: f32 = 0.25;

/// The ways of ordering the trunk after the branch, in the order they are timed.
pub const CONTENDERS: [&str; 5] = [
    "event nodes",
    "one graph",
    "host polling",
    "stream wait",
    "one stream",
];

/// One contender at one size: medians in microseconds.
#[derive(Clone, Debug)]
pub struct Row {
    pub nodes: usize,
    pub contender: &'static str,
    /// End-to-end device time.
    pub end_to_end_us: f64,
    /// End-to-end less the branch's and the trunk's own times: what the GPU spends idle or on
    /// the ordering itself.
    pub idle_us: f64,
    /// End-to-end less the one graph's end-to-end.
    pub added_us: f64,
    /// Whether the contender gave the host reference.
    pub correct: bool,
}

/// The branch and trunk graphs and what they run on.
struct Work {
    nodes: usize,
    branch: DeviceBuffer<f32>,
    trunk: DeviceBuffer<f32>,
    /// branch, branch + record node, trunk, wait node + trunk, both as one graph.
    branch_plain: Exec,
    branch_record: Exec,
    trunk_plain: Exec,
    trunk_wait: Exec,
    merged: Exec,
    /// Recorded by `branch_record`'s node; `stream_event` by streams.
    _node_event: Event,
    stream_event: Event,
}

fn branch_nodes(
    g: &mut Graph,
    add: &Kernel,
    b: &mut DeviceBuffer<f32>,
    n: usize,
) -> Result<NodeRef> {
    let cfg = LaunchConfig::for_elements(LEN);
    let mut last = g.kernel("branch-0", add, cfg, args![&mut *b, STEP, LEN], &[])?;
    for i in 1..n {
        let label = format!("branch-{i}");
        last = g.kernel(&label, add, cfg, args![&mut *b, STEP, LEN], &[&last])?;
    }
    Ok(last)
}

#[allow(clippy::too_many_arguments)]
fn trunk_nodes(
    g: &mut Graph,
    (add, axpy): (&Kernel, &Kernel),
    b: &DeviceBuffer<f32>,
    t: &mut DeviceBuffer<f32>,
    n: usize,
    deps: &[&NodeRef],
) -> Result<NodeRef> {
    let cfg = LaunchConfig::for_elements(LEN);
    let mut last = g.kernel("trunk-join", axpy, cfg, args![b, &mut *t, A, LEN], deps)?;
    for i in 1..n {
        let label = format!("trunk-{i}");
        last = g.kernel(&label, add, cfg, args![&mut *t, STEP, LEN], &[&last])?;
    }
    Ok(last)
}

impl Work {
    fn new(ctx: &Context, nodes: usize) -> Result<Work> {
        let nodes = nodes.max(1);
        let module = ctx.builtin_kernels()?;
        let add = module.kernel("gs_add_scalar_f32")?;
        let axpy = module.kernel("gs_axpy_f32")?;
        let mut branch = ctx.alloc::<f32>("branch", LEN as usize)?;
        let mut trunk = ctx.alloc::<f32>("trunk", LEN as usize)?;
        let node_event = ctx.event("branch-done-node", false)?;
        let stream_event = ctx.event("branch-done-stream", false)?;
        let k = (&add, &axpy);

        let mut g = ctx.graph("branch")?;
        branch_nodes(&mut g, &add, &mut branch, nodes)?;
        let branch_plain = g.instantiate()?;
        let mut g = ctx.graph("branch-record")?;
        let last = branch_nodes(&mut g, &add, &mut branch, nodes)?;
        g.event_record("branch-done", &node_event, &[&last])?;
        let branch_record = g.instantiate()?;

        let mut g = ctx.graph("trunk")?;
        trunk_nodes(&mut g, k, &branch, &mut trunk, nodes, &[])?;
        let trunk_plain = g.instantiate()?;
        let mut g = ctx.graph("trunk-wait")?;
        let wait = g.event_wait("wait-branch", &node_event, &[])?;
        trunk_nodes(&mut g, k, &branch, &mut trunk, nodes, &[&wait])?;
        let trunk_wait = g.instantiate()?;

        let mut g = ctx.graph("branch-and-trunk")?;
        let last = branch_nodes(&mut g, &add, &mut branch, nodes)?;
        trunk_nodes(&mut g, k, &branch, &mut trunk, nodes, &[&last])?;
        let merged = g.instantiate()?;
        Ok(Work {
            nodes,
            branch,
            trunk,
            branch_plain,
            branch_record,
            trunk_plain,
            trunk_wait,
            merged,
            _node_event: node_event,
            stream_event,
        })
    }

    /// Runs contender `which`: the branch on `b`, the trunk on `t`.
    fn run(&mut self, which: usize, b: &Stream, t: &Stream) -> Result<()> {
        match which {
            0 => {
                self.branch_record.launch(b)?;
                self.trunk_wait.launch(t)
            }
            1 => self.merged.launch(b),
            2 => {
                self.branch_plain.launch(b)?;
                b.record(&self.stream_event)?;
                while !self.stream_event.query()? {
                    std::hint::spin_loop();
                }
                self.trunk_plain.launch(t)
            }
            3 => {
                self.branch_plain.launch(b)?;
                b.record(&self.stream_event)?;
                t.wait(&self.stream_event)?;
                self.trunk_plain.launch(t)
            }
            _ => {
                self.branch_plain.launch(b)?;
                self.trunk_plain.launch(b)
            }
        }
    }

    /// Runs contender `which` once from known values and checks both buffers on the host.
    fn check(&mut self, which: usize, b: &Stream, t: &Stream) -> Result<bool> {
        let (b0, t0) = (1.0 + which as f32, -3.0 - which as f32);
        b.upload(&mut self.branch, &[b0; LEN as usize])?;
        b.upload(&mut self.trunk, &[t0; LEN as usize])?;
        self.run(which, b, t)?;
        t.synchronize()?;
        b.synchronize()?;
        let (want_b, want_t) = expected(self.nodes, b0, t0);
        let got_b = b.download(&self.branch)?;
        let got_t = b.download(&self.trunk)?;
        Ok(got_b.iter().all(|v| v.to_bits() == want_b.to_bits())
            && got_t.iter().all(|v| v.to_bits() == want_t.to_bits()))
    }
}

/// The host reference of one run of `nodes` kernels per branch from `branch0` and `trunk0`:
/// (branch, trunk), in the GPU's order of roundings.
fn expected(nodes: usize, branch0: f32, trunk0: f32) -> (f32, f32) {
    let mut b = branch0;
    for _ in 0..nodes {
        b += STEP;
    }
    let mut t = A * b + trunk0;
    for _ in 1..nodes {
        t += STEP;
    }
    (b, t)
}

/// Device microseconds from `start` recorded on `first` to `end` recorded on `last` around
/// `work`.
fn timed(
    first: &Stream,
    last: &Stream,
    ev: &(Event, Event),
    work: impl FnOnce() -> Result<()>,
) -> Result<f64> {
    first.record(&ev.0)?;
    work()?;
    last.record(&ev.1)?;
    ev.1.synchronize()?;
    // Nothing of this turn left on either stream before the next.
    first.synchronize()?;
    Ok(ev.1.elapsed_ms_since(&ev.0)? as f64 * 1e3)
}

/// Measures every contender at `nodes` kernels per branch: `warmup` rounds, then `reps` rounds,
/// each round running every contender once in turn (and the branch and the trunk alone).
pub fn measure(ctx: &Context, nodes: usize, warmup: usize, reps: usize) -> Result<Vec<Row>> {
    let b = ctx.stream("branch")?;
    let t = ctx.stream("trunk")?;
    let ev = (ctx.event("start", true)?, ctx.event("end", true)?);
    let mut work = Work::new(ctx, nodes)?;
    let correct = (0..CONTENDERS.len())
        .map(|i| work.check(i, &b, &t))
        .collect::<Result<Vec<bool>>>()?;
    let mut e2e: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); CONTENDERS.len()];
    let (mut branch_alone, mut trunk_alone) = (Vec::new(), Vec::new());
    for round in 0..warmup + reps {
        let keep = round >= warmup;
        for (i, series) in e2e.iter_mut().enumerate() {
            // One graph and one stream run everything on the branch's stream.
            let last = if matches!(i, 1 | 4) { &b } else { &t };
            let us = timed(&b, last, &ev, || work.run(i, &b, &t))?;
            if keep {
                series.push(us);
            }
        }
        let us = timed(&b, &b, &ev, || work.branch_plain.launch(&b))?;
        let them = timed(&t, &t, &ev, || work.trunk_plain.launch(&t))?;
        if keep {
            branch_alone.push(us);
            trunk_alone.push(them);
        }
    }
    let own = median(&mut branch_alone) + median(&mut trunk_alone);
    let med: Vec<f64> = e2e.iter_mut().map(|s| median(s)).collect();
    Ok(CONTENDERS
        .iter()
        .enumerate()
        .map(|(i, &contender)| Row {
            nodes: work.nodes,
            contender,
            end_to_end_us: med[i],
            idle_us: med[i] - own,
            added_us: med[i] - med[1],
            correct: correct[i],
        })
        .collect())
}

/// The rows as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| nodes per branch | ordering | end-to-end µs | GPU idle µs | added vs one graph µs | correct |\n|---:|---|---:|---:|---:|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:+.1} | {} |\n",
            r.nodes,
            r.contender,
            r.end_to_end_us,
            r.idle_us,
            r.added_us,
            if r.correct { "yes" } else { "NO" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trunk_reads_the_finished_branch() {
        // Branch: 1 + 3 * 0.5 = 2.5; trunk: 0.25 * 2.5 - 3 = -2.375, then + 2 * 0.5.
        assert_eq!(expected(3, 1.0, -3.0), (2.5, -1.375));
        assert_eq!(expected(1, 2.0, -4.0), (2.5, -3.375));
    }

    #[test]
    fn the_table_has_one_row_per_contender() {
        let row = |i: usize| Row {
            nodes: 10,
            contender: CONTENDERS[i],
            end_to_end_us: 20.0 + i as f64,
            idle_us: 1.25,
            added_us: i as f64 - 1.0,
            correct: i != 4,
        };
        let rows: Vec<Row> = (0..2).map(row).collect();
        assert_eq!(
            markdown(&rows),
            "| nodes per branch | ordering | end-to-end µs | GPU idle µs | added vs one graph µs | correct |\n\
             |---:|---|---:|---:|---:|---|\n\
             | 10 | event nodes | 20.0 | 1.2 | -1.0 | yes |\n\
             | 10 | one graph | 21.0 | 1.2 | +0.0 | yes |\n"
        );
    }
}
