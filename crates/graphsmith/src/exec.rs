//! Executables: instantiated once, launched many times; exclusive access by construction.

use std::collections::HashMap;

use cudarc::driver::sys;
use graphsmith_model as model;
use model::NodeId;

use crate::capture::Keep;
use crate::context::Context;
use crate::error::{check, Error, ErrorKind, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::graph::{Graph, NodeRef};
use crate::stream::Stream;

/// Counters of what happened to an executable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecStats {
    pub launches: u64,
    /// Per-node parameter updates applied in place.
    pub node_updates: u64,
    /// Whole-graph updates applied in place (`cuGraphExecUpdate`).
    pub graph_updates: u64,
    /// Times the executable was rebuilt because an update was impossible.
    pub reinstantiations: u64,
}

/// A kernel node's function and parameter layout (offset, size), read once.
pub(crate) type KernelLayout = (sys::CUfunction, std::sync::Arc<Vec<(usize, usize)>>);

/// Waits for `done` (nothing to wait for when it was never recorded).
fn wait_for(done: sys::CUevent) -> Result<(), Failure> {
    if done.is_null() {
        return Ok(());
    }
    // SAFETY: done is a live event owned by an Exec; the context is current.
    check(
        unsafe { sys::cuEventSynchronize(done) },
        "cuEventSynchronize",
    )
}

/// Instantiates `graph` (`cuGraphInstantiateWithFlags`).
pub(crate) fn instantiate_raw(graph: &Graph) -> Result<sys::CUgraphExec, Failure> {
    graph.ctx.bind()?;
    let mut exec = std::ptr::null_mut();
    // SAFETY: graph.raw is live; Graph is !Sync, so no other thread uses the template now.
    check(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.raw, 0) },
        "cuGraphInstantiate",
    )?;
    Ok(exec)
}

/// An executable graph (`CUgraphExec`) with its own template, kept in step with every update.
///
/// Thread safety: the driver forbids driving one executable from two threads at once. Here
/// launching, uploading and updating take `&mut self`, so the borrow checker enforces that rule;
/// `Exec` is `Send + Sync` because its `&self` methods only read. Launch from many threads by
/// giving each its own executable.
pub struct Exec {
    pub(crate) raw: sys::CUgraphExec,
    /// The template this executable was instantiated from (its own copy). Its node handles
    /// address the executable's nodes in per-node updates, for the executable's whole life.
    pub(crate) template: Graph,
    /// After whole-graph updates: a copy of the latest graph, which per-node updates keep in
    /// step. `None` while `template` itself is current.
    pub(crate) current: Option<Graph>,
    /// The ids of the graphs whose `NodeRef`s address this executable's nodes: the graph it was
    /// instantiated from, and the graph of its latest whole-graph update.
    pub(crate) instantiated_from: u64,
    pub(crate) origin: u64,
    pub(crate) label: String,
    /// Resources of nodes whose parameters were updated (replacing, not adding to, older ones).
    pub(crate) node_keep: HashMap<NodeId, Vec<Keep>>,
    /// Function and parameter layout of kernel nodes, read once on their first update.
    pub(crate) kernel_layouts: HashMap<usize, KernelLayout>,
    /// Kernel nodes whose new parameters are in the model but not yet in the current driver
    /// template: pushed there by [`Exec::template`] (so per-node updates cost one driver call).
    pub(crate) stale_kernels: std::collections::BTreeSet<usize>,
    pub(crate) stats: ExecStats,
    /// Whether work may be in flight (a launch or upload since the last synchronisation).
    pub(crate) in_flight: bool,
    /// Recorded after every launch and upload: waiting for it waits for this executable's work
    /// only (a context-wide synchronisation would invalidate captures on other threads).
    done: sys::CUevent,
}

// SAFETY: the raw handles (exec and template) are only used through &mut self (or in Drop), so
// no two threads touch them at once; &self methods read plain data only.
unsafe impl Send for Exec {}
// SAFETY: as above.
unsafe impl Sync for Exec {}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Exec '{}' ({} nodes)",
            self.label,
            self.current().model.nodes.len()
        )
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        self.release();
        let done = std::mem::replace(&mut self.done, std::ptr::null_mut());
        if !done.is_null() {
            let label = self.label.clone();
            // SAFETY: done was created by cuEventCreate in `mark_in_flight` and is destroyed once.
            self.template.ctx.drop_call(
                || ObjectRef::new(ObjectKind::Exec, &label),
                || check(unsafe { sys::cuEventDestroy_v2(done) }, "cuEventDestroy"),
            );
        }
    }
}

impl Exec {
    pub(crate) fn new(raw: sys::CUgraphExec, template: Graph, origin: u64) -> Self {
        let label = format!("{}#exec", template.label());
        Self {
            raw,
            template,
            current: None,
            instantiated_from: origin,
            origin,
            label,
            node_keep: HashMap::new(),
            kernel_layouts: HashMap::new(),
            stale_kernels: Default::default(),
            stats: ExecStats::default(),
            in_flight: false,
            done: std::ptr::null_mut(),
        }
    }

