//! The capture journal: while a graphsmith capture runs in a context, every operation issued
//! through graphsmith is recorded with its caller's line, thread, stream, range stack, the
//! memory it touches and what the driver answered; failures are attributed to the captures
//! they broke, and work that runs outside the capture is kept as a possible silent escape.
//!
//! Cost: while no capture runs in the context an operation pays one atomic load. During a
//! capture, an operation on a capturing stream confirms its capture with atomics (a lock only
//! after some capture ended), makes its driver call and takes one lock to append its entry. What
//! the graph must keep is cloned (and, with the journal off, locked for) only when this thread
//! did not keep it for this capture lately (`context/footprint.rs`). The entry is compact: the
//! caller's line, the thread and the range stack (shared, not copied), the stream, and the label
//! and accesses shared with the entry before when they are the same (a launch's arguments are
//! compared, not built: `Footprint`); strings for the model and the public journal are made when
//! those are asked for. The node the operation became is asked of the driver
//! (`cuStreamGetCaptureInfo`) only where it cannot be found later: the first work on a stream,
//! and work after anything else happened in the capture (a wait, a join, a record, work on
//! another stream); a run of work on one stream is matched to its nodes when the graph is first
//! read back (`graph/captured_nodes.rs`). Ending the capture reads nothing back: the model is
//! made on first use. With the journal off a launch pays the atomics
//! and the driver call: it builds nothing and allocates nothing.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::sys;

use smallvec::SmallVec;

use crate::context::{capture_code, failed, recently_kept, stream_status, writes};
use crate::context::{Entry, Keep, Kind, Op, Status};
use crate::driver::Failure;
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result};
use crate::stream::Stream;
use graphsmith_analysis::{Escape, Outcome};

mod record;

pub(crate) use record::new_record;

/// Bumped whenever a graphsmith capture ends anywhere in the process, so that a stream's
/// remembered capture is confirmed again (under the lock) only after some capture ended.
pub(crate) static CAPTURE_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Marks a remembered capture id whose capture journals.
const JOURNAL_BIT: u64 = 1 << 63;

/// Which capture a stream takes part in.
enum Membership {
    /// A graphsmith capture of this context, by id, and whether it journals.
    Ours(u64, bool),
    /// A capture graphsmith did not begin.
    Foreign,
    /// None (or an invalidated one graphsmith cannot name).
    None,
}

/// The node the last operation on a capturing stream became: after a kernel, copy or memset the
/// stream's dependency set is exactly that node.
fn captured_node(raw: sys::CUstream) -> Option<sys::CUgraphNode> {
    // SAFETY: the stream is live (held by the caller).
    unsafe { crate::driver::captured_node(raw) }
}

impl Stream {
    /// Issues one graphsmith operation with the journal. `call` makes the driver call(s).
    pub(crate) fn issue(
        &self,
        op: Op<'_>,
        fail: impl Fn(Failure) -> Error,
        call: impl FnOnce() -> Result<(), Failure>,
    ) -> Result<()> {
        // Whatever this operation is, the next programmatic launch does not follow a kernel
        // that opted in (`Stream::launch` sets the flag again after its own call).
        self.other_work();
        if !self.ctx.captures_active() {
            return call().map_err(fail);
        }
        match self.membership().map_err(&fail)? {
            Membership::Ours(id, journal) => {
                let result = call();
                self.journal_captured(id, journal, op, &result);
                result.map_err(fail)
            }
            Membership::Foreign => call().map_err(fail),
            Membership::None => {
                if op.kind == Kind::Work {
                    self.refuse_escape(&op)?;
                }
                let result = call();
                self.journal_uncaptured(op, &result);
                result.map_err(fail)
            }
        }
    }

    /// The graphsmith capture this stream takes part in, `(id, journal)`, when known without a
    /// lock or a driver call: the capture it was last seen in, while no capture has ended since
    /// (the fast path of `membership`). `None`: ask `membership`.
    pub(crate) fn confirmed_capture(&self) -> Option<(u64, bool)> {
        let epoch = CAPTURE_EPOCH.load(Ordering::Acquire);
        let hint = self.capture_hint.load(Ordering::Acquire);
        (hint != 0 && self.hint_epoch.load(Ordering::Acquire) == epoch)
            .then_some((hint & !JOURNAL_BIT, hint & JOURNAL_BIT != 0))
    }

