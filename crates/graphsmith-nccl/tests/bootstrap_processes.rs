//! The bootstrap with one real process per rank on loopback, as a run across hosts would use
//! it. Each test starts copies of this test binary running the same test with `GS_NCCL_PEER`
//! set (`rank,world,addr,timeout_ms`; `GS_NCCL_PLAN` holds plan lines separated by `|`): such
//! a copy runs one rank of `bootstrap-check` and prints its JSON line. No GPU or NCCL needed.
//! Every case ends within seconds: every wait in the protocol has a deadline, and the children
//! are killed at a deadline of their own.

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use graphsmith_nccl::run::{bootstrap_check, free_loopback_addr, run_ranks, ChildOutcome};
use serde_json::Value;

/// Runs as a rank when this process is one of the copies; returns whether it was.
fn peer() -> bool {
    let Ok(spec) = std::env::var("GS_NCCL_PEER") else {
        return false;
    };
    let parts: Vec<&str> = spec.split(',').collect();
    let [rank, world, addr, ms] = parts[..] else {
        panic!("GS_NCCL_PEER={spec:?} is not rank,world,addr,timeout_ms")
    };
    let plan: Vec<String> = std::env::var("GS_NCCL_PLAN")
        .map(|p| p.split('|').map(str::to_string).collect())
        .unwrap_or_default();
    let report = bootstrap_check(
        addr,
        rank.parse().expect("rank"),
        world.parse().expect("world"),
        Duration::from_millis(ms.parse().expect("timeout_ms")),
        &plan,
        |_| {},
    );
    println!("{report}");
    true
}

struct Rank<'a> {
    rank: u32,
    world: u32,
    plan: &'a [&'a str],
}

/// Starts one copy of this binary per entry of `ranks`, all for rank 0 at `addr`, and waits.
/// Rank 0 waits `timeout_ms` for the others, the others twice as long.
fn run(
    test: &str,
    addr: &str,
    ranks: &[Rank<'_>],
    timeout_ms: u64,
) -> Vec<(u32, Value, ChildOutcome)> {
    let exe = std::env::current_exe().expect("this test binary's path");
    let commands = ranks
        .iter()
        .map(|r| {
            // The other ranks wait longer than rank 0, so that they hear rank 0's reason.
            let ms = if r.rank == 0 {
                timeout_ms
            } else {
                timeout_ms * 2
            };
            let mut c = Command::new(&exe);
            c.args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(
                    "GS_NCCL_PEER",
                    format!("{},{},{addr},{ms}", r.rank, r.world),
                )
                .env("GS_NCCL_PLAN", r.plan.join("|"));
            if r.plan.is_empty() {
                c.env_remove("GS_NCCL_PLAN");
            }
            c
        })
        .collect();
    let start = Instant::now();
    let outcomes = run_ranks(commands, Duration::from_secs(20));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "took {:?}",
        start.elapsed()
    );
    outcomes
        .into_iter()
        .map(|o| {
            assert!(
                !o.timed_out,
                "rank {} hung: {o:?}",
                ranks[o.rank as usize].rank
            );
            let report = o
                .reports()
                .pop()
                .unwrap_or_else(|| panic!("no report: {o:?}"));
            (ranks[o.rank as usize].rank, report, o)
        })
        .collect()
}

fn error_of(report: &Value) -> String {
    assert_eq!(report["ok"], false, "{report}");
    report["error"].as_str().unwrap_or_default().to_string()
}

fn r(rank: u32, world: u32) -> Rank<'static> {
    Rank {
        rank,
        world,
        plan: &[],
    }
}

#[test]
fn four_processes_bootstrap() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let plan = &[
        "all_reduce(sum, f32 x 4096)",
        "all_gather(f32 x 1024 per rank)",
    ];
    let ranks: Vec<Rank> = (0..4)
        .map(|i| Rank {
            rank: i,
            world: 4,
            plan,
        })
        .collect();
    let out = run("four_processes_bootstrap", &addr, &ranks, 10_000);
    let token = &out[0].1["token"];
    for (rank, report, _) in &out {
        assert_eq!(report["ok"], true, "rank {rank}: {report}");
        assert_eq!(&report["token"], token);
    }
}

