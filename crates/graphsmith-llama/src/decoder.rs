//! One decode step for a batch of rows, issued on a stream: the [`graphsmith::Workload`] that a
//! [`graphsmith::GraphCache`] captures once per batch bucket. Every input that changes per
//! token (token ids, positions) lives in device buffers written before each replay; a row whose
//! position is negative is padding and is skipped by the attention kernel.

use graphsmith::model::Dim3;
use graphsmith::{args, sys, Context, DeviceBuffer, Kernel, LaunchConfig, Module, Scope, Stream};

use crate::config::Config;
use crate::cublas::{operand, output, Cublas};
use crate::error::{LlamaError, Result};
use crate::weights::DeviceWeights;

/// PTX of the decoder's kernels (`kernels/llama_kernels.cu`), compiled ahead of time.
pub const LLAMA_PTX: &str = include_str!("../../../kernels/llama_kernels.ptx");

/// Threads per block of the attention kernel.
const ATTENTION_THREADS: u32 = 128;
/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_SMEM: usize = 48 << 10;

/// The decoder's kernels.
pub struct Kernels {
    pub embed: Kernel,
    pub rmsnorm: Kernel,
    pub attention: Kernel,
    pub swiglu: Kernel,
    pub argmax: Kernel,
    pub advance: Kernel,
    _module: Module,
}

impl Kernels {
    /// Loads the embedded PTX.
    pub fn load(ctx: &Context) -> Result<Kernels> {
        let module = ctx.load_ptx("llama_kernels", LLAMA_PTX)?;
        Ok(Kernels {
            embed: module.kernel("ll_embed")?,
            rmsnorm: module.kernel("ll_rmsnorm")?,
            attention: module.kernel("ll_attention")?,
            swiglu: module.kernel("ll_swiglu")?,
            argmax: module.kernel("ll_argmax")?,
            advance: module.kernel("ll_advance")?,
            _module: module,
        })
    }
}

fn grid(x: u32, y: u32, block: u32, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3 { x, y, z: 1 },
        block: Dim3 {
            x: block,
            y: 1,
            z: 1,
        },
        shared_mem_bytes: smem,
    }
}

/// The decoder's state on the device: weights, KV cache, per-row inputs and activations, sized
/// for `capacity` rows and `max_ctx` positions.
pub struct Decoder {
    pub config: Config,
    pub kernels: Kernels,
    pub cublas: Cublas,
    pub weights: DeviceWeights,
    pub capacity: usize,
    pub max_ctx: usize,
    /// Token id per row (input of the step; the step's advance writes the argmax here).
    pub tokens: DeviceBuffer<i32>,
    /// Position per row (negative: padding); the step's advance moves it on by one.
    pub pos: DeviceBuffer<i32>,
    /// Argmax per row.
    pub next: DeviceBuffer<i32>,
    /// Logits `[capacity, vocab]`, f32 holding bf16-rounded values.
    pub logits: DeviceBuffer<f32>,
    kcache: Vec<DeviceBuffer<u16>>,
    vcache: Vec<DeviceBuffer<u16>>,
    cos: DeviceBuffer<f32>,
    sin: DeviceBuffer<f32>,
    hidden: DeviceBuffer<u16>,
    xn: DeviceBuffer<u16>,
    qkv: DeviceBuffer<u16>,
    attn: DeviceBuffer<u16>,
    gate_up: DeviceBuffer<u16>,
    act: DeviceBuffer<u16>,
    attention_smem: u32,
}

