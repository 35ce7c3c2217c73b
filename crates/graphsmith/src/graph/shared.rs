//! What a [`Graph`] shares with its copies: the driver graph (one owner, destroyed when the last
//! copy goes) and the model, node handles and kernels, read back from the driver only when first
//! asked for (a captured graph is labelled from its capture's journal at that moment).
//!
//! Sharing is what makes `Graph::instantiate` cost the driver's `cuGraphInstantiate` alone: the
//! executable's template is a share of the caller's graph, not a driver copy. Whoever would
//! change a shared driver graph copies it first (`cuGraphClone`, then `cuGraphNodeFindInClone`
//! per node): the builder before it adds a node ([`Graph::editable`]), an executable before it
//! writes its per-node updates into its template. Calls that read a shared driver graph hold
//! its lock, so two threads (a graph's and an executable's) never use it at once.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use cudarc::driver::sys;
use graphsmith_model as model;

use crate::context::{Context, Entry};
use crate::driver::{self, Failure};
use crate::error::{ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Graph, KernelFn};

/// The owner of one driver graph, shared by a graph and the templates made from it.
pub(crate) struct SharedRaw {
    raw: sys::CUgraph,
    ctx: Context,
    label: Arc<str>,
    /// Held around every driver call on `raw` while it is shared (see the module docs).
    lock: Mutex<()>,
}

// SAFETY: the driver graph may be used from any thread as long as calls on it are serialised:
// while shared, they hold `lock`; while not shared, the one `Graph` holding it is !Sync and used
// through `&mut` for every change.
unsafe impl Send for SharedRaw {}
// SAFETY: as above.
unsafe impl Sync for SharedRaw {}

impl SharedRaw {
    pub(crate) fn new(ctx: Context, raw: sys::CUgraph, label: &str) -> Arc<SharedRaw> {
        Arc::new(SharedRaw {
            raw,
            ctx,
            label: label.into(),
            lock: Mutex::new(()),
        })
    }
}

impl Drop for SharedRaw {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        let label = self.label.clone();
        // SAFETY: raw is owned here and destroyed once. Executables made from it are
        // independent of it (cuGraphInstantiate copies the graph).
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Graph, &*label),
            crate::context::Destroy::Graph(raw),
        );
    }
}

/// A graph's model, the driver node of each model node and the kernel of each kernel node.
#[derive(Clone, Default)]
pub(crate) struct Parts {
    pub model: Arc<model::Graph>,
    /// The driver node of each model node, by index.
    pub handles: Vec<sys::CUgraphNode>,
    /// The function and parameter layout of each kernel node, by index (`None` for other
    /// nodes, and for kernels whose arguments could not all be read back).
    pub kernels: Arc<Vec<Option<KernelFn>>>,
}

/// The parts of a graph, made when first asked for.
pub(crate) struct Lazy {
    parts: OnceLock<Parts>,
    /// The journal of the capture that made the graph, until its nodes are labelled.
    pending: Mutex<Option<Vec<Entry>>>,
    /// Why the read-back failed, when it did (the parts are then empty).
    failure: OnceLock<Failure>,
}

// SAFETY: `Parts` holds driver node handles (plain pointers used as keys and as arguments of
// calls serialised as the module docs say) and `Arc`s of plain data.
unsafe impl Send for Lazy {}
// SAFETY: as above; `parts` and `failure` are set once, `pending` behind a mutex.
unsafe impl Sync for Lazy {}

impl Lazy {
    /// Parts known now (a graph built node by node, or a template made from known parts).
    pub(crate) fn known(parts: Parts) -> Arc<Lazy> {
        Arc::new(Lazy {
            parts: OnceLock::from(parts),
            pending: Mutex::new(None),
            failure: OnceLock::new(),
        })
    }
    /// The parts, if made already.
    pub(crate) fn made(&self) -> Option<&Parts> {
        self.parts.get()
    }
    /// Parts read back from the driver when first asked for, labelled from `journal`.
    pub(crate) fn pending(journal: Vec<Entry>) -> Arc<Lazy> {
        Arc::new(Lazy {
            parts: OnceLock::new(),
            pending: Mutex::new(Some(journal)),
            failure: OnceLock::new(),
        })
    }
}

