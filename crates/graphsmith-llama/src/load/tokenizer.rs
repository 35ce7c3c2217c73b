//! Prompt text in, text out: through the `tokenizers` crate when the model directory has a
//! `tokenizer.json`, otherwise prompts and outputs are token ids.

use std::path::Path;

use crate::error::{LlamaError, Result};

/// Turns prompts into token ids and ids back into text.
pub struct Codec {
    tokenizer: Option<(tokenizers::Tokenizer, String)>,
}

impl Codec {
    /// Ids only (no tokenizer).
    pub fn ids_only() -> Codec {
        Codec { tokenizer: None }
    }

    /// Uses `dir/tokenizer.json` when it exists, ids otherwise.
    pub fn for_model(dir: &Path) -> Result<Codec> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Ok(Codec::ids_only());
        }
        let file = path.display().to_string();
        let tok = tokenizers::Tokenizer::from_file(&path).map_err(|e| LlamaError::Tokenizer {
            file: file.clone(),
            reason: e.to_string(),
        })?;
        Ok(Codec {
            tokenizer: Some((tok, file)),
        })
    }

    /// Whether a tokenizer is loaded (text in, text out).
    pub fn has_tokenizer(&self) -> bool {
        self.tokenizer.is_some()
    }

    /// The prompt's ids: tokenized text with a tokenizer, else comma- or space-separated ids.
    pub fn encode(&self, prompt: &str) -> Result<Vec<u32>> {
        match &self.tokenizer {
            Some((tok, file)) => tok
                .encode(prompt, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| LlamaError::Tokenizer {
                    file: file.clone(),
                    reason: e.to_string(),
                }),
            None => parse_ids(prompt),
        }
    }

    /// Text for `ids` with a tokenizer, else the ids separated by spaces.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Some((tok, file)) => tok.decode(ids, false).map_err(|e| LlamaError::Tokenizer {
                file: file.clone(),
                reason: e.to_string(),
            }),
            None => Ok(ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")),
        }
    }
}

/// Parses `"1, 2 3"` into ids.
pub fn parse_ids(text: &str) -> Result<Vec<u32>> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>().map_err(|_| {
                LlamaError::Input(format!(
                    "prompt token {s:?} is not an id (without tokenizer.json, prompts are token ids)"
                ))
            })
        })
        .collect()
}