impl Decoder {
    /// Allocates the state for `capacity` rows of up to `max_ctx` positions; `stream` is the
    /// stream the cuBLAS handle starts on (the cache's).
    pub fn new(
        ctx: &Context,
        stream: &Stream,
        config: Config,
        weights: DeviceWeights,
        capacity: usize,
        max_ctx: usize,
    ) -> Result<Decoder> {
        if capacity == 0 {
            return Err(LlamaError::Input("a batch of zero rows".into()));
        }
        if max_ctx == 0 || max_ctx > config.max_position_embeddings {
            return Err(LlamaError::Input(format!(
                "context of {max_ctx} positions: the model allows 1 to {} (max_position_embeddings)",
                config.max_position_embeddings
            )));
        }
        let group = config.num_attention_heads / config.num_key_value_heads;
        let smem = (group * config.head_dim + group * max_ctx + 32) * 4;
        let kernels = Kernels::load(ctx)?;
        let mut limit = 0i32;
        // SAFETY: the device handle is the context's; limit is a valid out pointer.
        let rc = unsafe {
            sys::cuDeviceGetAttribute(
                &mut limit,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                ctx.device(),
            )
        };
        if rc != sys::CUresult::CUDA_SUCCESS {
            return Err(LlamaError::Input(format!(
                "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) failed: {rc:?}"
            )));
        }
        if smem > limit.max(0) as usize {
            return Err(LlamaError::Input(format!(
                "a context of {max_ctx} positions needs {smem} bytes of shared memory per attention block; the device allows {limit}"
            )));
        }
        if smem > DEFAULT_SMEM {
            // SAFETY: the function belongs to the loaded module (alive in `kernels`); the
            // context is current (the module load above bound it on this thread).
            let rc = unsafe {
                sys::cuFuncSetAttribute(
                    kernels.attention.raw(),
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    smem as i32,
                )
            };
            if rc != sys::CUresult::CUDA_SUCCESS {
                return Err(LlamaError::Input(format!(
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {smem}) on ll_attention failed: {rc:?}"
                )));
            }
        }
        let cublas = Cublas::new(ctx, stream, "cublas")?;
        let (h, f, v) = (
            config.hidden_size,
            config.intermediate_size,
            config.vocab_size,
        );
        let cache_len = capacity * config.num_key_value_heads * max_ctx * config.head_dim;
        let mut kcache = Vec::new();
        let mut vcache = Vec::new();
        for l in 0..config.num_hidden_layers {
            kcache.push(ctx.alloc::<u16>(&format!("kv/k.{l}"), cache_len)?);
            vcache.push(ctx.alloc::<u16>(&format!("kv/v.{l}"), cache_len)?);
        }
        let (cos_h, sin_h) = config.rope_tables(max_ctx);
        let mut cos = ctx.alloc::<f32>("rope/cos", cos_h.len())?;
        let mut sin = ctx.alloc::<f32>("rope/sin", sin_h.len())?;
        stream.upload(&mut cos, &cos_h)?;
        stream.upload(&mut sin, &sin_h)?;
        let mut pos = ctx.alloc::<i32>("rows/pos", capacity)?;
        stream.upload(&mut pos, &vec![-1; capacity])?;
        let mut tokens = ctx.alloc::<i32>("rows/tokens", capacity)?;
        stream.upload(&mut tokens, &vec![0; capacity])?;
        Ok(Decoder {
            next: ctx.alloc::<i32>("rows/next", capacity)?,
            logits: ctx.alloc::<f32>("act/logits", capacity * v)?,
            hidden: ctx.alloc::<u16>("act/hidden", capacity * h)?,
            xn: ctx.alloc::<u16>("act/normed", capacity * h)?,
            qkv: ctx.alloc::<u16>("act/qkv", capacity * config.qkv_dim())?,
            attn: ctx.alloc::<u16>("act/attn", capacity * config.q_dim())?,
            gate_up: ctx.alloc::<u16>("act/gate_up", capacity * 2 * f)?,
            act: ctx.alloc::<u16>("act/swiglu", capacity * f)?,
            config,
            kernels,
            cublas,
            weights,
            capacity,
            max_ctx,
            tokens,
            pos,
            kcache,
            vcache,
            cos,
            sin,
            attention_smem: smem as u32,
        })
    }

    /// Writes token ids and positions for the first `rows.len()` rows; every other row becomes
    /// padding (position -1). A row given position -1 is padding too (its token is ignored).
    pub fn write_rows(&mut self, stream: &Stream, rows: &[(i32, i32)]) -> Result<()> {
        let (toks, pos) = row_inputs(rows, self.capacity, self.config.vocab_size, self.max_ctx)?;
        stream.upload(&mut self.tokens, &toks)?;
        stream.upload(&mut self.pos, &pos)?;
        Ok(())
    }

    /// Issues one decode step for `rows` rows (a bucket: rows past the real batch are padding).
    pub fn step(&mut self, stream: &Stream, rows: usize) -> Result<()> {
        if rows == 0 || rows > self.capacity {
            return Err(LlamaError::Input(format!(
                "a step of {rows} rows (the decoder holds 1 to {})",
                self.capacity
            )));
        }
        self.issue_step(stream, rows)
            .map_err(|e| self.cublas.take_failure().unwrap_or(LlamaError::Runtime(e)))
    }

    fn issue_step(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let rows = rows.min(self.capacity);
        let c = &self.config;
        let k = &self.kernels;
        let (h, f, v) = (
            c.hidden_size as i32,
            c.intermediate_size as i32,
            c.vocab_size as i32,
        );
        let eps = c.rms_norm_eps;
        let r = rows as u32;
        let (nq, nkv, hd) = (
            c.num_attention_heads as i32,
            c.num_key_value_heads as i32,
            c.head_dim as i32,
        );
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let max_ctx = self.max_ctx as i32;
        let w = &self.weights;
        stream.launch(
            "embed",
            &k.embed,
            grid(r, 1, 256, 0),
            args![&self.tokens, &w.embed, &mut self.hidden, h, v],
        )?;
        for (l, lw) in w.layers.iter().enumerate() {
            let range = graphsmith::range(format!("layer {l}"));
            stream.launch(
                "input norm",
                &k.rmsnorm,
                grid(r, 1, 256, 0),
                args![&self.hidden, &lw.input_norm, &mut self.xn, h, eps],
            )?;
            self.cublas.gemm(
                stream,
                "gemm q/k/v",
                operand(&self.xn),
                operand(&lw.qkv),
                output(&mut self.qkv, false),
                rows,
                c.qkv_dim(),
                c.hidden_size,
                false,
                false,
            )?;
            stream.launch(
                "rope + kv append + attention",
                &k.attention,
                grid(r, nkv as u32, ATTENTION_THREADS, self.attention_smem),
                args![
                    &self.qkv,
                    &mut self.kcache[l],
                    &mut self.vcache[l],
                    &self.pos,
                    &self.cos,
                    &self.sin,
                    &mut self.attn,
                    nq,
                    nkv,
                    hd,
                    max_ctx,
                    scale
                ],
            )?;
            self.cublas.gemm(
                stream,
                "gemm o + residual",
                operand(&self.attn),
                operand(&lw.o),
                output(&mut self.hidden, true),
                rows,
                c.hidden_size,
                c.q_dim(),
                true,
                false,
            )?;
            stream.launch(
                "post-attention norm",
                &k.rmsnorm,
                grid(r, 1, 256, 0),
                args![&self.hidden, &lw.post_norm, &mut self.xn, h, eps],
            )?;
            self.cublas.gemm(
                stream,
                "gemm gate/up",
                operand(&self.xn),
                operand(&lw.gate_up),
                output(&mut self.gate_up, false),
                rows,
                2 * c.intermediate_size,
                c.hidden_size,
                false,
                false,
            )?;
            let total = rows as i32 * f;
            stream.launch(
                "swiglu",
                &k.swiglu,
                grid((total as u32).div_ceil(256).min(4096), 1, 256, 0),
                args![&self.gate_up, &mut self.act, f, total],
            )?;
            self.cublas.gemm(
                stream,
                "gemm down + residual",
                operand(&self.act),
                operand(&lw.down),
                output(&mut self.hidden, true),
                rows,
                c.hidden_size,
                c.intermediate_size,
                true,
                false,
            )?;
            drop(range);
        }
        stream.launch(
            "final norm",
            &k.rmsnorm,
            grid(r, 1, 256, 0),
            args![&self.hidden, &w.final_norm, &mut self.xn, h, eps],
        )?;
        self.cublas.gemm(
            stream,
            "gemm lm_head",
            operand(&self.xn),
            operand(w.head()),
            output(&mut self.logits, false),
            rows,
            c.vocab_size,
            c.hidden_size,
            false,
            true,
        )?;
        stream.launch(
            "argmax",
            &k.argmax,
            grid(r, 1, 1024, 0),
            args![&mut self.logits, &mut self.next, v],
        )?;
        stream.launch(
            "advance",
            &k.advance,
            grid(r.div_ceil(256), 1, 256, 0),
            args![
                &self.next,
                &mut self.tokens,
                &mut self.pos,
                rows as i32,
                max_ctx
            ],
        )?;
        Ok(())
    }
}

