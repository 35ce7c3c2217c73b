//! Signals: ordering between executables and streams as typed handles (docs/ordering.md). A
//! [`Signal`] wraps an event; graphs record and wait on it with builder nodes
//! (`Graph::signal`, `Graph::wait_for`) or during a capture ([`Stream::signal`],
//! [`Stream::wait_for`] become the same nodes), and streams record and wait on it eagerly.
//!
//! Each record or wait inside a graph is an [`EventUse`] kept with the graph, so with every
//! executable made from it: it keeps the event alive, counts the signal's live recorders, and
//! names the node, the call and the line for the check at launch (a wait on a signal that was
//! never recorded and that nothing alive records is refused there).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use graphsmith_analysis::launch_order::Op as LogOp;

use crate::context::{Context, Keep, Kind, LaunchLog, Op};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, Result, SourceLine};
use crate::stream::{Event, EventInner, Stream};

static NEXT_EVENT_ID: AtomicU64 = AtomicU64::new(1);
static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);
/// Live [`EventUse`]s in the process: while none lives, a launch looks for none.
static LIVE_USES: AtomicUsize = AtomicUsize::new(0);

/// A new event id (never reused).
pub(crate) fn next_event_id() -> u64 {
    NEXT_EVENT_ID.fetch_add(1, Ordering::Relaxed)
}

/// A new stream id (never reused).
pub(crate) fn next_stream_id() -> u64 {
    NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed)
}

/// Whether any graph in the process records or waits on an event through a node.
pub(crate) fn event_uses_alive() -> bool {
    LIVE_USES.load(Ordering::Acquire) > 0
}

pub(crate) struct SignalInner {
    pub event: Event,
    /// Live graphs (and so executables) with a node that records the signal.
    recorders: AtomicUsize,
    /// Whether a stream or a launched executable has recorded it.
    recorded: AtomicBool,
}

/// An order between executables and streams: one side records the signal (a `Graph::signal`
/// node, or [`Stream::signal`]), the other waits on it (`Graph::wait_for`,
/// [`Stream::wait_for`], `Exec::launch_after`). Cheap to clone; `Send + Sync`. The event
/// behind it lives as long as any graph or executable that records or waits on it.
///
/// A wait on a signal that was never recorded orders nothing (the driver lets it pass), so
/// graphsmith refuses it: a stream's wait at once, a graph's wait when its executable is
/// launched while no live graph, executable or stream will record the signal.
#[derive(Clone)]
pub struct Signal {
    pub(crate) inner: Arc<SignalInner>,
}

impl std::fmt::Debug for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signal '{}'", self.label())
    }
}

impl Signal {
    /// The signal's label.
    pub fn label(&self) -> &str {
        self.inner.event.label()
    }
    /// The event behind the signal (for interop and timing).
    pub fn event(&self) -> &Event {
        &self.inner.event
    }
    /// Whether a stream or a launched executable has recorded the signal.
    pub fn was_recorded(&self) -> bool {
        self.inner.recorded.load(Ordering::Acquire)
    }
    pub(crate) fn mark_recorded(&self) {
        self.inner.recorded.store(true, Ordering::Release);
    }
    /// Blocks until the signal's latest record has completed (`cuEventSynchronize`).
    #[track_caller]
    pub fn synchronize(&self) -> Result<()> {
        let at = SourceLine::caller();
        self.inner.event.synchronize_at(at)?;
        if let Some(log) = self.inner.event.inner.ctx.launch_log() {
            log.name_signal(self.inner.event.inner.id, self.label());
            log.push(LogOp::SyncSignal {
                signal: self.inner.event.inner.id,
                line: Some(at.to_string()),
            });
        }
        Ok(())
    }
}

/// A node that records or waits on an event, kept with its graph (see the module's doc).
pub(crate) struct EventUse {
    pub event: Arc<EventInner>,
    /// The signal, when the event is one.
    pub signal: Option<Arc<SignalInner>>,
    pub record: bool,
    /// The node's label, the call that made it and its line.
    pub node: String,
    pub op: &'static str,
    pub at: SourceLine,
}

impl EventUse {
    /// A use to keep with a graph.
    pub(crate) fn keep(
        event: &Event,
        signal: Option<&Signal>,
        record: bool,
        node: &str,
        op: &'static str,
        at: SourceLine,
    ) -> Keep {
        LIVE_USES.fetch_add(1, Ordering::AcqRel);
        let signal = signal.map(|s| s.inner.clone());
        if let (true, Some(s)) = (record, &signal) {
            s.recorders.fetch_add(1, Ordering::AcqRel);
        }
        Arc::new(EventUse {
            event: event.inner.clone(),
            signal,
            record,
            node: node.to_string(),
            op,
            at,
        })
    }

    /// For a wait on a signal: the error when the signal was never recorded and nothing alive
    /// records it (the wait would order nothing).
    pub(crate) fn unrecorded(&self) -> Option<ErrorKind> {
        let s = self.signal.as_ref().filter(|_| !self.record)?;
        let orphan =
            !s.recorded.load(Ordering::Acquire) && s.recorders.load(Ordering::Acquire) == 0;
        orphan.then(|| ErrorKind::UnrecordedSignal {
            signal: s.event.label().to_string(),
            waiter: Some(Box::new(crate::error::SignalWaiter {
                node: self.node.clone(),
                op: self.op,
                at: self.at,
            })),
        })
    }

