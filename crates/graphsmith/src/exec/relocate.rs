//! Moving an executable onto new buffers in place: every kernel node's pointers into old
//! allocations (8-byte-aligned words anywhere in an argument, so pointers inside struct
//! parameters, as libraries such as cuBLAS pass them, are found too) are rewritten to the same
//! offset in the new allocation, and the node is set in the executable
//! (`cuGraphExecKernelNodeSetParams`). The executable then keeps the new buffers alive and lets
//! go of the old ones once no launch of it can still use them.
//!
//! What it serves: switching a captured model to new weights without capturing or
//! instantiating again, at the driver's own cost per node. What is invariant across swaps is
//! paid once per executable ([`Exec::prepare_relocation`]): reading a captured graph back and
//! finding its pointer words (`exec/relocation_index.rs`). A swap then walks only the nodes
//! that point into a moved allocation, rewrites their words in the model in place (no copy of
//! the model), makes one driver call per node, and leaves the driver template to be brought in
//! step when it is next asked for ([`Exec::template`]). `cuGraphExecUpdate` is never cheaper
//! here: it needs a template holding the new arguments (one template write per node, the same
//! count of driver calls) and then compares every node of the graph.

use std::sync::Arc;
use std::time::Instant;

use graphsmith_model::NodeKind;

use super::node_updates::{flush_template, fold_into_template};
use super::relocation_index::{Plan, Range, RelocationIndex};
use super::Exec;
use crate::context::{keep_id, Keep};
use crate::driver::{self, kernel_params, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::memory::{Allocation, DeviceBuffer, Element};

/// One move: pointers into `old` become pointers to the same offset in `new`.
pub struct Relocation {
    old: Arc<Allocation>,
    new: Arc<Allocation>,
}

impl Relocation {
    /// A move from `old` to `new`, which must be distinct allocations of the same size.
    #[track_caller]
    pub fn new<T: Element>(old: &DeviceBuffer<T>, new: &DeviceBuffer<T>) -> Result<Relocation> {
        let at = SourceLine::caller();
        if old.alloc.bytes != new.alloc.bytes || Arc::ptr_eq(&old.alloc, &new.alloc) {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!(
                        "cannot move '{}' ({} bytes) to '{}' ({} bytes): the new buffer must be another allocation of the same size",
                        old.alloc.label, old.alloc.bytes, new.alloc.label, new.alloc.bytes
                    ),
                },
                ObjectRef::new(ObjectKind::Buffer, &new.alloc.label),
                "Relocation::new",
                at,
            ));
        }
        Ok(Relocation {
            old: old.alloc.clone(),
            new: new.alloc.clone(),
        })
    }

    fn old_range(&self) -> Range {
        Range {
            base: self.old.ptr,
            bytes: self.old.bytes as u64,
        }
    }
}

/// What [`Exec::relocate`] changed, and where its time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relocated {
    /// Kernel nodes whose arguments changed.
    pub nodes: usize,
    /// Pointer words rewritten.
    pub words: usize,
    /// Nanoseconds in the driver's per-node updates (`cuGraphExecKernelNodeSetParams`, one per
    /// node changed).
    pub driver_ns: u64,
    /// Nanoseconds of the switch's own host work: finding the nodes, rewriting their words
    /// and accesses in the model, swapping the kept buffers, letting the old ones go (after
    /// waiting for launches still in flight, when there are any).
    pub host_ns: u64,
    /// Nanoseconds spent preparing ([`Exec::prepare_relocation`]): reading a captured graph
    /// back and indexing its pointer words. 0 when the index kept from an earlier relocation,
    /// or made ahead of it, covered the moves.
    pub index_ns: u64,
}

impl Relocated {
    /// The switch itself, preparation excluded: `driver_ns + host_ns`.
    pub fn switch_ns(&self) -> u64 {
        self.driver_ns + self.host_ns
    }
}

