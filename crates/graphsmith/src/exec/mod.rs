//! Layer 7, executables: instantiation, launch, per-node and whole-graph updates, and the
//! per-node update state kept beside a (possibly shared) template.

mod executable;
mod node_updates;
mod relocate;
mod update;

pub use executable::*;
pub(crate) use node_updates::*;
pub use relocate::{Relocated, Relocation};
pub use update::*;
