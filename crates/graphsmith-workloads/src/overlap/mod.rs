//! Weight streaming (docs/overlap.md): each layer's weights live in page-locked host memory; a
//! copy stream copies layer `l + R` into a ring of `R` device slots while the compute stream runs
//! layer `l` over its slot. Every copy and every layer is a graph: a copy graph waits (event wait
//! node) until the layer that last used its slot has finished, copies, and records "weights
//! ready"; a layer's graph waits for that record, runs its kernels and records "slot free".
//!
//! A layer is a chain of GEMVs over a Llama-shaped layer (q, k, v, o: `hidden x hidden`; gate,
//! up: `ffn x hidden`; down: `hidden x ffn`), with the built-in `proj` kernel (one thread per
//! row, summed in order) and `attention` (`q*k + v`, element-wise) joining them:
//! `q, k, v = Wq x, Wk x, Wv x; a = q*k + v; o = Wo a; g, u = Wg o, Wu o; m = g*u + u;
//! x' = Wd m`. Every weight is read, and the result is bit-exact against [`reference`].

mod layer;

pub use layer::*;

use graphsmith::{
    args, Context, DeviceBuffer, Event, Exec, HostBuffer, Kernel, LaunchConfig, NodeRef, Result,
    Stream,
};

use crate::{ATTENTION_KERNEL, PROJ_KERNEL};

/// What a layer's kernels write besides its output.
struct Scratch {
    q: DeviceBuffer<f32>,
    k: DeviceBuffer<f32>,
    v: DeviceBuffer<f32>,
    a: DeviceBuffer<f32>,
    o: DeviceBuffer<f32>,
    g: DeviceBuffer<f32>,
    u: DeviceBuffer<f32>,
    m: DeviceBuffer<f32>,
}

/// The streamed model: host weights, the ring, one copy graph and one layer graph per layer.
pub struct WeightStream {
    pub shape: Shape,
    pub layers: usize,
    pub ring: usize,
    /// Times each layer's chain runs over its weights (more compute per byte copied).
    pub repeat: usize,
    host: Vec<HostBuffer<f32>>,
    /// Each layer's output; layer `l` reads `outs[l - 1]` (layer 0 reads `x0`).
    outs: Vec<DeviceBuffer<f32>>,
    copies: Vec<Exec>,
    computes: Vec<Exec>,
    /// The whole pass as one graph: the copies a path beside the layers, slots guarded by edges.
    pass: Exec,
    /// Kept for the graphs' events (the executables hold them too).
    _events: Vec<Event>,
}

/// One layer's GEMV chain over `w` (a ring slot) from `x` into `out`, after `deps`; returns the
/// last node.
#[allow(clippy::too_many_arguments)]
fn layer_nodes(
    g: &mut graphsmith::Graph,
    k: &(Kernel, Kernel),
    shape: &Shape,
    w: &DeviceBuffer<f32>,
    x: &DeviceBuffer<f32>,
    out: &mut DeviceBuffer<f32>,
    s: &mut Scratch,
    deps: &[&NodeRef],
) -> Result<NodeRef> {
    let (proj, att) = k;
    let o = shape.offsets();
    let d = shape.matrices();
    let cfg = |rows: usize| LaunchConfig {
        grid: graphsmith::model::Dim3::linear(rows.div_ceil(32) as u32),
        block: graphsmith::model::Dim3::linear(32),
        shared_mem_bytes: 0,
    };
    let wv = |m: usize| w.slice(o[m]..o[m] + d[m].0 * d[m].1);
    let (h, f) = (shape.hidden as i32, shape.ffn as i32);
    let ew = |n: i32| LaunchConfig::for_elements(n as u32);
    let q = g.kernel(
        "q",
        proj,
        cfg(d[0].0),
        args![x, wv(0), &mut s.q, h, h],
        deps,
    )?;
    let kk = g.kernel(
        "k",
        proj,
        cfg(d[1].0),
        args![x, wv(1), &mut s.k, h, h],
        deps,
    )?;
    let v = g.kernel(
        "v",
        proj,
        cfg(d[2].0),
        args![x, wv(2), &mut s.v, h, h],
        deps,
    )?;
    let a = g.kernel(
        "qk+v",
        att,
        ew(h),
        args![&s.q, &s.k, &s.v, &mut s.a, h],
        &[&q, &kk, &v],
    )?;
    let po = g.kernel(
        "o",
        proj,
        cfg(d[3].0),
        args![&s.a, wv(3), &mut s.o, h, h],
        &[&a],
    )?;
    let pg = g.kernel(
        "gate",
        proj,
        cfg(d[4].0),
        args![&s.o, wv(4), &mut s.g, f, h],
        &[&po],
    )?;
    let pu = g.kernel(
        "up",
        proj,
        cfg(d[5].0),
        args![&s.o, wv(5), &mut s.u, f, h],
        &[&po],
    )?;
    let m = g.kernel(
        "gu+u",
        att,
        ew(f),
        args![&s.g, &s.u, &s.u, &mut s.m, f],
        &[&pg, &pu],
    )?;
    g.kernel(
        "down",
        proj,
        cfg(d[6].0),
        args![&s.m, wv(6), out, h, f],
        &[&m],
    )
}

