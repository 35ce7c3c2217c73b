//! `graphsmith tour`: the main job. First a planted race, found (no GPU needed). Then, on a
//! GPU: probe; the centrepiece, a short decode of a SmolLM2-135M-shaped Llama model (random
//! weights) eager against graphs, with tokens/s; eager launches against a replayed graph,
//! measured; an in-place update; a planted capture failure, diagnosed. A closing summary.
//! Without a GPU: the parts that need none, and a list of what was skipped (the decode among
//! them).
//! Exits 0 unless something that ran gave a wrong result.

use std::process::ExitCode;
use std::time::Instant;

use graphsmith::model::{self, Access, AccessMode, Dim3, KernelParams, NodeKind};
use graphsmith::{args, CaptureMode, Context, LaunchConfig, Stream, UpdatePolicy};

/// One line of the closing summary.
struct Part {
    name: &'static str,
    outcome: String,
    ok: bool,
}

/// An attention block as a pure model: Q, K and V projections on forked streams write q, k, v;
/// attention reads all three but waits only for its neighbour, the V projection.
fn attention_model(racy: bool) -> Result<model::Graph, String> {
    let mut g = model::Graph::new(if racy {
        "attention-racy"
    } else {
        "attention-fixed"
    });
    let kernel = |name: &str| {
        NodeKind::Kernel(KernelParams {
            name: name.into(),
            grid: Dim3::linear(64),
            block: Dim3::linear(128),
            shared_mem_bytes: 0,
            args: vec![],
            cluster: None,
        })
    };
    let acc = |buffer: u64, label: &str, mode| Access {
        buffer,
        label: label.into(),
        offset: 0,
        len: 4096,
        mode,
    };
    let x = g.add_node_with(
        "embed",
        kernel("embed"),
        None,
        vec![acc(0x1000, "x", AccessMode::Write)],
    );
    let mut projections = Vec::new();
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let base = 0x10_000 * (i as u64 + 2);
        let id = g.add_node_with(
            format!("{name}-proj"),
            kernel("proj"),
            None,
            vec![
                acc(0x1000, "x", AccessMode::Read),
                acc(base, name, AccessMode::Write),
            ],
        );
        g.add_edge(x, id).map_err(|e| e.to_string())?;
        projections.push(id);
    }
    let reads = ["q", "k", "v"]
        .iter()
        .enumerate()
        .map(|(i, n)| acc(0x10_000 * (i as u64 + 2), n, AccessMode::Read))
        .collect();
    let attn = g.add_node_with("attention", kernel("attention"), None, reads);
    let waits_for: &[_] = if racy {
        &projections[2..]
    } else {
        &projections
    };
    for &p in waits_for {
        g.add_edge(p, attn).map_err(|e| e.to_string())?;
    }
    Ok(g)
}

fn hazard_part() -> Result<Part, String> {
    println!("== A planted race, found before it runs (no GPU needed) ==");
    println!(
        "  An attention block whose Q, K and V projections run on forked streams: attention reads"
    );
    println!("  q, k and v but depends only on the V projection.");
    let racy = attention_model(true)?
        .hazards()
        .map_err(|e| e.to_string())?;
    for h in &racy.hazards {
        println!("  hazard: {h}");
    }
    let fixed = attention_model(false)?
        .hazards()
        .map_err(|e| e.to_string())?;
    println!(
        "  with the multi-input dependency: {}",
        if fixed.is_clean() {
            "clean"
        } else {
            "STILL RACY"
        }
    );
    println!();
    Ok(Part {
        name: "planted race",
        outcome: format!("{} hazards found; fixed graph clean", racy.hazards.len()),
        ok: racy.hazards.len() == 2 && fixed.is_clean(),
    })
}

fn eager_vs_graph(ctx: &Context, nodes: usize) -> graphsmith::Result<Part> {
    println!("== Eager launches vs a replayed graph: a chain of {nodes} small kernels ==");
    let r = graphsmith_workloads::eager_vs_graph(ctx, nodes, 20)?;
    let n = r.nodes as f64;
    println!(
        "  results checked against the host reference: {}",
        if r.correct { "ok" } else { "WRONG" }
    );
    println!(
        "  capture {:.2} ms, instantiate {:.2} ms (once)",
        r.capture_ms, r.instantiate_ms
    );
    println!(
        "  | {:<28} | {:>12} | {:>12} |",
        "medians of 20 runs", "eager", "graph replay"
    );
    println!("  |{:-<30}|{:->14}|{:->14}|", "", "", "");
    // A replay is submitted whole, so its submit time per kernel rounds to nothing: show both
    // for the whole chain.
    println!(
        "  | {:<28} | {:>9.1} µs | {:>9.1} µs |",
        format!("host submit, {} kernels", r.nodes),
        r.eager.submit_us,
        r.replay.submit_us
    );
    println!(
        "  | {:<28} | {:>9.2} µs | {:>9.2} µs |",
        "device time, per kernel",
        r.eager.device_us / n,
        r.replay.device_us / n
    );
    let speedup = r.eager.device_us / r.replay.device_us;
    println!(
        "  speed-up of the replayed graph: {speedup:.2}x device time, {:.0}x host submit time\n",
        r.eager.submit_us / r.replay.submit_us
    );
    Ok(Part {
        name: "eager vs graph",
        outcome: format!("{speedup:.2}x less device time per kernel"),
        ok: r.correct,
    })
}

