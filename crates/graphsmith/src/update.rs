//! Updating an executable: per-node parameter updates (kernel arguments and geometry, memset and
//! memcpy operands) and whole-graph updates with a pre-check that explains, per node, why an
//! update is impossible. Every update goes through the executable, which keeps its own template
//! in step: there is no way to update a template and forget its executable.

use cudarc::driver::sys;
use graphsmith_model::{
    AccessMode, KernelArg as ModelArg, MemRef, MemcpyParams, MemorySpace, MemsetParams, NodeKind,
};

use crate::buffer::{DeviceBuffer, Element};
use crate::builder::{access, memcpy_1d, memset_bits};
use crate::capture::Keep;
use crate::compat::{update_compatibility, Incompatibility};
use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::exec::{instantiate_raw, Exec};
use crate::graph::{Graph, KernelFn, NodeRef};
use crate::kernel::{check_layout, Args, LaunchConfig};

/// What to do when a whole-graph update cannot be applied in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdatePolicy {
    /// Apply in place or fail with [`ErrorKind::UpdateImpossible`], naming each node and why.
    InPlace,
    /// Apply in place when possible, otherwise re-instantiate; the re-instantiation is counted in
    /// [`Exec::stats`] and its reasons returned, never silent.
    Reinstantiate,
}

/// How a whole-graph update was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpdateOutcome {
    /// `cuGraphExecUpdate` applied every parameter in place.
    Updated,
    /// The executable was rebuilt from the new graph, for these reasons.
    Reinstantiated { reasons: Vec<Incompatibility> },
}

impl Exec {
    /// Replaces the resources kept for node `index` (see [`Exec::retire`] for the old ones).
    fn replace_node_keep(&mut self, index: usize, keep: Vec<Keep>) -> Result<(), Failure> {
        if self.node_keep.len() <= index {
            self.node_keep
                .resize_with(self.template.handles.len().max(index + 1), Vec::new);
        }
        let old = std::mem::replace(&mut self.node_keep[index], keep);
        self.retire(old)
    }

    /// Marks node `index`'s parameters as not yet pushed into the current driver template.
    fn mark_stale(&mut self, index: usize) {
        if self.stale.len() <= index {
            self.stale
                .resize(self.template.handles.len().max(index + 1), false);
        }
        self.stale[index] = true;
        self.any_stale = true;
    }

    fn wrong_kind(&self, index: usize, want: &str, op: &'static str, at: SourceLine) -> Error {
        let node = &self.current().model.nodes[index];
        Error::new(
            ErrorKind::InvalidInput {
                reason: format!(
                    "node '{}' is a {} node, not a {want} node",
                    node.label,
                    node.kind.name()
                ),
            },
            self.object(),
            op,
            at,
        )
    }

    /// Sets a kernel node's geometry and arguments in the executable
    /// (`cuGraphExecKernelNodeSetParams`); its template is kept in step (the model at once, the
    /// driver's template when [`Exec::template`] is next asked for). The kernel stays the same;
    /// the arguments are checked against its parameters, and their buffers are kept alive.
    #[track_caller]
    pub fn set_kernel(&mut self, node: &NodeRef, cfg: LaunchConfig, args: Args<'_>) -> Result<()> {
        let at = SourceLine::caller();
        self.template
            .ctx
            .bind()
            .map_err(|f| f.on(self.object(), "Exec::set_kernel", at))?;
        self.set_kernel_bound(node, cfg, args, at)
    }

