//! Graph templates: built node by node (explicit dependencies) or captured from streams, with a
//! model mirror that carries labels, lines, ranges and accesses.

use std::cell::{Cell, OnceCell};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::NodeId;

use crate::context::Context;
use crate::context::{Entry, Keep};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::shared::{Lazy, Parts, SharedRaw};
pub(crate) use crate::module::KernelFn;

static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A node of a [`Graph`], returned by the builder and used as a dependency of later nodes.
/// It remembers its graph, so passing it to another graph is a typed error, not a crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRef {
    pub(crate) graph: u64,
    pub(crate) id: NodeId,
    pub(crate) graph_label: Arc<str>,
    pub(crate) label: Arc<str>,
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
///
/// ```compile_fail,E0277
/// fn shared_between_threads<T: Sync>() {}
/// shared_between_threads::<graphsmith::Graph>(); // error: `Graph` is not `Sync`
/// ```
///
/// ```
/// fn moved_to_another_thread<T: Send>() {}
/// moved_to_another_thread::<graphsmith::Graph>();
/// ```
pub struct Graph {
    /// The driver graph (`owner.raw`, copied here for speed).
    pub(crate) raw: sys::CUgraph,
    /// Owns `raw`; shared with the executables' templates made from this graph (see
    /// `graph/shared.rs`).
    pub(crate) owner: Arc<SharedRaw>,
    /// The model, node handles and kernels, made when first asked for; shared like `owner`
    /// and copied on write.
    pub(crate) lazy: Arc<Lazy>,
    pub(crate) ctx: Context,
    pub(crate) id: u64,
    pub(crate) label: Arc<str>,
    /// Everything the graph's nodes reference, kept alive as long as the graph.
    pub(crate) keep: Arc<Vec<Keep>>,
    /// What a whole-graph update needs to know about the graph, once asked for; reset wherever
    /// the parts change (`parts_mut` and its callers).
    pub(crate) facts: OnceCell<UpdateFacts>,
    /// The body graphs of this graph's conditional nodes (`graph/conditional.rs`), shared like
    /// `owner` (their driver graphs live inside it; a graph with bodies is never copied).
    pub(crate) bodies: Arc<Vec<crate::graph::Bodies>>,
    pub(crate) _not_sync: PhantomData<Cell<()>>,
}

/// What a whole-graph update needs to know about a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpdateFacts {
    /// [`graphsmith_analysis::update_check::shape_key`] of the model.
    pub shape: Option<u128>,
}

impl UpdateFacts {
    fn of(graph: &Graph) -> UpdateFacts {
        UpdateFacts {
            shape: graphsmith_analysis::update_check::shape_key(graph.model()),
        }
    }
}

// SAFETY: a CUgraph may be used from any thread as long as calls are serialised; `Graph` is
// !Sync, so all calls on it come from the one thread that holds it at a time. What it shares
// with other graphs (the driver graph, `lazy`, the conditional bodies in `bodies`) is changed
// only while not shared (`Arc::get_mut`, copy on write) and read under the driver graph's lock
// while shared (a body shares the lock of the graph it lives in); a body's `facts` are never
// filled (only a whole-graph update fills them, on the graphs it compares).
unsafe impl Send for Graph {}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never reads a captured graph back just to print it.
        match self.lazy.made() {
            Some(parts) => write!(
                f,
                "Graph '{}' ({} nodes, {} edges)",
                self.label,
                parts.model.nodes.len(),
                parts.model.edges.len()
            ),
            None => write!(f, "Graph '{}' (captured, not read back yet)", self.label),
        }
    }
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
        // SAFETY: the context is current (bind above).
        let raw = unsafe { driver::graph_create() }.map_err(fail)?;
        Ok(Graph::wrap(
            self.clone(),
            raw,
            label,
            model::Graph::new(label),
        ))
    }
}

impl Graph {
    /// A graph of `raw` (which it takes ownership of) whose model is known.
    pub(crate) fn wrap(ctx: Context, raw: sys::CUgraph, label: &str, model: model::Graph) -> Self {
        let owner = SharedRaw::new(ctx.clone(), raw, label);
        Graph::known(ctx, raw, owner, label, model)
    }

    /// A conditional node's body graph `raw`, which the node owns (never destroyed here).
    /// `parent` is the owner of the graph whose node it is.
    pub(crate) fn body_of(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        parent: &Arc<SharedRaw>,
    ) -> Self {
        let owner = SharedRaw::borrowed(ctx.clone(), raw, label, parent);
        Graph::known(ctx, raw, owner, label, model::Graph::new(label))
    }

    fn known(
        ctx: Context,
        raw: sys::CUgraph,
        owner: Arc<SharedRaw>,
        label: &str,
        model: model::Graph,
    ) -> Self {
        let parts = Parts {
            model: Arc::new(model),
            ..Parts::default()
        };
        Self {
            raw,
            owner,
            lazy: Lazy::known(parts),
            ctx,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            label: label.into(),
            keep: Arc::new(Vec::new()),
            facts: OnceCell::new(),
            bodies: Arc::new(Vec::new()),
            _not_sync: PhantomData,
        }
    }

    /// Takes ownership of a captured graph. Nothing is read back now: the model is read from
    /// the driver when first asked for ([`Graph::model`], hazards, updates), and its nodes are
    /// then labelled with what the capture journal recorded (`graph/captured_nodes.rs`).
    ///
    /// # Safety
    /// `raw` must be a live graph of `ctx` that nobody else owns.
    pub(crate) unsafe fn from_capture(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        journal: Vec<Entry>,
        keep: Vec<Keep>,
    ) -> Graph {
        // One label for the graph and its driver graph's owner.
        let label: Arc<str> = label.into();
        Graph {
            raw,
            owner: SharedRaw::new(ctx.clone(), raw, label.clone()),
            lazy: Lazy::pending(journal),
            ctx,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            label,
            keep: Arc::new(keep),
            facts: OnceCell::new(),
            bodies: Arc::new(Vec::new()),
            _not_sync: PhantomData,
        }
    }

