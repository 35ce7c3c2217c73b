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
use crate::context::{CaptureRecord, Keep};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
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
    pub(crate) raw: sys::CUgraph,
    pub(crate) ctx: Context,
    pub(crate) id: u64,
    pub(crate) label: Arc<str>,
    /// Shared with the executables updated from this graph; copied on write.
    pub(crate) model: Arc<model::Graph>,
    /// The driver node of each model node, by index.
    pub(crate) handles: Vec<sys::CUgraphNode>,
    /// The function and parameter layout of each kernel node, by index (`None` for other
    /// nodes, and for kernels whose arguments could not all be read back).
    pub(crate) kernels: Arc<Vec<Option<KernelFn>>>,
    /// Everything the graph's nodes reference, kept alive as long as the graph.
    pub(crate) keep: Arc<Vec<Keep>>,
    /// What a whole-graph update needs to know about the graph, once asked for; reset wherever
    /// the model or the kernels change (`model_mut`, `kernels_mut`, and every assignment to
    /// `model` or `kernels`).
    pub(crate) facts: OnceCell<UpdateFacts>,
    /// The body graphs of this graph's conditional nodes (`graph/conditional.rs`).
    pub(crate) bodies: Vec<crate::graph::Bodies>,
    /// Whether this `Graph` owns `raw`; a conditional node's body is owned by its node.
    pub(crate) owns_raw: bool,
    _not_sync: PhantomData<Cell<()>>,
}

/// What a whole-graph update needs to know about a graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpdateFacts {
    /// [`graphsmith_analysis::update_check::shape_key`] of the model.
    pub shape: Option<u128>,
    /// Whether an executable's template can follow the graph by sharing its model: every node
    /// can be written back from the model (kernels with known arguments, memsets, empty nodes).
    pub follows_lazily: bool,
}

impl UpdateFacts {
    fn of(graph: &Graph) -> UpdateFacts {
        let follows_lazily = graph
            .model
            .nodes
            .iter()
            .zip(graph.kernels.iter())
            .all(|(n, k)| {
                matches!(
                    (&n.kind, k),
                    (model::NodeKind::Kernel(_), Some(_))
                        | (model::NodeKind::Memset(_), _)
                        | (model::NodeKind::Empty, _)
                )
            });
        UpdateFacts {
            shape: graphsmith_analysis::update_check::shape_key(&graph.model),
            follows_lazily,
        }
    }
}

// SAFETY: a CUgraph may be used from any thread as long as calls are serialised; `Graph` is
// !Sync, so all calls on it come from the one thread that holds it at a time.
unsafe impl Send for Graph {}

impl Drop for Graph {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() || !self.owns_raw {
            return;
        }
        // SAFETY: raw is owned by this Graph and destroyed once. Executables made from it are
        // independent of the template (cuGraphInstantiate copies it).
        self.ctx.destroy(
            || ObjectRef::new(ObjectKind::Graph, &*self.label),
            crate::context::Destroy::Graph(raw),
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
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ))
    }
}

impl Graph {
    pub(crate) fn wrap(
        ctx: Context,
        raw: sys::CUgraph,
        label: &str,
        model: model::Graph,
        handles: Vec<sys::CUgraphNode>,
        kernels: Vec<Option<KernelFn>>,
        keep: Vec<Keep>,
    ) -> Self {
        Self {
            raw,
            ctx,
            id: NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed),
            label: label.into(),
            model: Arc::new(model),
            handles,
            kernels: Arc::new(kernels),
            keep: Arc::new(keep),
            facts: OnceCell::new(),
            bodies: Vec::new(),
            owns_raw: true,
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
        let read = unsafe { crate::graph::read_graph(raw, label) };
        let crate::graph::ReadGraph {
            mut model,
            handles,
            kernels,
        } = match read {
            Ok(read) => read,
            Err(f) => {
                // SAFETY: we own raw and nothing else refers to it.
                let _ = unsafe { driver::graph_destroy(raw) };
                return Err(f.on(
                    ObjectRef::new(ObjectKind::Capture, label),
                    "Stream::end_capture",
                    at,
                ));
            }
        };
        let mut metas = record.nodes;
        for (node, handle) in model.nodes.iter_mut().zip(&handles) {
            if let Some(meta) = metas.remove(&(*handle as usize)) {
                node.label = meta.label;
                node.provenance = Some(meta.provenance);
                node.accesses = meta.accesses;
            }
        }
        Ok(Graph::wrap(
            ctx,
            raw,
            label,
            model,
            handles,
            kernels,
            record.keep,
        ))
    }

