//! The running captures of a context, as the context holds them: what each must keep alive,
//! its options and record (journal entries, node metadata, streams seen), and the half of the
//! journal that needs no stream: operations on no stream (`Context::alloc`, `Event::query`,
//! interop) and the attribution of a failure to the captures it broke. The stream half
//! (operations on streams, escapes, the node each operation became) is `stream/journal.rs`.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;

use cudarc::driver::sys;
use graphsmith_analysis::Outcome;
use graphsmith_model::{Access, AccessMode};

use crate::context::{keep_id, remember_kept, Context, Footprint, Records};
use crate::driver::Failure;
use crate::error::{CudaCode, Error, Result, SourceLine};

/// Something a graph must keep alive (a buffer's allocation, a module, an event, a host
/// function, a child graph's resources).
pub(crate) type Keep = Arc<dyn Any + Send + Sync>;

pub use graphsmith_analysis::CaptureMode;

/// The driver's value for a capture mode.
pub(crate) fn raw_mode(mode: CaptureMode) -> sys::CUstreamCaptureMode {
    use sys::CUstreamCaptureMode as M;
    match mode {
        CaptureMode::Global => M::CU_STREAM_CAPTURE_MODE_GLOBAL,
        CaptureMode::ThreadLocal => M::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        CaptureMode::Relaxed => M::CU_STREAM_CAPTURE_MODE_RELAXED,
    }
}

/// How to capture: the driver's mode, and graphsmith's own checks.
///
/// ```
/// use graphsmith::{CaptureMode, CaptureOptions};
/// let opts = CaptureOptions::new(CaptureMode::Global).strict(true);
/// assert!(opts.strict && opts.journal);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureOptions {
    pub mode: CaptureMode,
    /// Work issued through graphsmith that would run outside the capture (a stream that is not
    /// part of it, from the capturing thread; or memory the capture touches, from any thread)
    /// is refused with [`crate::ErrorKind::CaptureEscape`] instead of running eagerly and being
    /// reported as a warning. Default: off.
    pub strict: bool,
    /// Record the journal (labels, lines, ranges, accesses, results). Off, nodes get default
    /// labels, escapes go unnoticed, and a failure is diagnosed from the end code alone; what
    /// the graph must keep alive is still tracked. Default: on.
    pub journal: bool,
}

impl CaptureOptions {
    pub fn new(mode: CaptureMode) -> Self {
        Self {
            mode,
            strict: false,
            journal: true,
        }
    }
    pub fn strict(self, strict: bool) -> Self {
        Self { strict, ..self }
    }
    pub fn journal(self, journal: bool) -> Self {
        Self { journal, ..self }
    }
}

impl From<CaptureMode> for CaptureOptions {
    fn from(mode: CaptureMode) -> Self {
        Self::new(mode)
    }
}

/// A running capture: its journal and what its graph must keep alive.
pub(crate) struct CaptureRecord {
    /// What the graph must keep alive, each resource once in a row (see `add_keep`).
    pub keep: Vec<Keep>,
    pub label: String,
    pub options: CaptureOptions,
    /// The stream that began it.
    pub origin: usize,
    pub began_at: SourceLine,
    pub thread: ThreadId,
    pub thread_label: Arc<str>,
    pub entries: Vec<Entry>,
    /// Labels of the streams seen in the journal, by handle.
    pub streams: HashMap<usize, String>,
    /// The stream of the last journaled operation (its label is in `streams`).
    pub last_stream: usize,
    /// The label and accesses of the last entry that had them, shared by the next entries
    /// with the same (a chain of launches of one kernel on one buffer builds them once).
    pub last_label: Option<Arc<str>>,
    pub last_accesses: Option<Arc<[Access]>>,
}

/// The capture a stream began.
pub(crate) struct ActiveCapture {
    pub id: u64,
    pub label: String,
    /// The existing graph the capture adds its nodes to (`cuStreamBeginCaptureToGraph`, its
    /// handle as an integer), which `Stream::capture_into` ends the capture of and keeps;
    /// `None` for a capture into a new graph, which `end_capture` ends.
    pub into: Option<usize>,
}

