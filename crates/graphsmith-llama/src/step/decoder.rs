//! One decode step for a batch of rows, issued on a stream: the [`graphsmith::Workload`] that a
//! [`graphsmith::GraphCache`] captures once per batch bucket. Every input that changes per
//! token (token ids, positions) lives in device buffers written before each replay; a row whose
//! position is negative is padding and is skipped by the attention kernel.

use graphsmith::{args, sys, ConditionHandle, Context, DeviceBuffer, Scope, Stream};

use super::buckets::BucketFacts;
use super::options::{DecoderOptions, Gemm, Pdl, GEMV_AUTO_MAX_ROWS};
use super::tuning::Tuning;
use crate::error::{LlamaError, Result};
use crate::kernels::cublas::Cublas;
use crate::kernels::cublaslt::CublasLt;
use crate::kernels::geometry::{
    async_smem, attention_partials_len, grid, ring_gemv_rule, warps_per_column,
    warps_per_column_max, AttentionLaunch, ATTENTION_CLUSTER, ATTENTION_CLUSTER_SMALL,
    DEFAULT_SMEM, GEMV_ROWS, QKV_WARPS_PER_COLUMN,
};
use crate::kernels::launch::{allow_smem, device_attribute};
use crate::kernels::ptx::Kernels;
use crate::load::config::Config;
use crate::load::weights::DeviceWeights;

mod layers;
mod lt;
mod prefill;

pub(crate) use prefill::PrefillBuffers;

/// The decoder's state on the device: weights, KV cache, per-row inputs and activations, sized
/// for `capacity` rows and `max_ctx` positions.
pub(crate) struct Decoder {
    config: Config,
    /// The kernels steps are issued with: plain, or opted into programmatic dependent launch
    /// (as the options asked).
    kernels: Kernels,
    cublas: Cublas,
    /// cuBLASLt, where the options may run it (`--gemm cublaslt`, or `auto` with the search);
    /// `lt_missing` says why it is absent under `auto` (the library not found).
    lt: Option<CublasLt>,
    lt_missing: Option<String>,
    weights: DeviceWeights,
    capacity: usize,
    max_ctx: usize,
    /// Token id per row (input of the step; the step's advance writes the argmax here).
    tokens: DeviceBuffer<i32>,
    /// Position per row (negative: padding); the step's advance moves it on by one.
    pos: DeviceBuffer<i32>,
    /// Argmax per row.
    next: DeviceBuffer<i32>,
    /// Logits `[capacity, vocab]`, f32 holding bf16-rounded values.
    logits: DeviceBuffer<f32>,
    options: DecoderOptions,
    /// The largest row count the GEMV kernels are instantiated for whose input fits in shared
    /// memory (0: none; cuBLAS then serves every batch).
    gemv_max_rows: usize,
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
    /// The most dynamic shared memory an attention block takes (opted into at creation).
    attention_smem_max: u32,
    /// Whether the ring GEMVs take this model's one-row projections, and whether the rule
    /// runs them (`kernels::geometry::ring_gemv_rule`; `Tuning::ring_gemv` decides otherwise).
    ring_fits: bool,
    ring_rule: bool,
    /// The attention blocks' partial results (see `attention_partials_len`).
    attn_partials: DeviceBuffer<f32>,
    /// Per (row, key/value head): attention blocks done, 0 between launches.
    attn_counters: DeviceBuffer<u32>,
}

/// Threads of `ll_loop_advance` (one block; it loops over rows).
const LOOP_ADVANCE_THREADS: u32 = 64;

impl Decoder {
    /// Per (row, key/value head): attention blocks done, 0 between launches.
    pub(crate) fn attention_counters(&self) -> &DeviceBuffer<u32> {
        &self.attn_counters
    }

    /// The model's config.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// How steps are issued (fixed at creation).
    pub(crate) fn options(&self) -> DecoderOptions {
        self.options
    }

