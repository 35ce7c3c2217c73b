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
//!
//! A graph with conditional nodes cannot be copied (`cuGraphClone` refuses it): it is shared
//! like any other, but whoever would change it while it is shared gets an error naming the
//! conditional node ([`CopyError::Refused`]) instead of a copy. A conditional node's body is
//! never copied either: the node owns it ([`SharedRaw::borrowed`]).

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use cudarc::driver::sys;
use graphsmith_model as model;

use crate::context::{Context, Entry};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Graph, KernelFn};

/// The owner of one driver graph, shared by a graph and the templates made from it.
pub(crate) struct SharedRaw {
    raw: sys::CUgraph,
    ctx: Context,
    label: Arc<str>,
    /// Held around every driver call on `raw` while it is shared (see the module docs). A
    /// conditional node's body holds the lock of the graph it lives in.
    lock: Arc<Mutex<()>>,
    /// For a conditional node's body: the owner of the graph it lives in (whose shares make
    /// the body shared too).
    root: Option<Weak<SharedRaw>>,
    /// Whether `raw` is destroyed with the last share: false for a conditional node's body,
    /// which the node owns.
    pub(crate) owned: bool,
}

// SAFETY: the driver graph may be used from any thread as long as calls on it are serialised:
// while shared, they hold `lock`; while not shared, the one `Graph` holding it is !Sync and used
// through `&mut` for every change.
unsafe impl Send for SharedRaw {}
// SAFETY: as above.
unsafe impl Sync for SharedRaw {}

impl SharedRaw {
    pub(crate) fn new(
        ctx: Context,
        raw: sys::CUgraph,
        label: impl Into<Arc<str>>,
    ) -> Arc<SharedRaw> {
        Arc::new(SharedRaw {
            raw,
            ctx,
            label: label.into(),
            lock: Arc::new(Mutex::new(())),
            root: None,
            owned: true,
        })
    }
    /// A conditional node's body `raw`, which its node owns and destroys, living in the driver
    /// graph of `parent` (itself a body, or the graph that holds them all).
    pub(crate) fn borrowed(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        parent: &Arc<SharedRaw>,
    ) -> Arc<SharedRaw> {
        let root = match &parent.root {
            Some(root) => root.clone(),
            None => Arc::downgrade(parent),
        };
        Arc::new(SharedRaw {
            raw,
            ctx,
            label: label.into(),
            lock: parent.lock.clone(),
            root: Some(root),
            owned: false,
        })
    }
    /// Whether another graph or executable shares this driver graph (for a body: the graph it
    /// lives in).
    fn shared(self: &Arc<SharedRaw>) -> bool {
        Arc::strong_count(self) > 1 || self.root.as_ref().is_some_and(|r| r.strong_count() > 1)
    }
}

impl Drop for SharedRaw {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() || !self.owned {
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

/// Why a graph was not copied.
pub(crate) enum CopyError {
    /// A driver call failed.
    Driver(Failure),
    /// The graph may not be copied (it holds a conditional node, or is a conditional node's
    /// body): why, naming the node.
    Refused(String),
}

impl From<Failure> for CopyError {
    fn from(f: Failure) -> CopyError {
        CopyError::Driver(f)
    }
}

impl CopyError {
    /// The error of `op` on `object` at `at`.
    pub(crate) fn on(self, object: ObjectRef, op: &'static str, at: SourceLine) -> Error {
        match self {
            CopyError::Driver(f) => f.on(object, op, at),
            CopyError::Refused(reason) => {
                Error::new(ErrorKind::InvalidInput { reason }, object, op, at)
            }
        }
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

/// Whether a model node is a conditional node (built here, or read back from the driver).
pub(crate) fn is_conditional(n: &model::Node) -> bool {
    matches!(&n.kind, model::NodeKind::Conditional { .. })
        || matches!(&n.kind, model::NodeKind::Other { name } if name == "conditional")
}

/// The parts of a graph, made when first asked for.
pub(crate) struct Lazy {
    parts: OnceLock<Parts>,
    /// The journal of the capture that made the graph, until its nodes are labelled.
    pending: Mutex<Option<Vec<Entry>>>,
    /// Why the read-back failed, when it did (the parts are then empty).
    failure: OnceLock<Failure>,
    /// The index of the first conditional node of the model, once looked for (every
    /// instantiation of a shared graph asks; see [`Lazy::conditional`]). Reset with the parts.
    conditional: OnceLock<Option<usize>>,
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
            conditional: OnceLock::new(),
        })
    }
    /// The parts, if made already.
    pub(crate) fn made(&self) -> Option<&Parts> {
        self.parts.get()
    }
    /// The index of the first conditional node of `parts` (these parts, made), looked for once:
    /// the parts change only through [`Graph::parts_mut`], which forgets the answer.
    pub(crate) fn conditional(&self, parts: &Parts) -> Option<usize> {
        *self
            .conditional
            .get_or_init(|| parts.model.nodes.iter().position(is_conditional))
    }
    /// The parts, made, to change them: what was found in them is forgotten.
    fn parts_to_change(&mut self) -> Option<&mut Parts> {
        self.conditional.take();
        self.parts.get_mut()
    }
    /// Parts read back from the driver when first asked for, labelled from `journal`.
    pub(crate) fn pending(journal: Vec<Entry>) -> Arc<Lazy> {
        Arc::new(Lazy {
            parts: OnceLock::new(),
            pending: Mutex::new(Some(journal)),
            failure: OnceLock::new(),
            conditional: OnceLock::new(),
        })
    }
}

impl Graph {
    /// Holds the driver graph's lock while it is shared (nothing to hold otherwise). Not
    /// reentrant: a body read while its graph's guard is held reads without one.
    pub(crate) fn raw_guard(&self) -> Option<MutexGuard<'_, ()>> {
        self.owner
            .shared()
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
        match Arc::get_mut(&mut self.lazy).and_then(Lazy::parts_to_change) {
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
            crate::graph::label_captured(&mut model, &handles, &kernels, journal);
        }
        // The bodies of the conditional nodes built here, which the driver cannot read back.
        self.put_bodies(&mut model, &handles);
        Ok(Parts {
            model: Arc::new(model),
            handles,
            kernels: Arc::new(kernels),
        })
    }

