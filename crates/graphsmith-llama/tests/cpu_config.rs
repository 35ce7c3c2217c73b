//! `config.json` read as transformers' `LlamaConfig` reads it: both spellings, every default,
//! every refused field (snapshots of each error's text), disagreeing spellings, warnings.

mod common;

use common::TINY_CONFIG;
use graphsmith_llama::{Config, RopeScaling};
use serde_json::{json, Value};

fn tiny() -> Value {
    serde_json::from_str(TINY_CONFIG).unwrap()
}

fn with(mut v: Value, field: &str, value: Value) -> String {
    v[field] = value;
    v.to_string()
}

fn err(text: &str) -> String {
    Config::from_json(text, "m/config.json", "m")
        .unwrap_err()
        .to_string()
}

/// A config as transformers 5 saves it: RoPE only in `rope_parameters`, `dtype`.
fn v5(rope: Value) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "dtype": "bfloat16",
        "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
        "intermediate_size": 2816, "max_position_embeddings": 4096, "mlp_bias": false,
        "num_attention_heads": 16, "num_hidden_layers": 2, "num_key_value_heads": 8,
        "pad_token_id": null, "pretraining_tp": 1, "rms_norm_eps": 1e-5, "rope_parameters": rope,
        "tie_word_embeddings": false, "transformers_version": "5.17.0", "use_cache": true,
        "vocab_size": 32000
    })
}

