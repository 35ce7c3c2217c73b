//! Eager fallback: capture the hot path; when the capture fails, run the same work
//! eagerly and hand back the diagnosis with the result, so the caller chooses between failing
//! fast ([`Stream::capture`]) and falling back ([`Stream::capture_or_eager`]).

use crate::context::CaptureOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::graph::Graph;
use crate::stream::Stream;
use graphsmith_analysis::Diagnosis;

/// How the work of [`Stream::capture_or_eager`] is to be replayed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per capture; boxing the graph would only add a hop
pub enum Replay {
    /// The capture succeeded: instantiate the graph and launch it.
    Graph(Graph),
    /// The capture failed for this reason; the body already ran eagerly once, and must be run
    /// eagerly again for each later step.
    Eager(Box<Diagnosis>),
}

impl Replay {
    /// The graph, when the capture succeeded.
    pub fn graph(&self) -> Option<&Graph> {
        match self {
            Replay::Graph(g) => Some(g),
            Replay::Eager(_) => None,
        }
    }
    /// Why the capture failed, when it did.
    pub fn diagnosis(&self) -> Option<&Diagnosis> {
        match self {
            Replay::Graph(_) => None,
            Replay::Eager(d) => Some(d),
        }
    }
}

impl Stream {
    /// Captures `body` into a graph; if the capture fails ([`ErrorKind::CaptureFailed`]), ends
    /// it, runs `body` again eagerly on this stream and returns its result with
    /// [`Replay::Eager`] and the diagnosis.
    ///
    /// `body` runs twice on failure, so it must be re-runnable. Its first run had no effect on
    /// the GPU (a failed capture executes nothing), except work that escaped the capture: work
    /// issued on a stream outside it ran eagerly (the diagnosis lists such escapes), and host
    /// side effects of `body` itself happened. Errors of `body` that are not capture failures
    /// (bad arguments, say) are returned as they are, without a second run.
    ///
    /// ```no_run
    /// # use graphsmith::{args, CaptureMode, Context, LaunchConfig, Replay};
    /// # fn main() -> graphsmith::Result<()> {
    /// # let ctx = Context::new(0)?;
    /// # let add = ctx.builtin_kernels()?.kernel("gs_add_scalar_f32")?;
    /// # let stream = ctx.stream("main")?;
    /// # let mut x = ctx.alloc::<f32>("x", 1024)?;
    /// let (replay, ()) = stream.capture_or_eager(CaptureMode::Global, "step", |s| {
    ///     s.launch("add", &add, LaunchConfig::for_elements(1024), args![&mut x, 1.0f32, 1024u32])
    /// })?;
    /// if let Replay::Eager(why) = &replay {
    ///     eprintln!("running eagerly: {why}");
    /// }
    /// # Ok(()) }
    /// ```
    #[track_caller]
    pub fn capture_or_eager<R>(
        &self,
        options: impl Into<CaptureOptions>,
        label: &str,
        mut body: impl FnMut(&Stream) -> Result<R>,
    ) -> Result<(Replay, R)> {
        match self.capture_with(options, label, &mut body) {
            Ok((graph, value)) => Ok((Replay::Graph(graph), value)),
            Err(Error {
                kind: ErrorKind::CaptureFailed(diagnosis),
                ..
            }) => {
                let _range = crate::ranges::range(format!("eager:{label}"));
                let value = body(self)?;
                Ok((Replay::Eager(diagnosis), value))
            }
            Err(other) => Err(other),
        }
    }
}
