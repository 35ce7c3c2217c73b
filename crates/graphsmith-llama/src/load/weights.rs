//! Weights on the device: one buffer per fused weight, uploaded from [`HostWeights`].

use graphsmith::{Context, DeviceBuffer, Stream};

use super::checkpoint::HostWeights;
use crate::error::Result;

/// One layer's weights on the device (bf16 bits).
pub struct DeviceLayer {
    pub input_norm: DeviceBuffer<u16>,
    pub qkv: DeviceBuffer<u16>,
    pub o: DeviceBuffer<u16>,
    pub post_norm: DeviceBuffer<u16>,
    pub gate_up: DeviceBuffer<u16>,
    pub down: DeviceBuffer<u16>,
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

    /// Every buffer, in a fixed order (the same for two models of one config).
    pub fn buffers(&self) -> Vec<&DeviceBuffer<u16>> {
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

    /// Bytes of all weights.
    pub fn bytes(&self) -> u64 {
        self.buffers().iter().map(|b| b.bytes() as u64).sum()
    }

    /// The output projection.
    pub fn head(&self) -> &DeviceBuffer<u16> {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

fn step_done(done: &mut usize, total: usize, progress: &mut impl FnMut(usize, usize)) {
    *done = total;
    progress(*done, total);
}
