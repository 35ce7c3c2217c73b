//! What an operation touches and what its graph must keep, read only when a capture needs it,
//! and the per-thread memory of what this thread kept last (so that a capture launching one
//! kernel on one buffer many times takes no lock and clones no `Arc` after the first launch).
//!
//! A launch hands its arguments over as they are ([`Footprint`]): with the journal off nothing
//! is built from them; with it on, an operation touching the same memory as the one before it in
//! the capture shares that entry's accesses instead of building its own.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use graphsmith_model::Access;

use crate::context::{CaptureRecord, Keep};

/// What an operation touches and must keep alive, produced on demand.
pub(crate) trait Footprint {
    /// Calls `f` with each resource a graph of the operation must keep: its identity (the
    /// address the `Arc` points to) and a way to keep it (an `Arc` clone, made only if needed).
    fn each_keep(&self, f: &mut dyn FnMut(usize, &dyn Fn() -> Keep));
    /// The memory touched, built (labels included).
    fn accesses(&self) -> Vec<Access>;
    /// Whether the memory touched is exactly `built`, without building anything.
    fn same_accesses(&self, built: &[Access]) -> bool;
}

/// The identity of a kept resource: the address its `Arc` points to.
pub(crate) fn keep_id(k: &Keep) -> usize {
    std::sync::Arc::as_ptr(k) as *const () as usize
}

/// How many resources a thread remembers having kept.
const KEPT_SLOTS: usize = 8;

#[derive(Clone, Copy)]
struct Kept {
    /// The driver's id of the capture they were kept in (unique for the process's lifetime);
    /// 0: none.
    capture: u64,
    ids: [usize; KEPT_SLOTS],
    next: usize,
}

thread_local! {
    static KEPT: Cell<Kept> = const {
        Cell::new(Kept { capture: 0, ids: [0; KEPT_SLOTS], next: 0 })
    };
}

/// Whether this thread kept resource `id` in capture `capture` lately. True only after
/// [`remember_kept`] for that pair, which callers do once the capture's record holds the
/// resource: the record keeps it until the capture ends, so its address cannot be reused while
/// the capture runs, and a capture id is never reused.
pub(crate) fn recently_kept(capture: u64, id: usize) -> bool {
    let kept = KEPT.get();
    capture != 0 && kept.capture == capture && kept.ids.contains(&id)
}

/// Remembers that capture `capture`'s record now holds resource `id`.
pub(crate) fn remember_kept(capture: u64, id: usize) {
    let mut kept = KEPT.get();
    if kept.capture != capture {
        kept = Kept {
            capture,
            ids: [0; KEPT_SLOTS],
            next: 0,
        };
    }
    if !kept.ids.contains(&id) {
        kept.ids[kept.next] = id;
        kept.next = (kept.next + 1) % KEPT_SLOTS;
    }
    KEPT.set(kept);
}

/// Hashes a capture id (a number the driver hands out in sequence) as itself, spread by one
/// multiplication: the running captures are looked up once per journaled operation.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The running captures of a context, by the driver's capture id.
pub(crate) type Records = HashMap<u64, CaptureRecord, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{CaptureMode, CaptureOptions, Entry, Kind, Op};
    use crate::error::SourceLine;
    use graphsmith_analysis::Outcome;
    use graphsmith_model::AccessMode;
    use std::sync::Arc;

    /// A launch's footprint stand-in: one buffer written, counting how often it is built.
    struct Fake {
        buffer: u64,
        keep: Keep,
        built: Cell<usize>,
    }

    impl Footprint for Fake {
        fn each_keep(&self, f: &mut dyn FnMut(usize, &dyn Fn() -> Keep)) {
            f(keep_id(&self.keep), &|| self.keep.clone());
        }
        fn accesses(&self) -> Vec<Access> {
            self.built.set(self.built.get() + 1);
            vec![Access {
                buffer: self.buffer,
                label: "x".into(),
                offset: 0,
                len: 1024,
                mode: AccessMode::Write,
            }]
        }
        fn same_accesses(&self, built: &[Access]) -> bool {
            built.len() == 1 && built[0].buffer == self.buffer && built[0].len == 1024
        }
    }

    fn record() -> CaptureRecord {
        let (thread, thread_label) = crate::ranges::thread();
        CaptureRecord {
            keep: Vec::new(),
            label: "c".into(),
            options: CaptureOptions::new(CaptureMode::ThreadLocal),
            origin: 1,
            began_at: SourceLine::caller(),
            thread,
            thread_label,
            entries: Vec::new(),
            streams: HashMap::new(),
            last_stream: 1,
            last_label: None,
            last_accesses: None,
        }
    }

    #[test]
    fn a_chain_of_launches_shares_one_label_and_one_access_list() {
        let mut rec = record();
        let keep: Keep = Arc::new(5u32);
        let x = Fake {
            buffer: 0x1000,
            keep: keep.clone(),
            built: Cell::new(0),
        };
        let y = Fake {
            buffer: 0x2000,
            keep,
            built: Cell::new(0),
        };
        let mut entries = Vec::new();
        for (label, fp) in [("add", &x), ("add", &x), ("add", &x), ("mul", &y)] {
            let mut op = Op::other("Stream::launch", label, SourceLine::caller());
            op.kind = Kind::Work;
            op.footprint = Some(fp);
            entries.push(Entry::interned(&op, Some(1), Outcome::Captured, &mut rec));
        }
        assert!(Arc::ptr_eq(&entries[0].label, &entries[2].label));
        assert!(Arc::ptr_eq(&entries[0].accesses, &entries[2].accesses));
        assert_eq!((x.built.get(), y.built.get()), (1, 1));
        assert_eq!(&*entries[3].label, "mul");
        assert_eq!(entries[3].accesses[0].buffer, 0x2000);
        // What the public journal and the model get is the same as built for each entry.
        assert_eq!(entries[1].accesses.to_vec(), x.accesses());
    }

    #[test]
    fn kept_resources_are_remembered_per_capture() {
        assert!(!recently_kept(7, 0x1000));
        remember_kept(7, 0x1000);
        remember_kept(7, 0x2000);
        assert!(recently_kept(7, 0x1000) && recently_kept(7, 0x2000));
        // Another capture starts afresh; id 0 (no id) never counts as kept.
        assert!(!recently_kept(8, 0x1000));
        remember_kept(8, 0x3000);
        assert!(!recently_kept(7, 0x1000));
        remember_kept(0, 0x4000);
        assert!(!recently_kept(0, 0x4000));
    }

    #[test]
    fn only_the_last_few_are_remembered() {
        for i in 1..=KEPT_SLOTS + 1 {
            remember_kept(9, i * 16);
        }
        assert!(!recently_kept(9, 16));
        assert!((2..=KEPT_SLOTS + 1).all(|i| recently_kept(9, i * 16)));
    }
}
