//! Updating an executable: per-node parameter updates (kernel arguments and geometry, memset and
//! memcpy operands) and whole-graph updates with a pre-check that explains, per node, why an
//! update is impossible. Every update goes through the executable, which keeps its own template
//! in step: there is no way to update a template and forget its executable.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model::{MemsetParams, NodeKind};

use crate::context::Keep;
use crate::driver::{self, Failure};
use crate::driver::{kernel_params, memcpy_1d};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::exec::NodeUpdate;
use crate::exec::{instantiate_raw, Exec};
use crate::graph::{Graph, NodeRef};
use crate::memory::memset_bits;
use crate::memory::{DeviceBuffer, Element};
use crate::module::{check_layout, Args, LaunchConfig};
use graphsmith_analysis::{update_compatibility, Incompatibility};

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
    /// Records what a per-node update set on node `index` (see `exec/node_updates.rs`); the
    /// update it replaces is let go of as [`Exec::retire`] says.
    fn set_override(&mut self, index: usize, update: NodeUpdate) -> Result<(), Failure> {
        if self.overrides.len() <= index {
            self.overrides
                .resize_with(self.template.handles().len().max(index + 1), || None);
        }
        self.model_cache.take();
        self.relocation = None;
        let Some(old) = self.overrides[index].replace(update) else {
            // The node's earlier parameters came from the template, which keeps what they use.
            return Ok(());
        };
        match &self.overrides[index] {
            Some(new) if new.holds_all_of(&old) => Ok(()),
            _ => self.retire(old.into_keep()),
        }
    }

    /// Reads from the driver the kernel of node `index` of the current template, when the
    /// template does not know it (a captured kernel whose arguments could not all be read).
    /// Leaves it unknown for a node that is not a kernel node.
    fn learn_kernel(
        &mut self,
        index: usize,
        node: &NodeRef,
        op: &'static str,
        at: SourceLine,
    ) -> Result<()> {
        if !matches!(
            self.current().model().nodes[index].kind,
            NodeKind::Kernel(_)
        ) {
            return Ok(());
        }
        let node_object = || ObjectRef::new(ObjectKind::Node, node.label());
        let current = self.current().handles()[index];
        // The function is looked up in the current context: make sure it is ours (a batch binds
        // only once, and the caller may have used another context since).
        self.template
            .ctx
            .bind()
            .map_err(|f| f.on(node_object(), op, at))?;
        let guard = self.current().raw_guard();
        // SAFETY: current is a live kernel node of the current template, whose calls are
        // serialised (the guard while shared); the context is current.
        let read = unsafe { crate::graph::read_kernel(current) }
            .map_err(|f| f.on(node_object(), op, at))?;
        drop(guard);
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
        self.current_mut().kernels_mut()[index] = Some(known);
        self.relocation = None;
        Ok(())
    }

    /// Marks node `index`'s parameters as not yet pushed into the current driver template.
    fn mark_stale(&mut self, index: usize) {
        if self.stale.len() <= index {
            self.stale
                .resize(self.template.handles().len().max(index + 1), false);
        }
        self.stale[index] = true;
        self.any_stale = true;
    }

    fn wrong_kind(&self, index: usize, want: &str, op: &'static str, at: SourceLine) -> Error {
        let node = &self.current().model().nodes[index];
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
        // template knows the current kernel (known for every kernel node it has, except captured
        // ones whose arguments could not all be read back).
        let handle = self.template.handles()[index];
        if self.current().kernels()[index].is_none() {
            self.learn_kernel(index, node, op, at)?;
        }
        let Some(known) = &self.current().kernels()[index] else {
            return Err(self.wrong_kind(index, "kernel", op, at));
        };
        // Only the fast check on the hot path; the message (with the kernel's name) on failure.
        let fits = known.layout.len() == args.len()
            && known
                .layout
                .iter()
                .zip(args.values())
                .all(|(&(_, size), v)| size == v.len());
        if !fits {
            let NodeKind::Kernel(params) = &self.current().model().nodes[index].kind else {
                return Err(self.wrong_kind(index, "kernel", op, at));
            };
            let reason = check_layout(&params.name, &known.layout, &args)
                .err()
                .unwrap_or_default();
            return Err(Error::new(
                ErrorKind::ArgMismatch { reason },
                node_object(),
                op,
                at,
            ));
        }
        let (func, kern) = (known.func, known.kern);
        let mut pointers = args.pointers();
        let new = kernel_params(
            func,
            kern,
            cfg.grid,
            cfg.block,
            cfg.shared_mem_bytes,
            pointers.as_mut_ptr(),
        );
        let guard = self.template.raw_guard();
        // SAFETY: raw and handle are live (the handle belongs to the graph raw was instantiated
        // from, whose calls the guard serialises while shared); argument count and sizes were
        // checked; pointers point into `args`, alive here.
        unsafe { driver::exec_set_kernel_node(self.raw, handle, &new) }.map_err(fail)?;
        drop(guard);
        self.mark_stale(index);
        self.set_override(
            index,
            NodeUpdate::Kernel {
                cfg,
                args: args.into_data(),
            },
        )
        .map_err(fail)?;
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
        let NodeKind::Memset(old) = self.current().model().nodes[index].kind else {
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
        let (handle, ctx) = (self.template.handles()[index], self.template.ctx.raw());
        let called = {
            let _guard = self.template.raw_guard();
            // SAFETY: raw, handle and ctx are live; dst is a live allocation of width elements.
            unsafe { driver::exec_set_memset_node(self.raw, handle, &p, ctx) }
        };
        called.map_err(fail)?;
        let params = MemsetParams {
            dst: dst.alloc.ptr,
            element_size,
            value: bits,
            width: dst.len() as u64,
            height: 1,
            pitch: 0,
        };
        self.mark_stale(index);
        let dst = dst.alloc.clone();
        self.set_override(index, NodeUpdate::Memset { params, dst })
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
        if !matches!(
            self.current().model().nodes[index].kind,
            NodeKind::Memcpy(_)
        ) {
            return Err(self.wrong_kind(index, "memcpy", op, at));
        }
        let node_object = || ObjectRef::new(ObjectKind::Node, node.label());
        crate::memory::check_copy_lengths(dst, src, node_object, op, at)?;
        let p = memcpy_1d(src.alloc.ptr, dst.alloc.ptr, dst.bytes());
        let fail = |f: Failure| f.on(node_object(), op, at);
        self.template.ctx.bind().map_err(fail)?;
        let (handle, ctx) = (self.template.handles()[index], self.template.ctx.raw());
        let called = {
            let _guard = self.template.raw_guard();
            // SAFETY: raw, handle and ctx are live; both allocations are live and dst.bytes() long.
            unsafe { driver::exec_set_memcpy_node(self.raw, handle, &p, ctx) }
        };
        called.map_err(fail)?;
        self.mark_stale(index);
        let update = NodeUpdate::memcpy(&src.alloc, &dst.alloc, dst.bytes() as u64);
        self.set_override(index, update).map_err(fail)?;
        self.stats.node_updates += 1;
        Ok(())
    }

    /// Updates the whole executable from `graph` (`cuGraphExecUpdate`). The model pre-check
    /// says, before the driver is called, whether the update is possible and, if not, which node
    /// and why; when the driver disagrees, its `errorNode` is mapped back to a label. With
    /// [`UpdatePolicy::Reinstantiate`], an impossible update rebuilds the executable instead
    /// (counted in [`Exec::stats`]). Afterwards the executable's template is `graph` (shared,
    /// not copied), and `graph`'s `NodeRef`s address its nodes (as do those of the graph it was
    /// instantiated from, unless it was rebuilt).
    ///
    /// Cost: graphs whose shapes are known equal (a digest of each model, computed once per
    /// graph) need no walk over the models; besides the driver's update, the executable only
    /// swaps what it holds.
    ///
    /// A graph with conditional nodes is shared too; it then has one executable at a time
    /// (a rebuild refuses a graph another executable shares), and cannot be changed while
    /// this executable shares it: hand it over with [`Exec::update_owned`] to keep it free.
    #[track_caller]
    pub fn update(&mut self, graph: &Graph, policy: UpdatePolicy) -> Result<UpdateOutcome> {
        self.update_at(graph, policy, "Exec::update", SourceLine::caller())
    }

    fn update_at(
        &mut self,
        graph: &Graph,
        policy: UpdatePolicy,
        op: &'static str,
        at: SourceLine,
    ) -> Result<UpdateOutcome> {
        // Both models are needed by the pre-check (read back now if never asked for before).
        graph.try_parts(op, at)?;
        self.current().try_parts(op, at)?;
        // Per-node updates never change a node's kind or the edges, which the pre-check compares,
        // but a copy update may change a copy's memory types: then compare the updated model.
        let copies_updated = !self.overrides.is_empty()
            && self
                .overrides
                .iter()
                .flatten()
                .any(|u| matches!(u, NodeUpdate::Memcpy { .. }));
        // Graphs of equal shape digests need no walk over both models.
        let same_shape = !copies_updated
            && matches!(
                (self.current().update_facts().shape, graph.update_facts().shape),
                (Some(a), Some(b)) if a == b
            );
        let mut reasons = if same_shape {
            Vec::new()
        } else if copies_updated {
            update_compatibility(self.model(), graph.model())
        } else {
            update_compatibility(self.current().model(), graph.model())
        };
        if reasons.is_empty() {
            match self.driver_update(graph) {
                Ok(()) => {
                    self.follow(graph)
                        .map_err(|f| f.on(self.object(), op, at))?;
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
                // The executable about to be rebuilt may share `graph` itself; any other
                // share is another executable, which a graph with conditional nodes must not
                // have at the same time.
                let held = [Some(&self.template), self.current.as_ref()]
                    .into_iter()
                    .flatten()
                    .filter(|t| Arc::ptr_eq(&t.owner, &graph.owner))
                    .count();
                let raw = instantiate_raw(graph, held, || self.object(), op, at)?;
                self.release();
                self.raw = raw;
                self.instantiated_from = graph.id;
                self.origin = graph.id;
                self.follow_label(graph);
                self.template = graph.share();
                self.current = None;
                self.overrides.clear();
                self.model_cache.take();
                self.stale.clear();
                self.any_stale = false;
                self.relocation = None;
                self.stats.reinstantiations += 1;
                Ok(UpdateOutcome::Reinstantiated { reasons })
            }
        }
    }

    /// [`Exec::update`] from a graph the executable takes over. With sharing this is the same
    /// update (the executable's template becomes a share of `graph`, no copy); `graph` is then
    /// held by the executable alone, so a graph with conditional nodes (which cannot be
    /// copied) stays free for the executable's per-node updates to be written into it
    /// ([`Exec::template`]). The pre-check is the same: the conditional nodes keep their
    /// flavour and body count, and their bodies follow the rules of child graphs; each
    /// difference is named by node.
    #[track_caller]
    pub fn update_owned(&mut self, graph: Graph, policy: UpdatePolicy) -> Result<UpdateOutcome> {
        self.update_at(&graph, policy, "Exec::update_owned", SourceLine::caller())
    }

    /// After `cuGraphExecUpdate` from `graph`: the current template becomes a share of `graph`
    /// (whose driver graph holds exactly the parameters the executable now runs). The new state
    /// is in place before what the old one used is let go of, so a failure there (a failed
    /// wait) leaves the executable consistent.
    fn follow(&mut self, graph: &Graph) -> Result<(), Failure> {
        // What per-node updates and the template referenced, which the new graph may not.
        let old: Vec<Keep> = if self.overrides.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut self.overrides)
                .into_iter()
                .flatten()
                .flat_map(|u| u.into_keep())
                .collect()
        };
        self.model_cache.take();
        self.relocation = None;
        // Going back to the graph instantiated from (or staying on the current one) needs no
        // new share: its atomic reference counts are most of an update's own cost on a small
        // graph, next to the driver's.
        let previous = if self.template.same_share(graph) {
            self.current.take()
        } else if self.current.as_ref().is_some_and(|c| c.same_share(graph)) {
            None
        } else {
            self.current.replace(graph.share())
        };
        self.stale.clear();
        self.any_stale = false;
        self.origin = graph.id;
        self.follow_label(graph);
        match previous {
            Some(previous) if !Arc::ptr_eq(&previous.keep, &graph.keep) => {
                self.retire_sets(old, Some(previous.keep))
            }
            _ if old.is_empty() => Ok(()),
            _ => self.retire(old),
        }
    }

    fn driver_update(&mut self, graph: &Graph) -> std::result::Result<(), DriverRefusal> {
        graph.ctx.bind().map_err(DriverRefusal::Failed)?;
        let updated = {
            let _guard = graph.raw_guard();
            // SAFETY: raw and graph.raw are live; &mut self gives exclusive use of the
            // executable, and calls on graph.raw are serialised (the guard while shared).
            unsafe { driver::exec_update(self.raw, graph.raw) }
        };
        let refused = match updated {
            Ok(None) => return Ok(()),
            Ok(Some(refused)) => refused,
            Err(f) => return Err(DriverRefusal::Failed(f)),
        };
        let label_of = |node: sys::CUgraphNode| {
            graph
                .handles()
                .iter()
                .position(|&h| h == node)
                .map(|i| graph.model().nodes[i].label.clone())
        };
        let mut reason = format!("the driver refused the update ({})", refused.result);
        if let Some(from) = label_of(refused.error_from_node) {
            reason.push_str(&format!(" at the edge from '{from}'"));
        }
        Err(DriverRefusal::Refused(vec![Incompatibility {
            node: label_of(refused.error_node),
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

enum DriverRefusal {
    /// The driver call itself failed.
    Failed(Failure),
    /// The driver says the update is impossible, for this reason.
    Refused(Vec<Incompatibility>),
}
