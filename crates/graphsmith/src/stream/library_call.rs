//! Library calls (cuBLAS, cuDNN, NCCL, ...) as journaled operations with declared accesses: a
//! call captured through [`Stream::library_call`] becomes a node with its label, the caller's
//! line and ranges, and the buffers it reads and writes, so the hazard checker covers library
//! nodes like graphsmith's own launches; the graph keeps those buffers alive.
//!
//! ```no_run
//! use graphsmith::{read, write, Context};
//! # fn main() -> graphsmith::Result<()> {
//! let ctx = Context::new(0)?;
//! let stream = ctx.stream("main")?;
//! let (x, mut y) = (ctx.alloc::<u16>("x", 64)?, ctx.alloc::<u16>("y", 64)?);
//! stream.library_call("gemm q/k/v", &[read(&x)], &[write(&mut y)], |raw| {
//!     // e.g. cublasSetStream(handle, raw) then cublasGemmEx(...), mapped to a CUresult
//!     let _ = raw;
//!     graphsmith::sys::CUresult::CUDA_SUCCESS
//! })?;
//! # Ok(()) }
//! ```

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model::{Access, AccessMode};

use super::Stream;
use crate::context::Keep;
use crate::context::{Kind, Op};
use crate::driver::{check, Failure};
use crate::error::{Result, SourceLine};
use crate::memory::{access, DeviceBuffer, Element};

/// A buffer a library call touches, and how: made with [`read`], [`write`] or [`read_write`].
pub struct LibraryAccess {
    access: Access,
    keep: Keep,
}

fn declare<T: Element>(buffer: &DeviceBuffer<T>, mode: AccessMode) -> LibraryAccess {
    LibraryAccess {
        access: access(buffer, mode),
        keep: buffer.alloc.clone() as Keep,
    }
}

/// The call reads all of `buffer`.
pub fn read<T: Element>(buffer: &DeviceBuffer<T>) -> LibraryAccess {
    declare(buffer, AccessMode::Read)
}

/// The call writes `buffer` (takes `&mut`, as a kernel argument that is written does).
pub fn write<T: Element>(buffer: &mut DeviceBuffer<T>) -> LibraryAccess {
    declare(buffer, AccessMode::Write)
}

/// The call reads and writes `buffer` (e.g. a GEMM with `beta = 1` accumulating into it).
pub fn read_write<T: Element>(buffer: &mut DeviceBuffer<T>) -> LibraryAccess {
    declare(buffer, AccessMode::ReadWrite)
}

impl LibraryAccess {
    /// The bytes `[offset, offset + len)` of the buffer only.
    pub fn range(mut self, offset: u64, len: u64) -> LibraryAccess {
        self.access.offset = offset;
        self.access.len = len;
        self
    }
}

impl Stream {
    /// Runs a library call on this stream's handle as one graphsmith operation that reads
    /// `reads` and writes `writes`. While the stream captures, the node the call adds (the last
    /// one, when a library adds several) gets `label`, the caller's line, the range stack and
    /// these accesses, and the graph keeps the buffers alive. `call` gets the raw stream and
    /// returns the outcome as a `CUresult` (map a library status to the CUDA code behind it, or
    /// to `CUDA_ERROR_UNKNOWN`); a failure names the stream, the label and the caller's line.
    ///
    /// The library must not allocate or synchronise inside `call` while capturing (give cuBLAS
    /// its workspace with `cublasSetWorkspace` first); if it does, the capture's diagnosis
    /// names this operation.
    #[track_caller]
    pub fn library_call(
        &self,
        label: &str,
        reads: &[LibraryAccess],
        writes: &[LibraryAccess],
        call: impl FnOnce(sys::CUstream) -> sys::CUresult,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Stream::library_call";
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let raw = self.raw();
        let mut journal = Op::other(op, label, at);
        journal.kind = Kind::Work;
        if self.ctx.captures_active() {
            let all = reads.iter().chain(writes);
            journal.accesses = all.clone().map(|a| a.access.clone()).collect();
            journal.keep = all.map(|a| Arc::clone(&a.keep)).collect();
        }
        self.issue(journal, fail, || check(call(raw), "library call"))
    }
}
