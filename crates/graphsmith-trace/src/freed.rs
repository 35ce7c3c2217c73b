//! `--freed`: a graph launched after memory its nodes touch was freed.
//!
//! The tracer keeps the live allocations (the driver's allocations and frees, stream-ordered and
//! pool ones, virtual memory maps and unmaps) with the call that made each, and, for every
//! instantiated executable, the byte ranges its nodes touch (the read-back's accesses, as
//! `--hazards` finds them). A free that overlaps a range some executable touches is recorded
//! with its call; at the next launch of such an executable (`cuGraphLaunch`, at the callback's
//! entry, before the launch runs) each node whose bytes were freed since the executable was
//! instantiated is reported once: an [`crate::event::Event::Freed`] event holding a
//! [`FreedLaunch`].
//!
//! Cost: a launch asks only whether a free was recorded since that executable was last checked
//! (a counter comparison); a free is compared with the touched ranges (sorted, a binary search
//! per executable), and only a free that overlaps one pays for its stacks. [`Tracker`] is the
//! pure bookkeeping, generic over what a call site is, so that it is tested without a GPU.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt::Write;

use graphsmith_model::Graph;

pub use crate::event::freed::{FreedLaunch, Site};

/// Findings recorded per executable at most.
pub const MAX_PER_GRAPH: usize = 16;

/// Bytes one node touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Touch {
    pub start: u64,
    pub end: u64,
    pub node: u32,
    pub kind: String,
    pub label: String,
}

/// The ranges a read-back model's nodes touch (a child graph node's include its children's),
/// sorted by start.
pub fn touches(graph: &Graph) -> Vec<Touch> {
    let mut out: Vec<Touch> = graph
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(i, n)| {
            n.accesses.iter().filter(|a| a.len > 0).map(move |a| {
                let start = a.buffer.saturating_add(a.offset);
                Touch {
                    start,
                    end: start.saturating_add(a.len),
                    node: i as u32,
                    kind: n.kind.name().to_string(),
                    label: if n.label.is_empty() {
                        format!("{} n{i}", n.kind.name())
                    } else {
                        n.label.clone()
                    },
                }
            })
        })
        .collect();
    out.sort_by_key(|t| (t.start, t.end));
    out
}

/// A recorded free.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Freed<S> {
    pub base: u64,
    pub size: u64,
    pub allocated: Option<S>,
    pub freed: S,
}

/// A node of an executable that touches freed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding<S> {
    pub exec: u64,
    pub graph: u64,
    pub touch: Touch,
    /// The freed bytes the node touches.
    pub start: u64,
    pub len: u64,
    pub freed: Freed<S>,
}

struct Watched {
    graph: u64,
    touches: Vec<Touch>,
    /// Frees numbered below this one were checked.
    checked: u64,
    reported: HashSet<u32>,
}

impl Watched {
    /// Touches overlapping `[base, end)`.
    fn overlapping(&self, base: u64, end: u64) -> impl Iterator<Item = &Touch> {
        let upto = self.touches.partition_point(|t| t.start < end);
        self.touches[..upto].iter().filter(move |t| t.end > base)
    }
}

/// The live allocations, the recorded frees and the watched executables.
pub struct Tracker<S> {
    live: BTreeMap<u64, (u64, S)>,
    frees: VecDeque<Freed<S>>,
    /// The number of the free at the front of `frees`.
    first: u64,
    graphs: HashMap<u64, Watched>,
}

impl<S> Default for Tracker<S> {
    fn default() -> Self {
        Tracker {
            live: BTreeMap::new(),
            frees: VecDeque::new(),
            first: 0,
            graphs: HashMap::new(),
        }
    }
}

impl<S: Clone> Tracker<S> {
    /// Frees recorded so far (the number the next one gets).
    pub fn frees_seen(&self) -> u64 {
        self.first + self.frees.len() as u64
    }

    /// An allocation of `[base, base + size)` made at `site`.
    pub fn allocated(&mut self, base: u64, size: u64, site: S) {
        if size == 0 {
            return;
        }
        // The driver reuses addresses: an entry it overlaps is stale.
        let end = base.saturating_add(size);
        let stale: Vec<u64> = self
            .live
            .range(..end)
            .rev()
            .take_while(|(b, (s, _))| b.saturating_add(*s) > base)
            .map(|(b, _)| *b)
            .collect();
        for b in stale {
            self.live.remove(&b);
        }
        self.live.insert(base, (size, site));
    }

    /// The range a free of `base` releases: `size` when the call says it (an unmap), else the
    /// live allocation's size; `None` for an address the tracker never saw allocated.
    pub fn range_of(&self, base: u64, size: Option<u64>) -> Option<(u64, u64)> {
        match size {
            Some(s) if s > 0 => Some((base, s)),
            Some(_) => None,
            None => self.live.get(&base).map(|(s, _)| (base, *s)),
        }
    }