static SEQ: AtomicU64 = AtomicU64::new(1);

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
    /// What the operation touches and keeps besides `accesses` and `keep`, read only when a
    /// capture needs it (a launch's arguments and module).
    pub footprint: Option<&'a dyn Footprint>,
    /// For joins: the stream waited for (handle, label).
    pub waits_for: Option<(usize, &'a str)>,
    /// What tells this operation's node from others of its kind: a kernel's function handle,
    /// a copy's or set's destination address (see `graph/captured_nodes.rs`).
    pub target: Option<u64>,
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
            footprint: None,
            waits_for: None,
            target: None,
        }
    }

    /// Calls `f` with each resource a graph of this operation must keep (see
    /// [`Footprint::each_keep`]).
    pub(crate) fn each_keep(&self, f: &mut dyn FnMut(usize, &dyn Fn() -> Keep)) {
        for k in &self.keep {
            f(keep_id(k), &|| k.clone());
        }
        if let Some(fp) = self.footprint {
            fp.each_keep(f);
        }
    }

    /// What a launch touches before its kernel's programmatic wait (`None`: nothing), and
    /// whether its kernel triggers its dependents only after that wait.
    pub(crate) fn before_wait(&self) -> (Option<Arc<[Access]>>, bool) {
        match self.footprint {
            None => (None, false),
            Some(fp) => {
                let before = fp.accesses_before_wait();
                let before = (!before.is_empty()).then(|| before.into());
                (before, fp.triggers_after_wait())
            }
        }
    }

    /// The memory the operation touches, built.
    pub(crate) fn built_accesses(&self) -> Vec<Access> {
        match self.footprint {
            None => self.accesses.clone(),
            Some(fp) => {
                let mut all = self.accesses.clone();
                all.extend(fp.accesses());
                all
            }
        }
    }

    /// Whether the operation touches exactly `built` (nothing is built to tell).
    fn same_accesses(&self, built: &[Access]) -> bool {
        match self.footprint {
            None => self.accesses == built,
            Some(fp) => self.accesses.is_empty() && fp.same_accesses(built),
        }
    }
}

/// A journal entry as recorded (cheap to make: label and accesses are shared with the entry
/// before when they are the same); turned into a [`JournalEntry`] on demand.
pub(crate) struct Entry {
    pub seq: u64,
    pub op: &'static str,
    pub label: Arc<str>,
    pub at: SourceLine,
    pub thread: (ThreadId, Arc<str>),
    pub stream: Option<usize>,
    pub ranges: Arc<[String]>,
    pub accesses: Arc<[Access]>,
    /// What a launch touches before its kernel's programmatic wait (`None`: nothing).
    pub before_wait: Option<Arc<[Access]>>,
    /// The launch's kernel triggers its dependents only after its wait.
    pub triggers_after_wait: bool,
    pub kind: Kind,
    pub waits_for: Option<usize>,
    pub outcome: Outcome,
    /// The node the operation became, when the driver was asked right after it (an anchor;
    /// see `graph/captured_nodes.rs`).
    pub node: Option<usize>,
    /// Captured one-node work right after captured one-node work on the same stream: its node
    /// is found from the node before it when the graph is read back.
    pub chained: bool,
    /// The operation's [`Op::target`].
    pub target: Option<u64>,
}

