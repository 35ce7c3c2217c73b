//! GPU test: the driver's own DOT dumps (`cuGraphDebugDotPrint`), default and verbose, of a few
//! graphs. With GS_DOT_DIR set, the dumps are kept there (they are the doctor's test fixtures).

mod common;

use common::{inputs, Gpu};
use graphsmith::{args, LaunchConfig};

#[test]
#[ignore = "needs a CUDA GPU"]
fn driver_dot_dumps_default_and_verbose() {
    let gpu = Gpu::new();
    let dir = std::env::var("GS_DOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("gs-dot"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = LaunchConfig::for_elements(256);
    let add = gpu.kernel("gs_add_scalar_f32");
    let axpy = gpu.kernel("gs_axpy_f32");

    let a = gpu.buffer("a", &inputs(256, 1));
    let mut b = gpu.buffer("b", &inputs(256, 2));
    let mut c = gpu.buffer("c", &inputs(256, 3));
    let mut chain = gpu.ctx.graph("chain").unwrap();
    let s = chain.memset("set-b", &mut b, 1.0f32, &[]).unwrap();
    let k1 = chain
        .kernel("axpy", &axpy, cfg, args![&a, &mut b, 2.0f32, 256u32], &[&s])
        .unwrap();
    let k2 = chain
        .kernel("add", &add, cfg, args![&mut b, 1.0f32, 256u32], &[&k1])
        .unwrap();
    chain.memcpy("copy", &mut c, &b, &[&k2]).unwrap();

    let mut child = gpu.ctx.graph("child").unwrap();
    child
        .kernel("child-add", &add, cfg, args![&mut c, 1.0f32, 256u32], &[])
        .unwrap();
    let event = gpu.ctx.event("ev", false).unwrap();
    let mut kinds = gpu.ctx.graph("kinds").unwrap();
    let e = kinds.empty("start", &[]).unwrap();
    let ch = kinds.child("child", &child, &[&e]).unwrap();
    let r = kinds.event_record("record", &event, &[&ch]).unwrap();
    let w = kinds.event_wait("wait", &event, &[&r]).unwrap();
    kinds.host("host", || {}, &[&w]).unwrap();

    let sides = [
        gpu.ctx.stream("s-q").unwrap(),
        gpu.ctx.stream("s-k").unwrap(),
        gpu.ctx.stream("s-v").unwrap(),
    ];
    let mut attn = graphsmith_workloads::Attention::new(&gpu.ctx, &gpu.stream, 64).unwrap();
    let racy = attn.capture(&gpu.stream, &sides, true).unwrap();
    let fixed = attn.capture(&gpu.stream, &sides, false).unwrap();

    for (name, g) in [
        ("chain", &chain),
        ("kinds", &kinds),
        ("attention-racy", &racy),
        ("attention-fixed", &fixed),
    ] {
        for verbose in [false, true] {
            let path = dir.join(format!(
                "{name}{}.dot",
                if verbose { "-verbose" } else { "" }
            ));
            g.write_driver_dot(&path, verbose).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.contains("digraph"), "{}: {text}", path.display());
        }
        std::fs::write(dir.join(format!("{name}.json")), g.model().to_json()).unwrap();
    }
}