    /// The driver graph, to change it: copied first when shared (`cuGraphClone`, the node
    /// handles mapped into the copy), so that no executable's template changes under it.
    ///
    /// The parts are made first: a captured graph's model is read back lazily, and a read-back
    /// after the caller added a node would find that node in the driver graph, and the caller
    /// would then add it to the model a second time.
    pub(crate) fn editable(&mut self, op: &'static str, at: SourceLine) -> Result<sys::CUgraph> {
        self.try_parts(op, at)?;
        self.unshare().map_err(|f| f.on(self.object(), op, at))?;
        Ok(self.raw)
    }

    /// Makes the driver graph this graph's own, copying it when shared (refused for a graph
    /// with conditional nodes and for a conditional node's body, which cannot be copied).
    pub(crate) fn unshare(&mut self) -> std::result::Result<(), CopyError> {
        if self.owner.shared() {
            let copy = self.copy()?;
            self.raw = copy.raw;
            self.owner = copy.owner;
            self.lazy = copy.lazy;
            self.bodies = copy.bodies;
            self.facts.take();
        }
        Ok(())
    }

    /// A copy of this template (`cuGraphClone`) with the same parts, node handles mapped into
    /// the copy (`cuGraphNodeFindInClone`), the same kept resources and the same id. Refused,
    /// before any driver call, for a graph the driver cannot copy (conditional nodes).
    pub(crate) fn copy(&self) -> std::result::Result<Graph, CopyError> {
        let parts = self.parts();
        if let Some(f) = self.lazy.failure.get() {
            return Err(CopyError::Driver(*f));
        }
        if let Some(reason) = self.copy_refusal() {
            return Err(CopyError::Refused(reason));
        }
        self.ctx.bind()?;
        let _guard = self.raw_guard();
        // SAFETY: self.raw is live; calls on it are serialised (guard or !Sync).
        let raw = unsafe { driver::graph_clone(self.raw) }?;
        // Own the copy at once, so an error below destroys it.
        let owner = SharedRaw::new(self.ctx.clone(), raw, self.label.clone());
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
            // A graph with bodies is never copied (copy_refusal above).
            bodies: Arc::new(Vec::new()),
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
            bodies: self.bodies.clone(),
            _not_sync: std::marker::PhantomData,
        }
    }

    /// Whether `other` is a share of this same template ([`Graph::share`], neither changed
    /// since): then either stands for the other without a new share.
    pub(crate) fn same_share(&self, other: &Graph) -> bool {
        self.raw == other.raw
            && self.id == other.id
            && Arc::ptr_eq(&self.owner, &other.owner)
            && Arc::ptr_eq(&self.lazy, &other.lazy)
            && Arc::ptr_eq(&self.keep, &other.keep)
            && Arc::ptr_eq(&self.label, &other.label)
            && Arc::ptr_eq(&self.bodies, &other.bodies)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the first conditional node is is looked for once, and looked for again after the
    /// parts change (a conditional node added by the builder).
    #[test]
    fn the_conditional_node_is_found_once_and_again_after_a_change() {
        let mut model = model::Graph::new("g");
        model.add_node(
            "k",
            model::NodeKind::Other {
                name: "kernel".into(),
            },
        );
        let mut lazy = Lazy {
            parts: OnceLock::from(Parts {
                model: Arc::new(model),
                ..Parts::default()
            }),
            pending: Mutex::new(None),
            failure: OnceLock::new(),
            conditional: OnceLock::new(),
        };
        let parts = lazy.made().cloned().unwrap_or_default();
        assert_eq!(lazy.conditional(&parts), None);
        let Some(changing) = lazy.parts_to_change() else {
            panic!("known parts can be changed");
        };
        let name = "conditional".to_string();
        Arc::make_mut(&mut changing.model).add_node("if", model::NodeKind::Other { name });
        let parts = lazy.made().cloned().unwrap_or_default();
        assert_eq!(lazy.conditional(&parts), Some(1));
        assert!(is_conditional(&parts.model.nodes[1]));
        assert!(!is_conditional(&parts.model.nodes[0]));
    }
}
