//! The `bench-loop` command: the device-side decode loop (one launch of up to K steps) against
//! K host launches of the step graph, turn by turn in one process, with and without
//! programmatic dependent launch. Both run the same kernels from the same state, so their
//! tokens are compared too.

use serde::Serialize;

use crate::error::{LlamaError, Result};
use crate::model::Mode;
use crate::run::{bar, bench_prompt, build_model, check_request, load_host, median, Source};
use crate::Pdl;
use graphsmith::Context;

/// One (batch, K, PDL) point.
#[derive(Clone, Debug, Serialize)]
pub struct LoopLine {
    /// `graphsmith-loop` (`-nopdl` when measured without programmatic launch).
    #[serde(rename = "impl")]
    pub implementation: String,
    pub config: String,
    pub batch: usize,
    /// Steps per launch of the loop; the host side launches the step graph this many times.
    pub k: usize,
    pub pdl: bool,
    /// One launch of the loop, per step (median of the runs), ms.
    pub loop_ms_per_step: f64,
    /// K launches of the step graph, per step, ms.
    pub host_ms_per_step: f64,
    /// host / loop: above 1, the loop is faster.
    pub speedup: f64,
    pub loop_steps_per_s: f64,
    pub host_steps_per_s: f64,
    /// Whether one launch of the loop produced the tokens of K step-graph replays.
    pub same_tokens: bool,
    /// Nodes in the loop's body.
    pub body_nodes: usize,
}

/// What to measure.
pub struct LoopBench<'a> {
    pub source: &'a Source,
    pub batches: &'a [usize],
    pub ks: &'a [usize],
    pub pdls: &'a [Pdl],
    pub warmup: usize,
    pub runs: usize,
    pub progress: bool,
}

/// Runs the loop bench; `ctx` is called once the inputs have been checked.
pub fn bench_loop(
    ctx: impl FnOnce() -> Result<Context>,
    b: &LoopBench<'_>,
    mut emit: impl FnMut(&LoopLine),
) -> Result<()> {
    let (config, host) = load_host(b.source, b.progress)?;
    let kmax = b.ks.iter().copied().max().unwrap_or(0);
    if kmax == 0 || b.ks.contains(&0) {
        return Err(LlamaError::Input("--k: each K must be at least 1".into()));
    }
    if b.runs == 0 {
        return Err(LlamaError::Input("--runs must be at least 1".into()));
    }
    for &batch in b.batches {
        check_request(&config, 32, kmax, batch)?;
    }
    let ctx = &ctx()?;
    let prompt = bench_prompt(32, config.vocab_size);
    let max_ctx = prompt.len() + kmax + 1;
    let capacity = b.batches.iter().copied().max().unwrap_or(1);
    let mut model = build_model(
        ctx,
        config.clone(),
        &host,
        capacity,
        max_ctx,
        Mode::Graphs,
        b.progress,
    )?;
    let (start, end) = (ctx.event("loop/start", true)?, ctx.event("loop/end", true)?);
    for &pdl in b.pdls {
        model.set_pdl(pdl)?;
        for &batch in b.batches {
            for (t, &tok) in prompt.iter().enumerate() {
                model.step(&vec![(tok, t as i32); batch])?;
            }
            let last = (*prompt.last().unwrap_or(&0), prompt.len() as i32 - 1);
            for &k in b.ks {
                let pb = bar(
                    b.progress,
                    (2 * (b.runs + b.warmup.max(1))) as u64,
                    &format!("loop b{batch} k{k} pdl {pdl:?}"),
                );
                // The same state before each contender: the last prompt token at its position.
                let mut host_tokens = vec![Vec::new(); batch];
                model.step(&vec![last; batch])?;
                for _ in 0..k {
                    model.run_free(batch, 1)?;
                    for (r, t) in model.next_tokens(batch)?.into_iter().enumerate() {
                        host_tokens[r].push(t);
                    }
                }
                model.step(&vec![last; batch])?;
                let run = model.decode_loop(batch, k, None)?;
                let same_tokens = run.tokens == host_tokens;
                // Turn by turn: the loop first on even runs, the host launches first on odd.
                let (mut on_loop, mut on_host) = (Vec::new(), Vec::new());
                for i in 0..b.warmup.max(1) + b.runs {
                    for contender in [i % 2, 1 - i % 2] {
                        if contender == 0 {
                            // Its state upload waits for the stream: before the reset step, so
                            // both contenders' launches queue behind that step alike.
                            model.prepare_loop(batch, k, None)?;
                        }
                        model.step(&vec![last; batch])?;
                        model.stream().record(&start)?;
                        if contender == 0 {
                            model.launch_prepared_loop(batch)?;
                        } else {
                            model.run_free(batch, k)?;
                        }
                        model.stream().record(&end)?;
                        end.synchronize()?;
                        let ms = end.elapsed_ms_since(&start)? as f64 / k as f64;
                        if i >= b.warmup.max(1) {
                            if contender == 0 {
                                on_loop.push(ms);
                            } else {
                                on_host.push(ms);
                            }
                        }
                        pb.inc(1);
                    }
                }
                pb.finish_and_clear();
                let (lp, hs) = (median(on_loop), median(on_host));
                let uses_pdl = model.decoder().uses_pdl();
                let body_nodes = crate::model::bucket_for(batch)
                    .and_then(|bk| model.held_loop(bk))
                    .map_or(0, |l| l.body_nodes());
                emit(&LoopLine {
                    implementation: format!(
                        "graphsmith-loop{}",
                        if uses_pdl { "" } else { "-nopdl" }
                    ),
                    config: b.source.name(),
                    batch,
                    k,
                    pdl: uses_pdl,
                    loop_ms_per_step: lp,
                    host_ms_per_step: hs,
                    speedup: hs / lp,
                    loop_steps_per_s: 1e3 / lp,
                    host_steps_per_s: 1e3 / hs,
                    same_tokens,
                    body_nodes,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ks: &[usize], batches: &[usize], runs: usize) -> String {
        let source = Source::Random {
            config: "tiny".into(),
            seed: 1,
        };
        let b = LoopBench {
            source: &source,
            batches,
            ks,
            pdls: &[Pdl::Off],
            warmup: 1,
            runs,
            progress: false,
        };
        let no_device =
            || -> Result<Context> { panic!("bad input must be refused before the device") };
        match bench_loop(no_device, &b, |_| {}) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("accepted ks {ks:?} batches {batches:?} runs {runs}"),
        }
    }

    #[test]
    fn bad_requests_are_refused_before_the_device_with_the_flag_named() {
        assert!(refused(&[0, 16], &[1], 3).contains("--k"));
        assert!(refused(&[], &[1], 3).contains("--k"));
        assert!(refused(&[16], &[1], 0).contains("--runs"));
        assert!(refused(&[16], &[0], 3).contains("zero"));
        assert!(refused(&[4096], &[1], 3).contains("context"));
    }
}
