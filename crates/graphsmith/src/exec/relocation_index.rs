//! The index an executable keeps for [`crate::Exec::relocate`]: for every kernel node, where in
//! its argument bytes a pointer into a tracked allocation sits (argument, byte, allocation,
//! offset). It is built once, from the model, and kept across swaps: a swap then touches only
//! the nodes whose pointers lead into a moved allocation, and rewrites only those words,
//! without scanning any argument or copying the model. After a swap the moved allocations are
//! tracked at their new addresses, so the next swap (back, or onward) finds them too.
//!
//! Pure bookkeeping over the model: no driver call, so it is tested on the CPU.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use graphsmith_model::{self as model, NodeKind};

/// A tracked allocation: where it starts and how many bytes it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub base: u64,
    pub bytes: u64,
}

/// One pointer word in a kernel node's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Site {
    /// The argument, by position.
    pub arg: u32,
    /// The word's first byte within the argument's bytes.
    pub at: u32,
    /// The tracked allocation it points into.
    pub slot: u32,
    /// Its offset from that allocation's start.
    pub offset: u64,
}

/// One declared access of a node to a tracked allocation (its buffer is the allocation's
/// start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Touch {
    /// In `accesses_before_wait` rather than `accesses`.
    pub before_wait: bool,
    /// Its position in that list.
    pub at: u32,
    pub slot: u32,
}

/// A node with a pointer word into, or a declared access to, a tracked allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IndexedNode {
    /// The node's index in the model.
    pub node: usize,
    /// Whether its kernel (function and parameter layout) is known, so that it can be written
    /// to the executable.
    pub known: bool,
    /// Its pointer words (a kernel's; none for other nodes).
    pub sites: Vec<Site>,
    /// Its declared accesses to tracked allocations, which follow a move too: also where no
    /// word points into the allocation (e.g. the last node of a library call, which is given
    /// the whole call's accesses).
    pub touches: Vec<Touch>,
}

impl IndexedNode {
    /// Whether one of its pointer words leads into an allocation `plan` moves (then the node
    /// is set in the executable).
    pub(crate) fn words_move(&self, plan: &Plan) -> bool {
        self.sites.iter().any(|s| plan.move_of(s.slot).is_some())
    }
    /// Whether one of its declared accesses names an allocation `plan` moves.
    pub(crate) fn accesses_move(&self, plan: &Plan) -> bool {
        self.touches.iter().any(|t| plan.move_of(t.slot).is_some())
    }
}

/// Hashes an address: allocation starts are aligned (their low bits are zero), so a multiply
/// and a fold spread them; far cheaper than the default hasher on a swap's lookups.
#[derive(Default)]
pub(crate) struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = x ^ (x >> 29);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type ByBase = HashMap<u64, u32, BuildHasherDefault<AddressHasher>>;

/// The pointer sites of every kernel node, over a set of tracked allocations.
#[derive(Clone, Debug)]
pub(crate) struct RelocationIndex {
    slots: Vec<Range>,
    by_base: ByBase,
    nodes: Vec<IndexedNode>,
    /// Copy and set nodes whose operands lie in a tracked allocation, with that allocation:
    /// relocation rewrites kernel arguments only, so moving it is refused. (A kernel's
    /// declared accesses are not asked: a library call's are all given to its last node,
    /// whichever of its kernels takes which pointer; a pointer hidden from the words, e.g. in
    /// a descriptor, is for the caller's verification to find.)
    opaque: Vec<(usize, u32)>,
}

/// What one relocation moves, by tracked allocation: for each slot, the move that moves it.
pub(crate) struct Plan {
    by_slot: Vec<Option<u32>>,
}

impl Plan {
    /// The move (its position in the caller's list) of tracked allocation `slot`, if moved.
    pub(crate) fn move_of(&self, slot: u32) -> Option<usize> {
        self.by_slot
            .get(slot as usize)
            .copied()
            .flatten()
            .map(|m| m as usize)
    }
}

