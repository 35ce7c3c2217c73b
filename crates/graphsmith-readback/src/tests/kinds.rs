//! Every node kind, read strictly and leniently, the order of the calls, and failures.

use super::*;

#[test]
fn a_strict_read_of_every_kind_reads_every_parameter() {
    fake::install(every_kind());
    let read = read(&fake::full_table(), Policy::Strict).unwrap();
    let host = fake::HOST_FUNCTION.map_or(0, |f| f as usize);
    let cluster = Some(Dim3::new(2, 1, 1));
    let expected = vec![
        RawNode::plain(NodeKind::Kernel(kernel_params(
            "step",
            the_two_args(),
            cluster,
        ))),
        copy_node(),
        set_node(),
        RawNode::plain(NodeKind::Host {
            name: format!("host function at 0x{host:x}"),
        }),
        child_graph(),
        RawNode::plain(NodeKind::Empty),
        RawNode::plain(NodeKind::EventWait {
            event: "event 0xe1".into(),
        }),
        RawNode::plain(NodeKind::EventRecord {
            event: "event 0xe2".into(),
        }),
        RawNode::plain(NodeKind::MemAlloc {
            address: 0xd000,
            bytes: 4096,
        }),
        RawNode::plain(NodeKind::MemFree { address: 0xd000 }),
        other("conditional"),
        other("node type 12"),
        other("node type 99"),
    ];
    for (i, (got, want)) in read.raw.nodes.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "node {i}");
    }
    assert_eq!(read.raw.nodes.len(), expected.len());
    // The edge to a node outside the graph is left out.
    assert_eq!(read.raw.edges, edges());
    let handles: Vec<usize> = read.handles.iter().map(|&h| h as usize).collect();
    assert_eq!(handles, (1..=13).collect::<Vec<_>>());
    let k = read.kernels[0].as_ref().expect("the kernel's function");
    assert_eq!(
        (k.func as usize, k.kern as usize, &k.layout[..], k.cluster),
        (FUNC, 0, &[(0, 8), (8, 16)][..], cluster)
    );
    assert!(k.complete);
    assert!(read.kernels[1..].iter().all(Option::is_none));
    assert_eq!((read.param_bytes_cap, read.params_over_cap), (32 * 1024, 0));
}

#[test]
fn the_calls_come_in_the_drivers_order() {
    fake::install(every_kind());
    read(&fake::full_table(), Policy::Strict).unwrap();
    let calls = fake::calls();
    let kernel = [
        "cuGraphNodeGetType",
        "cuGraphKernelNodeGetParams",
        "cuFuncGetName",
        "cuFuncGetParamInfo",
        "cuFuncGetParamInfo",
        "cuFuncGetParamInfo",
        "cuFuncGetAttribute",
    ];
    assert_eq!(&calls[..2], ["cuGraphGetNodes", "cuGraphGetNodes"]);
    assert_eq!(&calls[2..9], kernel);
    // The library kernel inside the child graph asks for its function first; its width-0
    // cluster needs one attribute.
    let child = calls
        .iter()
        .position(|c| *c == "cuGraphChildGraphNodeGetGraph")
        .unwrap();
    assert_eq!(
        &calls[child + 1..child + 9],
        [
            "cuGraphGetNodes",
            "cuGraphGetNodes",
            "cuGraphNodeGetType",
            "cuGraphKernelNodeGetParams",
            "cuKernelGetFunction",
            "cuFuncGetName",
            "cuFuncGetParamInfo",
            "cuFuncGetAttribute",
        ]
    );
    assert_eq!(calls.last(), Some(&"cuGraphGetEdges_v2"));
}

#[test]
fn a_lenient_read_with_the_tracers_table_keeps_the_kinds_without_their_details() {
    fake::install(every_kind());
    let read = read(&fake::tracer_table(), Policy::Lenient).unwrap();
    let nodes = &read.raw.nodes;
    assert_eq!(
        nodes[0],
        RawNode::plain(NodeKind::Kernel(kernel_params(
            "step",
            the_two_args(),
            None
        )))
    );
    assert_eq!(
        (&nodes[1], &nodes[2], &nodes[4]),
        (&copy_node(), &set_node(), &child_graph())
    );
    let empty = String::new();
    assert_eq!(
        nodes[3].kind,
        NodeKind::Host {
            name: empty.clone()
        }
    );
    assert_eq!(
        nodes[6].kind,
        NodeKind::EventWait {
            event: empty.clone()
        }
    );
    assert_eq!(nodes[7].kind, NodeKind::EventRecord { event: empty });
    assert_eq!(
        (&nodes[8], &nodes[9]),
        (&other("mem_alloc"), &other("mem_free"))
    );
    assert_eq!(read.raw.edges, edges());
    // The functions the table leaves out are never called.
    let calls = fake::calls();
    for absent in [
        "cuFuncGetAttribute",
        "cuGraphHostNodeGetParams",
        "cuGraphEventWaitNodeGetEvent",
        "cuGraphEventRecordNodeGetEvent",
        "cuGraphMemAllocNodeGetParams",
        "cuGraphMemFreeNodeGetParams",
    ] {
        assert!(!calls.contains(&absent), "{absent} was called");
    }
}

