//! Layer 8, the cache: one executable per shape bucket, with warm-up, shared scratch, a memory
//! budget and eager fallback.

mod graph_cache;

pub use graph_cache::*;
