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

/// Threads per block of the attention kernel (8 warps share out the positions).
pub const ATTENTION_THREADS: u32 = 256;
/// Threads per block of the GEMV kernels (one warp per output column).
pub const GEMV_THREADS: u32 = 256;
/// Threads per block of the argmax kernel.
pub const ARGMAX_THREADS: u32 = 256;
/// Vocabulary entries per argmax block.
pub const ARGMAX_CHUNK: u32 = ARGMAX_THREADS * 8;

/// Dynamic shared memory of one attention block (`ll_attention`) for `group` query heads per
/// key/value head of `head_dim`: the roped queries, each warp's partial output, max and sum.
pub fn attention_smem(group: usize, head_dim: usize) -> usize {
    let warps = (ATTENTION_THREADS / 32) as usize;
    (group * head_dim * (warps + 1) + 2 * warps * group) * 4
}
/// Row counts the GEMV kernels are instantiated for (a batch runs in the smallest that holds it;
/// more rows run in chunks of the largest).
const GEMV_ROWS: [usize; 4] = [1, 2, 4, 8];
/// With [`Gemm::Auto`], batches of at most this many rows use the GEMV kernels.
pub const GEMV_AUTO_MAX_ROWS: usize = 8;

/// Which kernels run the projections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gemm {
    /// The decoder's own GEMV kernels (norm, SwiGLU and residual fused) for batches of at most
    /// [`GEMV_AUTO_MAX_ROWS`] rows, cuBLAS above.
    #[default]
    Auto,
    /// cuBLAS for every batch (separate norm and SwiGLU kernels).
    Cublas,
    /// The GEMV kernels for every batch (in chunks of 8 rows above 8).
    Gemv,
}

impl std::str::FromStr for Gemm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Gemm, String> {
        match s {
            "auto" => Ok(Gemm::Auto),
            "cublas" => Ok(Gemm::Cublas),
            "gemv" => Ok(Gemm::Gemv),
            other => Err(format!(
                "unknown GEMM path {other:?} (want auto, cublas or gemv)"
            )),
        }
    }
}

/// One GEMV variant (prologue, epilogue), instantiated for 1, 2, 4 and 8 rows.
pub struct GemvKernels {
    by_rows: [Kernel; 4],
}

impl GemvKernels {
    fn load(module: &Module, name: &str) -> Result<GemvKernels> {
        Ok(GemvKernels {
            by_rows: [
                module.kernel(&format!("{name}_1"))?,
                module.kernel(&format!("{name}_2"))?,
                module.kernel(&format!("{name}_4"))?,
                module.kernel(&format!("{name}_8"))?,
            ],
        })
    }

    /// The instantiation for `rows` rows (at most 8) and its row capacity.
    fn for_rows(&self, rows: usize) -> (&Kernel, usize) {
        let i = GEMV_ROWS.iter().position(|&r| rows <= r).unwrap_or(3);
        (&self.by_rows[i], GEMV_ROWS[i])
    }
}
/// Dynamic shared memory a kernel may use without opting in.
const DEFAULT_SMEM: usize = 48 << 10;

/// The decoder's kernels.
pub struct Kernels {
    pub embed: Kernel,
    pub rmsnorm: Kernel,
    /// `ll_attention_{1,2,4,8}`: by head_dim elements per lane, groups of up to 16 query heads
    /// (see [`Kernels::attention_for`]).
    pub attention: [Kernel; 4],
    /// `ll_attention_{1,2,4,8}_g4`: the same for groups of up to 4 (fewer registers).
    pub attention_g4: [Kernel; 4],
    pub swiglu: Kernel,
    pub argmax: Kernel,
    pub advance: Kernel,
    /// GEMV with the RMSNorm as prologue, bf16 out (q/k/v, gate/up).
    pub gemv_norm: GemvKernels,
    /// GEMV with the residual add as epilogue (o).
    pub gemv_res: GemvKernels,
    /// GEMV with SwiGLU as prologue and the residual add as epilogue (down).
    pub gemv_swiglu_res: GemvKernels,
    /// GEMV with the final norm as prologue, f32 out (lm_head).
    pub gemv_norm_f32: GemvKernels,
    _module: Module,
}

