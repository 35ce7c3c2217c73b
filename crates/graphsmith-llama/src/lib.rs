//! # graphsmith-llama
//!
//! A Llama-architecture decoder on graphsmith: HF checkpoints (safetensors, memory-mapped) or
//! random weights, cuBLAS GEMMs captured inside graphs as journaled library calls, one
//! executable per batch bucket in a [`graphsmith::GraphCache`], positions read from device
//! buffers, and weights swapped into every executable in place.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod checkpoint;
pub mod config;
pub mod cublas;
pub mod decoder;
pub mod device_loop;
pub mod error;
pub mod kernels;
pub mod loop_bench;
pub mod model;
pub mod prefetch;
pub mod reference;
pub mod run;
pub mod tokenizer;
pub mod tolerance;
pub mod tuning;
pub mod weights;

pub use config::{Config, RopeScaling};
pub use decoder::{DecoderOptions, Gemm, Pdl};
pub use device_loop::{DecodeLoop, LoopRun};
pub use error::{LlamaError, Result};
pub use model::{Mode, Model};
pub use run::{tour_decode, TourDecode};
pub use tolerance::Tolerance;
pub use tuning::Tuning;
