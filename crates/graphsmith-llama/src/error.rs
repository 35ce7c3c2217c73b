//! The decoder's errors: each names the file, the tensor or the field, or the runtime object
//! and call that failed.

use std::path::PathBuf;

/// Result with [`LlamaError`].
pub type Result<T, E = LlamaError> = std::result::Result<T, E>;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum LlamaError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// `config.json` (or a named config) is malformed or describes a model this decoder cannot run.
    #[error("config {file}: field `{field}`: {reason}")]
    Config {
        /// The config file, or `built-in <name>`.
        file: String,
        /// The offending field.
        field: String,
        /// Why it is refused.
        reason: String,
    },
    /// A checkpoint file or one of its tensors is missing, truncated or of the wrong kind.
    #[error("checkpoint {file}: {what}: {reason}")]
    Checkpoint {
        /// The safetensors (or index) file.
        file: String,
        /// `tensor '<name>'`, or `file`.
        what: String,
        /// Why it is refused.
        reason: String,
    },
    /// A request the decoder cannot serve (prompt too long, batch of zero, bad token id, ...).
    #[error("bad input: {0}")]
    Input(String),
    /// The tokenizer failed.
    #[error("tokenizer {file}: {reason}")]
    Tokenizer {
        /// `tokenizer.json`.
        file: String,
        /// What the tokenizers crate said.
        reason: String,
    },
    /// cuBLAS could not be found or loaded.
    #[error("cuBLAS: {0}")]
    CublasMissing(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS call {call} for '{label}' failed: {status}")]
    Cublas {
        /// The cuBLAS function.
        call: &'static str,
        /// The GEMM or handle label.
        label: String,
        /// The cuBLAS status, by name.
        status: String,
    },
    /// A cuBLASLt call failed (`kernels/cublaslt.rs`).
    #[error("cuBLASLt call {call} for the {matmul} matmul at {bucket} failed: {status}")]
    CublasLt {
        /// The cuBLASLt function.
        call: &'static str,
        /// The bucket (or the rows of a step or prefill chunk outside the buckets).
        bucket: String,
        /// The matmul (`q/k/v`, `o`, `gate/up`, `down`, `lm_head`), or `handle`.
        matmul: String,
        /// The cuBLASLt status, by name, and what to do about it.
        status: String,
    },
    /// `bench --profile`: the driver refused to turn profile collection on or off.
    #[error(
        "bench --profile: {call} failed: {code}; fix: run it under a profiler started with \
         profiling off at the start (ncu --profile-from-start off), or leave --profile out"
    )]
    Profiler {
        /// `cuProfilerStart`, `cuProfilerStop`, or `cuCtxSetCurrent` before them.
        call: &'static str,
        /// The driver's result.
        code: graphsmith::CudaCode,
    },
    /// A graphsmith runtime error (CUDA call, capture, update).
    #[error(transparent)]
    Runtime(#[from] graphsmith::Error),
}

impl LlamaError {
    /// Whether the error comes from bad input (exit code 2) rather than a runtime failure.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            LlamaError::Io { .. }
                | LlamaError::Config { .. }
                | LlamaError::Checkpoint { .. }
                | LlamaError::Input(_)
                | LlamaError::Tokenizer { .. }
        )
    }

    pub(crate) fn config(file: &str, field: &str, reason: impl Into<String>) -> Self {
        LlamaError::Config {
            file: file.to_string(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn checkpoint(
        file: &str,
        what: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        LlamaError::Checkpoint {
            file: file.to_string(),
            what: what.into(),
            reason: reason.into(),
        }
    }
}