    /// The graph's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The model: nodes with labels, parameters, provenance and accesses; edges. A captured
    /// graph is read back from the driver the first time it is asked for; should that fail,
    /// the model is empty and [`Graph::try_model`] returns the error.
    pub fn model(&self) -> &model::Graph {
        &self.parts().model
    }
    /// [`Graph::model`], or the driver's failure to read the graph back.
    #[track_caller]
    pub fn try_model(&self) -> Result<&model::Graph> {
        let at = SourceLine::caller();
        Ok(&self.try_parts("Graph::model", at)?.model)
    }
    /// The driver node of each model node, by index.
    pub(crate) fn handles(&self) -> &[sys::CUgraphNode] {
        &self.parts().handles
    }
    /// The function and parameter layout of each kernel node, by index.
    pub(crate) fn kernels(&self) -> &Arc<Vec<Option<KernelFn>>> {
        &self.parts().kernels
    }
    /// The model, to change it (copied first when shared).
    pub(crate) fn model_mut(&mut self) -> &mut model::Graph {
        Arc::make_mut(&mut self.parts_mut().model)
    }
    /// The node handles, to change them (copied first when shared).
    pub(crate) fn handles_mut(&mut self) -> &mut Vec<sys::CUgraphNode> {
        &mut self.parts_mut().handles
    }
    /// The kernels of the nodes, to change them (copied first when shared).
    pub(crate) fn kernels_mut(&mut self) -> &mut Vec<Option<KernelFn>> {
        Arc::make_mut(&mut self.parts_mut().kernels)
    }

    /// What a whole-graph update needs to know about the graph, computed once (walking a
    /// large model after the driver's work has evicted it from the caches costs tens of µs).
    pub(crate) fn update_facts(&self) -> UpdateFacts {
        let facts = *self.facts.get_or_init(|| UpdateFacts::of(self));
        debug_assert_eq!(
            facts,
            UpdateFacts::of(self),
            "stale update facts of graph '{}'",
            self.label
        );
        facts
    }

    /// The raw handle, for interop (graphsmith keeps ownership). Read it only: an executable
    /// instantiated from this graph may share it as its template (graphsmith's own changes copy
    /// it first; changes made through this handle would not).
    pub fn raw(&self) -> sys::CUgraph {
        self.raw
    }
    /// The driver handle of `node`, for interop (graphsmith keeps ownership); `None` for a node
    /// of another graph.
    pub fn raw_node(&self, node: &NodeRef) -> Option<sys::CUgraphNode> {
        if node.graph != self.id {
            return None;
        }
        self.handles().get(node.id.index()).copied()
    }
    /// The context of this graph.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Graph, &*self.label)
    }

    /// A handle to node `id`, as the builder returns them (e.g. to update a captured node).
    pub fn node_ref(&self, id: NodeId) -> Option<NodeRef> {
        let node = self.model().node(id)?;
        Some(NodeRef {
            graph: self.id,
            id,
            graph_label: self.label.clone(),
            label: node.label.as_str().into(),
        })
    }

    /// Handles to every node, in model order.
    pub fn node_refs(&self) -> Vec<NodeRef> {
        self.model()
            .nodes
            .iter()
            .filter_map(|n| self.node_ref(n.id))
            .collect()
    }

    /// A handle to the first node labelled `label`.
    pub fn find(&self, label: &str) -> Option<NodeRef> {
        self.node_ref(self.model().find(label)?.id)
    }

    /// Reads the graph back from the driver into a fresh model (node kinds, kernel names,
    /// geometry and argument bytes, copy and set operands with the memory they touch, edges),
    /// through the same conversion `graphsmith trace --hazards` uses. Labels are not the
    /// driver's to know: kernel nodes are labelled with their kernel's name, others
    /// `<kind>#<index>`.
    ///
    /// The bodies of conditional nodes built with [`Graph::if_else`] and its siblings are read
    /// back too, from the body graphs the driver returned when it made each node.
    #[track_caller]
    pub fn read_back(&self) -> Result<model::Graph> {
        self.read_back_at(SourceLine::caller())
    }

    pub(crate) fn read_back_at(&self, at: SourceLine) -> Result<model::Graph> {
        let fail = |f: Failure| f.on(self.object(), "Graph::read_back", at);
        self.ctx.bind().map_err(fail)?;
        // Held across the bodies too: they live inside this driver graph and share its lock.
        let _guard = self.raw_guard();
        self.read_back_held(at)
    }

    /// [`Graph::read_back_at`] with the driver graph's guard held by the caller (or not needed).
    pub(crate) fn read_back_held(&self, at: SourceLine) -> Result<model::Graph> {
        let fail = |f: Failure| f.on(self.object(), "Graph::read_back", at);
        // SAFETY: self.raw is live (owned through self.owner, or a body owned by its node in
        // the graph that holds this one); calls on it are serialised (the caller holds the
        // guard while shared).
        let read = unsafe { crate::graph::read_graph(self.raw, &self.label) }.map_err(fail)?;
        self.with_bodies(read, at)
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
        let _guard = self.raw_guard();
        // SAFETY: self.raw is live; calls on it are serialised (the guard while shared).
        unsafe { driver::debug_dot_print(self.raw, &c_path, verbose) }.map_err(fail)
    }
}
