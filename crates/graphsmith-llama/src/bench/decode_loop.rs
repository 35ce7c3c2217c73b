//! The `bench-loop` command: the device-side decode loop (one launch of up to K steps) against
//! K host launches of the step graph, turn by turn in one process, with and without
//! programmatic dependent launch. Both run the same kernels from the same state, so their
//! tokens are compared too. In a pass with programmatic launch, a third contender takes its
//! turns: K host launches of the plain step graph (no programmatic launch) of a second copy of
//! the model, so that "the loop with PDL against the plain step graph" is measured side by side
//! too rather than across passes (the second copy takes as much device memory again: weights,
//! KV cache, buffers and graphs). Run by run, the contenders take their turns in every order
//! (two orders with two contenders, six with three), so that each runs first, last and after
//! each other one equally often.

use graphsmith::Context;
use serde::Serialize;

use super::median;
use crate::error::{LlamaError, Result};
use crate::run::{bar, bench_prompt, build_model, check_request, load_host, Source};
use crate::step::{DecoderOptions, Mode, Model, Pdl};

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
    /// K launches of the plain step graph (a second copy of the model without programmatic
    /// launch), per step, ms; only in a pass with programmatic launch.
    pub plain_ms_per_step: Option<f64>,
    /// plain / loop: the loop with programmatic launch against the plain step graph.
    pub over_plain: Option<f64>,
    /// Whether one launch of the loop produced the tokens of K step-graph replays.
    pub same_tokens: bool,
    /// Whether K replays of the plain step graph produced those tokens too (where measured).
    pub plain_same_tokens: Option<bool>,
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
    let build = |pdl: Pdl| {
        let opts = DecoderOptions {
            pdl,
            ..DecoderOptions::default()
        };
        let (size, config) = ((capacity, max_ctx), config.clone());
        build_model(ctx, config, &host, size, Mode::Graphs, opts, b.progress)
    };
    // The plain contender: built only when some pass may use programmatic launch.
    let mut plain = if b.pdls.iter().any(|&p| p != Pdl::Off) {
        Some(build(Pdl::Off)?)
    } else {
        None
    };
    let (start, end) = (ctx.event("loop/start", true)?, ctx.event("loop/end", true)?);
    for &pdl in b.pdls {
        // A model per pass: the kernels are chosen when it is made.
        let mut model = build(pdl)?;
        // Only a pass that runs with programmatic launch has a plain step graph to set against.
        let mut plain = plain.as_mut().filter(|_| model.uses_pdl());
        for &batch in b.batches {
            for (t, &tok) in prompt.iter().enumerate() {
                model.step(&vec![(tok, t as i32); batch])?;
                if let Some(p) = plain.as_deref_mut() {
                    p.step(&vec![(tok, t as i32); batch])?;
                }
            }
            let last = (*prompt.last().unwrap_or(&0), prompt.len() as i32 - 1);
            for &k in b.ks {
                let contenders = if plain.is_some() { 3 } else { 2 };
                let pb = bar(
                    b.progress,
                    (contenders * (b.runs + b.warmup.max(1))) as u64,
                    &format!("loop b{batch} k{k} pdl {pdl:?}"),
                );
                // The same state before each contender: the last prompt token at its position.
                let host_tokens = step_tokens(&mut model, batch, k, last)?;
                let plain_same_tokens = match plain.as_deref_mut() {
                    Some(p) => Some(step_tokens(p, batch, k, last)? == host_tokens),
                    None => None,
                };
                model.step(&vec![last; batch])?;
                let run = model.decode_loop(batch, k, None)?;
                let same_tokens = run.tokens == host_tokens;
                // Turn by turn, run i in the i-th order of all the contenders' orders: 0 the
                // loop, 1 the host launches, 2 the plain step graph's host launches.
                let orders = turn_orders(contenders);
                let mut times = vec![Vec::new(); contenders];
                for i in 0..b.warmup.max(1) + b.runs {
                    for &contender in &orders[i % orders.len()] {
                        let ms = if contender == 2 {
                            let Some(p) = plain.as_deref_mut() else {
                                continue;
                            };
                            p.step(&vec![last; batch])?;
                            p.stream().record(&start)?;
                            p.run_free(batch, k)?;
                            p.stream().record(&end)?;
                            end.synchronize()?;
                            end.elapsed_ms_since(&start)? as f64 / k as f64
                        } else {
                            if contender == 0 {
                                // Its state upload waits for the stream: before the reset step,
                                // so every contender's launches queue behind that step alike.
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
                            end.elapsed_ms_since(&start)? as f64 / k as f64
                        };
                        if i >= b.warmup.max(1) {
                            times[contender].push(ms);
                        }
                        pb.inc(1);
                    }
                }
                pb.finish_and_clear();
                let mut medians = times.into_iter().map(median);
                let (lp, hs) = (
                    medians.next().unwrap_or(f64::NAN),
                    medians.next().unwrap_or(f64::NAN),
                );
                let pl = medians.next();
                let uses_pdl = model.uses_pdl();
                let body_nodes = crate::step::bucket_for(batch)
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
                    plain_ms_per_step: pl,
                    over_plain: pl.map(|pl| pl / lp),
                    same_tokens,
                    plain_same_tokens,
                    body_nodes,
                });
            }
        }
    }
    Ok(())
}

/// Every order of `n` contenders (n! of them; 0..n first), for runs to take in turn.
fn turn_orders(n: usize) -> Vec<Vec<usize>> {
    if n <= 1 {
        return vec![(0..n).collect()];
    }
    let mut out = Vec::new();
    for rest in turn_orders(n - 1) {
        for at in 0..n {
            let mut order = rest.clone();
            order.insert(at, n - 1);
            out.push(order);
        }
    }
    out.sort();
    out
}

/// The tokens of `k` host launches of `model`'s step graph from `last` (each row's, in order).
fn step_tokens(
    model: &mut Model,
    batch: usize,
    k: usize,
    last: (i32, i32),
) -> Result<Vec<Vec<i32>>> {
    let mut tokens = vec![Vec::new(); batch];
    model.step(&vec![last; batch])?;
    for _ in 0..k {
        model.run_free(batch, 1)?;
        for (r, t) in model.next_tokens(batch)?.into_iter().enumerate() {
            tokens[r].push(t);
        }
    }
    Ok(tokens)
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
    fn turns_take_every_order_once() {
        assert_eq!(turn_orders(2), vec![vec![0, 1], vec![1, 0]]);
        let three = turn_orders(3);
        assert_eq!(three.len(), 6);
        assert_eq!(three[0], vec![0, 1, 2]);
        // Each contender runs right after each other one equally often (twice).
        for a in 0..3 {
            for b in 0..3 {
                if a != b {
                    let follows = three
                        .iter()
                        .filter(|o| o.windows(2).any(|w| w == [a, b]))
                        .count();
                    assert_eq!(follows, 2, "{a} then {b}");
                }
            }
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
