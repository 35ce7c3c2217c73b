//! A prefill chunk on the decoder's weights and KV cache: the prompt rows of one chunk (of one
//! or several sequences, `step/prefill.rs`) through every layer at once, the projections as
//! cuBLAS GEMMs over the chunk's rows, the attention causal over each row's sequence so far,
//! K and V written into the cache in place; then each sequence's last prompt row into the
//! decoder's own rows, where [`Decoder::issue_prefill_head`] runs lm_head and the advance as a
//! decode step's end does.

use graphsmith::{args, sys, Context, DeviceBuffer, Stream};

use super::layers::CublasLayer;
use super::lt::lt_route;
use super::Decoder;
use crate::error::{LlamaError, Result};
use crate::kernels::geometry::{grid, DEFAULT_SMEM};
use crate::kernels::launch::{allow_smem, device_attribute};
use crate::kernels::prefill::{PrefillAttentionKind, PrefillAttentionLaunch, PREFILL_ROW_THREADS};
use crate::step::prefill::ChunkInputs;

/// A prefill's inputs and activations, for chunks of up to `rows` rows (the decoder's own
/// buffers are sized for its decode rows and held by its step graphs).
pub(crate) struct PrefillBuffers {
    rows: usize,
    /// Per chunk row: token id, position (-1: padding), cache slot (the sequence's decode row).
    tokens: DeviceBuffer<i32>,
    pos: DeviceBuffer<i32>,
    slot: DeviceBuffer<i32>,
    /// Per cache slot: the chunk row of the sequence's last prompt token, or -1.
    last: DeviceBuffer<i32>,
    hidden: DeviceBuffer<u16>,
    xn: DeviceBuffer<u16>,
    qkv: DeviceBuffer<u16>,
    attn: DeviceBuffer<u16>,
    gate_up: DeviceBuffer<u16>,
    act: DeviceBuffer<u16>,
}

impl PrefillBuffers {
    /// The most rows a chunk may have.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }
}

impl Decoder {
    /// Allocates a prefill's buffers for chunks of up to `rows` rows, and lets the prefill
    /// attention ([`PrefillAttentionLaunch::for_chunk`]'s kernel) take the shared memory it needs
    /// (an error names the device's limit).
    pub(crate) fn prefill_buffers(
        &self,
        ctx: &Context,
        stream: &Stream,
        rows: usize,
    ) -> Result<PrefillBuffers> {
        let c = &self.config;
        let group = c.num_attention_heads / c.num_key_value_heads;
        let attention = PrefillAttentionLaunch::for_chunk(rows, self.attention_shape());
        let smem = attention.smem;
        let limit = device_attribute(
            ctx,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        )?
        .max(0) as usize;
        if smem > limit {
            return Err(LlamaError::Input(format!(
                "{group} query heads of head_dim {} need {smem} bytes of shared memory per prefill attention block; the device allows {limit}",
                c.head_dim
            )));
        }
        if smem + 1024 > DEFAULT_SMEM {
            match attention.kind {
                PrefillAttentionKind::Rows => {
                    for k in self.kernels.prefill.attention_kernels() {
                        allow_smem(k, smem, "ll_prefill_attention_*")?;
                    }
                }
                PrefillAttentionKind::Flash => {
                    let k = self
                        .kernels
                        .prefill
                        .attention_kernel(&attention, c.head_dim, group);
                    allow_smem(k, smem, "ll_prefill_flash_*")?;
                }
            }
        }
        let (h, f) = (c.hidden_size, c.intermediate_size);
        let ints = |label: &str, len: usize| -> Result<DeviceBuffer<i32>> {
            let mut b = ctx.alloc::<i32>(label, len)?;
            stream.upload(&mut b, &vec![-1; len])?;
            Ok(b)
        };
        let (tokens, pos, slot) = (
            ints("prefill/tokens", rows)?,
            ints("prefill/pos", rows)?,
            ints("prefill/slot", rows)?,
        );
        let last = ints("prefill/last", self.capacity)?;
        Ok(PrefillBuffers {
            rows,
            tokens,
            pos,
            slot,
            last,
            hidden: ctx.alloc::<u16>("prefill/hidden", rows * h)?,
            xn: ctx.alloc::<u16>("prefill/normed", rows * h)?,
            qkv: ctx.alloc::<u16>("prefill/qkv", rows * c.qkv_dim())?,
            attn: ctx.alloc::<u16>("prefill/attn", rows * c.q_dim())?,
            gate_up: ctx.alloc::<u16>("prefill/gate_up", rows * 2 * f)?,
            act: ctx.alloc::<u16>("prefill/swiglu", rows * f)?,
        })
    }

    /// Writes a chunk's inputs (`step::prefill::chunk_inputs`), padded to the buffers' rows;
    /// token ids, positions and slots are checked.
    pub(crate) fn write_prefill_chunk(
        &self,
        stream: &Stream,
        bufs: &mut PrefillBuffers,
        inputs: &ChunkInputs,
    ) -> Result<()> {
        let n = inputs.tokens.len();
        if n > bufs.rows || inputs.pos.len() != n || inputs.slot.len() != n {
            return Err(LlamaError::Input(format!(
                "a prefill chunk of {n} rows (the buffers hold {})",
                bufs.rows
            )));
        }
        if inputs.last.len() != self.capacity {
            return Err(LlamaError::Input(format!(
                "a prefill chunk for {} sequences (the decoder holds {})",
                inputs.last.len(),
                self.capacity
            )));
        }
        let vocab = self.config.vocab_size;
        for r in 0..n {
            let (t, p, s) = (inputs.tokens[r], inputs.pos[r], inputs.slot[r]);
            if p < 0 {
                continue;
            }
            if t < 0 || t as usize >= vocab {
                return Err(LlamaError::Input(format!(
                    "token id {t} of prefill row {r} is outside the vocabulary of {vocab}"
                )));
            }
            if p as usize >= self.max_ctx || s < 0 || s as usize >= self.capacity {
                return Err(LlamaError::Input(format!(
                    "prefill row {r} at position {p} of slot {s}: the decoder holds {} slots of {} positions",
                    self.capacity, self.max_ctx
                )));
            }
        }
        let pad = |v: &[i32], fill: i32| {
            let mut out = v.to_vec();
            out.resize(bufs.rows, fill);
            out
        };
        stream.upload(&mut bufs.tokens, &pad(&inputs.tokens, 0))?;
        stream.upload(&mut bufs.pos, &pad(&inputs.pos, -1))?;
        stream.upload(&mut bufs.slot, &pad(&inputs.slot, -1))?;
        stream.upload(&mut bufs.last, &inputs.last)?;
        Ok(())
    }

