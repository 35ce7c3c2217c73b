//! Executables: instantiated once, launched many times; exclusive access by construction.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;

use crate::context::Context;
use crate::context::{keep_id, Keep};
use crate::driver::{self, Failure};
use crate::error::{Error, ErrorKind, ObjectKind, ObjectRef, Result, SourceLine};
use crate::exec::NodeUpdate;
use crate::graph::{Graph, NodeRef};
use crate::stream::{Stream, StreamHandle};

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

/// Instantiates `graph` (`cuGraphInstantiateWithFlags`): every instantiation goes through
/// here, so a second executable of a graph with conditional nodes is refused first
/// ([`Graph::refuse_second_exec`]; `holders` is how many shares of the driver graph the caller
/// holds besides `graph`). A driver failure is an error of `op` on `object()` at `at`.
pub(crate) fn instantiate_raw(
    graph: &Graph,
    holders: usize,
    object: impl Fn() -> ObjectRef,
    op: &'static str,
    at: SourceLine,
) -> Result<sys::CUgraphExec> {
    graph.refuse_second_exec(holders, op, at)?;
    // The object is named only for an error: an instantiation that works allocates nothing here.
    let fail = |f: Failure| f.on(object(), op, at);
    graph.ctx.bind().map_err(fail)?;
    let _guard = graph.raw_guard();
    // SAFETY: graph.raw is live; calls on it are serialised (the guard while an executable's
    // template shares it; Graph is !Sync).
    unsafe { driver::instantiate(graph.raw) }.map_err(fail)
}

/// An executable graph (`CUgraphExec`) with its own template, kept in step with every update.
///
/// Thread safety: the driver forbids driving one executable from two threads at once. Here
/// launching, uploading and updating take `&mut self`, so the borrow checker enforces that rule;
/// `Exec` is `Send + Sync` because its `&self` methods only read. Launch from many threads by
/// giving each its own executable.
///
/// Launching needs `&mut Exec`, so a shared reference cannot launch:
///
/// ```compile_fail,E0596
/// fn launch_shared(exec: &graphsmith::Exec, stream: &graphsmith::Stream) -> graphsmith::Result<()> {
///     exec.launch(stream) // error: `exec` is a `&` reference
/// }
/// ```
///
/// while the same call through `&mut` compiles:
///
/// ```no_run
/// fn launch_owned(exec: &mut graphsmith::Exec, stream: &graphsmith::Stream) -> graphsmith::Result<()> {
///     exec.launch(stream)
/// }
/// ```
pub struct Exec {
    pub(crate) raw: sys::CUgraphExec,
    /// The template this executable was instantiated from: a share of the caller's graph (no
    /// driver copy; see `graph/shared.rs`), which keeps its driver graph alive. Its node handles
    /// address the executable's nodes in per-node updates, for the executable's whole life, so
    /// its driver graph is never changed while another graph shares it. It is also the current
    /// template (every update applied) unless `current` is set.
    pub(crate) template: Graph,
    /// The current template when it is not `template`: after a whole-graph update, a share of
    /// the graph updated from; after per-node updates were pushed into a driver template that
    /// was shared, that template's copy.
    pub(crate) current: Option<Graph>,
    /// The ids of the graphs whose `NodeRef`s address this executable's nodes: the graph it was
    /// instantiated from, and the graph of its latest whole-graph update.
    pub(crate) instantiated_from: u64,
    pub(crate) origin: u64,
    /// The label of the graph instantiated from or last updated from (shared with it); the
    /// executable's own label, that plus `#exec`, is made in `label` when first asked for.
    pub(crate) graph_label: Arc<str>,
    pub(crate) label: std::sync::OnceLock<String>,
    /// What per-node updates set, by node index, holding the buffers they reference (see
    /// `exec/node_updates.rs`); empty until the first per-node update.
    pub(crate) overrides: Vec<Option<NodeUpdate>>,
    /// The model with `overrides` applied, made when first asked for after an update.
    pub(crate) model_cache: std::sync::OnceLock<model::Graph>,
    /// Resources let go of while a launch might still use them and no wait was possible (a
    /// capture was running): dropped at the next wait.
    pub(crate) retired: Vec<Keep>,
    /// Nodes (by index) whose parameters are in the model but not yet in the current driver
    /// template: pushed there by [`Exec::template`] (into a copy of it first, when it is
    /// shared), so an update costs one driver call.
    pub(crate) stale: Vec<bool>,
    pub(crate) any_stale: bool,
    pub(crate) stats: ExecStats,
    /// Where the kernel nodes' pointer words are, kept across [`Exec::relocate`]s
    /// (`exec/relocation_index.rs`); dropped by every other change of the arguments.
    pub(crate) relocation: Option<Box<crate::exec::RelocationIndex>>,
    /// Unique in the process: the executable's id in launch logs (`exec/ordering.rs`).
    pub(crate) id: u64,
    /// The streams this executable was launched or uploaded on since it last waited: waiting
    /// for them waits for its work (a context-wide synchronisation would invalidate captures
    /// on other threads). Holding them keeps the streams alive.
    launched_on: Vec<Arc<StreamHandle>>,
}