fn llama3(theta: f64) -> Value {
    json!({"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
}

#[test]
fn transformers_5_rope_parameters_are_read() {
    let (c, seen) = Config::read_json(&v5(llama3(500000.0)).to_string(), "c", "c").unwrap();
    assert_eq!(c.rope_theta, 500000.0);
    assert_eq!(
        c.rope_scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 64.0
        }
    );
    assert!(!c.tie_word_embeddings);
    assert_eq!(
        seen.values["rope_theta"],
        (
            "500000".into(),
            "config.json `rope_parameters.rope_theta`".into()
        )
    );
    assert!(seen.warnings.is_empty(), "{:?}", seen.warnings);
}

#[test]
fn transformers_4_spelling_reads_the_same() {
    let mut v4 = v5(Value::Null);
    let o = v4.as_object_mut().unwrap();
    o.remove("rope_parameters");
    o.remove("dtype");
    o.insert("torch_dtype".into(), json!("bfloat16"));
    o.insert("rope_theta".into(), json!(500000.0));
    for key in ["type", "rope_type"] {
        v4["rope_scaling"] = json!({key: "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64});
        let a = Config::from_json(&v4.to_string(), "c", "c").unwrap();
        let b = Config::from_json(&v5(llama3(500000.0)).to_string(), "c", "c").unwrap();
        assert_eq!(a, b);
    }
    // Both spellings present and agreeing is fine.
    let mut both = v5(llama3(500000.0));
    both["rope_theta"] = json!(500000.0);
    both["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64});
    assert!(Config::from_json(&both.to_string(), "c", "c").is_ok());
}

#[test]
fn absent_fields_take_llama_config_defaults() {
    let (c, seen) = Config::read_json(r#"{"model_type": "llama"}"#, "c", "c").unwrap();
    assert_eq!(
        (
            c.vocab_size,
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers
        ),
        (32000, 4096, 11008, 32)
    );
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (32, 32, 128)
    );
    assert_eq!((c.rms_norm_eps, c.rope_theta), (1e-6, 10000.0));
    assert_eq!(c.rope_scaling, RopeScaling::None);
    assert_eq!(c.max_position_embeddings, 2048);
    assert!(!c.tie_word_embeddings, "LlamaConfig's default is untied");
    assert_eq!(
        seen.values["tie_word_embeddings"].1,
        "transformers' LlamaConfig default"
    );
}

#[test]
fn refused_fields_name_the_field_the_value_and_what_is_supported() {
    let t = tiny;
    let cases = [
        (with(t(), "architectures", json!(["MistralForCausalLM"])), "config m/config.json: field `architectures`: [\"MistralForCausalLM\"]: only [\"LlamaForCausalLM\"] is supported"),
        (with(t(), "model_type", json!("mistral")), "config m/config.json: field `model_type`: \"mistral\": only \"llama\" (LlamaForCausalLM) is supported"),
        (with(t(), "hidden_act", json!("gelu")), "config m/config.json: field `hidden_act`: \"gelu\": only \"silu\" is supported"),
        (with(t(), "attention_bias", json!(true)), "config m/config.json: field `attention_bias`: true: projections with biases are not supported (only false)"),
        (with(t(), "mlp_bias", json!(true)), "config m/config.json: field `mlp_bias`: true: projections with biases are not supported (only false)"),
        (with(t(), "pretraining_tp", json!(2)), "config m/config.json: field `pretraining_tp`: 2: only 1 is supported (the slices of a split projection are summed in another order)"),
        (with(t(), "sliding_window", json!(4096)), "config m/config.json: field `sliding_window`: 4096: sliding-window attention is not supported (only null)"),
        (with(t(), "quantization_config", json!({"quant_method": "awq"})), "config m/config.json: field `quantization_config`: quantized checkpoints (\"awq\") are not supported: give bf16, f16 or f32 weights"),
        (with(t(), "rope_scaling", json!({"rope_type": "yarn", "factor": 4})), "config m/config.json: field `rope_scaling.type`: \"yarn\": unsupported RoPE kind (supported: default, linear and llama3)"),
        (with(t(), "rope_parameters", json!({"rope_type": "dynamic", "factor": 2, "rope_theta": 10000})), "config m/config.json: field `rope_parameters.rope_type`: \"dynamic\": unsupported RoPE kind (supported: default, linear and llama3)"),
        (with(t(), "rope_scaling", json!({"rope_type": "llama3", "factor": 8})), "config m/config.json: field `rope_scaling.low_freq_factor`: missing: llama3 RoPE needs it"),
        (with(t(), "head_dim", json!(12)), "config m/config.json: field `head_dim`: must be a multiple of 8 and at most 256, found 12"),
        (with(t(), "num_key_value_heads", json!(3)), "config m/config.json: field `num_key_value_heads`: 4 attention heads are not a multiple of 3 key/value heads"),
        (with(t(), "hidden_size", json!(-5)), "config m/config.json: field `hidden_size`: must be a positive integer, found -5"),
        (with(t(), "hidden_size", json!(66)), "config m/config.json: field `hidden_size`: 66 is not a multiple of num_attention_heads 4 (transformers refuses such a config too)"),
        (with(t(), "rms_norm_eps", json!(0)), "config m/config.json: field `rms_norm_eps`: must be a positive number, found 0"),
        (with(t(), "tie_word_embeddings", json!("yes")), "config m/config.json: field `tie_word_embeddings`: must be true or false, found \"yes\""),
        (with(t(), "partial_rotary_factor", json!(0.5)), "config m/config.json: field `partial_rotary_factor`: 0.5: only 1.0 (RoPE over the whole head) is supported"),
        (with(t(), "dtype", json!("int8")), "config m/config.json: field `dtype`: \"int8\": want bfloat16, float16 or float32"),
        ("[1, 2]".to_string(), "config m/config.json: field `(file)`: not a JSON object"),
    ];
    for (text, want) in cases {
        assert_eq!(err(&text), want);
    }
}

#[test]
fn disagreeing_spellings_are_an_error_naming_both_fields() {
    let mut v = v5(llama3(500000.0));
    v["rope_theta"] = json!(10000.0);
    assert_eq!(err(&v.to_string()), "config m/config.json: field `rope_theta`: 10000 disagrees with rope_parameters.rope_theta 500000: the two spellings must agree");
    let mut v = v5(llama3(500000.0));
    v["rope_scaling"] = json!({"type": "linear", "factor": 8.0});
    assert_eq!(err(&v.to_string()), "config m/config.json: field `rope_scaling`: linear {\"factor\": 8.0} disagrees with rope_parameters llama3 {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 64.0}: the two spellings must agree");
    let mut v = v5(llama3(500000.0));
    v["torch_dtype"] = json!("float16");
    assert_eq!(err(&v.to_string()), "config m/config.json: field `torch_dtype`: \"float16\" disagrees with `dtype` \"bfloat16\": the two spellings must agree");
}

#[test]
fn unknown_fields_are_warnings_that_name_them() {
    let text = with(tiny(), "attn_logit_softcapping", json!(50.0));
    let (_, seen) = Config::read_json(&text, "c", "c").unwrap();
    assert_eq!(
        seen.warnings,
        ["`attn_logit_softcapping`: unknown field, not used (if it changes the model, the decode will differ)"]
    );
}
