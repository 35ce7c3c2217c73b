//! The model's shape: HF `config.json` parsed and validated into a [`Config`], or one of the
//! named built-in configs (`tiny`, `small`, `1b`) for random weights.

use crate::error::{LlamaError, Result};

/// How RoPE frequencies are scaled (`rope_scaling` in `config.json`).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling.
    None,
    /// Positions divided by `factor`.
    Linear {
        /// The divisor.
        factor: f32,
    },
    /// Llama 3's frequency-dependent scaling.
    Llama3 {
        /// Scale of the low frequencies.
        factor: f32,
        /// Wavelengths above `original / low_freq_factor` are scaled fully.
        low_freq_factor: f32,
        /// Wavelengths below `original / high_freq_factor` are kept.
        high_freq_factor: f32,
        /// The context the model was trained with.
        original_max_position_embeddings: f32,
    },
}

/// A validated Llama-architecture config.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The config's name (`tiny`, `small`, `1b`) or the directory it came from.
    pub name: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
}

impl Config {
    /// Checks the shape rules the kernels rely on.
    pub fn validate(&self, file: &str) -> Result<()> {
        let bad = |field: &str, reason: String| Err(LlamaError::config(file, field, reason));
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{} attention heads are not a multiple of {} key/value heads",
                    self.num_attention_heads, self.num_key_value_heads
                ),
            );
        }
        if !self.head_dim.is_multiple_of(8) || self.head_dim > 256 {
            return bad(
                "head_dim",
                format!(
                    "must be a multiple of 8 and at most 256, found {}",
                    self.head_dim
                ),
            );
        }
        if self.num_attention_heads / self.num_key_value_heads > 16 {
            return bad(
                "num_key_value_heads",
                "more than 16 query heads per key/value head".into(),
            );
        }
        if self.vocab_size > i32::MAX as usize {
            return bad("vocab_size", format!("too large: {}", self.vocab_size));
        }
        Ok(())
    }

    /// A named built-in config: `tiny`, `small` (shaped like SmolLM2-135M) or `1b` (shaped like
    /// Llama-3.2-1B).
    pub fn named(name: &str) -> Result<Config> {
        let base = Config {
            name: name.to_string(),
            vocab_size: 512,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::None,
            max_position_embeddings: 2048,
            tie_word_embeddings: true,
        };
        Ok(match name {
            "tiny" => base,
            "small" => Config {
                vocab_size: 49152,
                hidden_size: 576,
                intermediate_size: 1536,
                num_hidden_layers: 30,
                num_attention_heads: 9,
                num_key_value_heads: 3,
                head_dim: 64,
                rms_norm_eps: 1e-5,
                rope_theta: 100000.0,
                max_position_embeddings: 8192,
                ..base
            },
            "1b" => Config {
                vocab_size: 128256,
                hidden_size: 2048,
                intermediate_size: 8192,
                num_hidden_layers: 16,
                num_attention_heads: 32,
                num_key_value_heads: 8,
                head_dim: 64,
                rms_norm_eps: 1e-5,
                rope_theta: 500000.0,
                rope_scaling: RopeScaling::Llama3 {
                    factor: 32.0,
                    low_freq_factor: 1.0,
                    high_freq_factor: 4.0,
                    original_max_position_embeddings: 8192.0,
                },
                max_position_embeddings: 131072,
                ..base
            },
            other => {
                return Err(LlamaError::config(
                    &format!("built-in {other}"),
                    "name",
                    "unknown config (want tiny, small or 1b)",
                ))
            }
        })
    }

    /// Width of the fused Q/K/V projection's output.
    pub fn qkv_dim(&self) -> usize {
        (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim
    }

    /// Width of the attention output (query heads times head_dim).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of one of K or V.
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// The RoPE inverse frequencies (head_dim / 2 of them), computed in f32 as HF does,
    /// with the config's scaling applied.
    pub fn inv_freq(&self) -> Vec<f32> {
        let dim = self.head_dim;
        let base: Vec<f32> = (0..dim / 2)
            .map(|i| 1.0 / self.rope_theta.powf((2 * i) as f32 / dim as f32))
            .collect();
        match self.rope_scaling {
            RopeScaling::None => base,
            RopeScaling::Linear { factor } => base.iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings: old,
            } => {
                let low_wavelen = old / low_freq_factor;
                let high_wavelen = old / high_freq_factor;
                base.iter()
                    .map(|&f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_wavelen { f / factor } else { f };
                        // Neither high nor low frequency (NaN-free: both sides are finite).
                        let medium = wavelen >= high_wavelen && wavelen <= low_wavelen;
                        if medium {
                            let smooth = (old / wavelen - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect()
            }
        }
    }

    /// The cos and sin tables `[positions, head_dim / 2]`, rounded to bf16 as HF does before
    /// applying them.
    pub fn rope_tables(&self, positions: usize) -> (Vec<f32>, Vec<f32>) {
        let inv = self.inv_freq();
        let mut cos = Vec::with_capacity(positions * inv.len());
        let mut sin = Vec::with_capacity(positions * inv.len());
        for p in 0..positions {
            for &f in &inv {
                let angle = p as f32 * f;
                cos.push(round_bf16(angle.cos()));
                sin.push(round_bf16(angle.sin()));
            }
        }
        (cos, sin)
    }

    /// Bytes of the weights in bf16 (the lm_head counted once when tied).
    pub fn weight_bytes(&self) -> u64 {
        let (h, f, v) = (
            self.hidden_size as u64,
            self.intermediate_size as u64,
            self.vocab_size as u64,
        );
        let per_layer = self.qkv_dim() as u64 * h + h * self.q_dim() as u64 + 3 * h * f + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { v * h };
        2 * (v * h + self.num_hidden_layers as u64 * per_layer + h + head)
    }
}

/// Rounds an f32 to the nearest bf16 (ties to even) and back.
pub fn round_bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}