impl Kernels {
    /// Loads the embedded PTX.
    pub fn load(ctx: &Context) -> Result<Kernels> {
        let module = ctx.load_ptx("llama_kernels", LLAMA_PTX)?;
        Ok(Kernels {
            embed: module.kernel("ll_embed")?,
            rmsnorm: module.kernel("ll_rmsnorm")?,
            attention: [
                module.kernel("ll_attention_1")?,
                module.kernel("ll_attention_2")?,
                module.kernel("ll_attention_4")?,
                module.kernel("ll_attention_8")?,
            ],
            attention_g4: [
                module.kernel("ll_attention_1_g4")?,
                module.kernel("ll_attention_2_g4")?,
                module.kernel("ll_attention_4_g4")?,
                module.kernel("ll_attention_8_g4")?,
            ],
            swiglu: module.kernel("ll_swiglu")?,
            argmax: module.kernel("ll_argmax")?,
            advance: module.kernel("ll_advance")?,
            gemv_norm: GemvKernels::load(&module, "ll_gemv_norm")?,
            gemv_res: GemvKernels::load(&module, "ll_gemv_res")?,
            gemv_swiglu_res: GemvKernels::load(&module, "ll_gemv_swiglu_res")?,
            gemv_norm_f32: GemvKernels::load(&module, "ll_gemv_norm_f32")?,
            _module: module,
        })
    }
}

