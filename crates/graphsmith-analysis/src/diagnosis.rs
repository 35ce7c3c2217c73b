//! Diagnoses of failed captures, built from the capture journal: the *first* offending
//! operation (not the cascade of `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED` that follows), its
//! line, thread, stream and range stack, the real CUDA code, the failure family and the fix.
//!
//! [`diagnose`] is pure: it works on recorded data, so a diagnosis can be built and its text
//! checked without a GPU.

use std::fmt;

use graphsmith_model::Access;

use crate::capture_mode::CaptureMode;
use crate::catalogue::{self, Family};
use crate::cuda_code::CudaCode;
use crate::source_line::SourceLine;

const INVALIDATED: u32 = 901;
const UNJOINED: u32 = 904;
const WRONG_THREAD: u32 = 908;

/// What happened to one journaled operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It became part of the capture.
    Captured,
    /// The driver refused it.
    Failed { call: &'static str, code: CudaCode },
    /// graphsmith refused it before the driver saw it.
    Refused { reason: String },
    /// It ran eagerly, on a stream outside the capture (a candidate silent escape).
    Eager,
}

/// One operation issued through graphsmith while a capture ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    /// Order across all captures of the process.
    pub seq: u64,
    /// The graphsmith operation, e.g. `Stream::launch`.
    pub op: &'static str,
    /// The node's or object's label.
    pub label: String,
    /// The caller's line.
    pub at: SourceLine,
    pub thread: String,
    /// The stream's label; `None` for operations on no stream (`Context::alloc`, `Event::query`).
    pub stream: Option<String>,
    /// Named ranges open at the call, outermost first.
    pub ranges: Vec<String>,
    /// Memory the operation touches.
    pub accesses: Vec<Access>,
    /// For waits and joins: the stream whose work this operation makes its stream wait for.
    pub waits_for: Option<String>,
    pub outcome: Outcome,
}

impl JournalEntry {
    /// The driver's code, when the driver refused the operation.
    pub fn code(&self) -> Option<CudaCode> {
        match &self.outcome {
            Outcome::Failed { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for JournalEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {} (thread {})", what(self), self.at, self.thread)?;
        if !self.ranges.is_empty() {
            write!(f, " in {}", self.ranges.join(" > "))?;
        }
        Ok(())
    }
}

/// A graphsmith operation that ran outside the capture while it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Escape {
    /// The capture it escaped from.
    pub capture: String,
    /// The operation that ran eagerly.
    pub op: JournalEntry,
    /// Captured operations that touch the same memory.
    pub touching: Vec<JournalEntry>,
}

impl Escape {
    /// The catalogue entry for this kind of escape (family: memory dependency).
    pub fn catalogue(&self) -> Option<&'static catalogue::Entry> {
        catalogue::classify(self.op.op, None)
    }

    fn write_touching(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in &self.touching {
            let mut labels: Vec<&str> = t
                .accesses
                .iter()
                .filter(|a| self.op.accesses.iter().any(|b| a.overlaps(b)))
                .map(|a| a.label.as_str())
                .collect();
            labels.dedup();
            write!(
                f,
                "\n    captured {} at {} touches the same memory: {}",
                what(t),
                t.at,
                labels.join(", ")
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Escape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ran eagerly, outside capture '{}': the graph will not replay it",
            self.op, self.capture
        )?;
        self.write_touching(f)
    }
}

/// A stream that joined the capture and never joined back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unjoined {
    pub stream: String,
    /// Its first journaled operation in the capture (usually the fork: a join or wait).
    pub forked: Option<JournalEntry>,
    /// Its last journaled operation (the work nothing waits for).
    pub last: Option<JournalEntry>,
}

