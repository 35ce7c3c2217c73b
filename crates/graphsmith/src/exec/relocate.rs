//! Moving an executable onto new buffers in place: every kernel node's argument bytes are
//! searched for pointers into old allocations (8-byte-aligned words anywhere in an argument,
//! so pointers inside struct parameters, as libraries such as cuBLAS pass them, are found
//! too), each is rewritten to the same offset in the new allocation, and the node is set in
//! the executable (`cuGraphExecKernelNodeSetParams`). The executable then keeps the new
//! buffers alive and lets go of the old ones once no launch of it can still use them.
//!
//! What it serves: switching a captured model to new weights without capturing or
//! instantiating again.

use std::sync::Arc;

use graphsmith_model::NodeKind;

use super::node_updates::{flush_template, fold_into_template};
use super::Exec;
use crate::context::Keep;
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

    fn moved(&self, value: u64) -> Option<u64> {
        let start = self.old.ptr;
        (value >= start && value < start + self.old.bytes as u64)
            .then(|| self.new.ptr + (value - start))
    }
}

/// The moves sorted by old address, for finding the move of a word in O(log moves): a kernel's
/// arguments may be a kilobyte (hundreds of words, as cuBLAS's are) and a model moves hundreds of
/// buffers, so a linear search per word is what relocation would spend its time on.
struct MoveIndex<'a> {
    sorted: Vec<&'a Relocation>,
    /// The lowest old address and one past the highest old byte: most words (sizes, strides,
    /// flags) fall outside and are rejected by two comparisons.
    lo: u64,
    hi: u64,
}

impl<'a> MoveIndex<'a> {
    fn new(moves: &'a [Relocation]) -> MoveIndex<'a> {
        let mut sorted: Vec<&Relocation> = moves.iter().collect();
        sorted.sort_by_key(|m| m.old.ptr);
        let lo = sorted.first().map_or(u64::MAX, |m| m.old.ptr);
        let hi = sorted
            .iter()
            .map(|m| m.old.ptr + m.old.bytes as u64)
            .max()
            .unwrap_or(0);
        MoveIndex { sorted, lo, hi }
    }

    /// The new value of a word that points into an old allocation.
    fn moved(&self, value: u64) -> Option<u64> {
        if value < self.lo || value >= self.hi {
            return None;
        }
        // The last move starting at or below `value` (allocations do not overlap).
        let i = self.sorted.partition_point(|m| m.old.ptr <= value);
        self.sorted[i.checked_sub(1)?].moved(value)
    }

    /// The move of the allocation that starts at `ptr`.
    fn exact(&self, ptr: u64) -> Option<&'a Relocation> {
        let i = self.sorted.partition_point(|m| m.old.ptr < ptr);
        self.sorted.get(i).copied().filter(|m| m.old.ptr == ptr)
    }
}

/// What [`Exec::relocate`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relocated {
    /// Kernel nodes whose arguments changed.
    pub nodes: usize,
    /// Pointer words rewritten.
    pub words: usize,
}