fn nanos(since: Instant) -> u64 {
    since.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

impl Exec {
    /// Makes ready what [`Exec::relocate`] needs for `moves`, and keeps it for later swaps:
    /// per-node updates folded into the template's model, a captured graph read back (once),
    /// and the index of its pointer words over the moves' old allocations and every allocation
    /// the executable keeps (built again only when a move's old allocation is not in it).
    /// Returns the nanoseconds it spent (0 when everything was ready). Changes nothing the
    /// executable runs; call it ahead of a swap to keep that work out of the swap.
    #[track_caller]
    pub fn prepare_relocation(&mut self, moves: &[Relocation]) -> Result<u64> {
        self.prepare_relocation_at(moves, "Exec::prepare_relocation", SourceLine::caller())
    }

    fn prepare_relocation_at(
        &mut self,
        moves: &[Relocation],
        op: &'static str,
        at: SourceLine,
    ) -> Result<u64> {
        let covered = |i: &RelocationIndex| i.plan(moves.iter().map(Relocation::old_range));
        if self.overrides.is_empty() && self.relocation.as_deref().and_then(covered).is_some() {
            return Ok(0);
        }
        let t = Instant::now();
        if !self.overrides.is_empty() {
            // Per-node updates go into the template first, so the model holds every argument.
            flush_template(self).map_err(|e| e.on(self.object(), op, at))?;
            fold_into_template(self);
            self.relocation = None;
        }
        // The node handles the driver calls address, and the model: read back now if never
        // asked for (a captured graph), so that the swap does no reading.
        self.template.try_parts(op, at)?;
        self.current().try_parts(op, at)?;
        // Live allocations first: an index slot whose start was reused later loses to them.
        let earlier: Vec<Range> = self
            .relocation
            .take()
            .map(|i| i.ranges().collect())
            .unwrap_or_default();
        let kept = [
            Some(&self.template.keep),
            self.current.as_ref().map(|c| &c.keep),
        ];
        let ranges = moves
            .iter()
            .map(Relocation::old_range)
            .chain(
                kept.into_iter()
                    .flatten()
                    .flat_map(|keep| keep.iter())
                    .filter_map(|k| k.downcast_ref::<Allocation>())
                    .map(|a| Range {
                        base: a.ptr,
                        bytes: a.bytes as u64,
                    }),
            )
            .chain(earlier);
        let current = self.current();
        let kernels = current.kernels();
        let index = RelocationIndex::build(
            current.model(),
            |i| kernels.get(i).is_some_and(|k| k.is_some()),
            ranges,
        );
        self.relocation = Some(Box::new(index));
        Ok(nanos(t).max(1))
    }

    /// Moves every kernel node of this executable from the `old` allocations of `moves` to their
    /// `new` ones, in place (see the module docs), and says what it changed and where the time
    /// went. Launches already submitted keep the old values; the old buffers are released by
    /// the executable once they have finished (it waits for its streams here unless a capture
    /// runs, then at its next wait).
    ///
    /// Refused, with nothing changed, for a node on a moved buffer that cannot be rewritten: a
    /// kernel whose arguments were not read back completely, or a copy or set node; the error
    /// names it. A pointer the argument words do not show (e.g. inside a descriptor) is not
    /// seen: check the moved executable's results before letting go of the old buffers, as
    /// `graphsmith-llama`'s weight swap does. Should the driver refuse a node, the nodes before it
    /// are switched and the rest are not: the error names the node, the executable keeps both
    /// old and new buffers, and it must be updated or instantiated again.
    #[track_caller]
    pub fn relocate(&mut self, moves: &[Relocation]) -> Result<Relocated> {
        let at = SourceLine::caller();
        let op = "Exec::relocate";
        let t = Instant::now();
        let olds = || moves.iter().map(Relocation::old_range);
        // The index kept from an earlier swap, when it covers these moves (the usual case).
        let kept = match self.overrides.is_empty() {
            true => self.relocation.as_deref().and_then(|i| i.plan(olds())),
            false => None,
        };
        let (plan, index_ns) = match kept {
            Some(plan) => (plan, 0),
            None => {
                let ns = self.prepare_relocation_at(moves, op, at)?;
                let plan = self.relocation.as_deref().and_then(|i| i.plan(olds()));
                let Some(plan) = plan else {
                    return Err(Error::new(
                        ErrorKind::InvalidInput {
                            reason: "the relocation index does not cover the moves".into(),
                        },
                        self.object(),
                        op,
                        at,
                    ));
                };
                (plan, ns)
            }
        };
        let refuse = |exec: &Exec, reason: String| {
            Error::new(ErrorKind::InvalidInput { reason }, exec.object(), op, at)
        };
        self.template
            .ctx
            .bind()
            .map_err(|f| f.on(self.object(), op, at))?;
        let Some(mut index) = self.relocation.take() else {
            return Err(refuse(self, "the relocation index was not made".into()));
        };
        if let Some(reason) = self.unmovable(&index, &plan, moves) {
            self.relocation = Some(index);
            return Err(refuse(self, reason));
        }
        let (changed, words, mut used) = self.rewrite_model(&index, &plan, moves);
        let (driver_ns, failed) = self.set_nodes(&changed);
        // The driver template follows when it is next asked for (`Exec::template`).
        let len = self.template.handles().len();
        if self.stale.len() < len {
            self.stale.resize(len, false);
        }
        for &i in &changed {
            self.stale[i] = true;
        }
        self.any_stale |= !changed.is_empty();
        self.model_cache = std::sync::OnceLock::new();
        let released = self.swap_kept(moves, &mut used, failed.is_none());
        let nodes = changed.len();
        self.stats.node_updates += nodes as u64;
        if let Some((index, f)) = failed {
            let label = self.current().model().nodes[index].label.clone();
            return Err(f.on(ObjectRef::new(ObjectKind::Node, &label), op, at));
        }
        if index.rebase(&plan, |m| moves[m].new.ptr) {
            self.relocation = Some(index);
        }
        if !released.is_empty() {
            match self.try_wait() {
                Ok(true) => drop(released),
                _ => self.retired.extend(released),
            }
        }
        let total = nanos(t);
        Ok(Relocated {
            nodes,
            words,
            driver_ns,
            host_ns: total.saturating_sub(driver_ns + index_ns),
            index_ns,
        })
    }

    /// Why the nodes `plan` touches cannot all be rewritten, if they cannot.
    fn unmovable(
        &self,
        index: &RelocationIndex,
        plan: &Plan,
        moves: &[Relocation],
    ) -> Option<String> {
        let model = self.current().model();
        let unknown = index
            .moved_nodes(plan)
            .find(|n| !n.known && n.words_move(plan));
        if let Some(n) = unknown {
            let node = &model.nodes[n.node];
            let name = match &node.kind {
                NodeKind::Kernel(k) => k.name.as_str(),
                other => other.name(),
            };
            return Some(format!(
                "node '{}' ({name}) references a moved buffer but its kernel's parameters are not known, so it cannot be rewritten",
                node.label
            ));
        }
        let (node, m) = index.first_opaque(plan)?;
        let node = &model.nodes[node];
        Some(format!(
            "node '{}' (a {} node) works on '{}', and relocation rewrites kernel arguments only, so it cannot be moved in place: capture the graph again instead",
            node.label,
            node.kind.name(),
            moves[m].old.label
        ))
    }

    /// Rewrites, in the current template's model (in place: copied only while another graph
    /// shares it), every pointer word and declared access into an allocation `plan` moves.
    /// Returns the nodes whose words changed (to be set in the executable), the words
    /// rewritten and which moves they used.
    fn rewrite_model(
        &mut self,
        index: &RelocationIndex,
        plan: &Plan,
        moves: &[Relocation],
    ) -> (Vec<usize>, usize, Vec<bool>) {
        let mut used = vec![false; moves.len()];
        let (mut changed, mut words) = (Vec::new(), 0);
        let model = Arc::make_mut(&mut self.current_mut().parts_mut().model);
        for n in index.moved_nodes(plan) {
            let Some(node) = model.nodes.get_mut(n.node) else {
                continue;
            };
            for t in &n.touches {
                let Some(m) = plan.move_of(t.slot) else {
                    continue;
                };
                let list = match t.before_wait {
                    false => &mut node.accesses,
                    true => &mut node.accesses_before_wait,
                };
                if let Some(access) = list.get_mut(t.at as usize) {
                    access.buffer = moves[m].new.ptr;
                    access.label.clone_from(&moves[m].new.label);
                }
            }
            if !n.words_move(plan) {
                continue;
            }
            let NodeKind::Kernel(k) = &mut node.kind else {
                continue;
            };
            for s in &n.sites {
                let Some(m) = plan.move_of(s.slot) else {
                    continue;
                };
                let value = moves[m].new.ptr + s.offset;
                let at = s.at as usize;
                let word = k
                    .args
                    .get_mut(s.arg as usize)
                    .and_then(|a| a.bytes.get_mut(at..at + 8));
                if let Some(word) = word {
                    word.copy_from_slice(&value.to_le_bytes());
                    used[m] = true;
                    words += 1;
                }
            }
            changed.push(n.node);
        }
        (changed, words, used)
    }

    /// Sets each of `changed` in the executable from the model's arguments, one driver call
    /// per node. Returns the nanoseconds those calls took and the first node the driver
    /// refused (the nodes after it are not set).
    fn set_nodes(&self, changed: &[usize]) -> (u64, Option<(usize, Failure)>) {
        let current = self.current();
        let (model, kernels, handles) =
            (current.model(), current.kernels(), self.template.handles());
        let mut pointers: Vec<*mut std::ffi::c_void> = Vec::new();
        let mut driver_ns = 0;
        let _guard = self.template.raw_guard();
        for &index in changed {
            let (Some(NodeKind::Kernel(k)), Some(Some(function)), Some(&handle)) = (
                model.nodes.get(index).map(|n| &n.kind),
                kernels.get(index),
                handles.get(index),
            ) else {
                continue;
            };
            pointers.clear();
            pointers.extend(
                k.args
                    .iter()
                    .map(|a| a.bytes.as_ptr() as *mut std::ffi::c_void),
            );
            let params = kernel_params(
                function.func,
                function.kern,
                k.grid,
                k.block,
                k.shared_mem_bytes,
                pointers.as_mut_ptr(),
            );
            let t = Instant::now();
            // SAFETY: raw and handle are live (the handle belongs to the graph raw was
            // instantiated from, which self holds; the guard serialises calls on it while
            // shared); the pointers point at the argument bytes of the model, alive and
            // unchanged for the call, one per parameter of the node's kernel as read back
            // (`known`, checked before); the driver copies them.
            let set = unsafe { driver::exec_set_kernel_node(self.raw, handle, &params) };
            driver_ns += nanos(t);
            if let Err(f) = set {
                return (driver_ns, Some((index, f)));
            }
        }
        (driver_ns, None)
    }

    /// Lets the kept lists hold the new buffers the executable now uses instead of the old
    /// ones; returns the old ones (to be let go of once no launch uses them). With `release`
    /// false (a switch that stopped part-way) the old ones stay held too.
    fn swap_kept(&mut self, moves: &[Relocation], used: &mut [bool], release: bool) -> Vec<Keep> {
        let mut olds: Vec<(usize, usize)> = moves
            .iter()
            .enumerate()
            .map(|(m, mv)| (keep_id(&mv.old), m))
            .collect();
        olds.sort_unstable();
        let old_move = |k: &Keep| {
            olds.binary_search_by_key(&keep_id(k), |o| o.0)
                .ok()
                .map(|i| olds[i].1)
        };
        let mut released: Vec<Keep> = Vec::new();
        let mut drop_old = |keep: &mut Arc<Vec<Keep>>| {
            if !keep.iter().any(|k| old_move(k).is_some()) {
                return;
            }
            Arc::make_mut(keep).retain(|k| match old_move(k) {
                Some(m) => {
                    used[m] = true;
                    if release {
                        released.push(k.clone());
                    }
                    !release
                }
                None => true,
            });
        };
        drop_old(&mut self.template.keep);
        if let Some(current) = self.current.as_mut() {
            drop_old(&mut current.keep);
        }
        let fresh: Vec<Keep> = moves
            .iter()
            .zip(used.iter())
            .filter(|(_, &u)| u)
            .map(|(m, _)| m.new.clone() as Keep)
            .collect();
        if !fresh.is_empty() {
            Arc::make_mut(&mut self.current_mut().keep).extend(fresh);
        }
        released
    }
}
