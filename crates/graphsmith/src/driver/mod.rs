//! Layer 0, the driver: the only modules that call the CUDA driver (`sys::cu*`). Each call is a
//! thin wrapper that returns `Result<_, Failure>`; a `Failure` (the call and its code) becomes
//! an [`crate::Error`] naming the object, the operation and the caller's line one layer up
//! ([`Failure::on`]). Wrappers over handles the caller must keep alive are `unsafe fn`s whose
//! `# Safety` section names the invariant.

mod conditional;
mod context;
mod feature_trials;
mod graph;
mod graph_read;
mod memory;
mod module;
mod params;
mod stream;

pub(crate) use conditional::*;
pub(crate) use context::*;
pub(crate) use feature_trials::*;
pub(crate) use graph::*;
pub(crate) use graph_read::*;
pub(crate) use memory::*;
pub(crate) use module::*;
pub(crate) use params::*;
pub(crate) use stream::*;

use cudarc::driver::sys;

use crate::error::{CudaCode, Error, ErrorKind, ObjectRef, SourceLine};

/// A failed driver call before it is attached to an object.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Failure {
    pub call: &'static str,
    pub code: CudaCode,
}

impl Failure {
    /// Attaches the object, operation and caller's line.
    pub fn on(self, object: ObjectRef, op: &'static str, at: SourceLine) -> Error {
        let kind = if self.code.is_context_gone() {
            ErrorKind::ContextGone {
                call: self.call,
                code: self.code,
            }
        } else {
            ErrorKind::Cuda {
                call: self.call,
                code: self.code,
            }
        };
        Error::new(kind, object, op, at)
    }
}

/// Turns a raw driver result into `Result<(), Failure>`.
pub(crate) fn check(rc: sys::CUresult, call: &'static str) -> Result<(), Failure> {
    if rc == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Failure {
            call,
            code: CudaCode(rc as u32),
        })
    }
}

/// A driver result as graphsmith's code.
pub(crate) fn code(rc: sys::CUresult) -> CudaCode {
    CudaCode(rc as u32)
}
