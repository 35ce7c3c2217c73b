//! GPU tests: per-node updates, whole-graph updates (possible and impossible), weight swaps.

mod common;

use common::{assert_same, inputs, Gpu};
use graphsmith::model::NodeKind;
use graphsmith::{args, ErrorKind, LaunchConfig, UpdateOutcome, UpdatePolicy};

const N: usize = 2048;

#[test]
#[ignore = "needs a CUDA GPU"]
fn kernel_memset_and_memcpy_updates_match_host_references() {
    let gpu = Gpu::new();
    let axpy = gpu.kernel("gs_axpy_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let (x1v, x2v) = (inputs(N, 1), inputs(N, 2));
    let x1 = gpu.buffer("x1", &x1v);
    let x2 = gpu.buffer("x2", &x2v);
    let mut y = gpu.poisoned("y", N);
    let mut y2 = gpu.poisoned("y2", N);
    let mut out = gpu.poisoned("out", N);
    let mut out2 = gpu.poisoned("out2", N);

    let mut g = gpu.ctx.graph("updatable").unwrap();
    let set = g.memset("set-y", &mut y, 0.5f32, &[]).unwrap();
    let k = g
        .kernel(
            "axpy",
            &axpy,
            cfg,
            args![&x1, &mut y, 2.0f32, N as u32],
            &[&set],
        )
        .unwrap();
    let c = g.memcpy("copy", &mut out, &y, &[&k]).unwrap();
    let mut exec = g.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    let want1: Vec<f32> = x1v.iter().map(|x| 2.0 * x + 0.5).collect();
    assert_same("before updates", &gpu.read(&out), &want1);

    // Update all three nodes: new input, scale, geometry, memset target/value, copy target.
    exec.set_memset(&set, &mut y2, 1.25f32).unwrap();
    let half = LaunchConfig {
        grid: graphsmith::model::Dim3::linear(3),
        block: graphsmith::model::Dim3::linear(128),
        shared_mem_bytes: 0,
    };
    exec.set_kernel(&k, half, args![&x2, &mut y2, -3.0f32, N as u32])
        .unwrap();
    exec.set_memcpy(&c, &mut out2, &y2).unwrap();
    for b in [&mut y, &mut y2, &mut out, &mut out2] {
        gpu.poison(b);
    }
    exec.launch(&gpu.stream).unwrap();
    let want2: Vec<f32> = x2v.iter().map(|x| -3.0 * x + 1.25).collect();
    assert_same("after updates", &gpu.read(&out2), &want2);
    assert!(
        gpu.read(&out).iter().all(|v| v.is_nan()),
        "the old copy target is no longer written"
    );
    assert_eq!(exec.stats().node_updates, 3);

    // The executable's template was kept in step: read back from the driver, it has the new
    // parameters; the model too.
    let back = exec.template().unwrap().read_back().unwrap();
    let kernel = back
        .nodes
        .iter()
        .find_map(|n| {
            if let NodeKind::Kernel(p) = &n.kind {
                Some(p.clone())
            } else {
                None
            }
        })
        .unwrap();
    assert_eq!(kernel.args[0].bytes, x2.device_ptr().to_le_bytes());
    assert_eq!(kernel.args[2].bytes, (-3.0f32).to_le_bytes());
    assert_eq!((kernel.grid.x, kernel.block.x), (3, 128));
    let model_kernel = exec.model().find("axpy").unwrap();
    assert_eq!(
        model_kernel
            .accesses
            .iter()
            .map(|a| a.label.as_str())
            .collect::<Vec<_>>(),
        ["x2", "y2"]
    );
    // The user's graph is untouched: its model still has the first parameters.
    let NodeKind::Kernel(original) = &g.model().find("axpy").unwrap().kind else {
        panic!()
    };
    assert_eq!(original.args[0].bytes, x1.device_ptr().to_le_bytes());

    // Wrong kind and wrong argument sizes are typed errors.
    let err = exec.set_memset(&k, &mut y, 1.0f32).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::InvalidInput { .. }), "{err}");
    let err = exec
        .set_kernel(&k, cfg, args![&x2, &mut y2, -3.0f64, N as u32])
        .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ArgMismatch { .. }), "{err}");
    // A node of another graph is refused.
    let mut other = gpu.ctx.graph("other").unwrap();
    let foreign = other.empty("foreign", &[]).unwrap();
    let err = exec.set_memset(&foreign, &mut y, 1.0f32).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ForeignNode { .. }), "{err}");
}

