//! Loading the decoder's kernels: the PTX of `kernels/llama_kernels.cu` (compiled ahead of
//! time), one [`Kernel`] per instantiation, and their programmatic-launch twins.

use graphsmith::{Context, Kernel, Module};

use super::all_programmatic;
use super::geometry::{AttentionLaunch, ATTENTION_CLUSTER_SMALL, ATTENTION_THREADS, GEMV_ROWS};
use super::prefill::PrefillKernels;
use crate::error::Result;

/// PTX of the decoder's kernels (`kernels/llama_kernels.cu`), compiled ahead of time.
pub const LLAMA_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/llama_kernels.ptx"));

/// One GEMV variant (prologue, epilogue), instantiated for 1, 2, 4 and 8 rows.
pub struct GemvKernels {
    pub(crate) by_rows: [Kernel; 4],
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

    /// The instantiations for 1, 2, 4 and 8 rows.
    pub fn by_rows(&self) -> &[Kernel; 4] {
        &self.by_rows
    }

    /// The instantiation for `rows` rows (at most 8) and its row capacity.
    pub(crate) fn for_rows(&self, rows: usize) -> (&Kernel, usize) {
        let i = GEMV_ROWS.iter().position(|&r| rows <= r).unwrap_or(3);
        (&self.by_rows[i], GEMV_ROWS[i])
    }
}

/// The decoder's kernels.
pub struct Kernels {
    pub embed: Kernel,
    pub rmsnorm: Kernel,
    /// `ll_attention_{1,2,4,8}`: by head_dim elements per lane, groups of up to 16 query heads
    /// (see [`Kernels::attention_for`]).
    pub attention: [Kernel; 4],
    /// `ll_attention_{1,2,4,8}_g4`: the same for groups of up to 4 (fewer registers).
    pub attention_g4: [Kernel; 4],
    /// `ll_attention_{1,2,4}_c8`: groups of up to 4, head_dim up to 128, in clusters of
    /// `ATTENTION_CLUSTER` blocks (see `AttentionLaunch`).
    pub attention_c8: [Kernel; 3],
    /// `ll_attention_{1,2,4}_c4`: the same in clusters of `ATTENTION_CLUSTER_SMALL` blocks.
    pub attention_c4: [Kernel; 3],
    pub swiglu: Kernel,
    pub argmax: Kernel,
    pub advance: Kernel,
    /// `ll_loop_advance`: `ll_advance` and the bookkeeping of one iteration of the device-side
    /// decode loop in one kernel, the last of the loop's body.
    pub loop_advance: Kernel,
    /// GEMV with the RMSNorm as prologue, bf16 out (q/k/v; gate/up on the unfused path).
    pub gemv_norm: GemvKernels,
    /// GEMV with the RMSNorm as prologue and SwiGLU as epilogue (gate/up: two weight rows per
    /// output column, bf16 activation out).
    pub gemv_norm_swiglu: GemvKernels,
    /// GEMV with the residual add as epilogue (o).
    pub gemv_res: GemvKernels,
    /// GEMV with SwiGLU as prologue and the residual add as epilogue (down).
    pub gemv_swiglu_res: GemvKernels,
    /// GEMV with the final norm as prologue, f32 out (lm_head).
    pub gemv_norm_f32: GemvKernels,
    /// The same, with each row's argmax folded into `best` (lm_head when the argmax is fused).
    pub gemv_head: GemvKernels,
    /// One-row GEMVs whose lanes stream their weights through rings in shared memory
    /// (`gemv_async`, the rule where `ring_gemv_rule` says so): q/k/v with the norm
    /// (triggering after its wait, as `gemv_norm`), gate/up with the norm and SwiGLU, o and
    /// down with the residual.
    pub gemv_async_norm: Kernel,
    pub gemv_async_norm_swiglu: Kernel,
    pub gemv_async_res: Kernel,
    /// The prefill's kernels (`kernels/prefill.rs`).
    pub prefill: PrefillKernels,
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
            attention_c8: [
                module.kernel("ll_attention_1_c8")?,
                module.kernel("ll_attention_2_c8")?,
                module.kernel("ll_attention_4_c8")?,
            ],
            attention_c4: [
                module.kernel("ll_attention_1_c4")?,
                module.kernel("ll_attention_2_c4")?,
                module.kernel("ll_attention_4_c4")?,
            ],
            swiglu: module.kernel("ll_swiglu")?,
            argmax: module.kernel("ll_argmax")?,
            advance: module.kernel("ll_advance")?,
            loop_advance: module.kernel("ll_loop_advance")?,
            // The q/k/v projection lets its dependents start only after its wait (LATE in the
            // kernel source): the attention after it reads before its own wait.
            gemv_norm: GemvKernels::load(&module, "ll_gemv_norm")?.triggering_after_wait(),
            gemv_norm_swiglu: GemvKernels::load(&module, "ll_gemv_norm_swiglu")?,
            gemv_res: GemvKernels::load(&module, "ll_gemv_res")?,
            gemv_swiglu_res: GemvKernels::load(&module, "ll_gemv_swiglu_res")?,
            gemv_norm_f32: GemvKernels::load(&module, "ll_gemv_norm_f32")?,
            gemv_head: GemvKernels::load(&module, "ll_gemv_head")?,
            gemv_async_norm: module.kernel("ll_gemv_async_norm")?.triggers_after_wait(),
            gemv_async_norm_swiglu: module.kernel("ll_gemv_async_norm_swiglu")?,
            gemv_async_res: module.kernel("ll_gemv_async_res")?,
            prefill: PrefillKernels::load(&module)?,
            _module: module,
        })
    }
}