impl Entry {
    pub(crate) fn new(op: &Op<'_>, stream: Option<usize>, outcome: Outcome) -> Entry {
        let (before_wait, triggers_after_wait) = op.before_wait();
        Entry {
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            op: op.name,
            label: op.label.into(),
            at: op.at,
            thread: crate::ranges::thread(),
            stream,
            ranges: crate::ranges::snapshot(),
            accesses: op.built_accesses().into(),
            before_wait,
            triggers_after_wait,
            kind: op.kind,
            waits_for: op.waits_for.map(|w| w.0),
            outcome,
            node: None,
            chained: false,
            target: op.target,
        }
    }
    /// Like `new`, for the journal of `rec`: the label and accesses are those of the last entry
    /// that had them when they are the same (compared, not built), else built and remembered.
    pub(crate) fn interned(
        op: &Op<'_>,
        stream: Option<usize>,
        outcome: Outcome,
        rec: &mut CaptureRecord,
    ) -> Entry {
        let label = match &rec.last_label {
            Some(l) if **l == *op.label => l.clone(),
            _ => {
                let l: Arc<str> = op.label.into();
                rec.last_label = Some(l.clone());
                l
            }
        };
        let (before_wait, triggers_after_wait) = op.before_wait();
        let accesses = match &rec.last_accesses {
            Some(a) if op.same_accesses(a) => a.clone(),
            _ => {
                let a: Arc<[Access]> = op.built_accesses().into();
                rec.last_accesses = Some(a.clone());
                a
            }
        };
        Entry {
            seq: SEQ.fetch_add(1, Ordering::Relaxed),
            op: op.name,
            label,
            at: op.at,
            thread: crate::ranges::thread(),
            stream,
            ranges: crate::ranges::snapshot(),
            accesses,
            before_wait,
            triggers_after_wait,
            kind: op.kind,
            waits_for: op.waits_for.map(|w| w.0),
            outcome,
            node: None,
            chained: false,
            target: op.target,
        }
    }
    pub(crate) fn cloned(&self) -> Entry {
        Entry {
            seq: self.seq,
            op: self.op,
            label: self.label.clone(),
            at: self.at,
            thread: self.thread.clone(),
            stream: self.stream,
            ranges: self.ranges.clone(),
            accesses: self.accesses.clone(),
            before_wait: self.before_wait.clone(),
            triggers_after_wait: self.triggers_after_wait,
            kind: self.kind,
            waits_for: self.waits_for,
            outcome: self.outcome.clone(),
            node: self.node,
            chained: self.chained,
            target: self.target,
        }
    }

    /// Whether work on `stream` right after this entry is chained to it: this entry is
    /// captured one-node work on that stream.
    pub(crate) fn ends_chain(&self, stream: usize) -> bool {
        self.kind == Kind::Work
            && self.stream == Some(stream)
            && self.outcome == Outcome::Captured
            && one_node_kind(self.op).is_some()
    }
}

impl CaptureRecord {
    /// Keeps `keep` alive with the graph, and remembers on this thread that capture `id` holds
    /// it. A resource that one of the last few kept already is not kept again (a capture
    /// launching one kernel on one buffer a thousand times keeps two resources, not two
    /// thousand).
    pub(crate) fn add_keep(&mut self, id: u64, keep: impl IntoIterator<Item = Keep>) {
        const RECENT: usize = 8;
        for k in keep {
            let start = self.keep.len().saturating_sub(RECENT);
            let kid = keep_id(&k);
            if !self.keep[start..].iter().any(|old| keep_id(old) == kid) {
                self.keep.push(k);
            }
            remember_kept(id, kid);
        }
    }
}

/// The kind of node a one-node operation becomes (by the operation's name); `None` for
/// operations that may add several nodes or none (library calls, interop).
pub(crate) fn one_node_kind(op: &str) -> Option<&'static str> {
    match op {
        "Stream::launch" => Some("kernel"),
        "Stream::memset" => Some("memset"),
        "Stream::copy" | "Stream::copy_from_host" | "Stream::copy_to_host" => Some("memcpy"),
        _ => None,
    }
}

pub(crate) fn failed(f: &Failure) -> Outcome {
    Outcome::Failed {
        call: f.call,
        code: f.code,
    }
}

pub(crate) fn writes(a: &Access) -> bool {
    a.mode != AccessMode::Read
}

/// Whether a code is one of the stream-capture codes (900..=908) other than 901.
pub(crate) fn capture_code(code: CudaCode) -> bool {
    matches!(code.number(), 900 | 902..=908)
}

pub(crate) use crate::driver::CaptureStatus as Status;

/// The driver's capture status of a stream and its capture id.
pub(crate) fn stream_status(raw: sys::CUstream) -> Result<Status, Failure> {
    // SAFETY: callers pass a live stream (or the legacy handle).
    unsafe { crate::driver::capture_status(raw) }
}

impl Context {
    pub(crate) fn records(&self) -> std::sync::MutexGuard<'_, Records> {
        self.inner
            .captures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// `Some(journals)` while capture `id` runs.
    pub(crate) fn capture_running(&self, id: u64) -> Option<bool> {
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
    pub(crate) fn attribute_failure(
        &self,
        entry: Entry,
        stream: Option<(usize, &str)>,
        except: Option<u64>,
    ) {
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
