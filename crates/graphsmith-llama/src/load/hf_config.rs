//! `config.json` read as transformers' `LlamaConfig` reads it: both spellings transformers has
//! written (5.x: `rope_parameters`, `dtype`; 4.x: `rope_theta`, `rope_scaling` with `type` or
//! `rope_type`, `torch_dtype`), every absent field at `LlamaConfig`'s default, and every field
//! either used, known not to change decoding, refused with the reason, or warned about.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::config::{Config, RopeScaling};
use crate::error::{LlamaError, Result};

/// Where a value used for decoding came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Understood {
    /// Field -> (value as shown, where it came from: the file's field or transformers' default).
    pub values: BTreeMap<String, (String, String)>,
    /// Fields the reader did not know (named, never silently dropped) and other notices.
    pub warnings: Vec<String>,
    /// The dtype the config names (`dtype` or `torch_dtype`), if any.
    pub dtype: Option<String>,
}

/// Fields read and known not to change what a decode computes (ids, training settings,
/// generation defaults, bookkeeping). `architectures` and `model_type` are checked first.
const NO_EFFECT: &[&str] = &[
    "_name_or_path",
    "architectures",
    "model_type",
    "transformers_version",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "sep_token_id",
    "decoder_start_token_id",
    "use_cache",
    "initializer_range",
    "attention_dropout",
    "output_attentions",
    "output_hidden_states",
    "return_dict",
    "torchscript",
    "tokenizer_class",
    "id2label",
    "label2id",
    "problem_type",
    "task_specific_params",
    "finetuning_task",
    "prefix",
    "is_encoder_decoder",
    "is_decoder",
    "chunk_size_feed_forward",
    "tie_encoder_decoder",
    "add_cross_attention",
    "cross_attention_hidden_size",
    "pruned_heads",
    "use_bfloat16",
    "tf_legacy_loss",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "output_scores",
    "return_dict_in_generate",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
    "dtype",
    "torch_dtype",
];

/// Fields that change the math: each is read below, and refused where this decoder differs.
const USED: &[&str] = &[
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "max_position_embeddings",
    "tie_word_embeddings",
    "rope_parameters",
    "rope_theta",
    "rope_scaling",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
    "pretraining_tp",
    "sliding_window",
    "partial_rotary_factor",
    "quantization_config",
];

/// The RoPE kinds this decoder computes.
const ROPE_KINDS: &str = "default, linear and llama3";

/// Keys of a RoPE description and the kinds that read them.
const ROPE_KEYS: &[&str] = &[
    "rope_type",
    "type",
    "rope_theta",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "partial_rotary_factor",
];

struct Reader<'a> {
    obj: &'a Map<String, Value>,
    file: &'a str,
    out: Understood,
}

