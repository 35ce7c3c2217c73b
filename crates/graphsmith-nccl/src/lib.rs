//! NCCL collectives inside graphsmith's captured graphs, one process per GPU.
//!
//! - [`bootstrap`]: how the ranks find each other over TCP and share NCCL's unique id (the path
//!   a run across hosts takes), with a deadline on every wait;
//! - `library.rs` / `ffi.rs`: libnccl found where NVIDIA's Python wheels and the CUDA toolkit
//!   install it, and loaded at run time (nothing links against it);
//! - [`Communicator`] (`comm.rs`): one rank's communicator, shared with every graph and
//!   executable captured with it, so it is destroyed after all of them;
//! - `issue.rs`: all-reduce, all-gather and reduce-scatter as journaled library calls that
//!   declare what they read and write;
//! - [`run`]: what the `graphsmith-nccl` binary's commands do (the tests run them too);
//! - [`collective`]: collectives as data, their labels, and the cross-rank check of a capture
//!   plan that [`Communicator::capture`] (`capture.rs`) runs before capturing.
//!
//! ```no_run
//! use std::time::Duration;
//! use graphsmith::Context;
//! use graphsmith_nccl::bootstrap::{join, Root};
//! use graphsmith_nccl::{unique_id, Collective, Communicator, ReduceOp};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (rank, world, addr, timeout) = (0, 2, "10.0.0.2:29500", Duration::from_secs(60));
//! let ctx = Context::new(rank as usize)?;
//! let mut session = if rank == 0 {
//!     Root::bind(addr)?.accept(world, unique_id()?, timeout)? // rank 0 makes the id
//! } else {
//!     join(addr, rank, world, timeout)?
//! };
//! let comm = Communicator::new(&ctx, &session)?;
//! let stream = ctx.stream("main")?;
//! comm.warm_up(&stream)?;
//! let (x, mut y) = (ctx.alloc::<f32>("x", 4096)?, ctx.alloc::<f32>("y", 4096)?);
//! let plan = [Collective::all_reduce::<f32>(ReduceOp::Sum, 4096)];
//! let (graph, ()) = comm.capture(&mut session, &stream, "step", &plan, timeout, |s, c| {
//!     c.all_reduce(s, &x, &mut y, ReduceOp::Sum)
//! })?;
//! let mut exec = graph.instantiate()?; // holds the communicator
//! exec.launch(&stream)?;
//! # Ok(()) }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

pub mod bootstrap;
mod capture;
pub mod collective;
mod comm;
mod error;
mod ffi;
mod issue;
pub mod library;
pub mod run;

pub use capture::{CommExec, CommGraph};
pub use collective::{Collective, DataType, NcclElement, ReduceOp};
pub use comm::{unique_id, Communicator, DEFAULT_AGREE_TIMEOUT};
pub use error::{LibraryMissing, NcclError, Result};
