//! The tracer's view of the running captures: which streams joined each one, what was captured on
//! them, which events were recorded in them, and which captures just ended. Pure bookkeeping (no
//! CUDA call is made under the lock that guards it); the driver is asked about a stream before.

use std::collections::{HashMap, VecDeque};

use crate::event::{Mode, StreamUse, Thread};

#[derive(Clone, Debug)]
pub(crate) struct StreamTrack {
    pub stream: u64,
    pub calls: u64,
    pub first: String,
    pub last: String,
    pub last_ranges: Vec<String>,
    pub last_thread: Thread,
    /// Sequence number of its last captured call.
    pub last_work: u64,
    /// Sequence number of the latest event recorded on it that another stream waited on.
    pub joined_upto: Option<u64>,
}

impl StreamTrack {
    fn to_use(&self) -> StreamUse {
        StreamUse {
            stream: self.stream,
            calls: self.calls,
            first: self.first.clone(),
            last: self.last.clone(),
            last_ranges: self.last_ranges.clone(),
            last_thread: self.last_thread.clone(),
            joined: self.joined_upto.is_some_and(|j| j >= self.last_work),
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct CaptureTrack {
    pub id: u64,
    pub origin: u64,
    pub context: u64,
    pub mode: Mode,
    pub thread: u32,
    pub streams: Vec<StreamTrack>,
}

impl CaptureTrack {
    /// Every stream that took part, the origin first.
    pub(crate) fn uses(&self) -> Vec<StreamUse> {
        let mut v: Vec<StreamUse> = self.streams.iter().map(StreamTrack::to_use).collect();
        v.sort_by_key(|s| s.stream != self.origin);
        v
    }

    /// Whether work from `thread` on a stream outside this capture escapes it: every thread's
    /// in global mode, the capturing thread's in thread-local mode.
    pub(crate) fn escapes_from(&self, context: u64, thread: u32) -> bool {
        self.context == context
            && match self.mode {
                Mode::Global | Mode::Unknown => true,
                Mode::ThreadLocal => self.thread == thread,
                Mode::Relaxed => false,
            }
    }
}

/// Captures that ended recently, by stream (to place a second end's error).
const ENDED_KEPT: usize = 64;
/// Events remembered per process.
const EVENTS_KEPT: usize = 1 << 16;

#[derive(Default)]
pub(crate) struct State {
    pub active: Vec<CaptureTrack>,
    /// event -> (capture, stream, seq of the record)
    events: HashMap<u64, (u64, u64, u64)>,
    ended: VecDeque<(u64, u64)>,
}

impl State {
    pub(crate) fn begin(&mut self, c: CaptureTrack) {
        self.active.retain(|a| a.id != c.id);
        self.active.push(c);
    }

    pub(crate) fn get(&self, id: u64) -> Option<&CaptureTrack> {
        self.active.iter().find(|c| c.id == id)
    }

    /// A call captured on `stream` in capture `id`.
    pub(crate) fn captured(
        &mut self,
        id: u64,
        stream: u64,
        name: &str,
        seq: u64,
        thread: &Thread,
        ranges: Vec<String>,
    ) {
        let Some(c) = self.active.iter_mut().find(|c| c.id == id) else {
            return;
        };
        let track = match c.streams.iter().position(|s| s.stream == stream) {
            Some(i) => &mut c.streams[i],
            None => {
                c.streams.push(StreamTrack {
                    stream,
                    calls: 0,
                    first: name.to_string(),
                    last: String::new(),
                    last_ranges: Vec::new(),
                    last_thread: thread.clone(),
                    last_work: seq,
                    joined_upto: None,
                });
                c.streams.last_mut().expect("just pushed")
            }
        };
        track.calls += 1;
        track.last = name.to_string();
        track.last_ranges = ranges;
        track.last_thread = thread.clone();
        track.last_work = seq;
    }

    pub(crate) fn event_recorded(&mut self, event: u64, capture: u64, stream: u64, seq: u64) {
        if self.events.len() >= EVENTS_KEPT {
            self.events.clear();
        }
        self.events.insert(event, (capture, stream, seq));
    }

    /// A stream of a capture waited on an event: the stream the event was recorded on is joined
    /// up to that record.
    pub(crate) fn event_waited(&mut self, event: u64, waiter: u64) {
        let Some(&(capture, stream, seq)) = self.events.get(&event) else {
            return;
        };
        if stream == waiter {
            return;
        }
        if let Some(c) = self.active.iter_mut().find(|c| c.id == capture) {
            if let Some(s) = c.streams.iter_mut().find(|s| s.stream == stream) {
                s.joined_upto = Some(s.joined_upto.map_or(seq, |j| j.max(seq)));
            }
        }
    }

    /// The capture an event was last recorded in, while that capture runs.
    pub(crate) fn event_capture(&self, event: u64) -> Option<u64> {
        let (capture, _, _) = self.events.get(&event)?;
        self.get(*capture).map(|c| c.id)
    }

    pub(crate) fn end(&mut self, id: u64) -> Option<CaptureTrack> {
        let i = self.active.iter().position(|c| c.id == id)?;
        let c = self.active.remove(i);
        self.events.retain(|_, (cap, _, _)| *cap != id);
        if self.ended.len() >= ENDED_KEPT {
            self.ended.pop_front();
        }
        self.ended.push_back((c.origin, id));
        Some(c)
    }

    /// The running capture begun on `stream`, if any. After a call invalidated a capture the
    /// driver reports no capture id for the stream, so a failing end is matched to the capture
    /// by the stream it was begun on.
    pub(crate) fn open_on(&self, stream: u64) -> Option<u64> {
        self.active
            .iter()
            .rev()
            .find(|c| c.origin == stream)
            .map(|c| c.id)
    }

    /// The capture that last ended on this stream.
    pub(crate) fn recently_ended(&self, stream: u64) -> Option<u64> {
        self.ended
            .iter()
            .rev()
            .find(|(s, _)| *s == stream)
            .map(|(_, id)| *id)
    }

    /// Captures running in a context.
    pub(crate) fn active_in(&self, context: u64) -> impl Iterator<Item = &CaptureTrack> {
        self.active.iter().filter(move |c| c.context == context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(id: u64, origin: u64, mode: Mode, thread: u32) -> CaptureTrack {
        CaptureTrack {
            id,
            origin,
            context: 7,
            mode,
            thread,
            streams: Vec::new(),
        }
    }

    fn t(tid: u32) -> Thread {
        Thread {
            tid,
            name: String::new(),
        }
    }

    #[test]
    fn a_fork_joined_back_is_not_reported() {
        let mut s = State::default();
        s.begin(capture(1, 0xA, Mode::Global, 10));
        s.captured(1, 0xA, "cuEventRecord", 1, &t(10), vec![]);
        s.event_recorded(0xE1, 1, 0xA, 1);
        s.captured(1, 0xB, "cuStreamWaitEvent", 2, &t(10), vec![]);
        s.event_waited(0xE1, 0xB);
        s.captured(1, 0xB, "cuLaunchKernel", 3, &t(10), vec!["side".into()]);
        // Not joined yet: the side stream's last work is after any record waited on.
        let uses = s.get(1).unwrap().uses();
        assert_eq!(uses[0].stream, 0xA);
        assert!(!uses[1].joined);
        assert_eq!(uses[1].last, "cuLaunchKernel");
        assert_eq!(uses[1].last_ranges, ["side"]);
        // Join: record on B, A waits.
        s.captured(1, 0xB, "cuEventRecord", 4, &t(10), vec![]);
        s.event_recorded(0xE2, 1, 0xB, 4);
        s.event_waited(0xE2, 0xA);
        assert!(s.get(1).unwrap().uses()[1].joined);
        assert_eq!(s.event_capture(0xE2), Some(1));
        let ended = s.end(1).unwrap();
        assert_eq!(ended.streams.len(), 2);
        assert_eq!(s.event_capture(0xE2), None);
        assert_eq!(s.recently_ended(0xA), Some(1));
        assert_eq!(s.recently_ended(0xB), None);
    }

    #[test]
    fn escapes_depend_on_mode_thread_and_context() {
        let g = capture(1, 0xA, Mode::Global, 10);
        assert!(g.escapes_from(7, 11));
        assert!(!g.escapes_from(8, 10), "another context");
        let tl = capture(2, 0xA, Mode::ThreadLocal, 10);
        assert!(tl.escapes_from(7, 10));
        assert!(!tl.escapes_from(7, 11));
        let r = capture(3, 0xA, Mode::Relaxed, 10);
        assert!(!r.escapes_from(7, 10));
    }
}