    /// A batch of per-node updates: the context is made current once for all of them (what
    /// updating every node of a large graph should use).
    #[track_caller]
    pub fn batch(&mut self) -> Result<UpdateBatch<'_>> {
        let at = SourceLine::caller();
        self.template
            .ctx
            .bind()
            .map_err(|f| f.on(self.object(), "Exec::batch", at))?;
        Ok(UpdateBatch { exec: self })
    }

    fn set_kernel_bound(
        &mut self,
        node: &NodeRef,
        cfg: LaunchConfig,
        mut args: Args<'_>,
        at: SourceLine,
    ) -> Result<()> {
        let op = "Exec::set_kernel";
        let index = self.node_index(node, op, at)?;
        let node_object = || ObjectRef::new(ObjectKind::Node, node.label());
        cfg.validate(&self.template.ctx.inner.limits)
            .map_err(|reason| {
                Error::new(ErrorKind::InvalidGeometry { reason }, node_object(), op, at)
            })?;
        let fail = |f: Failure| f.on(node_object(), op, at);
        // The instantiation template's handle addresses the executable's node; the current
        // template knows the current function.
        let handle = self.template.handles[index];
        if !matches!(self.current().model.nodes[index].kind, NodeKind::Kernel(_)) {
            return Err(self.wrong_kind(index, "kernel", op, at));
        }
        let known = match &self.current().kernels[index] {
            Some(known) => known.clone(),
            None => {
                // A captured kernel whose arguments could not all be read back: ask the driver.
                let current = self.current().handles[index];
                // SAFETY: current is a live kernel node (checked above); the context is current.
                let read = unsafe { crate::readback::read_kernel(current) }.map_err(fail)?;
                let Some((known, _)) = read.1 else {
                    return Err(Error::new(
                        ErrorKind::InvalidInput {
                            reason: "the driver names no kernel for this node".into(),
                        },
                        node_object(),
                        op,
                        at,
                    ));
                };
                std::sync::Arc::make_mut(&mut self.current_mut().kernels)[index] =
                    Some(known.clone());
                known
            }
        };
        let layout = known.layout.clone();
        let NodeKind::Kernel(params) = &self.current().model.nodes[index].kind else {
            return Err(self.wrong_kind(index, "kernel", op, at));
        };
        check_layout(&params.name, &layout, &args).map_err(|reason| {
            Error::new(ErrorKind::ArgMismatch { reason }, node_object(), op, at)
        })?;
        let mut pointers = args.pointers();
        let new = kernel_params(&known, cfg, pointers.as_mut_ptr());
        // SAFETY: raw and handle are live (the handle belongs to the graph raw was instantiated
        // from); argument count and sizes were checked; pointers point into `args`, alive here.
        check(
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(self.raw, handle, &new) },
            "cuGraphExecKernelNodeSetParams",
        )
        .map_err(fail)?;
        let model_node = &mut self.current_mut().model_mut().nodes[index];
        if let NodeKind::Kernel(k) = &mut model_node.kind {
            k.grid = cfg.grid;
            k.block = cfg.block;
            k.shared_mem_bytes = cfg.shared_mem_bytes;
            // Reuse the model's buffers: no allocation when the shapes are unchanged.
            k.args.resize_with(layout.len(), || ModelArg {
                offset: 0,
                bytes: Vec::new(),
            });
            for (arg, (&(offset, _), value)) in
                k.args.iter_mut().zip(layout.iter().zip(args.values()))
            {
                arg.offset = offset as u32;
                arg.bytes.clear();
                arg.bytes.extend_from_slice(value);
            }
        }
        args.write_accesses(&mut model_node.accesses);
        self.mark_stale(index);
        let unchanged = self
            .node_keep
            .get(index)
            .is_some_and(|old| args.keeps_same(old));
        if !unchanged {
            self.replace_node_keep(index, args.keep()).map_err(fail)?;
        }
        self.stats.node_updates += 1;
        Ok(())
    }

    /// Sets a memset node's destination and value (1-D, same element size).
    #[track_caller]
    pub fn set_memset<T: Element>(
        &mut self,
        node: &NodeRef,
        dst: &mut DeviceBuffer<T>,
        value: T,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Exec::set_memset";
        let index = self.node_index(node, op, at)?;
        let NodeKind::Memset(old) = self.current().model.nodes[index].kind else {
            return Err(self.wrong_kind(index, "memset", op, at));
        };
        let node_object = || ObjectRef::new(ObjectKind::Node, node.label());
        let bits = memset_bits(value).map_err(|reason| {
            Error::new(ErrorKind::InvalidInput { reason }, node_object(), op, at)
        })?;
        let element_size = std::mem::size_of::<T>() as u32;
        if element_size != old.element_size {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!(
                        "the node sets {}-byte elements; the new value has {element_size} bytes",
                        old.element_size
                    ),
                },
                node_object(),
                op,
                at,
            ));
        }
        let p = sys::CUDA_MEMSET_NODE_PARAMS {
            dst: dst.alloc.ptr,
            pitch: 0,
            value: bits,
            elementSize: element_size,
            width: dst.len(),
            height: 1,
        };
        let fail = |f: Failure| f.on(node_object(), op, at);
        self.template.ctx.bind().map_err(fail)?;
        let (handle, current, ctx) = (
            self.template.handles[index],
            self.current().handles[index],
            self.template.ctx.raw(),
        );
        // SAFETY: raw, handle and ctx are live; dst is a live allocation of width elements.
        unsafe {
            check(
                sys::cuGraphExecMemsetNodeSetParams(self.raw, handle, &p, ctx),
                "cuGraphExecMemsetNodeSetParams",
            )
            .map_err(fail)?;
            check(
                sys::cuGraphMemsetNodeSetParams(current, &p),
                "cuGraphMemsetNodeSetParams",
            )
            .map_err(fail)?;
        }
        let model_node = &mut self.current_mut().model_mut().nodes[index];
        model_node.kind = NodeKind::Memset(MemsetParams {
            dst: dst.alloc.ptr,
            element_size,
            value: bits,
            width: dst.len() as u64,
            height: 1,
            pitch: 0,
        });
        model_node.accesses = vec![access(dst, AccessMode::Write)];
        self.replace_node_keep(index, vec![dst.alloc.clone() as Keep])
            .map_err(fail)?;
        self.stats.node_updates += 1;
        Ok(())
    }

    /// Sets a 1-D device-to-device copy node's source and destination (lengths must match).
    #[track_caller]
    pub fn set_memcpy<T: Element>(
        &mut self,
        node: &NodeRef,
        dst: &mut DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
    ) -> Result<()> {
        let at = SourceLine::caller();
        let op = "Exec::set_memcpy";
        let index = self.node_index(node, op, at)?;
        if !matches!(self.current().model.nodes[index].kind, NodeKind::Memcpy(_)) {
            return Err(self.wrong_kind(index, "memcpy", op, at));
        }
        let node_object = || ObjectRef::new(ObjectKind::Node, node.label());
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
                node_object(),
                op,
                at,
            ));
        }
        let p = memcpy_1d(src.alloc.ptr, dst.alloc.ptr, dst.bytes());
        let fail = |f: Failure| f.on(node_object(), op, at);
        self.template.ctx.bind().map_err(fail)?;
        let (handle, current, ctx) = (
            self.template.handles[index],
            self.current().handles[index],
            self.template.ctx.raw(),
        );
        // SAFETY: raw, handle and ctx are live; both allocations are live and dst.bytes() long.
        unsafe {
            check(
                sys::cuGraphExecMemcpyNodeSetParams(self.raw, handle, &p, ctx),
                "cuGraphExecMemcpyNodeSetParams",
            )
            .map_err(fail)?;
            check(
                sys::cuGraphMemcpyNodeSetParams(current, &p),
                "cuGraphMemcpyNodeSetParams",
            )
            .map_err(fail)?;
        }
        let model_node = &mut self.current_mut().model_mut().nodes[index];
        model_node.kind = NodeKind::Memcpy(MemcpyParams {
            src: MemRef {
                space: MemorySpace::Device,
                address: src.alloc.ptr,
            },
            dst: MemRef {
                space: MemorySpace::Device,
                address: dst.alloc.ptr,
            },
            bytes: dst.bytes() as u64,
        });
        model_node.accesses = vec![
            access(src, AccessMode::Read),
            access(dst, AccessMode::Write),
        ];
        self.replace_node_keep(
            index,
            vec![src.alloc.clone() as Keep, dst.alloc.clone() as Keep],
        )
        .map_err(fail)?;
        self.stats.node_updates += 1;
        Ok(())
    }

    /// Updates the whole executable from `graph` (`cuGraphExecUpdate`). The model pre-check
    /// says, before the driver is called, whether the update is possible and, if not, which node
    /// and why; when the driver disagrees, its `errorNode` is mapped back to a label. With
    /// [`UpdatePolicy::Reinstantiate`], an impossible update rebuilds the executable instead
    /// (counted in [`Exec::stats`]). Afterwards the executable's template is a copy of `graph`,
    /// and `graph`'s `NodeRef`s address its nodes (as do those of the graph it was instantiated
    /// from, unless it was rebuilt).
    #[track_caller]
    pub fn update(&mut self, graph: &Graph, policy: UpdatePolicy) -> Result<UpdateOutcome> {
        let at = SourceLine::caller();
        let op = "Exec::update";
        let mut reasons = update_compatibility(&self.current().model, &graph.model);
        if reasons.is_empty() {
            match self.driver_update(graph) {
                Ok(()) => {
                    self.follow(graph, at)?;
                    self.stats.graph_updates += 1;
                    return Ok(UpdateOutcome::Updated);
                }
                Err(DriverRefusal::Failed(f)) => return Err(f.on(self.object(), op, at)),
                Err(DriverRefusal::Refused(r)) => reasons = r,
            }
        }
        match policy {
            UpdatePolicy::InPlace => Err(Error::new(
                ErrorKind::UpdateImpossible { reasons },
                self.object(),
                op,
                at,
            )),
            UpdatePolicy::Reinstantiate => {
                let template = graph.clone_template(at)?;
                let raw = instantiate_raw(&template).map_err(|f| f.on(self.object(), op, at))?;
                self.release();
                self.raw = raw;
                self.instantiated_from = template.id;
                self.origin = template.id;
                self.label = format!("{}#exec", template.label());
                self.template = template;
                self.current = None;
                self.node_keep.clear();
                self.stale.clear();
                self.any_stale = false;
                self.stats.reinstantiations += 1;
                Ok(UpdateOutcome::Reinstantiated { reasons })
            }
        }
    }

    /// After `cuGraphExecUpdate` from `graph`: makes the executable's template follow `graph`.
    /// When every node of `graph` can be written back from its model (kernels with known
    /// arguments, memsets, empty nodes), the template shares `graph`'s model and its driver
    /// nodes are brought in step only when [`Exec::template`] asks; otherwise the template
    /// becomes a driver copy of `graph` (`cuGraphClone`).
    fn follow(&mut self, graph: &Graph, at: SourceLine) -> Result<()> {
        let op = "Exec::update";
        let lazy = graph
            .model
            .nodes
            .iter()
            .zip(graph.kernels.iter())
            .all(|(n, k)| {
                matches!(
                    (&n.kind, k),
                    (NodeKind::Kernel(_), Some(_))
                        | (NodeKind::Memset(_), _)
                        | (NodeKind::Empty, _)
                )
            });
        let copy = if lazy {
            None
        } else {
            Some(graph.clone_template(at)?)
        };
        // What the template and per-node updates referenced, which the new graph may not.
        let old: Vec<Keep> = std::mem::take(&mut self.node_keep)
            .into_iter()
            .flatten()
            .collect();
        let mut sets = Vec::new();
        if let Some(current) = self.current.take() {
            sets.push(current.keep.clone());
        }
        if lazy {
            sets.push(std::mem::replace(
                &mut self.template.keep,
                graph.keep.clone(),
            ));
            self.template.model = graph.model.clone();
            self.template.kernels = graph.kernels.clone();
            self.template.label = graph.label.clone();
            self.stale.clear();
            self.stale.resize(self.template.handles.len(), true);
            self.any_stale = true;
        } else {
            self.stale.clear();
            self.any_stale = false;
            self.current = copy;
        }
        self.retire_sets(old, sets)
            .map_err(|f| f.on(self.object(), op, at))?;
        self.origin = graph.id;
        self.label = format!("{}#exec", graph.label());
        Ok(())
    }

    fn driver_update(&mut self, graph: &Graph) -> std::result::Result<(), DriverRefusal> {
        graph.ctx.bind().map_err(DriverRefusal::Failed)?;
        // SAFETY: plain C struct of an enum with a zero variant (SUCCESS) and two handles.
        let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
        // SAFETY: raw and graph.raw are live; &mut self gives exclusive use of the executable and
        // Graph is !Sync.
        let rc = unsafe { sys::cuGraphExecUpdate_v2(self.raw, graph.raw, &mut info) };
        if rc == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        if rc != sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
            return Err(DriverRefusal::Failed(
                check(rc, "cuGraphExecUpdate").unwrap_err(),
            ));
        }
        let label_of = |node: sys::CUgraphNode| {
            graph
                .handles
                .iter()
                .position(|&h| h == node)
                .map(|i| graph.model.nodes[i].label.clone())
        };
        let mut reason = format!("the driver refused the update ({:?})", info.result);
        if let Some(from) = label_of(info.errorFromNode) {
            reason.push_str(&format!(" at the edge from '{from}'"));
        }
        Err(DriverRefusal::Refused(vec![Incompatibility {
            node: label_of(info.errorNode),
            reason,
        }]))
    }
}

