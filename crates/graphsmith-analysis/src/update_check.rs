//! Whether an executable can take a new graph's parameters in place (`cuGraphExecUpdate`),
//! decided on the models before the driver is asked, with a reason per node.
//!
//! The rules are the driver's documented limitations: the same nodes (count, kind, order) and
//! the same edges; memcpy nodes keep their source and destination memory types; memsets stay
//! one-dimensional; conditional and memory (alloc/free) nodes cannot change; child graphs follow
//! the same rules recursively. One rule is not in the driver's documentation but was found by
//! measurement (docs/updates-and-cache.md says where): a kernel node keeps its thread block
//! cluster shape through `cuGraphExecUpdate`, so a kernel compiled for another shape cannot take
//! its place. The driver has the last word: when it refuses an update the
//! pre-check allowed, its `errorNode` is mapped back to a label.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};

use graphsmith_model::{Graph, NodeKind};

/// One reason why an update is impossible, naming the node (by label) when there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incompatibility {
    /// The label of the node in the new graph, or `None` for the graph as a whole.
    pub node: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.node {
            Some(label) => write!(f, "node '{label}': {}", self.reason),
            None => write!(f, "{}", self.reason),
        }
    }
}

/// Most edge differences listed before the rest are summarised.
const MAX_EDGE_REASONS: usize = 8;

/// Every reason why `new` cannot update an executable of `old` in place; empty when it can.
pub fn update_compatibility(old: &Graph, new: &Graph) -> Vec<Incompatibility> {
    let mut out = Vec::new();
    if !std::ptr::eq(old, new) {
        check(old, new, "", &mut out);
    }
    out
}

/// A 128-bit digest of everything [`update_compatibility`] compares: node count, each node's
/// kind (with copy memory types, and the whole parameters of conditional and memory nodes), child
/// graphs, and the edge list in order. Graphs with equal digests are compatible, so an update
/// between them needs no walk over both models (which, with caches cold after the driver's work,
/// cost about 30 ns per node). `None` when the graph has a node the rules refuse whatever the
/// other graph holds (a 2-D memset). A collision could only let through an update the driver
/// then refuses, which is still explained.
pub fn shape_key(graph: &Graph) -> Option<u128> {
    let mut halves = [0u64; 2];
    for (seed, half) in halves.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        shape_into(graph, &mut h)?;
        *half = h.finish();
    }
    Some(((halves[0] as u128) << 64) | halves[1] as u128)
}

fn shape_into(graph: &Graph, h: &mut impl Hasher) -> Option<()> {
    graph.nodes.len().hash(h);
    for node in &graph.nodes {
        node.kind.name().hash(h);
        match &node.kind {
            NodeKind::Memcpy(c) => (c.src.space, c.dst.space).hash(h),
            NodeKind::Memset(m) if m.height > 1 => return None,
            NodeKind::MemAlloc { .. } | NodeKind::MemFree { .. } => {
                format!("{:?}", node.kind).hash(h)
            }
            NodeKind::Conditional {
                conditional,
                bodies,
                body_graphs,
            } => {
                (conditional, bodies, body_graphs.len()).hash(h);
                for body in body_graphs {
                    shape_into(body, h)?;
                }
            }
            NodeKind::ChildGraph { graph } => shape_into(graph, h)?,
            NodeKind::Kernel(k) => k.cluster.hash(h),
            _ => {}
        }
    }
    graph.edges.hash(h);
    Some(())
}

/// Whether both graphs list the same edges (with their types) in the same order (the usual case
/// for graphs built or captured by the same code), which needs no set comparison.
fn same_edge_list(old: &Graph, new: &Graph) -> bool {
    old.edges.len() == new.edges.len() && old.edges.iter().zip(&new.edges).all(|(a, b)| a == b)
}

fn check(old: &Graph, new: &Graph, prefix: &str, out: &mut Vec<Incompatibility>) {
    let graph_reason = |reason: String| Incompatibility {
        node: None,
        reason: format!("{prefix}{reason}"),
    };
    if old.nodes.len() != new.nodes.len() {
        out.push(graph_reason(format!(
            "topology changed: graph '{}' has {} nodes, the executable has {}",
            new.label,
            new.nodes.len(),
            old.nodes.len()
        )));
        return;
    }
    if !same_edge_list(old, new) {
        edge_differences(old, new, prefix, out);
    }
    nodes(old, new, prefix, out);
}

