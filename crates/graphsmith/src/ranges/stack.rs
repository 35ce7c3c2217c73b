//! Named ranges: a per-thread stack of names that every node made inside records as provenance,
//! and that the capture journal records with every operation. Each range is also an NVTX range
//! (`nvtxRangePushA`/`nvtxRangePop`), so Nsight shows the same names (see `nvtx.rs`).
//!
//! ```ignore
//! let _layer = graphsmith::range("layer-3");
//! let _attn = graphsmith::range("attention");
//! // nodes made here carry ["layer-3", "attention"]
//! ```
//!
//! Cost: opening and closing a range is a push and a truncate on a thread-local vector, plus
//! one NVTX call each way when a tool is attached. The journal takes a shared snapshot of the
//! stack (`Arc`), rebuilt only after the stack changed, so journaling many operations inside
//! one range copies no names.

use std::cell::RefCell;
use std::sync::Arc;
use std::thread::ThreadId;

use graphsmith_model::Provenance;

use crate::error::SourceLine;

struct Stack {
    names: Vec<String>,
    /// The names as last shared with the journal; `None` after a push or pop.
    snapshot: Option<Arc<[String]>>,
}

thread_local! {
    static STACK: RefCell<Stack> = const {
        RefCell::new(Stack { names: Vec::new(), snapshot: None })
    };
    static THREAD: (ThreadId, Arc<str>) = {
        let t = std::thread::current();
        let label = t
            .name()
            .map(str::to_string)
            .unwrap_or_else(|| format!("{:?}", t.id()));
        (t.id(), label.into())
    };
}

/// Closes its range when dropped. Not `Send`: a range opens and closes on one thread.
#[must_use = "the range closes when this guard drops"]
pub struct RangeGuard {
    depth: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a named range on this thread until the returned guard drops. The name is also pushed
/// as an NVTX range when an NVTX tool (Nsight Systems, Nsight Compute) is attached.
pub fn range(name: impl Into<String>) -> RangeGuard {
    let name = name.into();
    super::nvtx::push(&name);
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.names.push(name);
        s.snapshot = None;
        s.names.len()
    });
    RangeGuard {
        depth,
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        // Truncate rather than pop, so guards dropped out of order still leave a consistent stack;
        // NVTX gets one pop per name removed.
        let removed = STACK.with(|s| {
            let mut s = s.borrow_mut();
            let keep = self.depth - 1;
            let removed = s.names.len().saturating_sub(keep);
            if removed > 0 {
                s.names.truncate(keep);
                s.snapshot = None;
            }
            removed
        });
        for _ in 0..removed {
            super::nvtx::pop();
        }
    }
}

/// The names of the ranges open on this thread, outermost first.
pub fn current_ranges() -> Vec<String> {
    STACK.with(|s| s.borrow().names.clone())
}

/// The open ranges as a shared snapshot (cheap to take repeatedly while the stack is unchanged).
pub(crate) fn snapshot() -> Arc<[String]> {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        if let Some(snap) = &s.snapshot {
            return snap.clone();
        }
        let snap: Arc<[String]> = s.names.clone().into();
        s.snapshot = Some(snap.clone());
        snap
    })
}

/// This thread's id and label (its name, or its id when unnamed), computed once per thread.
pub(crate) fn thread() -> (ThreadId, Arc<str>) {
    THREAD.with(|t| (t.0, t.1.clone()))
}

/// Provenance for a node made at `at` on this thread.
pub(crate) fn provenance(at: SourceLine) -> Provenance {
    Provenance {
        file: at.file.to_string(),
        line: at.line,
        column: at.column,
        ranges: current_ranges(),
        thread: Some(thread().1.to_string()),
    }
}
