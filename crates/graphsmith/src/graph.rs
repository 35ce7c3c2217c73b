//! Graph templates: built node by node (explicit dependencies) or captured from streams, with a
//! model mirror that carries labels, lines, ranges and accesses.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::{
    Access, AccessMode, KernelArg as ModelArg, KernelParams, MemRef, MemcpyParams, MemorySpace,
    MemsetParams, NodeId, NodeKind,
};

use crate::buffer::{DeviceBuffer, Element};
use crate::capture::{CaptureRecord, Keep};
use crate::context::Context;
use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::kernel::{Args, Kernel, LaunchConfig};
use crate::stream::Event;

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A node of a [`Graph`], returned by the builder and used as a dependency of later nodes.
/// It remembers its graph, so passing it to another graph is a typed error, not a crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    graph: u64,
    id: NodeId,
    graph_label: Arc<str>,
    label: Arc<str>,
}

impl NodeRef {
    /// The node's id in its graph's model.
    pub fn id(&self) -> NodeId {
        self.id
    }
    /// The node's label.
    pub fn label(&self) -> &str {
        &self.label
    }
}

/// A graph template (`CUgraph`) and its model. Build it with the node methods below, or get one
/// from [`crate::Stream::end_capture`]; then [`Graph::instantiate`] it once and launch the
/// executable many times.
///
/// Thread safety: the driver does not synchronise graph objects internally ("API calls
/// accessing the same graph object must be serialized externally"), so `Graph` is `Send` but
/// not `Sync`: it can move to another thread, never be used from two at once.
pub struct Graph {
    pub(crate) raw: sys::CUgraph,
    pub(crate) ctx: Context,
    id: u64,
    label: Arc<str>,
    pub(crate) model: model::Graph,
    /// The driver node of each model node, by index.
    pub(crate) handles: Vec<sys::CUgraphNode>,
    /// Everything the graph's nodes reference, kept alive as long as the graph.
    pub(crate) keep: Vec<Keep>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: a CUgraph may be used from any thread as long as calls are serialised; `Graph` is
// !Sync, so all calls on it come from the one thread that holds it at a time.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        // SAFETY: raw is owned by this Graph and destroyed once. Executables made from it are
        // independent of the template (cuGraphInstantiate copies it).
        self.ctx.drop_call(
            || ObjectRef::new(ObjectKind::Graph, &*self.label),
            || check(unsafe { sys::cuGraphDestroy(raw) }, "cuGraphDestroy"),
        );
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph '{}' ({} nodes, {} edges)",
            self.label,
            self.model.nodes.len(),
            self.model.edges.len()
        )
    }
}

/// The 32 bits a memset writes for `value` (1-, 2- or 4-byte elements).
pub(crate) fn memset_bits<T: Element>(value: T) -> std::result::Result<u32, String> {
    let size = std::mem::size_of::<T>();
    let mut bytes = [0u8; 4];
    if !matches!(size, 1 | 2 | 4) {
        return Err(format!(
            "memset takes 1-, 2- or 4-byte elements; {} is {size} bytes",
            std::any::type_name::<T>()
        ));
    }
    // SAFETY: T is an Element (plain bytes, no padding) of `size` <= 4 bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(&value as *const T as *const u8, bytes.as_mut_ptr(), size)
    };
    Ok(u32::from_le_bytes(bytes))
}

/// A 1-D device-to-device copy description. Every field is set: the struct holds enums for
/// which all-zero bits are not a valid value.
fn memcpy_1d(src: sys::CUdeviceptr, dst: sys::CUdeviceptr, bytes: usize) -> sys::CUDA_MEMCPY3D {
    let device = sys::CUmemorytype::CU_MEMORYTYPE_DEVICE;
    let null = std::ptr::null_mut();
    sys::CUDA_MEMCPY3D {
        srcXInBytes: 0,
        srcY: 0,
        srcZ: 0,
        srcLOD: 0,
        srcMemoryType: device,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: null as _,
        reserved0: null,
        srcPitch: 0,
        srcHeight: 0,
        dstXInBytes: 0,
        dstY: 0,
        dstZ: 0,
        dstLOD: 0,
        dstMemoryType: device,
        dstHost: null,
        dstDevice: dst,
        dstArray: null as _,
        reserved1: null,
        dstPitch: 0,
        dstHeight: 0,
        WidthInBytes: bytes,
        Height: 1,
        Depth: 1,
    }
}