fn edge_differences(old: &Graph, new: &Graph, prefix: &str, out: &mut Vec<Incompatibility>) {
    let graph_reason = |reason: String| Incompatibility {
        node: None,
        reason: format!("{prefix}{reason}"),
    };
    let edges = |g: &Graph| {
        g.edges
            .iter()
            .map(|e| (e.from.index(), e.to.index(), e.ty))
            .collect::<BTreeSet<_>>()
    };
    let (old_edges, new_edges) = (edges(old), edges(new));
    let label = |g: &Graph, i: usize| g.nodes[i].label.clone();
    let mut edge_reasons = 0;
    for (&(a, b, ty), which) in new_edges
        .difference(&old_edges)
        .map(|e| (e, "only in the new graph"))
        .chain(
            old_edges
                .difference(&new_edges)
                .map(|e| (e, "only in the executable")),
        )
    {
        edge_reasons += 1;
        if edge_reasons <= MAX_EDGE_REASONS {
            out.push(Incompatibility {
                node: Some(label(new, b)),
                reason: format!(
                    "{prefix}topology changed: edge '{}' -> '{}'{} is {which}",
                    label(new, a),
                    label(new, b),
                    if ty.is_full() {
                        String::new()
                    } else {
                        format!(" ({})", ty.name().replace('_', "-"))
                    }
                ),
            });
        }
    }
    if edge_reasons > MAX_EDGE_REASONS {
        out.push(graph_reason(format!(
            "topology changed: {} more edges differ",
            edge_reasons - MAX_EDGE_REASONS
        )));
    }
}

fn nodes(old: &Graph, new: &Graph, prefix: &str, out: &mut Vec<Incompatibility>) {
    for (o, n) in old.nodes.iter().zip(&new.nodes) {
        let mut reasons = Vec::new();
        let mut child = None;
        let mut bodies = None;
        match (&o.kind, &n.kind) {
            (a, b) if a.name() != b.name() => reasons.push(format!(
                "node type changed: the executable has a {} node here ('{}'), the new graph a {} node",
                a.name(),
                o.label,
                b.name()
            )),
            (NodeKind::Kernel(a), NodeKind::Kernel(b)) if a.cluster != b.cluster => {
                reasons.push(format!(
                    "the kernel's thread block cluster shape changed from {} ('{}') to {} ('{}'): \
                     an executable's node keeps its cluster shape through an in-place update, so \
                     the new kernel would run in the old one; the executable must be instantiated again",
                    cluster_text(a.cluster),
                    a.name,
                    cluster_text(b.cluster),
                    b.name
                ))
            }
            (NodeKind::Memcpy(a), NodeKind::Memcpy(b)) => {
                if a.src.space != b.src.space {
                    reasons.push(format!("copy source memory type changed from {:?} to {:?}", a.src.space, b.src.space));
                }
                if a.dst.space != b.dst.space {
                    reasons.push(format!("copy destination memory type changed from {:?} to {:?}", a.dst.space, b.dst.space));
                }
            }
            (NodeKind::Memset(a), NodeKind::Memset(b)) if a.height > 1 || b.height > 1 => {
                reasons.push(format!("only 1-D memsets can be updated (height {} -> {})", a.height, b.height))
            }
            (
                NodeKind::Conditional { conditional: ca, bodies: ba, body_graphs: ga },
                NodeKind::Conditional { conditional: cb, bodies: bb, body_graphs: gb },
            ) => {
                if (ca, ba) != (cb, bb) {
                    reasons.push(format!(
                        "conditional nodes cannot be changed by an update ({ca:?} with {} -> {cb:?} with {})",
                        body_count(*ba),
                        body_count(*bb)
                    ))
                } else if ga.len() == gb.len() {
                    // Bodies follow the rules of child graphs; where only one side models
                    // them, nothing more can be compared.
                    bodies = Some((ga, gb));
                }
            }
            (NodeKind::MemAlloc { .. } | NodeKind::MemFree { .. }, _) if o.kind != n.kind => {
                reasons.push("memory alloc/free nodes cannot be changed by an update".to_string())
            }
            (NodeKind::ChildGraph { graph: a }, NodeKind::ChildGraph { graph: b }) => child = Some((a, b)),
            _ => {}
        }
        out.extend(reasons.into_iter().map(|r| Incompatibility {
            node: Some(n.label.clone()),
            reason: format!("{prefix}{r}"),
        }));
        if let Some((a, b)) = child {
            check(
                a,
                b,
                &format!("{prefix}in child graph '{}': ", n.label),
                out,
            );
        }
        for (i, (a, b)) in bodies
            .into_iter()
            .flat_map(|(a, b)| a.iter().zip(b))
            .enumerate()
        {
            check(
                a,
                b,
                &format!("{prefix}in body {i} of conditional '{}': ", n.label),
                out,
            );
        }
    }
}

