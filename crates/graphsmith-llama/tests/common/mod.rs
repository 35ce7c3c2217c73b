//! Helpers shared by the tests: a tiny model directory written in the HF layout, models with
//! the default options, a cache key, logits held to the check's tolerance, and a search cache
//! folder of the process's own.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use graphsmith::Context;
use graphsmith_llama::search::CACHE_DIR_VAR;
use graphsmith_llama::{
    random_weights, top2, Config, DecoderOptions, HostWeights, Mode, Model, Tolerance,
};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

/// The `config.json` of the tiny config.
pub const TINY_CONFIG: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 64,
  "intermediate_size": 128,
  "num_hidden_layers": 2,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "vocab_size": 512,
  "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0,
  "max_position_embeddings": 2048,
  "tie_word_embeddings": true,
  "hidden_act": "silu"
}"#;

/// The HF tensors of `w` (bf16 bytes and shapes), unfused.
pub fn hf_tensors(c: &Config, w: &HostWeights) -> BTreeMap<String, (Vec<u8>, Vec<usize>)> {
    let bytes = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (h, f, hd) = (c.hidden_size, c.intermediate_size, c.head_dim);
    let (nq, nkv) = (c.num_attention_heads, c.num_key_value_heads);
    let mut t = BTreeMap::new();
    t.insert(
        "model.embed_tokens.weight".into(),
        (bytes(&w.embed), vec![c.vocab_size, h]),
    );
    for (i, l) in w.layers.iter().enumerate() {
        let p = format!("model.layers.{i}");
        let (q, rest) = l.qkv.split_at(nq * hd * h);
        let (k, v) = rest.split_at(nkv * hd * h);
        let (g, u) = l.gate_up.split_at(f * h);
        t.insert(
            format!("{p}.self_attn.q_proj.weight"),
            (bytes(q), vec![nq * hd, h]),
        );
        t.insert(
            format!("{p}.self_attn.k_proj.weight"),
            (bytes(k), vec![nkv * hd, h]),
        );
        t.insert(
            format!("{p}.self_attn.v_proj.weight"),
            (bytes(v), vec![nkv * hd, h]),
        );
        t.insert(
            format!("{p}.self_attn.o_proj.weight"),
            (bytes(&l.o), vec![h, nq * hd]),
        );
        t.insert(format!("{p}.mlp.gate_proj.weight"), (bytes(g), vec![f, h]));
        t.insert(format!("{p}.mlp.up_proj.weight"), (bytes(u), vec![f, h]));
        t.insert(
            format!("{p}.mlp.down_proj.weight"),
            (bytes(&l.down), vec![h, f]),
        );
        t.insert(
            format!("{p}.input_layernorm.weight"),
            (bytes(&l.input_norm), vec![h]),
        );
        t.insert(
            format!("{p}.post_attention_layernorm.weight"),
            (bytes(&l.post_norm), vec![h]),
        );
    }
    t.insert("model.norm.weight".into(), (bytes(&w.final_norm), vec![h]));
    if let Some(head) = &w.lm_head {
        t.insert(
            "lm_head.weight".into(),
            (bytes(head), vec![c.vocab_size, h]),
        );
    }
    t
}

/// Writes tensors into one safetensors file (bf16).
pub fn write_file(path: &Path, tensors: &BTreeMap<String, (Vec<u8>, Vec<usize>)>) {
    write_file_typed(
        path,
        tensors
            .iter()
            .map(|(n, (b, s))| (n.clone(), Dtype::BF16, b.clone(), s.clone()))
            .collect(),
    );
}

/// Writes (name, dtype, bytes, shape) tensors into one safetensors file.
pub fn write_file_typed(path: &Path, tensors: Vec<(String, Dtype, Vec<u8>, Vec<usize>)>) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, b, s)| {
            (
                n.clone(),
                TensorView::new(*d, s.clone(), b).expect("valid view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, &None, path).expect("write safetensors");
}

/// A tiny model directory: config.json and model.safetensors from random weights (seed 7).
pub fn tiny_model(dir: &Path) -> (Config, HostWeights) {
    std::fs::write(dir.join("config.json"), TINY_CONFIG).expect("write config");
    let config = Config::from_json(TINY_CONFIG, "config.json", "tiny").expect("tiny config");
    let w = random_weights(&config, 7);
    write_file(&dir.join("model.safetensors"), &hf_tensors(&config, &w));
    (config, w)
}

/// A model of `config` and `weights` for `(rows, positions)` with the default options.
pub fn model(
    ctx: &Context,
    c: &Config,
    w: &HostWeights,
    size: (usize, usize),
    mode: Mode,
) -> Model {
    Model::new(
        ctx,
        c.clone(),
        w,
        size,
        mode,
        DecoderOptions::default(),
        |_, _| {},
    )
    .expect("the model is made")
}

/// A launch-choices cache key for the 1B config on an H200 (context 177), with `gemm`: the
/// tests of the cache on disk change one field of it at a time.
pub fn cache_key(gemm: graphsmith_llama::Gemm) -> graphsmith_llama::search::CacheKey {
    use graphsmith_llama::search::{CacheKey, Shape, SEARCH_FORMAT};
    let config = Config::named("1b").unwrap();
    CacheKey {
        gpu: "NVIDIA H200".into(),
        multiprocessors: 132,
        driver: "580.159.04 (CUDA 13.0)".into(),
        graphsmith: "0.1.0".into(),
        kernels: "00112233aabbccdd".into(),
        search: SEARCH_FORMAT,
        shape: Shape::new(&config, 177, gemm, true),
    }
}

/// `got`'s rows of logits against `want`'s: finite, within the check's default tolerance, the
/// argmax equal where the reference's top-2 margin exceeds it. Returns the worst diff over
/// the tolerance.
pub fn assert_close(what: &str, want: &[f32], got: &[f32], vocab: usize) -> f32 {
    assert_eq!(want.len(), got.len(), "{what}: logits' lengths");
    let tolerance = Tolerance::default();
    let mut worst = 0.0f32;
    for (r, (w, g)) in want.chunks(vocab).zip(got.chunks(vocab)).enumerate() {
        assert!(
            g.iter().all(|v| v.is_finite()),
            "{what}: row {r}: NaN or infinity left in the logits"
        );
        let tol = tolerance.at(w);
        let diff = w
            .iter()
            .zip(g)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        worst = worst.max(diff / tol);
        assert!(
            diff <= tol,
            "{what}: row {r}: |logit diff| {diff} above the tolerance {tol}"
        );
        let (top, margin) = top2(w);
        if margin > tol {
            assert_eq!(top2(g).0, top, "{what}: row {r}: argmax");
        }
    }
    worst
}

/// The cache folder of this process (a temporary one, made and set on first use).
pub fn cache_folder() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary folder for the cache");
        // Set before any model is made; the GPU tests run one at a time.
        std::env::set_var(CACHE_DIR_VAR, dir.path());
        dir
    })
    .path()
}