impl GemvKernels {
    /// The same kernels, stated to trigger their dependents after their wait
    /// ([`Kernel::triggers_after_wait`]).
    fn triggering_after_wait(self) -> GemvKernels {
        GemvKernels {
            by_rows: self.by_rows.map(Kernel::triggers_after_wait),
        }
    }

    fn programmatic(&self) -> graphsmith::Result<GemvKernels> {
        Ok(GemvKernels {
            by_rows: all_programmatic(&self.by_rows)?,
        })
    }
}

impl Kernels {
    /// The same kernels opted into programmatic dependent launch (each kernel waits for its
    /// predecessor with `griddepcontrol.wait` before touching what it wrote: see
    /// `kernels/llama_kernels.cu`). Fails on a device below compute capability 9.0.
    pub fn programmatic(&self) -> graphsmith::Result<Kernels> {
        let all = all_programmatic::<4>;
        Ok(Kernels {
            embed: self.embed.clone().programmatic()?,
            rmsnorm: self.rmsnorm.clone().programmatic()?,
            attention: all(&self.attention)?,
            attention_g4: all(&self.attention_g4)?,
            attention_c8: all_programmatic(&self.attention_c8)?,
            attention_c4: all_programmatic(&self.attention_c4)?,
            swiglu: self.swiglu.clone().programmatic()?,
            argmax: self.argmax.clone().programmatic()?,
            advance: self.advance.clone().programmatic()?,
            loop_advance: self.loop_advance.clone().programmatic()?,
            gemv_norm: self.gemv_norm.programmatic()?,
            gemv_norm_swiglu: self.gemv_norm_swiglu.programmatic()?,
            gemv_res: self.gemv_res.programmatic()?,
            gemv_swiglu_res: self.gemv_swiglu_res.programmatic()?,
            gemv_norm_f32: self.gemv_norm_f32.programmatic()?,
            gemv_head: self.gemv_head.programmatic()?,
            gemv_async_norm: self.gemv_async_norm.clone().programmatic()?,
            gemv_async_norm_swiglu: self.gemv_async_norm_swiglu.clone().programmatic()?,
            gemv_async_res: self.gemv_async_res.clone().programmatic()?,
            prefill: self.prefill.programmatic()?,
            _module: self._module.clone(),
        })
    }

    /// Whether these kernels are opted into programmatic dependent launch.
    pub fn is_programmatic(&self) -> bool {
        self.embed.is_programmatic()
    }
}

impl Kernels {
    /// The attention instantiation for `head_dim` (at most 256) and `group` query heads per
    /// key/value head (at most 16): lanes hold head_dim / 32 elements each, rounded up to 1, 2,
    /// 4 or 8; groups of up to 4 take the smaller `_g4` kernels.
    pub fn attention_for(&self, head_dim: usize, group: usize) -> &Kernel {
        let plain = AttentionLaunch {
            cluster: false,
            splits: 1,
            threads: ATTENTION_THREADS,
        };
        self.attention_kernel(head_dim, group, plain)
    }

    /// The instantiation `AttentionLaunch` asks for: with `cluster`, the `_c8` or `_c4` kernel
    /// by `splits` (the cluster's size; they exist for groups of up to 4 and head_dim up to 128,
    /// as `AttentionLaunch::for_rows` requires).
    pub fn attention_kernel(
        &self,
        head_dim: usize,
        group: usize,
        launch: AttentionLaunch,
    ) -> &Kernel {
        let i = match head_dim {
            0..=32 => 0,
            33..=64 => 1,
            65..=128 => 2,
            _ => 3,
        };
        if launch.cluster && i < 3 && group <= 4 {
            if launch.splits == ATTENTION_CLUSTER_SMALL {
                &self.attention_c4[i]
            } else {
                &self.attention_c8[i]
            }
        } else if group <= 4 {
            &self.attention_g4[i]
        } else {
            &self.attention[i]
        }
    }
}