/// `none`, `1x1x8`.
fn cluster_text(c: Option<graphsmith_model::Dim3>) -> String {
    c.map_or("none".into(), |d| format!("{}x{}x{}", d.x, d.y, d.z))
}

/// `1 body`, `2 bodies`.
fn body_count(n: u32) -> String {
    if n == 1 {
        "1 body".into()
    } else {
        format!("{n} bodies")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graphsmith_model::{Dim3, KernelParams, MemRef, MemcpyParams, MemorySpace, MemsetParams};

    fn kernel(name: &str) -> NodeKind {
        NodeKind::Kernel(KernelParams {
            name: name.into(),
            grid: Dim3::linear(1),
            block: Dim3::linear(32),
            shared_mem_bytes: 0,
            args: vec![],
            cluster: None,
        })
    }
    fn clustered(name: &str, depth: u32) -> NodeKind {
        let NodeKind::Kernel(mut k) = kernel(name) else {
            unreachable!()
        };
        k.cluster = Some(Dim3::new(1, 1, depth));
        NodeKind::Kernel(k)
    }
    fn memset(height: u64) -> NodeKind {
        NodeKind::Memset(MemsetParams {
            dst: 0x1000,
            element_size: 4,
            value: 0,
            width: 16,
            height,
            pitch: 64,
        })
    }
    fn copy(src: MemorySpace) -> NodeKind {
        NodeKind::Memcpy(MemcpyParams {
            src: MemRef {
                space: src,
                address: 1,
            },
            dst: MemRef {
                space: MemorySpace::Device,
                address: 2,
            },
            bytes: 8,
        })
    }
    fn graph(label: &str, nodes: &[(&str, NodeKind)], edges: &[(u32, u32)]) -> Graph {
        let mut g = Graph::new(label);
        for (l, k) in nodes {
            g.add_node(*l, k.clone());
        }
        for &(a, b) in edges {
            g.add_edge(graphsmith_model::NodeId(a), graphsmith_model::NodeId(b))
                .unwrap();
        }
        g
    }
    fn texts(v: &[Incompatibility]) -> Vec<String> {
        v.iter().map(|i| i.to_string()).collect()
    }

    #[test]
    fn same_shape_with_new_parameters_is_compatible() {
        let old = graph("g", &[("a", kernel("k1")), ("b", memset(1))], &[(0, 1)]);
        let new = graph("g", &[("a", kernel("k2")), ("b", memset(1))], &[(0, 1)]);
        assert!(update_compatibility(&old, &new).is_empty());
    }

    #[test]
    fn edges_listed_in_another_order_are_the_same_topology() {
        let nodes = [("a", kernel("k")), ("b", kernel("k")), ("c", kernel("k"))];
        let old = graph("g", &nodes, &[(0, 1), (0, 2), (1, 2)]);
        let new = graph("g", &nodes, &[(1, 2), (0, 2), (0, 1)]);
        assert!(update_compatibility(&old, &new).is_empty());
        // Same count, one edge different: named, whichever order the lists are in.
        let other = graph("g", &nodes, &[(1, 2), (0, 2), (2, 0)]);
        let reasons = texts(&update_compatibility(&old, &other));
        assert_eq!(
            reasons,
            [
                "node 'a': topology changed: edge 'c' -> 'a' is only in the new graph",
                "node 'b': topology changed: edge 'a' -> 'b' is only in the executable",
            ]
        );
        // A graph compared with itself needs no work and is compatible.
        assert!(update_compatibility(&old, &old).is_empty());
    }

    #[test]
    fn a_changed_edge_type_is_a_topology_change() {
        let nodes = [("a", kernel("k")), ("b", kernel("k"))];
        let old = graph("g", &nodes, &[(0, 1)]);
        let mut new = graph("g", &nodes, &[]);
        let (a, b) = (graphsmith_model::NodeId(0), graphsmith_model::NodeId(1));
        new.add_typed_edge(a, b, graphsmith_model::EdgeType::Programmatic)
            .unwrap();
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            [
                "node 'b': topology changed: edge 'a' -> 'b' (programmatic) is only in the new graph",
                "node 'b': topology changed: edge 'a' -> 'b' is only in the executable",
            ]
        );
        assert_ne!(shape_key(&old), shape_key(&new));
    }

    #[test]
    fn conditional_bodies_follow_the_rules_of_child_graphs() {
        use graphsmith_model::ConditionalKind;
        let body = |k: &str, edges: &[(u32, u32)]| {
            graph("body", &[("x", kernel(k)), ("y", memset(1))], edges)
        };
        let with = |kind, bodies: Vec<Graph>| {
            let mut g = Graph::new("g");
            g.add_conditional("loop", kind, bodies);
            g
        };
        let old = with(ConditionalKind::While, vec![body("k1", &[(0, 1)])]);
        // New kernel parameters inside the body: compatible.
        let new = with(ConditionalKind::While, vec![body("k2", &[(0, 1)])]);
        assert!(update_compatibility(&old, &new).is_empty());
        assert_eq!(shape_key(&old), shape_key(&new));
        // A body whose topology changed is named.
        let new = with(ConditionalKind::While, vec![body("k1", &[])]);
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            ["node 'y': in body 0 of conditional 'loop': topology changed: edge 'x' -> 'y' is only in the executable"]
        );
        // Another flavour or number of bodies cannot be updated.
        let new = with(
            ConditionalKind::If,
            vec![body("k1", &[(0, 1)]), body("k1", &[])],
        );
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            ["node 'loop': conditional nodes cannot be changed by an update (While with 1 body -> If with 2 bodies)"]
        );
    }

    #[test]
    fn switch_cases_and_nested_conditionals_are_compared_body_by_body() {
        use graphsmith_model::ConditionalKind;
        let case =
            |second: NodeKind| graph("case", &[("x", kernel("k")), ("y", second)], &[(0, 1)]);
        let switch = |cases: Vec<Graph>| {
            let mut g = Graph::new("g");
            let set = g.add_node("set", kernel("select"));
            let sw = g.add_conditional("sw", ConditionalKind::Switch, cases);
            g.add_edge(set, sw).unwrap();
            g
        };
        let three = || vec![case(memset(1)), case(memset(1)), case(memset(1))];
        let old = switch(three());
        assert!(update_compatibility(&old, &switch(three())).is_empty());
        // A case whose node changed kind is named with its body.
        let mut cases = three();
        cases[2] = case(kernel("k"));
        assert_eq!(
            texts(&update_compatibility(&old, &switch(cases))),
            ["node 'y': in body 2 of conditional 'sw': node type changed: the executable has a memset node here ('y'), the new graph a kernel node"]
        );
        // A case more cannot be updated.
        let mut cases = three();
        cases.push(case(memset(1)));
        assert_eq!(
            texts(&update_compatibility(&old, &switch(cases))),
            ["node 'sw': conditional nodes cannot be changed by an update (Switch with 3 bodies -> Switch with 4 bodies)"]
        );
        // A conditional nested in a body: its body is compared too, with both prefixes.
        let nested = |inner: Graph| {
            let mut body = Graph::new("outer");
            body.add_conditional("inner", ConditionalKind::If, vec![inner]);
            let mut g = Graph::new("g");
            g.add_conditional("loop", ConditionalKind::While, vec![body]);
            g
        };
        let old = nested(case(memset(1)));
        let new = nested(graph("case", &[("x", kernel("k"))], &[]));
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            ["in body 0 of conditional 'loop': in body 0 of conditional 'inner': topology changed: graph 'case' has 1 nodes, the executable has 2"]
        );
        assert_ne!(shape_key(&old), shape_key(&new));
    }

    #[test]
    fn each_reason_names_the_node() {
        let old = graph(
            "g",
            &[
                ("a", kernel("k")),
                ("b", memset(1)),
                ("c", copy(MemorySpace::Device)),
                ("d", memset(1)),
            ],
            &[(0, 1)],
        );
        let new = graph(
            "g2",
            &[
                ("a", kernel("k")),
                ("b", kernel("k")),
                ("c", copy(MemorySpace::Host)),
                ("d", memset(4)),
            ],
            &[(0, 2)],
        );
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            [
                "node 'c': topology changed: edge 'a' -> 'c' is only in the new graph",
                "node 'b': topology changed: edge 'a' -> 'b' is only in the executable",
                "node 'b': node type changed: the executable has a memset node here ('b'), the new graph a kernel node",
                "node 'c': copy source memory type changed from Device to Host",
                "node 'd': only 1-D memsets can be updated (height 1 -> 4)",
            ]
        );
    }

    #[test]
    fn a_kernel_of_another_cluster_shape_needs_a_new_executable() {
        let plain = graph("g", &[("attention", kernel("att"))], &[]);
        let clusters = graph("g", &[("attention", clustered("att_c8", 8))], &[]);
        assert_eq!(
            texts(&update_compatibility(&clusters, &plain)),
            [
                "node 'attention': the kernel's thread block cluster shape changed from 1x1x8 \
              ('att_c8') to none ('att'): an executable's node keeps its cluster shape through \
              an in-place update, so the new kernel would run in the old one; the executable \
              must be instantiated again"
            ]
        );
        assert_eq!(update_compatibility(&plain, &clusters).len(), 1);
        // The same shape, another kernel: in place.
        let other = graph("g", &[("attention", clustered("att2_c8", 8))], &[]);
        assert!(update_compatibility(&clusters, &other).is_empty());
    }

    #[test]
    fn node_count_change_is_one_graph_level_reason() {
        let old = graph("g", &[("a", kernel("k"))], &[]);
        let new = graph("step", &[("a", kernel("k")), ("b", kernel("k"))], &[]);
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            ["topology changed: graph 'step' has 2 nodes, the executable has 1"]
        );
    }

    #[test]
    fn child_graphs_are_checked_recursively() {
        let inner_old = graph("inner", &[("x", memset(1))], &[]);
        let inner_new = graph("inner", &[("x", kernel("k"))], &[]);
        let old = graph(
            "g",
            &[(
                "child",
                NodeKind::ChildGraph {
                    graph: Box::new(inner_old),
                },
            )],
            &[],
        );
        let new = graph(
            "g",
            &[(
                "child",
                NodeKind::ChildGraph {
                    graph: Box::new(inner_new),
                },
            )],
            &[],
        );
        assert_eq!(
            texts(&update_compatibility(&old, &new)),
            ["node 'x': in child graph 'child': node type changed: the executable has a memset node here ('x'), the new graph a kernel node"]
        );
    }

    #[test]
    fn equal_shape_keys_mean_compatible_and_changes_show() {
        let base = || {
            graph(
                "g",
                &[
                    ("a", kernel("k1")),
                    ("b", memset(1)),
                    ("c", copy(MemorySpace::Host)),
                ],
                &[(0, 1), (1, 2)],
            )
        };
        let key = |g: &Graph| shape_key(g);
        // New kernel names, labels and parameters do not change the shape.
        let renamed = graph(
            "other",
            &[
                ("x", kernel("k2")),
                ("y", memset(1)),
                ("z", copy(MemorySpace::Host)),
            ],
            &[(0, 1), (1, 2)],
        );
        assert_eq!(key(&base()), key(&renamed));
        assert!(update_compatibility(&base(), &renamed).is_empty());
        // Each thing the pre-check compares changes the key.
        let changed = [
            graph(
                "g",
                &[
                    ("a", kernel("k1")),
                    ("b", memset(1)),
                    ("c", copy(MemorySpace::Device)),
                ],
                &[(0, 1), (1, 2)],
            ),
            graph(
                "g",
                &[
                    ("a", kernel("k1")),
                    ("b", kernel("k1")),
                    ("c", copy(MemorySpace::Host)),
                ],
                &[(0, 1), (1, 2)],
            ),
            graph(
                "g",
                &[
                    ("a", kernel("k1")),
                    ("b", memset(1)),
                    ("c", copy(MemorySpace::Host)),
                ],
                &[(0, 1), (0, 2)],
            ),
            graph("g", &[("a", kernel("k1")), ("b", memset(1))], &[(0, 1)]),
            graph(
                "g",
                &[
                    ("a", clustered("k1", 8)),
                    ("b", memset(1)),
                    ("c", copy(MemorySpace::Host)),
                ],
                &[(0, 1), (1, 2)],
            ),
        ];
        for g in &changed {
            assert_ne!(key(&base()), key(g));
            assert!(!update_compatibility(&base(), g).is_empty());
        }
        // A 2-D memset is refused whatever the other graph holds: no key, so no fast path.
        assert_eq!(key(&graph("g", &[("m", memset(2))], &[])), None);
    }
}