/// The whole pass as one graph: copy `l` after copy `l - 1` and after layer `l - R` (the last
/// reader of its slot), layer `l` after copy `l` and layer `l - 1`. The driver runs the copies,
/// a path of their own, beside the layers.
#[allow(clippy::too_many_arguments)]
fn one_graph(
    ctx: &Context,
    shape: &Shape,
    kernels: &(Kernel, Kernel),
    host: &[HostBuffer<f32>],
    slots: &mut [DeviceBuffer<f32>],
    x0: &DeviceBuffer<f32>,
    outs: &mut [DeviceBuffer<f32>],
    scratch: &mut Scratch,
    repeat: usize,
) -> Result<Exec> {
    let ring = slots.len();
    let mut g = ctx.graph("weight-stream-pass")?;
    let mut copies: Vec<NodeRef> = Vec::with_capacity(host.len());
    let mut lasts: Vec<NodeRef> = Vec::with_capacity(host.len());
    for (l, weights) in host.iter().enumerate() {
        let mut deps: Vec<&NodeRef> = copies.last().into_iter().collect();
        deps.extend(l.checked_sub(ring).map(|r| &lasts[r]));
        let label = format!("load-layer-{l}");
        let copy = g.memcpy_from_host(&label, &mut slots[l % ring], weights, &deps)?;
        let (before, rest) = outs.split_at_mut(l);
        let x = if l == 0 { x0 } else { &before[l - 1] };
        let mut last = copy.clone();
        for i in 0..repeat.max(1) {
            let mut deps = vec![&last];
            if i == 0 {
                deps.extend(lasts.last());
            }
            let node = layer_nodes(
                &mut g,
                kernels,
                shape,
                &slots[l % ring],
                x,
                &mut rest[0],
                scratch,
                &deps,
            )?;
            last = node;
        }
        copies.push(copy);
        lasts.push(last);
    }
    g.instantiate()
}

impl WeightStream {
    /// Allocates `layers` layers of page-locked weights (filled on the host), a ring of `ring`
    /// device slots, and builds the graphs.
    pub fn new(
        ctx: &Context,
        stream: &Stream,
        shape: Shape,
        layers: usize,
        ring: usize,
        repeat: usize,
    ) -> Result<WeightStream> {
        let layers = layers.max(1);
        let ring = ring.clamp(1, layers);
        let module = ctx.builtin_kernels()?;
        let kernels = (
            module.kernel(PROJ_KERNEL)?,
            module.kernel(ATTENTION_KERNEL)?,
        );
        let n = shape.elements();
        let mut host = Vec::with_capacity(layers);
        let mut chunk = vec![0.0f32; n.min(1 << 24)];
        for l in 0..layers {
            let mut h = ctx.alloc_host::<f32>(&format!("layer-{l}-weights"), n)?;
            let mut at = 0;
            while at < n {
                let len = chunk.len().min(n - at);
                weights_into(&shape, l, at, &mut chunk[..len]);
                h.write(at, &chunk[..len])?;
                at += len;
            }
            host.push(h);
        }
        let mut slots = (0..ring)
            .map(|s| ctx.alloc::<f32>(&format!("slot-{s}"), n))
            .collect::<Result<Vec<_>>>()?;
        let mut x0 = ctx.alloc::<f32>("x0", shape.hidden)?;
        stream.upload(&mut x0, &input(&shape))?;
        let mut outs = (0..layers)
            .map(|l| ctx.alloc::<f32>(&format!("layer-{l}-out"), shape.hidden))
            .collect::<Result<Vec<_>>>()?;
        let (hd, fd) = (shape.hidden, shape.ffn);
        let buf = |name: &str, len: usize| ctx.alloc::<f32>(name, len);
        let mut scratch = Scratch {
            q: buf("q", hd)?,
            k: buf("k", hd)?,
            v: buf("v", hd)?,
            a: buf("a", hd)?,
            o: buf("o", hd)?,
            g: buf("g", fd)?,
            u: buf("u", fd)?,
            m: buf("m", fd)?,
        };
        let event = |name: String| ctx.event(&name, false);
        let ready = (0..layers)
            .map(|l| event(format!("layer-{l}-weights-ready")))
            .collect::<Result<Vec<_>>>()?;
        let free = (0..layers)
            .map(|l| event(format!("layer-{l}-slot-free")))
            .collect::<Result<Vec<_>>>()?;
        let mut copies = Vec::with_capacity(layers);
        let mut computes = Vec::with_capacity(layers);
        for l in 0..layers {
            let s = l % ring;
            // The copy waits for the last layer that read its slot: layer l - R of this pass,
            // or, for the first R layers, layer L - R + l of the pass before (a wait on an event
            // never recorded, in the first pass, waits for nothing).
            let reader = (l + layers - ring) % layers;
            let mut g = ctx.graph(&format!("copy-layer-{l}"))?;
            let wait = g.event_wait("wait-slot-free", &free[reader], &[])?;
            let copy = g.memcpy_from_host(
                &format!("load-layer-{l}"),
                &mut slots[s],
                &host[l],
                &[&wait],
            )?;
            g.event_record("weights-ready", &ready[l], &[&copy])?;
            copies.push(g.instantiate()?);

            let mut g = ctx.graph(&format!("layer-{l}"))?;
            let mut last = g.event_wait("wait-weights", &ready[l], &[])?;
            let (before, rest) = outs.split_at_mut(l);
            let x = if l == 0 { &x0 } else { &before[l - 1] };
            for _ in 0..repeat.max(1) {
                last = layer_nodes(
                    &mut g,
                    &kernels,
                    &shape,
                    &slots[s],
                    x,
                    &mut rest[0],
                    &mut scratch,
                    &[&last],
                )?;
            }
            g.event_record("slot-free", &free[l], &[&last])?;
            computes.push(g.instantiate()?);
        }
        let pass = one_graph(
            ctx,
            &shape,
            &kernels,
            &host,
            &mut slots,
            &x0,
            &mut outs,
            &mut scratch,
            repeat,
        )?;
        let mut events = ready;
        events.extend(free);
        Ok(WeightStream {
            shape,
            layers,
            ring,
            repeat: repeat.max(1),
            host,
            outs,
            copies,
            computes,
            pass,
            _events: events,
        })
    }

