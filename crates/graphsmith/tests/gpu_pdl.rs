//! GPU tests of programmatic dependent launch (PDL, compute capability 9.0+): kernels opted in
//! with `Kernel::programmatic`, joined by programmatic edges when built and when captured,
//! give the host reference's results; a kernel that reads before its wait is shown to race.

mod common;

use common::{assert_same, inputs, Gpu, POISON};
use graphsmith::model::{AccessMode, EdgeType, Graph as ModelGraph};
use graphsmith::{args, BeforeWait, CaptureMode, Kernel, LaunchConfig};

const N: usize = 1 << 16;
const CHAIN: usize = 100;

fn programmatic(gpu: &Gpu, name: &str) -> Kernel {
    gpu.kernel(name)
        .programmatic()
        .expect("this test needs programmatic dependent launch (compute capability 9.0+)")
}

fn edge_types(m: &ModelGraph) -> (usize, usize) {
    let prog = m
        .edges
        .iter()
        .filter(|e| e.ty == EdgeType::Programmatic)
        .count();
    (prog, m.edges.len() - prog)
}

/// The chain's host reference: x[i] + a_0 + a_1 + ... in order, in f32.
fn chain_reference(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| (0..CHAIN).fold(v, |v, i| v + step(i)))
        .collect()
}

fn step(i: usize) -> f32 {
    0.25 * ((i % 4) as f32 + 1.0)
}

