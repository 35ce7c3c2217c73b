//! GPU test, in its own binary because it destroys the primary context (as `cudaDeviceReset`
//! in other code would): a launch afterwards is a typed error, and nothing panics in Drop.

mod common;

use common::Gpu;
use graphsmith::{args, ErrorKind, LaunchConfig, ObjectKind};

#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_after_the_context_is_gone_is_a_typed_error() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_scalar_f32");
    let mut x = gpu.buffer("x", &[1.0; 256]);
    let mut g = gpu.ctx.graph("doomed").unwrap();
    g.kernel(
        "add",
        &add,
        LaunchConfig::for_elements(256),
        args![&mut x, 1.0f32, 256u32],
        &[],
    )
    .unwrap();
    let mut exec = g.instantiate().unwrap();
    exec.launch(&gpu.stream).unwrap();
    gpu.stream.synchronize().unwrap();

    // Other code resets the device under us.
    // SAFETY: test code; the device handle is valid.
    let rc = unsafe { graphsmith::sys::cuDevicePrimaryCtxReset_v2(gpu.ctx.device()) };
    assert_eq!(rc, graphsmith::sys::CUresult::CUDA_SUCCESS);

    let before = line!();
    let err = exec.launch(&gpu.stream).unwrap_err();
    println!("{err}");
    // Detected by graphsmith's own check, before the executable's (dangling) handle reaches
    // the driver.
    assert!(
        matches!(err.kind, ErrorKind::ContextGone { call, .. } if call.starts_with("context check")),
        "{err}"
    );
    assert_eq!(
        (err.object.kind, err.object.label.as_str()),
        (ObjectKind::Exec, "doomed#exec")
    );
    assert!((before..before + 4).contains(&err.at.line), "{err}");
    assert!(err.cuda_code().is_some());
    // Dropping everything now must not panic; failures are recorded, with labels.
    let ctx = gpu.ctx.clone();
    drop(exec);
    drop(g);
    drop(x);
    drop(gpu);
    for failure in ctx.drop_failures() {
        println!(
            "recorded in drop: {} {} {}",
            failure.object, failure.call, failure.code
        );
    }
}