    fn membership(&self) -> Result<Membership, Failure> {
        // Fast path: the capture this stream was last seen in, confirmed while no capture has
        // ended since (a stream leaves a capture only when the capture ends).
        if let Some((id, journal)) = self.confirmed_capture() {
            return Ok(Membership::Ours(id, journal));
        }
        // Some capture ended since: confirm the remembered one under the lock.
        let epoch = CAPTURE_EPOCH.load(Ordering::Acquire);
        let hint = self.capture_hint.load(Ordering::Acquire);
        if hint != 0 {
            let (id, journal) = (hint & !JOURNAL_BIT, hint & JOURNAL_BIT != 0);
            if self.ctx.capture_running(id).is_some() {
                self.hint_epoch.store(epoch, Ordering::Release);
                return Ok(Membership::Ours(id, journal));
            }
        }
        let status = match stream_status(self.raw()) {
            Ok(status) => status,
            // The legacy stream's status is itself refused while a blocking stream captures
            // (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); let the operation meet the driver's verdict.
            Err(f) if capture_code(f.code) => return Ok(Membership::None),
            Err(f) => return Err(f),
        };
        Ok(match status {
            Status::Active(id) => match self.ctx.capture_running(id) {
                Some(journal) => {
                    self.set_capture_hint(id, journal, epoch);
                    Membership::Ours(id, journal)
                }
                None => Membership::Foreign,
            },
            Status::Invalidated | Status::None => Membership::None,
        })
    }

    /// Remembers that this stream takes part in capture `id`, as of `epoch`.
    pub(crate) fn set_capture_hint(&self, id: u64, journal: bool, epoch: u64) {
        let bit = if journal { JOURNAL_BIT } else { 0 };
        self.capture_hint.store(id | bit, Ordering::Release);
        self.hint_epoch.store(epoch, Ordering::Release);
    }

    fn journal_captured(&self, id: u64, journal: bool, op: Op<'_>, result: &Result<(), Failure>) {
        let raw = self.raw() as usize;
        // What the graph must keep, less what this thread kept for this capture lately (no
        // clone, no lock for those: a chain of launches of one kernel on one buffer keeps its
        // two resources once).
        let mut keep: SmallVec<[Keep; 4]> = SmallVec::new();
        if result.is_ok() {
            op.each_keep(&mut |kid, make| {
                if !recently_kept(id, kid) {
                    keep.push(make());
                }
            });
        }
        if !journal {
            if !keep.is_empty() {
                if let Some(rec) = self.ctx.records().get_mut(&id) {
                    rec.add_keep(id, keep);
                }
            }
            return;
        }
        let outcome = match result {
            Ok(()) => Outcome::Captured,
            Err(f) => failed(f),
        };
        let capture_failure = matches!(result, Err(f) if capture_code(f.code));
        // The node this operation became is asked of the driver only when it cannot be found
        // later (`graph/captured_nodes.rs`): when the operation before it in the capture was
        // not one-node work on this stream.
        let mut anchor = None;
        let mut failure = None;
        {
            let mut records = self.ctx.records();
            let Some(rec) = records.get_mut(&id) else {
                return;
            };
            if !keep.is_empty() {
                rec.add_keep(id, keep);
            }
            let mut e = Entry::interned(&op, Some(raw), outcome, rec);
            if e.outcome == Outcome::Captured && e.kind == Kind::Work {
                let one_node = crate::context::one_node_kind(e.op).is_some();
                e.chained = one_node && rec.entries.last().is_some_and(|l| l.ends_chain(raw));
                if !e.chained {
                    anchor = Some(rec.entries.len());
                }
            }
            if capture_failure {
                failure = Some(e.cloned());
            }
            rec.note_stream(raw, &self.label, op.waits_for);
            rec.entries.push(e);
        }
        if let Some(index) = anchor {
            // Outside the lock: a driver call. Entries are only appended while the capture
            // runs, so the index still names this entry.
            let node = captured_node(self.raw()).map(|n| n as usize);
            if let Some(e) = self
                .ctx
                .records()
                .get_mut(&id)
                .and_then(|r| r.entries.get_mut(index))
            {
                e.node = node;
            }
        }
        if let Some(e) = failure {
            // A capture-code failure may break other captures too (a merge breaks both).
            self.ctx
                .attribute_failure(e, Some((raw, &self.label)), Some(id));
        }
    }