#[test]
fn a_peer_that_never_connects_times_out_by_name() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let out = run(
        "a_peer_that_never_connects_times_out_by_name",
        &addr,
        &[r(0, 3), r(1, 3)],
        1500,
    );
    let e0 = error_of(&out[0].1);
    assert!(e0.contains("waiting for rank(s) [2] of 3"), "{e0}");
    let e1 = error_of(&out[1].1);
    assert!(
        e1.contains("refused this rank") && e1.contains("rank(s) [2]"),
        "{e1}"
    );
}

#[test]
fn no_rank_0_is_a_connect_error() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let out = run("no_rank_0_is_a_connect_error", &addr, &[r(1, 2)], 800);
    let e = error_of(&out[0].1);
    assert!(
        e.contains(&format!("rank 1 could not connect to rank 0 at {addr}")),
        "{e}"
    );
}

#[test]
fn garbage_from_a_peer_is_an_error_naming_it() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let a = addr.clone();
    // A client of another protocol, connecting once rank 0 listens.
    let intruder = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut s) = TcpStream::connect(&a) {
                let _ = s.write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03");
                std::thread::sleep(Duration::from_millis(500));
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    let out = run(
        "garbage_from_a_peer_is_an_error_naming_it",
        &addr,
        &[r(0, 2)],
        5000,
    );
    assert!(intruder.join().unwrap(), "never reached rank 0");
    let e = error_of(&out[0].1);
    assert!(e.starts_with("garbage from 127.0.0.1:"), "{e}");
    assert!(e.contains("got 16 03 01 02"), "{e}");
}

#[test]
fn a_wrong_rank_count_is_named_on_both_sides() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let out = run(
        "a_wrong_rank_count_is_named_on_both_sides",
        &addr,
        &[r(0, 2), r(1, 3)],
        5000,
    );
    let e0 = error_of(&out[0].1);
    assert!(
        e0.starts_with("world size mismatch: rank 1 (at 127.0.0.1:"),
        "{e0}"
    );
    assert!(e0.ends_with("says 3, rank 0 says 2"), "{e0}");
    let e1 = error_of(&out[1].1);
    assert!(
        e1.contains("refused this rank: world size mismatch"),
        "{e1}"
    );
}

#[test]
fn a_duplicate_rank_is_refused() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let out = run(
        "a_duplicate_rank_is_refused",
        &addr,
        &[r(0, 3), r(1, 3), r(1, 3)],
        5000,
    );
    let e0 = error_of(&out[0].1);
    assert!(
        e0.starts_with("duplicate rank 1: first from 127.0.0.1:"),
        "{e0}"
    );
    for (_, report, _) in &out[1..] {
        assert!(error_of(report).contains("refused this rank"), "{report}");
    }
}

#[test]
fn a_differing_capture_plan_is_named_on_every_rank() {
    if peer() {
        return;
    }
    let addr = free_loopback_addr().unwrap();
    let same = &[
        "all_reduce(sum, f32 x 4096)",
        "all_gather(f32 x 1024 per rank)",
    ];
    let other = &[
        "all_reduce(sum, f32 x 4096)",
        "reduce_scatter(sum, f32 x 1024 per rank)",
    ];
    let ranks = [
        Rank {
            rank: 0,
            world: 3,
            plan: same,
        },
        Rank {
            rank: 1,
            world: 3,
            plan: same,
        },
        Rank {
            rank: 2,
            world: 3,
            plan: other,
        },
    ];
    let out = run(
        "a_differing_capture_plan_is_named_on_every_rank",
        &addr,
        &ranks,
        5000,
    );
    for (rank, report, _) in &out {
        let e = error_of(report);
        assert!(
            e.starts_with(
                "the ranks disagree: collective #2 differs: rank 0 issues all_gather(f32 x 1024 \
                 per rank); rank 2 issues reduce_scatter(sum, f32 x 1024 per rank)"
            ),
            "rank {rank}: {e}"
        );
    }
}