#[test]
fn a_failed_node_call_fails_a_strict_read_and_degrades_the_node_in_a_lenient_one() {
    let cases: [(&str, usize, RawNode); 4] = [
        ("cuGraphMemcpyNodeGetParams", 1, other("memcpy")),
        ("cuGraphMemsetNodeGetParams", 2, other("memset")),
        (
            "cuGraphChildGraphNodeGetGraph",
            4,
            RawNode {
                child: Some(RawGraph::default()),
                ..RawNode::plain(NodeKind::Empty)
            },
        ),
        (
            "cuGraphKernelNodeGetParams",
            0,
            RawNode {
                args_unread: true,
                ..RawNode::plain(NodeKind::Kernel(KernelParams {
                    name: String::new(),
                    grid: Dim3::new(0, 0, 0),
                    block: Dim3::new(0, 0, 0),
                    shared_mem_bytes: 0,
                    args: Vec::new(),
                    cluster: None,
                }))
            },
        ),
    ];
    for (call, index, degraded) in cases {
        let mut fake = every_kind();
        fake.failing.insert(call, 700);
        fake::install(fake);
        let err = read(&fake::full_table(), Policy::Strict).unwrap_err();
        assert_eq!(err, ReadError::Call { call, code: 700 });
        let mut fake = every_kind();
        fake.failing.insert(call, 700);
        fake::install(fake);
        let read = read(&fake::full_table(), Policy::Lenient).unwrap();
        assert_eq!(read.raw.nodes[index], degraded, "{call}");
        assert_eq!(read.raw.nodes.len(), 13);
    }
}

#[test]
fn a_failed_layout_fails_a_strict_read_and_leaves_the_arguments_unread_in_a_lenient_one() {
    let mut fake = every_kind();
    fake.failing.insert("cuFuncGetParamInfo", 999);
    fake::install(fake);
    assert_eq!(
        read(&fake::full_table(), Policy::Strict).unwrap_err(),
        ReadError::Call {
            call: "cuFuncGetParamInfo",
            code: 999
        }
    );
    let mut fake = every_kind();
    fake.failing.insert("cuFuncGetParamInfo", 999);
    fake::install(fake);
    let read = read(&fake::tracer_table(), Policy::Lenient).unwrap();
    let node = &read.raw.nodes[0];
    assert!(node.args_unread);
    assert_eq!(
        node.kind,
        NodeKind::Kernel(kernel_params("step", Vec::new(), None))
    );
    assert!(read.kernels[0].is_none());
}

#[test]
fn the_graphs_own_calls_fail_a_read_in_either_policy() {
    for call in [
        "cuGraphGetNodes",
        "cuGraphNodeGetType",
        "cuGraphGetEdges_v2",
    ] {
        for policy in [Policy::Strict, Policy::Lenient] {
            let mut fake = every_kind();
            fake.failing.insert(call, 4);
            fake::install(fake);
            let err = read(&fake::full_table(), policy).unwrap_err();
            let named = if call == "cuGraphGetEdges_v2" {
                "cuGraphGetEdges"
            } else {
                call
            };
            assert_eq!(
                err,
                ReadError::Call {
                    call: named,
                    code: 4
                }
            );
        }
    }
    fake::install(every_kind());
    let table = DriverTable {
        node_get_type: None,
        ..fake::full_table()
    };
    assert_eq!(
        read(&table, Policy::Lenient).unwrap_err(),
        ReadError::Missing {
            call: "cuGraphNodeGetType"
        }
    );
    let table = DriverTable {
        host_node_get_params: None,
        ..fake::full_table()
    };
    fake::install(every_kind());
    assert_eq!(
        read(&table, Policy::Strict).unwrap_err(),
        ReadError::Missing {
            call: "cuGraphHostNodeGetParams"
        }
    );
}
