//! What a cuBLASLt matmul of the decoder is, as pure functions: the five projections
//! ([`Projection`]), each one's matrix layouts and descriptor at a number of rows
//! ([`MatmulParams`]), the workspace each bucket gets ([`workspace_slot`],
//! [`workspace_bytes`]), and the text of a failed call's status ([`describe_status`]).

use serde::{Deserialize, Serialize};

use crate::load::config::Config;

/// The matmuls of a step: four per layer and lm_head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Projection {
    Qkv,
    O,
    GateUp,
    Down,
    Head,
}

impl Projection {
    /// Every projection, in a layer's order.
    pub const ALL: [Projection; 5] = [
        Projection::Qkv,
        Projection::O,
        Projection::GateUp,
        Projection::Down,
        Projection::Head,
    ];

    /// The name errors and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Projection::Qkv => "q/k/v",
            Projection::O => "o",
            Projection::GateUp => "gate/up",
            Projection::Down => "down",
            Projection::Head => "lm_head",
        }
    }

    /// The matmul of this projection over `rows` rows of `config`'s model.
    pub fn params(self, config: &Config, rows: usize) -> MatmulParams {
        let (h, f) = (config.hidden_size, config.intermediate_size);
        let (n, k, accumulate, out_f32) = match self {
            Projection::Qkv => (config.qkv_dim(), h, false, false),
            Projection::O => (h, config.q_dim(), true, false),
            Projection::GateUp => (2 * f, h, false, false),
            Projection::Down => (h, f, true, false),
            Projection::Head => (config.vocab_size, h, false, true),
        };
        MatmulParams {
            rows,
            n,
            k,
            accumulate,
            out_f32,
        }
    }
}

/// `y[rows, n] = x[rows, k] @ w[n, k]^T (+ y when accumulate)`: bf16 `x` and `w`, `y` bf16 or
/// f32, fp32 compute and scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulParams {
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    /// `beta = 1` (the residual added in place), else `beta = 0`.
    pub accumulate: bool,
    /// `y` is f32 (lm_head's logits), else bf16.
    pub out_f32: bool,
}

/// An element type of a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    Bf16,
    F32,
}

impl Element {
    /// Bytes per element.
    pub fn bytes(self) -> usize {
        match self {
            Element::Bf16 => 2,
            Element::F32 => 4,
        }
    }
}

/// A column-major matrix layout (`cublasLtMatrixLayoutCreate`'s arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub element: Element,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
}

/// A matmul's descriptor and layouts: `D = op(A) * B (+ C)`, in cuBLASLt's column-major view
/// of the row-major tensors (`y^T (n x rows) = w (k x n)^T * x^T (k x rows)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Descriptor {
    /// `A` is transposed (`CUBLASLT_MATMUL_DESC_TRANSA = CUBLAS_OP_T`); `B` never is.
    pub transpose_a: bool,
    /// `w`: `k x n`, leading dimension `k`.
    pub a: Layout,
    /// `x`: `k x rows`, leading dimension `k`.
    pub b: Layout,
    /// `y`, as both `C` and `D`: `n x rows`, leading dimension `n`.
    pub d: Layout,
    /// `beta`: 1 to accumulate into `y`, else 0 (`alpha` is 1).
    pub beta: f32,
}

impl MatmulParams {
    /// The descriptor and layouts cuBLASLt gets for this matmul.
    pub fn descriptor(&self) -> Descriptor {
        let (rows, n, k) = (self.rows as u64, self.n as u64, self.k as u64);
        let out = if self.out_f32 {
            Element::F32
        } else {
            Element::Bf16
        };
        Descriptor {
            transpose_a: true,
            a: Layout {
                element: Element::Bf16,
                rows: k,
                cols: n,
                ld: k as i64,
            },
            b: Layout {
                element: Element::Bf16,
                rows: k,
                cols: rows,
                ld: k as i64,
            },
            d: Layout {
                element: out,
                rows: n,
                cols: rows,
                ld: n as i64,
            },
            beta: if self.accumulate { 1.0 } else { 0.0 },
        }
    }

    /// Bytes of `x`, `w` and `y` the matmul touches: what the caller's buffers must hold.
    pub fn bytes(&self) -> (usize, usize, usize) {
        let out = if self.out_f32 { 4 } else { 2 };
        (
            self.rows * self.k * 2,
            self.n * self.k * 2,
            self.rows * self.n * out,
        )
    }
}

/// The alignment (bytes) cuBLASLt is told every operand has (`CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*`),
/// and that each call checks.
pub const ALIGNMENT: u64 = 16;

/// The bucket of `rows` rows among `buckets` (ascending): the smallest that holds them.
fn bucket_of(rows: usize, buckets: &[usize]) -> Option<usize> {
    buckets.iter().copied().find(|&b| rows <= b && rows > 0)
}

/// The workspace a matmul of `rows` rows uses: its bucket's (its index in `buckets`, ascending),
/// or one more (every step and prefill chunk above the buckets shares the last). There are
/// `buckets.len() + 1` workspaces.
pub fn workspace_slot(rows: usize, buckets: &[usize]) -> usize {
    bucket_of(rows, buckets)
        .and_then(|b| buckets.iter().position(|&x| x == b))
        .unwrap_or(buckets.len())
}

/// Bytes of the workspace of `slot`: 4 MiB up to 16 rows (split-K over a few rows needs
/// little), 16 MiB for larger buckets, 32 MiB (cuBLAS's own size on Hopper) above the buckets.
pub fn workspace_bytes(slot: usize, buckets: &[usize]) -> usize {
    match buckets.get(slot) {
        Some(&b) if b <= 16 => 4 << 20,
        Some(_) => 16 << 20,
        None => 32 << 20,
    }
}