impl Reader<'_> {
    fn bad(&self, field: &str, reason: impl Into<String>) -> LlamaError {
        LlamaError::config(self.file, field, reason)
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.obj.get(field).filter(|v| !v.is_null())
    }

    fn note(&mut self, field: &str, value: impl ToString, from_file: bool) {
        let source = if from_file {
            format!("config.json `{field}`")
        } else {
            "transformers' LlamaConfig default".to_string()
        };
        self.out
            .values
            .insert(field.to_string(), (value.to_string(), source));
    }

    /// A field parsed by `parse` (`want` names what it must be), or `default` when absent
    /// (`None`: the field is required); either way noted with where it came from.
    fn field<T: ToString + Copy>(
        &mut self,
        field: &str,
        default: Option<T>,
        parse: impl Fn(&Value) -> Option<T>,
        want: &str,
    ) -> Result<T> {
        let (x, from_file) = match self.present(field) {
            None => (default.ok_or_else(|| self.bad(field, "missing"))?, false),
            Some(v) => match parse(v) {
                Some(x) => (x, true),
                None => return Err(self.bad(field, format!("must be {want}, found {v}"))),
            },
        };
        self.note(field, x, from_file);
        Ok(x)
    }

    fn usize(&mut self, field: &str, default: Option<usize>) -> Result<usize> {
        let parse = |v: &Value| v.as_u64().filter(|&n| n > 0).map(|n| n as usize);
        self.field(field, default, parse, "a positive integer")
    }

    fn positive(&mut self, field: &str, default: f64) -> Result<f64> {
        let parse = |v: &Value| v.as_f64().filter(|x| x.is_finite() && *x > 0.0);
        self.field(field, Some(default), parse, "a positive number")
    }

    fn flag(&mut self, field: &str, default: bool) -> Result<bool> {
        self.field(field, Some(default), Value::as_bool, "true or false")
    }

    /// Fields whose only supported value is the default: anything else is refused.
    fn refused_unless(&mut self) -> Result<()> {
        let arch = self.present("architectures").cloned();
        if let Some(a) = &arch {
            let ok = a.as_array().is_some_and(|a| {
                !a.is_empty() && a.iter().all(|x| x.as_str() == Some("LlamaForCausalLM"))
            });
            if !ok {
                return Err(self.bad(
                    "architectures",
                    format!("{a}: only [\"LlamaForCausalLM\"] is supported"),
                ));
            }
        }
        match self.present("model_type") {
            Some(Value::String(s)) if s == "llama" => {}
            None if arch.is_some() => {}
            None => {
                return Err(self.bad(
                    "model_type",
                    "missing, and no `architectures` either: not known to be a Llama model (want model_type \"llama\")",
                ))
            }
            Some(v) => {
                return Err(self.bad(
                    "model_type",
                    format!("{v}: only \"llama\" (LlamaForCausalLM) is supported"),
                ))
            }
        }
        match self.present("hidden_act") {
            None => self.note("hidden_act", "silu", false),
            Some(Value::String(s)) if s == "silu" => self.note("hidden_act", "silu", true),
            Some(v) => {
                return Err(self.bad("hidden_act", format!("{v}: only \"silu\" is supported")))
            }
        }
        for field in ["attention_bias", "mlp_bias"] {
            if self.flag(field, false)? {
                return Err(self.bad(
                    field,
                    "true: projections with biases are not supported (only false)",
                ));
            }
        }
        if let Some(v) = self.present("pretraining_tp") {
            if v.as_u64() != Some(1) {
                return Err(self.bad(
                    "pretraining_tp",
                    format!("{v}: only 1 is supported (the slices of a split projection are summed in another order)"),
                ));
            }
        }
        if let Some(v) = self.present("sliding_window") {
            return Err(self.bad(
                "sliding_window",
                format!("{v}: sliding-window attention is not supported (only null)"),
            ));
        }
        if let Some(v) = self.present("partial_rotary_factor") {
            if v.as_f64() != Some(1.0) {
                return Err(self.bad(
                    "partial_rotary_factor",
                    format!("{v}: only 1.0 (RoPE over the whole head) is supported"),
                ));
            }
        }
        if let Some(v) = self.present("quantization_config") {
            let method = v.get("quant_method").cloned().unwrap_or(Value::Null);
            return Err(self.bad(
                "quantization_config",
                format!("quantized checkpoints ({method}) are not supported: give bf16, f16 or f32 weights"),
            ));
        }
        for field in ["dtype", "torch_dtype"] {
            match self.present(field) {
                None => {}
                Some(Value::String(s))
                    if ["bfloat16", "float16", "float32"].contains(&s.as_str()) =>
                {
                    if let Some(other) = &self.out.dtype {
                        if other != s {
                            return Err(self.bad(
                                field,
                                format!("{s:?} disagrees with `dtype` {other:?}: the two spellings must agree"),
                            ));
                        }
                    }
                    self.out.dtype = Some(s.clone());
                }
                Some(v) => {
                    return Err(self.bad(field, format!("{v}: want bfloat16, float16 or float32")))
                }
            }
        }
        Ok(())
    }
}

/// One spelling's RoPE description, flattened: kind, theta and the scaling numbers.
#[derive(Clone, Debug, PartialEq)]
struct Rope {
    /// Where it was read, for errors (`rope_parameters` or `rope_scaling`).
    field: &'static str,
    kind: Option<String>,
    theta: Option<f64>,
    numbers: BTreeMap<String, f64>,
}