impl RelocationIndex {
    /// Indexes every 8-byte-aligned word of every kernel node's arguments (alignment counted
    /// from the argument's offset in the parameter buffer, so pointers inside struct parameters
    /// are found too) that points into one of `ranges`. `known(node)` says whether the node's
    /// kernel can be written to the executable. Ranges with the same start are tracked once.
    pub(crate) fn build(
        graph: &model::Graph,
        known: impl Fn(usize) -> bool,
        ranges: impl IntoIterator<Item = Range>,
    ) -> RelocationIndex {
        let mut slots: Vec<Range> = Vec::new();
        let mut by_base = ByBase::default();
        for r in ranges {
            if r.bytes == 0 || by_base.contains_key(&r.base) {
                continue;
            }
            by_base.insert(r.base, slots.len() as u32);
            slots.push(r);
        }
        // Sorted by start for the build's lookups: most words (sizes, strides, flags) fall
        // outside [lo, hi) and are rejected by two comparisons.
        let mut sorted: Vec<u32> = (0..slots.len() as u32).collect();
        sorted.sort_by_key(|&s| slots[s as usize].base);
        let lo = sorted.first().map_or(u64::MAX, |&s| slots[s as usize].base);
        let hi = slots.iter().map(|r| r.base + r.bytes).max().unwrap_or(0);
        let slot_of = |value: u64| -> Option<(u32, u64)> {
            if value < lo || value >= hi {
                return None;
            }
            let i = sorted.partition_point(|&s| slots[s as usize].base <= value);
            let s = sorted[i.checked_sub(1)?];
            let r = slots[s as usize];
            (value < r.base + r.bytes).then_some((s, value - r.base))
        };
        let (mut nodes, mut opaque) = (Vec::new(), Vec::new());
        for (index, node) in graph.nodes.iter().enumerate() {
            let mut sites = Vec::new();
            let args = match &node.kind {
                NodeKind::Kernel(k) => k.args.as_slice(),
                _ => &[],
            };
            for (a, arg) in args.iter().enumerate() {
                let mut j = (8 - arg.offset as usize % 8) % 8;
                while j + 8 <= arg.bytes.len() {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(&arg.bytes[j..j + 8]);
                    if let Some((slot, offset)) = slot_of(u64::from_le_bytes(word)) {
                        sites.push(Site {
                            arg: a as u32,
                            at: j as u32,
                            slot,
                            offset,
                        });
                    }
                    j += 8;
                }
            }
            // A copy's or set's operands are not kernel arguments: relocation cannot move them.
            let operands = match &node.kind {
                NodeKind::Memset(m) => [Some(m.dst), None],
                NodeKind::Memcpy(c) => [Some(c.src.address), Some(c.dst.address)],
                _ => [None, None],
            };
            for (slot, _) in operands.into_iter().flatten().filter_map(slot_of) {
                if !opaque.contains(&(index, slot)) {
                    opaque.push((index, slot));
                }
            }
            let by_base = &by_base;
            let lists = [(false, &node.accesses), (true, &node.accesses_before_wait)];
            let touches: Vec<Touch> = lists
                .into_iter()
                .flat_map(|(before_wait, list)| {
                    list.iter().enumerate().filter_map(move |(at, a)| {
                        let slot = *by_base.get(&a.buffer)?;
                        Some(Touch {
                            before_wait,
                            at: at as u32,
                            slot,
                        })
                    })
                })
                .collect();
            if !sites.is_empty() || !touches.is_empty() {
                nodes.push(IndexedNode {
                    node: index,
                    known: known(index),
                    sites,
                    touches,
                });
            }
        }
        RelocationIndex {
            slots,
            by_base,
            nodes,
            opaque,
        }
    }