/// An executable dropped while its work could not be waited for (a capture was running): the
/// context destroys it, after waiting, once the captures have ended.
pub(crate) struct RetiredExec {
    raw: sys::CUgraphExec,
    label: String,
    streams: Vec<Arc<StreamHandle>>,
    /// What its nodes reference, released only after the wait.
    _keep: Vec<Keep>,
}

// SAFETY: the exec handle is only used by the context that holds this, once, in `finish`.
unsafe impl Send for RetiredExec {}

impl crate::context::Retired for RetiredExec {
    /// Waits for the executable's streams and destroys it; gives itself back when a stream is
    /// capturing (still no wait possible).
    fn finish(self: Box<Self>, ctx: &Context) -> Option<Box<dyn crate::context::Retired>> {
        // Another capture may have begun since the last one ended.
        if ctx.captures_active() {
            return Some(self);
        }
        let me = || ObjectRef::new(ObjectKind::Exec, &self.label);
        for stream in &self.streams {
            match ctx.bind().and_then(|()| stream.wait_unless_capturing()) {
                Ok(true) => {}
                Ok(false) => return Some(self),
                Err(f) => ctx.record_drop_failure(me(), f),
            }
        }
        let raw = self.raw;
        // SAFETY: raw came from cuGraphInstantiate, its work is done (waited for above) and it
        // is destroyed once (self is consumed).
        ctx.drop_call(me, || unsafe { driver::exec_destroy(raw) });
        None
    }
}

// SAFETY: the raw exec handle is only used through &mut self (or in Drop), so no two threads
// touch it at once. The templates' driver graphs may be shared with graphs on other threads:
// every driver call on a shared one holds its lock (`graph/shared.rs`). &self methods read plain
// data, or make a template's parts once (`Lazy`, a OnceLock, whose read-back holds that lock
// while shared). The templates' `Graph::facts` (a OnceCell) are filled only by `Exec::update`,
// which takes &mut self; `model_cache` is a OnceLock. Conditional bodies shared with the
// caller's graph are read only, under that graph's lock (`Graph::read_back`).
unsafe impl Send for Exec {}
// SAFETY: as above.
unsafe impl Sync for Exec {}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Exec '{}' (template: {:?})",
            self.label(),
            self.current()
        )
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        self.release();
    }
}

impl Exec {
    pub(crate) fn new(raw: sys::CUgraphExec, template: Graph, origin: u64) -> Self {
        Self {
            raw,
            graph_label: template.label.clone(),
            template,
            current: None,
            instantiated_from: origin,
            origin,
            label: std::sync::OnceLock::new(),
            overrides: Vec::new(),
            model_cache: std::sync::OnceLock::new(),
            retired: Vec::new(),
            stale: Vec::new(),
            any_stale: false,
            stats: ExecStats::default(),
            relocation: None,
            id: crate::exec::next_exec_id(),
            launched_on: Vec::new(),
        }
    }

    /// Destroys the raw executable once its work is done: at once after waiting for its
    /// streams, or, while a capture runs (no wait possible), by the context when the captures
    /// end. Never panics.
    pub(crate) fn release(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        let ctx = self.template.ctx.clone();
        // The label is made only where it is used (a failure, a deferred destruction).
        let graph_label = self.graph_label.clone();
        let me = || ObjectRef::new(ObjectKind::Exec, format!("{graph_label}#exec"));
        match self.try_wait() {
            Ok(true) => {}
            Ok(false) => {
                // Buffers and host functions the graph references must outlive every launch.
                let mut keep = std::mem::take(&mut self.retired);
                keep.extend(
                    self.overrides
                        .drain(..)
                        .flatten()
                        .flat_map(|u| u.into_keep()),
                );
                keep.push(self.template.keep.clone() as Keep);
                if let Some(current) = &self.current {
                    keep.push(current.keep.clone() as Keep);
                }
                ctx.defer(crate::context::Deferred::Exec(Box::new(RetiredExec {
                    raw,
                    label: self.label().to_string(),
                    streams: std::mem::take(&mut self.launched_on),
                    _keep: keep,
                })));
                return;
            }
            Err(failure) => ctx.record_drop_failure(me(), failure),
        }
        // Destroyed now, or when the running captures end (the call may count as unsafe during
        // a capture).
        ctx.destroy(me, crate::context::Destroy::Exec(raw));
    }

