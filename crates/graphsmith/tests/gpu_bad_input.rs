//! GPU tests: each bad input yields a typed error naming the object and the caller's line.

mod common;

use common::Gpu;
use graphsmith::model::Dim3;
use graphsmith::{args, ErrorKind, LaunchConfig, ObjectKind};

#[test]
#[ignore = "needs a CUDA GPU"]
fn invalid_geometry_is_a_typed_error_with_the_line() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; 64]);
    let mut g = gpu.ctx.graph("geom").unwrap();
    let bad = LaunchConfig {
        grid: Dim3::linear(1),
        block: Dim3::linear(2048),
        shared_mem_bytes: 0,
    };
    let before = line!();
    let err = g
        .kernel("too-wide", &add, bad, args![&mut x, 1.0f32, 64u32], &[])
        .unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::InvalidGeometry { .. }),
        "{err}"
    );
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Node, "too-wide")
    );
    assert!(
        (before..before + 8).contains(&err.at.line),
        "{err}: line {} not at the call after line {before}",
        err.at.line
    );
    assert!(err.at.file.ends_with("gpu_bad_input.rs"));
    println!("{err}");
    let zero = LaunchConfig {
        grid: Dim3::new(0, 1, 1),
        block: Dim3::linear(32),
        shared_mem_bytes: 0,
    };
    let err = gpu
        .stream
        .launch("zero-grid", &add, zero, args![&mut x, 1.0f32, 64u32])
        .unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::InvalidGeometry { .. }),
        "{err}"
    );
    // Wrong argument count and size are caught before the driver sees them.
    let err = gpu
        .stream
        .launch(
            "few-args",
            &add,
            LaunchConfig::for_elements(64),
            args![&mut x, 1.0f32],
        )
        .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ArgMismatch { .. }), "{err}");
    let err = gpu
        .stream
        .launch(
            "wide-arg",
            &add,
            LaunchConfig::for_elements(64),
            args![&mut x, 1.0f64, 64u32],
        )
        .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ArgMismatch { .. }), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn dependency_on_a_node_of_another_graph_is_refused() {
    let gpu = Gpu::new();
    let mut a = gpu.ctx.graph("graph-a").unwrap();
    let mut b = gpu.ctx.graph("graph-b").unwrap();
    let na = a.empty("start-a", &[]).unwrap();
    let before = line!();
    let err = b.empty("follows-a", &[&na]).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::ForeignNode {
            node: "start-a".into(),
            node_graph: "graph-a".into()
        }
    );
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Graph, "graph-b")
    );
    assert!(
        (before..before + 8).contains(&err.at.line),
        "{err}: line {} not at the call after line {before}",
        err.at.line
    );
    assert!(b.model().is_empty(), "nothing was added to graph-b");
    println!("{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn end_capture_without_begin_is_refused() {
    let gpu = Gpu::new();
    let before = line!();
    let err = gpu.stream.end_capture().unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotCapturing);
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Stream, "test")
    );
    assert!(
        (before..before + 8).contains(&err.at.line),
        "{err}: line {} not at the call after line {before}",
        err.at.line
    );
    println!("{err}");
    // Beginning twice is refused too, and the stream stays usable afterwards.
    gpu.stream
        .begin_capture(graphsmith::CaptureMode::ThreadLocal, "first")
        .unwrap();
    let err = gpu
        .stream
        .begin_capture(graphsmith::CaptureMode::ThreadLocal, "second")
        .unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::AlreadyCapturing {
            label: "first".into()
        }
    );
    let g = gpu.stream.end_capture().unwrap();
    assert!(g.model().is_empty());
    gpu.stream.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn null_graph_handle_is_refused() {
    let gpu = Gpu::new();
    let before = line!();
    // SAFETY: null is explicitly allowed and must be refused.
    let err = unsafe { graphsmith::read_raw_graph(&gpu.ctx, std::ptr::null_mut(), "handed-in") }
        .unwrap_err();
    assert!(matches!(err.kind, ErrorKind::NullHandle { .. }), "{err}");
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Graph, "handed-in")
    );
    assert!(
        (before..before + 8).contains(&err.at.line),
        "{err}: line {} not at the call after line {before}",
        err.at.line
    );
    println!("{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn uploads_and_downloads_are_refused_inside_a_capture() {
    let gpu = Gpu::new();
    let mut x = gpu.buffer("x", &[1.0; 16]);
    gpu.stream
        .begin_capture(graphsmith::CaptureMode::Global, "no-host-copies")
        .unwrap();
    let err = gpu.stream.upload(&mut x, &[2.0; 16]).unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::NotAllowedDuringCapture { .. }),
        "{err}"
    );
    let err = gpu.stream.download(&x).unwrap_err();
    assert!(
        matches!(err.kind, ErrorKind::NotAllowedDuringCapture { .. }),
        "{err}"
    );
    gpu.stream.end_capture().unwrap();
    assert_eq!(gpu.read(&x), vec![1.0; 16]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_bad_module_image_is_refused_naming_the_module_and_why() {
    let gpu = Gpu::new();
    // Not a cubin, fatbin or PTX: refused before the driver reads it.
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    for (label, image) in [("tiny.bin", &[0u8; 2][..]), ("garbage.cubin", &garbage[..])] {
        let err = gpu.ctx.load_image(label, image).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::InvalidInput { .. }), "{err}");
        assert_eq!(
            (err.object.kind, err.object.label.as_str()),
            (ObjectKind::Module, label)
        );
        assert!(err.to_string().contains("Context::load_image"), "{err}");
        println!("{err}");
    }
    // PTX the driver cannot compile: with lazy loading the fault may surface at the load or
    // at the first kernel lookup; either way with the driver's code, naming the module or the
    // kernel.
    let broken =
        ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { this is not ptx; }\n";
    let err = match gpu.ctx.load_ptx("broken", broken) {
        Err(err) => {
            assert_eq!(
                (err.object.kind, err.object.label.as_str()),
                (ObjectKind::Module, "broken")
            );
            err
        }
        Ok(module) => {
            let err = module.kernel("k").unwrap_err();
            assert_eq!(
                (err.object.kind, err.object.label.as_str()),
                (ObjectKind::Kernel, "k")
            );
            err
        }
    };
    assert!(err.cuda_code().is_some(), "{err}");
    println!("{err}");
    // The context is still usable: the built-in PTX loads through the same path.
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; 64]);
    gpu.stream
        .launch(
            "after",
            &add,
            LaunchConfig::for_elements(64),
            args![&mut x, 0.5f32, 64u32],
        )
        .unwrap();
    assert!(gpu.stream.download(&x).unwrap().iter().all(|&v| v == 1.5));
}