    /// The live allocation holding `address`, as (base, size).
    pub fn holding(&self, address: u64) -> Option<(u64, u64)> {
        let (base, (size, _)) = self.live.range(..=address).next_back()?;
        (address - base < *size).then_some((*base, *size))
    }

    /// Whether an executable watched touches `[base, base + size)`.
    pub fn relevant(&self, base: u64, size: u64) -> bool {
        let end = base.saturating_add(size);
        self.graphs
            .values()
            .any(|g| g.overlapping(base, end).next().is_some())
    }

    /// A free of `[base, base + size)` at `site`: forgets the allocations in it, and records it
    /// when an executable touches it (`relevant`), with the site of the allocation at `base`.
    pub fn freed(&mut self, base: u64, size: u64, site: S) {
        let end = base.saturating_add(size);
        let allocated = self.live.get(&base).map(|(_, s)| s.clone());
        let gone: Vec<u64> = self.live.range(base..end).map(|(b, _)| *b).collect();
        for b in gone {
            self.live.remove(&b);
        }
        if self.relevant(base, size) {
            self.frees.push_back(Freed {
                base,
                size,
                allocated,
                freed: site,
            });
        }
    }

    /// An executable instantiated from `graph`, touching `touches` (sorted by start).
    pub fn instantiated(&mut self, exec: u64, graph: u64, touches: Vec<Touch>) {
        let checked = self.frees_seen();
        self.graphs.insert(
            exec,
            Watched {
                graph,
                touches,
                checked,
                reported: HashSet::new(),
            },
        );
        self.prune();
    }

    /// An executable destroyed (or updated: its ranges are no longer known).
    pub fn forget(&mut self, exec: u64) {
        if self.graphs.remove(&exec).is_some() {
            self.prune();
        }
    }

    /// Whether a launch of `exec` has frees to check.
    pub fn pending(&self, exec: u64) -> bool {
        self.graphs
            .get(&exec)
            .is_some_and(|g| g.checked < self.frees_seen())
    }

    /// A launch of `exec`: the nodes touching bytes freed since it was last checked (each node
    /// once per executable, at most [`MAX_PER_GRAPH`]).
    pub fn launch(&mut self, exec: u64) -> Vec<Finding<S>> {
        let seen = self.frees_seen();
        let first = self.first;
        let Some(g) = self.graphs.get_mut(&exec) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let from = g.checked.max(first);
        for n in from..seen {
            let Some(f) = self.frees.get((n - first) as usize) else {
                continue;
            };
            let end = f.base.saturating_add(f.size);
            let hits: Vec<Touch> = g.overlapping(f.base, end).cloned().collect();
            for t in hits {
                if g.reported.len() >= MAX_PER_GRAPH || !g.reported.insert(t.node) {
                    continue;
                }
                let start = t.start.max(f.base);
                out.push(Finding {
                    exec,
                    graph: g.graph,
                    start,
                    len: t.end.min(end) - start,
                    touch: t,
                    freed: f.clone(),
                });
            }
        }
        g.checked = seen;
        self.prune();
        out
    }

    /// Drops the frees every executable has checked.
    fn prune(&mut self) {
        let keep_from = self
            .graphs
            .values()
            .map(|g| g.checked)
            .min()
            .unwrap_or_else(|| self.frees_seen());
        while self.first < keep_from && self.frees.pop_front().is_some() {
            self.first += 1;
        }
        if self.frees.is_empty() {
            self.first = keep_from.max(self.first);
        }
    }
}

/// The report's lines for the freed-memory launches of one process.
pub fn render(out: &mut String, found: &[FreedLaunch]) {
    for f in found {
        let _ = writeln!(
            out,
            "\nerror: graph {:#x} (exec {:#x}) launched after memory its node n{} ({} '{}') touches was freed; reported before the launch ran",
            f.graph, f.exec, f.node, f.node_kind, f.node_label
        );
        let _ = writeln!(
            out,
            "    bytes: [{:#x}, {:#x}) ({} bytes) of the freed range {:#x}+{}",
            f.start,
            f.start.saturating_add(f.len),
            f.len,
            f.freed_base,
            f.freed_bytes
        );
        let _ = writeln!(
            out,
            "    allocated: {}",
            f.allocated.as_ref().map_or(
                "(not seen: before the tracer attached, or by another allocator)".to_string(),
                Site::line
            )
        );
        let _ = writeln!(out, "    freed:     {}", f.freed.line());
        let _ = writeln!(out, "    launched:  {}", f.launch.line());
        let _ = writeln!(
            out,
            "    fix: keep the memory alive while the graph may be launched, or capture the graph again after the free"
        );
    }
}

#[cfg(test)]
#[path = "freed_tests.rs"]
mod tests;