fn chain(
    gpu: &Gpu,
    label: &str,
    x: &mut graphsmith::DeviceBuffer<f32>,
    steps: &[f32],
    memset_middle: bool,
) -> graphsmith::Graph {
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut g = gpu.ctx.graph(label).unwrap();
    let mut prev: Option<graphsmith::NodeRef> = None;
    for (i, &s) in steps.iter().enumerate() {
        let deps: Vec<&graphsmith::NodeRef> = prev.iter().collect();
        let name = format!("step-{i}");
        prev = Some(if memset_middle && i == 1 {
            g.memset(&name, x, s, &deps).unwrap()
        } else {
            g.kernel(&name, &add, cfg, args![&mut *x, s, N as u32], &deps)
                .unwrap()
        });
    }
    g
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn whole_graph_update_applies_or_explains_per_node() {
    let gpu = Gpu::new();
    let start = inputs(N, 3);
    let mut x = gpu.buffer("x", &start);
    let a = chain(&gpu, "v1", &mut x, &[1.0, 2.0, 3.0], false);
    let mut exec = a.instantiate().unwrap();

    // Same topology, new parameters: updated in place.
    let b = chain(&gpu, "v2", &mut x, &[10.0, 20.0, 30.0], false);
    assert_eq!(
        exec.update(&b, UpdatePolicy::InPlace).unwrap(),
        UpdateOutcome::Updated
    );
    gpu.stream.upload(&mut x, &start).unwrap();
    exec.launch(&gpu.stream).unwrap();
    let want: Vec<f32> = start.iter().map(|v| ((v + 10.0) + 20.0) + 30.0).collect();
    assert_same("updated", &gpu.read(&x), &want);

    // Per-node updates still address the executable after a whole-graph update, with handles
    // of either graph, and keep the current template in step.
    let node = b.find("step-0").unwrap();
    exec.set_kernel(
        &node,
        LaunchConfig::for_elements(N as u32),
        args![&mut x, 100.0f32, N as u32],
    )
    .unwrap();
    let first_of_a = a.find("step-2").unwrap();
    exec.set_kernel(
        &first_of_a,
        LaunchConfig::for_elements(N as u32),
        args![&mut x, 300.0f32, N as u32],
    )
    .unwrap();
    gpu.stream.upload(&mut x, &start).unwrap();
    exec.launch(&gpu.stream).unwrap();
    let want_nodes: Vec<f32> = start.iter().map(|v| ((v + 100.0) + 20.0) + 300.0).collect();
    assert_same(
        "per-node after whole-graph update",
        &gpu.read(&x),
        &want_nodes,
    );
    let back = exec.template().unwrap().read_back().unwrap();
    let scalars: Vec<Vec<u8>> = back
        .nodes
        .iter()
        .filter_map(|n| {
            if let NodeKind::Kernel(k) = &n.kind {
                Some(k.args[1].bytes.clone())
            } else {
                None
            }
        })
        .collect();
    let mut want_scalars: Vec<Vec<u8>> = [100.0f32, 20.0, 300.0]
        .iter()
        .map(|v| v.to_le_bytes().to_vec())
        .collect();
    let mut got_scalars = scalars.clone();
    want_scalars.sort();
    got_scalars.sort();
    assert_eq!(got_scalars, want_scalars, "template in step: {scalars:?}");
    exec.update(&b, UpdatePolicy::InPlace).unwrap();

    // A memset where the executable has a kernel: impossible, explained by label.
    let c = chain(&gpu, "v3", &mut x, &[1.0, 7.0, 1.0], true);
    let before = line!();
    let err = exec.update(&c, UpdatePolicy::InPlace).unwrap_err();
    println!("{err}");
    let ErrorKind::UpdateImpossible { reasons } = &err.kind else {
        panic!("{err}")
    };
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(reasons[0].node.as_deref(), Some("step-1"));
    assert!(
        reasons[0].reason.contains("node type changed"),
        "{}",
        reasons[0]
    );
    assert!((before..before + 4).contains(&err.at.line));
    // The executable is unchanged by the refused update.
    gpu.stream.upload(&mut x, &start).unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_same("unchanged after refusal", &gpu.read(&x), &want);

    // A different topology, with re-instantiation allowed: rebuilt, counted, reasons returned.
    let d = chain(&gpu, "v4", &mut x, &[1.0, 1.0, 1.0, 1.0], false);
    let outcome = exec.update(&d, UpdatePolicy::Reinstantiate).unwrap();
    let UpdateOutcome::Reinstantiated { reasons } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        reasons[0].reason.contains("topology changed"),
        "{reasons:?}"
    );
    assert_eq!(exec.stats().reinstantiations, 1);
    assert_eq!(exec.stats().graph_updates, 2);
    gpu.stream.upload(&mut x, &start).unwrap();
    exec.launch(&gpu.stream).unwrap();
    let want4: Vec<f32> = start
        .iter()
        .map(|v| (((v + 1.0) + 1.0) + 1.0) + 1.0)
        .collect();
    assert_same("re-instantiated", &gpu.read(&x), &want4);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn weight_swap_changes_results_without_reinstantiation() {
    use graphsmith_workloads::PROJ_KERNEL;
    let gpu = Gpu::new();
    let proj = gpu.kernel(PROJ_KERNEL);
    let d = 64usize;
    let xv = inputs(d, 4);
    let (wa, wb) = (inputs(d * d, 5), inputs(d * d, 6));
    let x = gpu.buffer("x", &xv);
    let w_a = gpu.buffer("w_a", &wa);
    let w_b = gpu.buffer("w_b", &wb);
    let mut out = gpu.poisoned("out", d);
    let cfg = LaunchConfig::for_elements(d as u32);
    let mut g = gpu.ctx.graph("layer").unwrap();
    let node = g
        .kernel(
            "proj",
            &proj,
            cfg,
            args![&x, &w_a, &mut out, d as i32, d as i32],
            &[],
        )
        .unwrap();
    let mut exec = g.into_exec().unwrap();
    let matvec = |w: &[f32]| -> Vec<f32> {
        (0..d)
            .map(|r| (0..d).fold(0.0f32, |acc, c| acc + w[r * d + c] * xv[c]))
            .collect()
    };
    for (i, (w, host)) in [(&w_a, &wa), (&w_b, &wb), (&w_a, &wa), (&w_b, &wb)]
        .into_iter()
        .enumerate()
    {
        exec.set_kernel(&node, cfg, args![&x, w, &mut out, d as i32, d as i32])
            .unwrap();
        gpu.poison(&mut out);
        exec.launch(&gpu.stream).unwrap();
        assert_same(&format!("swap {i}"), &gpu.read(&out), &matvec(host));
    }
    assert_eq!(exec.stats().reinstantiations, 0);
    assert_eq!(exec.stats().node_updates, 4);
}

/// A copy of `src` into `out`, then `out += a` (a graph whose copy node makes the executable
/// keep a driver copy of its template after a whole-graph update).
fn copy_then_add(
    gpu: &Gpu,
    label: &str,
    src: &graphsmith::DeviceBuffer<f32>,
    out: &mut graphsmith::DeviceBuffer<f32>,
    a: f32,
) -> graphsmith::Graph {
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut g = gpu.ctx.graph(label).unwrap();
    let c = g.memcpy("copy", out, src, &[]).unwrap();
    g.kernel("add", &add, cfg, args![&mut *out, a, N as u32], &[&c])
        .unwrap();
    g
}

/// A memset of `out` to `fill`, then `out += a` (a graph the executable's template follows
/// lazily after a whole-graph update).
fn fill_then_add(
    gpu: &Gpu,
    label: &str,
    out: &mut graphsmith::DeviceBuffer<f32>,
    fill: f32,
    a: f32,
) -> graphsmith::Graph {
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut g = gpu.ctx.graph(label).unwrap();
    let set = g.memset("fill", out, fill, &[]).unwrap();
    g.kernel("add", &add, cfg, args![&mut *out, a, N as u32], &[&set])
        .unwrap();
    g
}

/// The memset values and the scalar argument of each kernel of a read-back template.
fn fills_and_scalars(back: &graphsmith::model::Graph) -> (Vec<u32>, Vec<f32>) {
    let mut fills = Vec::new();
    let mut scalars = Vec::new();
    for n in &back.nodes {
        match &n.kind {
            NodeKind::Memset(m) => fills.push(m.value),
            NodeKind::Kernel(k) => {
                let b = &k.args[1].bytes;
                scalars.push(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
            _ => {}
        }
    }
    (fills, scalars)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn whole_graph_updates_keep_the_template_in_step_for_every_kind_of_graph() {
    let gpu = Gpu::new();
    let cfg = LaunchConfig::for_elements(N as u32);

    // Memset + kernel: the template follows the new graph's model, pushed when asked for.
    let mut out = gpu.poisoned("out", N);
    let a = fill_then_add(&gpu, "fill-a", &mut out, 1.0, 0.5);
    let b = fill_then_add(&gpu, "fill-b", &mut out, 2.0, 0.25);
    let mut exec = a.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    assert_same("fill-a", &gpu.read(&out), &vec![1.5; N]);
    assert_eq!(
        exec.update(&b, UpdatePolicy::InPlace).unwrap(),
        UpdateOutcome::Updated
    );
    gpu.poison(&mut out);
    exec.launch(&gpu.stream).unwrap();
    assert_same("fill-b", &gpu.read(&out), &vec![2.25; N]);
    let back = exec.template().unwrap().read_back().unwrap();
    assert_eq!(
        fills_and_scalars(&back),
        (vec![2.0f32.to_bits()], vec![0.25])
    );
    // A per-node update on top, then the template again.
    let add_b = b.find("add").unwrap();
    exec.set_kernel(&add_b, cfg, args![&mut out, 4.0f32, N as u32])
        .unwrap();
    gpu.poison(&mut out);
    exec.launch(&gpu.stream).unwrap();
    assert_same("fill-b, add 4", &gpu.read(&out), &vec![6.0; N]);
    let back = exec.template().unwrap().read_back().unwrap();
    assert_eq!(
        fills_and_scalars(&back),
        (vec![2.0f32.to_bits()], vec![4.0])
    );
    assert_eq!(
        fills_and_scalars(exec.model()),
        fills_and_scalars(&back),
        "model and driver template agree"
    );
    // The graph the executable followed is unchanged by the per-node update.
    assert_eq!(fills_and_scalars(&b.read_back().unwrap()).1, vec![0.25]);

    // Copy + kernel: the template becomes a driver copy of the new graph.
    let (s1, s2) = (inputs(N, 7), inputs(N, 8));
    let src1 = gpu.buffer("src1", &s1);
    let src2 = gpu.buffer("src2", &s2);
    let mut out = gpu.poisoned("out2", N);
    let c = copy_then_add(&gpu, "copy-1", &src1, &mut out, 1.0);
    let d = copy_then_add(&gpu, "copy-2", &src2, &mut out, 3.0);
    let mut exec = c.instantiate().unwrap();
    exec.update(&d, UpdatePolicy::InPlace).unwrap();
    let add_d = d.find("add").unwrap();
    exec.set_kernel(&add_d, cfg, args![&mut out, 5.0f32, N as u32])
        .unwrap();
    exec.launch(&gpu.stream).unwrap();
    let want: Vec<f32> = s2.iter().map(|v| v + 5.0).collect();
    assert_same("copy-2, add 5", &gpu.read(&out), &want);
    let back = exec.template().unwrap().read_back().unwrap();
    assert_eq!(fills_and_scalars(&back).1, vec![5.0]);
    let copied_from: Vec<u64> = back
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Memcpy(m) => Some(m.src.address),
            _ => None,
        })
        .collect();
    assert_eq!(copied_from, vec![src2.device_ptr()]);
}

/// Updating back and forth between two graphs, launching after each update: every update is
/// applied in place, and the graph updated away from keeps its buffers as long as a launch may
/// use them, also when its handles are dropped right after a launch.
#[test]
#[ignore = "needs a CUDA GPU"]
fn updating_back_and_forth_keeps_both_graphs_buffers() {
    let gpu = Gpu::new();
    let start = inputs(N, 5);
    let mut x = gpu.buffer("x", &start);
    let mut y = gpu.buffer("y", &start);
    let a = chain(&gpu, "a", &mut x, &[1.0, 2.0], false);
    let b = chain(&gpu, "b", &mut y, &[10.0, 20.0], false);
    let mut exec = a.instantiate().unwrap();
    let mut launches_of_a = 0;
    for round in 0..100 {
        let g = if round % 2 == 0 { &b } else { &a };
        let outcome = exec.update(g, UpdatePolicy::InPlace).unwrap();
        assert_eq!(outcome, UpdateOutcome::Updated);
        exec.launch(&gpu.stream).unwrap();
        launches_of_a += round % 2;
    }
    exec.update(&b, UpdatePolicy::InPlace).unwrap();
    exec.launch(&gpu.stream).unwrap();
    drop(b);
    drop(y);
    exec.update(&a, UpdatePolicy::InPlace).unwrap();
    exec.launch(&gpu.stream).unwrap();
    launches_of_a += 1;
    let want: Vec<f32> = start
        .iter()
        .map(|&v| (0..launches_of_a).fold(v, |v, _| (v + 1.0) + 2.0))
        .collect();
    assert_same("back and forth", &gpu.read(&x), &want);
    assert_eq!(exec.stats().graph_updates, 102);
    assert_eq!(exec.stats().reinstantiations, 0);
}