fn rope_from(r: &Reader, field: &'static str, v: &Value) -> Result<Rope> {
    let Value::Object(m) = v else {
        return Err(r.bad(field, format!("must be an object or null, found {v}")));
    };
    let mut rope = Rope {
        field,
        kind: None,
        theta: None,
        numbers: BTreeMap::new(),
    };
    for (key, value) in m {
        match key.as_str() {
            "rope_type" | "type" => {
                let kind = value.as_str().ok_or_else(|| {
                    r.bad(
                        &format!("{field}.{key}"),
                        format!("must be a string, found {value}"),
                    )
                })?;
                if rope.kind.as_deref().is_some_and(|k| k != kind) {
                    return Err(r.bad(
                        &format!("{field}.{key}"),
                        format!(
                            "{kind:?} disagrees with the other kind key ({:?})",
                            rope.kind.as_deref().unwrap_or("")
                        ),
                    ));
                }
                rope.kind = Some(kind.to_string());
            }
            _ if value.is_null() => {}
            _ => {
                let x = value
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| {
                        r.bad(
                            &format!("{field}.{key}"),
                            format!("must be a positive number, found {value}"),
                        )
                    })?;
                if key == "rope_theta" {
                    rope.theta = Some(x);
                } else {
                    rope.numbers.insert(key.clone(), x);
                }
            }
        }
    }
    Ok(rope)
}

/// The RoPE settings from either spelling; both present and disagreeing is an error naming both.
fn read_rope(r: &mut Reader) -> Result<(f32, RopeScaling)> {
    let v5 = match r.present("rope_parameters") {
        Some(v) => Some(rope_from(r, "rope_parameters", v)?),
        None => None,
    };
    let v4 = match r.present("rope_scaling") {
        Some(v) => Some(rope_from(r, "rope_scaling", v)?),
        None => None,
    };
    let top_theta = match r.present("rope_theta") {
        Some(v) => Some(
            v.as_f64()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| {
                    r.bad(
                        "rope_theta",
                        format!("must be a positive number, found {v}"),
                    )
                })?,
        ),
        None => None,
    };
    // Theta: rope_parameters.rope_theta, else the top-level rope_theta; where both are given
    // they must agree.
    let inner_theta = v5.as_ref().and_then(|p| p.theta);
    if let (Some(a), Some(b)) = (inner_theta, top_theta) {
        if a != b {
            return Err(r.bad(
                "rope_theta",
                format!("{b} disagrees with rope_parameters.rope_theta {a}: the two spellings must agree"),
            ));
        }
    }
    let theta = inner_theta.or(top_theta);
    match (inner_theta, top_theta) {
        (Some(t), _) => r.note("rope_theta", t, true),
        (None, Some(t)) => r.note("rope_theta", t, true),
        (None, None) => r.note("rope_theta", 10000.0, false),
    }
    if let Some((_, src)) = r.out.values.get_mut("rope_theta") {
        if inner_theta.is_some() {
            *src = "config.json `rope_parameters.rope_theta`".into();
        }
    }
    let kind_of = |p: &Rope| p.kind.clone().unwrap_or_else(|| "default".into());
    let scaling = match (&v5, &v4) {
        (Some(a), Some(b)) => {
            if kind_of(a) != kind_of(b) || a.numbers != b.numbers {
                return Err(r.bad(
                    "rope_scaling",
                    format!(
                        "{} {:?} disagrees with rope_parameters {} {:?}: the two spellings must agree",
                        kind_of(b), b.numbers, kind_of(a), a.numbers
                    ),
                ));
            }
            a.clone()
        }
        (Some(a), None) => a.clone(),
        (None, Some(b)) => b.clone(),
        (None, None) => Rope {
            field: "rope_parameters",
            kind: None,
            theta: None,
            numbers: BTreeMap::new(),
        },
    };
    let kind = kind_of(&scaling);
    let from_file = v5.is_some() || v4.is_some();
    r.note("rope_type", &kind, from_file);
    let field = scaling.field;
    for key in scaling.numbers.keys() {
        if !ROPE_KEYS.contains(&key.as_str()) {
            r.out
                .warnings
                .push(format!("{field}.{key}: unknown RoPE key, not used"));
        }
    }
    if let Some(&p) = scaling.numbers.get("partial_rotary_factor") {
        if p != 1.0 {
            return Err(r.bad(
                &format!("{field}.partial_rotary_factor"),
                format!("{p}: only 1.0 (RoPE over the whole head) is supported"),
            ));
        }
    }
    let num = |r: &mut Reader, key: &str| -> Result<f32> {
        let x = *scaling.numbers.get(key).ok_or_else(|| {
            r.bad(
                &format!("{field}.{key}"),
                format!("missing: {kind} RoPE needs it"),
            )
        })?;
        r.note(key, x, true);
        Ok(x as f32)
    };
    let rope = match kind.as_str() {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: num(r, "factor")?,
        },
        "llama3" => {
            let rope = RopeScaling::Llama3 {
                factor: num(r, "factor")?,
                low_freq_factor: num(r, "low_freq_factor")?,
                high_freq_factor: num(r, "high_freq_factor")?,
                original_max_position_embeddings: num(r, "original_max_position_embeddings")?,
            };
            if let RopeScaling::Llama3 {
                low_freq_factor,
                high_freq_factor,
                ..
            } = rope
            {
                if high_freq_factor <= low_freq_factor {
                    return Err(r.bad(
                        &format!("{field}.high_freq_factor"),
                        format!("{high_freq_factor} must be larger than low_freq_factor {low_freq_factor}"),
                    ));
                }
            }
            rope
        }
        other => {
            let key = if field == "rope_scaling" {
                "type"
            } else {
                "rope_type"
            };
            return Err(r.bad(
                &format!("{field}.{key}"),
                format!("{other:?}: unsupported RoPE kind (supported: {ROPE_KINDS})"),
            ));
        }
    };
    Ok((theta.unwrap_or(10000.0) as f32, rope))
}

