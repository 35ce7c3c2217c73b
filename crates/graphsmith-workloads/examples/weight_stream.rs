//! Weights streamed from page-locked host memory while the GPU computes (docs/overlap.md): the
//! layers of a Llama-shaped model (7B by default: 202 M f32 weights, 810 MB, per layer) copied
//! into a ring of device slots on a copy stream, each layer's GEMV chain on the compute stream,
//! every copy and layer a graph guarded by event record and wait nodes
//! (`graphsmith_workloads::overlap`).
//!
//! Timed turn by turn in one process, after warm-up (device time between CUDA events, medians):
//! the overlapped pass (copy and layer graphs on two streams), the whole pass as one graph (the
//! copies a path beside the layers), the same copy and layer graphs serialized on one stream,
//! the copies alone, the layers alone, and one plain copy of a layer's pinned weights (the
//! host-to-device bandwidth the machine reaches). The three passes' outputs are compared bit for
//! bit, and with the host reference.
//! Prints a Markdown table, or one JSON object with `--json`; exits 1 when a check fails.
//!
//! `weight_stream [--layers 4] [--ring 2] [--hidden 4096] [--ffn 11008] [--repeat 1] [--reps 10]`

use clap::Parser;
use graphsmith::{Context, Event, Stream};
use graphsmith_workloads::median;
use graphsmith_workloads::overlap::{link_facts, reference, Shape, WeightStream};

#[derive(Parser)]
struct Cli {
    /// Layers streamed per pass (each holds its own pinned weights).
    #[arg(long, default_value_t = 4)]
    layers: usize,
    /// Device slots in the ring.
    #[arg(long, default_value_t = 2)]
    ring: usize,
    #[arg(long, default_value_t = Shape::LLAMA_7B.hidden)]
    hidden: usize,
    #[arg(long, default_value_t = Shape::LLAMA_7B.ffn)]
    ffn: usize,
    /// Times each layer's GEMV chain runs over its weights (more compute per byte copied).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Timed rounds (after 2 warm-up rounds).
    #[arg(long, default_value_t = 10)]
    reps: usize,
    /// Skip the host reference (it costs a few seconds per 7B layer).
    #[arg(long)]
    no_host_check: bool,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

const CONTENDERS: [&str; 6] = [
    "overlapped (copy and layer graphs, event nodes)",
    "overlapped (one graph)",
    "serialized (same graphs, one stream)",
    "copies only",
    "layers only",
    "plain copy of one layer",
];

/// Device milliseconds of `work`, between two events recorded on `stream`.
fn timed(
    stream: &Stream,
    ev: &(Event, Event),
    work: impl FnOnce() -> graphsmith::Result<()>,
) -> graphsmith::Result<f64> {
    stream.record(&ev.0)?;
    work()?;
    stream.record(&ev.1)?;
    ev.1.synchronize()?;
    Ok(ev.1.elapsed_ms_since(&ev.0)? as f64)
}

fn device_name(ctx: &Context) -> graphsmith::Result<String> {
    let mut name = [0 as std::ffi::c_char; 256];
    let device = ctx.device();
    // SAFETY: name is a live local of 256 chars the driver writes a NUL-terminated string into.
    ctx.interop("device name", || unsafe {
        graphsmith::sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device)
    })?;
    // SAFETY: the driver wrote a NUL-terminated string into `name` (checked above).
    let text = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) };
    Ok(text.to_string_lossy().into_owned())
}

/// Every layer's output after one pass, with the outputs poisoned (NaN) first.
fn outputs_after(
    ws: &mut WeightStream,
    stream: &Stream,
    pass: impl FnOnce(&mut WeightStream) -> graphsmith::Result<()>,
) -> graphsmith::Result<Vec<Vec<f32>>> {
    let poison = f32::from_bits(0x7fc0_dead);
    for out in ws.outputs_mut() {
        let n = out.len();
        stream.upload(out, &vec![poison; n])?;
    }
    pass(ws)?;
    stream.synchronize()?;
    ws.outputs().iter().map(|o| stream.download(o)).collect()
}

