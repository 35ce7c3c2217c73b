//! CPU tests of pure logic: error text (snapshots), geometry validation, memset bits.

use graphsmith_model::Dim3;

use crate::context::Limits;
use crate::driver::Failure;
use crate::error::{CudaCode, Error, ErrorKind, ObjectKind, ObjectRef, SourceLine};
use crate::module::LaunchConfig;

const H200: Limits = Limits {
    max_threads_per_block: 1024,
    max_block: [1024, 1024, 64],
    max_grid: [2_147_483_647, 65_535, 65_535],
    compute_capability: (9, 0),
};

fn at() -> SourceLine {
    SourceLine {
        file: "src/main.rs",
        line: 12,
        column: 5,
    }
}

#[test]
fn error_text_names_op_object_line_and_reason() {
    let e = Error::new(
        ErrorKind::ForeignNode {
            node: "start-a".into(),
            node_graph: "graph-a".into(),
        },
        ObjectRef::new(ObjectKind::Graph, "graph-b"),
        "Graph::empty",
        at(),
    );
    assert_eq!(
        e.to_string(),
        "Graph::empty on Graph 'graph-b' at src/main.rs:12:5: dependency on node 'start-a' of graph 'graph-a', which is another graph"
    );
    assert_eq!(
        e.fix(),
        Some("depend only on nodes returned by this graph's own builder calls")
    );

    let e = Error::new(
        ErrorKind::NotCapturing,
        ObjectRef::new(ObjectKind::Stream, "main"),
        "Stream::end_capture",
        at(),
    );
    assert_eq!(
        e.to_string(),
        "Stream::end_capture on Stream 'main' at src/main.rs:12:5: the stream is not capturing"
    );

    let e = Error::new(
        ErrorKind::NullHandle {
            what: "the CUgraph handle",
        },
        ObjectRef::new(ObjectKind::Graph, "handed-in"),
        "read_raw_graph",
        at(),
    );
    assert_eq!(
        e.to_string(),
        "read_raw_graph on Graph 'handed-in' at src/main.rs:12:5: the CUgraph handle is null"
    );
}

#[test]
fn context_gone_codes_become_context_gone_errors() {
    use cudarc::driver::sys::CUresult as R;
    for code in [
        R::CUDA_ERROR_CONTEXT_IS_DESTROYED,
        R::CUDA_ERROR_INVALID_CONTEXT,
        R::CUDA_ERROR_DEINITIALIZED,
    ] {
        let e = Failure {
            call: "cuGraphLaunch",
            code: CudaCode(code as u32),
        }
        .on(
            ObjectRef::new(ObjectKind::Exec, "step#exec"),
            "Exec::launch",
            at(),
        );
        assert!(matches!(e.kind, ErrorKind::ContextGone { .. }), "{code:?}");
        assert_eq!(e.cuda_code(), Some(CudaCode(code as u32)));
    }
    let e = Failure {
        call: "cuGraphLaunch",
        code: CudaCode(R::CUDA_ERROR_INVALID_VALUE as u32),
    }
    .on(ObjectRef::new(ObjectKind::Exec, "x"), "Exec::launch", at());
    assert!(matches!(e.kind, ErrorKind::Cuda { .. }));
    assert_eq!(
        CudaCode(R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED as u32).number(),
        900
    );
    assert_eq!(
        CudaCode(R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED as u32).name(),
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"
    );
}

#[test]
fn geometry_is_checked_against_device_limits() {
    let cfg = |grid: Dim3, block: Dim3| LaunchConfig {
        grid,
        block,
        shared_mem_bytes: 0,
    };
    assert_eq!(
        cfg(Dim3::linear(4), Dim3::linear(256)).validate(&H200),
        Ok(())
    );
    assert_eq!(
        cfg(Dim3::linear(1), Dim3::linear(2048)).validate(&H200),
        Err("block (2048,1,1): x = 2048 exceeds the device's limit of 1024".into())
    );
    assert_eq!(
        cfg(Dim3::linear(1), Dim3::new(32, 32, 2)).validate(&H200),
        Err("block (32,32,2) has 2048 threads; this device allows at most 1024 per block".into())
    );
    assert_eq!(
        cfg(Dim3::new(1, 0, 1), Dim3::linear(32)).validate(&H200),
        Err("grid (1,0,1) and block (32,1,1) must be at least 1 on every axis".into())
    );
    assert_eq!(
        cfg(Dim3::new(1, 70_000, 1), Dim3::linear(32)).validate(&H200),
        Err("grid (1,70000,1): y = 70000 exceeds the device's limit of 65535".into())
    );
    assert_eq!(LaunchConfig::for_elements(1000).grid, Dim3::linear(4));
    assert_eq!(LaunchConfig::for_elements(0).grid, Dim3::linear(1));
}