/// Reads a `config.json` object as transformers' `LlamaConfig` does.
pub(crate) fn read(
    obj: &Map<String, Value>,
    file: &str,
    name: &str,
) -> Result<(Config, Understood)> {
    let mut r = Reader {
        obj,
        file,
        out: Understood {
            values: BTreeMap::new(),
            warnings: Vec::new(),
            dtype: None,
        },
    };
    r.refused_unless()?;
    let hidden_size = r.usize("hidden_size", Some(4096))?;
    let num_attention_heads = r.usize("num_attention_heads", Some(32))?;
    if !hidden_size.is_multiple_of(num_attention_heads) {
        return Err(r.bad(
            "hidden_size",
            format!("{hidden_size} is not a multiple of num_attention_heads {num_attention_heads} (transformers refuses such a config too)"),
        ));
    }
    let num_key_value_heads = r.usize("num_key_value_heads", Some(num_attention_heads))?;
    let head_dim = r.usize("head_dim", Some(hidden_size / num_attention_heads))?;
    let (rope_theta, rope_scaling) = read_rope(&mut r)?;
    let config = Config {
        name: name.to_string(),
        vocab_size: r.usize("vocab_size", Some(32000))?,
        hidden_size,
        intermediate_size: r.usize("intermediate_size", Some(11008))?,
        num_hidden_layers: r.usize("num_hidden_layers", Some(32))?,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        rms_norm_eps: r.positive("rms_norm_eps", 1e-6)? as f32,
        rope_theta,
        rope_scaling,
        max_position_embeddings: r.usize("max_position_embeddings", Some(2048))?,
        tie_word_embeddings: r.flag("tie_word_embeddings", false)?,
    };
    for key in obj.keys() {
        if !USED.contains(&key.as_str()) && !NO_EFFECT.contains(&key.as_str()) {
            r.out.warnings.push(format!(
                "`{key}`: unknown field, not used (if it changes the model, the decode will differ)"
            ));
        }
    }
    config.validate(file)?;
    Ok((config, r.out))
}

impl Config {
    /// Reads and validates `config.json`.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|source| LlamaError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        Config::from_json(&text, &path.display().to_string(), &name)
    }

    /// Parses and validates the text of a `config.json`; `file` names it in errors. Warnings
    /// (unknown fields) are dropped here: [`Config::read_json`] returns them.
    pub fn from_json(text: &str, file: &str, name: &str) -> Result<Config> {
        Config::read_json(text, file, name).map(|(c, _)| c)
    }

    /// Parses a `config.json` as transformers' `LlamaConfig` reads it (both spellings, its
    /// defaults), with what was understood: each value used and where it came from, and warnings.
    pub fn read_json(text: &str, file: &str, name: &str) -> Result<(Config, Understood)> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| LlamaError::config(file, "(file)", format!("not valid JSON: {e}")))?;
        let obj = v
            .as_object()
            .ok_or_else(|| LlamaError::config(file, "(file)", "not a JSON object"))?;
        read(obj, file, name)
    }

    /// Reads `config.json` with what was understood (see [`Config::read_json`]).
    pub fn read_file(path: &Path) -> Result<(Config, Understood)> {
        let text = std::fs::read_to_string(path).map_err(|source| LlamaError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let name = path
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        Config::read_json(&text, &path.display().to_string(), &name)
    }
}