impl Graph {
    /// Holds the driver graph's lock while it is shared (nothing to hold otherwise).
    pub(crate) fn raw_guard(&self) -> Option<MutexGuard<'_, ()>> {
        (Arc::strong_count(&self.owner) > 1)
            .then(|| self.owner.lock.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The parts, read back first if need be. When the read-back fails they are empty and
    /// [`Graph::try_model`] says why.
    pub(crate) fn parts(&self) -> &Parts {
        if let Some(parts) = self.lazy.parts.get() {
            return parts;
        }
        self.lazy.parts.get_or_init(|| match self.read_parts() {
            Ok(parts) => parts,
            Err(f) => {
                let _ = self.lazy.failure.set(f);
                Parts {
                    model: Arc::new(model::Graph::new(&*self.label)),
                    ..Parts::default()
                }
            }
        })
    }

    /// The parts, or the failure of their read-back as an error of `op` at `at`.
    pub(crate) fn try_parts(&self, op: &'static str, at: SourceLine) -> Result<&Parts> {
        let parts = self.parts();
        match self.lazy.failure.get() {
            Some(f) => Err(f.on(self.object(), op, at)),
            None => Ok(parts),
        }
    }

    /// The parts, to change them: made first, and copied when another graph shares them.
    pub(crate) fn parts_mut(&mut self) -> &mut Parts {
        self.facts.take();
        if Arc::get_mut(&mut self.lazy).is_none_or(|l| l.parts.get().is_none()) {
            let parts = self.parts().clone();
            self.lazy = Lazy::known(parts);
        }
        match Arc::get_mut(&mut self.lazy).and_then(|l| l.parts.get_mut()) {
            Some(parts) => parts,
            None => unreachable!("a fresh Lazy is unique and known"),
        }
    }

    /// Reads the driver graph back and labels its nodes from the capture's journal.
    fn read_parts(&self) -> std::result::Result<Parts, Failure> {
        self.ctx.bind()?;
        let read = {
            let _guard = self.raw_guard();
            // SAFETY: raw is live (owned through `owner`); calls on it are serialised (the
            // guard while shared, !Sync otherwise); the context is current.
            unsafe { crate::graph::read_graph(self.raw, &self.label) }?
        };
        let crate::graph::ReadGraph {
            mut model,
            handles,
            kernels,
        } = read;
        let journal = self
            .lazy
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(journal) = journal {
            crate::graph::label_captured(&mut model, &handles, journal);
        }
        Ok(Parts {
            model: Arc::new(model),
            handles,
            kernels: Arc::new(kernels),
        })
    }

    /// The driver graph, to change it: copied first when shared (`cuGraphClone`, the node
    /// handles mapped into the copy), so that no executable's template changes under it.
    pub(crate) fn editable(&mut self, op: &'static str, at: SourceLine) -> Result<sys::CUgraph> {
        self.unshare().map_err(|f| f.on(self.object(), op, at))?;
        Ok(self.raw)
    }

    /// Makes the driver graph this graph's own, copying it when shared.
    pub(crate) fn unshare(&mut self) -> std::result::Result<(), Failure> {
        if Arc::strong_count(&self.owner) > 1 {
            let copy = self.copy()?;
            self.raw = copy.raw;
            self.owner = copy.owner;
            self.lazy = copy.lazy;
            self.facts.take();
        }
        Ok(())
    }

    /// A copy of this template (`cuGraphClone`) with the same parts, node handles mapped into
    /// the copy (`cuGraphNodeFindInClone`), the same kept resources and the same id.
    pub(crate) fn copy(&self) -> std::result::Result<Graph, Failure> {
        let parts = self.parts();
        if let Some(f) = self.lazy.failure.get() {
            return Err(*f);
        }
        self.ctx.bind()?;
        let _guard = self.raw_guard();
        // SAFETY: self.raw is live; calls on it are serialised (guard or !Sync).
        let raw = unsafe { driver::graph_clone(self.raw) }?;
        // Own the copy at once, so an error below destroys it.
        let owner = SharedRaw::new(self.ctx.clone(), raw, &self.label);
        let mut handles = Vec::with_capacity(parts.handles.len());
        for &original in &parts.handles {
            // SAFETY: original is a node of self.raw, and raw was cloned from it.
            handles.push(unsafe { driver::node_in_clone(original, raw) }?);
        }
        let copy = Parts {
            model: parts.model.clone(),
            handles,
            kernels: parts.kernels.clone(),
        };
        Ok(Graph {
            raw,
            owner,
            lazy: Lazy::known(copy),
            ctx: self.ctx.clone(),
            id: self.id,
            label: self.label.clone(),
            keep: self.keep.clone(),
            facts: self.facts.clone(),
            _not_sync: std::marker::PhantomData,
        })
    }

    /// Another handle to this same template: the same driver graph, parts, kept resources and
    /// id. No driver call; whoever changes either copies the driver graph first.
    pub(crate) fn share(&self) -> Graph {
        Graph {
            raw: self.raw,
            owner: self.owner.clone(),
            lazy: self.lazy.clone(),
            ctx: self.ctx.clone(),
            id: self.id,
            label: self.label.clone(),
            keep: self.keep.clone(),
            facts: self.facts.clone(),
            _not_sync: std::marker::PhantomData,
        }
    }
}
