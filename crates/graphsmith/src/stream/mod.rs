//! Layer 5, streams: streams and their eager work, events and signals, and the capture journal (every
//! operation issued while a capture runs).

mod capture_end;
mod event;
mod journal;
mod library_call;
mod signal;
mod streams;

pub use event::*;
pub(crate) use journal::*;
pub use library_call::{read, read_write, write, LibraryAccess};
pub use signal::Signal;
pub(crate) use signal::{event_uses_alive, next_event_id, next_stream_id, EventUse};
pub use streams::*;