    /// Rows the state holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The buckets a decoder of these rows serves (`buckets_for_capacity`): what the search
    /// measures and cuBLASLt keeps a workspace for.
    pub(crate) fn buckets(&self) -> &'static [usize] {
        crate::step::buckets::buckets_for_capacity(self.capacity)
    }

    /// Positions each row's KV cache holds.
    pub(crate) fn max_ctx(&self) -> usize {
        self.max_ctx
    }

    /// Logits `[capacity, vocab]` of the last step, f32 holding bf16-rounded values.
    pub(crate) fn logits(&self) -> &DeviceBuffer<f32> {
        &self.logits
    }

    /// The logits, to overwrite (tests poison them before a step).
    pub(crate) fn logits_mut(&mut self) -> &mut DeviceBuffer<f32> {
        &mut self.logits
    }

    /// Argmax per row of the last step (-1 for a padding row).
    pub(crate) fn next_tokens(&self) -> &DeviceBuffer<i32> {
        &self.next
    }

    /// The weights on the device.
    pub(crate) fn weights(&self) -> &DeviceWeights {
        &self.weights
    }

    /// Puts `new` in place of the weights and returns the old ones (the caller makes sure no
    /// launch still reads them before dropping them).
    pub(crate) fn replace_weights(&mut self, new: DeviceWeights) -> DeviceWeights {
        std::mem::replace(&mut self.weights, new)
    }

    /// The error a failed cuBLAS call left, if any (it names the call).
    pub(crate) fn take_cublas_failure(&self) -> Option<LlamaError> {
        let lt = || self.lt.as_ref().and_then(CublasLt::take_failure);
        self.cublas.take_failure().or_else(lt)
    }

    /// Allocates the state for `capacity` rows of up to `max_ctx` positions, issuing steps as
    /// `options` says; `stream` is the stream the cuBLAS handle starts on (the cache's).
    /// [`Pdl::On`] on a device without programmatic dependent launch is an error naming the
    /// feature.
    pub(crate) fn new(
        ctx: &Context,
        stream: &Stream,
        config: Config,
        weights: DeviceWeights,
        (capacity, max_ctx): (usize, usize),
        options: DecoderOptions,
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
        // The attention's split count only falls as rows grow: one row has the most; the
        // cluster variants (either size, as rows may ask) have their own.
        let nkv = config.num_key_value_heads;
        let shape = (nkv, group, config.head_dim);
        let plain =
            AttentionLaunch::for_rows(1, shape, max_ctx, sm_count as usize, None, Some(false));
        let smem = [
            plain,
            AttentionLaunch::cluster_of(ATTENTION_CLUSTER),
            AttentionLaunch::cluster_of(ATTENTION_CLUSTER_SMALL),
        ]
        .map(|l| l.smem(group, config.head_dim))
        .into_iter()
        .max()
        .unwrap_or(0);
        if smem > limit {
            return Err(LlamaError::Input(format!(
                "{group} query heads of head_dim {} need {smem} bytes of shared memory per attention block; the device allows {limit}",
                config.head_dim
            )));
        }
        // Static shared memory counts against the 48 KiB default too: opt in with a margin.
        if smem + 1024 > DEFAULT_SMEM {
            let all = kernels.attention.iter().chain(&kernels.attention_g4);
            for k in all
                .chain(&kernels.attention_c8)
                .chain(&kernels.attention_c4)
            {
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
            // 4 KiB is left for the kernels' static shared memory (at most ~2.3 KiB: the
            // partial sums of 8 warps x 2 parts x 8 rows, the reduction scratch, the argmax).
            if bytes + 4096 > limit {
                break;
            }
            if bytes + 4096 > DEFAULT_SMEM {
                for g in [
                    &kernels.gemv_norm,
                    &kernels.gemv_norm_swiglu,
                    &kernels.gemv_res,
                    &kernels.gemv_swiglu_res,
                    &kernels.gemv_norm_f32,
                    &kernels.gemv_head,
                ] {
                    allow_smem(&g.by_rows[i], bytes, "ll_gemv_*")?;
                }
            }
            gemv_max_rows = rows;
        }
        // The ring GEMVs (one row): whether every K is one they take and their shared memory
        // (rings and row, under 1 KiB of static beside) fits, then whether the rule runs them.
        let ks = [config.hidden_size, config.q_dim(), config.intermediate_size];
        let ring_fits = ks
            .iter()
            .all(|&k| async_smem(k).is_some_and(|b| b + 1024 <= limit));
        let (h, q, f) = (config.hidden_size, config.q_dim(), config.intermediate_size);
        let largest = [config.qkv_dim() * h, h * q, 2 * f * h, h * f]
            .into_iter()
            .max()
            .unwrap_or(0)
            * 2;
        let ring_rule = ring_fits && ring_gemv_rule(largest, sm_count);
        if let Some(bytes) = async_smem(kmax).filter(|_| ring_fits) {
            if bytes + 1024 > DEFAULT_SMEM {
                for k in [
                    &kernels.gemv_async_norm,
                    &kernels.gemv_async_norm_swiglu,
                    &kernels.gemv_async_res,
                ] {
                    allow_smem(k, bytes, "ll_gemv_async_*")?;
                }
            }
        }
        // The programmatic set shares the module (and the shared-memory opt-ins above).
        let kernels = match options.pdl {
            Pdl::Off => kernels,
            Pdl::Auto => kernels.programmatic().unwrap_or(kernels),
            Pdl::On => kernels.programmatic()?,
        };
        let cublas = Cublas::new(ctx, stream, "cublas")?;
        let (lt, lt_missing) = lt::make_lt(ctx, &options, capacity)?;
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
        // The attention's scratch: partial results, and counters zeroed once (the last block of
        // each (row, key/value head) resets its counter).
        let partials = attention_partials_len(
            capacity,
            (nkv, group, config.head_dim),
            max_ctx,
            sm_count as usize,
        );
        let attn_partials = ctx.alloc::<f32>("attn/partials", partials)?;
        let mut attn_counters = ctx.alloc::<u32>("attn/counters", capacity * nkv)?;
        stream.upload(&mut attn_counters, &vec![0; capacity * nkv])?;
        Ok(Decoder {
            best,
            options,
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
            lt,
            lt_missing,
            weights,
            capacity,
            max_ctx,
            tokens,
            pos,
            kcache,
            vcache,
            cos,
            sin,
            attention_smem_max: smem as u32,
            ring_fits,
            ring_rule,
            attn_partials,
            attn_counters,
        })
    }

    /// Writes token ids and positions for the first `rows.len()` rows; every other row becomes
    /// padding (position -1). A row given position -1 is padding too (its token is ignored).
    pub(crate) fn write_rows(&mut self, stream: &Stream, rows: &[(i32, i32)]) -> Result<()> {
        let (toks, pos) = row_inputs(rows, self.capacity, self.config.vocab_size, self.max_ctx)?;
        stream.upload(&mut self.tokens, &toks)?;
        stream.upload(&mut self.pos, &pos)?;
        Ok(())
    }

    /// Issues one decode step for `rows` rows (a bucket: rows past the real batch are padding).
    pub(crate) fn step(&mut self, stream: &Stream, rows: usize) -> Result<()> {
        if rows == 0 || rows > self.capacity {
            return Err(LlamaError::Input(format!(
                "a step of {rows} rows (the decoder holds 1 to {})",
                self.capacity
            )));
        }
        self.issue_step(stream, rows)
            .map_err(|e| self.take_cublas_failure().unwrap_or(LlamaError::Runtime(e)))
    }

    /// Whether steps use programmatic dependent launch.
    pub(crate) fn uses_pdl(&self) -> bool {
        self.kernels.is_programmatic()
    }

    /// Whether a step of `rows` rows runs its projections on the GEMV kernels.
    pub(crate) fn uses_gemv(&self, rows: usize) -> bool {
        match (self.options.gemm, self.options.tuning_for(rows).gemv) {
            (Gemm::Auto, Some(gemv)) => gemv && rows <= self.gemv_max_rows,
            _ => self.gemv_by_rule(rows),
        }
    }

    /// Whether the rules run a step of `rows` rows on the GEMV kernels.
    fn gemv_by_rule(&self, rows: usize) -> bool {
        match self.options.gemm {
            Gemm::Cublas | Gemm::CublasLt => false,
            Gemm::Gemv => self.gemv_max_rows > 0,
            Gemm::Auto => rows <= GEMV_AUTO_MAX_ROWS.min(self.gemv_max_rows),
        }
    }

    /// Sets the launch choices of `bucket`'s steps (the search, before any capture of it).
    pub(crate) fn set_bucket_choice(&mut self, bucket: usize, tuning: Tuning) -> Result<()> {
        self.options
            .buckets
            .set(bucket, tuning)
            .map_err(LlamaError::Input)
    }

    /// What the rules decide for a step of `rows` rows and which choices exist there.
    pub(crate) fn bucket_facts(&self, rows: usize) -> BucketFacts {
        let c = &self.config;
        let (h, q, f) = (c.hidden_size, c.q_dim(), c.intermediate_size);
        // (columns, K) of q/k/v, o, gate/up (a column reads a gate and an up row), down, lm_head.
        let shapes = [(c.qkv_dim(), h), (h, q), (f, h), (h, f), (c.vocab_size, h)];
        let sm = self.sm_count as usize;
        let warps_rule = std::array::from_fn(|i| match i {
            0 => QKV_WARPS_PER_COLUMN,
            _ => warps_per_column(shapes[i].0, shapes[i].1, sm),
        });
        let group = c.num_attention_heads / c.num_key_value_heads;
        BucketFacts {
            rows,
            gemv_choice: self.options.gemm == Gemm::Auto && rows <= self.gemv_max_rows,
            gemv_by_rule: self.gemv_by_rule(rows),
            warps_rule,
            warps_max: shapes.map(|(_, k)| warps_per_column_max(k)),
            ring_fits: rows == 1 && self.ring_fits,
            ring_rule: self.ring_rule,
            attention: (c.num_key_value_heads, group, c.head_dim),
            max_ctx: self.max_ctx,
            sm_count: sm,
        }
    }

    pub(crate) fn issue_step(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let rows = rows.min(self.capacity);
        self.issue_step_to_argmax(stream, rows)?;
        self.issue_advance(stream, rows)
    }

    /// `ll_advance` for `rows` rows: each row's argmax into `next` and `tokens`, its position
    /// moved on by one.
    pub(crate) fn issue_advance(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let max_ctx = self.max_ctx as i32;
        stream.launch(
            "advance",
            &self.kernels.advance,
            grid((rows as u32).div_ceil(256), 1, 256, 0),
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

    /// A step up to each row's argmax in `best` (embedding, layers, lm_head): what
    /// [`Decoder::issue_step`] issues before `ll_advance`, and the device-side loop's body
    /// before `ll_loop_advance`.
    pub(crate) fn issue_step_to_argmax(
        &mut self,
        stream: &Stream,
        rows: usize,
    ) -> graphsmith::Result<()> {
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
        self.issue_head(stream, rows)
    }

    /// One iteration of the device-side decode loop: a step up to the argmax, then
    /// `ll_loop_advance` (the advance, each row's token into `history`, the loop's bookkeeping
    /// in `state` and its condition `more`).
    pub(crate) fn issue_loop_body(
        &mut self,
        stream: &Stream,
        rows: usize,
        (history, state): (&mut DeviceBuffer<i32>, &mut DeviceBuffer<i32>),
        max_steps: usize,
        more: ConditionHandle,
    ) -> graphsmith::Result<()> {
        self.issue_step_to_argmax(stream, rows)?;
        let max_ctx = self.max_ctx as i32;
        stream.launch(
            "loop advance",
            &self.kernels.loop_advance,
            grid(1, 1, LOOP_ADVANCE_THREADS, 0),
            args![
                &mut self.best,
                &mut self.next,
                &mut self.tokens,
                &mut self.pos,
                history,
                state,
                rows as i32,
                max_ctx,
                max_steps as i32,
                more
            ],
        )
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
