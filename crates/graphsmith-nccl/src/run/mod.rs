//! What the `graphsmith-nccl` binary's commands do, as functions the tests call too: the
//! bootstrap alone (`bootstrap-check`: no GPU, no NCCL; checks that the ranks can reach each
//! other, across hosts too), and a captured all-reduce replayed and checked on every rank
//! (`allreduce-graph`, `allreduce.rs`). Each prints JSON lines, objects with a
//! `graphsmith_nccl` key naming them; `children.rs` runs one process per rank.

mod allreduce;
mod children;

use std::time::Duration;

use serde_json::{json, Value};

use crate::bootstrap::{self, Root, Session, UniqueId};
use crate::collective::{compare_plans, plan_hash};

pub use allreduce::{allreduce_graph, AllReduceOptions};
pub use children::{free_loopback_addr, run_ranks, ChildOutcome};

/// The unique id `bootstrap-check` hands out: fixed bytes, so every rank can check it came
/// through intact (NCCL is not involved).
pub fn check_id() -> UniqueId {
    let mut b = [0u8; 128];
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    UniqueId(b)
}

fn run_check(session: &mut Session, timeout: Duration, plan: &[String]) -> Result<(), String> {
    if session.unique_id() != &check_id() {
        return Err(format!(
            "the unique id arrived altered: {:?}",
            session.unique_id()
        ));
    }
    session.barrier(timeout).map_err(|e| e.to_string())?;
    if !plan.is_empty() {
        let bytes: String = plan.iter().map(|l| format!("{l}\n")).collect();
        session
            .agree(bytes.as_bytes(), timeout, compare_plans)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `bootstrap-check`: bootstraps rank `rank` of `world` at `addr` (rank 0 listens there;
/// port 0 lets the system choose, and `listening` hears the address before anyone can
/// connect), passes a barrier and, when `plan` is not empty, checks that every rank gives the
/// same plan lines (as before a capture). Returns the JSON report (`"ok": false` with the
/// error on failure).
pub fn bootstrap_check(
    addr: &str,
    rank: u32,
    world: u32,
    timeout: Duration,
    plan: &[String],
    listening: impl FnOnce(&str),
) -> Value {
    let session = if rank == 0 {
        Root::bind(addr).and_then(|root| {
            listening(&root.local_addr().to_string());
            root.accept(world, check_id(), timeout)
        })
    } else {
        bootstrap::join(addr, rank, world, timeout)
    };
    let plan_fingerprint = format!("{:016x}", plan_hash(plan.join("\n").as_bytes()));
    let outcome = session
        .map_err(|e| e.to_string())
        .and_then(|mut s| run_check(&mut s, timeout, plan).map(|()| s.token()));
    match outcome {
        Ok(token) => json!({
            "graphsmith_nccl": "bootstrap-check", "ok": true, "rank": rank, "world": world,
            "token": format!("{token:016x}"), "plan": plan_fingerprint,
        }),
        Err(error) => json!({
            "graphsmith_nccl": "bootstrap-check", "ok": false, "rank": rank, "world": world,
            "error": error,
        }),
    }
}

/// The number of GPUs the driver shows this process, or why there are none.
pub fn gpu_count() -> Result<usize, String> {
    if !graphsmith::gpu_available() {
        return Err("no usable NVIDIA driver (libcuda could not be loaded or initialised)".into());
    }
    let mut n: std::ffi::c_int = 0;
    // SAFETY: the driver is loaded and initialised (gpu_available); cuDeviceGetCount writes
    // one int through a valid pointer.
    let r = unsafe { graphsmith::sys::cuDeviceGetCount(&mut n) };
    if r != graphsmith::sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDeviceGetCount failed: {r:?}"));
    }
    Ok(n.max(0) as usize)
}
