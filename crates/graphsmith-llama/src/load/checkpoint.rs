//! Weights on the host: read from an HF safetensors checkpoint (memory-mapped, single or sharded,
//! bf16, f16 or f32, every tensor checked against the config) or made at random from a seed.
//! Q/K/V and gate/up are fused here, at load, into one weight each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

use super::config::Config;
use crate::error::{LlamaError, Result};

/// One layer's weights, bf16 bits, row-major `[out, in]` like HF's `nn.Linear`.
#[derive(Clone)]
pub struct LayerWeights {
    /// `input_layernorm.weight` `[hidden]`.
    pub input_norm: Vec<u16>,
    /// q_proj, k_proj, v_proj stacked: `[qkv_dim, hidden]`.
    pub qkv: Vec<u16>,
    /// `o_proj.weight` `[hidden, q_dim]`.
    pub o: Vec<u16>,
    /// `post_attention_layernorm.weight` `[hidden]`.
    pub post_norm: Vec<u16>,
    /// gate_proj then up_proj: `[2 * intermediate, hidden]`.
    pub gate_up: Vec<u16>,
    /// `down_proj.weight` `[hidden, intermediate]`.
    pub down: Vec<u16>,
}

/// All of a model's weights on the host (bf16 bits).
#[derive(Clone)]
pub struct HostWeights {
    /// `model.embed_tokens.weight` `[vocab, hidden]`.
    pub embed: Vec<u16>,
    pub layers: Vec<LayerWeights>,
    /// `model.norm.weight` `[hidden]`.
    pub final_norm: Vec<u16>,
    /// `lm_head.weight` `[vocab, hidden]`, `None` when tied to the embedding.
    pub lm_head: Option<Vec<u16>>,
}

impl HostWeights {
    /// The output projection (the embedding when tied).
    pub fn head(&self) -> &[u16] {
        self.lm_head.as_deref().unwrap_or(&self.embed)
    }
}

/// A small deterministic generator (SplitMix64) for random weights.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
    /// Normal(0, std) by Box-Muller.
    fn normal(&mut self, std: f32) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        std * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }
    fn tensor(&mut self, len: usize, std: f32) -> Vec<u16> {
        (0..len)
            .map(|_| bf16::from_f32(self.normal(std)).to_bits())
            .collect()
    }
}

fn ones(len: usize) -> Vec<u16> {
    vec![bf16::ONE.to_bits(); len]
}

/// Random weights for `config` (normal, std 0.02, norms 1 as HF initialises them).
pub fn random_weights(config: &Config, seed: u64) -> HostWeights {
    let mut rng = SplitMix(seed ^ 0x6772_6170_6873_6d69);
    let (h, f, v) = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
    );
    let layers = (0..config.num_hidden_layers)
        .map(|_| LayerWeights {
            input_norm: ones(h),
            qkv: rng.tensor(config.qkv_dim() * h, 0.02),
            o: rng.tensor(h * config.q_dim(), 0.02),
            post_norm: ones(h),
            gate_up: rng.tensor(2 * f * h, 0.02),
            down: rng.tensor(h * f, 0.02),
        })
        .collect();
    let embed = rng.tensor(v * h, 0.02);
    let lm_head = (!config.tie_word_embeddings).then(|| rng.tensor(v * h, 0.02));
    HostWeights {
        embed,
        layers,
        final_norm: ones(h),
        lm_head,
    }
}

/// The checkpoint's files, memory-mapped, and which file holds each tensor.
struct Files {
    maps: Vec<(String, memmap2::Mmap)>,
    /// Tensor name -> index into `maps`.
    index: BTreeMap<String, usize>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LlamaError + '_ {
    move |source| LlamaError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn map_file(path: &Path) -> Result<memmap2::Mmap> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    // SAFETY: the file is opened read-only and only read through the map; the checkpoint is not
    // expected to change while it is loaded (a concurrent writer could change what is read, not
    // memory safety of the map's bounds, which safetensors checks against the header).
    unsafe { memmap2::Mmap::map(&file) }.map_err(io(path))
}

