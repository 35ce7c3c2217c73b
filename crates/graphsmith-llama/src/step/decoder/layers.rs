//! A step's layers and lm_head, on the GEMV kernels (one row; norm, SwiGLU and residual fused)
//! or on cuBLAS (cuBLASLt where `decoder/lt.rs` routes them), and the attention between the
//! projections.

use graphsmith::{args, BeforeWait, DeviceBuffer, Kernel, LibraryAccess, Stream};

use super::lt::lt_route;
use super::Decoder;
use crate::kernels::cublas::Cublas;
use crate::kernels::cublas::{operand, output};
use crate::kernels::cublaslt::{CublasLt, MatmulParams, Projection};
use crate::kernels::geometry::{
    grid, grid3, AttentionLaunch, GemvGrid, ARGMAX_CHUNK, ARGMAX_THREADS, GEMV_ASYNC_BLOCKS_PER_SM,
    QKV_WARPS_PER_COLUMN,
};
use crate::kernels::launch::{gemv, gemv_async, gemv_head};
use crate::kernels::ptx::{GemvKernels, Kernels};
use crate::load::config::Config;
use crate::load::weights::DeviceLayer;
use crate::step::prefetch::{prefetch_plan, PrefetchRange, Source};

impl Decoder {
    /// The attention of layer `l` (RoPE, KV append, softmax attention) from `qkv` into `attn`.
    /// With `prefetch`, the attention also asks L2 for the weights the kernels after it read
    /// ([`prefetch_plan`], up to [`Tuning::prefetch_bytes`]).
    #[track_caller]
    fn attention(
        &mut self,
        stream: &Stream,
        l: usize,
        rows: usize,
        prefetch: bool,
    ) -> graphsmith::Result<()> {
        let c = &self.config;
        let (nq, nkv, hd) = (
            c.num_attention_heads as i32,
            c.num_key_value_heads as i32,
            c.head_dim as i32,
        );
        let scale = 1.0 / (c.head_dim as f32).sqrt();
        // Fixed per bucket (a captured graph keeps it); each block sizes its chunk of positions
        // from the row's position on the device.
        let group = c.num_attention_heads / c.num_key_value_heads;
        let launch = AttentionLaunch::for_rows(
            rows,
            (nkv as usize, group, c.head_dim),
            self.max_ctx,
            self.sm_count as usize,
            self.options.tuning_for(rows).attention_splits,
            self.options.tuning_for(rows).attention_cluster,
        );
        let smem = launch.smem(group, c.head_dim) as u32;
        debug_assert!(smem <= self.attention_smem_max);
        let lw = &self.weights.layers[l];
        let next = match self.weights.layers.get(l + 1) {
            Some(next) => &next.qkv,
            None => self.weights.head(),
        };
        let budget = if prefetch {
            self.options.tuning_for(rows).prefetch_bytes()
        } else {
            0
        };
        let plan = prefetch_plan(
            budget,
            lw.gate_up.bytes() as u64,
            lw.down.bytes() as u64,
            next.bytes() as u64,
        );
        let pick = |r: &PrefetchRange| match r.source {
            Source::GateUp => &lw.gate_up,
            Source::Down => &lw.down,
            Source::Next => next,
        };
        let [pa, pb, pc] = plan.each_ref().map(|r| (pick(r), r.offset, r.bytes));
        stream.launch(
            "rope + kv append + attention",
            self.kernels.attention_kernel(c.head_dim, group, launch),
            grid3(
                (rows as u32, nkv as u32, launch.splits as u32),
                launch.threads,
                smem,
            ),
            // Read before the wait: the position, and the cache's positions before p (p's K
            // and V are written after it); see the kernel source.
            args![
                &self.qkv,
                BeforeWait::then_write(&mut self.kcache[l]),
                BeforeWait::then_write(&mut self.vcache[l]),
                BeforeWait(&self.pos),
                &self.cos,
                &self.sin,
                &mut self.attn,
                nq,
                nkv,
                hd,
                self.max_ctx as i32,
                scale,
                &mut self.attn_partials,
                &mut self.attn_counters,
                pa.0,
                pa.1,
                pa.2,
                pb.0,
                pb.1,
                pb.2,
                pc.0,
                pc.1,
                pc.2
            ],
        )
    }

