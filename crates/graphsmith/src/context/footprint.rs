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
    /// The memory touched (after the kernel's programmatic wait, for a launch that has one),
    /// built (labels included).
    fn accesses(&self) -> Vec<Access>;
    /// The memory a launch touches before its kernel's programmatic wait
    /// ([`crate::module::BeforeWait`]).
    fn accesses_before_wait(&self) -> Vec<Access> {
        Vec::new()
    }
    /// Whether the launch's kernel lets its dependents start only after its wait
    /// ([`crate::Kernel::triggers_after_wait`]).
    fn triggers_after_wait(&self) -> bool {
        false
    }
    /// Whether the memory touched is exactly `built`, without building anything.
    fn same_accesses(&self, built: &[Access]) -> bool;
}

/// The identity of a kept resource: the address its `Arc` points to (the same for the resource's
/// own `Arc` and for its [`Keep`]).
pub(crate) fn keep_id<T: ?Sized>(k: &std::sync::Arc<T>) -> usize {
    std::sync::Arc::as_ptr(k) as *const () as usize
}

/// How many resources a thread remembers having kept: with the capture id and the next slot,
/// one cache line.
const KEPT_SLOTS: usize = 6;

/// The resources this thread kept lately, read and written in place (no copy of the whole
/// memory per question: a captured launch asks once per resource).
#[repr(align(64))]
struct Kept {
    /// The driver's id of the capture they were kept in (unique for the process's lifetime);
    /// 0: none.
    capture: Cell<u64>,
    ids: [Cell<usize>; KEPT_SLOTS],
    next: Cell<usize>,
}

impl Kept {
    /// Whether these are capture `capture`'s (never for id 0, no capture).
    fn of(&self, capture: u64) -> bool {
        capture != 0 && self.capture.get() == capture
    }
    fn holds(&self, id: usize) -> bool {
        self.ids.iter().any(|k| k.get() == id)
    }
}

thread_local! {
    static KEPT: Kept = const {
        Kept {
            capture: Cell::new(0),
            ids: [const { Cell::new(0) }; KEPT_SLOTS],
            next: Cell::new(0),
        }
    };
}

/// Whether this thread kept resource `id` in capture `capture` lately. True only after
/// [`remember_kept`] for that pair, which callers do once the capture's record holds the
/// resource: the record keeps it until the capture ends, so its address cannot be reused while
/// the capture runs, and a capture id is never reused.
pub(crate) fn recently_kept(capture: u64, id: usize) -> bool {
    KEPT.with(|k| k.of(capture) && k.holds(id))
}

/// Whether this thread kept every resource of `ids` in capture `capture` lately (each as
/// [`recently_kept`] says), asked in one look: what lets a captured launch with the journal off
/// go straight to the driver.
pub(crate) fn all_recently_kept(capture: u64, ids: impl IntoIterator<Item = usize>) -> bool {
    KEPT.with(|k| k.of(capture) && ids.into_iter().all(|id| k.holds(id)))
}

/// Remembers that capture `capture`'s record now holds resource `id`.
pub(crate) fn remember_kept(capture: u64, id: usize) {
    KEPT.with(|k| {
        if k.capture.get() != capture {
            k.capture.set(capture);
            k.ids.iter().for_each(|slot| slot.set(0));
            k.next.set(0);
        }
        if !k.ids.iter().any(|slot| slot.get() == id) {
            let next = k.next.get();
            k.ids[next].set(id);
            k.next.set((next + 1) % KEPT_SLOTS);
        }
    })
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
    fn all_kept_asks_for_every_resource_at_once() {
        remember_kept(11, 0x1000);
        remember_kept(11, 0x2000);
        assert!(all_recently_kept(11, [0x1000, 0x2000]));
        assert!(all_recently_kept(11, [0x2000]));
        // One resource not kept, or another capture, or no capture id: not all kept.
        assert!(!all_recently_kept(11, [0x1000, 0x3000]));
        assert!(!all_recently_kept(12, [0x1000]));
        assert!(!all_recently_kept(0, [0x1000]));
        remember_kept(0, 0x5000);
        assert!(!all_recently_kept(0, [0x5000]));
    }

    /// A resource's own `Arc` and its `Keep` have one identity: what a launch compares without
    /// cloning is what the record remembered after keeping it, and a graph's set of kept
    /// resources is found among an executable's retired ones.
    #[test]
    fn a_resource_and_its_keep_have_one_identity() {
        let set = Arc::new(vec![Arc::new(1u8) as Keep]);
        let module = Arc::new(3u64);
        assert_eq!(keep_id(&set), keep_id(&(set.clone() as Keep)));
        assert_eq!(keep_id(&module), keep_id(&(module.clone() as Keep)));
        assert_ne!(keep_id(&set), keep_id(&module));
    }

    #[test]
    fn the_memory_of_kept_resources_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Kept>(), 64);
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
