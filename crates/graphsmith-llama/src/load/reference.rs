//! The reference file written by `bench/llama/reference.py`: per sequence `tokens.s` (prompt
//! then the greedy tokens), `prompt_len.s` and `logits.s` `[new_tokens, vocab]`.

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use crate::error::{LlamaError, Result};

/// One reference sequence.
#[derive(Clone, Debug)]
pub struct RefSequence {
    /// Prompt then the reference's greedy tokens.
    pub tokens: Vec<i32>,
    pub prompt_len: usize,
    /// `[new_tokens, vocab]`: the logits generated token i was chosen from.
    pub logits: Vec<f32>,
    pub new_tokens: usize,
}

/// Reads every sequence of a reference file, checking shapes against `vocab`.
pub fn load_reference(path: &Path, vocab: usize) -> Result<Vec<RefSequence>> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LlamaError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        LlamaError::checkpoint(&file, "file", format!("not a valid safetensors file: {e}"))
    })?;
    let mut out = Vec::new();
    for s in 0.. {
        let name = format!("tokens.{s}");
        if st.tensor(&name).is_err() {
            break;
        }
        let get = |name: &str, dtype: Dtype| -> Result<(Vec<u8>, Vec<usize>)> {
            let t = st.tensor(name).map_err(|_| {
                LlamaError::checkpoint(&file, format!("tensor '{name}'"), "missing")
            })?;
            if t.dtype() != dtype {
                return Err(LlamaError::checkpoint(
                    &file,
                    format!("tensor '{name}'"),
                    format!("dtype {:?}, want {dtype:?}", t.dtype()),
                ));
            }
            Ok((t.data().to_vec(), t.shape().to_vec()))
        };
        let ints = |b: &[u8]| -> Vec<i32> {
            b.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let (tb, _) = get(&name, Dtype::I32)?;
        let tokens = ints(&tb);
        let (pb, _) = get(&format!("prompt_len.{s}"), Dtype::I32)?;
        let prompt_len = ints(&pb).first().copied().unwrap_or(0).max(0) as usize;
        let (lb, shape) = get(&format!("logits.{s}"), Dtype::F32)?;
        let logits: Vec<f32> = lb
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let bad = |reason: String| LlamaError::checkpoint(&file, format!("sequence {s}"), reason);
        if shape.len() != 2 || shape[1] != vocab {
            return Err(bad(format!("logits shape {shape:?}, want [N, {vocab}]")));
        }
        let new_tokens = shape[0];
        if prompt_len == 0 || tokens.len() != prompt_len + new_tokens {
            return Err(bad(format!(
                "{} tokens for a prompt of {prompt_len} and {new_tokens} new tokens",
                tokens.len()
            )));
        }
        if let Some(t) = tokens.iter().find(|&&t| t < 0 || t as usize >= vocab) {
            return Err(bad(format!(
                "token id {t} outside the vocabulary of {vocab}"
            )));
        }
        out.push(RefSequence {
            tokens,
            prompt_len,
            logits,
            new_tokens,
        });
    }
    if out.is_empty() {
        return Err(LlamaError::checkpoint(
            &file,
            "tensor 'tokens.0'",
            "missing (no sequences)",
        ));
    }
    Ok(out)
}

/// The largest value's index (first on ties) and the gap to the second largest.
pub fn top2(row: &[f32]) -> (usize, f32) {
    let mut best = (0usize, f32::NEG_INFINITY);
    let mut second = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > best.1 {
            second = best.1;
            best = (i, v);
        } else if v > second {
            second = v;
        }
    }
    (best.0, best.1 - second)
}