    /// Five kernels per layer: q/k/v with the input norm, attention, o with the residual,
    /// gate/up with the post-attention norm and SwiGLU, down with the residual (lm_head is
    /// [`Decoder::issue_head`]). At one row the projections run on the ring GEMV
    /// where its rule (or the tuning) says so, on the register GEMV otherwise.
    pub(super) fn issue_layers_gemv(
        &mut self,
        stream: &Stream,
        rows: usize,
    ) -> graphsmith::Result<()> {
        let c = self.config.clone();
        let eps = c.rms_norm_eps;
        let (h, f, q) = (c.hidden_size, c.intermediate_size, c.q_dim());
        let (sm_count, max_rows, wpc, per_sm) = (
            self.sm_count,
            self.gemv_max_rows,
            self.options.tuning_for(rows).warps_per_column,
            self.options.tuning_for(rows).gemv_blocks_per_sm,
        );
        // q/k/v leaves room for the attention's early blocks (its own rule); the others take
        // `warps_per_column`'s (in `launch_gemv`).
        let qkv_wpc = wpc[0].unwrap_or(QKV_WARPS_PER_COLUMN);
        let sms = move |i: usize| GemvGrid {
            sm_count,
            max_rows,
            warps_per_column: if i == 0 { Some(qkv_wpc) } else { wpc[i] },
            blocks_per_sm: per_sm,
        };
        // Whether projection `i` runs on the ring GEMV, and its grid.
        let (tuning, fits, rule) = (
            self.options.tuning_for(rows),
            self.ring_fits,
            self.ring_rule,
        );
        let ring = move |i: usize| rows == 1 && fits && tuning.ring_gemv_for(i, rule);
        let per_sm = tuning.ring_gemv_blocks.unwrap_or(GEMV_ASYNC_BLOCKS_PER_SM);
        let ring_blocks = sm_count * per_sm;
        for l in 0..c.num_hidden_layers {
            let range = graphsmith::range(format!("layer {l}"));
            let (k, lw) = (&self.kernels, &self.weights.layers[l]);
            let inputs = (&self.hidden, &lw.input_norm, &lw.qkv);
            project(
                stream,
                "gemv q/k/v + input norm",
                ring(0).then_some((&k.gemv_async_norm, ring_blocks)),
                (&k.gemv_norm, sms(0)),
                inputs,
                &mut self.qkv,
                (rows, c.qkv_dim(), h),
                eps,
            )?;
            self.attention(stream, l, rows, true)?;
            let (k, lw) = (&self.kernels, &self.weights.layers[l]);
            project(
                stream,
                "gemv o + residual",
                ring(1).then_some((&k.gemv_async_res, ring_blocks)),
                (&k.gemv_res, sms(1)),
                (&self.attn, &lw.o, &lw.o),
                &mut self.hidden,
                (rows, h, q),
                eps,
            )?;
            project(
                stream,
                "gemv gate/up + post-attention norm + swiglu",
                ring(2).then_some((&k.gemv_async_norm_swiglu, ring_blocks)),
                (&k.gemv_norm_swiglu, sms(2)),
                (&self.hidden, &lw.post_norm, &lw.gate_up),
                &mut self.act,
                (rows, f, h),
                eps,
            )?;
            project(
                stream,
                "gemv down + residual",
                ring(3).then_some((&k.gemv_async_res, ring_blocks)),
                (&k.gemv_res, sms(3)),
                (&self.act, &lw.down, &lw.down),
                &mut self.hidden,
                (rows, h, f),
                eps,
            )?;
            drop(range);
        }
        Ok(())
    }

