//! The `bench` command: decode steps per second for each mode, programmatic launch choice,
//! tuning and batch, timed with CUDA events after a prefill, against the weights' copy floor.

use graphsmith::{sys, Context, CudaCode};
use serde::Serialize;

use super::median;
use super::prefill::{bench_ttft, TtftBench, TtftLine};
use crate::error::{LlamaError, Result};
use crate::run::{bar, bench_prompt, build_model, check_request, load_host, Source};
use crate::step::{DecoderOptions, Gemm, Mode, Pdl, Search, SearchReport, StepPath, Tuning};

/// One line of `bench --json`.
#[derive(Clone, Debug, Serialize)]
pub struct BenchLine {
    #[serde(rename = "impl")]
    pub implementation: String,
    pub config: String,
    pub batch: usize,
    pub steps_per_s: f64,
    pub tokens_per_s: f64,
    pub ms_per_step: f64,
    pub peak_mem_bytes: u64,
    pub weight_bytes: u64,
    pub copy_tb_s: f64,
    pub floor_ms: f64,
    /// Nodes in the bucket's graph (graphs mode).
    pub graph_nodes: Option<usize>,
    /// How the timed steps ran: "graph", "eager", or the fallback reason.
    pub path: String,
    /// Which kernels ran the projections: "gemv" (the decoder's own, fused), "cublaslt" or
    /// "cublas".
    pub projections: String,
    /// Whether the decoder's kernels used programmatic dependent launch.
    pub pdl: bool,
    /// The hand-set launch choices (`default`: the rules'; see [`Tuning`]). A line
    /// measured with others names them in `impl` too, e.g. `graphsmith-graphs [down=4]`.
    pub tuning: String,
    /// After the pass: the next token of row 0, the sum of row 0's logits, and the sum of the
    /// attention's counters (0 when every launch combined its partials).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The launch choices the timed steps' bucket ran with (graphs mode with the search: what it
    /// found for that bucket; `default`: the rules').
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice: Option<String>,
    /// What the search did when this pass's model was made: every bucket's choices, the time
    /// spent, whether they came from the cache (graphs mode with the search only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchReport>,
    /// Whether the last timed run's steps ran between `cuProfilerStart` and `cuProfilerStop`
    /// (`bench --profile`); left out when not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub profiled: bool,
}

/// Profile collection on (`cuProfilerStart`) or off (`cuProfilerStop`) for `ctx`, made current
/// first. A profiler started with profiling off at the start (Nsight Compute:
/// `ncu --profile-from-start off`) then sees only the work between the two; outside a profiler
/// both calls do nothing.
pub(crate) fn profiler(ctx: &Context, on: bool) -> Result<()> {
    // SAFETY: ctx.raw() is the live context `ctx` owns; making it current touches no memory.
    let rc = unsafe { sys::cuCtxSetCurrent(ctx.raw()) };
    let (call, rc) = if rc != sys::CUresult::CUDA_SUCCESS {
        ("cuCtxSetCurrent", rc)
    } else if on {
        // SAFETY: no arguments; acts on the context made current just above.
        ("cuProfilerStart", unsafe { sys::cuProfilerStart() })
    } else {
        // SAFETY: no arguments; acts on the context made current just above.
        ("cuProfilerStop", unsafe { sys::cuProfilerStop() })
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(LlamaError::Profiler {
            call,
            code: CudaCode(rc as u32),
        });
    }
    Ok(())
}