    /// Destroys the raw executable (waiting first if work may be in flight). Never panics.
    pub(crate) fn release(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        let label = self.label.clone();
        let me = || ObjectRef::new(ObjectKind::Exec, &label);
        let ctx = self.template.ctx.clone();
        if self.in_flight {
            // Buffers and host functions the graph references must outlive every launch.
            let done = self.done;
            ctx.drop_call(me, || wait_for(done));
            self.in_flight = false;
        }
        // SAFETY: raw was created by cuGraphInstantiate and is destroyed once (swapped out above).
        ctx.drop_call(me, || {
            check(
                unsafe { sys::cuGraphExecDestroy(raw) },
                "cuGraphExecDestroy",
            )
        });
    }

    /// The executable's label (`<graph label>#exec`).
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The model of the executable's template, with every update applied.
    pub fn model(&self) -> &model::Graph {
        &self.current().model
    }
    /// The executable's own template, with every update applied: per-node kernel updates not
    /// yet pushed into the driver's template are pushed first (`cuGraphKernelNodeSetParams`).
    #[track_caller]
    pub fn template(&mut self) -> Result<&Graph> {
        let at = SourceLine::caller();
        crate::update::flush_template(self)
            .map_err(|f| f.on(self.object(), "Exec::template", at))?;
        Ok(self.current())
    }
    /// The template that reflects every update so far.
    pub(crate) fn current(&self) -> &Graph {
        self.current.as_ref().unwrap_or(&self.template)
    }
    pub(crate) fn current_mut(&mut self) -> &mut Graph {
        self.current.as_mut().unwrap_or(&mut self.template)
    }
    /// What has happened to this executable so far.
    pub fn stats(&self) -> ExecStats {
        self.stats
    }
    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUgraphExec {
        self.raw
    }
    /// The context of this executable.
    pub fn context(&self) -> &Context {
        &self.template.ctx
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Exec, &self.label)
    }

    /// Checks that `node` addresses a node of this executable; returns its index.
    pub(crate) fn node_index(
        &self,
        node: &NodeRef,
        op: &'static str,
        at: SourceLine,
    ) -> Result<usize> {
        let ours = node.graph == self.origin || node.graph == self.instantiated_from;
        if !ours || node.id.index() >= self.template.handles.len() {
            return Err(Error::new(
                ErrorKind::ForeignNode {
                    node: node.label.to_string(),
                    node_graph: node.graph_label.to_string(),
                },
                self.object(),
                op,
                at,
            ));
        }
        Ok(node.id.index())
    }

    /// Records `done` on `stream` after a launch or upload.
    fn mark_in_flight(&mut self, stream: &Stream) -> Result<(), Failure> {
        if self.done.is_null() {
            let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
            // SAFETY: the context is current (bound by the caller); done is a valid out pointer.
            check(
                unsafe { sys::cuEventCreate(&mut self.done, flags) },
                "cuEventCreate",
            )?;
        }
        // SAFETY: done and the stream are live and of this context.
        check(
            unsafe { sys::cuEventRecord(self.done, stream.raw) },
            "cuEventRecord",
        )?;
        self.in_flight = true;
        Ok(())
    }

    /// Waits until every launch and upload of this executable so far has finished.
    pub(crate) fn wait_done(&mut self) -> Result<(), Failure> {
        self.template.ctx.bind()?;
        wait_for(self.done)?;
        self.in_flight = false;
        Ok(())
    }

    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// Launches the executable on `stream` (`cuGraphLaunch`).
    #[track_caller]
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        match self.launch_raw(stream) {
            Ok(()) => {
                self.stats.launches += 1;
                Ok(())
            }
            Err(f) => Err(f.on(self.object(), "Exec::launch", at)),
        }
    }

    fn launch_raw(&mut self, stream: &Stream) -> Result<(), Failure> {
        self.template.ctx.bind()?;
        // SAFETY: raw is live; &mut self guarantees no concurrent use of this executable.
        check(
            unsafe { sys::cuGraphLaunch(self.raw, stream.raw) },
            "cuGraphLaunch",
        )?;
        self.mark_in_flight(stream)
    }

    /// Uploads the executable's resources ahead of the first launch (`cuGraphUpload`).
    #[track_caller]
    pub fn upload(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        let uploaded = self.template.ctx.bind().and_then(|()| {
            // SAFETY: raw is live; &mut self guarantees exclusive use.
            check(
                unsafe { sys::cuGraphUpload(self.raw, stream.raw) },
                "cuGraphUpload",
            )
        });
        uploaded
            .and_then(|()| self.mark_in_flight(stream))
            .map_err(|f| f.on(self.object(), "Exec::upload", at))
    }
}
