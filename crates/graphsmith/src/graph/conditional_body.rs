//! A conditional node's body opened for building: the builder calls a body may hold, each
//! adding to the body's graph, and the body's model written into its conditional node when the
//! [`Body`] is let go of.

use std::ops::Deref;

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result, SourceLine};
use crate::graph::{BodyRef, ConditionHandle, Graph, NodeRef};
use crate::memory::{DeviceBuffer, Element};
use crate::module::{Args, Kernel, LaunchConfig};

/// A body of a conditional node, open for building: `kernel`, `memcpy`, `memset`, `empty`,
/// `child` and nested conditionals add nodes to it, and [`crate::Stream::capture_into`]
/// captures into it; it dereferences to the body's [`Graph`] for reading (`model`,
/// `read_back`, `find`). When it is let go of, its model is written into the conditional node
/// of the graph it belongs to (with the memory its nodes touch, so hazards between the body and
/// the rest of the graph are found) and what its nodes use is kept alive with that graph.
///
/// A body holds only what the driver allows in one: kernels, memsets, memcpys, empty nodes,
/// child graphs and conditional nodes.
///
/// A body lives inside its graph's driver graph, so adding to it changes that graph: while an
/// executable shares the graph ([`Graph::instantiate`]), which cannot be copied because of its
/// conditional nodes, every call that would add to the body is refused with an error saying so.
pub struct Body<'g> {
    parent: &'g mut Graph,
    slot: usize,
    index: usize,
    /// Whether anything was added (the model is written back only then).
    changed: bool,
}

impl Deref for Body<'_> {
    type Target = Graph;
    fn deref(&self) -> &Graph {
        &self.parent.bodies[self.slot].graphs[self.index]
    }
}

impl Drop for Body<'_> {
    fn drop(&mut self) {
        if self.changed {
            self.parent.sync_body(self.slot, self.index);
        }
    }
}

impl<'g> Body<'g> {
    pub(super) fn new(parent: &'g mut Graph, slot: usize, index: usize) -> Body<'g> {
        Body {
            parent,
            slot,
            index,
            changed: false,
        }
    }

    /// The body's graph, to add to (never handed out: the node owns it). The graph it belongs
    /// to must be its own first ([`Graph::editable`]): it cannot be copied, so this fails
    /// while an executable shares it.
    pub(crate) fn graph_mut(&mut self, op: &'static str, at: SourceLine) -> Result<&mut Graph> {
        self.parent.editable(op, at)?;
        let object = self.parent.object();
        let label = self.label.clone();
        let Some(bodies) = Arc::get_mut(&mut self.parent.bodies) else {
            return Err(Error::new(
                ErrorKind::InvalidInput {
                    reason: format!("body '{label}': {}", crate::graph::conditional::NO_COPY),
                },
                object,
                op,
                at,
            ));
        };
        self.changed = true;
        Ok(&mut bodies[self.slot].graphs[self.index])
    }

    /// [`Graph::kernel`] in the body.
    #[track_caller]
    pub fn kernel(
        &mut self,
        label: &str,
        kernel: &Kernel,
        cfg: LaunchConfig,
        args: Args<'_>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        self.graph_mut("Body::kernel", SourceLine::caller())?
            .kernel(label, kernel, cfg, args, deps)
    }

    /// [`Graph::memcpy`] in the body.
    #[track_caller]
    pub fn memcpy<T: Element>(
        &mut self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        src: &DeviceBuffer<T>,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        self.graph_mut("Body::memcpy", SourceLine::caller())?
            .memcpy(label, dst, src, deps)
    }

    /// [`Graph::memset`] in the body.
    #[track_caller]
    pub fn memset<T: Element>(
        &mut self,
        label: &str,
        dst: &mut DeviceBuffer<T>,
        value: T,
        deps: &[&NodeRef],
    ) -> Result<NodeRef> {
        self.graph_mut("Body::memset", SourceLine::caller())?
            .memset(label, dst, value, deps)
    }

    /// [`Graph::empty`] in the body.
    #[track_caller]
    pub fn empty(&mut self, label: &str, deps: &[&NodeRef]) -> Result<NodeRef> {
        self.graph_mut("Body::empty", SourceLine::caller())?
            .empty(label, deps)
    }

    /// [`Graph::child`] in the body.
    #[track_caller]
    pub fn child(&mut self, label: &str, child: &Graph, deps: &[&NodeRef]) -> Result<NodeRef> {
        self.graph_mut("Body::child", SourceLine::caller())?
            .child(label, child, deps)
    }

    /// [`Graph::condition_handle`] for a conditional node nested in the body.
    #[track_caller]
    pub fn condition_handle(
        &mut self,
        label: &str,
        default: Option<u32>,
    ) -> Result<ConditionHandle> {
        self.graph_mut("Body::condition_handle", SourceLine::caller())?
            .condition_handle(label, default)
    }

    /// [`Graph::if_`] nested in the body.
    #[track_caller]
    pub fn if_(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, BodyRef)> {
        self.graph_mut("Body::if_", SourceLine::caller())?
            .if_(label, handle, deps)
    }

    /// [`Graph::if_else`] nested in the body.
    #[track_caller]
    pub fn if_else(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, [BodyRef; 2])> {
        self.graph_mut("Body::if_else", SourceLine::caller())?
            .if_else(label, handle, deps)
    }

    /// [`Graph::while_`] nested in the body.
    #[track_caller]
    pub fn while_(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, BodyRef)> {
        self.graph_mut("Body::while_", SourceLine::caller())?
            .while_(label, handle, deps)
    }

    /// [`Graph::switch`] nested in the body.
    #[track_caller]
    pub fn switch(
        &mut self,
        label: &str,
        handle: ConditionHandle,
        cases: u32,
        deps: &[&NodeRef],
    ) -> Result<(NodeRef, Vec<BodyRef>)> {
        self.graph_mut("Body::switch", SourceLine::caller())?
            .switch(label, handle, cases, deps)
    }

    /// [`Graph::body`]: a body of a conditional node nested in this body.
    #[track_caller]
    pub fn body(&mut self, body: &BodyRef) -> Result<Body<'_>> {
        self.graph_mut("Body::body", SourceLine::caller())?
            .body(body)
    }
}
