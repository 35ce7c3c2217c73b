//! # graphsmith-llama
//!
//! A Llama-architecture decoder on graphsmith: HF checkpoints (safetensors, memory-mapped) or
//! random weights, cuBLAS GEMMs captured inside graphs as journaled library calls, one
//! executable per batch bucket in a [`graphsmith::GraphCache`], positions read from device
//! buffers, and weights swapped into every executable in place.
//!
//! The crate's parts: `load/` (files to host and device), `kernels/` (the decoder's kernels,
//! their launch geometry, cuBLAS), `step/` (a decode step, the [`Model`] that runs it, the
//! device-side loop, the chunked prefill), `bench/` (the benchmarks), `run.rs` (the other commands). The API is
//! re-exported here; [`kernels`] is public for tests that launch the kernels one by one.
#![deny(unsafe_op_in_unsafe_fn)]

mod bench;
mod error;
pub mod kernels;
mod load;
mod run;
mod step;

pub use bench::{
    bench, bench_loop, bench_ttft, copy_bandwidth, BenchLine, LoopBench, LoopLine, TtftBench,
    TtftLine,
};
pub use bench::{bench_swap, SwapBench, SwapBenchReport};
pub use error::{LlamaError, Result};
pub use load::{
    inspect, load_reference, load_weights, parse_ids, random_weights, top2, Codec, Config,
    HostWeights, Inspection, LayerWeights, RefSequence, RopeScaling, TensorInfo, Tolerance,
    Understood,
};
pub use run::{
    bench_prompt, build_model, check, check_against, check_request, generate, generate_with,
    load_host, timed_prefill, tour_decode, tour_decode_with, CheckOutcome, CheckReport, Divergence,
    Generation, SequenceCheck, Source, TourDecode, Ttft,
};
pub use step::{
    bucket_for, buckets_for_capacity, chunk_inputs, plan_prefill, prefill_bucket, row_inputs,
    Chunk, ChunkInputs, DecodeLoop, DecoderOptions, Gemm, LoopRun, Mode, Model, Pdl, PrefillMode,
    PrefillRun, Span, StepPath, SwapReport, Tuning, BUCKETS, DEFAULT_PREFILL_CHUNK,
    PREFILL_BUCKETS,
};
pub use step::{search, BucketChoices, BucketFacts, Search, SearchReport};