#[test]
#[ignore = "needs a CUDA GPU with compute capability 9.0+"]
fn programmatic_chain_built_and_captured_matches_host_reference() {
    let gpu = Gpu::new();
    let add = programmatic(&gpu, "gs_pdl_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let x0 = inputs(N, 7);
    let mut x = gpu.buffer("x", &x0);

    // Built: every edge between the two opted-in kernels is programmatic.
    let mut g = gpu.ctx.graph("pdl-chain").unwrap();
    let mut prev = g
        .kernel("add-0", &add, cfg, args![&mut x, step(0), N as u32], &[])
        .unwrap();
    for i in 1..CHAIN {
        prev = g
            .kernel(
                &format!("add-{i}"),
                &add,
                cfg,
                args![&mut x, step(i), N as u32],
                &[&prev],
            )
            .unwrap();
    }
    assert_eq!(edge_types(g.model()), (CHAIN - 1, 0), "built model");
    assert_eq!(
        edge_types(&g.read_back().unwrap()),
        (CHAIN - 1, 0),
        "built, read back"
    );
    assert!(g.model().hazards().unwrap().hazards.is_empty());
    let mut exec = g.instantiate().unwrap();
    for run in 0..3 {
        let start = inputs(N, 20 + run);
        gpu.stream.upload(&mut x, &start).unwrap();
        exec.launch(&gpu.stream).unwrap();
        assert_same("built chain", &gpu.read(&x), &chain_reference(&start));
    }

    // Captured: launches with the programmatic attribute become programmatic edges.
    let s = &gpu.stream;
    s.begin_capture(CaptureMode::ThreadLocal, "pdl-chain-captured")
        .unwrap();
    for i in 0..CHAIN {
        s.launch(
            &format!("add-{i}"),
            &add,
            cfg,
            args![&mut x, step(i), N as u32],
        )
        .unwrap();
    }
    let captured = s.end_capture().unwrap();
    let read = captured.read_back().unwrap();
    assert_eq!(edge_types(&read), (CHAIN - 1, 0), "captured, read back");
    assert_eq!(
        edge_types(captured.model()),
        (CHAIN - 1, 0),
        "captured model"
    );
    assert!(captured.model().hazards().unwrap().hazards.is_empty());
    let mut cexec = captured.instantiate().unwrap();
    for run in 0..3 {
        let start = inputs(N, 40 + run);
        s.upload(&mut x, &start).unwrap();
        cexec.launch(s).unwrap();
        assert_same("captured chain", &gpu.read(&x), &chain_reference(&start));
    }

    // Eager: the same launches on the stream.
    let start = inputs(N, 60);
    s.upload(&mut x, &start).unwrap();
    for i in 0..CHAIN {
        s.launch("add", &add, cfg, args![&mut x, step(i), N as u32])
            .unwrap();
    }
    assert_same("eager chain", &gpu.read(&x), &chain_reference(&start));
}

#[test]
#[ignore = "needs a CUDA GPU with compute capability 9.0+"]
fn programmatic_fork_join_matches_host_reference() {
    let gpu = Gpu::new();
    let add_scalar = programmatic(&gpu, "gs_pdl_add_scalar_f32");
    let add = programmatic(&gpu, "gs_pdl_add_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let (xa, xb) = (inputs(N, 3), inputs(N, 4));
    let mut a = gpu.buffer("a", &xa);
    let mut b = gpu.buffer("b", &xb);
    let mut out = gpu.poisoned("out", N);
    let want: Vec<f32> = xa
        .iter()
        .zip(&xb)
        .map(|(&u, &v)| {
            let u = (0..10).fold(u, |u, i| u + step(i));
            let v = (0..10).fold(v, |v, i| v + step(i + 1));
            u + v
        })
        .collect();
    let side = gpu.ctx.stream("side").unwrap();
    let s = &gpu.stream;
    s.begin_capture(CaptureMode::ThreadLocal, "pdl-fork-join")
        .unwrap();
    side.join(s).unwrap();
    for i in 0..10 {
        s.launch("a+", &add_scalar, cfg, args![&mut a, step(i), N as u32])
            .unwrap();
        side.launch("b+", &add_scalar, cfg, args![&mut b, step(i + 1), N as u32])
            .unwrap();
    }
    s.join(&side).unwrap();
    s.launch("sum", &add, cfg, args![&a, &b, &mut out, N as u32])
        .unwrap();
    let captured = s.end_capture().unwrap();
    let (prog, full) = edge_types(&captured.read_back().unwrap());
    // 9 programmatic edges per chain; the fork's edge and the join's edges are full.
    assert_eq!(prog, 18, "programmatic edges");
    assert!(full >= 2, "the join's edges are full: {full}");
    assert!(captured.model().hazards().unwrap().hazards.is_empty());
    let mut exec = captured.instantiate().unwrap();
    for _ in 0..3 {
        s.upload(&mut a, &xa).unwrap();
        s.upload(&mut b, &xb).unwrap();
        gpu.poison(&mut out);
        exec.launch(s).unwrap();
        assert_same("fork/join", &gpu.read(&out), &want);
    }
}

/// One small block for a producer, so the consumer's blocks find room to start at once.
fn one_block() -> LaunchConfig {
    LaunchConfig {
        grid: graphsmith::model::Dim3::linear(1),
        block: graphsmith::model::Dim3::linear(256),
        shared_mem_bytes: 0,
    }
}

/// How long a spinning producer spins: ~10 ms at ~2 GHz.
const SPIN_CYCLES: u64 = 20_000_000;

#[test]
#[ignore = "needs a CUDA GPU with compute capability 9.0+"]
fn reading_before_the_wait_races_and_the_checker_says_so() {
    let gpu = Gpu::new();
    let fill = programmatic(&gpu, "gs_pdl_spin_fill_f32");
    let early = programmatic(&gpu, "gs_pdl_copy_early_f32");
    let late = programmatic(&gpu, "gs_pdl_copy_f32");
    let n = 4096usize;
    let one = one_block();
    let cfg = LaunchConfig::for_elements(n as u32);
    let cycles = SPIN_CYCLES;
    let s = &gpu.stream;
    let mut x = gpu.buffer("x", &vec![0.0; n]);
    let mut dst = gpu.poisoned("dst", n);

    // The buggy consumer reads x while the producer still spins: it copies the old zeros.
    s.launch("fill", &fill, one, args![&mut x, 1.0f32, n as u32, cycles])
        .unwrap();
    s.launch("copy-early", &early, cfg, args![&x, &mut dst, n as u32])
        .unwrap();
    let got = gpu.read(&dst);
    assert!(!got.iter().any(|v| v.to_bits() == POISON.to_bits()));
    let stale = got.iter().filter(|&&v| v == 0.0).count();
    assert!(
        stale > 0,
        "expected the early read to see the producer's old values; every element was new"
    );

    // The correct twin reads after its wait: every element is new.
    s.upload(&mut x, &vec![0.0; n]).unwrap();
    gpu.poison(&mut dst);
    s.launch("fill", &fill, one, args![&mut x, 1.0f32, n as u32, cycles])
        .unwrap();
    s.launch("copy", &late, cfg, args![&x, &mut dst, n as u32])
        .unwrap();
    assert_same("copy after the wait", &gpu.read(&dst), &vec![1.0; n]);

    // The checker: the built graph has a programmatic edge fill -> copy. The copy that reads
    // after its wait is ordered; the early copy, its read of x declared before its wait
    // (BeforeWait), is not: a read-after-write hazard.
    let mut built = |early_read: bool| {
        let mut g = gpu.ctx.graph("early-read").unwrap();
        let f = g
            .kernel(
                "fill",
                &fill,
                one,
                args![&mut x, 1.0f32, n as u32, cycles],
                &[],
            )
            .unwrap();
        let (label, kernel, args) = if early_read {
            (
                "copy-early",
                &early,
                args![BeforeWait(&x), &mut dst, n as u32],
            )
        } else {
            ("copy-late", &late, args![&x, &mut dst, n as u32])
        };
        g.kernel(label, kernel, cfg, args, &[&f]).unwrap();
        g.model().clone()
    };
    let m = built(false);
    assert_eq!(edge_types(&m), (1, 0));
    assert!(
        m.hazards().unwrap().hazards.is_empty(),
        "after the wait: ordered"
    );
    let m = built(true);
    let copy = &m.nodes[m
        .nodes
        .iter()
        .position(|n| n.label == "copy-early")
        .unwrap()];
    assert_eq!(copy.accesses_before_wait.len(), 1);
    assert_eq!(copy.accesses_before_wait[0].mode, AccessMode::Read);
    assert_eq!(copy.accesses.len(), 1, "dst, after the wait");
    let hazards = m.hazards().unwrap().hazards;
    assert_eq!(hazards.len(), 1, "{hazards:?}");
}

/// What a launch declares about its wait reaches the model, built and captured: a kernel that
/// triggers after its wait (`Kernel::triggers_after_wait`) orders what came before it before
/// the next kernel's early read (`BeforeWait`); without the declaration the same read races.
#[test]
#[ignore = "needs a CUDA GPU with compute capability 9.0+"]
fn declared_early_reads_and_late_triggers_reach_the_model() {
    let gpu = Gpu::new();
    let add = programmatic(&gpu, "gs_pdl_add_scalar_f32");
    let early = programmatic(&gpu, "gs_pdl_copy_early_f32");
    let n = 4096usize;
    let cfg = LaunchConfig::for_elements(n as u32);
    let mut y = gpu.buffer("y", &vec![0.0; n]);
    let mut z = gpu.buffer("z", &vec![0.0; n]);
    let mut dst = gpu.poisoned("dst", n);
    for late in [true, false] {
        let middle = if late {
            programmatic(&gpu, "gs_pdl_add_scalar_f32").triggers_after_wait()
        } else {
            programmatic(&gpu, "gs_pdl_add_scalar_f32")
        };
        // Built: A writes y; B (triggering after its wait, or not) writes z; C reads y before
        // its wait.
        let mut g = gpu.ctx.graph("late-trigger").unwrap();
        let a = g
            .kernel("a", &add, cfg, args![&mut y, 1.0f32, n as u32], &[])
            .unwrap();
        let b = g
            .kernel("b", &middle, cfg, args![&mut z, 1.0f32, n as u32], &[&a])
            .unwrap();
        g.kernel(
            "c",
            &early,
            cfg,
            args![BeforeWait(&y), &mut dst, n as u32],
            &[&b],
        )
        .unwrap();
        // Captured: the same three launches.
        let s = &gpu.stream;
        s.begin_capture(CaptureMode::ThreadLocal, "late-trigger-captured")
            .unwrap();
        s.launch("a", &add, cfg, args![&mut y, 1.0f32, n as u32])
            .unwrap();
        s.launch("b", &middle, cfg, args![&mut z, 1.0f32, n as u32])
            .unwrap();
        s.launch("c", &early, cfg, args![BeforeWait(&y), &mut dst, n as u32])
            .unwrap();
        let captured = s.end_capture().unwrap();
        for (how, m) in [("built", g.model()), ("captured", captured.model())] {
            assert_eq!(edge_types(m), (2, 0), "{how}");
            let node = |l: &str| &m.nodes[m.nodes.iter().position(|n| n.label == l).unwrap()];
            assert_eq!(node("b").triggers_after_wait, late, "{how}");
            assert!(!node("a").triggers_after_wait, "{how}");
            assert_eq!(node("c").accesses_before_wait.len(), 1, "{how}");
            assert_eq!(node("c").accesses_before_wait[0].label, "y", "{how}");
            let hazards = m.hazards().unwrap().hazards;
            if late {
                assert!(hazards.is_empty(), "{how}, late trigger: {hazards:?}");
            } else {
                assert_eq!(hazards.len(), 1, "{how}, early trigger: {hazards:?}");
            }
        }
    }
}

/// A graph launched after an opted-in kernel is other work on the stream: the next opted-in
/// launch waits for the whole graph (no programmatic attribute), so a consumer that reads
/// before its wait still sees what the graph's producer wrote.
#[test]
#[ignore = "needs a CUDA GPU with compute capability 9.0+"]
fn a_kernel_after_a_graph_launch_waits_for_the_whole_graph() {
    let gpu = Gpu::new();
    let add = programmatic(&gpu, "gs_pdl_add_scalar_f32");
    let fill = programmatic(&gpu, "gs_pdl_spin_fill_f32");
    let early = programmatic(&gpu, "gs_pdl_copy_early_f32");
    let n = 4096usize;
    let one = one_block();
    let cfg = LaunchConfig::for_elements(n as u32);
    let cycles = SPIN_CYCLES;
    let s = &gpu.stream;
    let mut x = gpu.buffer("x", &vec![0.0; n]);
    let mut other = gpu.buffer("other", &vec![0.0; n]);
    let mut dst = gpu.poisoned("dst", n);
    // The producer, alone in a graph: it lets its dependents start at once, then spins.
    let mut g = gpu.ctx.graph("producer").unwrap();
    g.kernel(
        "fill",
        &fill,
        one,
        args![&mut x, 1.0f32, n as u32, cycles],
        &[],
    )
    .unwrap();
    let mut exec = g.instantiate().unwrap();
    for run in 0..3 {
        s.upload(&mut x, &vec![0.0; n]).unwrap();
        gpu.poison(&mut dst);
        // An opted-in kernel, then the graph, then an opted-in consumer that reads early.
        s.launch("before", &add, cfg, args![&mut other, 1.0f32, n as u32])
            .unwrap();
        exec.launch(s).unwrap();
        s.launch("copy-early", &early, cfg, args![&x, &mut dst, n as u32])
            .unwrap();
        assert_same(
            &format!("run {run}: the consumer after the graph"),
            &gpu.read(&dst),
            &vec![1.0; n],
        );
    }
}