impl graphsmith::Workload<usize> for Decoder {
    fn issue(
        &mut self,
        stream: &Stream,
        shape: &usize,
        _scope: &mut Scope<'_>,
    ) -> graphsmith::Result<()> {
        self.issue_step(stream, *shape)
    }
}

/// The token and position arrays (`capacity` long) for `rows`: rows past `rows.len()`, and rows
/// given position -1, are padding (position -1, token 0). Checks ids and positions.
pub fn row_inputs(
    rows: &[(i32, i32)],
    capacity: usize,
    vocab: usize,
    max_ctx: usize,
) -> Result<(Vec<i32>, Vec<i32>)> {
    if rows.len() > capacity {
        return Err(LlamaError::Input(format!(
            "{} rows, the decoder holds {capacity}",
            rows.len()
        )));
    }
    let mut toks = vec![0i32; capacity];
    let mut pos = vec![-1i32; capacity];
    for (i, &(t, p)) in rows.iter().enumerate() {
        if p == -1 {
            continue;
        }
        if t < 0 || t as usize >= vocab {
            return Err(LlamaError::Input(format!(
                "token id {t} of row {i} is outside the vocabulary of {vocab}"
            )));
        }
        if p < 0 || p as usize >= max_ctx {
            return Err(LlamaError::Input(format!(
                "position {p} of row {i} is outside the context of {max_ctx} positions"
            )));
        }
        toks[i] = t;
        pos[i] = p;
    }
    Ok((toks, pos))
}
