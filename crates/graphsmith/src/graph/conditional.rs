//! Conditional nodes in the builder: condition handles, IF (with ELSE), WHILE and SWITCH nodes,
//! and their bodies, each a [`Graph`] the driver created and the node owns, built node by node
//! or captured ([`crate::Stream::capture_into`]). The model's conditional node holds the
//! bodies' models, kept in step whenever a [`Body`] (`conditional_body.rs`) is let go of.
//!
//! Every call that changes the driver graph goes through [`Graph::editable`] (`shared.rs`): a
//! graph that an executable shares is copied first, except that a graph with conditional nodes
//! cannot be copied (`cuGraphClone` refuses it), so changing one while it is shared is an error
//! naming the node ([`NO_COPY`]), as is a second executable of it at once.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::{ConditionalKind, NodeId, NodeKind};

use crate::driver::{self, CondType, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Body, Graph, NodeRef};
use crate::module::{Args, KernelArg};

/// A condition handle (`CUgraphConditionalHandle`): the value a conditional node reads, set
/// by a kernel of the graph (`cudaGraphSetConditional(handle, value)` in device code, as the
/// built-in kernels `gs_set_condition`, `gs_while_countdown` and `gs_switch_select` do) or
/// reset to a default at every launch. Pass it to a kernel as a plain value:
/// `args![handle, &flag]`; the kernel takes it as an `unsigned long long`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConditionHandle {
    raw: u64,
    default: Option<u32>,
}

impl ConditionHandle {
    pub(crate) fn from_raw(raw: u64, default: Option<u32>) -> ConditionHandle {
        ConditionHandle { raw, default }
    }
    /// The driver's handle value, as kernels take it.
    pub fn raw(&self) -> u64 {
        self.raw
    }
    /// The value every launch starts with, when one was given.
    pub fn default_value(&self) -> Option<u32> {
        self.default
    }
}

impl<'a> KernelArg<'a> for ConditionHandle {
    fn push_to(self, args: &mut Args<'a>) {
        args.push_bytes(&self.raw.to_le_bytes());
    }
}

/// The body graphs of one conditional node of a graph.
pub(crate) struct Bodies {
    /// The conditional node.
    pub node: NodeId,
    /// Its driver node (a graph with bodies is never copied, so this stays its handle).
    pub handle: sys::CUgraphNode,
    pub conditional: ConditionalKind,
    /// The bodies, in the driver's order (IF: then, else; SWITCH: case 0, 1, ...).
    pub graphs: Vec<Graph>,
}

// SAFETY: `Bodies` is shared (in an `Arc`) between a graph and the templates of executables
// made from it, possibly on other threads. It is changed only through `Arc::get_mut` (never
// while shared); while shared, its graphs are only read: labels and ids (plain data), models
// (`Lazy`, a OnceLock, already made for a body), and the driver body graphs under the lock of
// the driver graph they live in (`SharedRaw::borrowed` shares it). A body's `facts` (a
// OnceCell) are filled only by a whole-graph update given the body itself, on the thread that
// holds its graph mutably; the node handle is a plain pointer used as a key.
unsafe impl Send for Bodies {}
// SAFETY: as above.
unsafe impl Sync for Bodies {}

/// One body of a conditional node: which graph, node and body. Open it with [`Graph::body`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BodyRef {
    graph: u64,
    node: NodeId,
    index: usize,
    label: Arc<str>,
}

