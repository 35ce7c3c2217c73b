//! The event log: one JSON line per event, appended with a single `write` on a file opened with
//! `O_APPEND`, so lines from several threads (or several processes of one command) never
//! interleave and nothing already written is lost when the process crashes. No lock is held
//! while writing, so an `atexit` handler can never wait on a thread that died holding one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::event::{Event, OUT_VAR};

/// Events recorded per process at most; the rest are counted in `Exit::events_dropped`.
pub(crate) const MAX_EVENTS: u64 = 200_000;

pub(crate) struct Sink {
    file: File,
    written: AtomicU64,
    pub dropped: AtomicU64,
}

static SINK: OnceLock<Option<Sink>> = OnceLock::new();

/// The process's sink, opened on first use; `None` when `GRAPHSMITH_TRACE_OUT` is unset or the
/// file cannot be opened (then nothing is written anywhere).
pub(crate) fn sink() -> Option<&'static Sink> {
    SINK.get_or_init(|| {
        let path = std::env::var_os(OUT_VAR)?;
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        Some(Sink {
            file,
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        })
    })
    .as_ref()
}

impl Sink {
    /// Appends one event. Errors are swallowed: the traced program must not notice the tracer.
    pub(crate) fn write(&self, event: &Event) {
        let always = matches!(
            event,
            Event::Exit(_)
                | Event::Untraced(_)
                | Event::Start(_)
                // `--hazards`' summaries at exit, held in memory, are whole whatever the cap.
                | Event::Race(
                    crate::races::RaceEvent::Summary(_) | crate::races::RaceEvent::Sequence(_)
                )
        );
        if !always && self.written.fetch_add(1, Ordering::Relaxed) >= MAX_EVENTS {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let _ = (&self.file).write_all(&line);
    }
}
