//! Layer 5, streams: streams and their eager work, events, and the capture journal (every
//! operation issued while a capture runs).

mod capture_end;
mod event;
mod journal;
mod library_call;
mod streams;

pub use event::*;
pub(crate) use journal::*;
pub use library_call::{read, read_write, write, LibraryAccess};
pub use streams::*;
