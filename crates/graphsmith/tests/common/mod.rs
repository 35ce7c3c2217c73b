//! Helpers shared by the GPU tests. Every GPU test is `#[ignore = "needs a CUDA GPU"]`, so a
//! plain `cargo test` skips it visibly; `scripts/gpu-run.sh` runs them with `--include-ignored`.
#![allow(dead_code)]

use graphsmith::{Context, DeviceBuffer, Kernel, Module, Stream};

/// A NaN with a recognisable payload: outputs are filled with it before each run, so an
/// element the GPU never wrote cannot pass a check.
pub const POISON: f32 = f32::from_bits(0x7fc0_dead);

pub struct Gpu {
    pub ctx: Context,
    pub module: Module,
    pub stream: Stream,
}

impl Gpu {
    pub fn new() -> Gpu {
        let ctx = Context::new(0).expect("a CUDA GPU is needed for this test");
        let module = ctx.builtin_kernels().expect("built-in kernels load");
        let stream = ctx.stream("test").expect("stream");
        Gpu {
            ctx,
            module,
            stream,
        }
    }
    pub fn kernel(&self, name: &str) -> Kernel {
        self.module.kernel(name).expect("kernel exists")
    }
    /// A buffer holding `values`.
    pub fn buffer(&self, label: &str, values: &[f32]) -> DeviceBuffer<f32> {
        let mut b = self.ctx.alloc::<f32>(label, values.len()).expect("alloc");
        self.stream.upload(&mut b, values).expect("upload");
        b
    }
    /// A buffer filled with [`POISON`].
    pub fn poisoned(&self, label: &str, n: usize) -> DeviceBuffer<f32> {
        self.buffer(label, &vec![POISON; n])
    }
    pub fn poison(&self, b: &mut DeviceBuffer<f32>) {
        let n = b.len();
        self.stream.upload(b, &vec![POISON; n]).expect("poison");
    }
    pub fn read(&self, b: &DeviceBuffer<f32>) -> Vec<f32> {
        self.stream.download(b).expect("download")
    }
}

/// Deterministic non-trivial inputs (never all zeros): a small LCG.
pub fn inputs(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            ((s >> 8) as f32 / (1u32 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

/// Asserts two float slices are equal element by element (bit-exact kernels), naming the
/// first element that differs.
pub fn assert_same(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "{what}: element {i} is {g} (bits {:#x}), expected {w}",
            g.to_bits()
        );
    }
}
