//! The capture journal: while a graphsmith capture runs in a context, every operation issued
//! through graphsmith is recorded with its caller's line, thread, stream, range stack, the
//! memory it touches and what the driver answered; failures are attributed to the captures
//! they broke, and work that runs outside the capture is kept as a possible silent escape.
//!
//! Cost: while no capture runs in the context an operation pays one atomic load. During a
//! capture, an operation on a capturing stream pays a mutex lock to confirm its capture, the
//! driver call, one `cuStreamGetCaptureInfo` (to learn the node it became) and one more lock to
//! append the entry; the range stack is shared, not copied.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use cudarc::driver::sys;
use graphsmith_model::{Access, AccessMode};

use crate::context::Context;
use crate::error::SourceLine;
use crate::error::{check, CudaCode, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result};
use crate::graph::{CaptureRecord, Keep};
use crate::stream::Stream;
use graphsmith_analysis::{Escape, Outcome};

mod record;

pub(crate) use record::new_record;

static SEQ: AtomicU64 = AtomicU64::new(1);

/// Bumped whenever a graphsmith capture ends anywhere in the process, so that a stream's
/// remembered capture is confirmed again (under the lock) only after some capture ended.
pub(crate) static CAPTURE_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Marks a remembered capture id whose capture journals.
const JOURNAL_BIT: u64 = 1 << 63;

/// What kind of operation is journaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Work that runs on the GPU (kernel, copy, memset): a node when captured, an escape when not.
    Work,
    /// `cuEventRecord` of this event.
    Record { event: usize },
    /// A wait on an event, or on another stream (join).
    Wait { event: Option<usize> },
    /// Anything else (synchronisation, interop).
    Other,
}

/// One operation about to be issued.
pub(crate) struct Op<'a> {
    pub name: &'static str,
    pub label: &'a str,
    pub at: SourceLine,
    pub kind: Kind,
    pub accesses: Vec<Access>,
    pub keep: Vec<Keep>,
    /// For joins: the stream waited for (handle, label).
    pub waits_for: Option<(usize, &'a str)>,
}

impl<'a> Op<'a> {
    /// An operation that is neither work nor an event wait (synchronisation, allocation,
    /// interop), with nothing to keep alive.
    pub(crate) fn other(name: &'static str, label: &'a str, at: SourceLine) -> Op<'a> {
        Op {
            name,
            label,
            at,
            kind: Kind::Other,
            accesses: Vec::new(),
            keep: Vec::new(),
            waits_for: None,
        }
    }
}

/// A journal entry as recorded (cheap to make); turned into a [`JournalEntry`] on demand.
pub(crate) struct Entry {
    pub seq: u64,
    pub op: &'static str,
    pub label: String,
    pub at: SourceLine,
    pub thread: (ThreadId, Arc<str>),
    pub stream: Option<usize>,
    pub ranges: Arc<[String]>,
    pub accesses: Vec<Access>,
    pub kind: Kind,
    pub waits_for: Option<usize>,
    pub outcome: Outcome,
    pub node: Option<usize>,
}

impl Entry {
    fn new(op: &Op<'_>, stream: Option<usize>, outcome: Outcome) -> Entry {
        Entry {
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            op: op.name,
            label: op.label.to_string(),
            at: op.at,
            thread: crate::ranges::thread(),
            stream,
            ranges: crate::ranges::snapshot(),
            accesses: op.accesses.clone(),
            kind: op.kind,
            waits_for: op.waits_for.map(|w| w.0),
            outcome,
            node: None,
        }
    }
    /// Like `new`, moving the accesses out of `op` instead of copying them.
    fn taking(op: &mut Op<'_>, stream: Option<usize>, outcome: Outcome) -> Entry {
        let accesses = std::mem::take(&mut op.accesses);
        Entry {
            accesses,
            ..Entry::new(op, stream, outcome)
        }
    }
    fn cloned(&self) -> Entry {
        Entry {
            seq: self.seq,
            op: self.op,
            label: self.label.clone(),
            at: self.at,
            thread: self.thread.clone(),
            stream: self.stream,
            ranges: self.ranges.clone(),
            accesses: self.accesses.clone(),
            kind: self.kind,
            waits_for: self.waits_for,
            outcome: self.outcome.clone(),
            node: self.node,
        }
    }
}