#[test]
fn memset_bits_cover_1_2_4_byte_elements_and_refuse_8() {
    use crate::memory::memset_bits;
    assert_eq!(memset_bits(0xabu8), Ok(0xab));
    assert_eq!(memset_bits(0x1234u16), Ok(0x1234));
    assert_eq!(memset_bits(1.0f32), Ok(0x3f80_0000));
    assert!(memset_bits(1.0f64).unwrap_err().contains("8 bytes"));
}

#[test]
fn conditional_errors_say_what_to_do() {
    let e = Error::new(
        ErrorKind::InvalidInput {
            reason: crate::graph::NO_COPY.into(),
        },
        ObjectRef::new(ObjectKind::Graph, "step"),
        "Graph::instantiate",
        at(),
    );
    assert_eq!(
        e.to_string(),
        "Graph::instantiate on Graph 'step' at src/main.rs:12:5: invalid input: a graph with conditional nodes cannot be copied (cuGraphClone refuses it) and has one executable at a time: while an executable shares it (Graph::instantiate, Exec::update) it can be neither changed nor instantiated again; drop that executable first, or hand the graph over with Graph::into_exec or Exec::update_owned"
    );
    let body = crate::graph::BodyRef::for_test("branch/then");
    assert_eq!(
        crate::graph::foreign_body(&body),
        "body 'branch/then' belongs to a conditional node of another graph (open it on the graph whose builder returned it)"
    );
}

#[test]
fn ending_a_capture_into_a_graph_says_to_return_from_the_closure() {
    let e = crate::graph::ending_capture_into("branch/then", "Stream::end_capture", at());
    assert_eq!(
        e.to_string(),
        "Stream::end_capture on Capture 'branch/then' at src/main.rs:12:5: invalid input: capture 'branch/then' adds to an existing graph (Stream::capture_into), which ends the capture itself and keeps the graph; return from the closure; capture_into ends the capture"
    );
}

#[test]
fn a_condition_handle_is_a_plain_u64_argument() {
    let h = crate::graph::ConditionHandle::from_raw(0x1122_3344_5566_7788, Some(1));
    let args = crate::args![h, 3u32];
    let values: Vec<Vec<u8>> = args.values().map(|v| v.to_vec()).collect();
    assert_eq!(
        values,
        vec![
            0x1122_3344_5566_7788u64.to_le_bytes().to_vec(),
            3u32.to_le_bytes().to_vec()
        ]
    );
    assert!(args.take_accesses().is_empty());
    assert_eq!(
        (h.raw(), h.default_value()),
        (0x1122_3344_5566_7788, Some(1))
    );
}

#[test]
fn scalar_args_are_little_endian_bytes() {
    let mut args = crate::args![1.5f32, 7u32, -2i64];
    let values: Vec<Vec<u8>> = args.values().map(|v| v.to_vec()).collect();
    assert_eq!(
        values,
        vec![
            1.5f32.to_le_bytes().to_vec(),
            7u32.to_le_bytes().to_vec(),
            (-2i64).to_le_bytes().to_vec()
        ]
    );
    assert!(args.take_accesses().is_empty());
    // Each value starts 8-byte aligned in the shared buffer, so the pointers are aligned too.
    for p in args.pointers().iter() {
        assert_eq!(p as usize % 8, 0);
    }
}

#[test]
fn a_missing_driver_or_device_is_a_typed_error_not_a_panic() {
    if crate::gpu_available() {
        // With a driver: a device that does not exist is a typed error naming it.
        let e = crate::Context::new(4096).unwrap_err();
        assert_eq!(
            e.object,
            ObjectRef::new(ObjectKind::Context, "gpu4096"),
            "{e}"
        );
        assert!(e.to_string().contains("gpu4096"), "{e}");
        return;
    }
    let e = crate::Context::new(0).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::NoDriver { .. }), "{e}");
    assert_eq!(e.object, ObjectRef::new(ObjectKind::Context, "gpu0"));
}

/// Thread-safety the compiler derives (no `unsafe impl` on these types): a handle type that
/// lost its auto traits would fail to compile here.
#[test]
fn handles_are_send_and_sync_where_documented() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<crate::Context>();
    send_sync::<crate::Stream>();
    send_sync::<crate::Event>();
    send_sync::<crate::Module>();
    send_sync::<crate::Kernel>();
    send_sync::<crate::DeviceBuffer<f32>>();
    send_sync::<crate::Exec>();
    send::<crate::Graph>();
}

#[test]
fn feature_unsupported_names_the_feature_what_it_needs_and_what_was_found() {
    let e = Error::new(
        ErrorKind::FeatureUnsupported(Box::new(crate::error::Unsupported {
            feature: "programmatic dependent launch",
            needs: "compute capability 9.0 or newer",
            found: "the device has 8.6".into(),
        })),
        ObjectRef::new(ObjectKind::Kernel, "ll_embed"),
        "Kernel::programmatic",
        at(),
    );
    assert_eq!(
        e.to_string(),
        "Kernel::programmatic on Kernel 'll_embed' at src/main.rs:12:5: programmatic dependent \
         launch needs compute capability 9.0 or newer; the device has 8.6"
    );
    assert!(e.fix().unwrap().contains("graphsmith probe"));
}
