//! The records of `--freed` (crate::freed): where an allocation, a free or a launch was made,
//! and a launch of an executable on memory freed since its instantiation.

use serde::{Deserialize, Serialize};

use super::{user_frame, Frame, PyFrame, PyMissing, Thread};

/// Where an allocation, a free or a launch was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The call, as `cudaFree (cuMemFree_v2)`.
    pub call: String,
    pub thread: Thread,
    /// The calling thread's Python stack, innermost first, when it came from Python.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python: Vec<PyFrame>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_missing: Option<PyMissing>,
    /// Innermost frame first, from the caller of the CUDA API on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backtrace: Vec<Frame>,
}

impl Site {
    /// `cudaFree (cuMemFree_v2) at model.py:12 in load`, or the first native frame with a
    /// file and line, or the call alone.
    pub fn line(&self) -> String {
        if let Some(f) = user_frame(&self.python) {
            return format!("{} at {}:{} in {}", self.call, f.file, f.line, f.function);
        }
        match self.backtrace.iter().find(|f| f.file.is_some()) {
            Some(f) => format!(
                "{} at {}:{} in {}",
                self.call,
                f.file.as_deref().unwrap_or("?"),
                f.line.unwrap_or(0),
                if f.symbol.is_empty() { "??" } else { &f.symbol }
            ),
            None => match self.backtrace.first() {
                Some(f) if !f.symbol.is_empty() => format!("{} in {}", self.call, f.symbol),
                _ => self.call.clone(),
            },
        }
    }
}

/// A launch of an executable one of whose nodes touches memory freed since its instantiation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreedLaunch {
    pub pid: u32,
    pub seq: u64,
    pub exec: u64,
    /// The graph it was instantiated from.
    pub graph: u64,
    /// The node (`cuGraphGetNodes` order of the instantiated graph), its kind and label.
    pub node: u32,
    pub node_kind: String,
    pub node_label: String,
    /// The freed bytes the node touches: `[start, start + len)`.
    pub start: u64,
    pub len: u64,
    /// The whole range that was freed.
    pub freed_base: u64,
    pub freed_bytes: u64,
    /// Where it was allocated; `None` when the tracer did not see the allocation.
    pub allocated: Option<Site>,
    /// Where it was freed.
    pub freed: Site,
    /// The launch, which had not run yet when this was recorded.
    pub launch: Site,
}