    /// The executable's label (`<graph label>#exec`).
    pub fn label(&self) -> &str {
        self.label
            .get_or_init(|| format!("{}#exec", self.graph_label))
    }
    /// Takes `graph`'s label as the one this executable's label is made from (after an update
    /// or a rebuild from `graph`); a label that stays the same is neither copied nor made again.
    pub(crate) fn follow_label(&mut self, graph: &Graph) {
        if !Arc::ptr_eq(&self.graph_label, &graph.label) && *self.graph_label != *graph.label {
            self.graph_label = graph.label.clone();
            self.label = std::sync::OnceLock::new();
        }
    }
    /// The model of the executable's template, with every update applied.
    pub fn model(&self) -> &model::Graph {
        let base = self.current().model();
        if self.overrides.is_empty() {
            return base;
        }
        self.model_cache.get_or_init(|| {
            let kernels = self.current().kernels();
            crate::exec::apply_all(base, &self.overrides, |i| {
                kernels.get(i)?.as_ref().map(|k| k.layout.clone())
            })
        })
    }
    /// The executable's own template, with every update applied: nodes changed since the last
    /// call are pushed into the driver's template first (`cuGraphKernelNodeSetParams`, ...),
    /// and the template's model and kept resources take in the per-node updates, so the graph
    /// returned is whole (its model equals [`Exec::model`]; instantiating it is safe).
    #[track_caller]
    pub fn template(&mut self) -> Result<&Graph> {
        let at = SourceLine::caller();
        crate::exec::flush_template(self).map_err(|f| f.on(self.object(), "Exec::template", at))?;
        crate::exec::fold_into_template(self);
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
        ObjectRef::new(ObjectKind::Exec, self.label())
    }

