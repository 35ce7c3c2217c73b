//! GPU tests of conditional nodes: IF/ELSE, WHILE and SWITCH graphs whose condition a kernel
//! sets from device data (`cudaGraphSetConditional`, resolved by the driver), with bodies built
//! node by node and captured into the body graphs (`cuStreamBeginCaptureToGraph`). Each checks
//! its results against the host with poisoned outputs, and that the read-back reproduces the
//! model's topology (node kinds per body, edges).
//!
//! Run: `cargo test -p graphsmith --test gpu_conditional -- --include-ignored --test-threads=1`

mod common;

use common::{assert_same, inputs, Gpu, POISON};
use graphsmith::model::{Graph as ModelGraph, NodeKind};
use graphsmith::{args, BodyRef, CaptureMode, DeviceBuffer, Graph, LaunchConfig};

const N: usize = 4096;
const WHY: &str =
    "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)";

/// How a body is filled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fill {
    Built,
    Captured,
}

/// The topology of a model as text, independent of the order the driver lists nodes in: the
/// sorted kinds of the nodes (conditional nodes with their bodies' topologies), then the sorted
/// edges by the kinds they join.
fn shape(m: &ModelGraph) -> String {
    let kind = |n: &graphsmith::model::Node| -> String {
        let mut out = n.kind.name().to_string();
        if let NodeKind::Conditional {
            conditional,
            bodies,
            body_graphs,
        } = &n.kind
        {
            out.push_str(&format!("({conditional:?} x{bodies}: "));
            for b in body_graphs {
                out.push_str(&format!("[{}]", shape(b)));
            }
            out.push(')');
        }
        out
    };
    let mut nodes: Vec<String> = m.nodes.iter().map(kind).collect();
    nodes.sort();
    let mut edges: Vec<String> = m
        .edges
        .iter()
        .map(|e| {
            format!(
                "{} -> {}",
                kind(&m.nodes[e.from.index()]),
                kind(&m.nodes[e.to.index()])
            )
        })
        .collect();
    edges.sort();
    format!("nodes {nodes:?} edges {edges:?}")
}

fn assert_read_back_matches(g: &Graph, what: &str) {
    let read = g.read_back().expect("read back");
    assert_eq!(shape(&read), shape(g.model()), "{what}: read-back topology");
    assert!(
        g.model().hazards().expect("hazard check").is_clean(),
        "{what}: hazards in the model: {:?}",
        g.model().hazards()
    );
}

fn u32_buffer(gpu: &Gpu, label: &str, v: u32) -> DeviceBuffer<u32> {
    let mut b = gpu.ctx.alloc::<u32>(label, 1).expect("alloc");
    gpu.stream.upload(&mut b, &[v]).expect("upload");
    b
}

/// Fills `body` with `out = x + a` (a copy, then an add after it), built or captured.
fn copy_then_add(
    gpu: &Gpu,
    g: &mut Graph,
    body: &BodyRef,
    fill: Fill,
    x: &DeviceBuffer<f32>,
    out: &mut DeviceBuffer<f32>,
    a: f32,
) {
    let (copy, add) = (gpu.kernel("gs_copy_f32"), gpu.kernel("gs_add_scalar_f32"));
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut b = g.body(body).expect("open body");
    match fill {
        Fill::Built => {
            let c = b
                .kernel("copy", &copy, cfg, args![x, &mut *out, N as u32], &[])
                .expect("copy node");
            b.kernel("add", &add, cfg, args![&mut *out, a, N as u32], &[&c])
                .expect("add node");
        }
        Fill::Captured => gpu
            .stream
            .capture_into(&mut b, CaptureMode::ThreadLocal, |s| {
                s.launch("copy", &copy, cfg, args![x, &mut *out, N as u32])?;
                s.launch("add", &add, cfg, args![&mut *out, a, N as u32])
            })
            .expect("capture into the body"),
    }
    let labels: Vec<&str> = b.model().nodes.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(labels, ["copy", "add"], "{fill:?} body labels");
}

fn plus(x: &[f32], a: f32) -> Vec<f32> {
    x.iter().map(|&v| v + a).collect()
}

