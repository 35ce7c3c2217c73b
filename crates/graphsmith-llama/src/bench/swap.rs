//! The `swap-bench` command: the weight swap's figures on one shape. Every bucket is captured,
//! then the weights are swapped back and forth between two sets ([`Model::swap_weights`]):
//! each swap's preparation (reading the graphs back and indexing them, paid by the first swap
//! of an executable), switch (the driver's per-node updates and graphsmith's own work, timed
//! apart) and verification (every bucket's graph against an eager step, bit for bit). Then
//! every bucket is re-captured as many times ([`Model::recapture_all`]): the alternative to
//! switching in place. The re-captures come after the swaps, not between them: a re-capture
//! gives every executable a new graph, whose pointer words the next swap would index again,
//! so taking turns would measure a first swap every time.

use graphsmith::Context;
use serde::Serialize;

use super::median;
use crate::error::{LlamaError, Result};
use crate::load::config::Config;
use crate::run::{build_model, load_host, same_shape, Source};
use crate::step::{DecoderOptions, Mode, Model, SwapReport, BUCKETS};

/// What to measure.
pub struct SwapBench<'a> {
    pub source: &'a Source,
    /// The weights swapped in (the same shape as `source`'s).
    pub swap_source: &'a Source,
    /// Swaps (and re-captures) measured.
    pub rounds: usize,
    pub options: DecoderOptions,
    pub progress: bool,
}

/// One shape's weight-swap figures.
#[derive(Clone, Debug, Serialize)]
pub struct SwapBenchReport {
    pub model: String,
    pub swap_model: String,
    pub layers: usize,
    pub hidden: usize,
    /// Executables held (one per bucket).
    pub executables: usize,
    /// Kernel nodes switched per swap.
    pub nodes_updated: usize,
    /// The first swap's preparation: reading every graph back and indexing its pointer words
    /// (once per executable; later swaps reuse it), ms.
    pub index_ms_first: f64,
    /// The switch (preparation excluded), median over the swaps after the first, ms.
    pub switch_ms: f64,
    /// Of the switch: the driver's per-node updates, median, ms.
    pub driver_ms: f64,
    /// Of the switch: graphsmith's own work, median, ms.
    pub host_ms: f64,
    /// Checking every switched bucket against an eager step, median, ms.
    pub verify_ms: f64,
    /// Re-capturing every bucket instead, median, ms.
    pub recapture_ms: f64,
    /// The driver's cost per node updated, µs.
    pub driver_us_per_node: f64,
    /// The switch's cost per node updated, µs.
    pub switch_us_per_node: f64,
    /// switch / driver (the goal: at most 2).
    pub switch_over_driver: f64,
    /// recapture / switch: how many times faster the switch is than re-capturing.
    pub recapture_over_switch: f64,
    /// Whether every swap was made in place and verified (`method` = `relocate`).
    pub all_relocated: bool,
    /// Every swap, in order (the first pays the preparation).
    pub swaps: Vec<SwapReport>,
    /// Every re-capture, in order, ms.
    pub recaptures_ms: Vec<f64>,
}

impl SwapBenchReport {
    /// The figures of `swaps` (the first one apart, the medians over the others; over the first
    /// alone when it is the only one) and `recaptures_ms`.
    pub fn summarize(
        (model, swap_model): (String, String),
        config: &Config,
        swaps: Vec<SwapReport>,
        recaptures_ms: Vec<f64>,
    ) -> SwapBenchReport {
        let steady = if swaps.len() > 1 {
            &swaps[1..]
        } else {
            &swaps[..]
        };
        let med = |f: fn(&SwapReport) -> f64| median(steady.iter().map(f).collect());
        let (switch_ms, driver_ms) = (med(|s| s.switch_ms), med(|s| s.driver_ms));
        let nodes = median(steady.iter().map(|s| s.nodes_updated as f64).collect());
        let per_node = |ms: f64| if nodes > 0.0 { ms * 1e3 / nodes } else { 0.0 };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let recapture_ms = median(recaptures_ms.clone());
        SwapBenchReport {
            model,
            swap_model,
            layers: config.num_hidden_layers,
            hidden: config.hidden_size,
            executables: swaps.first().map_or(0, |s| s.executables),
            nodes_updated: nodes as usize,
            index_ms_first: swaps.first().map_or(0.0, |s| s.index_ms),
            switch_ms,
            driver_ms,
            host_ms: med(|s| s.host_ms),
            verify_ms: med(|s| s.verify_ms),
            recapture_ms,
            driver_us_per_node: per_node(driver_ms),
            switch_us_per_node: per_node(switch_ms),
            switch_over_driver: ratio(switch_ms, driver_ms),
            recapture_over_switch: ratio(recapture_ms, switch_ms),
            all_relocated: swaps.iter().all(|s| s.method == "relocate"),
            swaps,
            recaptures_ms,
        }
    }
}

