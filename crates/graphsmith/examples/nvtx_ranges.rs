//! graphsmith's named ranges as NVTX ranges: one kernel launched inside `layer-3 > attention`.
//! Run it under an NVTX tool to see the same names, e.g. Nsight Compute:
//!
//! ```text
//! ncu --nvtx --print-nvtx-rename none -k gs_add_scalar_f32 ./nvtx_ranges
//! ```
//!
//! The kernel's report then lists the push/pop stack `layer-3 > attention`.

use graphsmith::{args, range, Context, LaunchConfig};

fn main() -> graphsmith::Result<()> {
    let ctx = Context::new(0)?;
    let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    let stream = ctx.stream("main")?;
    let mut x = ctx.alloc::<f32>("x", 1024)?;
    stream.upload(&mut x, &[1.0; 1024])?;
    {
        let _layer = range("layer-3");
        let _attention = range("attention");
        stream.launch(
            "add",
            &add,
            LaunchConfig::for_elements(1024),
            args![&mut x, 1.0f32, 1024u32],
        )?;
    }
    let y = stream.download(&x)?;
    println!("ranges closed; x[0] = {}", y[0]);
    Ok(())
}
