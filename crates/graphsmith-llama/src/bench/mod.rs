//! The benchmarks: `bench` (decode steps per second, [`decode`], and time to first token,
//! [`prefill`]), `bench-loop` (the device-side decode loop against host launches of the step
//! graph, [`decode_loop`]) and `swap-bench` (the weight swap against re-capturing, [`swap`]).

pub(crate) mod decode;
pub(crate) mod decode_loop;
pub(crate) mod prefill;
pub(crate) mod swap;

pub use decode::{bench, copy_bandwidth, BenchLine};
pub use decode_loop::{bench_loop, LoopBench, LoopLine};
pub use prefill::{bench_ttft, TtftBench, TtftLine};
pub use swap::{bench_swap, SwapBench, SwapBenchReport};

/// The median of `v` (the upper one of an even count; 0 for none).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