    /// The tracked allocations, at their current addresses.
    pub(crate) fn ranges(&self) -> impl Iterator<Item = Range> + '_ {
        self.slots.iter().copied()
    }

    /// The tracked allocation that starts at `base`.
    pub(crate) fn slot_at(&self, base: u64) -> Option<u32> {
        self.by_base.get(&base).copied()
    }

    /// The plan of moving each `(old start, bytes)` of `moves`; `None` when one of them is not
    /// tracked with that size (the index must then be built again over it).
    pub(crate) fn plan(&self, moves: impl IntoIterator<Item = Range>) -> Option<Plan> {
        let mut by_slot = vec![None; self.slots.len()];
        for (m, r) in moves.into_iter().enumerate() {
            let slot = self.slot_at(r.base)?;
            if self.slots[slot as usize].bytes != r.bytes {
                return None;
            }
            by_slot[slot as usize] = Some(m as u32);
        }
        Some(Plan { by_slot })
    }

    /// The nodes with a pointer word into, or a declared access to, an allocation `plan`
    /// moves, in node order.
    pub(crate) fn moved_nodes<'a>(
        &'a self,
        plan: &'a Plan,
    ) -> impl Iterator<Item = &'a IndexedNode> + 'a {
        self.nodes
            .iter()
            .filter(move |n| n.words_move(plan) || n.accesses_move(plan))
    }

    /// The first copy or set node whose operands lie in an allocation `plan` moves, with that
    /// allocation's move.
    pub(crate) fn first_opaque(&self, plan: &Plan) -> Option<(usize, usize)> {
        self.opaque
            .iter()
            .find_map(|&(node, slot)| Some((node, plan.move_of(slot)?)))
    }

    /// Tracks each moved allocation at its new start (`new_base(move)`), once the move is done.
    /// Returns `false`, and the index must be dropped, when a new start is already tracked for
    /// another allocation (an address reused while the index still tracked it).
    pub(crate) fn rebase(&mut self, plan: &Plan, new_base: impl Fn(usize) -> u64) -> bool {
        let mut moved = Vec::new();
        for (slot, m) in plan.by_slot.iter().enumerate() {
            if let Some(m) = m {
                let old = self.slots[slot].base;
                self.by_base.remove(&old);
                moved.push((slot, new_base(*m as usize)));
            }
        }
        let mut clean = true;
        for (slot, base) in moved {
            self.slots[slot].base = base;
            clean &= self.by_base.insert(base, slot as u32).is_none();
        }
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphsmith_model::{Dim3, KernelArg, KernelParams};

    fn kernel(graph: &mut model::Graph, label: &str, args: Vec<KernelArg>) {
        let one = Dim3 { x: 1, y: 1, z: 1 };
        graph.add_node(
            label,
            NodeKind::Kernel(KernelParams {
                name: label.into(),
                grid: one,
                block: one,
                shared_mem_bytes: 0,
                args,
                cluster: None,
            }),
        );
    }

    fn word(offset: u32, value: u64) -> KernelArg {
        KernelArg {
            offset,
            bytes: value.to_le_bytes().to_vec(),
        }
    }

    fn read_of(buffer: u64) -> graphsmith_model::Access {
        graphsmith_model::Access {
            buffer,
            label: "x".into(),
            offset: 0,
            len: 8,
            mode: graphsmith_model::AccessMode::Read,
        }
    }

    const A: Range = Range {
        base: 0x7f00_0000_0000,
        bytes: 4096,
    };
    const B: Range = Range {
        base: 0x7f00_0001_0000,
        bytes: 256,
    };

    fn graph() -> model::Graph {
        let mut g = model::Graph::new("g");
        // A pointer into A at offset 16 and a size that points nowhere.
        kernel(&mut g, "k0", vec![word(0, A.base + 16), word(8, 4096)]);
        // No pointer into a tracked allocation.
        kernel(&mut g, "k1", vec![word(0, 12)]);
        g.add_node(
            "set",
            NodeKind::Other {
                name: "memset".into(),
            },
        );
        // A struct parameter at offset 4 of the buffer: bytes 4..8 are padding, its aligned
        // word (bytes 4..12 of the argument) points at B's start.
        let mut s = vec![0u8; 16];
        s[4..12].copy_from_slice(&B.base.to_le_bytes());
        kernel(
            &mut g,
            "k3",
            vec![KernelArg {
                offset: 4,
                bytes: s,
            }],
        );
        g
    }

    #[test]
    fn every_pointer_word_is_found_with_its_allocation_and_offset() {
        let mut g = graph();
        g.nodes[3].accesses_before_wait.push(read_of(B.base));
        let index = RelocationIndex::build(&g, |i| i != 3, [A, B, A]);
        assert_eq!(index.ranges().collect::<Vec<_>>(), vec![A, B]);
        assert_eq!(
            index.nodes,
            vec![
                IndexedNode {
                    node: 0,
                    known: true,
                    sites: vec![Site {
                        arg: 0,
                        at: 0,
                        slot: 0,
                        offset: 16
                    }],
                    touches: vec![],
                },
                IndexedNode {
                    node: 3,
                    known: false,
                    sites: vec![Site {
                        arg: 0,
                        at: 4,
                        slot: 1,
                        offset: 0
                    }],
                    touches: vec![Touch {
                        before_wait: true,
                        at: 0,
                        slot: 1
                    }],
                },
            ]
        );
    }

    #[test]
    fn a_plan_selects_only_the_nodes_of_moved_allocations() {
        let index = RelocationIndex::build(&graph(), |_| true, [A, B]);
        let plan = index.plan([B]).expect("B is tracked");
        assert_eq!(plan.move_of(1), Some(0));
        assert_eq!(plan.move_of(0), None);
        let nodes: Vec<usize> = index.moved_nodes(&plan).map(|n| n.node).collect();
        assert_eq!(nodes, vec![3]);
        let nothing = index.plan([]).expect("an empty plan");
        assert_eq!(index.moved_nodes(&nothing).count(), 0);
    }

    #[test]
    fn an_untracked_or_resized_allocation_asks_for_a_new_index() {
        let index = RelocationIndex::build(&graph(), |_| true, [A]);
        assert!(index.plan([B]).is_none());
        let resized = Range {
            base: A.base,
            bytes: 8,
        };
        assert!(index.plan([resized]).is_none());
    }

    #[test]
    fn a_rebased_index_finds_the_moved_allocation_at_its_new_start() {
        let mut index = RelocationIndex::build(&graph(), |_| true, [A, B]);
        let new_a = 0x7f00_0100_0000;
        let plan = index.plan([A]).expect("A is tracked");
        assert!(index.rebase(&plan, |_| new_a));
        assert_eq!(index.slot_at(A.base), None);
        assert_eq!(index.slot_at(new_a), Some(0));
        // The next swap moves it on from the new start; the sites stay.
        let moved = Range {
            base: new_a,
            bytes: A.bytes,
        };
        let plan = index.plan([moved]).expect("tracked at the new start");
        let nodes: Vec<usize> = index.moved_nodes(&plan).map(|n| n.node).collect();
        assert_eq!(nodes, vec![0]);
        // Two allocations swapping starts in one move is not a collision.
        let plan = index.plan([moved, B]).expect("both tracked");
        assert!(index.rebase(&plan, |m| [B.base, new_a][m]));
        assert_eq!(index.slot_at(B.base), Some(0));
        assert_eq!(index.slot_at(new_a), Some(1));
    }

    #[test]
    fn a_copy_or_set_node_on_a_moved_allocation_is_named() {
        use graphsmith_model::{MemRef, MemcpyParams, MemorySpace, MemsetParams};
        let mut g = graph();
        // A set of B's second half, a copy from A into an untracked buffer.
        g.nodes[2].kind = NodeKind::Memset(MemsetParams {
            dst: B.base + 128,
            element_size: 4,
            value: 0,
            width: 32,
            height: 1,
            pitch: 0,
        });
        let device = |address| MemRef {
            space: MemorySpace::Device,
            address,
        };
        g.add_node(
            "copy",
            NodeKind::Memcpy(MemcpyParams {
                src: device(A.base),
                dst: device(0x1000),
                bytes: 64,
            }),
        );
        // A kernel's declared access without a pointer word is not refused...
        g.nodes[1].accesses.push(read_of(0x1000));
        g.nodes[1].accesses.push(read_of(B.base));
        let index = RelocationIndex::build(&g, |_| true, [A, B]);
        assert_eq!(index.opaque, vec![(2, 1), (4, 0)]);
        // ... but its access follows a move of B (with no driver call: no word moves).
        let k1 = index
            .nodes
            .iter()
            .find(|n| n.node == 1)
            .expect("k1 is indexed");
        let b_access = Touch {
            before_wait: false,
            at: 1,
            slot: 1,
        };
        assert_eq!((k1.sites.len(), k1.touches.clone()), (0, vec![b_access]));
        let b = index.plan([B]).expect("B is tracked");
        assert!(k1.accesses_move(&b) && !k1.words_move(&b));
        let a = index.plan([A]).expect("A is tracked");
        assert!(!k1.accesses_move(&a));
        let only_b = index.plan([B]).expect("B is tracked");
        assert_eq!(index.first_opaque(&only_b), Some((2, 0)));
        let only_a = index.plan([A]).expect("A is tracked");
        assert_eq!(index.first_opaque(&only_a), Some((4, 0)));
        let neither = index.plan([]).expect("an empty plan");
        assert_eq!(index.first_opaque(&neither), None);
    }

    #[test]
    fn a_new_start_that_is_already_tracked_drops_the_index() {
        let mut index = RelocationIndex::build(&graph(), |_| true, [A, B]);
        let plan = index.plan([A]).expect("A is tracked");
        assert!(!index.rebase(&plan, |_| B.base));
    }
}
