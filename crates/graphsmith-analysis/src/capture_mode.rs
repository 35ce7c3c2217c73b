//! The driver's stream-capture modes, as a capture diagnosis names them.

/// The driver's capture modes (`CUstreamCaptureMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Potentially unsafe calls (e.g. `cuMemAlloc`, synchronisation) are refused on every thread
    /// while this capture runs.
    Global,
    /// Unsafe calls are refused only on the capturing thread.
    ThreadLocal,
    /// Nothing is refused; the caller takes responsibility.
    Relaxed,
}