/// Per-node updates of one executable with the context made current once ([`Exec::batch`]).
pub struct UpdateBatch<'e> {
    exec: &'e mut Exec,
}

impl UpdateBatch<'_> {
    /// [`Exec::set_kernel`] within the batch.
    #[track_caller]
    pub fn set_kernel(&mut self, node: &NodeRef, cfg: LaunchConfig, args: Args<'_>) -> Result<()> {
        self.exec
            .set_kernel_bound(node, cfg, args, SourceLine::caller())
    }
}

/// Kernel node parameters for `func` with `cfg` and argument pointers.
pub(crate) fn kernel_params(
    kernel: &KernelFn,
    cfg: LaunchConfig,
    pointers: *mut *mut std::ffi::c_void,
) -> sys::CUDA_KERNEL_NODE_PARAMS {
    sys::CUDA_KERNEL_NODE_PARAMS {
        func: kernel.func,
        gridDimX: cfg.grid.x,
        gridDimY: cfg.grid.y,
        gridDimZ: cfg.grid.z,
        blockDimX: cfg.block.x,
        blockDimY: cfg.block.y,
        blockDimZ: cfg.block.z,
        sharedMemBytes: cfg.shared_mem_bytes,
        kernelParams: pointers,
        extra: std::ptr::null_mut(),
        kern: kernel.kern,
        ctx: std::ptr::null_mut(),
    }
}

