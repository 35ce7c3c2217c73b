//! Ordering between executables (docs/ordering.md): a producer graph on one stream signals, a
//! consumer graph on another waits, and the consumer sees exactly what the producer wrote
//! (built and captured twins, and `Exec::launch_after`); the launch log finds a planted missing
//! wait (and so does `graphsmith doctor --launches` over the file it writes) while the fixed
//! twin is clean; a wait on a signal nothing records is refused with its line.
//!
//! The producer spins for tens of milliseconds before it writes, and every output is poisoned
//! before each run, so a consumer that ran unordered would read poison, not pass by luck.

mod common;

use common::{assert_same, inputs, Gpu};
use graphsmith::model::NodeKind;
use graphsmith::{
    args, CaptureMode, DeviceBuffer, ErrorKind, Exec, Graph, LaunchConfig, RaceMode, Signal,
};

const N: usize = 1 << 22;
/// About 25 ms of spinning on a ~2 GHz SM clock: far longer than launching the consumer.
const SPIN_CYCLES: u64 = 50_000_000;

struct Buffers {
    src: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    want_y: Vec<f32>,
}

fn buffers(gpu: &Gpu) -> Buffers {
    let src_values = inputs(N, 71);
    let b_values = inputs(N, 72);
    // x = src * 2 (the producer), y = x + b (the consumer), each one f32 operation.
    let want_y = src_values
        .iter()
        .zip(&b_values)
        .map(|(s, b)| s * 2.0 + b)
        .collect();
    Buffers {
        src: gpu.buffer("src", &src_values),
        b: gpu.buffer("b", &b_values),
        x: gpu.poisoned("x", N),
        y: gpu.poisoned("y", N),
        want_y,
    }
}

/// The producer: spin, copy `src` into `x`, double `x`; then, with `signal`, a node that
/// records it.
fn producer(gpu: &Gpu, bufs: &mut Buffers, signal: Option<&Signal>) -> Graph {
    let cfg = LaunchConfig::for_elements(N as u32);
    let n = N as u32;
    let mut g = gpu.ctx.graph("producer").unwrap();
    let spin = g
        .kernel(
            "spin",
            &gpu.kernel("gs_spin"),
            LaunchConfig::for_elements(1),
            args![SPIN_CYCLES],
            &[],
        )
        .unwrap();
    let copy = g
        .kernel(
            "copy-x",
            &gpu.kernel("gs_copy_f32"),
            cfg,
            args![&bufs.src, &mut bufs.x, n],
            &[&spin],
        )
        .unwrap();
    let double = g
        .kernel(
            "double-x",
            &gpu.kernel("gs_scale_f32"),
            cfg,
            args![&mut bufs.x, 2.0f32, n],
            &[&copy],
        )
        .unwrap();
    if let Some(signal) = signal {
        g.signal("x-ready", signal, &[&double]).unwrap();
    }
    g
}

/// The consumer: with `signal`, a node that waits on it; then `y = x + b`.
fn consumer(gpu: &Gpu, bufs: &mut Buffers, signal: Option<&Signal>) -> Graph {
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut g = gpu.ctx.graph("consumer").unwrap();
    let wait = signal.map(|s| g.wait_for("wait-x", s, &[]).unwrap());
    let deps: Vec<_> = wait.iter().collect();
    g.kernel(
        "y=x+b",
        &gpu.kernel("gs_add_f32"),
        cfg,
        args![&bufs.x, &bufs.b, &mut bufs.y, N as u32],
        &deps,
    )
    .unwrap();
    g
}

