//! GPU tests of `Exec::relocate` beyond its first use: the index kept across swaps (a second
//! swap prepares nothing), the timing breakdown, the driver template brought in step only
//! when asked for, per-node updates between swaps, and a set node on a moved buffer refused
//! with nothing changed.

mod common;

use common::{assert_same, inputs, Gpu};
use graphsmith::{args, CaptureMode, DeviceBuffer, LaunchConfig, Relocation};

const N: usize = 1024;
const K: usize = 8;

/// `a[i] + b` element by element.
fn sums(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// A move from each of `old` to the buffer of the same position in `new`.
fn pairs(old: &[DeviceBuffer<f32>], new: &[DeviceBuffer<f32>]) -> Vec<Relocation> {
    old.iter()
        .zip(new)
        .map(|(o, n)| Relocation::new(o, n).unwrap())
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn relocating_back_and_forth_reuses_the_index_and_its_times_add_up() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let bv = inputs(N, 99);
    let b = gpu.buffer("b", &bv);
    let set = |tag: &str, seed: u32| -> (Vec<Vec<f32>>, Vec<DeviceBuffer<f32>>) {
        let host: Vec<Vec<f32>> = (0..K).map(|i| inputs(N, seed + i as u32)).collect();
        let dev = host
            .iter()
            .enumerate()
            .map(|(i, v)| gpu.buffer(&format!("{tag}{i}"), v))
            .collect();
        (host, dev)
    };
    let (h1, a1) = set("a", 1);
    let mut outs: Vec<_> = (0..K)
        .map(|i| gpu.poisoned(&format!("out{i}"), N))
        .collect();
    let (graph, ()) = gpu
        .stream
        .capture(CaptureMode::Global, "adds", |s| {
            for (i, out) in outs.iter_mut().enumerate() {
                s.launch(
                    &format!("add{i}"),
                    &add,
                    cfg,
                    args![&a1[i], &b, &mut *out, N as u32],
                )?;
            }
            Ok(())
        })
        .unwrap();
    let mut exec = graph.into_exec().unwrap();
    let mut run_and_check = |exec: &mut graphsmith::Exec, host: &[Vec<f32>], what: &str| {
        for out in outs.iter_mut() {
            gpu.poison(out);
        }
        exec.launch(&gpu.stream).unwrap();
        for (i, out) in outs.iter().enumerate() {
            assert_same(
                &format!("{what}: out{i}"),
                &gpu.read(out),
                &sums(&host[i], &bv),
            );
        }
    };
    run_and_check(&mut exec, &h1, "captured");

    // First swap: pays the read-back and the index.
    let (h2, a2) = set("second", 101);
    let moves = pairs(&a1, &a2);
    let first = exec.relocate(&moves).unwrap();
    drop(moves);
    drop(a1);
    println!("first relocation: {first:?}");
    assert_eq!((first.nodes, first.words), (K, K));
    assert!(
        first.index_ns > 0,
        "the first relocation indexes the graph: {first:?}"
    );
    assert!(first.driver_ns > 0, "{first:?}");
    assert_eq!(first.switch_ns(), first.driver_ns + first.host_ns);
    run_and_check(&mut exec, &h2, "first swap");

    // Second swap, onward to new buffers: the index follows the moved allocations.
    let (h3, a3) = set("third", 201);
    let moves = pairs(&a2, &a3);
    let prepared = exec.prepare_relocation(&moves).unwrap();
    assert_eq!(
        prepared, 0,
        "the index kept from the first swap covers the second"
    );
    let second = exec.relocate(&moves).unwrap();
    drop(moves);
    drop(a2);
    println!("second relocation: {second:?}");
    assert_eq!((second.nodes, second.words, second.index_ns), (K, K, 0));
    assert_eq!(second.switch_ns(), second.driver_ns + second.host_ns);
    run_and_check(&mut exec, &h3, "second swap");
    assert_eq!(exec.stats().node_updates, 2 * K as u64);
    assert_eq!(exec.stats().reinstantiations, 0);
    let labels: Vec<&str> = exec
        .model()
        .nodes
        .iter()
        .flat_map(|n| n.accesses.iter().map(|a| a.label.as_str()))
        .collect();
    assert!(
        labels.contains(&"third0") && !labels.contains(&"a0"),
        "{labels:?}"
    );
    assert!(exec.model().hazards().unwrap().is_clean());

    // The driver template was left behind by the swaps and is brought in step when asked for:
    // an executable made from it runs the third set too.
    let mut again = exec.template().unwrap().instantiate().unwrap();
    run_and_check(&mut again, &h3, "the template's own executable");
    // A swap that moves nothing the graph uses changes nothing.
    let (_, spare) = set("spare", 301);
    let (_, spare2) = set("spare-new", 401);
    let unrelated = Relocation::new(&spare[0], &spare2[0]).unwrap();
    let none = exec.relocate(&[unrelated]).unwrap();
    assert_eq!((none.nodes, none.words), (0, 0));
    run_and_check(&mut exec, &h3, "after an unrelated move");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_per_node_update_between_swaps_is_seen_by_the_next_one() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let (av, bv, cv, c2v) = (inputs(N, 1), inputs(N, 2), inputs(N, 3), inputs(N, 4));
    let (a, a2) = (gpu.buffer("a", &av), gpu.buffer("a2", &inputs(N, 5)));
    let (b, c, c2) = (
        gpu.buffer("b", &bv),
        gpu.buffer("c", &cv),
        gpu.buffer("c2", &c2v),
    );
    let mut out = gpu.poisoned("out", N);
    let mut g = gpu.ctx.graph("one-add").unwrap();
    let node = g
        .kernel("add", &add, cfg, args![&a, &b, &mut out, N as u32], &[])
        .unwrap();
    let mut exec = g.into_exec().unwrap();
    exec.relocate(&[Relocation::new(&a, &a2).unwrap()]).unwrap();
    // A per-node update points the node at c; the index of the first swap no longer holds.
    exec.set_kernel(&node, cfg, args![&c, &b, &mut out, N as u32])
        .unwrap();
    let moved = exec.relocate(&[Relocation::new(&c, &c2).unwrap()]).unwrap();
    assert!(moved.index_ns > 0, "the index is made again: {moved:?}");
    assert_eq!((moved.nodes, moved.words), (1, 1));
    gpu.poison(&mut out);
    exec.launch(&gpu.stream).unwrap();
    assert_same(
        "after the update and the swap",
        &gpu.read(&out),
        &sums(&c2v, &bv),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_set_node_on_a_moved_buffer_is_refused_and_nothing_changes() {
    let gpu = Gpu::new();
    let add = gpu.kernel("gs_add_f32");
    let cfg = LaunchConfig::for_elements(N as u32);
    let bv = inputs(N, 7);
    let mut a = gpu.poisoned("a", N);
    let a2 = gpu.buffer("a2", &inputs(N, 8));
    let b = gpu.buffer("b", &bv);
    let mut out = gpu.poisoned("out", N);
    let mut g = gpu.ctx.graph("fill-add").unwrap();
    let fill = g.memset("fill-a", &mut a, 1.5f32, &[]).unwrap();
    g.kernel(
        "add",
        &add,
        cfg,
        args![&a, &b, &mut out, N as u32],
        &[&fill],
    )
    .unwrap();
    let mut exec = g.into_exec().unwrap();
    let err = exec
        .relocate(&[Relocation::new(&a, &a2).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Exec::relocate")
            && err.contains(
                "node 'fill-a' (a memset node) works on 'a', and relocation rewrites kernel arguments only"
            )
            && err.contains("capture the graph again instead"),
        "{err}"
    );
    assert_eq!(exec.stats().node_updates, 0);
    gpu.poison(&mut out);
    exec.launch(&gpu.stream).unwrap();
    let want: Vec<f32> = bv.iter().map(|x| 1.5 + x).collect();
    assert_same("unchanged after the refusal", &gpu.read(&out), &want);
}