    /// lm_head of the first `rows` rows of `hidden`, each row's argmax folded into `best`: on
    /// the GEMV kernel with the final norm and the argmax fused, or (cuBLAS) the final norm, the
    /// GEMM and `ll_argmax`. The end of a step, and of a prefill.
    pub(super) fn issue_head(&mut self, stream: &Stream, rows: usize) -> graphsmith::Result<()> {
        let c = &self.config;
        let (h, v, eps) = (c.hidden_size, c.vocab_size, c.rms_norm_eps);
        let w = &self.weights;
        if self.uses_gemv(rows) {
            let grid = GemvGrid {
                sm_count: self.sm_count,
                max_rows: self.gemv_max_rows,
                warps_per_column: self.options.tuning.warps_per_column[4],
                blocks_per_sm: self.options.tuning.gemv_blocks_per_sm,
            };
            return gemv_head(
                stream,
                "gemv lm_head + final norm + argmax",
                &self.kernels.gemv_head,
                grid,
                (&self.hidden, &w.final_norm, w.head()),
                &mut self.logits,
                &mut self.best,
                (rows, v, h),
                eps,
            );
        }
        stream.launch(
            "final norm",
            &self.kernels.rmsnorm,
            grid(rows as u32, 1, 256, 0),
            args![&self.hidden, &w.final_norm, &mut self.xn, h as i32, eps],
        )?;
        matmul(
            stream,
            (&self.cublas, lt_route(&self.lt, self.options.gemm, rows)),
            "gemm lm_head",
            (
                Projection::Head,
                Projection::Head.params(&self.config, rows),
            ),
            operand(&self.xn),
            operand(w.head()),
            output(&mut self.logits, false),
        )?;
        stream.launch(
            "argmax",
            &self.kernels.argmax,
            grid(
                (v as u32).div_ceil(ARGMAX_CHUNK),
                rows as u32,
                ARGMAX_THREADS,
                0,
            ),
            args![&mut self.logits, &mut self.best, v as i32],
        )
    }

    /// The cuBLAS path: norm kernels, cuBLAS GEMMs (residual added by beta = 1), SwiGLU
    /// (lm_head is [`Decoder::issue_head`]).
    pub(super) fn issue_layers_cublas(
        &mut self,
        stream: &Stream,
        rows: usize,
    ) -> graphsmith::Result<()> {
        for l in 0..self.config.num_hidden_layers {
            let range = graphsmith::range(format!("layer {l}"));
            let layer = CublasLayer {
                stream,
                cublas: &self.cublas,
                lt: lt_route(&self.lt, self.options.gemm, rows),
                kernels: &self.kernels,
                weights: &self.weights.layers[l],
                config: &self.config,
                rows,
            };
            layer.before_attention(&self.hidden, &mut self.xn, &mut self.qkv)?;
            self.attention(stream, l, rows, false)?;
            let layer = CublasLayer {
                stream,
                cublas: &self.cublas,
                lt: lt_route(&self.lt, self.options.gemm, rows),
                kernels: &self.kernels,
                weights: &self.weights.layers[l],
                config: &self.config,
                rows,
            };
            let acts = (&mut self.xn, &mut self.gate_up, &mut self.act);
            layer.after_attention(&self.attn, &mut self.hidden, acts)?;
            drop(range);
        }
        Ok(())
    }
}

/// One layer of `rows` rows on cuBLAS, around its attention: what a step of several rows and a
/// prefill chunk (`decoder/prefill.rs`) both issue, on their own activation buffers.
pub(super) struct CublasLayer<'a> {
    pub(super) stream: &'a Stream,
    pub(super) cublas: &'a Cublas,
    /// cuBLASLt, where this step's matmuls run on it ([`lt_route`]); cuBLAS otherwise.
    pub(super) lt: Option<&'a CublasLt>,
    pub(super) kernels: &'a Kernels,
    pub(super) weights: &'a DeviceLayer,
    pub(super) config: &'a Config,
    pub(super) rows: usize,
}