fn same_bits(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
        })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let shape = Shape {
        hidden: cli.hidden,
        ffn: cli.ffn,
    };
    let ctx = Context::new(0)?;
    let compute = ctx.stream("compute")?;
    let copy = ctx.stream("copy")?;
    let t0 = std::time::Instant::now();
    let mut ws = WeightStream::new(&ctx, &compute, shape, cli.layers, cli.ring, cli.repeat)?;
    let setup_s = t0.elapsed().as_secs_f64();
    let layer_bytes = shape.bytes();
    let mut plain_dst = ctx.alloc::<f32>("bandwidth-destination", shape.elements())?;
    let ev = (ctx.event("start", true)?, ctx.event("end", true)?);

    // Correctness: serialized and overlapped passes, bit for bit, and the host reference.
    let serial = outputs_after(&mut ws, &compute, |w| w.run_serialized(&compute))?;
    let overlapped = outputs_after(&mut ws, &compute, |w| w.run_overlapped(&compute, &copy))?;
    let one_graph = outputs_after(&mut ws, &compute, |w| w.run_one_graph(&compute))?;
    let identical = same_bits(&serial, &overlapped) && same_bits(&serial, &one_graph);
    let host_ok = if cli.no_host_check {
        None
    } else {
        Some(same_bits(&serial, &reference(&shape, ws.layers)))
    };

    let mut times: Vec<Vec<f64>> = vec![Vec::new(); CONTENDERS.len()];
    for round in 0..cli.reps + 2 {
        for (i, series) in times.iter_mut().enumerate() {
            let ms = match i {
                0 => timed(&compute, &ev, || ws.run_overlapped(&compute, &copy))?,
                1 => timed(&compute, &ev, || ws.run_one_graph(&compute))?,
                2 => timed(&compute, &ev, || ws.run_serialized(&compute))?,
                3 => timed(&compute, &ev, || ws.run_copies(&compute))?,
                4 => timed(&compute, &ev, || ws.run_computes(&compute))?,
                _ => {
                    let src = ws.host_weights(0).ok_or("no layer")?;
                    timed(&compute, &ev, || {
                        compute.copy_from_host("plain-copy", &mut plain_dst, src)
                    })?
                }
            };
            if round >= 2 {
                series.push(ms);
            }
        }
    }
    let med: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    let (over, one, serial_ms, copies, layers) = (med[0], med[1], med[2], med[3], med[4]);
    let plain = med[5];
    let gbps = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
    let h2d_gbps = gbps(layer_bytes, plain);
    let saved = serial_ms - over;
    let hideable = copies.min(layers);
    let facts = link_facts(&ctx)?;
    let name = device_name(&ctx)?;
    let ok = identical && host_ok != Some(false);

    if cli.json {
        let fact_map: serde_json::Map<String, serde_json::Value> = facts
            .iter()
            .map(|(k, v)| (k.to_string(), (*v).into()))
            .collect();
        let out = serde_json::json!({
            "workload": "weight_stream",
            "device": name,
            "attributes": fact_map,
            "hidden": shape.hidden, "ffn": shape.ffn, "layers": ws.layers, "ring": ws.ring,
            "repeat": ws.repeat, "layer_bytes": layer_bytes, "reps": cli.reps,
            "setup_s": setup_s,
            "overlapped_ms": over, "one_graph_ms": one, "serialized_ms": serial_ms,
            "copies_only_ms": copies, "layers_only_ms": layers,
            "plain_copy_ms": plain, "h2d_gbps": h2d_gbps,
            "overlapped_copy_gbps": gbps(ws.pass_bytes(), over),
            "saved_ms": saved, "hidden_fraction": saved / hideable,
            "one_graph_saved_ms": serial_ms - one,
            "one_graph_hidden_fraction": (serial_ms - one) / hideable,
            "bit_identical": identical, "host_reference": host_ok,
        });
        println!("{out}");
    } else {
        println!("{name}: {} layers of {:.0} MB (hidden {}, ffn {}, f32), ring of {}, chain x{}; medians of {} rounds\n",
            ws.layers, layer_bytes as f64 / 1e6, shape.hidden, shape.ffn, ws.ring, ws.repeat, cli.reps);
        println!("| run | device ms | weights GB/s |");
        println!("|---|---:|---:|");
        for (i, what) in CONTENDERS.iter().enumerate() {
            let bytes = match i {
                4 => 0,
                5 => layer_bytes,
                _ => ws.pass_bytes(),
            };
            let rate = if bytes == 0 {
                "-".to_string()
            } else {
                format!("{:.1}", gbps(bytes, med[i]))
            };
            println!("| {what} | {:.3} | {rate} |", med[i]);
        }
        println!();
        println!(
            "host-to-device bandwidth (one pinned copy of {:.0} MB): {h2d_gbps:.1} GB/s",
            layer_bytes as f64 / 1e6
        );
        for (what, ms) in [("copy and layer graphs", over), ("one graph", one)] {
            println!(
                "overlap ({what}) saves {:.3} ms of the {hideable:.3} ms that could hide ({:.0}%)",
                serial_ms - ms,
                100.0 * (serial_ms - ms) / hideable
            );
        }
        println!("ideal: max(copies, layers) = {:.3} ms", copies.max(layers));
        let attrs: Vec<String> = facts.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("device attributes: {}", attrs.join(", "));
        println!(
            "overlapped (both ways) and serialized outputs bit-identical: {}",
            if identical { "yes" } else { "NO" }
        );
        match host_ok {
            Some(true) => println!("host reference: matches bit for bit"),
            Some(false) => println!("host reference: DIFFERS"),
            None => println!("host reference: skipped (--no-host-check)"),
        }
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
