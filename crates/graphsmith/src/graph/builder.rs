//! The explicit builder: nodes added one by one, each with a label and explicit dependencies.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::{
    Access, AccessMode, KernelArg as ModelArg, KernelParams, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeKind,
};

use crate::context::Keep;
use crate::driver::{self, memcpy_1d, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Graph, NodeRef};
use crate::memory::{access, memset_bits};
use crate::memory::{check_host_copy_lengths, host_access, HostBuffer};
use crate::memory::{DeviceBuffer, Element};
use crate::module::{Args, Kernel, LaunchConfig};
use crate::stream::{Event, EventUse, Signal};

/// A host function kept alive by the graphs that call it.
struct HostFn {
    f: Box<dyn Fn() + Send + Sync>,
}

unsafe extern "C" fn host_trampoline(user_data: *mut std::ffi::c_void) {
    // SAFETY: user_data is Arc::as_ptr of a HostFn that every graph and executable calling it
    // keeps alive (Keep), and executables synchronise before releasing it.
    let host = unsafe { &*(user_data as *const HostFn) };
    // A panic must not unwind into the driver's thread.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (host.f)()));
}

impl Graph {
    /// Adds a node through `add`, after checking that every dependency is a node of this graph,
    /// and mirrors it in the model with its provenance and accesses.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add_node(
        &mut self,
        label: &str,
        op: &'static str,
        at: SourceLine,
        kind: NodeKind,
        accesses: Vec<Access>,
        keep: Vec<Keep>,
        deps: &[&NodeRef],
        add: impl FnOnce(&[sys::CUgraphNode]) -> Result<sys::CUgraphNode, Failure>,
    ) -> Result<NodeRef> {
        let node_object = || ObjectRef::new(ObjectKind::Node, label);
        let mut dep_handles = Vec::with_capacity(deps.len());
        for dep in deps {
            if dep.graph != self.id {
                return Err(Error::new(
                    ErrorKind::ForeignNode {
                        node: dep.label.to_string(),
                        node_graph: dep.graph_label.to_string(),
                    },
                    ObjectRef::new(ObjectKind::Graph, &*self.label),
                    op,
                    at,
                ));
            }
            dep_handles.push(self.handles()[dep.id.index()]);
        }
        let fail = |f: Failure| f.on(node_object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let handle = add(&dep_handles).map_err(fail)?;
        let model = self.model_mut();
        let id = model.add_node_with(label, kind, Some(crate::ranges::provenance(at)), accesses);
        for dep in deps {
            model.add_edge(dep.id, id).map_err(|e| {
                Error::new(ErrorKind::InvalidGraph(Box::new(e)), node_object(), op, at)
            })?;
        }
        self.handles_mut().push(handle);
        self.kernels_mut().push(None);
        Arc::make_mut(&mut self.keep).extend(keep);
        Ok(NodeRef {
            graph: self.id,
            id,
            graph_label: self.label.clone(),
            label: self.model().nodes[id.index()].label.as_str().into(),
        })
    }

    /// Adds a kernel node (`cuGraphAddKernelNode`). Buffers passed by `&` are recorded as
    /// reads, by `&mut` as writes, and kept alive as long as the graph and its executables.
    ///
    /// When `kernel` opted into programmatic dependent launch ([`Kernel::programmatic`]), each
    /// dependency that is a kernel node whose kernel opted in too becomes a programmatic edge
    /// (`CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`); every other dependency is a full edge.
    #[track_caller]
    pub fn kernel(
        &mut self,
        label: &str,
        kernel: &Kernel,
        cfg: LaunchConfig,
        mut args: Args<'_>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let op = "Graph::kernel";
        cfg.validate(&self.ctx.inner.limits).map_err(|reason| {
            Error::new(
                ErrorKind::InvalidGeometry { reason },
                ObjectRef::new(ObjectKind::Node, label),
                op,
                at,
            )
        })?;
        kernel.check_args(&args).map_err(|reason| {
            Error::new(
                ErrorKind::ArgMismatch { reason },
                ObjectRef::new(ObjectKind::Node, label),
                op,
                at,
            )
        })?;
        let model_args = kernel
            .function
            .layout
            .iter()
            .zip(args.values())
            .map(|(&(offset, _), v)| ModelArg {
                offset: offset as u32,
                bytes: v.to_vec(),
            })
            .collect();
        let kind = NodeKind::Kernel(KernelParams {
            name: kernel.name.clone(),
            grid: cfg.grid,
            block: cfg.block,
            shared_mem_bytes: cfg.shared_mem_bytes,
            args: model_args,
            cluster: kernel.function.cluster,
        });
        let function = kernel.function.clone();
        let mut pointers = args.pointers();
        // The node names the library kernel, as the CUDA runtime's nodes do.
        let params = crate::driver::kernel_params(
            std::ptr::null_mut(),
            kernel.function.kern,
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            pointers.as_mut_ptr(),
        );
        let mut keep = args.keep();
        keep.push(Arc::new(kernel.module.clone()));
        let accesses = args.take_accesses();
        let before_wait = args.take_accesses_before_wait();
        let triggers_after_wait = kernel.function.triggers_after_wait;
        let graph = self.editable(op, at)?;
        // Dependencies on opted-in kernels become programmatic edges when this kernel opted in.
        let (programmatic, full): (Vec<&NodeRef>, Vec<&NodeRef>) =
            deps.iter().copied().partition(|d| {
                kernel.programmatic
                    && d.graph == self.id
                    && self
                        .kernels()
                        .get(d.id.index())
                        .and_then(|k| k.as_ref())
                        .is_some_and(|k| k.programmatic)
            });
        // SAFETY: graph is live; params point into `args`, alive for the call (the driver copies
        // the argument values); argument count and sizes were checked above.
        let node = self.add_node(label, op, at, kind, accesses, keep, &full, |d| unsafe {
            driver::add_kernel_node(graph, d, &params)
        })?;
        self.kernels_mut()[node.id.index()] = Some(function);
        if triggers_after_wait || !before_wait.is_empty() {
            let n = &mut self.model_mut().nodes[node.id.index()];
            n.accesses_before_wait = before_wait;
            n.triggers_after_wait = triggers_after_wait;
        }
        for dep in programmatic {
            let (from, to) = (
                self.handles()[dep.id.index()],
                self.handles()[node.id.index()],
            );
            let fail = |f: Failure| f.on(ObjectRef::new(ObjectKind::Node, label), op, at);
            // SAFETY: both handles are kernel nodes of this live graph; the context was bound
            // by add_node on this thread.
            unsafe { driver::add_programmatic_edge(graph, from, to) }.map_err(fail)?;
            self.model_mut()
                .add_typed_edge(dep.id, node.id, graphsmith_model::EdgeType::Programmatic)
                .map_err(|e| {
                    Error::new(
                        ErrorKind::InvalidGraph(Box::new(e)),
                        ObjectRef::new(ObjectKind::Node, label),
                        op,
                        at,
                    )
                })?;
        }
        Ok(node)
    }

    /// Adds a 1-D device-to-device copy node of all of `src` into `dst` (lengths must match).
    #[track_caller]
    pub fn memcpy<T: Element>(
        &mut self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let op = "Graph::memcpy";
        crate::memory::check_copy_lengths(
            dst,
            src,
            || ObjectRef::new(ObjectKind::Node, label),
            op,
            at,
        )?;
        let bytes = dst.bytes();
        let p = memcpy_1d(src.alloc.ptr, dst.alloc.ptr, bytes);
        let kind = NodeKind::Memcpy(MemcpyParams {
            src: MemRef {
                space: MemorySpace::Device,
                address: src.alloc.ptr,
            },
            dst: MemRef {
                space: MemorySpace::Device,
                address: dst.alloc.ptr,
            },
            bytes: bytes as u64,
        });
        let accesses = vec![
            access(src, AccessMode::Read),
            access(dst, AccessMode::Write),
        ];
        let keep: Vec<Keep> = vec![src.alloc.clone(), dst.alloc.clone()];
        let (graph, ctx) = (self.editable(op, at)?, self.ctx.raw());
        // SAFETY: graph and ctx are live; both pointers are live allocations of `bytes` bytes,
        // kept alive by `keep` for the graph's lifetime.
        self.add_node(label, op, at, kind, accesses, keep, deps, |d| unsafe {
            driver::add_memcpy_node(graph, d, &p, ctx)
        })
    }

    /// Adds a 1-D host-to-device copy node of all of page-locked `src` into `dst` (lengths must
    /// match). The graph and its executables keep `src`'s allocation alive; each launch copies
    /// what `src` holds when the node runs.
    #[track_caller]
    pub fn memcpy_from_host<T: Element>(
        &mut self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        src: &HostBuffer<T>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        self.host_memcpy(label, "Graph::memcpy_from_host", at, dst, src, true, deps)
    }

    /// Adds a 1-D device-to-host copy node of all of `src` into page-locked `dst` (lengths must
    /// match). Read `dst` ([`HostBuffer::to_vec`]) once the launch's stream is synchronised.
    #[track_caller]
    pub fn memcpy_to_host<T: Element>(
        &mut self,
        label: &str,
        dst: &mut HostBuffer<T>,
        src: &DeviceBuffer<T>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        self.host_memcpy(label, "Graph::memcpy_to_host", at, src, dst, false, deps)
    }

    /// A copy node between all of `host` and all of `device`: into the device when
    /// `to_device`, out of it otherwise.
    #[allow(clippy::too_many_arguments)]
    fn host_memcpy<T: Element>(
        &mut self,
        label: &str,
        op: &'static str,
        at: SourceLine,
        device: &DeviceBuffer<T>,
        host: &HostBuffer<T>,
        to_device: bool,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let (read, write) = if to_device {
            (AccessMode::Read, AccessMode::Write)
        } else {
            (AccessMode::Write, AccessMode::Read)
        };
        let accesses = vec![host_access(host, read), access(device, write)];
        let node = || ObjectRef::new(ObjectKind::Node, label);
        check_host_copy_lengths(host, device, to_device, node, op, at)?;
        let bytes = device.bytes();
        let p = driver::memcpy_1d_host(host.alloc.ptr, device.alloc.ptr, bytes, to_device);
        let (h, d) = (
            MemRef {
                space: MemorySpace::Host,
                address: host.alloc.ptr as u64,
            },
            MemRef {
                space: MemorySpace::Device,
                address: device.alloc.ptr,
            },
        );
        let (src, dst) = if to_device { (h, d) } else { (d, h) };
        let kind = NodeKind::Memcpy(MemcpyParams {
            src,
            dst,
            bytes: bytes as u64,
        });
        let keep: Vec<Keep> = vec![host.alloc.clone(), device.alloc.clone()];
        let (graph, ctx) = (self.editable(op, at)?, self.ctx.raw());
        // SAFETY: graph and ctx are live; the device pointer is a live allocation and the host
        // pointer live page-locked memory, both of `bytes` bytes (lengths checked), kept alive
        // by `keep` for the graph's lifetime.
        self.add_node(label, op, at, kind, accesses, keep, deps, |d| unsafe {
            driver::add_memcpy_node(graph, d, &p, ctx)
        })
    }

    /// Adds a memset node setting every element of `dst` to `value` (1-, 2- or 4-byte elements).
    #[track_caller]
    pub fn memset<T: Element>(
        &mut self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        value: T,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let op = "Graph::memset";
        let bits = memset_bits(value).map_err(|reason| {
            Error::new(ErrorKind::InvalidInput { reason }, dst.object(), op, at)
        })?;
        let element_size = std::mem::size_of::<T>() as u32;
        let p = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: dst.alloc.ptr,
            pitch: 0,
            value: bits,
            elementSize: element_size,
            width: dst.len(),
            height: 1,
        };
        let kind = NodeKind::Memset(MemsetParams {
            dst: dst.alloc.ptr,
            element_size,
            value: bits,
            width: dst.len() as u64,
            height: 1,
            pitch: 0,
        });
        let accesses = vec![access(dst, AccessMode::Write)];
        let keep: Vec<Keep> = vec![dst.alloc.clone()];
        let (graph, ctx) = (self.editable(op, at)?, self.ctx.raw());
        // SAFETY: graph and ctx are live; dst is a live allocation of width*elementSize bytes.
        self.add_node(label, op, at, kind, accesses, keep, deps, |d| unsafe {
            driver::add_memset_node(graph, d, &p, ctx)
        })
    }

    /// Adds a host function node. The function runs on a driver thread; it must not call CUDA.
    /// A panic inside it is caught (it cannot unwind into the driver).
    #[track_caller]
    pub fn host(
        &mut self,
        label: &str,
        f: impl Fn() + Send + Sync + 'static,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let host = Arc::new(HostFn { f: Box::new(f) });
        let p = sys::CUDA_HOST_NODE_PARAMS {
            fn_: Some(host_trampoline),
            userData: Arc::as_ptr(&host) as *mut _,
        };
        let graph = self.editable("Graph::host", at)?;
        let kind = NodeKind::Host {
            name: label.to_string(),
        };
        // SAFETY: graph is live; userData stays valid because `host` is kept with the graph.
        self.add_node(
            label,
            "Graph::host",
            at,
            kind,
            Vec::new(),
            vec![host as Keep],
            deps,
            |d| unsafe { driver::add_host_node(graph, d, &p) },
        )
    }

    /// Adds a node that records `event` (for waits in other streams or graphs).
    #[track_caller]
    pub fn event_record(
        &mut self,
        label: &str,
        event: &Event,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        self.event_node(label, event, None, deps, true, SourceLine::caller())
    }

    /// Adds a node that waits for `event`.
    #[track_caller]
    pub fn event_wait(&mut self, label: &str, event: &Event, deps: &[&NodeRef]) -> Result<NodeRef> {
        self.event_node(label, event, None, deps, false, SourceLine::caller())
    }

    /// Adds a node that records `signal` once its dependencies are done, at each launch of an
    /// executable of this graph; other graphs and streams wait on it (docs/ordering.md).
    #[track_caller]
    pub fn signal(&mut self, label: &str, signal: &Signal, deps: &[&NodeRef]) -> Result<NodeRef> {
        let event = &signal.inner.event;
        self.event_node(label, event, Some(signal), deps, true, SourceLine::caller())
    }

    /// Adds a node that waits for `signal`'s latest record before its dependents run. When an
    /// executable of this graph is launched while the signal was never recorded and no live
    /// graph, executable or stream records it, the launch is refused naming this node and line.
    #[track_caller]
    pub fn wait_for(&mut self, label: &str, signal: &Signal, deps: &[&NodeRef]) -> Result<NodeRef> {
        let event = &signal.inner.event;
        self.event_node(
            label,
            event,
            Some(signal),
            deps,
            false,
            SourceLine::caller(),
        )
    }

    /// An event record (`record`) or wait node; the event is kept with the graph, with the use
    /// that names the node for launch checks and launch logs.
    fn event_node(
        &mut self,
        label: &str,
        event: &Event,
        signal: Option<&Signal>,
        deps: &[&NodeRef],
        record: bool,
        at: SourceLine,
    ) -> Result<NodeRef> {
        let (graph, raw) = (self.editable("Graph::event_node", at)?, event.inner.raw);
        let name = event.label().to_string();
        let (kind, op) = match (record, signal.is_some()) {
            (true, false) => (NodeKind::EventRecord { event: name }, "Graph::event_record"),
            (false, false) => (NodeKind::EventWait { event: name }, "Graph::event_wait"),
            (true, true) => (NodeKind::EventRecord { event: name }, "Graph::signal"),
            (false, true) => (NodeKind::EventWait { event: name }, "Graph::wait_for"),
        };
        let used = EventUse::keep(event, signal, record, label, op, at);
        self.add_node(
            label,
            op,
            at,
            kind,
            Vec::new(),
            vec![event.inner.clone() as Keep, used],
            deps,
            // SAFETY: graph and event are live; the event is kept with the graph.
            |d| unsafe { driver::add_event_node(graph, d, raw, record) },
        )
    }

    /// Adds an empty node (a join point).
    #[track_caller]
    pub fn empty(&mut self, label: &str, deps: &[&NodeRef]) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let graph = self.editable("Graph::empty", at)?;
        // SAFETY: graph is live.
        self.add_node(
            label,
            "Graph::empty",
            at,
            NodeKind::Empty,
            Vec::new(),
            Vec::new(),
            deps,
            |d| unsafe { driver::add_empty_node(graph, d) },
        )
    }

    /// Adds `child` as a child-graph node (the driver embeds a copy; `child`'s resources are
    /// kept alive with this graph).
    #[track_caller]
    pub fn child(&mut self, label: &str, child: &Graph, deps: &[&NodeRef]) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let (graph, raw) = (self.editable("Graph::child", at)?, child.raw);
        let kind = NodeKind::ChildGraph {
            graph: Box::new(child.model().clone()),
        };
        let accesses = child
            .model()
            .nodes
            .iter()
            .flat_map(|n| n.accesses.iter().cloned())
            .collect();
        // The driver reads `child`, which an executable's template may share.
        let _child_guard = child.raw_guard();
        // SAFETY: both graphs are live and of this context; the driver clones `child`.
        self.add_node(
            label,
            "Graph::child",
            at,
            kind,
            accesses,
            child.keep.to_vec(),
            deps,
            |d| unsafe { driver::add_child_graph_node(graph, d, raw) },
        )
    }
}