/// What the diagnosis blames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// This graphsmith operation failed (or was refused) first; what followed is cascade.
    Op(JournalEntry),
    /// Streams forked into the capture never joined back before it ended.
    Unjoined(Vec<Unjoined>),
    /// The capture was ended on another thread than the one that began it.
    WrongThread { began_on: String, ended_on: String },
    /// The capture was invalidated by a call graphsmith did not issue, made after `after` (the
    /// last operation still captured) and before `before` (the first that saw 901).
    Outside {
        after: Option<JournalEntry>,
        before: Option<JournalEntry>,
    },
    /// An operation ran outside the capture (strict mode).
    Escape(Escape),
}

/// How a capture began and ended (what [`diagnose`] needs besides the journal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureSummary {
    pub label: String,
    /// The stream that began it.
    pub stream: String,
    pub mode: CaptureMode,
    pub began_at: SourceLine,
    pub began_on: String,
    /// Where and on which thread it was ended (`None` when the body failed before).
    pub ended_at: Option<SourceLine>,
    pub ended_on: Option<String>,
    /// What `cuStreamEndCapture` returned, when it failed.
    pub end_code: Option<CudaCode>,
}

/// Why a capture failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    pub capture: CaptureSummary,
    pub cause: Cause,
    pub family: Family,
    /// The real CUDA code of the cause (`None` for refusals and escapes).
    pub code: Option<CudaCode>,
    /// Operations that failed after the cause (mostly 901), oldest first.
    pub cascade: Vec<JournalEntry>,
    /// Silent escapes seen while the capture ran.
    pub escapes: Vec<Escape>,
    /// The catalogue entry (`catalogue::entry(id)`).
    pub catalogue: Option<&'static str>,
    /// Journal length.
    pub journaled: usize,
}

impl Diagnosis {
    /// The operation to blame, when it was issued through graphsmith.
    pub fn offending(&self) -> Option<&JournalEntry> {
        match &self.cause {
            Cause::Op(e) => Some(e),
            Cause::Escape(e) => Some(&e.op),
            Cause::Unjoined(u) => u
                .first()
                .and_then(|u| u.last.as_ref().or(u.forked.as_ref())),
            Cause::WrongThread { .. } | Cause::Outside { .. } => None,
        }
    }
    /// The fix: the catalogue entry's, or one by family.
    pub fn fix(&self) -> &'static str {
        if let Some(e) = self.catalogue.and_then(catalogue::entry) {
            return e.fix;
        }
        match self.family {
            Family::Invalidated => "remove the call that is not allowed while capturing, or move it before begin_capture or after end_capture",
            Family::StaleParameters => "keep everything a graph references alive and unchanged while it can run, or update the executable",
            Family::MemoryDependency => "issue the work on a stream of the capture, and make the origin stream wait for every stream that joined",
        }
    }
}