fn access<T: Element>(buffer: &DeviceBuffer<T>, mode: AccessMode) -> Access {
    Access {
        buffer: buffer.alloc.ptr,
        label: buffer.label().to_string(),
        offset: 0,
        len: buffer.bytes() as u64,
        mode,
    }
}

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

impl Context {
    /// An empty graph template (`cuGraphCreate`).
    #[track_caller]
    pub fn graph(&self, label: &str) -> Result<Graph> {
        let at = SourceLine::caller();
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Graph, label),
                "Context::graph",
                at,
            )
        };
        self.bind().map_err(fail)?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: the context is current; raw is a valid out pointer.
        check(unsafe { sys::cuGraphCreate(&mut raw, 0) }, "cuGraphCreate").map_err(fail)?;
        Ok(Graph::wrap(
            self.clone(),
            raw,
            label,
            model::Graph::new(label),
            Vec::new(),
            Vec::new(),
        ))
    }
}

impl Graph {
    fn wrap(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        model: model::Graph,
        handles: Vec<sys::CUgraphNode>,
        keep: Vec<Keep>,
    ) -> Self {
        Self {
            raw,
            ctx,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            label: label.into(),
            model,
            handles,
            keep,
            _not_sync: PhantomData,
        }
    }

    /// Takes ownership of a captured graph and builds its model: read back from the driver,
    /// then labelled with what the capture journal recorded.
    ///
    /// # Safety
    /// `raw` must be a live graph of `ctx` that nobody else owns.
    pub(crate) unsafe fn from_capture(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        record: CaptureRecord,
        at: SourceLine,
    ) -> Result<Graph> {
        // SAFETY: raw is live (caller's contract).
        let read = unsafe { crate::readback::read_graph(raw, label) };
        let (mut model, handles) = match read {
            Ok(read) => read,
            Err(f) => {
                // SAFETY: we own raw and nothing else refers to it.
                let _ = unsafe { sys::cuGraphDestroy(raw) };
                return Err(f.on(
                    ObjectRef::new(ObjectKind::Capture, label),
                    "Stream::end_capture",
                    at,
                ));
            }
        };
        for (node, handle) in model.nodes.iter_mut().zip(&handles) {
            if let Some(meta) = record.nodes.get(&(*handle as usize)) {
                node.label = meta.label.clone();
                node.provenance = Some(meta.provenance.clone());
                node.accesses = meta.accesses.clone();
            }
        }
        Ok(Graph::wrap(ctx, raw, label, model, handles, record.keep))
    }