    /// The graph's label.
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The model: nodes with labels, parameters, provenance and accesses; edges.
    pub fn model(&self) -> &model::Graph {
        &self.model
    }
    /// The model, to change it (copied first when an executable shares it).
    pub(crate) fn model_mut(&mut self) -> &mut model::Graph {
        self.facts.take();
        Arc::make_mut(&mut self.model)
    }

    /// The kernels of the nodes, to change them (copied first when shared).
    pub(crate) fn kernels_mut(&mut self) -> &mut Vec<Option<KernelFn>> {
        self.facts.take();
        Arc::make_mut(&mut self.kernels)
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

    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUgraph {
        self.raw
    }
    /// The driver handle of `node`, for interop (graphsmith keeps ownership); `None` for a node
    /// of another graph.
    pub fn raw_node(&self, node: &NodeRef) -> Option<sys::CUgraphNode> {
        if node.graph != self.id {
            return None;
        }
        self.handles.get(node.id.index()).copied()
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
        let node = self.model.node(id)?;
        Some(NodeRef {
            graph: self.id,
            id,
            graph_label: self.label.clone(),
            label: node.label.as_str().into(),
        })
    }

    /// Handles to every node, in model order.
    pub fn node_refs(&self) -> Vec<NodeRef> {
        self.model
            .nodes
            .iter()
            .filter_map(|n| self.node_ref(n.id))
            .collect()
    }

    /// A handle to the first node labelled `label`.
    pub fn find(&self, label: &str) -> Option<NodeRef> {
        self.node_ref(self.model.find(label)?.id)
    }

    /// Reads the graph back from the driver into a fresh model (node kinds, kernel names,
    /// geometry and argument bytes, copy and set operands with the memory they touch, edges),
    /// through the same conversion `graphsmith trace --hazards` uses. Labels are not the
    /// driver's to know: kernel nodes are labelled with their kernel's name, others
    /// `<kind>#<index>`.
    #[track_caller]
    ///
    /// The bodies of conditional nodes built with [`Graph::if_else`] and its siblings are read
    /// back too, from the body graphs the driver returned when it made each node.
    pub fn read_back(&self) -> Result<model::Graph> {
        self.read_back_at(SourceLine::caller())
    }

    pub(crate) fn read_back_at(&self, at: SourceLine) -> Result<model::Graph> {
        let fail = |f: Failure| f.on(self.object(), "Graph::read_back", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: self.raw is live: owned by self, or a body owned by its node in a graph that
        // outlives self.
        let read = unsafe { crate::graph::read_graph(self.raw, &self.label) }.map_err(fail)?;
        self.with_bodies(read, at)
    }

    /// A copy of this template (`cuGraphClone`) with the same model, node handles mapped into
    /// the copy (`cuGraphNodeFindInClone`) and the same kept resources.
    pub(crate) fn clone_template(&self, at: SourceLine) -> Result<Graph> {
        let fail = |f: Failure| f.on(self.object(), "Graph::instantiate", at);
        self.refuse_clone_with_conditionals(at)?;
        self.ctx.bind().map_err(fail)?;
        // SAFETY: self.raw is live; Graph is !Sync, so nothing else uses it during the call.
        let raw = unsafe { driver::graph_clone(self.raw) }.map_err(fail)?;
        // Own the copy at once, so an error below destroys it.
        let mut copy = Graph::wrap(
            self.ctx.clone(),
            raw,
            &self.label,
            model::Graph::default(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        copy.id = self.id;
        copy.model = self.model.clone();
        copy.facts = self.facts.clone();
        copy.kernels = self.kernels.clone();
        copy.keep = self.keep.clone();
        copy.handles.reserve(self.handles.len());
        for &original in &self.handles {
            // SAFETY: original is a node of self.raw, and raw was cloned from it.
            let node = unsafe { driver::node_in_clone(original, raw) }.map_err(fail)?;
            copy.handles.push(node);
        }
        Ok(copy)
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
        // SAFETY: self.raw is live.
        unsafe { driver::debug_dot_print(self.raw, &c_path, verbose) }.map_err(fail)
    }
}
