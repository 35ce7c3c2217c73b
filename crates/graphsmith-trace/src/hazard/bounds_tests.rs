//! The bounds choice without a GPU: the side-stream program of the GPU suite
//! (tests/programs/torch_hazards.py) as read-back data, checked with PyTorch's blocks and with
//! the driver's segments.

use super::*;
use crate::hazard::tests::{self, Arg};
use crate::hazard::{resolver, HazardCheck, RawEdge, RawNode};

/// One caching-allocator segment holding three tensors' blocks: `src`, `lo`, `hi`.
const SEGMENT: u64 = 0x7f00_0000_0000;
const SEGMENT_BYTES: u64 = 2 << 20;
const SRC: u64 = SEGMENT;
const LO: u64 = SEGMENT + 0x8_0000;
const HI: u64 = SEGMENT + 0xc_0000;
const BLOCK: u64 = 0x4_0000;

/// The snapshot text the traced process writes for that segment (src is 512 KiB).
fn snapshot_text() -> String {
    format!(
        "S {SEGMENT} -\nB {SRC} {} active_allocated\nB {LO} {BLOCK} active_allocated\nB {HI} {BLOCK} active_allocated\nB {} {} inactive\n",
        2 * BLOCK,
        HI + BLOCK,
        SEGMENT_BYTES - (HI + BLOCK - SEGMENT)
    )
}

fn kernel(symbol: &str, pointers: &[u64]) -> RawNode {
    let args: Vec<Arg> = pointers.iter().map(|p| Arg::Ptr(*p)).collect();
    tests::kernel(symbol, &args)
}

/// n0 and n1 (the two side streams) write `lo` and `hi` from `src`; n2 (the main stream) reads
/// both. Joined: both side streams are ordered before n2; racy: only n0.
fn side_streams(joined: bool) -> RawGraph {
    // copy(float const*, float*): reads the first pointer; the second's direction is unknown.
    let copy = "_Z4copyPKfPf";
    // add(float const*, float const*): reads both.
    let add = "_Z3addPKfS0_";
    let mut edges = vec![RawEdge::plain(0, 2)];
    if joined {
        edges.push(RawEdge::plain(1, 2));
    }
    RawGraph {
        nodes: vec![
            kernel(copy, &[SRC, LO]),
            kernel(copy, &[SRC + BLOCK, HI]),
            kernel(add, &[LO, HI]),
        ],
        edges,
    }
}

fn total(raw: &RawGraph, snapshot: Result<Snapshot, String>) -> (u64, Option<Bounds>) {
    let segments = [(SEGMENT, SEGMENT_BYTES)];
    let check = check_bounded(raw, snapshot, &mut resolver(&segments));
    match check {
        HazardCheck::Checked(c) => (c.total, c.bounds),
        other => panic!("not checked: {other:?}"),
    }
}

#[test]
fn blocks_keep_two_tensors_of_one_segment_apart() {
    let blocks = || Ok(parse_snapshot(&snapshot_text()));
    let (joined, bounds) = total(&side_streams(true), blocks());
    assert_eq!(joined, 0, "joined: no hazard with the allocator's blocks");
    let bounds = bounds.unwrap();
    assert_eq!(bounds.kind, BoundsKind::AllocatorBlocks);
    assert_eq!((bounds.blocks, bounds.segments, bounds.dropped), (4, 1, 0));
    assert_eq!((total(&side_streams(false), blocks()).0), 1, "racy: one");

    // The driver's segment: both writers reach the segment's end, so they overlap.
    let (joined, bounds) = total(&side_streams(true), Err("not a Python process".into()));
    assert!(joined > 0, "segments cry wolf on the joined program");
    assert_eq!(
        bounds.unwrap().line(),
        "bounds: the driver's allocations (cuMemGetAddressRange; for PyTorch, whole segments): not a Python process"
    );
    assert!(total(&side_streams(false), Err(String::new())).0 > 1);
}

#[test]
fn the_racy_hazard_is_on_the_block_of_hi() {
    let segments = [(SEGMENT, SEGMENT_BYTES)];
    let snapshot = Ok(parse_snapshot(&snapshot_text()));
    let check = check_bounded(&side_streams(false), snapshot, &mut resolver(&segments));
    let HazardCheck::Checked(c) = check else {
        panic!("not checked");
    };
    let h = &c.hazards[0];
    assert_eq!((h.first.node, h.second.node), (1, 2));
    assert_eq!((h.buffer, h.buffer_bytes), (HI, Some(BLOCK)));
    assert_eq!(
        h.region.as_deref(),
        Some("block 0x7f00000c0000+262144 (segment 0x7f0000000000)")
    );
    let mut out = String::new();
    crate::hazard::render_check(&mut out, &HazardCheck::Checked(c), "  ");
    assert_eq!(
        out,
        "  warning: 1 possible hazard: nodes that no path of edges orders touch the same bytes through a pointer of unknown direction, which may write (3 nodes, 1 edge; 3 nodes with 6 memory accesses checked)
    hazard 1: possible write on block 0x7f00000c0000+262144 (segment 0x7f0000000000), bytes [0, 262144)
      n1 kernel copy(float const*, float*) may read or write
      n2 kernel add(float const*, float const*) reads
      no path of edges orders them; fix: add the edge n1 -> n2 ('copy' -> 'add')
    bounds: PyTorch's caching-allocator blocks (4 blocks in 1 segment, torch.cuda.memory_snapshot() at instantiation); other pointers by the driver's allocations
"
    );
}

#[test]
fn the_snapshot_text_is_read_as_graphsmith_check_reads_the_snapshot() {
    let s = parse_snapshot(
        "S 4096 -\nB 4096 512 active_allocated\nB 4608 512 inactive\nB 5120 0 inactive\n\
         S 1048576 1,7\nB 1048576 256 active_pending_free\nB x 1 active_allocated\nbad line\n\
         S 2097152 0,0\nB 2097152 64 -\n",
    );
    assert_eq!(s.segments, 3);
    let labels: Vec<&str> = s.regions.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "block 0x1000+512 (segment 0x1000)",
            "free block 0x1200+512 (segment 0x1000)",
            "block 0x100000+256 (segment 0x100000, pool 1,7)",
            "free block 0x200000+64 (segment 0x200000)",
        ]
    );
    assert_eq!(parse_snapshot("B 1 2 active_allocated\n").regions, []);
    let (map, bounds) = choose(Ok(Snapshot::default()));
    assert!(map.is_empty());
    assert_eq!(bounds.kind, BoundsKind::DriverAllocations);
    assert_eq!(
        bounds.why.as_deref(),
        Some("PyTorch's caching allocator held no block")
    );
    let overlapping = Snapshot {
        regions: vec![Region::new(0, 16, "a"), Region::new(8, 16, "b")],
        segments: 1,
    };
    let (_, bounds) = choose(Ok(overlapping));
    assert_eq!((bounds.blocks, bounds.dropped), (1, 1));
    assert!(bounds.line().contains("1 overlapping or empty left out"));
}