fn if_else(fill: Fill) {
    let gpu = Gpu::new();
    let set = gpu.kernel("gs_set_condition");
    let x0 = inputs(N, 3);
    let x = gpu.buffer("x", &x0);
    let mut out = gpu.poisoned("out", N);
    let flag = u32_buffer(&gpu, "flag", 1);

    let mut g = gpu.ctx.graph("if-else").expect("graph");
    let h = g.condition_handle("flag", Some(0)).expect(WHY);
    let setter = g
        .kernel(
            "set",
            &set,
            LaunchConfig::for_elements(1),
            args![h, &flag],
            &[],
        )
        .expect("setter node");
    let (_, [then_body, else_body]) = g.if_else("branch", h, &[&setter]).expect(WHY);
    copy_then_add(&gpu, &mut g, &then_body, fill, &x, &mut out, 1.0);
    copy_then_add(&gpu, &mut g, &else_body, fill, &x, &mut out, 100.0);
    assert_read_back_matches(&g, &format!("{fill:?} if/else"));
    let mut exec = g.into_exec().expect("instantiate");
    let mut flag = flag;
    for (value, a) in [(1u32, 1.0f32), (0, 100.0), (7, 1.0), (0, 100.0)] {
        gpu.stream.upload(&mut flag, &[value]).expect("flag");
        gpu.poison(&mut out);
        exec.launch(&gpu.stream).expect("launch");
        assert_same(
            &format!("{fill:?} if/else, flag {value}"),
            &gpu.read(&out),
            &plus(&x0, a),
        );
    }
    println!("{fill:?} if/else: pass");
}

fn while_loop(fill: Fill) {
    let gpu = Gpu::new();
    let (add, countdown) = (
        gpu.kernel("gs_add_scalar_f32"),
        gpu.kernel("gs_while_countdown"),
    );
    let cfg = LaunchConfig::for_elements(N as u32);
    let x0 = inputs(N, 5);
    let mut x = gpu.buffer("x", &x0);
    let mut counter = u32_buffer(&gpu, "counter", 10);

    let mut g = gpu.ctx.graph("while").expect("graph");
    // Every launch enters the loop; the body's countdown decides when it leaves.
    let h = g.condition_handle("more", Some(1)).expect(WHY);
    let (_, body) = g.while_("loop", h, &[]).expect(WHY);
    {
        let mut b = g.body(&body).expect("open body");
        let one = LaunchConfig::for_elements(1);
        match fill {
            Fill::Built => {
                let step = b
                    .kernel("add", &add, cfg, args![&mut x, 1.0f32, N as u32], &[])
                    .expect("add node");
                b.kernel(
                    "countdown",
                    &countdown,
                    one,
                    args![&mut counter, h],
                    &[&step],
                )
                .expect("countdown node");
            }
            Fill::Captured => gpu
                .stream
                .capture_into(&mut b, CaptureMode::ThreadLocal, |s| {
                    s.launch("add", &add, cfg, args![&mut x, 1.0f32, N as u32])?;
                    s.launch("countdown", &countdown, one, args![&mut counter, h])
                })
                .expect("capture into the body"),
        }
    }
    assert_read_back_matches(&g, &format!("{fill:?} while"));
    let mut exec = g.into_exec().expect("instantiate");
    for times in [10u32, 3, 1] {
        let start = inputs(N, 40 + times);
        gpu.stream.upload(&mut x, &start).expect("x");
        gpu.stream.upload(&mut counter, &[times]).expect("counter");
        exec.launch(&gpu.stream).expect("launch");
        let want: Vec<f32> = start
            .iter()
            .map(|&v| (0..times).fold(v, |v, _| v + 1.0))
            .collect();
        assert_same(
            &format!("{fill:?} while, {times} iterations"),
            &gpu.read(&x),
            &want,
        );
        let left = gpu.stream.download(&counter).expect("counter");
        assert_eq!(
            left,
            [0],
            "{fill:?} while: the counter after {times} iterations"
        );
    }
    println!("{fill:?} while: pass");
}