/// How errors name the rows of a matmul: `bucket 8`, `3 rows (bucket 4)`, `512 rows (above
/// the buckets)`.
pub fn bucket_label(rows: usize, buckets: &[usize]) -> String {
    match bucket_of(rows, buckets) {
        Some(b) if b == rows => format!("bucket {b}"),
        Some(b) => format!("{rows} rows (bucket {b})"),
        None => format!("{rows} rows (above the buckets)"),
    }
}

/// A cuBLASLt status by name, with what to do about it.
pub fn describe_status(name: &str) -> String {
    let fix = match name {
        "CUBLAS_STATUS_NOT_INITIALIZED" => {
            "libcublasLt could not initialise: check that it matches the driver's CUDA version"
        }
        "CUBLAS_STATUS_ALLOC_FAILED" => "out of memory: free device memory or use --gemm cublas",
        "CUBLAS_STATUS_INVALID_VALUE" => {
            "a layout, pointer or workspace was refused: a bug in graphsmith-llama, please report it with the shape"
        }
        "CUBLAS_STATUS_ARCH_MISMATCH" | "CUBLAS_STATUS_NOT_SUPPORTED" => {
            "this cuBLASLt has no kernel for this matmul on this GPU: use --gemm cublas"
        }
        "CUBLAS_STATUS_EXECUTION_FAILED" => {
            "the kernel failed to launch or run: run under compute-sanitizer to see why"
        }
        _ => "use --gemm cublas to run without cuBLASLt",
    };
    format!("{name} ({fix})")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUCKETS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

    fn config() -> Config {
        Config::named("small").expect("the built-in small config")
    }

    #[test]
    fn each_projection_has_its_shape_and_its_accumulation() {
        let c = config();
        let (h, f, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
        let got: Vec<(usize, usize, bool, bool)> = Projection::ALL
            .iter()
            .map(|p| {
                let m = p.params(&c, 8);
                assert_eq!(m.rows, 8);
                (m.n, m.k, m.accumulate, m.out_f32)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (c.qkv_dim(), h, false, false),
                (h, c.q_dim(), true, false),
                (2 * f, h, false, false),
                (h, f, true, false),
                (v, h, false, true),
            ]
        );
    }

    #[test]
    fn descriptors_are_the_column_major_view_of_each_bucket() {
        let c = config();
        for &rows in BUCKETS.iter().chain(&[3, 512]) {
            for p in Projection::ALL {
                let m = p.params(&c, rows);
                let d = m.descriptor();
                assert!(d.transpose_a);
                assert_eq!(
                    (d.a.rows, d.a.cols, d.a.ld),
                    (m.k as u64, m.n as u64, m.k as i64)
                );
                assert_eq!(
                    (d.b.rows, d.b.cols, d.b.ld),
                    (m.k as u64, rows as u64, m.k as i64)
                );
                assert_eq!(
                    (d.d.rows, d.d.cols, d.d.ld),
                    (m.n as u64, rows as u64, m.n as i64)
                );
                assert_eq!((d.a.element, d.b.element), (Element::Bf16, Element::Bf16));
                let out = if p == Projection::Head {
                    Element::F32
                } else {
                    Element::Bf16
                };
                assert_eq!(d.d.element, out, "{} at {rows}", p.name());
                let beta = matches!(p, Projection::O | Projection::Down) as u8 as f32;
                assert_eq!(d.beta, beta, "{} at {rows}", p.name());
                let (x, w, y) = m.bytes();
                assert_eq!(x, rows * m.k * 2);
                assert_eq!(w, m.n * m.k * 2);
                assert_eq!(y, rows * m.n * out.bytes());
            }
        }
    }

    #[test]
    fn every_bucket_has_its_own_workspace_and_larger_steps_share_the_last() {
        let b = &BUCKETS;
        let slots: Vec<usize> = BUCKETS.iter().map(|&r| workspace_slot(r, b)).collect();
        assert_eq!(slots, (0..BUCKETS.len()).collect::<Vec<_>>());
        assert_eq!(workspace_slot(3, b), workspace_slot(4, b));
        assert_eq!(workspace_slot(65, b), BUCKETS.len());
        assert_eq!(workspace_slot(2048, b), BUCKETS.len());
        let mib: Vec<usize> = (0..=BUCKETS.len())
            .map(|s| workspace_bytes(s, b) >> 20)
            .collect();
        assert_eq!(mib, vec![4, 4, 4, 4, 4, 16, 16, 32]);
    }

    #[test]
    fn errors_name_the_bucket_and_say_what_to_do() {
        assert_eq!(bucket_label(8, &BUCKETS), "bucket 8");
        assert_eq!(bucket_label(3, &BUCKETS), "3 rows (bucket 4)");
        assert_eq!(bucket_label(512, &BUCKETS), "512 rows (above the buckets)");
        assert_eq!(
            describe_status("CUBLAS_STATUS_NOT_SUPPORTED"),
            "CUBLAS_STATUS_NOT_SUPPORTED (this cuBLASLt has no kernel for this matmul on this GPU: use --gemm cublas)"
        );
        let e = crate::error::LlamaError::CublasLt {
            call: "cublasLtMatmul",
            bucket: bucket_label(64, &BUCKETS),
            matmul: Projection::GateUp.name().to_string(),
            status: describe_status("CUBLAS_STATUS_EXECUTION_FAILED"),
        };
        assert_eq!(
            e.to_string(),
            "cuBLASLt call cublasLtMatmul for the gate/up matmul at bucket 64 failed: CUBLAS_STATUS_EXECUTION_FAILED (the kernel failed to launch or run: run under compute-sanitizer to see why)"
        );
    }
}