    /// After a launch of a graph holding this record: the signal has been recorded.
    pub(crate) fn launched(&self) {
        if let (true, Some(s)) = (self.record, &self.signal) {
            s.recorded.store(true, Ordering::Release);
        }
    }
}

impl Drop for EventUse {
    fn drop(&mut self) {
        if let (true, Some(s)) = (self.record, &self.signal) {
            s.recorders.fetch_sub(1, Ordering::AcqRel);
        }
        LIVE_USES.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Context {
    /// Creates a signal (an event without timing) labelled `label`.
    #[track_caller]
    pub fn signal(&self, label: &str) -> Result<Signal> {
        let event = self.event(label, false)?;
        Ok(Signal {
            inner: Arc::new(SignalInner {
                event,
                recorders: AtomicUsize::new(0),
                recorded: AtomicBool::new(false),
            }),
        })
    }
}

impl Stream {
    /// Whether this stream is capturing now (so an operation becomes a node, not work).
    pub(crate) fn capturing_now(&self) -> bool {
        // SAFETY: the stream is live (held by self).
        self.ctx.captures_active() && !unsafe { driver::stream_idle_for_capture(self.raw()) }
    }

    /// The launch log, when one records and this stream is not capturing (captured
    /// operations are not the host's order).
    pub(crate) fn log(&self) -> Option<LaunchLog> {
        let log = self.ctx.launch_log()?;
        if self.capturing_now() {
            return None;
        }
        log.name_stream(self.handle.id, &self.label);
        Some(log)
    }

    /// The stream's id in launch logs.
    pub(crate) fn log_id(&self) -> u64 {
        self.handle.id
    }

    /// Records `signal` after the work submitted to this stream so far. During a capture this
    /// becomes an event record node of the captured graph (recorded at each of its launches),
    /// kept with the graph.
    #[track_caller]
    pub fn signal(&self, signal: &Signal) -> Result<()> {
        self.signal_or_wait(signal, true, SourceLine::caller())
    }

    /// Makes later work on this stream wait for `signal`'s latest record. During a capture
    /// this becomes an event wait node of the captured graph, checked when its executable is
    /// launched. Eagerly, a signal never recorded is refused
    /// ([`ErrorKind::UnrecordedSignal`]): the wait would order nothing.
    #[track_caller]
    pub fn wait_for(&self, signal: &Signal) -> Result<()> {
        self.signal_or_wait(signal, false, SourceLine::caller())
    }

    fn signal_or_wait(&self, signal: &Signal, record: bool, at: SourceLine) -> Result<()> {
        let op = if record {
            "Stream::signal"
        } else {
            "Stream::wait_for"
        };
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let capturing = self.capturing_now();
        // A wait on a signal recorded inside a running capture forks this stream into it.
        let in_capture =
            self.ctx.captures_active() && signal.inner.recorders.load(Ordering::Acquire) > 0;
        if !record && !capturing && !in_capture && !signal.was_recorded() {
            return Err(Error::new(
                ErrorKind::UnrecordedSignal {
                    signal: signal.label().to_string(),
                    waiter: None,
                },
                self.object(),
                op,
                at,
            ));
        }
        let ev = signal.inner.event.inner.raw;
        let label = signal.label();
        let kind = if record {
            Kind::Record { event: ev as usize }
        } else {
            Kind::Wait {
                event: Some(ev as usize),
            }
        };
        let journal = Op {
            keep: vec![EventUse::keep(
                &signal.inner.event,
                Some(signal),
                record,
                label,
                op,
                at,
            )],
            kind,
            ..Op::other(op, label, at)
        };
        let raw = self.raw();
        self.issue(journal, fail, || match (record, capturing) {
            // SAFETY: stream and event are live (self, signal) and of this context.
            (true, false) => unsafe { driver::event_record(ev, raw) },
            // SAFETY: as above; the stream captures, so this becomes a record node.
            (true, true) => unsafe { driver::event_record_external(ev, raw) },
            // SAFETY: as above.
            (false, false) => unsafe { driver::stream_wait_event(raw, ev) },
            // SAFETY: as above; the stream captures, so this becomes a wait node.
            (false, true) => unsafe { driver::stream_wait_event_external(raw, ev) },
        })?;
        if capturing {
            return Ok(());
        }
        if record {
            signal.mark_recorded();
        }
        self.log_event(&signal.inner.event, record, at);
        Ok(())
    }
}

impl Stream {
    /// Logs an eager record (`record`) or wait of `event` on this stream.
    pub(crate) fn log_event(&self, event: &Event, record: bool, at: SourceLine) {
        let Some(log) = self.log() else {
            return;
        };
        let (signal, stream, line) = (event.inner.id, self.log_id(), Some(at.to_string()));
        log.name_signal(signal, event.label());
        log.push(if record {
            LogOp::Record {
                signal,
                stream,
                line,
            }
        } else {
            LogOp::Wait {
                signal,
                stream,
                line,
            }
        });
    }

    /// Logs that the host waited for this stream.
    pub(crate) fn log_sync(&self, at: SourceLine) {
        if let Some(log) = self.log() {
            log.push(LogOp::SyncStream {
                stream: self.log_id(),
                line: Some(at.to_string()),
            });
        }
    }
}