    fn journal_uncaptured(&self, op: Op<'_>, result: &Result<(), Failure>) {
        let me = Some((self.raw() as usize, self.label.as_str()));
        match (result, op.kind) {
            (Err(f), _) => {
                let e = Entry::new(&op, Some(self.raw() as usize), failed(f));
                self.ctx.attribute_failure(e, me, None);
            }
            (Ok(()), Kind::Work) => {
                let mut records = self.ctx.records();
                let mut entry = None;
                for rec in records.values_mut().filter(|r| r.options.journal) {
                    let e = entry.get_or_insert_with(|| {
                        Entry::new(&op, Some(self.raw() as usize), Outcome::Eager)
                    });
                    rec.note_stream(self.raw() as usize, &self.label, None);
                    rec.entries.push(e.cloned());
                }
            }
            (Ok(()), Kind::Wait { .. }) => {
                // A wait on a captured event (or a join of a capturing stream) forks this stream
                // into that capture.
                if let Ok(Membership::Ours(id, journal)) = self.membership() {
                    self.journal_captured(id, journal, op, result);
                }
            }
            _ => {}
        }
    }

    /// In strict mode, refuses work that would run outside a capture of this thread, or touch
    /// memory a capture of another thread has touched.
    fn refuse_escape(&self, op: &Op<'_>) -> Result<()> {
        let (thread, _) = crate::ranges::thread();
        let accesses = op.built_accesses();
        let mut records = self.ctx.records();
        let mut refused: Option<Escape> = None;
        for rec in records.values_mut() {
            if !rec.options.strict || !rec.options.journal {
                continue;
            }
            let touching = rec.touching(&accesses);
            let conflict = touching.iter().any(|&i| {
                let e = &rec.entries[i];
                e.accesses.iter().any(|a| {
                    accesses
                        .iter()
                        .any(|b| a.overlaps(b) && (writes(a) || writes(b)))
                })
            });
            if rec.thread != thread && !conflict {
                continue;
            }
            let reason = format!(
                "work on stream '{}', which is not part of capture '{}' (strict mode)",
                self.label, rec.label
            );
            let entry = Entry::new(op, Some(self.raw() as usize), Outcome::Refused { reason });
            rec.note_stream(self.raw() as usize, &self.label, None);
            let public = rec.public_of(&entry);
            let touching = touching.iter().map(|&i| rec.public(i)).collect();
            rec.entries.push(entry);
            refused.get_or_insert(Escape {
                capture: rec.label.clone(),
                op: public,
                touching,
            });
        }
        match refused {
            None => Ok(()),
            Some(escape) => Err(Error::new(
                ErrorKind::CaptureEscape(Box::new(escape)),
                ObjectRef::new(ObjectKind::Node, op.label),
                op.name,
                op.at,
            )),
        }
    }

    /// Refuses a host copy on a capturing stream (the graph would keep a pointer into a borrowed
    /// slice), journaling the refusal.
    pub(crate) fn refuse_host_copy(&self, op: Op<'_>, what: &str) -> Result<()> {
        let refuse = |reason: String| {
            Error::new(
                ErrorKind::NotAllowedDuringCapture { reason },
                self.object(),
                op.name,
                op.at,
            )
        };
        let reason = format!("{what} cannot be part of a graph");
        match self
            .membership()
            .map_err(|f| f.on(self.object(), op.name, op.at))?
        {
            Membership::None => Ok(()),
            Membership::Foreign => Err(refuse(reason)),
            Membership::Ours(id, _) => {
                let mut records = self.ctx.records();
                if let Some(rec) = records.get_mut(&id).filter(|r| r.options.journal) {
                    let outcome = Outcome::Refused {
                        reason: reason.clone(),
                    };
                    rec.note_stream(self.raw() as usize, &self.label, None);
                    rec.entries
                        .push(Entry::new(&op, Some(self.raw() as usize), outcome));
                }
                Err(refuse(reason))
            }
        }
    }
}