/// Runs the swap bench; `ctx` is called once the inputs have been read and checked.
pub fn bench_swap(
    ctx: impl FnOnce() -> Result<Context>,
    b: &SwapBench<'_>,
) -> Result<SwapBenchReport> {
    if b.rounds == 0 {
        return Err(LlamaError::Input("--rounds must be at least 1".into()));
    }
    let (config, host) = load_host(b.source, b.progress)?;
    let (swap_config, swap_host) = load_host(b.swap_source, b.progress)?;
    if !same_shape(&config, &swap_config) {
        return Err(LlamaError::Input(format!(
            "the swapped-in weights ({}) have another shape than the model ({})",
            b.swap_source.name(),
            b.source.name()
        )));
    }
    let ctx = &ctx()?;
    // The largest bucket: the model holds (and every swap switches) every bucket's executable.
    let capacity = BUCKETS.last().copied().unwrap_or(1);
    let size = (capacity, 64);
    let mut model: Model = build_model(
        ctx,
        config.clone(),
        &host,
        size,
        Mode::Graphs,
        b.options,
        b.progress,
    )?;
    model.capture_all()?;
    let sets = [&host, &swap_host];
    let mut swaps = Vec::with_capacity(b.rounds);
    for round in 0..b.rounds {
        swaps.push(model.swap_weights(sets[(round + 1) % 2])?);
    }
    let mut recaptures_ms = Vec::with_capacity(b.rounds);
    for _ in 0..b.rounds {
        recaptures_ms.push(model.recapture_all()?);
    }
    Ok(SwapBenchReport::summarize(
        (b.source.name(), b.swap_source.name()),
        &config,
        swaps,
        recaptures_ms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap(index_ms: f64, switch_ms: f64, driver_ms: f64, method: &str) -> SwapReport {
        SwapReport {
            upload_ms: 1.0,
            index_ms,
            switch_ms,
            driver_ms,
            host_ms: switch_ms - driver_ms,
            executables: 7,
            nodes_updated: 300,
            words: 900,
            verify_ms: 2.0,
            method: method.into(),
            fallback_ms: 0.0,
            freed_bytes: 0,
        }
    }

    #[test]
    fn the_first_swap_is_apart_and_the_others_give_the_medians() {
        let config = Config::named("tiny").expect("tiny");
        let swaps = vec![
            swap(8.0, 0.5, 0.1, "relocate"),
            swap(0.0, 0.12, 0.09, "relocate"),
            swap(0.0, 0.18, 0.09, "relocate"),
            swap(0.0, 0.15, 0.09, "relocate"),
        ];
        let names = ("a".to_string(), "b".to_string());
        let r = SwapBenchReport::summarize(names, &config, swaps, vec![7.0, 9.0, 8.0]);
        assert_eq!(r.index_ms_first, 8.0);
        assert_eq!(r.switch_ms, 0.15);
        assert_eq!(r.driver_ms, 0.09);
        assert_eq!(r.recapture_ms, 8.0);
        assert_eq!(r.nodes_updated, 300);
        assert!((r.driver_us_per_node - 0.3).abs() < 1e-9);
        assert!((r.switch_us_per_node - 0.5).abs() < 1e-9);
        assert!((r.switch_over_driver - 0.15 / 0.09).abs() < 1e-9);
        assert!(r.all_relocated);
        assert_eq!((r.executables, r.layers), (7, config.num_hidden_layers));
    }

    #[test]
    fn one_swap_is_its_own_median_and_a_fallback_is_reported() {
        let config = Config::named("tiny").expect("tiny");
        let names = ("a".to_string(), "b".to_string());
        let swaps = vec![swap(8.0, 0.5, 0.0, "recapture: bucket 1 differs")];
        let r = SwapBenchReport::summarize(names, &config, swaps, vec![]);
        assert_eq!(r.switch_ms, 0.5);
        assert!(!r.all_relocated);
        // No driver time and no re-capture: ratios of zero, never a division by zero.
        assert_eq!((r.switch_over_driver, r.recapture_over_switch), (0.0, 0.0));
    }

    #[test]
    fn configs_of_another_shape_are_told_apart() {
        let tiny = Config::named("tiny").expect("tiny");
        let small = Config::named("small").expect("small");
        assert!(same_shape(&tiny, &tiny.clone()));
        assert!(!same_shape(&tiny, &small));
    }
}
