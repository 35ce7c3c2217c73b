//! `bench`'s time to first token: prompts of each length prefilled (in chunks, or step by
//! step), lm_head and the first token read back, timed with CUDA events and on the host after
//! a warm-up prefill (which captures the chunk graphs in graphs mode); medians of the runs.

use graphsmith::Context;
use serde::Serialize;

use super::median;
use crate::error::Result;
use crate::load::checkpoint::HostWeights;
use crate::load::config::Config;
use crate::run::{bar, bench_prompt, build_model, timed_prefill};
use crate::step::{DecoderOptions, Mode, PrefillMode};

/// What the time-to-first-token pass measures.
#[derive(Clone, Debug)]
pub struct TtftBench {
    /// Prompt lengths (a length beyond the model's context is left out, with a warning).
    pub prompt_lens: Vec<usize>,
    /// Sequences prefilled together (each a prompt of the length).
    pub batches: Vec<usize>,
    pub prefill: PrefillMode,
}

/// One line of `bench --json` for time to first token (`"kind": "ttft"`).
#[derive(Clone, Debug, Serialize)]
pub struct TtftLine {
    pub kind: &'static str,
    #[serde(rename = "impl")]
    pub implementation: String,
    pub config: String,
    pub batch: usize,
    pub prompt_len: usize,
    pub prefill: PrefillMode,
    /// Median time to first token between CUDA events on the model's stream (ms).
    pub ttft_device_ms: f64,
    /// Median time to first token on the host, until the first tokens are read back (ms).
    pub ttft_wall_ms: f64,
    /// Prompt tokens per second of device time.
    pub prefill_tokens_per_s: f64,
    /// Chunks per prefill and the bucket of each (chunked prefill).
    pub buckets: Vec<usize>,
    /// Chunk graphs captured by the warm-up (graphs mode) and their capture's host time (ms).
    pub graphs_captured: usize,
    pub capture_ms: f64,
    /// Device memory the model took at its peak, bytes.
    pub peak_mem_bytes: u64,
    /// The first new token of sequence 0 (the same in every run, and in eager and graphs).
    pub first_token: i32,
    pub runs: usize,
}

/// The prompt lengths of `lens` that fit `config`'s context with one new token; the others are
/// named on stderr.
fn fitting(config: &Config, lens: &[usize]) -> Vec<usize> {
    let max = config.max_position_embeddings;
    lens.iter()
        .copied()
        .filter(|&n| {
            let fits = n > 0 && n < max;
            if !fits {
                eprintln!(
                    "warning: time to first token: a prompt of {n} tokens is left out (the model's context is {max} positions, max_position_embeddings)"
                );
            }
            fits
        })
        .collect()
}

/// Time to first token for each mode, prompt length and batch, on a model of its own per mode
/// (sized for the longest prompt), `runs` timed prefills after one warm-up.
#[allow(clippy::too_many_arguments)]
pub fn bench_ttft(
    ctx: &Context,
    (name, config, host): (&str, &Config, &HostWeights),
    what: &TtftBench,
    modes: &[Mode],
    options: DecoderOptions,
    runs: usize,
    progress: bool,
    mut emit: impl FnMut(&TtftLine),
) -> Result<()> {
    let lens = fitting(config, &what.prompt_lens);
    let (Some(&longest), Some(&capacity)) = (lens.iter().max(), what.batches.iter().max()) else {
        return Ok(());
    };
    for &mode in modes {
        let (free0, total) = ctx.memory_info()?;
        let base = (total - free0) as u64;
        let size = (capacity, longest + 1);
        let mut model = build_model(ctx, config.clone(), host, size, mode, options, progress)?;
        let implementation = match mode {
            Mode::Eager => "graphsmith-eager",
            Mode::Graphs => "graphsmith-graphs",
        };
        for &len in &lens {
            for &batch in &what.batches {
                // Each sequence its own prompt (rotated ids), all of `len` tokens.
                let base_prompt = bench_prompt(len, config.vocab_size);
                let prompts: Vec<Vec<i32>> = (0..batch)
                    .map(|s| {
                        let mut p = base_prompt.clone();
                        p.rotate_left(s % len.max(1));
                        p
                    })
                    .collect();
                let views: Vec<&[i32]> = prompts.iter().map(|p| p.as_slice()).collect();
                let pb = bar(
                    progress,
                    (runs + 1) as u64,
                    &format!("{mode:?} ttft {len} b{batch}"),
                );
                let (_, warm, run) = timed_prefill(&mut model, &views, what.prefill)?;
                pb.inc(1);
                let (mut device, mut wall) = (Vec::new(), Vec::new());
                let mut first_token = -1;
                for _ in 0..runs {
                    let (first, t, _) = timed_prefill(&mut model, &views, what.prefill)?;
                    device.push(t.device_ms);
                    wall.push(t.wall_ms);
                    first_token = first.first().copied().unwrap_or(-1);
                    pb.inc(1);
                }
                pb.finish_and_clear();
                let peak = model.device_used_bytes()?.saturating_sub(base);
                let device_ms = median(device);
                emit(&TtftLine {
                    kind: "ttft",
                    implementation: implementation.to_string(),
                    config: name.to_string(),
                    batch,
                    prompt_len: len,
                    prefill: what.prefill,
                    ttft_device_ms: device_ms,
                    ttft_wall_ms: median(wall),
                    prefill_tokens_per_s: (batch * len) as f64 / (device_ms.max(1e-9) * 1e-3),
                    buckets: run.map(|r| r.buckets).unwrap_or_default(),
                    graphs_captured: warm.graphs_captured,
                    capture_ms: warm.capture_ms,
                    peak_mem_bytes: peak,
                    first_token,
                    runs,
                });
            }
        }
    }
    Ok(())
}
