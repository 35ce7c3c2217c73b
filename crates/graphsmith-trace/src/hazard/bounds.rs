//! What bounds a kernel's pointer in `--hazards`: PyTorch's caching-allocator blocks when the
//! traced process runs PyTorch, else the driver's allocations.
//!
//! The driver knows only its own allocations (`cuMemGetAddressRange`): for PyTorch a whole
//! caching-allocator segment, which holds many tensors. A kernel pointer is taken to reach from
//! where it points to the end of what bounds it, so two tensors of one segment written by two
//! unordered nodes would look like one buffer written twice. `graphsmith.check` bounds them by
//! the allocator's blocks (`torch.cuda.memory_snapshot()`); the tracer does the same at each
//! instantiation when it can read the snapshot in the traced process
//! (`src/inject/python_eval.rs`), through the one conversion
//! (`graphsmith_analysis::readback::build_with` with a [`MemoryMap`]). The snapshot arrives as
//! text, one line per segment and block ([`parse_snapshot`]), labelled as `graphsmith.check`'s
//! `regions_from_snapshot` labels them.

use graphsmith_analysis::readback::{build_with, Built, MemoryMap, RawGraph, Region};
use serde::{Deserialize, Serialize};

use super::{check_built, HazardCheck};

/// Which bounds a graph's check used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundsKind {
    /// PyTorch's caching-allocator blocks (`torch.cuda.memory_snapshot()` at instantiation),
    /// then the driver's allocations for pointers outside every block.
    AllocatorBlocks,
    /// The driver's allocations only (`cuMemGetAddressRange`; for PyTorch, whole segments).
    DriverAllocations,
}

/// The bounds of one graph's check, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    pub kind: BoundsKind,
    /// Blocks in the map (live and free ones), when the allocator's blocks were used.
    #[serde(default)]
    pub blocks: u64,
    /// Segments the snapshot listed.
    #[serde(default)]
    pub segments: u64,
    /// Blocks left out of the map (empty, or overlapping another).
    #[serde(default)]
    pub dropped: u64,
    /// Why the allocator's blocks were not used, for driver allocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Bounds {
    /// The driver's allocations, and why.
    pub fn driver(why: impl Into<String>) -> Bounds {
        Bounds {
            kind: BoundsKind::DriverAllocations,
            blocks: 0,
            segments: 0,
            dropped: 0,
            why: Some(why.into()),
        }
    }

    /// The report's line, without indentation.
    pub fn line(&self) -> String {
        match self.kind {
            BoundsKind::AllocatorBlocks => {
                let dropped = if self.dropped > 0 {
                    format!(", {} overlapping or empty left out", self.dropped)
                } else {
                    String::new()
                };
                format!(
                    "bounds: PyTorch's caching-allocator blocks ({} in {}{dropped}, torch.cuda.memory_snapshot() at instantiation); other pointers by the driver's allocations",
                    count(self.blocks, "block"),
                    count(self.segments, "segment")
                )
            }
            BoundsKind::DriverAllocations => format!(
                "bounds: the driver's allocations (cuMemGetAddressRange; for PyTorch, whole segments){}",
                self.why
                    .as_deref()
                    .map_or(String::new(), |w| format!(": {w}"))
            ),
        }
    }
}

fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// Block states of `torch.cuda.memory_snapshot()` whose block holds a live tensor (as
/// `graphsmith._check.ACTIVE_STATES`).
const ACTIVE_STATES: [&str; 2] = ["active_allocated", "active_pending_free"];

/// A parsed snapshot: regions labelled as `graphsmith.check` labels them, and the segments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub regions: Vec<Region>,
    pub segments: u64,
}

/// Reads the snapshot text the traced process wrote: one line per segment,
/// `S <address> <pool>` (pool: the ids joined by commas, `-` for the default pool), followed by
/// a line per block, `B <address> <size> <state>`. Blocks of every device are kept (device
/// addresses are unique in the process). Lines that do not parse are skipped; a block before
/// any segment too.
pub fn parse_snapshot(text: &str) -> Snapshot {
    let mut out = Snapshot::default();
    let mut segment: Option<(u64, String)> = None;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["S", address, pool] => {
                let Ok(base) = address.parse::<u64>() else {
                    segment = None;
                    continue;
                };
                let ids: Vec<&str> = pool.split(',').collect();
                let pool = if *pool == "-" || ids.iter().all(|i| i.trim() == "0") {
                    String::new()
                } else {
                    format!(", pool {pool}")
                };
                out.segments += 1;
                segment = Some((base, pool));
            }
            ["B", address, size, rest @ ..] => {
                let (Some((base, pool)), Ok(address), Ok(size)) =
                    (&segment, address.parse::<u64>(), size.parse::<u64>())
                else {
                    continue;
                };
                if size == 0 {
                    continue;
                }
                let state = rest.first().copied().unwrap_or("");
                let kind = if ACTIVE_STATES.contains(&state) {
                    "block"
                } else {
                    "free block"
                };
                out.regions.push(Region::new(
                    address,
                    size,
                    format!("{kind} {address:#x}+{size} (segment {base:#x}{pool})"),
                ));
            }
            _ => {}
        }
    }
    out
}

/// The memory map and the bounds of a check: the allocator's blocks when a snapshot with at
/// least one block was read, else the driver's allocations and why.
pub fn choose(snapshot: Result<Snapshot, String>) -> (MemoryMap, Bounds) {
    match snapshot {
        Ok(s) if !s.regions.is_empty() => {
            let given = s.regions.len() as u64;
            let map = MemoryMap::new(s.regions);
            let bounds = Bounds {
                kind: BoundsKind::AllocatorBlocks,
                blocks: given - map.dropped() as u64,
                segments: s.segments,
                dropped: map.dropped() as u64,
                why: None,
            };
            (map, bounds)
        }
        Ok(_) => (
            MemoryMap::default(),
            Bounds::driver("PyTorch's caching allocator held no block"),
        ),
        Err(why) => (MemoryMap::default(), Bounds::driver(why)),
    }
}

/// The model of a read-back graph with the bounds [`choose`] picks from `snapshot`.
pub fn build_bounded(
    raw: &RawGraph,
    snapshot: Result<Snapshot, String>,
    resolve: &mut dyn FnMut(u64) -> Option<(u64, u64)>,
) -> (Built, Bounds) {
    let (map, bounds) = choose(snapshot);
    (build_with(raw, "instantiated", &map, resolve), bounds)
}

/// The hazard check of a model [`build_bounded`] built, saying which bounds it used.
pub fn check_with_bounds(built: &Built, bounds: Bounds) -> HazardCheck {
    match check_built(built) {
        HazardCheck::Checked(mut c) => {
            c.bounds = Some(bounds);
            HazardCheck::Checked(c)
        }
        other => other,
    }
}

/// [`super::check`] with the bounds [`choose`] picks from `snapshot`; the result says which.
pub fn check_bounded(
    raw: &RawGraph,
    snapshot: Result<Snapshot, String>,
    resolve: &mut dyn FnMut(u64) -> Option<(u64, u64)>,
) -> HazardCheck {
    let (built, bounds) = build_bounded(raw, snapshot, resolve);
    check_with_bounds(&built, bounds)
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