    /// Checks that `node` addresses a node of this executable; returns its index.
    pub(crate) fn node_index(
        &self,
        node: &NodeRef,
        op: &'static str,
        at: SourceLine,
    ) -> Result<usize> {
        let ours = node.graph == self.origin || node.graph == self.instantiated_from;
        if !ours || node.id.index() >= self.template.handles().len() {
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

    /// Remembers that work of this executable was submitted to `stream`.
    fn mark_in_flight(&mut self, stream: &Stream) {
        if !self.launched_on.iter().any(|h| h.raw == stream.raw()) {
            self.launched_on.push(stream.handle.clone());
        }
    }

    /// Waits until every launch and upload of this executable so far has finished, by waiting
    /// for the streams they went to; then drops the retired resources. Returns `Ok(false)`,
    /// having waited for nothing, while a capture runs in the context or on one of those
    /// streams (a synchronisation would invalidate it).
    pub(crate) fn try_wait(&mut self) -> Result<bool, Failure> {
        if self.launched_on.is_empty() {
            self.retired.clear();
            return Ok(true);
        }
        let ctx = &self.template.ctx;
        ctx.bind()?;
        if ctx.captures_active() {
            return Ok(false);
        }
        for stream in &self.launched_on {
            if !stream.wait_unless_capturing()? {
                return Ok(false);
            }
        }
        self.launched_on.clear();
        self.retired.clear();
        Ok(true)
    }

    /// Lets go of resources a launch may still be using. With no launch in flight they go at
    /// once. Otherwise they are kept until this executable has waited for its work: whoever else
    /// holds them may let go at any time without waiting for this executable's launches. When
    /// one of them would be released for good, it waits now (so memory comes back promptly),
    /// unless a capture runs.
    pub(crate) fn retire(&mut self, old: Vec<Keep>) -> Result<(), Failure> {
        self.retire_sets(old, None)
    }

    /// [`Exec::retire`] for single resources and for a whole set of them (a graph's). A set
    /// this executable holds anyway (its instantiation template's, or one it retired already and
    /// has not waited for since) is not held a second time: a whole-graph update going back and
    /// forth between two graphs retires nothing new, allocates nothing and never fills
    /// `retired`.
    pub(crate) fn retire_sets(
        &mut self,
        old: Vec<Keep>,
        set: Option<Arc<Vec<Keep>>>,
    ) -> Result<(), Failure> {
        if self.launched_on.is_empty() {
            return Ok(());
        }
        let set = set.filter(|set| !self.holds_set(set));
        if old.is_empty() && set.is_none() {
            return Ok(());
        }
        let last = |k: &Keep| Arc::strong_count(k) == 1;
        let releasing = old.iter().any(last)
            || set
                .as_ref()
                .is_some_and(|set| Arc::strong_count(set) == 1 && set.iter().any(last));
        let waited = if releasing {
            self.try_wait()
        } else {
            Ok(false)
        };
        if !matches!(waited, Ok(true)) {
            // Kept, also when the wait failed: dropping them now could free memory in use.
            self.retired.extend(old);
            self.retired.extend(set.map(|set| set as Keep));
        }
        waited?;
        self.prune_retired()
    }

    /// Whether this executable keeps `set` alive as long as its launches need it already: it is
    /// the instantiation template's (held for the executable's whole life), or retired and not
    /// yet let go (held until a wait covers every launch made so far).
    fn holds_set(&self, set: &Arc<Vec<Keep>>) -> bool {
        Arc::ptr_eq(set, &self.template.keep)
            || self.retired.iter().any(|k| keep_id(k) == keep_id(set))
    }

    /// Bounds what `retired` holds between waits: past a few dozen entries it is emptied as
    /// soon as the launch streams are idle (`cuStreamQuery`, no wait); past a few thousand this
    /// executable waits for its work.
    fn prune_retired(&mut self) -> Result<(), Failure> {
        const SOFT: usize = 64;
        const HARD: usize = 4096;
        if self.retired.len() < SOFT {
            return Ok(());
        }
        if self.streams_idle()? {
            self.launched_on.clear();
            self.retired.clear();
        } else if self.retired.len() >= HARD {
            self.try_wait()?;
        }
        Ok(())
    }

    /// Whether every stream this executable was launched on has finished its work, asked
    /// without waiting; `false` while a capture runs (a query would invalidate it).
    fn streams_idle(&self) -> Result<bool, Failure> {
        let ctx = &self.template.ctx;
        ctx.bind()?;
        if ctx.captures_active() {
            return Ok(false);
        }
        for stream in &self.launched_on {
            if !stream.idle_unless_capturing()? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Launches the executable on `stream` (`cuGraphLaunch`).
    #[track_caller]
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        // Signals waited on must be recordable; the launch log checks for races.
        let launching = self.before_launch(stream, at)?;
        match self.launch_raw(stream) {
            Ok(()) => {
                self.stats.launches += 1;
                if let Some(launching) = launching {
                    self.after_launch(stream, launching, at);
                }
                Ok(())
            }
            Err(f) => Err(f.on(self.object(), "Exec::launch", at)),
        }
    }

    fn launch_raw(&mut self, stream: &Stream) -> Result<(), Failure> {
        self.template.ctx.bind()?;
        // A kernel launched after the graph must not overlap it (programmatic attribute).
        stream.other_work();
        // SAFETY: raw is live; &mut self guarantees no concurrent use of this executable.
        unsafe { driver::launch(self.raw, stream.raw()) }?;
        self.mark_in_flight(stream);
        Ok(())
    }

    /// Uploads the executable's resources ahead of the first launch (`cuGraphUpload`).
    #[track_caller]
    pub fn upload(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        stream.other_work();
        let uploaded = self.template.ctx.bind().and_then(|()| {
            // SAFETY: raw is live; &mut self guarantees exclusive use.
            unsafe { driver::upload(self.raw, stream.raw()) }
        });
        uploaded.map_err(|f| f.on(self.object(), "Exec::upload", at))?;
        self.mark_in_flight(stream);
        Ok(())
    }
}

/// Instantiation lives with the executable it makes (the graph layer below knows no `Exec`).
impl Graph {
    /// Instantiates the graph once (`cuGraphInstantiateWithFlags`); launch the executable as
    /// often as needed. This costs the driver's instantiation alone: the executable's template
    /// shares this graph's driver graph and model (the driver's executable is a copy of its
    /// own). This graph stays usable: it can be instantiated again, read, or built on (the
    /// builder then copies the driver graph first, so the executable's template never changes
    /// under it); the executable's per-node updates go into a copy of the template when it is
    /// next asked for ([`Exec::template`]).
    ///
    /// A graph with conditional nodes is shared too, but the driver cannot copy it
    /// (`cuGraphClone` refuses it) and allows it one executable at a time: while the
    /// executable lives, changing the graph (the builder, its bodies) and instantiating it
    /// again are refused with an error naming the conditional node, as is writing the
    /// executable's per-node updates into the shared template ([`Exec::template`]).
    /// [`Graph::into_exec`] hands the graph over instead.
    #[track_caller]
    pub fn instantiate(&self) -> Result<Exec> {
        let at = SourceLine::caller();
        let raw = instantiate_raw(self, 0, || self.object(), "Graph::instantiate", at)?;
        Ok(Exec::new(raw, self.share(), self.id))
    }

    /// Instantiates the graph, which becomes the executable's template.
    #[track_caller]
    pub fn into_exec(self) -> Result<Exec> {
        let at = SourceLine::caller();
        let origin = self.id;
        self.into_exec_at(origin, at)
    }

    fn into_exec_at(self, origin: u64, at: SourceLine) -> Result<Exec> {
        // Handed over, but an executable made earlier by `Graph::instantiate` may still share it.
        let raw = instantiate_raw(&self, 0, || self.object(), "Graph::into_exec", at)?;
        Ok(Exec::new(raw, self, origin))
    }
}
