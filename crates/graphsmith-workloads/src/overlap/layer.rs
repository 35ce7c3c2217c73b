//! One Llama-shaped layer on the host: its shape, its deterministic weights and input, and the
//! reference of the GEMV chain the GPU runs over it (`q, k, v = Wq x, Wk x, Wv x; a = q*k + v;
//! o = Wo a; g, u = Wg o, Wu o; m = g*u + u; x' = Wd m`), summed in the kernels' order with no
//! FMA, so the GPU's result equals it bit for bit.

/// The sizes of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub hidden: usize,
    pub ffn: usize,
}

/// The matrices of a layer, in their order in host memory and in a slot.
pub const MATRICES: [&str; 7] = ["q", "k", "v", "o", "gate", "up", "down"];

impl Shape {
    /// A Llama-2 7B layer: hidden 4096, intermediate 11008 (202 M weights).
    pub const LLAMA_7B: Shape = Shape {
        hidden: 4096,
        ffn: 11008,
    };

    /// (rows, columns) of each matrix of [`MATRICES`].
    pub fn matrices(&self) -> [(usize, usize); 7] {
        let (h, f) = (self.hidden, self.ffn);
        [(h, h), (h, h), (h, h), (h, h), (f, h), (f, h), (h, f)]
    }

    /// Where each matrix starts, in elements.
    pub fn offsets(&self) -> [usize; 7] {
        let mut out = [0; 7];
        let mut at = 0;
        for (o, (r, c)) in out.iter_mut().zip(self.matrices()) {
            *o = at;
            at += r * c;
        }
        out
    }

    /// Weights per layer.
    pub fn elements(&self) -> usize {
        self.matrices().iter().map(|(r, c)| r * c).sum()
    }

    /// Bytes of one layer's weights (f32).
    pub fn bytes(&self) -> usize {
        self.elements() * 4
    }
}

/// A deterministic value in `[-1, 1)` for element `i` of layer `layer` (a hash, never all zero).
fn unit(layer: usize, i: usize) -> f32 {
    let mut z = (i as u64) ^ ((layer as u64 + 1) << 40);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// Fills `out` with elements `start..start + out.len()` of layer `layer`'s weights: each matrix
/// scaled by `1/sqrt(columns)`, so activations shrink a little from layer to layer instead of
/// growing.
pub fn weights_into(shape: &Shape, layer: usize, start: usize, out: &mut [f32]) {
    let end = start + out.len();
    for ((o, (rows, cols)), next) in shape.offsets().into_iter().zip(shape.matrices()).zip(
        shape
            .offsets()
            .into_iter()
            .skip(1)
            .chain([shape.elements()]),
    ) {
        debug_assert_eq!(o + rows * cols, next);
        let scale = 1.0 / (cols as f32).sqrt();
        for i in o.max(start)..next.min(end) {
            out[i - start] = unit(layer, i) * scale;
        }
    }
}

/// The whole of layer `layer`'s weights (for host references on small shapes).
pub fn weights(shape: &Shape, layer: usize) -> Vec<f32> {
    let mut w = vec![0.0; shape.elements()];
    weights_into(shape, layer, 0, &mut w);
    w
}

/// The first layer's input: deterministic values in `[-2, 2)`.
pub fn input(shape: &Shape) -> Vec<f32> {
    (0..shape.hidden)
        .map(|i| 2.0 * unit(usize::MAX >> 8, i))
        .collect()
}

/// `proj` on the host: `out[r] = sum_c w[r*cols + c] * x[c]`, summed in order, no FMA.
fn proj(w: &[f32], x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows)
        .map(|r| {
            let row = &w[r * cols..(r + 1) * cols];
            row.iter().zip(x).fold(0.0f32, |acc, (&w, &x)| acc + w * x)
        })
        .collect()
}

/// `attention` on the host: `a*b + c`, two roundings.
fn mul_add(a: &[f32], b: &[f32], c: &[f32]) -> Vec<f32> {
    a.iter()
        .zip(b)
        .zip(c)
        .map(|((&a, &b), &c)| a * b + c)
        .collect()
}

/// One layer on the host, as the GPU computes it: the output for input `x`.
pub fn reference_layer(shape: &Shape, w: &[f32], x: &[f32]) -> Vec<f32> {
    let o = shape.offsets();
    let d = shape.matrices();
    let m = |k: usize| &w[o[k]..o[k] + d[k].0 * d[k].1];
    let p = |k: usize, x: &[f32]| proj(m(k), x, d[k].0, d[k].1);
    let (q, k, v) = (p(0, x), p(1, x), p(2, x));
    let a = mul_add(&q, &k, &v);
    let out = p(3, &a);
    let (g, u) = (p(4, &out), p(5, &out));
    let mm = mul_add(&g, &u, &u);
    p(6, &mm)
}

/// Every layer's output on the host, from [`input`] (for small shapes).
pub fn reference(shape: &Shape, layers: usize) -> Vec<Vec<f32>> {
    let mut x = input(shape);
    let mut outs = Vec::with_capacity(layers);
    for l in 0..layers {
        x = reference_layer(shape, &weights(shape, l), &x);
        outs.push(x.clone());
    }
    outs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_7b_layer_holds_its_seven_matrices_back_to_back() {
        let s = Shape::LLAMA_7B;
        assert_eq!(s.elements(), 4 * 4096 * 4096 + 3 * 4096 * 11008);
        assert_eq!(s.bytes(), 809_500_672);
        let o = s.offsets();
        assert_eq!(o[0], 0);
        assert_eq!(o[4], 4 * 4096 * 4096);
        assert_eq!(o[6], 4 * 4096 * 4096 + 2 * 11008 * 4096);
    }

    #[test]
    fn weights_written_in_chunks_are_the_whole_weights() {
        let s = Shape { hidden: 6, ffn: 10 };
        let whole = weights(&s, 3);
        let mut pieces = vec![0.0; s.elements()];
        for (i, chunk) in pieces.chunks_mut(7).enumerate() {
            weights_into(&s, 3, i * 7, chunk);
        }
        assert_eq!(whole, pieces);
        assert_ne!(whole, weights(&s, 4), "layers differ");
        // Each matrix is scaled by 1/sqrt(columns): |w| < 1/sqrt(cols).
        let (o, d) = (s.offsets(), s.matrices());
        for m in 0..7 {
            let bound = 1.0 / (d[m].1 as f32).sqrt();
            let part = &whole[o[m]..o[m] + d[m].0 * d[m].1];
            assert!(
                part.iter().all(|w| w.abs() <= bound && *w != 0.0),
                "matrix {m}"
            );
        }
    }

    #[test]
    fn one_layer_of_one_element_is_the_chain_by_hand() {
        let s = Shape { hidden: 1, ffn: 1 };
        let w = [2.0, 3.0, 0.5, -1.0, 4.0, 0.25, 2.0];
        // q, k, v = 2, 3, 0.5; a = 6.5; o = -6.5; g, u = -26, -1.625; m = 40.625; x' = 81.25.
        assert_eq!(reference_layer(&s, &w, &[1.0]), [81.25]);
    }

    #[test]
    fn the_test_shape_stays_finite_and_non_zero_over_layers() {
        let s = Shape {
            hidden: 200,
            ffn: 536,
        };
        let outs = reference(&s, 5);
        assert_eq!(outs.len(), 5);
        assert!(outs.iter().flatten().all(|v| v.is_finite() && *v != 0.0));
        assert_ne!(outs[0], outs[1]);
    }
}
