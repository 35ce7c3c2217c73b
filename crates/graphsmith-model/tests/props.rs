//! Property tests on random DAGs and random graphs: topological order, depth, levels, width,
//! longest path against brute force; JSON round trip.

mod common;

use graphsmith_model::{
    Access, AccessMode, ConditionalKind, Dim3, Graph, KernelArg, KernelParams, MemRef,
    MemcpyParams, MemorySpace, MemsetParams, NodeId, NodeKind, Provenance,
};
use proptest::prelude::*;

/// A random DAG: edges go from lower to higher index, then node ids are permuted by `perm` so
/// that edges also run from higher to lower ids.
fn dag() -> impl Strategy<Value = Graph> {
    (0usize..40)
        .prop_flat_map(|n| {
            let pairs = proptest::collection::vec((0..n.max(1), 0..n.max(1)), 0..n * 3 + 1);
            let perm = Just((0..n as u32).collect::<Vec<u32>>()).prop_shuffle();
            (Just(n), pairs, perm, any::<bool>())
        })
        .prop_map(|(n, pairs, perm, permute)| {
            let mut edges = Vec::new();
            for (a, b) in pairs {
                if a != b {
                    let (lo, hi) = (a.min(b), a.max(b));
                    edges.push(if permute {
                        (perm[lo], perm[hi])
                    } else {
                        (lo as u32, hi as u32)
                    });
                }
            }
            common::graph("dag", n, &edges)
        })
}

/// The smallest-ready-first order, brute force: O(N^2 E).
fn brute_order(g: &Graph) -> Vec<NodeId> {
    let n = g.nodes.len();
    let mut done = vec![false; n];
    let mut order = Vec::new();
    while order.len() < n {
        let next = (0..n)
            .find(|&v| {
                !done[v]
                    && g.edges
                        .iter()
                        .all(|e| e.to.index() != v || done[e.from.index()])
            })
            .expect("a DAG always has a ready node");
        done[next] = true;
        order.push(NodeId(next as u32));
    }
    order
}

/// Longest-path level of each node by relaxing every edge until nothing changes.
fn brute_levels(g: &Graph) -> Vec<u32> {
    let mut level = vec![0u32; g.nodes.len()];
    let mut changed = true;
    while changed {
        changed = false;
        for e in &g.edges {
            if level[e.to.index()] < level[e.from.index()] + 1 {
                level[e.to.index()] = level[e.from.index()] + 1;
                changed = true;
            }
        }
    }
    level
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn topological_order_is_valid_and_smallest_first(g in dag()) {
        let order = g.topological_order().unwrap();
        let mut position = vec![usize::MAX; g.nodes.len()];
        for (i, id) in order.iter().enumerate() {
            prop_assert_eq!(position[id.index()], usize::MAX, "node listed twice");
            position[id.index()] = i;
        }
        prop_assert_eq!(order.len(), g.nodes.len());
        for e in &g.edges {
            prop_assert!(position[e.from.index()] < position[e.to.index()], "{:?} goes back", e);
        }
        prop_assert_eq!(order, brute_order(&g));
    }

    #[test]
    fn depth_levels_width_match_brute_force(g in dag()) {
        let levels = brute_levels(&g);
        let depth = levels.iter().max().map_or(0, |&l| l as usize + 1);
        let mut per_level = vec![0usize; depth];
        for &l in &levels {
            per_level[l as usize] += 1;
        }
        prop_assert_eq!(g.levels().unwrap(), levels);
        prop_assert_eq!(g.depth().unwrap(), depth);
        prop_assert_eq!(g.width().unwrap(), per_level.into_iter().max().unwrap_or(0));

        let path = g.longest_path().unwrap();
        prop_assert_eq!(path.len(), depth);
        for pair in path.windows(2) {
            prop_assert!(g.edges.iter().any(|e| e.from == pair[0] && e.to == pair[1]));
        }
        if let (Some(first), Some(last)) = (path.first(), path.last()) {
            prop_assert!(g.roots().contains(first));
            prop_assert!(g.leaves().contains(last));
        }
    }

    #[test]
    fn summary_agrees_with_the_parts(g in dag()) {
        let s = g.summary().unwrap();
        prop_assert_eq!(s.nodes, g.nodes.len());
        prop_assert_eq!(s.edges, g.edges.len());
        prop_assert_eq!(s.depth, g.depth().unwrap());
        prop_assert_eq!(s.width, g.width().unwrap());
        prop_assert_eq!(s.roots, g.roots().len());
        prop_assert_eq!(s.leaves, g.leaves().len());
    }

    #[test]
    fn json_round_trip_is_identity(g in any_graph()) {
        let back = Graph::from_json(&g.to_json());
        prop_assert_eq!(back.as_ref(), Ok(&g));
    }

    #[test]
    fn any_text_parses_or_errs_without_panic(text in ".{0,200}") {
        let _ = Graph::from_json(&text);
    }
}

