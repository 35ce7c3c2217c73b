//! One decode step and what runs it: the options a decoder is made with, the decoder's state
//! and step (its layers in `decoder/layers.rs`), the attention's L2 prefetch plan, the
//! device-side decode loop, the batch buckets with their launch choices, the search that
//! measures those choices at first load (`search/`), the prefill's chunking plan, and the
//! [`Model`] that owns a decoder with its graph cache.

pub(crate) mod buckets;
pub(crate) mod decoder;
pub(crate) mod device_loop;
pub(crate) mod model;
pub(crate) mod options;
pub(crate) mod prefetch;
pub(crate) mod prefill;
pub mod search;
pub(crate) mod tuning;

pub use buckets::{BucketChoices, BucketFacts};
pub use decoder::row_inputs;
pub use device_loop::{DecodeLoop, LoopRun};
pub use model::PrefillRun;
pub use model::{bucket_for, buckets_for_capacity, Mode, Model, StepPath, SwapReport, BUCKETS};
pub use options::{DecoderOptions, Gemm, Pdl, Search};
pub use prefill::{
    chunk_inputs, plan_prefill, prefill_bucket, Chunk, ChunkInputs, PrefillMode, Span,
    DEFAULT_PREFILL_CHUNK, PREFILL_BUCKETS,
};
pub use search::SearchReport;
pub use tuning::Tuning;