fn update_part(ctx: &Context, stream: &Stream) -> graphsmith::Result<Part> {
    println!("== An in-place update: change every kernel's argument without re-instantiating ==");
    let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let mut x = ctx.alloc::<f32>("x", 256)?;
    let cfg = LaunchConfig::for_elements(256);
    let mut g = ctx.graph("step")?;
    let mut nodes = Vec::new();
    for i in 0..100 {
        let deps: Vec<_> = nodes.last().into_iter().collect();
        let node = g.kernel(
            &format!("add-{i}"),
            &add,
            cfg,
            args![&mut x, 1.0f32, 256u32],
            &deps,
        )?;
        nodes.push(node);
    }
    let t = Instant::now();
    let mut exec = g.instantiate()?;
    let instantiate_us = t.elapsed().as_secs_f64() * 1e6;
    let t = Instant::now();
    for node in &nodes {
        exec.set_kernel(node, cfg, args![&mut x, 2.0f32, 256u32])?;
    }
    let update_us = t.elapsed().as_secs_f64() * 1e6;
    stream.upload(&mut x, &[0.0; 256])?;
    exec.launch(stream)?;
    let ok = stream.download(&x)?.iter().all(|&v| v == 200.0);
    println!("  100 kernel nodes updated in {update_us:.0} µs (instantiating took {instantiate_us:.0} µs); result {}", if ok { "200 as expected" } else { "WRONG" });
    // A pattern often shown as correct updates the template and relaunches the old executable,
    // which keeps the old parameters; in graphsmith a template has no update method at all, and a
    // whole-graph update that cannot apply is explained.
    let mut other = ctx.graph("step-v2")?;
    other.memset("not-a-kernel", &mut x, 0.0f32, &[])?;
    match exec.update(&other, UpdatePolicy::InPlace) {
        Err(e) => println!(
            "  a whole-graph update with another topology is refused, per node:\n    {}",
            e.kind.to_string().replace('\n', "\n    ")
        ),
        Ok(o) => println!("  unexpected: {o:?}"),
    }
    println!();
    Ok(Part {
        name: "in-place update",
        outcome: format!(
            "{:.0}x cheaper than re-instantiation",
            instantiate_us / update_us
        ),
        ok,
    })
}

fn capture_failure_part(ctx: &Context, stream: &Stream) -> graphsmith::Result<Part> {
    println!("== A planted capture failure, diagnosed ==");
    println!("  A stream synchronisation inside the capture (what `.item()` does in PyTorch):");
    let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let mut x = ctx.alloc::<f32>("x", 256)?;
    let cfg = LaunchConfig::for_elements(256);
    let failed = stream.capture(CaptureMode::Global, "decode-step", |s| {
        let _layer = graphsmith::range("layer-7");
        s.launch("add", &add, cfg, args![&mut x, 1.0f32, 256u32])?;
        s.synchronize()?;
        s.launch("add-again", &add, cfg, args![&mut x, 1.0f32, 256u32])
    });
    let diagnosed = match &failed {
        Err(e) => {
            println!("    {}", e.to_string().replace('\n', "\n    "));
            e.cuda_code().is_some()
        }
        Ok(_) => false,
    };
    let again = stream.capture(CaptureMode::Global, "decode-step", |s| {
        s.launch("add", &add, cfg, args![&mut x, 1.0f32, 256u32])
    });
    println!(
        "  the stream is usable again: a second capture {}\n",
        if again.is_ok() { "succeeds" } else { "FAILS" }
    );
    Ok(Part {
        name: "planted capture failure",
        outcome: "first offending call named with its line".into(),
        ok: diagnosed && again.is_ok(),
    })
}