impl CublasLayer<'_> {
    /// `projection`'s matmul over the layer's rows, on cuBLASLt or cuBLAS.
    #[track_caller]
    fn gemm(
        &self,
        label: &str,
        projection: Projection,
        x: (u64, LibraryAccess),
        w: (u64, LibraryAccess),
        y: (u64, LibraryAccess),
    ) -> graphsmith::Result<()> {
        let m = projection.params(self.config, self.rows);
        let libs = (self.cublas, self.lt);
        matmul(self.stream, libs, label, (projection, m), x, w, y)
    }

    /// The input norm of `hidden` into `xn`, then the q/k/v GEMM into `qkv`.
    #[track_caller]
    pub(super) fn before_attention(
        &self,
        hidden: &DeviceBuffer<u16>,
        xn: &mut DeviceBuffer<u16>,
        qkv: &mut DeviceBuffer<u16>,
    ) -> graphsmith::Result<()> {
        let (c, lw) = (self.config, self.weights);
        let h = c.hidden_size as i32;
        self.stream.launch(
            "input norm",
            &self.kernels.rmsnorm,
            grid(self.rows as u32, 1, 256, 0),
            args![hidden, &lw.input_norm, &mut *xn, h, c.rms_norm_eps],
        )?;
        self.gemm(
            "gemm q/k/v",
            Projection::Qkv,
            operand(xn),
            operand(&lw.qkv),
            output(qkv, false),
        )
    }

    /// The o GEMM of `attn` added to `hidden`, the post-attention norm into `xn`, gate/up into
    /// `gate_up`, SwiGLU into `act`, the down GEMM added to `hidden`.
    #[track_caller]
    pub(super) fn after_attention(
        &self,
        attn: &DeviceBuffer<u16>,
        hidden: &mut DeviceBuffer<u16>,
        (xn, gate_up, act): (
            &mut DeviceBuffer<u16>,
            &mut DeviceBuffer<u16>,
            &mut DeviceBuffer<u16>,
        ),
    ) -> graphsmith::Result<()> {
        let (c, lw, k, rows) = (self.config, self.weights, self.kernels, self.rows);
        let (h, f) = (c.hidden_size as i32, c.intermediate_size as i32);
        self.gemm(
            "gemm o + residual",
            Projection::O,
            operand(attn),
            operand(&lw.o),
            output(&mut *hidden, true),
        )?;
        self.stream.launch(
            "post-attention norm",
            &k.rmsnorm,
            grid(rows as u32, 1, 256, 0),
            args![&*hidden, &lw.post_norm, &mut *xn, h, c.rms_norm_eps],
        )?;
        self.gemm(
            "gemm gate/up",
            Projection::GateUp,
            operand(xn),
            operand(&lw.gate_up),
            output(&mut *gate_up, false),
        )?;
        let total = rows as i32 * f;
        self.stream.launch(
            "swiglu",
            &k.swiglu,
            grid((total as u32).div_ceil(256).min(4096), 1, 256, 0),
            args![&*gate_up, &mut *act, f, total],
        )?;
        self.gemm(
            "gemm down + residual",
            Projection::Down,
            operand(act),
            operand(&lw.down),
            output(hidden, true),
        )
    }
}

/// `projection`'s matmul `m` on cuBLASLt where given, else on cuBLAS (the same operands).
#[track_caller]
fn matmul(
    stream: &Stream,
    (cublas, lt): (&Cublas, Option<&CublasLt>),
    label: &str,
    (projection, m): (Projection, MatmulParams),
    x: (u64, LibraryAccess),
    w: (u64, LibraryAccess),
    y: (u64, LibraryAccess),
) -> graphsmith::Result<()> {
    match lt {
        Some(lt) => lt.matmul(stream, label, (projection, m), x, w, y),
        None => cublas.gemm(
            stream,
            label,
            x,
            w,
            y,
            m.rows,
            m.n,
            m.k,
            m.accumulate,
            m.out_f32,
        ),
    }
}

/// One projection of a layer: on the ring GEMV when `ring` names its kernel and blocks, on the
/// register GEMV (`register`: its kernels and grid) otherwise.
#[track_caller]
#[allow(clippy::too_many_arguments)]
fn project(
    stream: &Stream,
    label: &str,
    ring: Option<(&Kernel, u32)>,
    register: (&GemvKernels, GemvGrid),
    inputs: (&DeviceBuffer<u16>, &DeviceBuffer<u16>, &DeviceBuffer<u16>),
    y: &mut DeviceBuffer<u16>,
    (rows, n, k): (usize, usize, usize),
    eps: f32,
) -> graphsmith::Result<()> {
    match ring {
        Some((kernel, blocks)) => gemv_async(stream, label, kernel, blocks, inputs, y, (n, k), eps),
        None => gemv(
            stream, label, register.0, register.1, inputs, y, rows, n, k, eps,
        ),
    }
}