fn text() -> impl Strategy<Value = String> {
    // Any Unicode, quotes, backslashes and control characters included.
    ".{0,12}"
}

fn dim() -> impl Strategy<Value = Dim3> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(x, y, z)| Dim3::new(x, y, z))
}

fn mem_ref() -> impl Strategy<Value = MemRef> {
    let space = prop_oneof![
        Just(MemorySpace::Device),
        Just(MemorySpace::Host),
        Just(MemorySpace::Array),
        Just(MemorySpace::Unknown),
    ];
    (space, any::<u64>()).prop_map(|(space, address)| MemRef { space, address })
}

fn leaf_kind() -> impl Strategy<Value = NodeKind> {
    let args = proptest::collection::vec(
        (any::<u32>(), proptest::collection::vec(any::<u8>(), 0..9))
            .prop_map(|(offset, bytes)| KernelArg { offset, bytes }),
        0..4,
    );
    let conditional = prop_oneof![
        Just(ConditionalKind::If),
        Just(ConditionalKind::While),
        Just(ConditionalKind::Switch),
    ];
    prop_oneof![
        (text(), dim(), dim(), any::<u32>(), args).prop_map(|(name, grid, block, smem, args)| {
            NodeKind::Kernel(KernelParams {
                name,
                grid,
                block,
                shared_mem_bytes: smem,
                args,
                cluster: None,
            })
        }),
        (mem_ref(), mem_ref(), any::<u64>())
            .prop_map(|(src, dst, bytes)| NodeKind::Memcpy(MemcpyParams { src, dst, bytes })),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(dst, element_size, value, width, height, pitch)| {
                NodeKind::Memset(MemsetParams {
                    dst,
                    element_size,
                    value,
                    width,
                    height,
                    pitch,
                })
            }),
        text().prop_map(|name| NodeKind::Host { name }),
        text().prop_map(|event| NodeKind::EventRecord { event }),
        text().prop_map(|event| NodeKind::EventWait { event }),
        Just(NodeKind::Empty),
        (any::<u64>(), any::<u64>())
            .prop_map(|(address, bytes)| NodeKind::MemAlloc { address, bytes }),
        any::<u64>().prop_map(|address| NodeKind::MemFree { address }),
        (conditional, any::<u32>()).prop_map(|(conditional, bodies)| NodeKind::Conditional {
            conditional,
            bodies,
            body_graphs: vec![],
        }),
        text().prop_map(|name| NodeKind::Other { name }),
    ]
}

fn provenance() -> impl Strategy<Value = Option<Provenance>> {
    let p = (
        text(),
        any::<u32>(),
        any::<u32>(),
        proptest::collection::vec(text(), 0..3),
        proptest::option::of(text()),
    )
        .prop_map(|(file, line, column, ranges, thread)| Provenance {
            file,
            line,
            column,
            ranges,
            thread,
        });
    proptest::option::of(p)
}

fn accesses() -> impl Strategy<Value = Vec<Access>> {
    let mode = prop_oneof![
        Just(AccessMode::Read),
        Just(AccessMode::Write),
        Just(AccessMode::ReadWrite),
        Just(AccessMode::Unknown),
    ];
    let access = (any::<u64>(), text(), any::<u64>(), any::<u64>(), mode).prop_map(
        |(buffer, label, offset, len, mode)| Access {
            buffer,
            label,
            offset,
            len,
            mode,
        },
    );
    proptest::collection::vec(access, 0..3)
}

/// A graph of random nodes over `kind`, with random forward edges.
fn graph_of(kind: BoxedStrategy<NodeKind>) -> impl Strategy<Value = Graph> {
    let node = (text(), kind, provenance(), accesses());
    (
        text(),
        proptest::collection::vec(node, 0..8),
        proptest::collection::vec((0usize..8, 0usize..8), 0..12),
    )
        .prop_map(|(label, nodes, pairs)| {
            let mut g = Graph::new(label);
            for (label, kind, provenance, accesses) in nodes {
                g.add_node_with(label, kind, provenance, accesses);
            }
            for (a, b) in pairs {
                // Out-of-range pairs and self-loops are refused by add_edge; skip them.
                let _ = g.add_edge(NodeId(a as u32), NodeId(b as u32));
            }
            g
        })
}

/// A graph whose nodes may hold child graphs, nested up to two levels.
fn any_graph() -> impl Strategy<Value = Graph> {
    let inner = graph_of(leaf_kind().boxed());
    let kind = prop_oneof![
        4 => leaf_kind(),
        1 => inner.prop_map(|g| NodeKind::ChildGraph { graph: Box::new(g) }),
    ]
    .boxed();
    let middle = graph_of(kind);
    let kind = prop_oneof![
        4 => leaf_kind(),
        1 => middle.prop_map(|g| NodeKind::ChildGraph { graph: Box::new(g) }),
    ]
    .boxed();
    graph_of(kind)
}
