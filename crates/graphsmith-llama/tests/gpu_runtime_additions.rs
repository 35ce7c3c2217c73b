//! GPU tests (ignored without a GPU) of the two runtime additions the decoder relies on:
//! `Stream::library_call` (a journaled library call with declared accesses) and
//! `Exec::relocate` (moving an executable onto new buffers in place).
//!
//! `cargo test -p graphsmith-llama --release --test gpu_runtime_additions -- --ignored`

use graphsmith::model::{AccessMode, NodeKind};
use graphsmith::{args, read, sys, write, CaptureMode, Context, LaunchConfig, Relocation};

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_library_call_becomes_a_labelled_node_with_its_accesses() {
    let ctx = Context::new(0).unwrap();
    let stream = ctx.stream("main").unwrap();
    let src = ctx.alloc::<u32>("src", 256).unwrap();
    let mut dst = ctx.alloc::<u32>("dst", 256).unwrap();
    stream.upload(&mut dst, &[0xdead_beef; 256]).unwrap();
    let (s, d) = (src.device_ptr(), dst.device_ptr());
    let (graph, ()) = stream
        .capture(CaptureMode::Global, "lib", |st| {
            // A "library" that copies src into dst with the driver (one copy node).
            st.library_call("fake gemm", &[read(&src)], &[write(&mut dst)], |raw| {
                // SAFETY: both pointers are live allocations of 1 KiB; raw is the capturing stream.
                unsafe { sys::cuMemcpyDtoDAsync_v2(d, s, 1024, raw) }
            })
        })
        .unwrap();
    let node = graph
        .model()
        .nodes
        .iter()
        .find(|n| n.label == "fake gemm")
        .expect("the node is labelled");
    assert!(matches!(node.kind, NodeKind::Memcpy(_)));
    let modes: Vec<_> = node
        .accesses
        .iter()
        .map(|a| (a.label.as_str(), a.mode))
        .collect();
    assert_eq!(
        modes,
        [("src", AccessMode::Read), ("dst", AccessMode::Write)]
    );
    assert!(node
        .provenance
        .as_ref()
        .unwrap()
        .file
        .ends_with("gpu_runtime_additions.rs"));
    // dst was poisoned before; replaying copies the pattern over it.
    let mut src = src;
    stream
        .upload(&mut src, &(0..256).collect::<Vec<u32>>())
        .unwrap();
    let mut exec = graph.instantiate().unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(
        stream.download(&dst).unwrap(),
        (0..256).collect::<Vec<u32>>()
    );

    // A failing call names the operation and its label.
    let err = stream
        .library_call("broken", &[], &[], |_| {
            sys::CUresult::CUDA_ERROR_INVALID_VALUE
        })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Stream::library_call") && err.contains("CUDA_ERROR_INVALID_VALUE"),
        "{err}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn relocate_moves_an_executable_onto_new_buffers_and_frees_the_old() {
    let ctx = Context::new(0).unwrap();
    let stream = ctx.stream("main").unwrap();
    let add = ctx.builtin_kernels().unwrap().kernel("gs_add_f32").unwrap();
    let n = 16usize << 20; // 64 MiB per buffer, so freeing one shows in cuMemGetInfo
    let mut a = ctx.alloc::<f32>("a", n).unwrap();
    let mut b = ctx.alloc::<f32>("b", n).unwrap();
    let mut out = ctx.alloc::<f32>("out", n).unwrap();
    stream.upload(&mut a, &vec![1.0; n]).unwrap();
    stream.upload(&mut b, &vec![2.0; n]).unwrap();
    let (graph, ()) = stream
        .capture(CaptureMode::Global, "add", |s| {
            s.launch(
                "a+b",
                &add,
                LaunchConfig::for_elements(n as u32),
                args![&a, &b, &mut out, n as u32],
            )
        })
        .unwrap();
    let mut exec = graph.into_exec().unwrap();
    stream.upload(&mut out, &vec![f32::NAN; n]).unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(stream.download(&out).unwrap(), vec![3.0; n]);

    let mut a2 = ctx.alloc::<f32>("a2", n).unwrap();
    stream
        .upload(&mut a2, &(0..n).map(|i| i as f32).collect::<Vec<_>>())
        .unwrap();
    let moved = exec.relocate(&[Relocation::new(&a, &a2).unwrap()]).unwrap();
    assert_eq!((moved.nodes, moved.words), (1, 1));
    let (free_before, _) = ctx.memory_info().unwrap();
    drop(a);
    let (free_after, _) = ctx.memory_info().unwrap();
    assert!(
        free_after >= free_before + n * 4,
        "the old buffer is no longer held by the executable: free {free_before} -> {free_after}"
    );
    stream.upload(&mut out, &vec![f32::NAN; n]).unwrap();
    exec.launch(&stream).unwrap();
    assert_eq!(
        stream.download(&out).unwrap(),
        (0..n).map(|i| i as f32 + 2.0).collect::<Vec<_>>()
    );
    let node = exec
        .model()
        .nodes
        .iter()
        .find(|n| n.label == "a+b")
        .unwrap();
    assert!(
        node.accesses.iter().any(|x| x.label == "a2"),
        "{:?}",
        node.accesses
    );
    assert!(exec.model().hazards().unwrap().is_clean());

    let small = ctx.alloc::<f32>("small", 8).unwrap();
    let err = Relocation::new(&b, &small).err().unwrap().to_string();
    assert!(err.contains("same size"), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn relocate_finds_each_move_among_many_and_leaves_other_pointers() {
    // A chain of adds over 40 buffers, half of them moved (given in shuffled order), including
    // pointers to the middle of a buffer: each moved pointer lands at the same offset of its
    // own new buffer, and the unmoved ones stay.
    let ctx = Context::new(0).unwrap();
    let stream = ctx.stream("main").unwrap();
    let add = ctx.builtin_kernels().unwrap().kernel("gs_add_f32").unwrap();
    let n = 256usize;
    let count = 40;
    let mut bufs: Vec<_> = (0..count)
        .map(|i| ctx.alloc::<f32>(&format!("in{i}"), 2 * n).unwrap())
        .collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        stream.upload(b, &vec![i as f32; 2 * n]).unwrap();
    }
    let mut outs: Vec<_> = (0..count / 2)
        .map(|i| ctx.alloc::<f32>(&format!("out{i}"), n).unwrap())
        .collect();
    let (graph, ()) = stream
        .capture(CaptureMode::Global, "adds", |s| {
            for (i, out) in outs.iter_mut().enumerate() {
                // in[2i] (its second half) + in[2i + 1] (its first half).
                s.launch(
                    &format!("add{i}"),
                    &add,
                    LaunchConfig::for_elements(n as u32),
                    args![
                        bufs[2 * i].slice(n..2 * n),
                        bufs[2 * i + 1].slice(0..n),
                        &mut *out,
                        n as u32
                    ],
                )?;
            }
            Ok(())
        })
        .unwrap();
    let mut exec = graph.into_exec().unwrap();
    // Move the buffers whose index is a multiple of 3, in an order unrelated to their addresses.
    let mut moved_idx: Vec<usize> = (0..count).filter(|i: &usize| i.is_multiple_of(3)).collect();
    moved_idx.reverse();
    moved_idx.rotate_left(3);
    let mut fresh = Vec::new();
    for &i in &moved_idx {
        let mut b = ctx.alloc::<f32>(&format!("new{i}"), 2 * n).unwrap();
        stream
            .upload(&mut b, &vec![100.0 + i as f32; 2 * n])
            .unwrap();
        fresh.push((i, b));
    }
    let moves: Vec<_> = fresh
        .iter()
        .map(|(i, b)| Relocation::new(&bufs[*i], b).unwrap())
        .collect();
    exec.relocate(&moves).unwrap();
    for out in outs.iter_mut() {
        stream.upload(out, &vec![f32::NAN; n]).unwrap();
    }
    exec.launch(&stream).unwrap();
    let value = |i: usize| {
        if i.is_multiple_of(3) {
            100.0 + i as f32
        } else {
            i as f32
        }
    };
    for (i, out) in outs.iter().enumerate() {
        let want = value(2 * i) + value(2 * i + 1);
        assert_eq!(stream.download(out).unwrap(), vec![want; n], "add{i}");
    }
}
