//! Named ranges: a per-thread stack of names that every node made inside records as provenance.
//!
//! ```ignore
//! let _layer = graphsmith::range("layer-3");
//! let _attn = graphsmith::range("attention");
//! // nodes made here carry ["layer-3", "attention"]
//! ```

use std::cell::RefCell;

use graphsmith_model::Provenance;

use crate::error::SourceLine;

thread_local! {
    static STACK: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Closes its range when dropped. Not `Send`: a range opens and closes on one thread.
#[must_use = "the range closes when this guard drops"]
pub struct RangeGuard {
    depth: usize,
    _not_send: std::marker::PhantomData<*const ()>,
}

/// Opens a named range on this thread until the returned guard drops.
pub fn range(name: impl Into<String>) -> RangeGuard {
    let depth = STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.push(name.into());
        s.len()
    });
    RangeGuard {
        depth,
        _not_send: std::marker::PhantomData,
    }
}

impl Drop for RangeGuard {
    fn drop(&mut self) {
        // Truncate rather than pop, so guards dropped out of order still leave a consistent stack.
        STACK.with(|s| s.borrow_mut().truncate(self.depth - 1));
    }
}

/// The names of the ranges open on this thread, outermost first.
pub fn current_ranges() -> Vec<String> {
    STACK.with(|s| s.borrow().clone())
}

/// Provenance for a node made at `at` on this thread.
pub(crate) fn provenance(at: SourceLine) -> Provenance {
    let thread = std::thread::current();
    Provenance {
        file: at.file.to_string(),
        line: at.line,
        column: at.column,
        ranges: current_ranges(),
        thread: Some(
            thread
                .name()
                .map(str::to_string)
                .unwrap_or_else(|| format!("{:?}", thread.id())),
        ),
    }
}