    /// Issues one prefill chunk of `rows` rows (a bucket: rows past the chunk's are padding):
    /// embedding; per layer the input norm and q/k/v GEMM, RoPE with the K/V write
    /// (`ll_prefill_rope`), attention (`ll_prefill_flash_*` or `ll_prefill_attention_*`, as
    /// [`PrefillAttentionLaunch::for_chunk`] chooses), then the o GEMM with the
    /// residual, the post-attention norm, gate/up GEMM, SwiGLU and down GEMM with the residual
    /// (the cuBLAS layer of a step, [`CublasLayer`], on the chunk's buffers); then each
    /// sequence whose last prompt token is in the chunk has that row's hidden state copied into
    /// its decode row (`ll_gather_rows`).
    pub(crate) fn issue_prefill_chunk(
        &mut self,
        stream: &Stream,
        bufs: &mut PrefillBuffers,
        rows: usize,
    ) -> graphsmith::Result<()> {
        let rows = rows.min(bufs.rows);
        let c = self.config.clone();
        let (h, v) = (c.hidden_size as i32, c.vocab_size as i32);
        let (nq, nkv, hd) = (
            c.num_attention_heads as i32,
            c.num_key_value_heads as i32,
            c.head_dim as i32,
        );
        let group = c.num_attention_heads / c.num_key_value_heads;
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        let (max_ctx, slots) = (self.max_ctx as i32, self.capacity as i32);
        let attention = PrefillAttentionLaunch::for_chunk(rows, self.attention_shape());
        let r = rows as u32;
        stream.launch(
            "prefill embed",
            &self.kernels.embed,
            grid(r, 1, 256, 0),
            args![&bufs.tokens, &self.weights.embed, &mut bufs.hidden, h, v],
        )?;
        for l in 0..c.num_hidden_layers {
            let range = graphsmith::range(format!("prefill layer {l}"));
            let layer = CublasLayer {
                stream,
                cublas: &self.cublas,
                lt: lt_route(&self.lt, self.options.gemm, rows),
                kernels: &self.kernels,
                weights: &self.weights.layers[l],
                config: &self.config,
                rows,
            };
            layer.before_attention(&bufs.hidden, &mut bufs.xn, &mut bufs.qkv)?;
            let k = &self.kernels.prefill;
            stream.launch(
                "prefill rope + kv write",
                &k.rope,
                grid(r, 1, PREFILL_ROW_THREADS, 0),
                args![
                    &mut bufs.qkv,
                    &mut self.kcache[l],
                    &mut self.vcache[l],
                    &bufs.pos,
                    &bufs.slot,
                    &self.cos,
                    &self.sin,
                    nq,
                    nkv,
                    hd,
                    max_ctx,
                    slots
                ],
            )?;
            stream.launch(
                "prefill attention",
                k.attention_kernel(&attention, c.head_dim, group),
                attention.config(),
                args![
                    &bufs.qkv,
                    &self.kcache[l],
                    &self.vcache[l],
                    &bufs.pos,
                    &bufs.slot,
                    &mut bufs.attn,
                    nq,
                    nkv,
                    hd,
                    max_ctx,
                    slots,
                    scale,
                    rows as i32
                ],
            )?;
            let acts = (&mut bufs.xn, &mut bufs.gate_up, &mut bufs.act);
            layer.after_attention(&bufs.attn, &mut bufs.hidden, acts)?;
            drop(range);
        }
        stream.launch(
            "prefill last rows",
            &self.kernels.prefill.gather,
            grid(self.capacity as u32, 1, PREFILL_ROW_THREADS, 0),
            args![&bufs.hidden, &mut self.hidden, &bufs.last, h],
        )
    }

    /// The attention's (query heads, KV heads, head_dim).
    fn attention_shape(&self) -> (usize, usize, usize) {
        let c = &self.config;
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim)
    }

    /// Layer `l`'s K and V caches (`[rows, n_kv, max_ctx, head_dim]` bf16), to read or
    /// overwrite (tests).
    pub(crate) fn kv_cache_mut(
        &mut self,
        l: usize,
    ) -> Option<(&mut DeviceBuffer<u16>, &mut DeviceBuffer<u16>)> {
        self.kcache.get_mut(l).zip(self.vcache.get_mut(l))
    }

    /// The end of a prefill for the first `rows` decode rows, whose positions and tokens
    /// [`Decoder::write_rows`] set to each sequence's last prompt token: lm_head over the rows
    /// the chunks gathered, the argmax, and the advance (each row's next token, and its
    /// position moved on past the prompt), as a decode step ends.
    pub(crate) fn issue_prefill_head(
        &mut self,
        stream: &Stream,
        rows: usize,
    ) -> graphsmith::Result<()> {
        let rows = rows.min(self.capacity);
        self.issue_head(stream, rows)?;
        self.issue_advance(stream, rows)
    }
}
