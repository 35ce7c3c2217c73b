//! GPU tests: page-locked host buffers, copied into and out of the device by a built graph, a
//! captured graph and eager streams, checked against host references with poisoned
//! destinations; the graph keeps its host memory alive; a mismatched copy is refused.

mod common;

use common::{assert_same, inputs, Gpu, POISON};
use graphsmith::model::{AccessMode, MemorySpace, NodeKind};
use graphsmith::{args, CaptureMode, ErrorKind, HostBuffer, LaunchConfig, ObjectKind};

const N: usize = 1 << 20;

fn pinned(gpu: &Gpu, label: &str, values: &[f32]) -> HostBuffer<f32> {
    let mut h = gpu.ctx.alloc_host::<f32>(label, values.len()).unwrap();
    h.write(0, values).unwrap();
    h
}

fn poison_host(h: &mut HostBuffer<f32>) {
    let n = h.len();
    h.write(0, &vec![POISON; n]).unwrap();
}

/// `x * 0.5 + 0.25` as the kernels compute it (two rounded steps).
fn reference(x: &[f32]) -> Vec<f32> {
    x.iter().map(|&v| v * 0.5 + 0.25).collect()
}

/// The copy nodes of `model` as (label, source space, destination space), in node order.
fn copies(model: &graphsmith::model::Graph) -> Vec<(String, MemorySpace, MemorySpace)> {
    model
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Memcpy(m) => Some((n.label.clone(), m.src.space, m.dst.space)),
            _ => None,
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn built_graph_copies_host_data_in_and_out() {
    let gpu = Gpu::new();
    let scale = gpu.kernel("gs_scale_f32");
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut src = pinned(&gpu, "host-in", &inputs(N, 7));
    let mut dst = pinned(&gpu, "host-out", &vec![POISON; N]);
    let mut x = gpu.poisoned("x", N);
    let mut g = gpu.ctx.graph("round-trip").unwrap();
    let up = g.memcpy_from_host("up", &mut x, &src, &[]).unwrap();
    let half = g
        .kernel("half", &scale, cfg, args![&mut x, 0.5f32, N as u32], &[&up])
        .unwrap();
    let plus = g
        .kernel(
            "plus",
            &add,
            cfg,
            args![&mut x, 0.25f32, N as u32],
            &[&half],
        )
        .unwrap();
    g.memcpy_to_host("down", &mut dst, &x, &[&plus]).unwrap();
    assert_eq!(
        copies(g.model()),
        [
            ("up".to_string(), MemorySpace::Host, MemorySpace::Device),
            ("down".to_string(), MemorySpace::Device, MemorySpace::Host),
        ]
    );
    let up_node = &g.model().nodes[0];
    let host_read = up_node
        .accesses
        .iter()
        .find(|a| a.label == "host-in")
        .expect("the copy records its host side");
    assert_eq!(
        (host_read.mode, host_read.len),
        (AccessMode::Read, (N * 4) as u64)
    );
    let mut exec = g.instantiate().unwrap();
    // Each launch copies what the host buffer holds when it runs: new data every time.
    for run in 0..3 {
        let values = inputs(N, 100 + run);
        src.write(0, &values).unwrap();
        poison_host(&mut dst);
        gpu.poison(&mut x);
        exec.launch(&gpu.stream).unwrap();
        gpu.stream.synchronize().unwrap();
        assert_same(
            &format!("built run {run}"),
            &dst.to_vec().unwrap(),
            &reference(&values),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn captured_graph_copies_host_data_in_and_out() {
    let gpu = Gpu::new();
    let scale = gpu.kernel("gs_scale_f32");
    let add = gpu.kernel("gs_add_scalar_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let mut src = pinned(&gpu, "host-in", &inputs(N, 8));
    let mut dst = pinned(&gpu, "host-out", &vec![POISON; N]);
    let mut x = gpu.poisoned("x", N);
    let s = &gpu.stream;
    s.begin_capture(CaptureMode::Global, "captured-round-trip")
        .unwrap();
    s.copy_from_host("up", &mut x, &src).unwrap();
    s.launch("half", &scale, cfg, args![&mut x, 0.5f32, N as u32])
        .unwrap();
    s.launch("plus", &add, cfg, args![&mut x, 0.25f32, N as u32])
        .unwrap();
    s.copy_to_host("down", &mut dst, &x).unwrap();
    let g = s.end_capture().unwrap();
    // The driver's memory types for captured copies are its own; the journal's labels and
    // accesses are graphsmith's.
    let mut labels: Vec<String> = copies(g.model()).into_iter().map(|c| c.0).collect();
    labels.sort();
    assert_eq!(labels, ["down", "up"], "the journal labels both copy nodes");
    let host_sides: Vec<(String, AccessMode)> = g
        .model()
        .nodes
        .iter()
        .flat_map(|n| n.accesses.iter())
        .filter(|a| a.label.starts_with("host-"))
        .map(|a| (a.label.clone(), a.mode))
        .collect();
    assert_eq!(
        host_sides,
        [
            ("host-in".to_string(), AccessMode::Read),
            ("host-out".to_string(), AccessMode::Write),
        ]
    );
    let mut exec = g.instantiate().unwrap();
    for run in 0..3 {
        let values = inputs(N, 200 + run);
        src.write(0, &values).unwrap();
        poison_host(&mut dst);
        gpu.poison(&mut x);
        exec.launch(s).unwrap();
        s.synchronize().unwrap();
        assert_same(
            &format!("captured run {run}"),
            &dst.to_vec().unwrap(),
            &reference(&values),
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn eager_copies_round_trip_through_a_kernel() {
    let gpu = Gpu::new();
    let scale = gpu.kernel("gs_scale_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let values = inputs(N, 9);
    let src = pinned(&gpu, "host-in", &values);
    let mut dst = pinned(&gpu, "host-out", &vec![POISON; N]);
    let mut x = gpu.poisoned("x", N);
    let s = &gpu.stream;
    s.copy_from_host("up", &mut x, &src).unwrap();
    s.launch("half", &scale, cfg, args![&mut x, 0.5f32, N as u32])
        .unwrap();
    s.copy_to_host("down", &mut dst, &x).unwrap();
    s.synchronize().unwrap();
    let want: Vec<f32> = values.iter().map(|&v| v * 0.5).collect();
    assert_same("eager", &dst.to_vec().unwrap(), &want);
    // A part of the buffer, read back by range.
    assert_same("range", &dst.read(10, 5).unwrap(), &want[10..15]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn executables_keep_the_host_memory_they_copy_alive() {
    let gpu = Gpu::new();
    let values = inputs(N, 11);
    let src = pinned(&gpu, "dropped-host-in", &values);
    let mut x = gpu.poisoned("x", N);
    let mut g = gpu.ctx.graph("keeps-host").unwrap();
    g.memcpy_from_host("up", &mut x, &src, &[]).unwrap();
    let mut exec = g.instantiate().unwrap();
    drop(g);
    // The user's handle goes; the executable still holds the allocation.
    drop(src);
    exec.launch(&gpu.stream).unwrap();
    assert_same("kept alive", &gpu.read(&x), &values);
    drop(exec);
    assert!(
        gpu.ctx.drop_failures().is_empty(),
        "{:?}",
        gpu.ctx.drop_failures()
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mismatched_host_copies_name_both_buffers_and_the_line() {
    let gpu = Gpu::new();
    let src = pinned(&gpu, "host-in", &inputs(6, 1));
    let mut dst = gpu.ctx.alloc_host::<f32>("host-out", 3).unwrap();
    let mut x = gpu.poisoned("x", 4);
    let mut g = gpu.ctx.graph("bad-copies").unwrap();
    let before = line!();
    let err = g.memcpy_from_host("up", &mut x, &src, &[]).unwrap_err();
    assert_eq!(err.op, "Graph::memcpy_from_host");
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Node, "up")
    );
    assert!(
        matches!(&err.kind, ErrorKind::InvalidInput { reason }
            if reason == "copy of 6 elements from host buffer 'host-in' into 4 elements of 'x'"),
        "{err}"
    );
    assert!(
        (before..before + 3).contains(&err.at.line) && err.at.file.ends_with("gpu_host_copies.rs"),
        "{err}"
    );
    let err = gpu.stream.copy_to_host("down", &mut dst, &x).unwrap_err();
    assert_eq!(err.op, "Stream::copy_to_host");
    assert!(
        matches!(&err.kind, ErrorKind::InvalidInput { reason }
            if reason == "copy of 4 elements from 'x' into 3 elements of host buffer 'host-out'"),
        "{err}"
    );
    let err = dst.write(2, &[1.0, 2.0]).unwrap_err();
    assert_eq!(err.op, "HostBuffer::write");
    assert_eq!(
        err.to_string().split_once(": ").map(|(_, r)| r),
        Some("invalid input: elements 2..4 are out of bounds of host buffer 'host-out' of 3 elements"),
        "{err}"
    );
    assert_eq!(g.model().len(), 0, "nothing was added");
}