impl Kernels {
    /// The attention instantiation for `head_dim` (at most 256) and `group` query heads per
    /// key/value head (at most 16): lanes hold head_dim / 32 elements each, rounded up to 1, 2,
    /// 4 or 8; groups of up to 4 take the smaller `_g4` kernels.
    pub fn attention_for(&self, head_dim: usize, group: usize) -> &Kernel {
        let i = match head_dim {
            0..=32 => 0,
            33..=64 => 1,
            65..=128 => 2,
            _ => 3,
        };
        if group <= 4 {
            &self.attention_g4[i]
        } else {
            &self.attention[i]
        }
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
    /// Which kernels run the projections (set before the first step, or refresh the graphs).
    pub gemm: Gemm,
    /// The largest row count the GEMV kernels are instantiated for whose input fits in shared
    /// memory (0: none; cuBLAS then serves every batch).
    pub gemv_max_rows: usize,
    sm_count: u32,
    /// Per row: the packed (value, index) maximum of the logits (`ll_argmax`), 0 between steps.
    best: DeviceBuffer<u64>,
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
        let smem = attention_smem(group, config.head_dim);
        let kernels = Kernels::load(ctx)?;
        let limit = device_attribute(
            ctx,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        )?
        .max(0) as usize;
        let sm_count = device_attribute(
            ctx,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "MULTIPROCESSOR_COUNT",
        )?
        .max(1) as u32;
        if smem > limit {
            return Err(LlamaError::Input(format!(
                "{group} query heads of head_dim {} need {smem} bytes of shared memory per attention block; the device allows {limit}",
                config.head_dim
            )));
        }
        if smem > DEFAULT_SMEM {
            for k in kernels.attention.iter().chain(&kernels.attention_g4) {
                allow_smem(k, smem, "ll_attention_*")?;
            }
        }
        // The GEMV kernels stage their rows of input in shared memory: R rows of K bf16 values.
        // A row count whose staging does not fit is not used (cuBLAS serves such batches).
        let kmax = config
            .hidden_size
            .max(config.intermediate_size)
            .max(config.q_dim())
            .next_multiple_of(8);
        let mut gemv_max_rows = 0;
        for (i, &rows) in GEMV_ROWS.iter().enumerate() {
            let bytes = rows * kmax * 2;
            // 1 KiB is left for the kernels' static shared memory.
            if bytes + 1024 > limit {
                break;
            }
            if bytes > DEFAULT_SMEM {
                for g in [
                    &kernels.gemv_norm,
                    &kernels.gemv_res,
                    &kernels.gemv_swiglu_res,
                    &kernels.gemv_norm_f32,
                ] {
                    allow_smem(&g.by_rows[i], bytes, "ll_gemv_*")?;
                }
            }
            gemv_max_rows = rows;
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
        // The argmax folds into `best` with atomicMax; the advance reads it and resets it to 0.
        let mut best = ctx.alloc::<u64>("rows/best", capacity)?;
        stream.upload(&mut best, &vec![0; capacity])?;
        Ok(Decoder {
            best,
            gemm: Gemm::Auto,
            gemv_max_rows,
            sm_count,
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

    /// Whether a step of `rows` rows runs its projections on the GEMV kernels.
    pub fn uses_gemv(&self, rows: usize) -> bool {
        match self.gemm {
            Gemm::Cublas => false,
            Gemm::Gemv => self.gemv_max_rows > 0,
            Gemm::Auto => rows <= GEMV_AUTO_MAX_ROWS.min(self.gemv_max_rows),
        }
    }

    fn issue_step(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let rows = rows.min(self.capacity);
        let r = rows as u32;
        let h = self.config.hidden_size as i32;
        let v = self.config.vocab_size as i32;
        stream.launch(
            "embed",
            &self.kernels.embed,
            grid(r, 1, 256, 0),
            args![&self.tokens, &self.weights.embed, &mut self.hidden, h, v],
        )?;
        if self.uses_gemv(rows) {
            self.issue_layers_gemv(stream, rows)?;
        } else {
            self.issue_layers_cublas(stream, rows)?;
        }
        let max_ctx = self.max_ctx as i32;
        stream.launch(
            "argmax",
            &self.kernels.argmax,
            grid((v as u32).div_ceil(ARGMAX_CHUNK), r, ARGMAX_THREADS, 0),
            args![&mut self.logits, &mut self.best, v],
        )?;
        stream.launch(
            "advance",
            &self.kernels.advance,
            grid(r.div_ceil(256), 1, 256, 0),
            args![
                &mut self.best,
                &mut self.next,
                &mut self.tokens,
                &mut self.pos,
                rows as i32,
                max_ctx
            ],
        )?;
        Ok(())
    }

    /// The attention of layer `l` (RoPE, KV append, softmax attention) from `qkv` into `attn`.
    #[track_caller]
    fn attention(&mut self, stream: &Stream, l: usize, rows: usize) -> graphsmith::Result<()> {
        let c = &self.config;
        let (nq, nkv, hd) = (
            c.num_attention_heads as i32,
            c.num_key_value_heads as i32,
            c.head_dim as i32,
        );
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        stream.launch(
            "rope + kv append + attention",
            self.kernels
                .attention_for(c.head_dim, c.num_attention_heads / c.num_key_value_heads),
            grid(
                rows as u32,
                nkv as u32,
                ATTENTION_THREADS,
                self.attention_smem,
            ),
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
                self.max_ctx as i32,
                scale
            ],
        )
    }

    /// Five kernels per layer: q/k/v with the input norm, attention, o with the residual,
    /// gate/up with the post-attention norm, down with SwiGLU and the residual; then lm_head
    /// with the final norm.
    fn issue_layers_gemv(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let c = self.config.clone();
        let eps = c.rms_norm_eps;
        let (h, f, q) = (c.hidden_size, c.intermediate_size, c.q_dim());
        let sms = (self.sm_count, self.gemv_max_rows);
        for l in 0..c.num_hidden_layers {
            let range = graphsmith::range(format!("layer {l}"));
            let lw = &self.weights.layers[l];
            gemv(
                stream,
                "gemv q/k/v + input norm",
                &self.kernels.gemv_norm,
                sms,
                (&self.hidden, &lw.input_norm, &lw.qkv),
                &mut self.qkv,
                rows,
                c.qkv_dim(),
                h,
                eps,
            )?;
            self.attention(stream, l, rows)?;
            let (k, lw) = (&self.kernels, &self.weights.layers[l]);
            gemv(
                stream,
                "gemv o + residual",
                &k.gemv_res,
                sms,
                (&self.attn, &lw.o, &lw.o),
                &mut self.hidden,
                rows,
                h,
                q,
                eps,
            )?;
            gemv(
                stream,
                "gemv gate/up + post-attention norm",
                &k.gemv_norm,
                sms,
                (&self.hidden, &lw.post_norm, &lw.gate_up),
                &mut self.gate_up,
                rows,
                2 * f,
                h,
                eps,
            )?;
            gemv(
                stream,
                "gemv down + swiglu + residual",
                &k.gemv_swiglu_res,
                sms,
                (&self.gate_up, &lw.down, &lw.down),
                &mut self.hidden,
                rows,
                h,
                f,
                eps,
            )?;
            drop(range);
        }
        let w = &self.weights;
        gemv(
            stream,
            "gemv lm_head + final norm",
            &self.kernels.gemv_norm_f32,
            sms,
            (&self.hidden, &w.final_norm, w.head()),
            &mut self.logits,
            rows,
            c.vocab_size,
            h,
            eps,
        )
    }

    /// The cuBLAS path: norm kernels, cuBLAS GEMMs (residual added by beta = 1), SwiGLU.
    fn issue_layers_cublas(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let c = self.config.clone();
        let (h, f) = (c.hidden_size as i32, c.intermediate_size as i32);
        let eps = c.rms_norm_eps;
        let r = rows as u32;
        for l in 0..c.num_hidden_layers {
            let range = graphsmith::range(format!("layer {l}"));
            let (k, lw) = (&self.kernels, &self.weights.layers[l]);
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
            self.attention(stream, l, rows)?;
            let (k, lw) = (&self.kernels, &self.weights.layers[l]);
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
        let w = &self.weights;
        stream.launch(
            "final norm",
            &self.kernels.rmsnorm,
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
        )
    }
}

/// Launches one GEMV variant `y[rows, n] (op)= prologue(x)[rows, k] @ w[n, k]^T` for `rows`
/// rows, in chunks of at most `max_rows` (1 to 8: the largest instantiation whose shared memory
/// the kernels were allowed); `inputs` is (x, norm weight, w)
/// (the norm weight is only read by the norm variants; others pass any buffer). The grid covers
/// the `n` columns with one warp each, capped at a few blocks per multiprocessor (each block
/// stages its rows' input once, then strides over columns).
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn gemv<T: graphsmith::Element>(
    stream: &Stream,
    label: &str,
    kernels: &GemvKernels,
    (sm_count, max_rows): (u32, usize),
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    y: &mut DeviceBuffer<T>,
    rows: usize,
    n: usize,
    k: usize,
    eps: f32,
) -> graphsmith::Result<()> {
    let (x, nw, w) = inputs;
    let warps = (GEMV_THREADS / 32) as usize;
    let mut row0 = 0;
    while row0 < rows {
        let chunk = (rows - row0).min(max_rows.clamp(1, 8));
        let (kernel, cap) = kernels.for_rows(chunk);
        let smem = cap * k.next_multiple_of(8) * 2;
        // Resident blocks per multiprocessor: at most 4 (64 registers x 256 threads), fewer
        // when the staged rows take more shared memory; the grid is one wave of them.
        let per_sm = ((200usize << 10) / smem.max(1)).clamp(1, 4) as u32;
        let blocks = (n.div_ceil(warps) as u32).min(sm_count * per_sm).max(1);
        stream.launch(
            label,
            kernel,
            grid(blocks, 1, GEMV_THREADS, smem as u32),
            args![
                x,
                nw,
                w,
                &mut *y,
                row0 as i32,
                chunk as i32,
                n as i32,
                k as i32,
                eps
            ],
        )?;
        row0 += chunk;
    }
    Ok(())
}

/// An attribute of the context's device.
fn device_attribute(ctx: &Context, attr: sys::CUdevice_attribute, name: &str) -> Result<i32> {
    let mut value = 0i32;
    // SAFETY: the device handle is the context's; value is a valid out pointer.
    let rc = unsafe { sys::cuDeviceGetAttribute(&mut value, attr, ctx.device()) };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::Input(format!(
            "cuDeviceGetAttribute({name}) failed: {rc:?}"
        )));
    }
    Ok(value)
}

/// Lets `kernel` use `bytes` of dynamic shared memory (above the 48 KiB default).
fn allow_smem(kernel: &Kernel, bytes: usize, name: &str) -> Result<()> {
    // SAFETY: the function belongs to a loaded module (alive in the decoder's `Kernels`); the
    // context is current (the module load bound it on this thread).
    let rc = unsafe {
        sys::cuFuncSetAttribute(
            kernel.raw(),
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::Input(format!(
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {bytes}) on {name} failed: {rc:?}"
        )));
    }
    Ok(())
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