/// The centrepiece: a short greedy decode of the `small` config (random weights), eager against
/// graphs. `Ok(None)` with the reason printed when cuBLAS is not installed (then it is skipped).
fn decode_part(ctx: &Context) -> Result<Option<Part>, String> {
    println!("== A real model: decoding a SmolLM2-135M-shaped Llama (random weights) ==");
    let t = match graphsmith_llama::tour_decode(ctx) {
        Ok(t) => t,
        Err(graphsmith_llama::LlamaError::CublasMissing(why)) => {
            println!("  skipped: {why}\n");
            return Ok(None);
        }
        Err(e) => return Err(e.to_string()),
    };
    println!(
        "  prompt of {} tokens, {} new tokens, batch 1, greedy",
        t.prompt_len, t.new_tokens
    );
    println!(
        "  | {:<28} | {:>12} | {:>12} |",
        "decode (prefill excluded)", "eager", "graphs"
    );
    println!("  |{:-<30}|{:->14}|{:->14}|", "", "", "");
    println!(
        "  | {:<28} | {:>12.0} | {:>12.0} |",
        "tokens/s", t.eager_tokens_per_s, t.graphs_tokens_per_s
    );
    println!(
        "  | {:<28} | {:>9.3} ms | {:>9.3} ms |",
        "time per token",
        1e3 / t.eager_tokens_per_s.max(1e-9),
        1e3 / t.graphs_tokens_per_s.max(1e-9)
    );
    println!(
        "  tokens equal in both modes: {}; hazards in the captured graphs: {}\n",
        if t.equal { "yes" } else { "NO" },
        t.hazards
    );
    Ok(Some(Part {
        name: "llama decode",
        outcome: format!(
            "graphs {:.0} tok/s vs eager {:.0} ({:.2}x)",
            t.graphs_tokens_per_s,
            t.eager_tokens_per_s,
            t.graphs_tokens_per_s / t.eager_tokens_per_s.max(1e-9)
        ),
        ok: t.equal && t.hazards == 0,
    }))
}

fn gpu_parts(
    device: usize,
    nodes: usize,
    parts: &mut Vec<Part>,
    skipped: &mut Vec<(&'static str, String)>,
) -> graphsmith::Result<()> {
    println!("== Probe ==");
    print!("{}", graphsmith::probe::probe(device)?);
    println!();
    let ctx = Context::new(device)?;
    let stream = ctx.stream("tour")?;
    match decode_part(&ctx) {
        Ok(Some(p)) => parts.push(p),
        Ok(None) => skipped.push(("llama decode", "needs cuBLAS (libcublas)".into())),
        Err(e) => {
            println!("  FAILED: {e}\n");
            parts.push(Part {
                name: "llama decode",
                outcome: "failed (see above)".into(),
                ok: false,
            });
        }
    }
    parts.push(eager_vs_graph(&ctx, nodes)?);
    parts.push(update_part(&ctx, &stream)?);
    parts.push(capture_failure_part(&ctx, &stream)?);
    Ok(())
}

pub fn run(device: usize, nodes: usize) -> ExitCode {
    println!("graphsmith tour\n");
    let mut parts = Vec::new();
    match hazard_part() {
        Ok(p) => parts.push(p),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    }
    let mut skipped: Vec<(&'static str, String)> = Vec::new();
    if graphsmith::gpu_available() {
        if let Err(e) = gpu_parts(device, nodes, &mut parts, &mut skipped) {
            crate::report(&e);
            return ExitCode::FAILURE;
        }
    } else {
        let why = match Context::new(device) {
            Err(e) => e.kind.to_string(),
            Ok(_) => "no usable GPU".into(),
        };
        println!("== GPU parts: skipped ({why}) ==\n");
        let gpu = "needs an NVIDIA GPU and driver".to_string();
        skipped = [
            "probe",
            "llama decode",
            "eager vs graph",
            "in-place update",
            "planted capture failure",
        ]
        .into_iter()
        .map(|s| (s, gpu.clone()))
        .collect();
    }
    println!("== Summary ==");
    println!(
        "  | {:<24} | {:<8} | {:<48} |",
        "part", "result", "what it showed"
    );
    println!("  |{:-<26}|{:-<10}|{:-<50}|", "", "", "");
    for p in &parts {
        println!(
            "  | {:<24} | {:<8} | {:<48} |",
            p.name,
            if p.ok { "ok" } else { "FAILED" },
            p.outcome
        );
    }
    for (s, why) in &skipped {
        println!("  | {:<24} | {:<8} | {:<48} |", s, "skipped", why);
    }
    println!(
        "\ntour finished: {} parts ran, {} skipped",
        parts.len(),
        skipped.len()
    );
    if parts.iter().all(|p| p.ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