/// Device-to-device copy bandwidth in TB/s (bytes read plus bytes written, per second).
pub fn copy_bandwidth(ctx: &Context) -> Result<f64> {
    let n = 256 << 20; // u32 elements: 1 GiB
    let src = ctx.alloc::<u32>("bandwidth/src", n)?;
    let mut dst = ctx.alloc::<u32>("bandwidth/dst", n)?;
    let stream = ctx.stream("bandwidth")?;
    let (a, b) = (
        ctx.event("bandwidth/start", true)?,
        ctx.event("bandwidth/end", true)?,
    );
    stream.copy("bandwidth copy", &mut dst, &src)?;
    let mut times = Vec::new();
    for _ in 0..10 {
        stream.record(&a)?;
        stream.copy("bandwidth copy", &mut dst, &src)?;
        stream.record(&b)?;
        b.synchronize()?;
        times.push(b.elapsed_ms_since(&a)? as f64);
    }
    let ms = median(times);
    Ok(2.0 * (n * 4) as f64 / (ms * 1e-3) / 1e12)
}

/// The `bench` command: for each mode, programmatic launch choice, tuning and batch, decode
/// `steps` steps after `warmup` (prefill excluded), timed with CUDA events over the whole loop,
/// median of `runs`; each (mode, programmatic launch, tuning) on a model of its own, whose
/// launch choices graphs mode searches at load where `search` asks (a line then names each
/// bucket's and the time spent). Then, with `ttft`, the time to first token per mode
/// ([`bench_ttft`]: the first programmatic launch choice, the rules' tuning). `ctx` is called
/// once the inputs have been checked. With `profile`, the last timed run's steps of each batch
/// run between [`profiler`] on and off (after the warm-up, before the counters are read), so a
/// profiler started with `--profile-from-start off` sees exactly those decode steps.
#[allow(clippy::too_many_arguments)]
pub fn bench(
    ctx: impl FnOnce() -> Result<Context>,
    source: &Source,
    batches: &[usize],
    modes: &[Mode],
    (gemm, search): (Gemm, Search),
    pdls: &[Pdl],
    tunings: &[Tuning],
    steps: usize,
    warmup: usize,
    runs: usize,
    profile: bool,
    progress: bool,
    ttft: Option<&TtftBench>,
    mut emit: impl FnMut(&BenchLine),
    emit_ttft: impl FnMut(&TtftLine),
) -> Result<()> {
    let (config, host) = load_host(source, progress)?;
    for &b in batches {
        check_request(&config, 32, warmup + steps, b)?;
    }
    let ctx = &ctx()?;
    let copy_tb_s = copy_bandwidth(ctx)?;
    let weight_bytes = config.weight_bytes();
    let prompt = bench_prompt(32, config.vocab_size);
    let max_ctx = prompt.len() + warmup + steps + 1;
    let capacity = batches.iter().copied().max().unwrap_or(1);
    let default = [Tuning::default()];
    let tunings = if tunings.is_empty() {
        &default[..]
    } else {
        tunings
    };
    // One model per (mode, programmatic launch, tuning): the options are fixed when it is made.
    let passes = modes.iter().flat_map(|&m| {
        pdls.iter()
            .flat_map(move |&p| tunings.iter().map(move |&t| (m, p, t)))
    });
    for (mode, pdl, tuning) in passes {
        let (free0, total) = ctx.memory_info()?;
        let base = (total - free0) as u64;
        let options = DecoderOptions {
            gemm,
            pdl,
            tuning,
            search,
            ..DecoderOptions::default()
        };
        let size = (capacity, max_ctx);
        let mut model = build_model(ctx, config.clone(), &host, size, mode, options, progress)?;
        let mut peak = model.device_used_bytes()?.saturating_sub(base);
        for &batch in batches {
            let pb = bar(
                progress,
                (prompt.len() + runs * (warmup + steps)) as u64,
                &format!("{mode:?} b{batch} pdl {pdl:?} tune {tuning}"),
            );
            let mut path = StepPath::Eager;
            for (t, &tok) in prompt.iter().enumerate() {
                path = model.step(&vec![(tok, t as i32); batch])?;
                pb.inc(1);
            }
            let last = (*prompt.last().unwrap_or(&0), prompt.len() as i32 - 1);
            let (a, b) = (
                ctx.event("bench/start", true)?,
                ctx.event("bench/end", true)?,
            );
            let mut times = Vec::new();
            for run in 0..runs {
                let profiled = profile && run + 1 == runs;
                model.step(&vec![last; batch])?;
                model.run_free(batch, warmup)?;
                model.stream().record(&a)?;
                if profiled {
                    profiler(ctx, true)?;
                }
                model.run_free(batch, steps)?;
                model.stream().record(&b)?;
                b.synchronize()?;
                if profiled {
                    profiler(ctx, false)?;
                }
                times.push(b.elapsed_ms_since(&a)? as f64);
                pb.inc((warmup + steps) as u64);
            }
            pb.finish_and_clear();
            let after = {
                let tok = model.next_tokens(1)?;
                let sum: f64 = model.logits(1)?.iter().map(|&v| v as f64).sum();
                let cnt: u64 = model.attention_counters()?.iter().map(|&c| c as u64).sum();
                Some(format!(
                    "next {:?}, logits sum {sum:.6}, counters {cnt}",
                    tok
                ))
            };
            peak = peak.max(model.device_used_bytes()?.saturating_sub(base));
            let ms = median(times) / steps as f64;
            let rows = match &path {
                StepPath::Graph { bucket } => *bucket,
                _ => batch,
            };
            let projections = if model.uses_gemv(rows) {
                "gemv"
            } else if model.uses_cublaslt(rows) {
                "cublaslt"
            } else {
                "cublas"
            };
            let (implementation, nodes, path) = match (mode, path) {
                (Mode::Eager, _) => ("graphsmith-eager", None, "eager".to_string()),
                (Mode::Graphs, StepPath::Graph { bucket }) => (
                    "graphsmith-graphs",
                    model.node_count(bucket),
                    "graph".to_string(),
                ),
                (Mode::Graphs, StepPath::Fallback { reason }) => {
                    ("graphsmith-graphs", None, format!("eager: {reason}"))
                }
                (Mode::Graphs, StepPath::Eager) => ("graphsmith-graphs", None, "eager".to_string()),
            };
            // A run asked to go without programmatic launch is named apart.
            let suffix = if pdl == Pdl::Off { "-nopdl" } else { "" };
            let tuned = if tuning.is_default() {
                String::new()
            } else {
                format!(" [{tuning}]")
            };
            emit(&BenchLine {
                implementation: format!("{implementation}{suffix}{tuned}"),
                config: source.name(),
                batch,
                steps_per_s: 1e3 / ms,
                tokens_per_s: batch as f64 * 1e3 / ms,
                ms_per_step: ms,
                peak_mem_bytes: peak,
                weight_bytes,
                copy_tb_s,
                floor_ms: weight_bytes as f64 / (copy_tb_s * 1e12) * 1e3,
                graph_nodes: nodes,
                path,
                projections: projections.to_string(),
                pdl: model.uses_pdl(),
                tuning: tuning.to_string(),
                after,
                choice: model
                    .search_report()
                    .map(|_| model.options().tuning_for(rows).to_string()),
                search: model.search_report().cloned(),
                profiled: profile,
            });
        }
    }
    if let Some(what) = ttft {
        let options = DecoderOptions {
            gemm,
            pdl: pdls.first().copied().unwrap_or_default(),
            ..DecoderOptions::default()
        };
        let name = source.name();
        let model = (name.as_str(), &config, &host);
        bench_ttft(ctx, model, what, modes, options, runs, progress, emit_ttft)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiler_error_names_the_call_the_code_and_the_fix() {
        let e = LlamaError::Profiler {
            call: "cuProfilerStart",
            code: CudaCode(5),
        };
        assert_eq!(
            e.to_string(),
            "bench --profile: cuProfilerStart failed: CUDA_ERROR_PROFILER_DISABLED (5): profiler \
             disabled while using external profiling tool; fix: run it under a profiler started \
             with profiling off at the start (ncu --profile-from-start off), or leave --profile out"
        );
        assert!(!e.is_bad_input());
    }
}
