//! Weights on the device: one buffer per fused weight, uploaded from [`HostWeights`].

use graphsmith::{Context, DeviceBuffer, Stream};

use crate::checkpoint::HostWeights;
use crate::error::Result;

/// One layer's weights on the device (bf16 bits).
pub struct DeviceLayer {
    pub input_norm: DeviceBuffer<u16>,
    pub qkv: DeviceBuffer<u16>,
    pub o: DeviceBuffer<u16>,
    pub post_norm: DeviceBuffer<u16>,
    pub gate_up: DeviceBuffer<u16>,
    pub down: DeviceBuffer<u16>,
    /// `down` transposed (`[intermediate, hidden]`): each FFN column's weights in one row, as
    /// the one-row fused MLP (`crate::mlp`) reads them. A copy: not counted in
    /// [`DeviceWeights::bytes`].
    pub down_t: DeviceBuffer<u16>,
}

/// A model's weights on the device.
pub struct DeviceWeights {
    pub embed: DeviceBuffer<u16>,
    pub layers: Vec<DeviceLayer>,
    pub final_norm: DeviceBuffer<u16>,
    /// The untied output projection; `None` when tied to `embed`.
    pub lm_head: Option<DeviceBuffer<u16>>,
}

fn put(ctx: &Context, stream: &Stream, label: String, data: &[u16]) -> Result<DeviceBuffer<u16>> {
    let mut b = ctx.alloc::<u16>(&label, data.len())?;
    stream.upload(&mut b, data)?;
    Ok(b)
}

impl DeviceWeights {
    /// Uploads `host` into new buffers labelled `<tag>/<tensor>`; `progress(done, total)` after
    /// each. On failure, what was uploaded is freed (the buffers drop).
    pub fn upload(
        ctx: &Context,
        stream: &Stream,
        host: &HostWeights,
        tag: &str,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<DeviceWeights> {
        let total = 3 + 6 * host.layers.len();
        let mut done = 0;
        let mut step = |b: DeviceBuffer<u16>| {
            done += 1;
            progress(done, total);
            b
        };
        let embed = step(put(
            ctx,
            stream,
            format!("{tag}/embed_tokens"),
            &host.embed,
        )?);
        // down is [hidden, intermediate]; hidden is the final norm's length.
        let hidden = host.final_norm.len().max(1);
        let mut layers = Vec::with_capacity(host.layers.len());
        for (i, l) in host.layers.iter().enumerate() {
            let p = format!("{tag}/layers.{i}");
            layers.push(DeviceLayer {
                input_norm: step(put(
                    ctx,
                    stream,
                    format!("{p}.input_layernorm"),
                    &l.input_norm,
                )?),
                qkv: step(put(ctx, stream, format!("{p}.qkv_proj"), &l.qkv)?),
                o: step(put(ctx, stream, format!("{p}.o_proj"), &l.o)?),
                post_norm: step(put(
                    ctx,
                    stream,
                    format!("{p}.post_attention_layernorm"),
                    &l.post_norm,
                )?),
                gate_up: step(put(ctx, stream, format!("{p}.gate_up_proj"), &l.gate_up)?),
                down: step(put(ctx, stream, format!("{p}.down_proj"), &l.down)?),
                down_t: put(
                    ctx,
                    stream,
                    format!("{p}.down_proj (transposed)"),
                    &transpose(&l.down, hidden, l.down.len() / hidden),
                )?,
            });
        }
        let final_norm = step(put(ctx, stream, format!("{tag}/norm"), &host.final_norm)?);
        let lm_head = match &host.lm_head {
            Some(h) => Some(put(ctx, stream, format!("{tag}/lm_head"), h)?),
            None => None,
        };
        step_done(&mut done, total, &mut progress);
        Ok(DeviceWeights {
            embed,
            layers,
            final_norm,
            lm_head,
        })
    }

    /// Every buffer, in a fixed order (the same for two models of one config): the tensors,
    /// then the copies in other layouts.
    pub fn buffers(&self) -> Vec<&DeviceBuffer<u16>> {
        let mut out = self.tensors();
        out.extend(self.layers.iter().map(|l| &l.down_t));
        out
    }

    /// The checkpoint's tensors on the device (fused where the decoder fuses them), each once.
    fn tensors(&self) -> Vec<&DeviceBuffer<u16>> {
        let mut out = vec![&self.embed];
        for l in &self.layers {
            out.extend([
                &l.input_norm,
                &l.qkv,
                &l.o,
                &l.post_norm,
                &l.gate_up,
                &l.down,
            ]);
        }
        out.push(&self.final_norm);
        if let Some(h) = &self.lm_head {
            out.push(h);
        }
        out
    }

    /// Bytes of all weights (each tensor once: what a step reads at least).
    pub fn bytes(&self) -> u64 {
        self.tensors().iter().map(|b| b.bytes() as u64).sum()
    }

    /// The output projection.
    pub fn head(&self) -> &DeviceBuffer<u16> {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// `w` (`rows` x `cols`, row-major) transposed, in tiles that stay in the host's caches.
fn transpose(w: &[u16], rows: usize, cols: usize) -> Vec<u16> {
    const TILE: usize = 64;
    let mut out = vec![0u16; w.len()];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    out[c * rows + r] = w[r * cols + c];
                }
            }
        }
    }
    out
}

fn step_done(done: &mut usize, total: usize, progress: &mut impl FnMut(usize, usize)) {
    *done = total;
    progress(*done, total);
}

#[cfg(test)]
mod tests {
    #[test]
    fn transpose_moves_every_element_across_tile_edges() {
        let (rows, cols) = (70, 131);
        let w: Vec<u16> = (0..rows * cols).map(|i| i as u16).collect();
        let t = super::transpose(&w, rows, cols);
        for r in 0..rows {
            for c in 0..cols {
                assert_eq!(t[c * rows + r], w[r * cols + c]);
            }
        }
    }
}