/// Poisons `x` and `y`, launches the producer on `a` and the consumer on `b` (through
/// `launch`), waits for `b`, and checks `y` against the host.
fn run_pair(
    gpu: &Gpu,
    bufs: &mut Buffers,
    what: &str,
    launch: impl FnOnce(&graphsmith::Stream, &graphsmith::Stream),
) {
    let a = gpu.ctx.stream("a").unwrap();
    let b = gpu.ctx.stream("b").unwrap();
    gpu.poison(&mut bufs.x);
    gpu.poison(&mut bufs.y);
    launch(&a, &b);
    b.synchronize().unwrap();
    assert_same(what, &gpu.read(&bufs.y), &bufs.want_y);
    a.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn two_graphs_ordered_by_a_signal_give_the_host_reference() {
    let gpu = Gpu::new();
    let mut bufs = buffers(&gpu);

    // Built node by node: a signal node at the producer's end, a wait node at the consumer's
    // start. The signal handle is dropped: the graphs keep its event alive.
    let signal = gpu.ctx.signal("x-ready").unwrap();
    let mut prod = producer(&gpu, &mut bufs, Some(&signal))
        .into_exec()
        .unwrap();
    let mut cons = consumer(&gpu, &mut bufs, Some(&signal))
        .into_exec()
        .unwrap();
    drop(signal);
    for round in 0..3 {
        run_pair(&gpu, &mut bufs, &format!("built, round {round}"), |a, b| {
            prod.launch(a).unwrap();
            cons.launch(b).unwrap();
        });
    }

    // Captured: Stream::signal and Stream::wait_for become the same nodes.
    let signal = gpu.ctx.signal("x-ready-captured").unwrap();
    let a = gpu.ctx.stream("capture-a").unwrap();
    let cfg = LaunchConfig::for_elements(N as u32);
    let n = N as u32;
    let (spin, copy, scale, add) = (
        gpu.kernel("gs_spin"),
        gpu.kernel("gs_copy_f32"),
        gpu.kernel("gs_scale_f32"),
        gpu.kernel("gs_add_f32"),
    );
    let (pg, ()) = a
        .capture(CaptureMode::ThreadLocal, "producer-captured", |s| {
            s.launch(
                "spin",
                &spin,
                LaunchConfig::for_elements(1),
                args![SPIN_CYCLES],
            )?;
            s.launch("copy-x", &copy, cfg, args![&bufs.src, &mut bufs.x, n])?;
            s.launch("double-x", &scale, cfg, args![&mut bufs.x, 2.0f32, n])?;
            s.signal(&signal)
        })
        .unwrap();
    let (cg, ()) = a
        .capture(CaptureMode::ThreadLocal, "consumer-captured", |s| {
            s.wait_for(&signal)?;
            s.launch("y=x+b", &add, cfg, args![&bufs.x, &bufs.b, &mut bufs.y, n])
        })
        .unwrap();
    let kinds =
        |g: &Graph, want: fn(&NodeKind) -> bool| g.model().nodes.iter().any(|n| want(&n.kind));
    assert!(
        kinds(&pg, |k| matches!(k, NodeKind::EventRecord { .. })),
        "the captured producer has an event record node: {:?}",
        pg.model().nodes
    );
    assert!(
        kinds(&cg, |k| matches!(k, NodeKind::EventWait { .. })),
        "the captured consumer has an event wait node: {:?}",
        cg.model().nodes
    );
    let (mut prod, mut cons) = (pg.into_exec().unwrap(), cg.into_exec().unwrap());
    drop(signal);
    for round in 0..3 {
        run_pair(
            &gpu,
            &mut bufs,
            &format!("captured, round {round}"),
            |a, b| {
                prod.launch(a).unwrap();
                cons.launch(b).unwrap();
            },
        );
    }

    // Eager: the producer's stream signals after its launch; the consumer launches after it.
    let signal = gpu.ctx.signal("x-ready-eager").unwrap();
    let mut prod = producer(&gpu, &mut bufs, None).into_exec().unwrap();
    let mut cons = consumer(&gpu, &mut bufs, None).into_exec().unwrap();
    run_pair(&gpu, &mut bufs, "launch_after", |a, b| {
        prod.launch(a).unwrap();
        a.signal(&signal).unwrap();
        cons.launch_after(b, &[&signal]).unwrap();
    });
    assert!(
        gpu.ctx.drop_failures().is_empty(),
        "{:?}",
        gpu.ctx.drop_failures()
    );
}

/// Launches the producer on `a`, then the consumer on `b`, twice, waiting for both in between.
fn logged_run(gpu: &Gpu, prod: &mut Exec, cons: &mut Exec) {
    let a = gpu.ctx.stream("a").unwrap();
    let b = gpu.ctx.stream("b").unwrap();
    for _ in 0..2 {
        prod.launch(&a).unwrap();
        cons.launch(&b).unwrap();
        // Both finish before the next round's producer overwrites x.
        gpu.ctx.synchronize().unwrap();
    }
}

/// Runs `graphsmith doctor --launches FILE`; returns the exit code and stdout.
fn doctor(file: &std::path::Path) -> (i32, String) {
    let bin = std::env::var("GRAPHSMITH_BIN").expect(
        "GRAPHSMITH_BIN must name the graphsmith binary (scripts/gpu-run.sh sets it; after a \
         local build: target/debug/graphsmith)",
    );
    let out = std::process::Command::new(&bin)
        .arg("doctor")
        .arg("--launches")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_launch_log_finds_a_planted_missing_wait_and_the_doctor_agrees() {
    let gpu = Gpu::new();
    let mut bufs = buffers(&gpu);
    let dir = std::env::temp_dir().join(format!("graphsmith-ordering-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Planted: no signal between the producer and the consumer.
    let log = gpu.ctx.record_launches(RaceMode::Report);
    let mut prod = producer(&gpu, &mut bufs, None).into_exec().unwrap();
    let mut cons = consumer(&gpu, &mut bufs, None).into_exec().unwrap();
    logged_run(&gpu, &mut prod, &mut cons);
    let races = log.races();
    assert_eq!(races.len(), 1, "{}", log.report().text());
    let race = &races[0];
    assert_eq!(
        (race.first.graph_label.as_str(), race.first.node.as_str()),
        ("producer#exec", "copy-x"),
        "{race}"
    );
    // The doubling also writes x: the same missing wait, counted with the first pair.
    assert_eq!(race.more_pairs, 1, "{race}");
    assert_eq!(
        (race.second.graph_label.as_str(), race.second.node.as_str()),
        ("consumer#exec", "y=x+b"),
        "{race}"
    );
    assert_eq!(
        (race.buffer_label.as_str(), race.len),
        ("x", (N * 4) as u64)
    );
    assert_eq!(race.missing_wait.stream_label, "b");
    assert!(
        race.first
            .line
            .as_deref()
            .unwrap_or("")
            .contains("gpu_ordering.rs"),
        "{race}"
    );
    println!("{}", log.report().text());
    let racy = dir.join("racy-launches.json");
    log.write_json(&racy).unwrap();
    let (code, out) = doctor(&racy);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("cross-graph races: 1 (1 certain, 0 possible)"),
        "{out}"
    );
    assert!(out.contains("node 'y=x+b'"), "{out}");
    println!("{out}");

    // Refused before submission in the refusing mode.
    let _refusing = gpu.ctx.record_launches(RaceMode::Refuse);
    let a = gpu.ctx.stream("a").unwrap();
    let b = gpu.ctx.stream("b").unwrap();
    prod.launch(&a).unwrap();
    let e = cons.launch(&b).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::CrossGraphRace(_)), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("Exec::launch on Exec 'consumer#exec' at "),
        "{text}"
    );
    assert!(
        text.contains("node 'copy-x'") && text.contains("node 'y=x+b'"),
        "{text}"
    );
    assert!(e.fix().is_some());
    gpu.ctx.synchronize().unwrap();

    // The fixed twin: the producer signals, the consumer waits.
    let log = gpu.ctx.record_launches(RaceMode::Report);
    let signal = gpu.ctx.signal("x-ready").unwrap();
    let mut prod = producer(&gpu, &mut bufs, Some(&signal))
        .into_exec()
        .unwrap();
    let mut cons = consumer(&gpu, &mut bufs, Some(&signal))
        .into_exec()
        .unwrap();
    logged_run(&gpu, &mut prod, &mut cons);
    let report = log.report();
    assert!(report.races.is_empty(), "{}", report.text());
    assert_eq!(report.launches, 4);
    let fixed = dir.join("fixed-launches.json");
    log.write_json(&fixed).unwrap();
    let (code, out) = doctor(&fixed);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cross-graph races: 0"), "{out}");
    gpu.ctx.stop_recording_launches();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_wait_on_a_signal_nothing_records_is_refused_with_its_line() {
    let gpu = Gpu::new();
    let mut bufs = buffers(&gpu);
    let never = gpu.ctx.signal("never-recorded").unwrap();
    let mut cons = consumer(&gpu, &mut bufs, Some(&never)).into_exec().unwrap();
    let e = cons.launch(&gpu.stream).unwrap_err();
    let ErrorKind::UnrecordedSignal {
        signal,
        waiter: Some(waiter),
    } = &e.kind
    else {
        panic!("expected UnrecordedSignal, got {e}");
    };
    assert_eq!(signal, "never-recorded");
    assert_eq!(
        (waiter.node.as_str(), waiter.op),
        ("wait-x", "Graph::wait_for")
    );
    assert!(waiter.at.file.ends_with("gpu_ordering.rs"), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(&format!(
            "node 'wait-x' waits on signal 'never-recorded' (made by Graph::wait_for at {}), \
             which was never recorded and which no live graph, executable or stream records: \
             the wait would order nothing",
            waiter.at
        )),
        "{text}"
    );
    assert!(e
        .fix()
        .unwrap()
        .starts_with("record the signal before the wait"));

    // A stream's wait is refused at once.
    let e = gpu.stream.wait_for(&never).unwrap_err();
    let at_line = line!() - 1;
    assert_eq!(e.at.line, at_line, "{e}");
    assert!(
        e.to_string().ends_with(
            "the stream would wait on signal 'never-recorded', which was never recorded: the \
             wait would order nothing"
        ),
        "{e}"
    );

    // Once a stream records it, the same executable launches (and gives the reference).
    gpu.stream.signal(&never).unwrap();
    let mut prod = producer(&gpu, &mut bufs, None).into_exec().unwrap();
    gpu.poison(&mut bufs.x);
    gpu.poison(&mut bufs.y);
    prod.launch(&gpu.stream).unwrap();
    cons.launch(&gpu.stream).unwrap();
    assert_same("after a record", &gpu.read(&bufs.y), &bufs.want_y);
}
