//! # graphsmith-llama
//!
//! A Llama-architecture decoder on graphsmith: HF checkpoints (safetensors, memory-mapped) or
//! random weights, cuBLAS GEMMs captured inside graphs as journaled library calls, one
//! executable per batch bucket in a [`graphsmith::GraphCache`], positions read from device
//! buffers, and weights swapped into every executable in place.
//!
//! The crate's parts: `load/` (files to host and device), `kernels/` (the decoder's kernels,
//! their launch geometry, cuBLAS), `step/` (a decode step, the [`Model`] that runs it, the
//! device-side loop), `bench/` (the benchmarks), `run.rs` (the other commands). The API is
//! re-exported here; [`kernels`] is public for tests that launch the kernels one by one.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench;
mod error;
pub mod kernels;
mod load;
mod run;
mod step;

pub use bench::{bench, bench_loop, copy_bandwidth, BenchLine, LoopBench, LoopLine};
pub use error::{LlamaError, Result};
pub use load::{
    inspect, load_reference, load_weights, parse_ids, random_weights, top2, Codec, Config,
    HostWeights, Inspection, LayerWeights, RefSequence, RopeScaling, TensorInfo, Tolerance,
    Understood,
};
pub use run::{
    bench_prompt, build_model, check, check_request, generate, load_host, tour_decode,
    tour_decode_with, CheckOutcome, CheckReport, Divergence, Generation, SequenceCheck, Source,
    TourDecode,
};
pub use step::{
    bucket_for, row_inputs, DecodeLoop, DecoderOptions, Gemm, LoopRun, Mode, Model, Pdl, StepPath,
    SwapReport, Tuning, BUCKETS,
};
pub use step::{search, BucketChoices, BucketFacts, Search, SearchReport};
