//! Layer 7, executables: instantiation, launch, per-node and whole-graph updates, and the
//! per-node update state kept beside a (possibly shared) template, and the ordering checks and
//! launch log at launch (`ordering.rs`).

mod executable;
mod node_updates;
mod ordering;
mod relocate;
mod relocation_index;
mod update;

pub use executable::*;
pub(crate) use node_updates::*;
pub(crate) use ordering::next_exec_id;
pub use relocate::{Relocated, Relocation};
pub(crate) use relocation_index::RelocationIndex;
pub use update::*;
