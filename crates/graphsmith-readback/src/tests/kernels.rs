//! Kernel arguments: the cap on a parameter's bytes, placeholders, the packed (`extra`) form,
//! kernels without arguments, and one kernel node read alone.

use super::*;
use crate::{KernelFunction, MAX_PARAM_BYTES};

/// A graph of one kernel node with `args`, its function of `layout`.
fn one_kernel(layout: Vec<(usize, usize)>, args: Args) -> Fake {
    let mut fake = Fake::default();
    fake.nodes.insert(1, kernel(FUNC, 0, args));
    fake.graphs.insert(
        TOP,
        Graph {
            nodes: vec![1],
            edges: Vec::new(),
        },
    );
    fake.functions
        .insert(FUNC, function("k", layout, [0, 0, 0]));
    fake
}

fn read_one(fake: Fake) -> (RawNode, Option<KernelFunction>, usize) {
    fake::install(fake);
    let mut read = read(&fake::full_table(), Policy::Strict).unwrap();
    (
        read.raw.nodes.remove(0),
        read.kernels.remove(0),
        read.params_over_cap,
    )
}

fn args_of(node: &RawNode) -> Vec<KernelArg> {
    match &node.kind {
        NodeKind::Kernel(k) => k.args.clone(),
        other => panic!("not a kernel: {other:?}"),
    }
}

fn arg(offset: u32, bytes: &[u8]) -> KernelArg {
    KernelArg {
        offset,
        bytes: bytes.to_vec(),
    }
}

#[test]
fn a_parameter_over_the_cap_is_a_placeholder_and_the_read_says_how_many() {
    let big = MAX_PARAM_BYTES + 1;
    let layout = vec![(0, MAX_PARAM_BYTES), (MAX_PARAM_BYTES, big), (2 * big, 8)];
    let args = Args::Params(vec![
        Some(vec![1; MAX_PARAM_BYTES]),
        Some(vec![2; big]),
        Some(vec![3; 8]),
    ]);
    let (node, kernel, over) = read_one(one_kernel(layout, args));
    let got = args_of(&node);
    assert_eq!(got[0], arg(0, &[1; MAX_PARAM_BYTES]));
    assert_eq!(got[1], arg(MAX_PARAM_BYTES as u32, &[]));
    assert_eq!(got[2], arg(2 * big as u32, &[3; 8]));
    assert_eq!(over, 1);
    // Read, but not complete: it cannot be written back to a node.
    assert!(!node.args_unread);
    assert!(!kernel.unwrap().complete);
}

#[test]
fn a_null_parameter_pointer_is_a_placeholder_at_its_place() {
    let args = Args::Params(vec![None, Some(vec![9; 4])]);
    let (node, kernel, over) = read_one(one_kernel(vec![(0, 8), (8, 4)], args));
    assert_eq!(args_of(&node), [arg(0, &[]), arg(8, &[9; 4])]);
    assert!(!node.args_unread);
    assert!(!kernel.unwrap().complete);
    assert_eq!(over, 0);
}

#[test]
fn packed_arguments_are_sliced_by_the_layout_within_the_buffer_size() {
    let buffer: Vec<u8> = (0..24).collect();
    let layout = vec![(0, 8), (8, 4), (16, 8), (20, 8), (usize::MAX, 2)];
    let args = Args::Extra {
        buffer: Some(buffer.clone()),
        size: 24,
    };
    let (node, kernel, _) = read_one(one_kernel(layout, args));
    assert_eq!(
        args_of(&node),
        [
            arg(0, &buffer[0..8]),
            arg(8, &buffer[8..12]),
            arg(16, &buffer[16..24]),
            // Past the buffer's size, or overflowing: placeholders.
            arg(20, &[]),
            arg(u32::MAX, &[]),
        ]
    );
    assert!(!node.args_unread);
    assert!(!kernel.unwrap().complete);
    // A size that covers it all: complete.
    let args = Args::Extra {
        buffer: Some(buffer.clone()),
        size: 24,
    };
    let (node, kernel, _) = read_one(one_kernel(vec![(0, 16), (16, 8)], args));
    assert_eq!(
        args_of(&node),
        [arg(0, &buffer[..16]), arg(16, &buffer[16..])]
    );
    assert!(kernel.unwrap().complete);
}

#[test]
fn a_kernel_without_arguments_in_either_form_has_them_unread() {
    for args in [
        Args::Neither,
        Args::Extra {
            buffer: None,
            size: 8,
        },
    ] {
        let (node, kernel, _) = read_one(one_kernel(vec![(0, 8)], args));
        assert!(node.args_unread);
        assert!(args_of(&node).is_empty());
        assert!(!kernel.unwrap().complete);
    }
    // A kernel without parameters has all of its (no) arguments.
    let (node, kernel, _) = read_one(one_kernel(Vec::new(), Args::Neither));
    assert!(!node.args_unread);
    assert!(kernel.unwrap().complete);
}

#[test]
fn one_kernel_node_reads_alone() {
    fake::install(every_kind());
    let table = fake::full_table();
    // SAFETY: the table holds the fake's functions; node 1 is the fake's kernel node.
    let k = unsafe {
        Reader::new(&table, Policy::Strict, Limits::GENEROUS).kernel(1usize as sys::CUgraphNode)
    }
    .unwrap();
    assert_eq!(
        k.params,
        kernel_params("step", the_two_args(), Some(Dim3::new(2, 1, 1)))
    );
    assert!(k.args_read);
    assert_eq!(k.function.unwrap().func as usize, FUNC);
}
