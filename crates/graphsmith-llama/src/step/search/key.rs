//! What the cached choices depend on ([`CacheKey`]): the GPU (name, multiprocessors), the driver
//! (its release and CUDA version), graphsmith's version, the kernels' PTX, the search's own
//! format, and every field of the shape and the options that changes a launch. A change of any
//! of them gives another key, so a cached entry is never reused for it.

use std::hash::Hasher;
use std::sync::OnceLock;

use graphsmith::{sys, Context};
use serde::{Deserialize, Serialize};

use crate::error::{LlamaError, Result};
use crate::kernels::ptx::LLAMA_PTX;
use crate::load::config::Config;
use crate::step::options::Gemm;

/// The search's format: raised when its candidates or its entries change meaning, so that
/// entries written before are not reused (2: entries hold the cuBLASLt algorithms).
pub const SEARCH_FORMAT: u32 = 2;

/// The shape and options that change a step's launches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub tie_word_embeddings: bool,
    /// The context the rules size the attention for, rounded up to a power of two (the
    /// attention's splits and clusters follow it; see [`context_class`]).
    pub context: usize,
    /// Which kernels run the projections (`auto`, `cublas`, `cublaslt`, `gemv`).
    pub gemm: String,
    /// Whether the kernels use programmatic dependent launch.
    pub pdl: bool,
}

/// Everything a cached entry depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheKey {
    /// The GPU's name (`cuDeviceGetName`).
    pub gpu: String,
    pub multiprocessors: usize,
    /// The driver's release (where the system says it) and its CUDA version.
    pub driver: String,
    /// graphsmith-llama's version.
    pub graphsmith: String,
    /// A hash of the kernels' PTX.
    pub kernels: String,
    /// [`SEARCH_FORMAT`].
    pub search: u32,
    pub shape: Shape,
}

/// Contexts of up to `max_ctx` positions fall in one class: the next power of two (at least
/// 16). Choices measured for one context serve the others of its class.
pub fn context_class(max_ctx: usize) -> usize {
    max_ctx.max(16).next_power_of_two()
}

/// FNV-1a (64 bits) of `bytes`, in hex: stable across builds and platforms.
pub(crate) fn fnv_hex(bytes: &[u8]) -> String {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    format!("{:016x}", h.finish())
}

/// The hash of the embedded PTX (computed once).
pub fn kernels_hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| fnv_hex(LLAMA_PTX.as_bytes()))
}

impl Shape {
    /// The shape of `config` decoding contexts of `max_ctx` positions with these options.
    pub fn new(config: &Config, max_ctx: usize, gemm: Gemm, pdl: bool) -> Shape {
        Shape {
            hidden_size: config.hidden_size,
            intermediate_size: config.intermediate_size,
            num_hidden_layers: config.num_hidden_layers,
            num_attention_heads: config.num_attention_heads,
            num_key_value_heads: config.num_key_value_heads,
            head_dim: config.head_dim,
            vocab_size: config.vocab_size,
            tie_word_embeddings: config.tie_word_embeddings,
            context: context_class(max_ctx),
            gemm: match gemm {
                Gemm::Auto => "auto",
                Gemm::Cublas => "cublas",
                Gemm::CublasLt => "cublaslt",
                Gemm::Gemv => "gemv",
            }
            .to_string(),
            pdl,
        }
    }
}

impl CacheKey {
    /// A short id of the whole key (16 hex digits), for the file name.
    pub fn id(&self) -> String {
        fnv_hex(serde_json::to_string(self).unwrap_or_default().as_bytes())
    }

    /// The entry's file name: the GPU's name in lower case (letters and digits, dashes
    /// between), then the id.
    pub fn file_name(&self) -> String {
        let mut slug = String::new();
        for c in self.gpu.chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let slug = slug.trim_end_matches('-');
        let slug = if slug.is_empty() { "gpu" } else { slug };
        format!("{slug}-{}.json", self.id())
    }
}

/// The driver's release from the text of `/proc/driver/nvidia/version` (its first number with
/// dots, e.g. `580.159.04`), if there is one.
pub fn driver_release(text: &str) -> Option<String> {
    let line = text.lines().next()?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// The device of `ctx`: (name, multiprocessors, driver).
pub(crate) fn device_identity(ctx: &Context) -> Result<(String, usize, String)> {
    let fail = |call: &str, rc: sys::CUresult| {
        LlamaError::Input(format!(
            "{call} failed while keying the launch choices' cache: {rc:?}"
        ))
    };
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes, the length passed; the device is the context's.
    let rc = unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), 256, ctx.device()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(fail("cuDeviceGetName", rc));
    }
    name[255] = 0;
    // SAFETY: the buffer is NUL-terminated (cuDeviceGetName writes a terminated string within
    // the length given, and the last byte was set to NUL above) and outlives the borrow.
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string();
    let mut sms = 0i32;
    // SAFETY: the device is the context's; `sms` is a valid out pointer.
    let rc = unsafe {
        sys::cuDeviceGetAttribute(
            &mut sms,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            ctx.device(),
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(fail("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", rc));
    }
    let mut cuda = 0i32;
    // SAFETY: the driver is initialised (the context exists); `cuda` is a valid out pointer.
    let rc = unsafe { sys::cuDriverGetVersion(&mut cuda) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(fail("cuDriverGetVersion", rc));
    }
    let cuda = graphsmith::probe::version_text(cuda);
    let driver = match std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|t| driver_release(&t))
    {
        Some(release) => format!("{release} (CUDA {cuda})"),
        None => format!("CUDA {cuda}"),
    };
    Ok((name, sms.max(0) as usize, driver))
}