/// Builds the diagnosis of a capture from its journal (in any order) and how it ended.
pub fn diagnose(
    capture: CaptureSummary,
    journal: &[JournalEntry],
    escapes: Vec<Escape>,
) -> Diagnosis {
    let mut journal: Vec<&JournalEntry> = journal.iter().collect();
    journal.sort_by_key(|e| e.seq);
    let is_901 = |e: &&JournalEntry| e.code().is_some_and(|c| c.number() == INVALIDATED);
    let root = journal
        .iter()
        .find(|e| e.code().is_some() && !is_901(e))
        .copied();
    let end = capture.end_code;
    let (cause, code, catalogue_id) = if let Some(r) = root {
        let entry = catalogue::classify(r.op, r.code().map(|c| c.number()));
        (Cause::Op(r.clone()), r.code(), entry.map(|e| e.id))
    } else if end.is_some_and(|c| c.number() == UNJOINED) {
        (
            Cause::Unjoined(unjoined(&capture, &journal)),
            end,
            Some("unjoined-fork"),
        )
    } else if end.is_some_and(|c| c.number() == WRONG_THREAD) {
        let cause = Cause::WrongThread {
            began_on: capture.began_on.clone(),
            ended_on: capture.ended_on.clone().unwrap_or_default(),
        };
        (cause, end, Some("end-wrong-thread"))
    } else if let Some(refused) = journal
        .iter()
        .find(|e| matches!(e.outcome, Outcome::Refused { .. }) && end.is_none())
    {
        let entry = catalogue::classify(refused.op, None);
        (Cause::Op((*refused).clone()), None, entry.map(|e| e.id))
    } else if let (None, Some(first)) = (end, escapes.first()) {
        let entry = catalogue::classify(first.op.op, None);
        (Cause::Escape(first.clone()), None, entry.map(|e| e.id))
    } else {
        let before = journal.iter().find(|e| is_901(e)).copied();
        let limit = before.map_or(u64::MAX, |b| b.seq);
        let after = journal
            .iter()
            .rfind(|e| e.seq < limit && e.outcome == Outcome::Captured)
            .copied();
        let cause = Cause::Outside {
            after: after.cloned(),
            before: before.cloned(),
        };
        let code = end.or_else(|| before.and_then(|b| b.code()));
        let id = match code {
            Some(c) if c.number() != INVALIDATED => {
                catalogue::classify("", Some(c.number())).map(|e| e.id)
            }
            _ => Some("invalidated-outside"),
        };
        (cause, code, id)
    };
    let root_seq = match &cause {
        Cause::Op(e) => e.seq,
        _ => 0,
    };
    let cascade = journal
        .iter()
        .filter(|e| e.code().is_some() && e.seq > root_seq)
        .filter(|e| !matches!(&cause, Cause::Outside { before: Some(b), .. } if b.seq == e.seq))
        .map(|e| (*e).clone())
        .collect();
    let family = catalogue_id
        .and_then(catalogue::entry)
        .and_then(|e| e.family)
        .or_else(|| code.map(|c| Family::of_code(c.number())))
        .unwrap_or(Family::Invalidated);
    Diagnosis {
        cause,
        family,
        code,
        cascade,
        escapes,
        catalogue: catalogue_id,
        journaled: journal.len(),
        capture,
    }
}

/// Streams that joined the capture and whose last operation nothing on the origin's side waits
/// for: a reverse scan that tracks, per stream, up to which point its work reaches the origin.
fn unjoined(capture: &CaptureSummary, journal: &[&JournalEntry]) -> Vec<Unjoined> {
    use std::collections::HashMap;
    let mut reached: HashMap<&str, u64> = HashMap::new();
    reached.insert(capture.stream.as_str(), u64::MAX);
    for e in journal.iter().rev() {
        let (Some(stream), Some(target)) = (&e.stream, &e.waits_for) else {
            continue;
        };
        if e.outcome != Outcome::Captured {
            continue;
        }
        if reached.get(stream.as_str()).is_some_and(|&r| r >= e.seq) {
            let r = reached.entry(target.as_str()).or_insert(0);
            *r = (*r).max(e.seq);
        }
    }
    let mut out: Vec<Unjoined> = Vec::new();
    for e in journal {
        let Some(stream) = &e.stream else { continue };
        if stream == &capture.stream || e.outcome != Outcome::Captured {
            continue;
        }
        let last = journal
            .iter()
            .rfind(|x| x.stream.as_ref() == Some(stream) && x.outcome == Outcome::Captured)
            .copied();
        let joined = last.is_some_and(|l| reached.get(stream.as_str()).is_some_and(|&r| r > l.seq));
        if joined || out.iter().any(|u| &u.stream == stream) {
            continue;
        }
        out.push(Unjoined {
            stream: stream.clone(),
            forked: Some((*e).clone()),
            last: last.cloned(),
        });
    }
    out
}

fn code_text(code: CudaCode) -> String {
    format!("{} ({})", code.name(), code.number())
}

/// `op 'label' on stream 'x'` (the label is left out when it is the stream's).
fn what(e: &JournalEntry) -> String {
    let mut out = e.op.to_string();
    if e.stream.as_deref() != Some(e.label.as_str()) {
        out.push_str(&format!(" '{}'", e.label));
    }
    if let Some(stream) = &e.stream {
        out.push_str(&format!(" on stream '{stream}'"));
    }
    out
}