fn failed(f: &Failure) -> Outcome {
    Outcome::Failed {
        call: f.call,
        code: f.code,
    }
}

fn writes(a: &Access) -> bool {
    a.mode != AccessMode::Read
}

/// Whether a code is one of the stream-capture codes (900..=908) other than 901.
fn capture_code(code: CudaCode) -> bool {
    matches!(code.number(), 900 | 902..=908)
}

/// The driver's capture status of a stream.
pub(crate) enum Status {
    None,
    /// Capturing into the capture with this id.
    Active(u64),
    Invalidated,
}

/// Which capture a stream takes part in.
enum Membership {
    /// A graphsmith capture of this context, by id, and whether it journals.
    Ours(u64, bool),
    /// A capture graphsmith did not begin.
    Foreign,
    /// None (or an invalidated one graphsmith cannot name).
    None,
}

pub(crate) fn stream_status(raw: sys::CUstream) -> Result<Status, Failure> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    use std::ptr::null_mut;
    // SAFETY: callers pass a live stream (or the legacy handle); status and id are valid out
    // pointers, the other outputs are optional and null.
    check(
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                raw,
                &mut status,
                &mut id,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
            )
        },
        "cuStreamGetCaptureInfo",
    )?;
    use sys::CUstreamCaptureStatus as S;
    Ok(match status {
        S::CU_STREAM_CAPTURE_STATUS_ACTIVE => Status::Active(id),
        S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => Status::Invalidated,
        _ => Status::None,
    })
}

/// The node the last operation on a capturing stream became: after a kernel, copy or memset the
/// stream's dependency set is exactly that node. Asks only for what it needs (the optional
/// outputs are null), since it runs once per captured operation.
fn captured_node(raw: sys::CUstream) -> Option<sys::CUgraphNode> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    use std::ptr::null_mut;
    // SAFETY: the stream is live (held by the caller); status, deps and count are valid out
    // pointers, the other outputs are optional and null. The array is read at once.
    let rc = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            raw,
            &mut status,
            null_mut(),
            null_mut(),
            &mut deps,
            null_mut(),
            &mut count,
        )
    };
    let active = status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if rc != sys::CUresult::CUDA_SUCCESS || !active || count != 1 || deps.is_null() {
        return None;
    }
    // SAFETY: the driver returned one valid node handle at deps.
    Some(unsafe { *deps })
}