impl Files {
    fn open(dir: &Path) -> Result<Files> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let mut files: Vec<PathBuf> = Vec::new();
        let mut owner: BTreeMap<String, String> = BTreeMap::new();
        if index_path.exists() {
            let text = std::fs::read_to_string(&index_path).map_err(io(&index_path))?;
            let shown = index_path.display().to_string();
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                LlamaError::checkpoint(&shown, "file", format!("not valid JSON: {e}"))
            })?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| {
                    LlamaError::checkpoint(&shown, "field `weight_map`", "missing or not an object")
                })?;
            for (tensor, file) in map {
                let file = file.as_str().ok_or_else(|| {
                    LlamaError::checkpoint(
                        &shown,
                        format!("tensor '{tensor}'"),
                        "file name is not a string",
                    )
                })?;
                if file.contains('/') || file.contains("..") {
                    return Err(LlamaError::checkpoint(
                        &shown,
                        format!("tensor '{tensor}'"),
                        format!("file name {file:?} leaves the directory"),
                    ));
                }
                owner.insert(tensor.clone(), file.to_string());
                if !files
                    .iter()
                    .any(|f| f.file_name().and_then(|n| n.to_str()) == Some(file))
                {
                    files.push(dir.join(file));
                }
            }
        } else {
            files.push(single);
        }
        let mut maps = Vec::new();
        let mut index = BTreeMap::new();
        for path in &files {
            let map = map_file(path)?;
            let shown = path.display().to_string();
            let st = SafeTensors::deserialize(&map).map_err(|e| {
                LlamaError::checkpoint(
                    &shown,
                    "file",
                    format!("not a valid safetensors file (truncated?): {e}"),
                )
            })?;
            for name in st.names() {
                index.insert(name.to_string(), maps.len());
            }
            maps.push((shown, map));
        }
        for (tensor, file) in &owner {
            let at = index.get(tensor).map(|&i| maps[i].0.as_str());
            if at.is_none_or(|at| !at.ends_with(file.as_str())) {
                return Err(LlamaError::checkpoint(
                    &index_path.display().to_string(),
                    format!("tensor '{tensor}'"),
                    format!("listed in {file} but not found there"),
                ));
            }
        }
        Ok(Files { maps, index })
    }

    fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// The tensor `name` as bf16 bits, checked to have `shape`.
    fn tensor(&self, name: &str, shape: &[usize], first_file: &str) -> Result<Vec<u16>> {
        let Some(&i) = self.index.get(name) else {
            return Err(LlamaError::checkpoint(
                first_file,
                format!("tensor '{name}'"),
                "missing",
            ));
        };
        let (file, map) = &self.maps[i];
        let st = SafeTensors::deserialize(map)
            .map_err(|e| LlamaError::checkpoint(file, "file", e.to_string()))?;
        let view = st
            .tensor(name)
            .map_err(|e| LlamaError::checkpoint(file, format!("tensor '{name}'"), e.to_string()))?;
        if view.shape() != shape {
            return Err(LlamaError::checkpoint(
                file,
                format!("tensor '{name}'"),
                format!("shape {:?}, the config wants {:?}", view.shape(), shape),
            ));
        }
        let data = view.data();
        Ok(match view.dtype() {
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|c| {
                    bf16::from_f32(f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                        .to_bits()
                })
                .collect(),
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|c| bf16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_bits())
                .collect(),
            other => {
                return Err(LlamaError::checkpoint(
                    file,
                    format!("tensor '{name}'"),
                    format!("dtype {other:?}, want BF16, F16 or F32"),
                ))
            }
        })
    }
}

/// Loads every weight of `config` from the checkpoint in `dir`; `progress` is called after each
/// tensor with (done, total).
pub fn load_weights(
    dir: &Path,
    config: &Config,
    mut progress: impl FnMut(usize, usize),
) -> Result<HostWeights> {
    let files = Files::open(dir)?;
    let first = files.maps.first().map(|m| m.0.clone()).unwrap_or_default();
    let (h, f, v, hd) = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.head_dim,
    );
    let (nq, nkv) = (config.num_attention_heads, config.num_key_value_heads);
    let total = 2 + 9 * config.num_hidden_layers + usize::from(!config.tie_word_embeddings);
    let mut done = 0;
    let mut get = |name: &str, shape: &[usize]| -> Result<Vec<u16>> {
        let t = files.tensor(name, shape, &first)?;
        done += 1;
        progress(done, total);
        Ok(t)
    };
    let embed = get("model.embed_tokens.weight", &[v, h])?;
    let mut layers = Vec::with_capacity(config.num_hidden_layers);
    for i in 0..config.num_hidden_layers {
        let p = format!("model.layers.{i}");
        let mut qkv = get(&format!("{p}.self_attn.q_proj.weight"), &[nq * hd, h])?;
        qkv.extend(get(
            &format!("{p}.self_attn.k_proj.weight"),
            &[nkv * hd, h],
        )?);
        qkv.extend(get(
            &format!("{p}.self_attn.v_proj.weight"),
            &[nkv * hd, h],
        )?);
        let mut gate_up = get(&format!("{p}.mlp.gate_proj.weight"), &[f, h])?;
        gate_up.extend(get(&format!("{p}.mlp.up_proj.weight"), &[f, h])?);
        layers.push(LayerWeights {
            input_norm: get(&format!("{p}.input_layernorm.weight"), &[h])?,
            qkv,
            o: get(&format!("{p}.self_attn.o_proj.weight"), &[h, nq * hd])?,
            post_norm: get(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
            gate_up,
            down: get(&format!("{p}.mlp.down_proj.weight"), &[h, f])?,
        });
    }
    let final_norm = get("model.norm.weight", &[h])?;
    let lm_head = if config.tie_word_embeddings {
        None
    } else if files.has("lm_head.weight") {
        Some(get("lm_head.weight", &[v, h])?)
    } else {
        return Err(LlamaError::checkpoint(
            &first,
            "tensor 'lm_head.weight'",
            "missing (tie_word_embeddings is false)",
        ));
    };
    Ok(HostWeights {
        embed,
        layers,
        final_norm,
        lm_head,
    })
}

/// One tensor of a checkpoint as its header describes it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Its dtype as safetensors names it (`BF16`, `F16`, `F32`, ...).
    pub dtype: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// The file that holds it.
    pub file: String,
}

/// Every tensor of the checkpoint in `dir` (single file or shards), in name order.
pub fn tensor_table(dir: &Path) -> Result<Vec<TensorInfo>> {
    let files = Files::open(dir)?;
    let mut out = Vec::new();
    for (name, &i) in &files.index {
        let (file, map) = &files.maps[i];
        let st = SafeTensors::deserialize(map)
            .map_err(|e| LlamaError::checkpoint(file, "file", e.to_string()))?;
        let view = st
            .tensor(name)
            .map_err(|e| LlamaError::checkpoint(file, format!("tensor '{name}'"), e.to_string()))?;
        out.push(TensorInfo {
            name: name.clone(),
            dtype: format!("{:?}", view.dtype()),
            shape: view.shape().to_vec(),
            file: file.clone(),
        });
    }
    Ok(out)
}