fn switch(fill: Fill) {
    let gpu = Gpu::new();
    let select = gpu.kernel("gs_switch_select");
    let x0 = inputs(N, 9);
    let x = gpu.buffer("x", &x0);
    let mut out = gpu.poisoned("out", N);
    let mut sel = u32_buffer(&gpu, "sel", 0);
    let adds = [1.0f32, 2.0, 3.0];

    let mut g = gpu.ctx.graph("switch").expect("graph");
    let h = g.condition_handle("case", Some(0)).expect(WHY);
    let setter = g
        .kernel(
            "select",
            &select,
            LaunchConfig::for_elements(1),
            args![&sel, h],
            &[],
        )
        .expect("select node");
    let (_, bodies) = g.switch("sw", h, 3, &[&setter]).expect(WHY);
    for (body, &a) in bodies.iter().zip(&adds) {
        copy_then_add(&gpu, &mut g, body, fill, &x, &mut out, a);
    }
    assert_read_back_matches(&g, &format!("{fill:?} switch"));
    let mut exec = g.into_exec().expect("instantiate");
    for value in [0u32, 1, 2, 3, 1] {
        gpu.stream.upload(&mut sel, &[value]).expect("sel");
        gpu.poison(&mut out);
        exec.launch(&gpu.stream).expect("launch");
        let want = match adds.get(value as usize) {
            Some(&a) => plus(&x0, a),
            // No case for 3: no body runs, the poison stays.
            None => vec![POISON; N],
        };
        assert_same(
            &format!("{fill:?} switch, case {value}"),
            &gpu.read(&out),
            &want,
        );
    }
    println!("{fill:?} switch: pass");
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn if_else_built_runs_the_branch_the_gpu_chose() {
    if_else(Fill::Built);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn if_else_captured_runs_the_branch_the_gpu_chose() {
    if_else(Fill::Captured);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn while_built_runs_its_body_exactly_as_often_as_the_countdown_says() {
    while_loop(Fill::Built);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn while_captured_runs_its_body_exactly_as_often_as_the_countdown_says() {
    while_loop(Fill::Captured);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn switch_built_runs_the_selected_case_and_none_past_the_last() {
    switch(Fill::Built);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn switch_captured_runs_the_selected_case_and_none_past_the_last() {
    switch(Fill::Captured);
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn a_graph_with_conditional_nodes_is_not_copied_and_says_why() {
    let gpu = Gpu::new();
    let mut g = gpu.ctx.graph("one-exec").expect("graph");
    let h = g.condition_handle("c", Some(1)).expect(WHY);
    let (_, body) = g.if_("maybe", h, &[]).expect(WHY);
    g.body(&body)
        .expect("body")
        .empty("nothing", &[])
        .expect("empty node");
    // Instantiating shares the graph: no copy, so the driver's refusal to clone a graph with
    // conditional nodes does not stand in the way.
    let mut shared = g
        .instantiate()
        .expect("instantiate shares, it does not copy");
    shared.launch(&gpu.stream).expect("launch");
    gpu.stream.synchronize().expect("sync");
    let says_why = |err: &graphsmith::Error, what: &str| {
        let text = err.to_string();
        assert!(
            text.contains("'maybe'") && text.contains("cuGraphClone"),
            "{what}: the error names the conditional node and why: {text}"
        );
        assert!(
            text.contains("Graph::into_exec"),
            "{what}: the error names the way out: {text}"
        );
    };
    // What still must be refused while the executable shares the graph: a second executable
    // (one instantiation at a time), and any change (copy on write would need cuGraphClone),
    // in the graph or in a body.
    let err = g
        .instantiate()
        .expect_err("a second executable of a graph with conditional nodes");
    says_why(&err, "second instantiate");
    let err = g
        .empty("more", &[])
        .expect_err("a shared graph with conditional nodes cannot be copied on write");
    says_why(&err, "builder");
    let err = g
        .body(&body)
        .expect("opening a body changes nothing")
        .empty("more", &[])
        .expect_err("a body of a shared graph cannot be changed");
    assert!(
        err.to_string().contains("cuGraphClone"),
        "body: the error says why: {err}"
    );
    assert_eq!(g.model().nodes.len(), 1, "nothing was added to the model");
    // Once the executable is gone the graph is its own again: it can change, and be handed
    // over to an executable.
    drop(shared);
    g.empty("after", &[])
        .expect("an unshared graph changes in place");
    let mut exec = g.into_exec().expect("into_exec");
    exec.launch(&gpu.stream).expect("launch");
    gpu.stream.synchronize().expect("sync");
}

/// An IF/ELSE graph whose branches add `then_add` and `else_add`; with `with_else` false, an
/// IF alone.
fn branch_graph(
    gpu: &Gpu,
    x: &DeviceBuffer<f32>,
    out: &mut DeviceBuffer<f32>,
    flag: &DeviceBuffer<u32>,
    (then_add, else_add): (f32, f32),
    with_else: bool,
) -> Graph {
    let mut g = gpu.ctx.graph("branch").expect("graph");
    let h = g.condition_handle("flag", Some(0)).expect(WHY);
    let set = gpu.kernel("gs_set_condition");
    let setter = g
        .kernel(
            "set",
            &set,
            LaunchConfig::for_elements(1),
            args![h, flag],
            &[],
        )
        .expect("setter node");
    if with_else {
        let (_, [t, e]) = g.if_else("branch", h, &[&setter]).expect(WHY);
        copy_then_add(gpu, &mut g, &t, Fill::Built, x, out, then_add);
        copy_then_add(gpu, &mut g, &e, Fill::Built, x, out, else_add);
    } else {
        let (_, t) = g.if_("branch", h, &[&setter]).expect(WHY);
        copy_then_add(gpu, &mut g, &t, Fill::Built, x, out, then_add);
    }
    g
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn whole_graph_update_keeps_the_conditional_structure_and_names_the_node_otherwise() {
    use graphsmith::{ErrorKind, UpdateOutcome, UpdatePolicy};
    let gpu = Gpu::new();
    let x0 = inputs(N, 11);
    let x = gpu.buffer("x", &x0);
    let mut out = gpu.poisoned("out", N);
    let mut flag = u32_buffer(&gpu, "flag", 1);
    let first = branch_graph(&gpu, &x, &mut out, &flag, (1.0, 100.0), true);
    let mut exec = first.into_exec().expect("instantiate");

    // Same structure, other values in the bodies: updated in place.
    let second = branch_graph(&gpu, &x, &mut out, &flag, (2.0, 200.0), true);
    let outcome = exec
        .update_owned(second, UpdatePolicy::InPlace)
        .expect("an update of the same structure");
    assert_eq!(outcome, UpdateOutcome::Updated);
    for (value, a) in [(1u32, 2.0f32), (0, 200.0)] {
        gpu.stream.upload(&mut flag, &[value]).expect("flag");
        gpu.poison(&mut out);
        exec.launch(&gpu.stream).expect("launch");
        assert_same(
            &format!("updated if/else, flag {value}"),
            &gpu.read(&out),
            &plus(&x0, a),
        );
    }

    // An IF without its ELSE: refused, naming the conditional node.
    let third = branch_graph(&gpu, &x, &mut out, &flag, (3.0, 0.0), false);
    let err = exec
        .update_owned(third, UpdatePolicy::InPlace)
        .expect_err("a conditional node that lost its ELSE cannot be updated");
    match &err.kind {
        ErrorKind::UpdateImpossible { reasons } => assert!(
            reasons
                .iter()
                .any(|r| r.node.as_deref() == Some("branch") && r.reason.contains("2 bodies")),
            "reasons name the node: {reasons:?}"
        ),
        other => panic!("expected UpdateImpossible, got {other:?}"),
    }
    println!("conditional update: pass");
}

/// An IF node whose condition defaults to 1 at every launch, with an empty body.
fn always_if(gpu: &Gpu, label: &str) -> (Graph, BodyRef) {
    let mut g = gpu.ctx.graph(label).expect("graph");
    let h = g.condition_handle("c", Some(1)).expect(WHY);
    let (_, body) = g.if_("maybe", h, &[]).expect(WHY);
    (g, body)
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn end_capture_inside_capture_into_is_refused_and_the_body_survives() {
    use graphsmith::ErrorKind;
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let x0 = inputs(N, 12);
    let mut x = gpu.buffer("x", &x0);
    let (mut g, body) = always_if(&gpu, "end-inside");
    let mut b = g.body(&body).expect("body");
    let err = gpu
        .stream
        .capture_into(&mut b, CaptureMode::ThreadLocal, |s| {
            s.launch("add", &add, cfg, args![&mut x, 1.0f32, N as u32])?;
            s.end_capture().map(|_| ())
        })
        .expect_err("end_capture inside capture_into");
    let text = err.to_string();
    assert_eq!(err.op, "Stream::end_capture", "{text}");
    assert!(matches!(err.kind, ErrorKind::InvalidInput { .. }), "{text}");
    assert!(err.at.file.ends_with("gpu_conditional.rs"), "{text}");
    assert!(
        text.contains("return from the closure; capture_into ends the capture"),
        "the error says what to do: {text}"
    );
    // The failed capture's node was removed; the body is whole and captures again.
    assert!(b.model().nodes.is_empty(), "{:?}", b.model());
    gpu.stream
        .capture_into(&mut b, CaptureMode::ThreadLocal, |s| {
            s.launch("add", &add, cfg, args![&mut x, 1.0f32, N as u32])
        })
        .expect("capture into the body again");
    let labels: Vec<&str> = b.model().nodes.iter().map(|n| n.label.as_str()).collect();
    assert_eq!(labels, ["add"]);
    drop(b);
    let mut exec = g.into_exec().expect("instantiate");
    exec.launch(&gpu.stream).expect("launch");
    assert_same("the body ran once", &gpu.read(&x), &plus(&x0, 1.0));
}

#[test]
#[ignore = "needs a CUDA GPU (compute capability 9.0+ for conditional nodes with ELSE/SWITCH: driver 12.8+)"]
fn into_exec_is_refused_while_another_executable_shares_the_graph() {
    let gpu = Gpu::new();
    let (mut g, body) = always_if(&gpu, "two-execs");
    g.body(&body)
        .expect("body")
        .empty("nothing", &[])
        .expect("empty node");
    let first = g.instantiate().expect("the first executable");
    let err = g
        .into_exec()
        .expect_err("a second executable of a graph with conditional nodes");
    let text = err.to_string();
    assert!(
        text.starts_with("Graph::into_exec on Graph 'two-execs' at ")
            && text.contains("'maybe'")
            && text.contains("cuGraphClone"),
        "the error names the call, the graph, the conditional node and why: {text}"
    );
    drop(first);
}
