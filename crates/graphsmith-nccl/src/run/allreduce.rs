//! `allreduce-graph` on one rank: bootstrap, communicator, warm-up, an all-reduce captured in
//! a graph and replayed many times into a poisoned output, then an all-gather and a
//! reduce-scatter captured together; every result checked against a host reference, and the
//! ownership rule (no communicator destroyed under an executable) checked too.

use std::time::{Duration, Instant};

use graphsmith::{Context, DeviceBuffer, Stream};
use serde_json::{json, Value};

use crate::bootstrap::{join, Root, Session};
use crate::collective::{label, Collective, ReduceOp};
use crate::comm::{unique_id, Communicator};
use crate::error::{NcclError, Result};

/// One rank's part of `allreduce-graph`.
#[derive(Clone, Debug)]
pub struct AllReduceOptions {
    /// This rank.
    pub rank: u32,
    /// The number of ranks.
    pub world: u32,
    /// Rank 0's `host:port`.
    pub addr: String,
    /// The GPU (CUDA ordinal) this rank uses.
    pub device: usize,
    /// Elements of the all-reduce (rounded up to a multiple of the world size).
    pub count: usize,
    /// How many times the all-reduce graph is replayed.
    pub replays: u32,
    /// How long the ranks wait for each other at each step.
    pub timeout: Duration,
}

/// Rank `r`'s element `i`: small integers and halves, so every sum is exact in f32.
fn value(rank: u32, i: usize) -> f32 {
    (i % 13) as f32 + (rank + 1) as f32 * 0.5
}

fn check(what: &str, got: &[f32], want: &[f32]) -> Value {
    let bad: Vec<usize> = (0..want.len())
        .filter(|&i| got.get(i).is_none_or(|g| g.to_bits() != want[i].to_bits()))
        .collect();
    let first = bad.first().map(|&i| {
        format!(
            "element {i}: got {:?}, want {}",
            got.get(i).copied(),
            want[i]
        )
    });
    json!({ "what": what, "elements": want.len(), "wrong": bad.len(), "first_wrong": first })
}

fn upload_new(
    ctx: &Context,
    stream: &Stream,
    label: &str,
    data: &[f32],
) -> Result<DeviceBuffer<f32>> {
    let mut b = ctx.alloc::<f32>(label, data.len())?;
    stream.upload(&mut b, data)?;
    Ok(b)
}

fn session(o: &AllReduceOptions) -> Result<Session> {
    if o.rank == 0 {
        let id = unique_id()?;
        Ok(Root::bind(&o.addr)?.accept(o.world, id, o.timeout)?)
    } else {
        Ok(join(&o.addr, o.rank, o.world, o.timeout)?)
    }
}

/// Runs one rank of `allreduce-graph` and returns its JSON report (`"ok"` is whether every
/// check passed); an error is a step that could not run at all.
pub fn allreduce_graph(o: &AllReduceOptions) -> Result<Value> {
    let world = o.world as usize;
    let count = o.count.max(1).div_ceil(world) * world;
    let ctx = Context::new(o.device)?;
    let mut session = session(o)?;
    let comm = Communicator::new(&ctx, &session)?;
    let stream = ctx.stream("nccl")?;
    comm.warm_up(&stream)?;

    // The all-reduce graph, replayed `replays` times into a poisoned output.
    let mine: Vec<f32> = (0..count).map(|i| value(o.rank, i)).collect();
    let send = upload_new(&ctx, &stream, "send", &mine)?;
    let mut recv = upload_new(&ctx, &stream, "recv", &vec![f32::NAN; count])?;
    let plan = [Collective::all_reduce::<f32>(ReduceOp::Sum, count)];
    let (graph, ()) = comm.capture(
        &mut session,
        &stream,
        "allreduce",
        &plan,
        o.timeout,
        |s, c| c.all_reduce(s, &send, &mut recv, ReduceOp::Sum),
    )?;
    let model = graph.graph().model();
    let node = model.nodes.iter().find(|n| n.label == label(&plan[0]));
    let node_ok = node.is_some_and(|n| n.accesses.len() == 2);
    let nodes = model.nodes.len();
    let mut exec = graph.into_exec()?;
    stream.upload(&mut recv, &vec![f32::NAN; count])?;
    stream.synchronize()?;
    session.barrier(o.timeout)?;
    let start = Instant::now();
    for _ in 0..o.replays {
        exec.launch(&stream)?;
    }
    stream.synchronize()?;
    let per_replay_us = start.elapsed().as_secs_f64() * 1e6 / f64::from(o.replays.max(1));
    comm.check_async()?;
    let want: Vec<f32> = (0..count)
        .map(|i| (0..o.world).map(|r| value(r, i)).sum())
        .collect();
    let all_reduce = check("all_reduce", &stream.download(&recv)?, &want);

    // All-gather and reduce-scatter captured together in a second graph.
    let per = count / world;
    let mut gathered = upload_new(&ctx, &stream, "gathered", &vec![f32::NAN; count * world])?;
    let mut scattered = upload_new(&ctx, &stream, "scattered", &vec![f32::NAN; per])?;
    let plan2 = [
        Collective::all_gather::<f32>(count),
        Collective::reduce_scatter::<f32>(ReduceOp::Sum, per),
    ];
    let (graph2, ()) = comm.capture(
        &mut session,
        &stream,
        "gather+scatter",
        &plan2,
        o.timeout,
        |s, c| {
            c.all_gather(s, &send, &mut gathered)?;
            c.reduce_scatter(s, &send, &mut scattered, ReduceOp::Sum)
        },
    )?;
    let mut exec2 = graph2.instantiate()?;
    for _ in 0..10 {
        exec2.launch(&stream)?;
    }
    stream.synchronize()?;
    comm.check_async()?;
    let want_gather: Vec<f32> = (0..o.world)
        .flat_map(|r| (0..count).map(move |i| value(r, i)))
        .collect();
    let all_gather = check("all_gather", &stream.download(&gathered)?, &want_gather);
    let base = o.rank as usize * per;
    let reduce_scatter = check(
        "reduce_scatter",
        &stream.download(&scattered)?,
        &want[base..base + per],
    );

    // Ownership: the communicator cannot be destroyed while executables hold it.
    let refused = matches!(comm.clone().destroy(), Err(NcclError::StillInUse { .. }));
    drop((exec, exec2, graph2));
    session.barrier(o.timeout)?;
    let (path, version) = comm.library();
    let (path, version) = (path.to_string(), version);
    comm.destroy()?;

    let checks = [&all_reduce, &all_gather, &reduce_scatter];
    let ok = node_ok && refused && checks.iter().all(|c| c["wrong"] == 0);
    Ok(json!({
        "graphsmith_nccl": "allreduce-graph", "ok": ok, "rank": o.rank, "world": o.world,
        "device": o.device, "count": count, "replays": o.replays,
        "us_per_replay": (per_replay_us * 100.0).round() / 100.0,
        "graph_nodes": nodes, "collective_node_labelled": node_ok,
        "destroy_refused_while_in_use": refused,
        "checks": [all_reduce, all_gather, reduce_scatter],
        "nccl": path, "nccl_version": version,
    }))
}
