//! The freed-memory bookkeeping without a GPU: sites are plain strings.

use super::*;
use crate::event::{Frame, PyFrame};

fn touch(start: u64, end: u64, node: u32) -> Touch {
    Touch {
        start,
        end,
        node,
        kind: "kernel".into(),
        label: format!("k{node}"),
    }
}

const W: u64 = 0x7f00_0000_0000;
const SCRATCH: u64 = 0x7f00_1000_0000;

/// A graph whose n1 reads the weight W from an offset to its end, and whose n0 writes elsewhere.
fn tracker() -> Tracker<&'static str> {
    let mut t = Tracker::default();
    t.allocated(W, 4096, "cudaMalloc w");
    t.allocated(SCRATCH, 4096, "cudaMalloc scratch");
    t.instantiated(
        0xe1,
        0x61,
        vec![touch(0x1000, 0x2000, 0), touch(W + 256, W + 4096, 1)],
    );
    t
}

#[test]
fn a_free_of_touched_memory_is_found_at_the_next_launch_once() {
    let mut t = tracker();
    assert!(!t.pending(0xe1), "nothing freed yet");
    assert!(t.launch(0xe1).is_empty());
    let (base, size) = t.range_of(W, None).unwrap();
    assert_eq!((base, size), (W, 4096));
    assert!(t.relevant(base, size));
    t.freed(base, size, "cudaFree w");
    // The range is allocated again (the driver reuses it): still a launch on freed memory.
    t.allocated(W, 4096, "cudaMalloc w2");
    assert!(t.pending(0xe1));
    let found = t.launch(0xe1);
    assert_eq!(found.len(), 1, "{found:?}");
    let f = &found[0];
    assert_eq!((f.exec, f.graph, f.touch.node), (0xe1, 0x61, 1));
    assert_eq!((f.start, f.len), (W + 256, 4096 - 256));
    assert_eq!(f.freed.allocated, Some("cudaMalloc w"));
    assert_eq!(f.freed.freed, "cudaFree w");
    assert!(!t.pending(0xe1));
    assert!(t.launch(0xe1).is_empty(), "reported once");
    // Freed again (w2): the node was already reported for this executable.
    t.freed(W, 4096, "cudaFree w2");
    assert!(t.launch(0xe1).is_empty());
}

#[test]
fn a_free_nothing_touches_is_not_even_recorded() {
    let mut t = tracker();
    let (base, size) = t.range_of(SCRATCH, None).unwrap();
    assert!(!t.relevant(base, size));
    t.freed(base, size, "cudaFree scratch");
    assert_eq!(t.frees_seen(), 0);
    assert!(!t.pending(0xe1));
    assert!(t.launch(0xe1).is_empty());
    assert_eq!(t.range_of(SCRATCH, None), None, "no longer live");
    assert_eq!(t.range_of(0x1234, None), None, "never seen");
    assert_eq!(t.holding(W + 4095), Some((W, 4096)));
    assert_eq!(t.holding(W + 4096), None);
    assert_eq!(t.holding(W - 1), None);
}

#[test]
fn frees_before_the_instantiation_and_after_a_destroy_do_not_count() {
    let mut t: Tracker<&str> = Tracker::default();
    t.allocated(W, 4096, "a");
    t.instantiated(0xe1, 0x61, vec![touch(W, W + 4096, 0)]);
    t.freed(W, 4096, "f1");
    // A second executable instantiated after the free never sees it.
    t.instantiated(0xe2, 0x62, vec![touch(W, W + 4096, 0)]);
    assert!(!t.pending(0xe2));
    assert!(t.launch(0xe2).is_empty());
    assert_eq!(t.launch(0xe1).len(), 1);
    // Everything checked: the free is dropped.
    t.freed(W, 64, "unmap");
    t.forget(0xe1);
    t.forget(0xe2);
    assert!(!t.pending(0xe1));
    assert!(t.launch(0xe1).is_empty());
    assert!(!t.relevant(W, 4096));
}

#[test]
fn an_unmap_frees_its_range_and_every_allocation_in_it() {
    let mut t: Tracker<&str> = Tracker::default();
    t.allocated(W, 2 << 20, "cuMemMap");
    t.allocated(W + (2 << 20), 2 << 20, "cuMemMap");
    t.instantiated(
        0xe1,
        0x61,
        vec![touch(W + (3 << 20), W + (3 << 20) + 16, 4)],
    );
    let range = t.range_of(W, Some(4 << 20)).unwrap();
    t.freed(range.0, range.1, "cuMemUnmap");
    let found = t.launch(0xe1);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].freed.allocated, Some("cuMemMap"));
    assert_eq!((found[0].start, found[0].len), (W + (3 << 20), 16));
    assert_eq!(t.range_of(W + (2 << 20), None), None);
    assert_eq!(t.range_of(W, Some(0)), None);
}

#[test]
fn a_new_allocation_replaces_the_stale_ones_it_overlaps() {
    let mut t: Tracker<&str> = Tracker::default();
    t.allocated(W, 4096, "old");
    t.allocated(W + 1024, 64, "new");
    assert_eq!(t.range_of(W, None), None);
    assert_eq!(t.range_of(W + 1024, None), Some((W + 1024, 64)));
    t.allocated(W + 2048, 0, "empty");
    assert_eq!(t.range_of(W + 2048, None), None);
}

#[test]
fn the_report_names_the_node_the_bytes_and_the_three_lines() {
    let site = |call: &str, file: &str, line: u32| Site {
        call: call.into(),
        python: vec![PyFrame {
            file: file.into(),
            line,
            function: "main".into(),
            origin: crate::event::Origin::User,
        }],
        ..Site::default()
    };
    let f = FreedLaunch {
        pid: 1,
        seq: 9,
        exec: 0xe1,
        graph: 0x61,
        node: 1,
        node_kind: "kernel".into(),
        node_label: "lm_head".into(),
        start: W,
        len: 4096,
        freed_base: W,
        freed_bytes: 4096,
        allocated: Some(site("cudaMalloc (cuMemAlloc_v2)", "serve.py", 10)),
        freed: Site {
            call: "cudaFree (cuMemFree_v2)".into(),
            backtrace: vec![Frame {
                symbol: "unload".into(),
                module: "serve".into(),
                file: Some("serve.cu".into()),
                line: Some(42),
            }],
            ..Site::default()
        },
        launch: Site {
            call: "cudaGraphLaunch (cuGraphLaunch)".into(),
            ..Site::default()
        },
    };
    let mut out = String::new();
    render(&mut out, &[f]);
    assert_eq!(
        out,
        "
error: graph 0x61 (exec 0xe1) launched after memory its node n1 (kernel 'lm_head') touches was freed; reported before the launch ran
    bytes: [0x7f0000000000, 0x7f0000001000) (4096 bytes) of the freed range 0x7f0000000000+4096
    allocated: cudaMalloc (cuMemAlloc_v2) at serve.py:10 in main
    freed:     cudaFree (cuMemFree_v2) at serve.cu:42 in unload
    launched:  cudaGraphLaunch (cuGraphLaunch)
    fix: keep the memory alive while the graph may be launched, or capture the graph again after the free
"
    );
}