/// An entry over several indented lines: what, where, ranges, outcome.
fn block(f: &mut fmt::Formatter<'_>, pad: &str, e: &JournalEntry) -> fmt::Result {
    write!(f, "{}\n{pad}at {} on thread {}", what(e), e.at, e.thread)?;
    if !e.ranges.is_empty() {
        write!(f, "\n{pad}in ranges {}", e.ranges.join(" > "))?;
    }
    match &e.outcome {
        Outcome::Failed { call, code } => {
            write!(f, "\n{pad}{call} returned {}", code_text(*code))
        }
        Outcome::Refused { reason } => write!(f, "\n{pad}refused: {reason}"),
        _ => Ok(()),
    }
}

impl fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.capture;
        write!(f, "capture '{}' failed: {}", c.label, self.family)?;
        if let Some(code) = self.code {
            write!(f, ", {}", code_text(code))?;
        }
        match &self.cause {
            Cause::Op(e) => {
                write!(f, "\n  first offending call: ")?;
                block(f, "    ", e)?;
            }
            Cause::Unjoined(streams) if streams.is_empty() => write!(
                f,
                "\n  a stream forked into the capture outside graphsmith never joined back"
            )?,
            Cause::Unjoined(streams) => {
                for u in streams {
                    write!(f, "\n  stream '{}' never joined back", u.stream)?;
                    if let Some(fork) = &u.forked {
                        write!(f, "\n    forked by ")?;
                        block(f, "      ", fork)?;
                    }
                    if let Some(last) = u.last.as_ref().filter(|l| Some(*l) != u.forked.as_ref()) {
                        write!(f, "\n    last operation: ")?;
                        block(f, "      ", last)?;
                    }
                }
            }
            Cause::WrongThread { began_on, ended_on } => {
                write!(f, "\n  begun on thread {began_on} at {}", c.began_at)?;
                write!(f, "\n  ended on thread {ended_on}")?;
                if let Some(at) = c.ended_at {
                    write!(f, " at {at}")?;
                }
            }
            Cause::Outside { after, before } => {
                write!(
                    f,
                    "\n  invalidated by a call graphsmith did not issue (raw CUDA or a library), made"
                )?;
                match after {
                    Some(a) => {
                        write!(f, "\n  after the last operation still captured: ")?;
                        block(f, "    ", a)?;
                    }
                    None => write!(f, "\n  after the capture began at {}", c.began_at)?,
                }
                match before {
                    Some(b) => {
                        write!(f, "\n  and before the first that saw it invalidated: ")?;
                        block(f, "    ", b)?;
                    }
                    None => write!(f, "\n  and before the capture ended")?,
                }
            }
            Cause::Escape(e) => {
                write!(f, "\n  escaping call: ")?;
                block(f, "    ", &e.op)?;
                write!(
                    f,
                    "\n    ran eagerly, outside the capture: the graph will not replay it"
                )?;
                e.write_touching(f)?;
            }
        }
        if let Some(first) = self.cascade.first() {
            let n = self.cascade.len();
            write!(
                f,
                "\n  cascade: {n} later call{} failed, the first with {}: {} at {}",
                if n == 1 { "" } else { "s" },
                first.code().map(code_text).unwrap_or_default(),
                what(first),
                first.at
            )?;
        }
        write!(
            f,
            "\n  capture: begun on stream '{}' at {} ({:?} mode, thread {})",
            c.stream, c.began_at, c.mode, c.began_on
        )?;
        if let Some(end) = c.end_code {
            write!(f, "; cuStreamEndCapture returned {}", code_text(end))?;
            if let Some(at) = c.ended_at {
                write!(f, " at {at}")?;
            }
        }
        let shown_escape = matches!(self.cause, Cause::Escape(_));
        for e in self.escapes.iter().skip(usize::from(shown_escape)) {
            write!(f, "\n  also: {e}")?;
        }
        write!(f, "\n  fix: {}", self.fix())?;
        if let Some(id) = self.catalogue {
            write!(f, "\n  see: graphsmith explain {id}")?;
        }
        Ok(())
    }
}
