//! A 2-D device-to-device copy with pitch and x/y offsets on both sides, built with raw driver
//! calls (`cuGraphAddMemcpyNode`, as another library would), read back through
//! `graphsmith::read_raw_graph`: its accesses are exactly the ones a host computation predicts,
//! and running the graph changes exactly the bytes those accesses cover. The tracer's GPU
//! program checks the same copy through `graphsmith trace --hazards` (`faults hazard-2d`).

mod common;

use common::Gpu;
use graphsmith::model::{AccessMode, MemorySpace, NodeKind};
use graphsmith::sys;

/// The copy: 6 rows of 100 bytes, from (x 16, y 2) of a source with a 512-byte pitch into
/// (x 8, y 5) of a destination with a 256-byte pitch.
const SRC_PITCH: usize = 512;
const DST_PITCH: usize = 256;
const WIDTH: usize = 100;
const HEIGHT: usize = 6;
const SRC_X: usize = 16;
const SRC_Y: usize = 2;
const DST_X: usize = 8;
const DST_Y: usize = 5;
const SRC_BYTES: usize = SRC_PITCH * 16;
const DST_BYTES: usize = DST_PITCH * 16;
const POISON: u8 = 0xee;

/// (offset, len) a side of the copy touches in its buffer, computed on the host.
fn predicted(x: usize, y: usize, pitch: usize) -> (u64, u64) {
    (
        (x + y * pitch) as u64,
        ((HEIGHT - 1) * pitch + WIDTH) as u64,
    )
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_2d_copy_with_pitch_and_offsets_reads_back_with_the_predicted_accesses() {
    let gpu = Gpu::new();
    // Values 1..=200: never the poison.
    let src_values: Vec<u8> = (0..SRC_BYTES).map(|i| (i * 7 % 200 + 1) as u8).collect();
    let mut src = gpu.ctx.alloc::<u8>("src", SRC_BYTES).unwrap();
    gpu.stream.upload(&mut src, &src_values).unwrap();
    let mut dst = gpu.ctx.alloc::<u8>("dst", DST_BYTES).unwrap();
    gpu.stream
        .upload(&mut dst, &vec![POISON; DST_BYTES])
        .unwrap();
    gpu.stream.synchronize().unwrap();
    let (src_base, dst_base) = (src.device_ptr(), dst.device_ptr());

    let ok = sys::CUresult::CUDA_SUCCESS;
    // Every field set: CUDA_MEMCPY3D holds enums without a zero value.
    let p = sys::CUDA_MEMCPY3D {
        srcXInBytes: SRC_X,
        srcY: SRC_Y,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: src_base,
        srcArray: std::ptr::null_mut(),
        reserved0: std::ptr::null_mut(),
        srcPitch: SRC_PITCH,
        srcHeight: 16,
        dstXInBytes: DST_X,
        dstY: DST_Y,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst_base,
        dstArray: std::ptr::null_mut(),
        reserved1: std::ptr::null_mut(),
        dstPitch: DST_PITCH,
        dstHeight: 16,
        WidthInBytes: WIDTH,
        Height: HEIGHT,
        Depth: 1,
    };
    let mut graph = std::ptr::null_mut();
    let mut node = std::ptr::null_mut();
    // SAFETY: test code; the graph and node are created here, p is a complete CUDA_MEMCPY3D
    // whose buffers outlive the graph, and the context is graphsmith's (current after the
    // uploads above).
    unsafe {
        assert_eq!(sys::cuGraphCreate(&mut graph, 0), ok);
        assert_eq!(
            sys::cuGraphAddMemcpyNode(&mut node, graph, std::ptr::null(), 0, &p, gpu.ctx.raw()),
            ok
        );
    }

    // SAFETY: graph is live and used by no other thread.
    let model = unsafe { graphsmith::read_raw_graph(&gpu.ctx, graph, "copy-2d") }.unwrap();
    assert_eq!(model.nodes.len(), 1);
    let NodeKind::Memcpy(m) = &model.nodes[0].kind else {
        panic!("not a copy: {:?}", model.nodes[0].kind)
    };
    let (src_off, src_len) = predicted(SRC_X, SRC_Y, SRC_PITCH);
    let (dst_off, dst_len) = predicted(DST_X, DST_Y, DST_PITCH);
    assert_eq!(
        (m.src.space, m.dst.space),
        (MemorySpace::Device, MemorySpace::Device)
    );
    assert_eq!(m.src.address, src_base + src_off);
    assert_eq!(m.dst.address, dst_base + dst_off);
    assert_eq!(m.bytes, (WIDTH * HEIGHT) as u64);
    let got: Vec<(u64, u64, u64, AccessMode)> = model.nodes[0]
        .accesses
        .iter()
        .map(|a| (a.buffer, a.offset, a.len, a.mode))
        .collect();
    println!("read back: {got:x?}");
    assert_eq!(
        got,
        [
            (src_base, src_off, src_len, AccessMode::Read),
            (dst_base, dst_off, dst_len, AccessMode::Write)
        ]
    );

    // Run it: exactly the predicted rows change, to the source's bytes.
    let mut exec = std::ptr::null_mut();
    // SAFETY: graph is live; exec is created, launched on graphsmith's live stream, waited
    // for and destroyed here.
    unsafe {
        assert_eq!(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0), ok);
        assert_eq!(sys::cuGraphLaunch(exec, gpu.stream.raw()), ok);
    }
    gpu.stream.synchronize().unwrap();
    let out = gpu.stream.download(&dst).unwrap();
    let mut want = vec![POISON; DST_BYTES];
    for r in 0..HEIGHT {
        let s = SRC_X + (SRC_Y + r) * SRC_PITCH;
        let d = DST_X + (DST_Y + r) * DST_PITCH;
        want[d..d + WIDTH].copy_from_slice(&src_values[s..s + WIDTH]);
    }
    assert_eq!(out, want);
    let changed: Vec<usize> = (0..DST_BYTES).filter(|&i| out[i] != POISON).collect();
    let (first, last) = (changed[0] as u64, *changed.last().unwrap() as u64);
    assert!(
        first >= dst_off && last < dst_off + dst_len,
        "{first}..={last}"
    );
    assert_eq!((first, last + 1), (dst_off, dst_off + dst_len));
    // SAFETY: both were created above and are no longer used.
    unsafe {
        assert_eq!(sys::cuGraphExecDestroy(exec), ok);
        assert_eq!(sys::cuGraphDestroy(graph), ok);
    }
}