    /// One pass, overlapped: the first `R` copies on `copy`, then each layer on `compute`
    /// followed by the copy into the slot it frees, on `copy`. `copy` first waits for
    /// everything issued to `compute` so far (a pass starts after the one before it).
    pub fn run_overlapped(&mut self, compute: &Stream, copy: &Stream) -> Result<()> {
        copy.join(compute)?;
        for c in self.copies.iter_mut().take(self.ring) {
            c.launch(copy)?;
        }
        for l in 0..self.layers {
            self.computes[l].launch(compute)?;
            if let Some(c) = self.copies.get_mut(l + self.ring) {
                c.launch(copy)?;
            }
        }
        // The last layer waited for the last copy: `compute` holds the whole pass.
        Ok(())
    }

    /// One pass as one graph on `stream` (see [`WeightStream::new`]).
    pub fn run_one_graph(&mut self, stream: &Stream) -> Result<()> {
        self.pass.launch(stream)
    }

    /// One pass, serialized on one stream: copy layer l, run it, copy layer l + 1, ...
    pub fn run_serialized(&mut self, stream: &Stream) -> Result<()> {
        for (c, k) in self.copies.iter_mut().zip(self.computes.iter_mut()) {
            c.launch(stream)?;
            k.launch(stream)?;
        }
        Ok(())
    }

    /// Only the copies of one pass, on one stream.
    pub fn run_copies(&mut self, stream: &Stream) -> Result<()> {
        self.copies.iter_mut().try_for_each(|c| c.launch(stream))
    }

    /// Only the layers of one pass (over whatever the slots hold), on one stream.
    pub fn run_computes(&mut self, stream: &Stream) -> Result<()> {
        self.computes.iter_mut().try_for_each(|c| c.launch(stream))
    }

    /// Each layer's output buffer.
    pub fn outputs(&self) -> &[DeviceBuffer<f32>] {
        &self.outs
    }

    /// Each layer's outputs buffer, for poisoning before a run.
    pub fn outputs_mut(&mut self) -> &mut [DeviceBuffer<f32>] {
        &mut self.outs
    }

    /// Bytes of weights one pass copies.
    pub fn pass_bytes(&self) -> usize {
        self.shape.bytes() * self.layers
    }

    /// The page-locked weights of layer `l`.
    pub fn host_weights(&self, l: usize) -> Option<&HostBuffer<f32>> {
        self.host.get(l)
    }
}

/// The device attributes that say how the GPU reaches host memory: copy engines
/// (`CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT`), its PCI address, and whether it reads host page
/// tables and has native host atomics (both 1 over NVLink-C2C, as on Grace Hopper). The PCIe
/// generation and width are not among the driver's attributes: the measured bandwidth stands
/// for the link.
pub fn link_facts(ctx: &Context) -> Result<Vec<(&'static str, i32)>> {
    use graphsmith::sys::CUdevice_attribute as A;
    let wanted = [
        (
            "async_engine_count",
            A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT,
        ),
        (
            "concurrent_kernels",
            A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS,
        ),
        ("pci_domain_id", A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        ("pci_bus_id", A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        ("pci_device_id", A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
        ("integrated", A::CU_DEVICE_ATTRIBUTE_INTEGRATED),
        (
            "pageable_memory_access_uses_host_page_tables",
            A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
        ),
        (
            "host_native_atomic_supported",
            A::CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED,
        ),
        (
            "gpu_direct_rdma_supported",
            A::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
        ),
    ];
    let device = ctx.device();
    let mut out = Vec::with_capacity(wanted.len());
    for (name, attribute) in wanted {
        let mut value = 0;
        // SAFETY: `device` is the context's device (from cuDeviceGet) and `value` a live local
        // the driver writes one int into.
        ctx.interop(name, || unsafe {
            graphsmith::sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        out.push((name, value));
    }
    Ok(out)
}
