//! NCCL collectives in captured graphs on real GPUs, one process per GPU: each multi-GPU test
//! starts one copy of this test binary per visible GPU, running the same test with
//! `GS_NCCL_GPU_RANK=rank,world,addr` set, and checks every rank's JSON report. They need 2
//! or more NVIDIA GPUs and libnccl.so.2 (NVIDIA's `nvidia-nccl-cu13` wheel, the CUDA toolkit,
//! or `GRAPHSMITH_NCCL`), and fail, saying which is missing, when run without them.
//! `one_rank_*` needs one GPU.
//!
//! Run: `cargo test --release -p graphsmith-nccl --test gpu_nccl -- --include-ignored
//! --test-threads=1 --nocapture`.

use std::process::Command;
use std::time::Duration;

use graphsmith::Context;
use graphsmith_nccl::bootstrap::{join, Root};
use graphsmith_nccl::run::{
    allreduce_graph, free_loopback_addr, gpu_count, run_ranks, AllReduceOptions,
};
use graphsmith_nccl::{unique_id, Collective, Communicator, NcclError, ReduceOp};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(120);

/// This copy's rank, world and rank 0's address, when it is one of the copies.
fn copy() -> Option<(u32, u32, String)> {
    let spec = std::env::var("GS_NCCL_GPU_RANK").ok()?;
    let p: Vec<&str> = spec.splitn(3, ',').collect();
    let [rank, world, addr] = p[..] else {
        panic!("GS_NCCL_GPU_RANK={spec:?} is not rank,world,addr")
    };
    Some((
        rank.parse().expect("rank"),
        world.parse().expect("world"),
        addr.to_string(),
    ))
}

/// Fails unless 2 or more GPUs are visible and libnccl loads; returns the GPU count.
fn need_gpus() -> u32 {
    let n = gpu_count().unwrap_or_else(|e| panic!("needs 2 or more NVIDIA GPUs: {e}"));
    assert!(
        n >= 2,
        "needs 2 or more NVIDIA GPUs; {n} visible (CUDA_VISIBLE_DEVICES={:?})",
        std::env::var("CUDA_VISIBLE_DEVICES").ok()
    );
    if let Err(e) = unique_id() {
        panic!("needs libnccl.so.2: {e}");
    }
    n as u32
}

/// Runs `test` in one copy of this binary per GPU and returns each rank's report.
fn on_every_gpu(test: &str) -> Vec<Value> {
    let world = need_gpus();
    let exe = std::env::current_exe().expect("this test binary's path");
    let addr = free_loopback_addr().expect("a free loopback port");
    let commands = (0..world)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args([
                test,
                "--exact",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GS_NCCL_GPU_RANK", format!("{r},{world},{addr}"));
            c
        })
        .collect();
    let outcomes = run_ranks(commands, TIMEOUT * 3);
    outcomes
        .iter()
        .map(|o| {
            assert!(
                !o.timed_out,
                "rank {} hung and was killed; stderr:\n{}",
                o.rank, o.stderr
            );
            let report = o.reports().pop().unwrap_or_else(|| {
                panic!(
                    "rank {} printed no report ({:?}); stdout:\n{}\nstderr:\n{}",
                    o.rank, o.status, o.stdout, o.stderr
                )
            });
            println!("{report}");
            report
        })
        .collect()
}

#[test]
#[ignore = "needs 2 or more NVIDIA GPUs and libnccl.so.2"]
fn allreduce_graph_on_every_gpu() {
    if let Some((rank, world, addr)) = copy() {
        let o = AllReduceOptions {
            rank,
            world,
            addr,
            device: rank as usize,
            count: 1 << 20,
            replays: 1000,
            timeout: TIMEOUT,
        };
        let report = allreduce_graph(&o).unwrap_or_else(|e| json!({"graphsmith_nccl": "allreduce-graph", "ok": false, "rank": rank, "error": e.to_string()}));
        println!("{report}");
        return;
    }
    for report in on_every_gpu("allreduce_graph_on_every_gpu") {
        assert_eq!(report["ok"], true, "{report}");
    }
}

#[test]
#[ignore = "needs 2 or more NVIDIA GPUs and libnccl.so.2"]
fn a_capture_that_differs_between_ranks_is_explained_not_hung() {
    if let Some((rank, world, addr)) = copy() {
        let outcome = (|| -> Result<String, NcclError> {
            let ctx = Context::new(rank as usize)?;
            let mut session = if rank == 0 {
                Root::bind(&addr)?.accept(world, unique_id()?, TIMEOUT)?
            } else {
                join(&addr, rank, world, TIMEOUT)?
            };
            let comm = Communicator::new(&ctx, &session)?;
            let stream = ctx.stream("nccl")?;
            comm.warm_up(&stream)?;
            // The last rank plans (and would capture) a different count.
            let n = if rank + 1 == world { 2048 } else { 4096 };
            let plan = [Collective::all_reduce::<f32>(ReduceOp::Sum, n)];
            let mut buf = ctx.alloc::<f32>("buf", n)?;
            let got = comm.capture(&mut session, &stream, "mismatch", &plan, TIMEOUT, |s, c| {
                c.all_reduce_in_place(s, &mut buf, ReduceOp::Sum)
            });
            match got {
                Err(e @ NcclError::CaptureDiffers { .. }) => Ok(e.to_string()),
                Err(e) => Err(e),
                Ok(_) => Ok("captured although the plans differ".into()),
            }
        })();
        let report = match outcome {
            Ok(text) => {
                json!({"graphsmith_nccl": "mismatch", "rank": rank, "ok": text.contains("collective #1 differs"), "error": text})
            }
            Err(e) => {
                json!({"graphsmith_nccl": "mismatch", "rank": rank, "ok": false, "error": e.to_string()})
            }
        };
        println!("{report}");
        return;
    }
    for report in on_every_gpu("a_capture_that_differs_between_ranks_is_explained_not_hung") {
        assert_eq!(report["ok"], true, "{report}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and libnccl.so.2"]
fn one_rank_allreduce_graph() {
    let n = gpu_count().unwrap_or_else(|e| panic!("needs an NVIDIA GPU: {e}"));
    assert!(n >= 1, "needs an NVIDIA GPU; none visible");
    let addr = free_loopback_addr().expect("a free loopback port");
    let o = AllReduceOptions {
        rank: 0,
        world: 1,
        addr,
        device: 0,
        count: 4096,
        replays: 100,
        timeout: TIMEOUT,
    };
    let report = allreduce_graph(&o).unwrap_or_else(|e| panic!("{e}"));
    println!("{report}");
    assert_eq!(report["ok"], true, "{report}");
}
