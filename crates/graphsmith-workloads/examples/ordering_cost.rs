//! The cost of ordering one graph after another (`graphsmith_workloads::ordering`,
//! docs/overlap.md): a branch and a trunk joined by event nodes, as one graph, by host polling,
//! by a stream wait and on one stream, at each size, timed turn by turn in one process (CUDA
//! events, warm-up first, medians). Every contender's result is checked against the host first.
//! Prints a Markdown table, or one JSON object with `--json`; exits 1 when a check fails.
//!
//! `ordering_cost [--nodes 10,1000] [--reps 200] [--warmup 20] [--json]`

use clap::Parser;
use graphsmith::Context;
use graphsmith_workloads::ordering::{markdown, measure};

#[derive(Parser)]
struct Cli {
    /// Kernels per branch (and per trunk), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,1000")]
    nodes: Vec<usize>,
    /// Timed rounds (each runs every contender once).
    #[arg(long, default_value_t = 200)]
    reps: usize,
    /// Rounds run before timing.
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let ctx = Context::new(0)?;
    let mut rows = Vec::new();
    for &n in &cli.nodes {
        rows.extend(measure(&ctx, n, cli.warmup, cli.reps)?);
    }
    let ok = rows.iter().all(|r| r.correct);
    if cli.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "nodes": r.nodes, "ordering": r.contender,
                    "end_to_end_us": r.end_to_end_us, "idle_us": r.idle_us,
                    "added_vs_one_graph_us": r.added_us, "correct": r.correct,
                })
            })
            .collect();
        let out = serde_json::json!({
            "workload": "ordering", "reps": cli.reps, "warmup": cli.warmup, "rows": list,
        });
        println!("{out}");
    } else {
        println!(
            "branch then trunk, N kernels each (256 floats); medians of {} rounds after {} warm-up rounds\n",
            cli.reps, cli.warmup
        );
        print!("{}", markdown(&rows));
    }
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
