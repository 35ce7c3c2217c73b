//! `graphsmith-llama inspect`: what the loader understood of a model directory, before any GPU
//! work: every value used for decoding and where it came from, the tensors found, the
//! conversions the load will do, the weight bytes and the warnings.

use std::path::Path;

use serde::Serialize;

use super::checkpoint::{tensor_table, TensorInfo};
use super::config::{Config, RopeScaling};
use super::hf_config::Understood;
use crate::error::Result;

/// The loader's view of a model directory.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    /// The model directory.
    pub model: String,
    /// Every value used for decoding: field -> (value, where it came from).
    pub decoding: std::collections::BTreeMap<String, (String, String)>,
    /// The RoPE scaling as the decoder applies it.
    pub rope: String,
    /// The tensors found in the checkpoint.
    pub tensors: Vec<TensorInfo>,
    /// Conversions the load does (f16 or f32 tensors become bf16), one line each kind.
    pub conversions: Vec<String>,
    /// Bytes of the bf16 weights on the device.
    pub weight_bytes: u64,
    /// Unknown fields, tensors the decoder does not read, and other notices.
    pub warnings: Vec<String>,
}

/// Reads `dir`'s config and checkpoint headers (no weights are read, no GPU is used).
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let (
        config,
        Understood {
            values,
            mut warnings,
            dtype,
        },
    ): (Config, Understood) = Config::read_file(&dir.join("config.json"))?;
    let tensors = tensor_table(dir)?;
    let mut conversions = Vec::new();
    for kind in ["F16", "F32"] {
        let n = tensors.iter().filter(|t| t.dtype == kind).count();
        if n > 0 {
            conversions.push(format!("{n} {kind} tensors become bf16"));
        }
    }
    if let Some(d) = dtype.filter(|d| d != "bfloat16") {
        conversions.push(format!(
            "config dtype {d}: the decoder computes in bf16 (weights rounded to bf16)"
        ));
    }
    let expected = |name: &str| {
        name == "model.embed_tokens.weight"
            || name == "model.norm.weight"
            || name == "lm_head.weight"
            || name.starts_with("model.layers.")
    };
    for t in &tensors {
        if !expected(&t.name) {
            warnings.push(format!("tensor '{}' is not read by the decoder", t.name));
        }
    }
    if config.tie_word_embeddings && tensors.iter().any(|t| t.name == "lm_head.weight") {
        warnings.push(
            "tie_word_embeddings is true: lm_head.weight is ignored, the embedding is the output projection (as transformers does)".into(),
        );
    }
    let rope = match config.rope_scaling {
        RopeScaling::None => format!("default, theta {}", config.rope_theta),
        RopeScaling::Linear { factor } => format!("linear x{factor}, theta {}", config.rope_theta),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => format!(
            "llama3 x{factor} (low {low_freq_factor}, high {high_freq_factor}, original context {original_max_position_embeddings}), theta {}",
            config.rope_theta
        ),
    };
    Ok(Inspection {
        model: dir.display().to_string(),
        decoding: values,
        rope,
        tensors,
        conversions,
        weight_bytes: config.weight_bytes(),
        warnings,
    })
}
