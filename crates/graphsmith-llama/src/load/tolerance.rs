//! How far graphsmith's logits may be from the reference's at one decode step.
//!
//! The default is a rule per step, not one number: a logit may differ by up to
//! [`DEFAULT_ULPS`] bf16 ulps of the step's largest |reference logit| `m`, where one ulp is
//! `2^(floor(log2 m) - 7)` (bf16 keeps 8 significant bits). Why ulps of the largest logit:
//!
//! - both sides round the logits to bf16, so each carries up to half an ulp of its own
//!   magnitude, and the largest logit sets the coarsest grid on the row;
//! - the activations between layers are bf16 on both sides, and the two sides sum the GEMMs and
//!   the attention in different orders (cuBLAS or the decoder's GEMV against PyTorch's kernels),
//!   so each layer may round a value one way where the other side rounds it the other; over L
//!   layers these one-ulp steps add up in the residual stream and reach the logits scaled by
//!   their size, not by an absolute constant (a 1B model's logits are larger than a 135M's, and
//!   an absolute tolerance that holds one fails the other);
//! - how many: bf16 itself sets the scale. transformers' own bf16 decode lies up to about 8
//!   ulps from the same model in float32 on the Llama-3.2-1B-shaped config, and up to about 2
//!   on the SmolLM2-135M-shaped one (`bench/llama/bf16_noise.py` measures it). Two bf16
//!   implementations that are each that near the exact model may lie twice as far from each
//!   other, so the default is 16 ulps. A real error (a wrong RoPE frequency, a missed norm, a
//!   stale KV entry) is hundreds of ulps.
//!
//! The argmax check uses the same per-step tolerance as its margin: where the reference's top-2
//! margin exceeds it, graphsmith's argmax must equal the reference's.
//! `--tolerance T` replaces the rule by one absolute tolerance for every step.

use serde::Serialize;

/// The default number of bf16 ulps of the step's largest |reference logit|.
pub const DEFAULT_ULPS: f32 = 16.0;

/// The tolerance of a check.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tolerance {
    /// Up to this many bf16 ulps of each step's largest |reference logit|.
    Ulps(f32),
    /// One absolute tolerance for every step.
    Absolute(f32),
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance::Ulps(DEFAULT_ULPS)
    }
}

/// One bf16 ulp at magnitude `m`: `2^(floor(log2 m) - 7)`; `m` of zero (or not finite) gives
/// the ulp of the smallest normal f32, so a zero row allows almost nothing.
pub fn bf16_ulp(m: f32) -> f32 {
    let m = m.abs();
    let m = if m.is_finite() && m >= f32::MIN_POSITIVE {
        m
    } else {
        f32::MIN_POSITIVE
    };
    // The exponent of an f32 is floor(log2 m) exactly (m is normal here).
    let exp = ((m.to_bits() >> 23) & 0xff) as i32 - 127;
    2f64.powi(exp - 7) as f32
}

impl Tolerance {
    /// The tolerance at a step whose reference logits are `reference`.
    pub fn at(&self, reference: &[f32]) -> f32 {
        match *self {
            Tolerance::Absolute(t) => t,
            Tolerance::Ulps(n) => {
                let m = reference
                    .iter()
                    .filter(|v| v.is_finite())
                    .fold(0.0f32, |m, v| m.max(v.abs()));
                n * bf16_ulp(m)
            }
        }
    }

    /// The rule in words, for reports.
    pub fn describe(&self) -> String {
        match *self {
            Tolerance::Absolute(t) => format!("absolute {t}"),
            Tolerance::Ulps(n) => {
                format!("{n} bf16 ulps of the step's largest |reference logit|")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_follows_the_binade() {
        assert_eq!(bf16_ulp(1.0), 1.0 / 128.0);
        assert_eq!(bf16_ulp(1.99), 1.0 / 128.0);
        assert_eq!(bf16_ulp(2.0), 1.0 / 64.0);
        assert_eq!(bf16_ulp(-3.0), 1.0 / 64.0);
        assert_eq!(bf16_ulp(0.3), 1.0 / 512.0);
        assert!(bf16_ulp(0.0) > 0.0);
    }

    #[test]
    fn the_rule_scales_with_the_largest_logit() {
        let t = Tolerance::default();
        assert_eq!(t.at(&[0.5, -2.5, 1.0]), 16.0 / 64.0);
        assert_eq!(t.at(&[0.5, 0.25, f32::NAN]), 16.0 / 256.0);
        assert_eq!(Tolerance::Absolute(0.1).at(&[100.0]), 0.1);
    }
}
