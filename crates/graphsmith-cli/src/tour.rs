//! `graphsmith tour`: the main job. On a GPU: probe, then eager launches against a replayed
//! graph, measured and checked. Without a GPU: the parts that need none, and a clear list of
//! what was skipped. Exits 0 in both cases; non-zero only when something that ran failed.

use std::process::ExitCode;

use graphsmith::model::{self, Dim3, KernelParams, NodeKind};

/// A small model graph, the seed's attention example (Q, K, V projections feeding attention),
/// analysed without a GPU.
fn model_demo() -> Result<(), String> {
    let mut g = model::Graph::new("attention-demo");
    let kernel = |name: &str| {
        NodeKind::Kernel(KernelParams {
            name: name.into(),
            grid: Dim3::linear(64),
            block: Dim3::linear(128),
            shared_mem_bytes: 0,
            args: vec![],
        })
    };
    let x = g.add_node("embed", kernel("embed"));
    let q = g.add_node("q-proj", kernel("proj"));
    let k = g.add_node("k-proj", kernel("proj"));
    let v = g.add_node("v-proj", kernel("proj"));
    let attn = g.add_node("attention", kernel("attention"));
    for (from, to) in [(x, q), (x, k), (x, v), (q, attn), (k, attn), (v, attn)] {
        g.add_edge(from, to).map_err(|e| e.to_string())?;
    }
    let summary = g.summary().map_err(|e| e.to_string())?;
    println!("{summary}");
    println!(
        "  DOT export: {} lines (graphsmith can write any graph as Graphviz DOT)",
        g.to_dot().lines().count()
    );
    Ok(())
}

pub fn run(device: usize, nodes: usize) -> ExitCode {
    println!("graphsmith tour\n");
    println!("== 1. The graph model (no GPU needed) ==");
    if let Err(e) = model_demo() {
        eprintln!("error: model demo failed: {e}");
        return ExitCode::FAILURE;
    }
    println!();
    if !graphsmith::gpu_available() {
        println!("== 2. GPU parts: skipped ==");
        match graphsmith::Context::new(device) {
            Err(e) => println!("  no usable GPU here: {}", e.kind),
            Ok(_) => println!("  no usable GPU here"),
        }
        println!(
            "  skipped: probe, eager launches vs graph replay (both need an NVIDIA GPU and driver)"
        );
        println!("\ntour finished: 1 part ran, 2 skipped (no GPU)");
        return ExitCode::SUCCESS;
    }
    println!("== 2. Probe ==");
    match graphsmith::probe::probe(device) {
        Ok(p) => print!("{p}"),
        Err(e) => {
            crate::report(&e);
            return ExitCode::FAILURE;
        }
    }
    println!("\n== 3. Eager launches vs a replayed graph: a chain of {nodes} small kernels ==");
    let ctx = match graphsmith::Context::new(device) {
        Ok(c) => c,
        Err(e) => {
            crate::report(&e);
            return ExitCode::FAILURE;
        }
    };
    let r = match graphsmith_workloads::eager_vs_graph(&ctx, nodes, 20) {
        Ok(r) => r,
        Err(e) => {
            crate::report(&e);
            return ExitCode::FAILURE;
        }
    };
    let n = r.nodes as f64;
    println!(
        "  results checked against the host reference: {}",
        if r.correct { "ok" } else { "WRONG" }
    );
    println!(
        "  capture {:.2} ms, instantiate {:.2} ms (once)",
        r.capture_ms, r.instantiate_ms
    );
    println!();
    println!(
        "  | {:<28} | {:>12} | {:>12} |",
        "medians of 20 runs", "eager", "graph replay"
    );
    println!("  |{:-<30}|{:->14}|{:->14}|", "", "", "");
    println!(
        "  | {:<28} | {:>9.2} µs | {:>9.2} µs |",
        "host submit, per kernel",
        r.eager.submit_us / n,
        r.replay.submit_us / n
    );
    println!(
        "  | {:<28} | {:>9.2} µs | {:>9.2} µs |",
        "device time, per kernel",
        r.eager.device_us / n,
        r.replay.device_us / n
    );
    println!(
        "  | {:<28} | {:>9.1} µs | {:>9.1} µs |",
        "device time, whole chain", r.eager.device_us, r.replay.device_us
    );
    println!();
    println!(
        "  speed-up of the replayed graph: {:.2}x device time, {:.1}x host submit time",
        r.eager.device_us / r.replay.device_us,
        r.eager.submit_us / r.replay.submit_us
    );
    println!("\ntour finished: 3 parts ran");
    if r.correct {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