    /// The graph's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The model: nodes with labels, parameters, provenance and accesses; edges.
    pub fn model(&self) -> &model::Graph {
        &self.model
    }
    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUgraph {
        self.raw
    }
    /// The context of this graph.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Graph, &*self.label)
    }

    /// Reads the graph back from the driver into a fresh model (node kinds, kernel names,
    /// geometry and argument bytes, copy and set operands, edges); labels are not the driver's
    /// to know, so nodes are labelled `<kind>#<index>`.
    #[track_caller]
    pub fn read_back(&self) -> Result<model::Graph> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Graph::read_back", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: self.raw is live and owned by self.
        unsafe { crate::readback::read_graph(self.raw, &self.label) }
            .map(|(m, _)| m)
            .map_err(fail)
    }

    /// Adds a node through `add`, after checking that every dependency is a node of this graph.
    #[allow(clippy::too_many_arguments)]
    fn add_node(
        &mut self,
        label: &str,
        op: &'static str,
        at: SourceLine,
        kind: NodeKind,
        accesses: Vec<Access>,
        keep: Vec<Keep>,
        deps: &[&NodeRef],
        call: &'static str,
        add: impl FnOnce(*mut sys::CUgraphNode, *const sys::CUgraphNode, usize) -> sys::CUresult,
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
            dep_handles.push(self.handles[dep.id.index()]);
        }
        let fail = |f: Failure| f.on(node_object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let mut handle = std::ptr::null_mut();
        check(
            add(&mut handle, dep_handles.as_ptr(), dep_handles.len()),
            call,
        )
        .map_err(fail)?;
        let id =
            self.model
                .add_node_with(label, kind, Some(crate::range::provenance(at)), accesses);
        for dep in deps {
            self.model.add_edge(dep.id, id).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput {
                        reason: e.to_string(),
                    },
                    node_object(),
                    op,
                    at,
                )
            })?;
        }
        self.handles.push(handle);
        self.keep.extend(keep);
        Ok(NodeRef {
            graph: self.id,
            id,
            graph_label: self.label.clone(),
            label: self.model.nodes[id.index()].label.as_str().into(),
        })
    }

    /// Adds a kernel node (`cuGraphAddKernelNode`). Buffers passed by `&` are recorded as
    /// reads, by `&mut` as writes, and kept alive as long as the graph and its executables.
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
            .params
            .iter()
            .zip(&args.values)
            .map(|(&(offset, _), v)| ModelArg {
                offset: offset as u32,
                bytes: v.clone(),
            })
            .collect();
        let kind = NodeKind::Kernel(KernelParams {
            name: kernel.name.clone(),
            grid: cfg.grid,
            block: cfg.block,
            shared_mem_bytes: cfg.shared_mem_bytes,
            args: model_args,
        });
        let mut pointers = args.pointers();
        let params = sys::CUDA_KERNEL_NODE_PARAMS {
            func: kernel.func,
            gridDimX: cfg.grid.x,
            gridDimY: cfg.grid.y,
            gridDimZ: cfg.grid.z,
            blockDimX: cfg.block.x,
            blockDimY: cfg.block.y,
            blockDimZ: cfg.block.z,
            sharedMemBytes: cfg.shared_mem_bytes,
            kernelParams: pointers.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        let mut keep: Vec<Keep> = std::mem::take(&mut args.keep)
            .into_iter()
            .map(|a| a as Keep)
            .collect();
        keep.push(Arc::new(kernel.module.clone()));
        let accesses = std::mem::take(&mut args.accesses);
        let graph = self.raw;
        // SAFETY: graph is live; params point into `args`, alive for the call (the driver copies
        // the argument values); argument count and sizes were checked above.
        self.add_node(
            label,
            op,
            at,
            kind,
            accesses,
            keep,
            deps,
            "cuGraphAddKernelNode",
            |h, d, n| unsafe { sys::cuGraphAddKernelNode_v2(h, graph, d, n, &params) },
        )
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
        if dst.len() != src.len() {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!(
                        "copy of {} elements from '{}' into {} elements of '{}'",
                        src.len(),
                        src.label(),
                        dst.len(),
                        dst.label()
                    ),
                },
                ObjectRef::new(ObjectKind::Node, label),
                op,
                at,
            ));
        }
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
        let (graph, ctx) = (self.raw, self.ctx.raw());
        // SAFETY: graph and ctx are live; both pointers are live allocations of `bytes` bytes,
        // kept alive by `keep` for the graph's lifetime.
        self.add_node(
            label,
            op,
            at,
            kind,
            accesses,
            keep,
            deps,
            "cuGraphAddMemcpyNode",
            |h, d, n| unsafe { sys::cuGraphAddMemcpyNode(h, graph, d, n, &p, ctx) },
        )
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
        let (graph, ctx) = (self.raw, self.ctx.raw());
        // SAFETY: graph and ctx are live; dst is a live allocation of width*elementSize bytes.
        self.add_node(
            label,
            op,
            at,
            kind,
            accesses,
            keep,
            deps,
            "cuGraphAddMemsetNode",
            |h, d, n| unsafe { sys::cuGraphAddMemsetNode(h, graph, d, n, &p, ctx) },
        )
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
        let graph = self.raw;
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
            "cuGraphAddHostNode",
            |h, d, n| unsafe { sys::cuGraphAddHostNode(h, graph, d, n, &p) },
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
        let at = SourceLine::caller();
        let (graph, raw) = (self.raw, event.inner.raw);
        let kind = NodeKind::EventRecord {
            event: event.label().to_string(),
        };
        // SAFETY: graph and event are live; the event is kept with the graph.
        self.add_node(
            label,
            "Graph::event_record",
            at,
            kind,
            Vec::new(),
            vec![event.inner.clone() as Keep],
            deps,
            "cuGraphAddEventRecordNode",
            |h, d, n| unsafe { sys::cuGraphAddEventRecordNode(h, graph, d, n, raw) },
        )
    }

    /// Adds a node that waits for `event`.
    #[track_caller]
    pub fn event_wait(&mut self, label: &str, event: &Event, deps: &[&NodeRef]) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let (graph, raw) = (self.raw, event.inner.raw);
        let kind = NodeKind::EventWait {
            event: event.label().to_string(),
        };
        // SAFETY: graph and event are live; the event is kept with the graph.
        self.add_node(
            label,
            "Graph::event_wait",
            at,
            kind,
            Vec::new(),
            vec![event.inner.clone() as Keep],
            deps,
            "cuGraphAddEventWaitNode",
            |h, d, n| unsafe { sys::cuGraphAddEventWaitNode(h, graph, d, n, raw) },
        )
    }

    /// Adds an empty node (a join point).
    #[track_caller]
    pub fn empty(&mut self, label: &str, deps: &[&NodeRef]) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let graph = self.raw;
        // SAFETY: graph is live.
        self.add_node(
            label,
            "Graph::empty",
            at,
            NodeKind::Empty,
            Vec::new(),
            Vec::new(),
            deps,
            "cuGraphAddEmptyNode",
            |h, d, n| unsafe { sys::cuGraphAddEmptyNode(h, graph, d, n) },
        )
    }

    /// Adds `child` as a child-graph node (the driver embeds a copy; `child`'s resources are
    /// kept alive with this graph).
    #[track_caller]
    pub fn child(&mut self, label: &str, child: &Graph, deps: &[&NodeRef]) -> Result<NodeRef> {
        let at = SourceLine::caller();
        let (graph, raw) = (self.raw, child.raw);
        let kind = NodeKind::ChildGraph {
            graph: Box::new(child.model.clone()),
        };
        let accesses = child
            .model
            .nodes
            .iter()
            .flat_map(|n| n.accesses.iter().cloned())
            .collect();
        // SAFETY: both graphs are live and of this context; the driver clones `child`.
        self.add_node(
            label,
            "Graph::child",
            at,
            kind,
            accesses,
            child.keep.clone(),
            deps,
            "cuGraphAddChildGraphNode",
            |h, d, n| unsafe { sys::cuGraphAddChildGraphNode(h, graph, d, n, raw) },
        )
    }

    /// Instantiates the graph once (`cuGraphInstantiateWithFlags`); launch the executable as
    /// often as needed.
    #[track_caller]
    pub fn instantiate(&self) -> Result<crate::Exec> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Graph::instantiate", at);
        self.ctx.bind().map_err(fail)?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: self.raw is live; exec is a valid out pointer; Graph is !Sync so no other
        // thread uses the template during the call.
        check(
            unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, self.raw, 0) },
            "cuGraphInstantiate",
        )
        .map_err(fail)?;
        Ok(crate::Exec::new(
            exec,
            self.ctx.clone(),
            format!("{}#exec", self.label),
            Arc::new(self.model.clone()),
            self.keep.clone(),
        ))
    }
}

impl Graph {
    /// Writes the driver's own DOT dump of the template (`cuGraphDebugDotPrint`), with
    /// `verbose` for every parameter the driver knows. graphsmith's `doctor` reads these back.
    #[track_caller]
    pub fn write_driver_dot(&self, path: &std::path::Path, verbose: bool) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Graph::write_driver_dot";
        let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|_| {
            Error::new(
                ErrorKind::InvalidInput {
                    reason: format!("path {} contains a NUL byte", path.display()),
                },
                self.object(),
                op,
                at,
            )
        })?;
        let fail = |f: Failure| f.on(self.object(), op, at);
        self.ctx.bind().map_err(fail)?;
        let flags = if verbose {
            sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32
        } else {
            0
        };
        // SAFETY: self.raw is live; c_path is NUL-terminated.
        check(
            unsafe { sys::cuGraphDebugDotPrint(self.raw, c_path.as_ptr(), flags) },
            "cuGraphDebugDotPrint",
        )
        .map_err(fail)
    }
}