impl Exec {
    /// Moves every kernel node of this executable from the `old` allocations of `moves` to their
    /// `new` ones, in place (see the module docs). Launches already submitted keep the old
    /// values; the old buffers are released by the executable once they have finished (it
    /// waits for its streams here unless a capture runs, then at its next wait). A node whose
    /// arguments were not read back completely is an error naming it (nothing is changed then).
    #[track_caller]
    pub fn relocate(&mut self, moves: &[Relocation]) -> Result<Relocated> {
        let at = SourceLine::caller();
        let op = "Exec::relocate";
        let object = self.object();
        let fail = |f: Failure| f.on(object.clone(), op, at);
        // Per-node updates go into the template first, so the model holds every argument.
        flush_template(self).map_err(|e| e.on(object.clone(), op, at))?;
        fold_into_template(self);
        self.template.ctx.bind().map_err(fail)?;
        let current = self.current();
        let mut model = current.model().clone();
        let index_of_moves = MoveIndex::new(moves);
        let mut changed = Vec::new();
        let mut words = 0;
        for (index, node) in model.nodes.iter_mut().enumerate() {
            let NodeKind::Kernel(k) = &mut node.kind else {
                continue;
            };
            let mut any = false;
            for arg in &mut k.args {
                let mut j = (8 - arg.offset as usize % 8) % 8;
                while j + 8 <= arg.bytes.len() {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(&arg.bytes[j..j + 8]);
                    let value = u64::from_le_bytes(word);
                    if let Some(new) = index_of_moves.moved(value) {
                        arg.bytes[j..j + 8].copy_from_slice(&new.to_le_bytes());
                        words += 1;
                        any = true;
                    }
                    j += 8;
                }
            }
            if !any {
                continue;
            }
            if current.kernels().get(index).is_none_or(|k| k.is_none()) {
                return Err(Error::new(
                    ErrorKind::InvalidInput {
                        reason: format!(
                            "node '{}' ({}) references a moved buffer but its kernel's parameters are not known, so it cannot be rewritten",
                            node.label, k.name
                        ),
                    },
                    object,
                    op,
                    at,
                ));
            }
            for access in node
                .accesses
                .iter_mut()
                .chain(&mut node.accesses_before_wait)
            {
                if let Some(m) = index_of_moves.exact(access.buffer) {
                    access.buffer = m.new.ptr;
                    access.label = m.new.label.clone();
                }
            }
            changed.push(index);
        }
        for &index in &changed {
            let (NodeKind::Kernel(k), Some(function)) = (
                &model.nodes[index].kind,
                current.kernels().get(index).and_then(|k| k.as_ref()),
            ) else {
                continue;
            };
            let mut pointers: Vec<*mut std::ffi::c_void> = k
                .args
                .iter()
                .map(|a| a.bytes.as_ptr() as *mut std::ffi::c_void)
                .collect();
            let params = kernel_params(
                function.func,
                function.kern,
                k.grid,
                k.block,
                k.shared_mem_bytes,
                pointers.as_mut_ptr(),
            );
            let handle = self.template.handles()[index];
            let _guard = self.template.raw_guard();
            // SAFETY: raw and handle are live (the handle belongs to the graph raw was
            // instantiated from, which self holds; the guard serialises calls on it while
            // shared); the pointers point at the argument bytes of
            // `model`, alive for the call, one per parameter of the node's kernel as read back;
            // the driver copies them.
            unsafe { driver::exec_set_kernel_node(self.raw, handle, &params) }.map_err(|f| {
                let label = model.nodes[index].label.clone();
                f.on(ObjectRef::new(ObjectKind::Node, &label), op, at)
            })?;
        }
        let nodes = changed.len();
        // The model (and the driver template, lazily) follow; the new buffers are kept alive,
        // the old ones let go of once no launch can use them.
        {
            let current = self.current_mut();
            current.parts_mut().model = Arc::new(model);
        }
        self.model_cache = std::sync::OnceLock::new();
        if self.stale.len() < self.template.handles().len() {
            self.stale.resize(self.template.handles().len(), false);
        }
        for &index in &changed {
            self.stale[index] = true;
            self.any_stale = true;
        }
        let mut released: Vec<Keep> = Vec::new();
        let mut swap_keep = |keep: &mut Arc<Vec<Keep>>| {
            let list = Arc::make_mut(keep);
            list.retain(|k| {
                let old = k
                    .downcast_ref::<Allocation>()
                    .is_some_and(|a| index_of_moves.exact(a.ptr).is_some());
                if old {
                    released.push(k.clone());
                }
                !old
            });
            list.extend(moves.iter().map(|m| m.new.clone() as Keep));
        };
        swap_keep(&mut self.template.keep);
        if let Some(current) = self.current.as_mut() {
            swap_keep(&mut current.keep);
        }
        self.stats.node_updates += nodes as u64;
        match self.try_wait() {
            Ok(true) => drop(released),
            _ => self.retired.extend(released),
        }
        Ok(Relocated { nodes, words })
    }
}