impl BodyRef {
    /// The conditional node's id in its graph's model.
    pub fn node(&self) -> NodeId {
        self.node
    }
    /// Which body of the node: IF 0 (then) or 1 (else); WHILE 0; SWITCH the case.
    pub fn index(&self) -> usize {
        self.index
    }
    /// The body graph's label (`<node>/then`, `<node>/else`, `<node>/body`, `<node>/case<n>`).
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl Graph {
    /// Creates a condition handle for a conditional node of this graph
    /// (`cuGraphConditionalHandleCreate`). With `default`, every launch starts with the
    /// condition at that value; without, it keeps the value a kernel set last (0 at first).
    /// Each handle must be used by exactly one conditional node before the graph is
    /// instantiated (the driver refuses unused handles).
    #[track_caller]
    pub fn condition_handle(
        &mut self,
        label: &str,
        default: Option<u32>,
    ) -> Result<ConditionHandle> {
        let at = SourceLine::caller();
        let graph = self.editable("Graph::condition_handle", at)?;
        let fail = |f: Failure| {
            f.on(
                ObjectRef::new(ObjectKind::Graph, format!("{}/{label}", self.label)),
                "Graph::condition_handle",
                at,
            )
        };
        self.ctx.bind().map_err(fail)?;
        // SAFETY: graph is live, this graph's own (editable) and used only through &mut self;
        // the context is current.
        let raw = unsafe { driver::condition_handle_create(graph, self.ctx.raw(), default) }
            .map_err(fail)?;
        Ok(ConditionHandle::from_raw(raw, default))
    }

    /// Adds an IF node: its body runs when the condition is non-zero.
    #[track_caller]
    pub fn if_(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, BodyRef)> {
        let at = SourceLine::caller();
        let (node, mut bodies) = self.conditional(label, handle, CondType::If, 1, deps, at)?;
        Ok((node, bodies.remove(0)))
    }

    /// Adds an IF node with an ELSE: the first body runs when the condition is non-zero, the
    /// second when it is zero (CUDA 12.8+).
    #[track_caller]
    pub fn if_else(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, [BodyRef; 2])> {
        let at = SourceLine::caller();
        let (node, mut bodies) = self.conditional(label, handle, CondType::If, 2, deps, at)?;
        let else_body = bodies.remove(1);
        Ok((node, [bodies.remove(0), else_body]))
    }

    /// Adds a WHILE node: its body runs again and again while the condition is non-zero,
    /// checked before each run (set the handle's default, or set it before the node, to enter;
    /// a kernel in the body sets it to leave).
    #[track_caller]
    pub fn while_(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, BodyRef)> {
        let at = SourceLine::caller();
        let (node, mut bodies) = self.conditional(label, handle, CondType::While, 1, deps, at)?;
        Ok((node, bodies.remove(0)))
    }

    /// Adds a SWITCH node with `cases` bodies: body `n` runs when the condition is `n`; none
    /// runs when it is `cases` or more (CUDA 12.8+).
    #[track_caller]
    pub fn switch(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        cases: u32,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, Vec<BodyRef>)> {
        let at = SourceLine::caller();
        if cases == 0 {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: "a switch node needs at least one case".into(),
                },
                ObjectRef::new(ObjectKind::Node, label),
                "Graph::switch",
                at,
            ));
        }
        self.conditional(label, handle, CondType::Switch, cases, deps, at)
    }

    /// Opens body `body` of one of this graph's conditional nodes for building. Opening it
    /// changes nothing; each node added to it does, so while an executable shares this graph
    /// (made by [`Graph::instantiate`]) adding one is refused ([`NO_COPY`]).
    #[track_caller]
    pub fn body(&mut self, body: &BodyRef) -> Result<Body<'_>> {
        let at = SourceLine::caller();
        let slot = self
            .bodies
            .iter()
            .position(|b| b.node == body.node)
            .filter(|&s| body.graph == self.id && body.index < self.bodies[s].graphs.len());
        match slot {
            Some(slot) => Ok(Body::new(self, slot, body.index)),
            None => Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: foreign_body(body),
                },
                self.object(),
                "Graph::body",
                at,
            )),
        }
    }

    /// Adds a conditional node with `size` bodies and records it in the model.
    fn conditional(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        ty: CondType,
        size: u32,
        deps: &[&NodeRef],
        at: SourceLine,
    ) -> Result<(NodeRef, Vec<BodyRef>)> {
        let (conditional, op, names): (_, _, Vec<String>) = match (ty, size) {
            (CondType::If, 1) => (ConditionalKind::If, "Graph::if_", vec!["then".into()]),
            (CondType::If, _) => (
                ConditionalKind::If,
                "Graph::if_else",
                vec!["then".into(), "else".into()],
            ),
            (CondType::While, _) => (ConditionalKind::While, "Graph::while_", vec!["body".into()]),
            (CondType::Switch, n) => (
                ConditionalKind::Switch,
                "Graph::switch",
                (0..n).map(|i| format!("case{i}")).collect(),
            ),
        };
        let body_labels: Vec<String> = names.iter().map(|n| format!("{label}/{n}")).collect();
        let kind = NodeKind::Conditional {
            conditional,
            bodies: size,
            body_graphs: body_labels.iter().map(model::Graph::new).collect(),
        };
        let (graph, ctx) = (self.editable(op, at)?, self.ctx.raw());
        // Shares take `bodies` with the driver graph, so an editable graph holds them alone;
        // checked before the driver call all the same, so nothing is left half made.
        let Some(_) = Arc::get_mut(&mut self.bodies) else {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!("conditional node '{label}': {NO_COPY}"),
                },
                self.object(),
                op,
                at,
            ));
        };
        let mut raw_bodies = Vec::new();
        let node = self.add_node(label, op, at, kind, Vec::new(), Vec::new(), deps, |d| {
            // SAFETY: graph and ctx are live (the context was bound by add_node); the handle
            // was created by the driver; d are nodes of this graph.
            let (node, bodies) =
                unsafe { driver::add_conditional_node(graph, d, handle.raw, ty, size, ctx) }?;
            raw_bodies = bodies;
            Ok(node)
        })?;
        let graphs = raw_bodies
            .into_iter()
            .zip(&body_labels)
            .map(|(raw, l)| Graph::body_of(self.ctx.clone(), raw, l, &self.owner))
            .collect();
        let handle = self.handles()[node.id.index()];
        match Arc::get_mut(&mut self.bodies) {
            Some(bodies) => bodies.push(Bodies {
                node: node.id,
                handle,
                conditional,
                graphs,
            }),
            // Nothing shared the graph since the check above (no call in between shares it).
            None => {
                return Err(Error::new(
                    ErrorKind::InvalidInput {
                        reason: format!("conditional node '{label}': {NO_COPY}"),
                    },
                    self.object(),
                    op,
                    at,
                ))
            }
        }
        let refs = body_labels
            .into_iter()
            .enumerate()
            .map(|(index, l)| BodyRef {
                graph: self.id,
                node: node.id,
                index,
                label: l.into(),
            })
            .collect();
        Ok((node, refs))
    }

    /// Writes body `index` of slot `slot` into the model's conditional node and keeps what the
    /// body's nodes use alive with this graph.
    pub(super) fn sync_body(&mut self, slot: usize, index: usize) {
        let (node, body_model, body_keep) = {
            let b = &self.bodies[slot];
            let g = &b.graphs[index];
            (b.node, g.model().clone(), g.keep.clone())
        };
        self.model_mut()
            .set_conditional_body(node, index, body_model);
        let keep = Arc::make_mut(&mut self.keep);
        for k in body_keep.iter() {
            if !keep.iter().any(|have| Arc::ptr_eq(have, k)) {
                keep.push(k.clone());
            }
        }
    }

    /// The read-back of this graph with the bodies of the conditional nodes it built read back
    /// too, from the body graphs the driver returned when it created each node (the CUDA 13.0
    /// driver API has no call that reads a conditional node's parameters, so the flavour is
    /// the one the node was built with).
    pub(crate) fn with_bodies(
        &self,
        read: super::ReadGraph,
        at: SourceLine,
    ) -> Result<model::Graph> {
        let super::ReadGraph {
            mut model, handles, ..
        } = read;
        for b in self.bodies.iter() {
            let Some(pos) = handles.iter().position(|&h| h == b.handle) else {
                continue;
            };
            let mut bodies = Vec::with_capacity(b.graphs.len());
            for g in &b.graphs {
                // The caller holds the guard of the driver graph the bodies live in.
                bodies.push(g.read_back_held(at)?);
            }
            let node = &mut model.nodes[pos];
            node.kind = NodeKind::Conditional {
                conditional: b.conditional,
                bodies: bodies.len() as u32,
                body_graphs: Vec::new(),
            };
            let id = node.id;
            for (i, body) in bodies.into_iter().enumerate() {
                model.set_conditional_body(id, i, body);
            }
        }
        Ok(model)
    }

    /// Puts the bodies' models (with their labels) into the conditional nodes of `model`, a
    /// read-back of this graph whose node `i` is driver node `handles[i]`: the driver cannot
    /// read a conditional node's parameters, so the flavour is the one the node was built with.
    pub(crate) fn put_bodies(&self, model: &mut model::Graph, handles: &[sys::CUgraphNode]) {
        for b in self.bodies.iter() {
            let Some(pos) = handles.iter().position(|&h| h == b.handle) else {
                continue;
            };
            let Some(node) = model.nodes.get_mut(pos) else {
                continue;
            };
            node.kind = NodeKind::Conditional {
                conditional: b.conditional,
                bodies: b.graphs.len() as u32,
                body_graphs: Vec::new(),
            };
            let id = node.id;
            for (i, g) in b.graphs.iter().enumerate() {
                model.set_conditional_body(id, i, g.model().clone());
            }
        }
    }

    /// The label of a conditional node of this graph, when it has one: one it built (no
    /// read-back needed), or, when `read` is set, one in its model (read back if need be).
    pub(crate) fn conditional_node(&self, read: bool) -> Option<String> {
        if let Some(b) = self.bodies.first() {
            let label = self
                .lazy
                .made()
                .and_then(|p| p.model.nodes.get(b.node.index()))
                .map(|n| n.label.clone());
            return Some(label.unwrap_or_else(|| format!("#{}", b.node.index())));
        }
        let parts = if read {
            self.parts()
        } else {
            self.lazy.made()?
        };
        // Looked for once per parts, not on every instantiation of a shared graph.
        let index = self.lazy.conditional(parts)?;
        parts.model.nodes.get(index).map(|n| n.label.clone())
    }

    /// Why this graph cannot be copied (`cuGraphClone`), naming the node; `None` when it can.
    pub(crate) fn copy_refusal(&self) -> Option<String> {
        if !self.owner.owned {
            return Some(format!(
                "graph '{}' is a conditional node's body, which its node owns and which cannot \
                 be copied; it cannot be changed while an executable shares it",
                self.label
            ));
        }
        let node = self.conditional_node(true)?;
        Some(format!("conditional node '{node}': {NO_COPY}"))
    }

    /// Refuses a second executable of a graph with conditional nodes while one shares it (the
    /// driver allows such a graph one instantiation at a time). `holders` is how many shares
    /// of the driver graph the caller itself holds besides `self`. Reads nothing back.
    pub(crate) fn refuse_second_exec(
        &self,
        holders: usize,
        op: &'static str,
        at: SourceLine,
    ) -> Result<()> {
        if Arc::strong_count(&self.owner) <= 1 + holders {
            return Ok(());
        }
        match self.conditional_node(false) {
            None => Ok(()),
            Some(node) => Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!("conditional node '{node}': {NO_COPY}"),
                },
                self.object(),
                op,
                at,
            )),
        }
    }
}

/// Why a graph with conditional nodes is not copied.
pub(crate) const NO_COPY: &str = "a graph with conditional nodes cannot be copied (cuGraphClone \
    refuses it) and has one executable at a time: while an executable shares it \
    (Graph::instantiate, Exec::update) it can be neither changed nor instantiated again; drop \
    that executable first, or hand the graph over with Graph::into_exec or Exec::update_owned";

/// Why a body cannot be opened on this graph.
pub(crate) fn foreign_body(body: &BodyRef) -> String {
    format!(
        "body '{}' belongs to a conditional node of another graph (open it on the graph whose \
         builder returned it)",
        body.label
    )
}

impl BodyRef {
    #[cfg(test)]
    pub(crate) fn for_test(label: &str) -> BodyRef {
        BodyRef {
            graph: 0,
            node: NodeId(0),
            index: 0,
            label: label.into(),
        }
    }
}