/// Pushes the parameters of nodes updated since the last call from the model into the
/// executable's current driver template (`cuGraphKernelNodeSetParams`,
/// `cuGraphMemsetNodeSetParams`).
pub(crate) fn flush_template(exec: &mut Exec) -> Result<(), Failure> {
    if !exec.any_stale {
        return Ok(());
    }
    exec.template.ctx.bind()?;
    let current = exec.current.as_ref().unwrap_or(&exec.template);
    for (index, stale) in exec.stale.iter_mut().enumerate() {
        if !*stale {
            continue;
        }
        let handle = current.handles[index];
        match (&current.model.nodes[index].kind, &current.kernels[index]) {
            (NodeKind::Kernel(k), Some(function)) => {
                let mut pointers: Vec<*mut std::ffi::c_void> = k
                    .args
                    .iter()
                    .map(|a| a.bytes.as_ptr() as *mut std::ffi::c_void)
                    .collect();
                let cfg = LaunchConfig {
                    grid: k.grid,
                    block: k.block,
                    shared_mem_bytes: k.shared_mem_bytes,
                };
                let params = kernel_params(function, cfg, pointers.as_mut_ptr());
                // SAFETY: the handle is a live kernel node of the current template; the pointers
                // point at the model's argument bytes, which the driver copies during the call;
                // their count and sizes match the function's layout (checked when they were set,
                // or read back complete).
                check(
                    unsafe { sys::cuGraphKernelNodeSetParams_v2(handle, &params) },
                    "cuGraphKernelNodeSetParams",
                )?;
            }
            (NodeKind::Memset(m), _) => {
                let p = sys::CUDA_MEMSET_NODE_PARAMS {
                    dst: m.dst,
                    pitch: m.pitch as usize,
                    value: m.value,
                    elementSize: m.element_size,
                    width: m.width as usize,
                    height: m.height as usize,
                };
                // SAFETY: the handle is a live memset node of the current template; the values
                // were read back from, or set on, a node of the same shape.
                check(
                    unsafe { sys::cuGraphMemsetNodeSetParams(handle, &p) },
                    "cuGraphMemsetNodeSetParams",
                )?;
            }
            _ => {}
        }
        *stale = false;
    }
    exec.any_stale = false;
    Ok(())
}

enum DriverRefusal {
    /// The driver call itself failed.
    Failed(Failure),
    /// The driver says the update is impossible, for this reason.
    Refused(Vec<Incompatibility>),
}
