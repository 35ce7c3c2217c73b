//! A capture's record: the journal in public form and the escapes it saw. The entries go to
//! the graph when the capture ends, which labels its nodes with them when first read back.

use std::collections::HashMap;

use graphsmith_model::Access;

use crate::context::{failed, writes, Entry, Kind, Op};
use crate::context::{CaptureOptions, CaptureRecord};
use crate::driver::Failure;
use crate::error::SourceLine;
use crate::stream::Stream;
use graphsmith_analysis::{Escape, JournalEntry, Outcome};

impl CaptureRecord {
    /// Records a failed operation (e.g. a refused begin) directly.
    pub(crate) fn push_failed(&mut self, op: &Op<'_>, stream: usize, f: Failure) {
        self.entries.push(Entry::new(op, Some(stream), failed(&f)));
    }

    pub(super) fn note_stream(
        &mut self,
        raw: usize,
        label: &str,
        waits_for: Option<(usize, &str)>,
    ) {
        if self.last_stream != raw {
            self.streams.entry(raw).or_insert_with(|| label.to_string());
            self.last_stream = raw;
        }
        if let Some((other, other_label)) = waits_for {
            self.streams
                .entry(other)
                .or_insert_with(|| other_label.to_string());
        }
    }

    /// Indices of captured entries that touch memory `accesses` touch.
    pub(super) fn touching(&self, accesses: &[Access]) -> Vec<usize> {
        if accesses.is_empty() {
            return Vec::new();
        }
        (0..self.entries.len())
            .filter(|&i| {
                let e = &self.entries[i];
                e.outcome == Outcome::Captured
                    && e.accesses
                        .iter()
                        .any(|a| accesses.iter().any(|b| a.overlaps(b)))
            })
            .collect()
    }

    fn stream_label(&self, raw: Option<usize>) -> Option<String> {
        raw.map(|r| {
            self.streams
                .get(&r)
                .cloned()
                .unwrap_or_else(|| format!("{r:#x}"))
        })
    }

    /// The public form of entry `i`, with waits on events resolved to the stream that last
    /// recorded the event before it.
    pub(crate) fn public(&self, i: usize) -> JournalEntry {
        self.public_of(&self.entries[i])
    }

    pub(super) fn public_of(&self, e: &Entry) -> JournalEntry {
        let waits_for = match (e.kind, e.waits_for) {
            (_, Some(stream)) => Some(stream),
            (Kind::Wait { event: Some(ev) }, None) => self
                .entries
                .iter()
                .rev()
                .find(|r| r.seq < e.seq && r.kind == Kind::Record { event: ev })
                .and_then(|r| r.stream),
            _ => None,
        };
        JournalEntry {
            seq: e.seq,
            op: e.op,
            label: e.label.to_string(),
            at: e.at,
            thread: e.thread.1.to_string(),
            stream: self.stream_label(e.stream),
            ranges: e.ranges.to_vec(),
            accesses: e.accesses.to_vec(),
            waits_for: self.stream_label(waits_for),
            outcome: e.outcome.clone(),
        }
    }

    /// The whole journal in public form.
    pub(crate) fn journal(&self) -> Vec<JournalEntry> {
        (0..self.entries.len()).map(|i| self.public(i)).collect()
    }

    /// Eager work that escaped this capture: all of it from the capture's own thread, and from
    /// other threads what conflicts (a write on either side) with memory the capture touched.
    pub(crate) fn escapes(&self) -> Vec<Escape> {
        let mut out = Vec::new();
        for (i, e) in self.entries.iter().enumerate() {
            if e.outcome != Outcome::Eager {
                continue;
            }
            let touching = self.touching(&e.accesses);
            let conflict = touching.iter().any(|&t| {
                self.entries[t].accesses.iter().any(|a| {
                    e.accesses
                        .iter()
                        .any(|b| a.overlaps(b) && (writes(a) || writes(b)))
                })
            });
            if e.thread.0 == self.thread || conflict {
                out.push(Escape {
                    capture: self.label.clone(),
                    op: self.public(i),
                    touching: touching.iter().map(|&t| self.public(t)).collect(),
                });
            }
        }
        out
    }
}

/// A new capture's record.
pub(crate) fn new_record(
    label: &str,
    options: CaptureOptions,
    origin: &Stream,
    began_at: SourceLine,
) -> CaptureRecord {
    let (thread, thread_label) = crate::ranges::thread();
    let mut streams = HashMap::new();
    streams.insert(origin.raw() as usize, origin.label.clone());
    CaptureRecord {
        keep: Vec::new(),
        label: label.to_string(),
        options,
        origin: origin.raw() as usize,
        began_at,
        thread,
        thread_label,
        entries: Vec::new(),
        streams,
        last_stream: origin.raw() as usize,
        last_label: None,
        last_accesses: None,
    }
}
