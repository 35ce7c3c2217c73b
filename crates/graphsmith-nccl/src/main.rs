//! `graphsmith-nccl`: NCCL collectives in CUDA graphs across GPUs.
//!
//! - `allreduce-graph`: without `--rank`, starts one process per visible GPU on this host
//!   (ranks on loopback) and prints each rank's JSON line and a summary; with `--rank`,
//!   `--world` and `--addr`, runs one rank (start one per GPU on every host for a multi-host
//!   run, rank 0's host:port as `--addr`).
//! - `bootstrap-check`: only the TCP bootstrap (no GPU, no NCCL): checks that the ranks reach
//!   rank 0 and each other's agreement, e.g. across hosts before a real run.
//!
//! Every line on stdout is JSON. Exit codes: 0 when every check holds, 1 when one fails or a
//! rank fails, 2 on bad arguments or a machine that cannot run the command.

use std::process::{Command as Process, ExitCode};
use std::time::Duration;

use clap::{Parser, Subcommand};
use graphsmith_nccl::run::{
    allreduce_graph, bootstrap_check, free_loopback_addr, gpu_count, run_ranks, AllReduceOptions,
};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "graphsmith-nccl",
    version,
    about = "NCCL collectives in CUDA graphs, one process per GPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct RankArgs {
    /// This process's rank (without it, `allreduce-graph` starts one process per local GPU).
    #[arg(long)]
    rank: Option<u32>,
    /// The number of ranks.
    #[arg(long)]
    world: Option<u32>,
    /// Rank 0's host:port (rank 0 listens there).
    #[arg(long)]
    addr: Option<String>,
    /// Seconds the ranks wait for each other at each step.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
}

#[derive(Subcommand)]
enum Command {
    /// Capture an all-reduce in a graph on every rank, replay it, check the sums.
    AllreduceGraph {
        #[command(flatten)]
        ranks: RankArgs,
        /// The GPU this rank uses (default: its rank).
        #[arg(long)]
        device: Option<usize>,
        /// Elements (f32) of the all-reduce.
        #[arg(long, default_value_t = 1 << 20)]
        count: usize,
        /// Replays of the all-reduce graph.
        #[arg(long, default_value_t = 1000)]
        replays: u32,
    },
    /// Only the bootstrap: connect, barrier, and optionally agree on plan lines.
    BootstrapCheck {
        #[command(flatten)]
        ranks: RankArgs,
        /// A plan line every rank must give identically (repeatable), as before a capture.
        #[arg(long)]
        plan: Vec<String>,
    },
}

fn print(v: &serde_json::Value) {
    println!("{v}");
}

fn bad(msg: String) -> ExitCode {
    print(&json!({"graphsmith_nccl": "error", "ok": false, "error": msg}));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::BootstrapCheck { ranks, plan } => {
            let (Some(rank), Some(world), Some(addr)) = (ranks.rank, ranks.world, ranks.addr)
            else {
                return bad("bootstrap-check needs --rank, --world and --addr".into());
            };
            let timeout = Duration::from_secs(ranks.timeout_s);
            let report = bootstrap_check(&addr, rank, world, timeout, &plan, |at| {
                print(&json!({"graphsmith_nccl": "listening", "rank": 0, "addr": at}));
            });
            print(&report);
            exit(report["ok"] == true)
        }
        Command::AllreduceGraph {
            ranks,
            device,
            count,
            replays,
        } => {
            let timeout = Duration::from_secs(ranks.timeout_s);
            match (ranks.rank, ranks.world, ranks.addr) {
                (Some(rank), Some(world), Some(addr)) => {
                    let o = AllReduceOptions {
                        rank,
                        world,
                        addr,
                        device: device.unwrap_or(rank as usize),
                        count,
                        replays,
                        timeout,
                    };
                    let report = allreduce_graph(&o).unwrap_or_else(|e| {
                        json!({"graphsmith_nccl": "allreduce-graph", "ok": false, "rank": rank,
                               "world": world, "error": e.to_string()})
                    });
                    print(&report);
                    exit(report["ok"] == true)
                }
                (None, world, None) => launch_local(world, count, replays, ranks.timeout_s),
                _ => bad(
                    "give --rank, --world and --addr together (one rank), or none of them \
                          (one process per local GPU)"
                        .into(),
                ),
            }
        }
    }
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One process per local GPU (or `world` of them), on loopback.
fn launch_local(world: Option<u32>, count: usize, replays: u32, timeout_s: u64) -> ExitCode {
    let gpus = match gpu_count() {
        Ok(n) => n,
        Err(e) => return bad(format!("allreduce-graph needs NVIDIA GPUs: {e}")),
    };
    let world = world.unwrap_or(gpus as u32);
    if world == 0 || world as usize > gpus {
        return bad(format!(
            "a world of {world} ranks needs as many GPUs; {gpus} visible"
        ));
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            return bad(format!(
                "cannot find this executable to start the ranks: {e}"
            ))
        }
    };
    let addr = match free_loopback_addr() {
        Ok(a) => a,
        Err(e) => return bad(format!("no free loopback port for rank 0: {e}")),
    };
    let commands = (0..world)
        .map(|r| {
            let mut c = Process::new(&exe);
            c.args([
                "allreduce-graph",
                "--rank",
                &r.to_string(),
                "--world",
                &world.to_string(),
            ])
            .args(["--addr", &addr, "--device", &r.to_string()])
            .args([
                "--count",
                &count.to_string(),
                "--replays",
                &replays.to_string(),
            ])
            .args(["--timeout-s", &timeout_s.to_string()]);
            c
        })
        .collect();
    let outcomes = run_ranks(commands, Duration::from_secs(timeout_s.saturating_mul(3)));
    let mut failed = Vec::new();
    for o in &outcomes {
        let reports = o.reports();
        reports.iter().for_each(print);
        let ok = o.success() && reports.iter().any(|r| r["ok"] == true);
        if !ok {
            failed.push(o.rank);
            let why = if o.timed_out {
                "killed at the deadline"
            } else {
                "failed"
            };
            eprintln!(
                "rank {} {why} ({:?}); its stderr:\n{}",
                o.rank, o.status, o.stderr
            );
        }
    }
    print(
        &json!({"graphsmith_nccl": "allreduce-graph-summary", "ok": failed.is_empty(),
                  "world": world, "failed_ranks": failed}),
    );
    exit(failed.is_empty())
}