impl Context {
    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CaptureRecord>> {
        self.inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// `Some(journals)` while capture `id` runs.
    fn capture_running(&self, id: u64) -> Option<bool> {
        self.records().get(&id).map(|r| r.options.journal)
    }

    /// An operation on no stream (`Context::alloc`, `Event::query`, interop): journaled only
    /// when it fails, in each running capture it invalidated.
    pub(crate) fn issue_unstreamed(
        &self,
        op: Op<'_>,
        fail: impl Fn(Failure) -> Error,
        call: impl FnOnce() -> Result<(), Failure>,
    ) -> Result<()> {
        if !self.captures_active() {
            return call().map_err(fail);
        }
        let result = call();
        if let Err(f) = &result {
            self.attribute_failure(Entry::new(&op, None, failed(f)), None, None);
        }
        result.map_err(fail)
    }

    /// Puts a failed operation in the journal of every running capture whose origin stream is
    /// now invalidated (the failure broke it), and of same-thread captures for capture codes.
    fn attribute_failure(&self, entry: Entry, stream: Option<(usize, &str)>, except: Option<u64>) {
        let code = match &entry.outcome {
            Outcome::Failed { code, .. } => *code,
            _ => return,
        };
        let mut records = self.records();
        for (id, rec) in records.iter_mut() {
            if Some(*id) == except || !rec.options.journal {
                continue;
            }
            let broke = matches!(
                stream_status(rec.origin as sys::CUstream),
                Ok(Status::Invalidated)
            );
            if broke || (rec.thread == entry.thread.0 && capture_code(code)) {
                if let Some((raw, label)) = stream {
                    rec.streams.entry(raw).or_insert_with(|| label.to_string());
                }
                rec.entries.push(entry.cloned());
            }
        }
    }
}

impl Stream {
    /// Issues one graphsmith operation with the journal. `call` makes the driver call(s).
    pub(crate) fn issue(
        &self,
        op: Op<'_>,
        fail: impl Fn(Failure) -> Error,
        call: impl FnOnce() -> Result<(), Failure>,
    ) -> Result<()> {
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

    fn membership(&self) -> Result<Membership, Failure> {
        // Fast path: the capture this stream was last seen in, confirmed while no capture has
        // ended since (a stream leaves a capture only when the capture ends).
        let epoch = CAPTURE_EPOCH.load(Ordering::Acquire);
        let hint = self.capture_hint.load(Ordering::Acquire);
        if hint != 0 {
            let (id, journal) = (hint & !JOURNAL_BIT, hint & JOURNAL_BIT != 0);
            if self.hint_epoch.load(Ordering::Acquire) == epoch {
                return Ok(Membership::Ours(id, journal));
            }
            if self.ctx.capture_running(id).is_some() {
                self.hint_epoch.store(epoch, Ordering::Release);
                return Ok(Membership::Ours(id, journal));
            }
        }
        let status = match stream_status(self.raw) {
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

    fn journal_captured(
        &self,
        id: u64,
        journal: bool,
        mut op: Op<'_>,
        result: &Result<(), Failure>,
    ) {
        let raw = self.raw as usize;
        let entry = journal.then(|| {
            let outcome = match result {
                Ok(()) => Outcome::Captured,
                Err(f) => failed(f),
            };
            let mut e = Entry::taking(&mut op, Some(raw), outcome);
            if result.is_ok() && op.kind == Kind::Work {
                e.node = captured_node(self.raw).map(|n| n as usize);
            }
            e
        });
        let failure = match result {
            Err(f) if capture_code(f.code) => entry.as_ref().map(Entry::cloned),
            _ => None,
        };
        let waits_for = op.waits_for;
        let keep = op.keep;
        {
            let mut records = self.ctx.records();
            let Some(rec) = records.get_mut(&id) else {
                return;
            };
            if result.is_ok() {
                rec.keep.extend(keep);
            }
            if let Some(e) = entry {
                rec.note_stream(raw, &self.label, waits_for);
                rec.entries.push(e);
            }
        }
        if let Some(e) = failure {
            // A capture-code failure may break other captures too (a merge breaks both).
            self.ctx
                .attribute_failure(e, Some((raw, &self.label)), Some(id));
        }
    }

    fn journal_uncaptured(&self, op: Op<'_>, result: &Result<(), Failure>) {
        let me = Some((self.raw as usize, self.label.as_str()));
        match (result, op.kind) {
            (Err(f), _) => {
                let e = Entry::new(&op, Some(self.raw as usize), failed(f));
                self.ctx.attribute_failure(e, me, None);
            }
            (Ok(()), Kind::Work) => {
                let mut records = self.ctx.records();
                let mut entry = None;
                for rec in records.values_mut().filter(|r| r.options.journal) {
                    let e = entry.get_or_insert_with(|| {
                        Entry::new(&op, Some(self.raw as usize), Outcome::Eager)
                    });
                    rec.note_stream(self.raw as usize, &self.label, None);
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
        let mut records = self.ctx.records();
        let mut refused: Option<Escape> = None;
        for rec in records.values_mut() {
            if !rec.options.strict || !rec.options.journal {
                continue;
            }
            let touching = rec.touching(&op.accesses);
            let conflict = touching.iter().any(|&i| {
                let e = &rec.entries[i];
                e.accesses.iter().any(|a| {
                    op.accesses
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
            let entry = Entry::new(op, Some(self.raw as usize), Outcome::Refused { reason });
            rec.note_stream(self.raw as usize, &self.label, None);
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
                    rec.note_stream(self.raw as usize, &self.label, None);
                    rec.entries
                        .push(Entry::new(&op, Some(self.raw as usize), outcome));
                }
                Err(refuse(reason))
            }
        }
    }
}
