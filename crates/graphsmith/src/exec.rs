//! Executables: instantiated once, launched many times; exclusive access by construction.

use std::sync::Arc;

use cudarc::driver::sys;
use graphsmith_model as model;

use crate::capture::Keep;
use crate::context::Context;
use crate::error::{check, Failure, ObjectKind, ObjectRef, Result, SourceLine};
use crate::stream::Stream;

/// An executable graph (`CUgraphExec`).
///
/// Thread safety: the driver forbids driving one executable from two threads at once. Here
/// launching, uploading and (later) updating take `&mut self`, so the borrow checker enforces
/// that rule; `Exec` is `Send + Sync` because its `&self` methods only read immutable data.
/// Launch from many threads by giving each its own executable.
pub struct Exec {
    raw: sys::CUgraphExec,
    ctx: Context,
    label: String,
    model: Arc<model::Graph>,
    /// Buffers, modules, events and host functions the graph references.
    keep: Vec<Keep>,
    /// Whether work may be in flight (a launch or upload since the last synchronisation).
    in_flight: bool,
}

// SAFETY: the raw handle is only used through &mut self (or in Drop), so no two threads touch it
// at once; all other fields are Send + Sync.
unsafe impl Send for Exec {}
// SAFETY: &self methods never touch the raw handle.
unsafe impl Sync for Exec {}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Exec '{}' ({} nodes)",
            self.label,
            self.model.nodes.len()
        )
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, std::ptr::null_mut());
        if raw.is_null() {
            return;
        }
        let me = || ObjectRef::new(ObjectKind::Exec, &self.label);
        if self.in_flight {
            // The buffers and host functions in `keep` must outlive every launch: wait for the
            // context before letting them go.
            // SAFETY: the context is bound by drop_call first.
            self.ctx.drop_call(me, || {
                check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")
            });
        }
        // SAFETY: raw was created by cuGraphInstantiate and is destroyed once.
        self.ctx.drop_call(me, || {
            check(
                unsafe { sys::cuGraphExecDestroy(raw) },
                "cuGraphExecDestroy",
            )
        });
        self.keep.clear();
    }
}

impl Exec {
    pub(crate) fn new(
        raw: sys::CUgraphExec,
        ctx: Context,
        label: String,
        model: Arc<model::Graph>,
        keep: Vec<Keep>,
    ) -> Self {
        Self {
            raw,
            ctx,
            label,
            model,
            keep,
            in_flight: false,
        }
    }

    /// The executable's label (`<graph label>#exec`).
    pub fn label(&self) -> &str {
        &self.label
    }
    /// The model of the graph this was instantiated from.
    pub fn model(&self) -> &model::Graph {
        &self.model
    }
    /// The raw handle, for interop (graphsmith keeps ownership).
    pub fn raw(&self) -> sys::CUgraphExec {
        self.raw
    }
    pub(crate) fn object(&self) -> ObjectRef {
        ObjectRef::new(ObjectKind::Exec, &self.label)
    }

    /// Launches the executable on `stream` (`cuGraphLaunch`).
    #[track_caller]
    pub fn launch(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Exec::launch", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: raw is live; &mut self guarantees no concurrent use of this executable.
        check(
            unsafe { sys::cuGraphLaunch(self.raw, stream.raw) },
            "cuGraphLaunch",
        )
        .map_err(fail)?;
        self.in_flight = true;
        Ok(())
    }

    /// Uploads the executable's resources ahead of the first launch (`cuGraphUpload`).
    #[track_caller]
    pub fn upload(&mut self, stream: &Stream) -> Result<()> {
        let at = SourceLine::caller();
        let fail = |f: Failure| f.on(self.object(), "Exec::upload", at);
        self.ctx.bind().map_err(fail)?;
        // SAFETY: raw is live; &mut self guarantees exclusive use.
        check(
            unsafe { sys::cuGraphUpload(self.raw, stream.raw) },
            "cuGraphUpload",
        )
        .map_err(fail)?;
        self.in_flight = true;
        Ok(())
    }

    /// The context of this executable.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}
