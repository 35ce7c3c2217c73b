//! Which CUDA calls the tracer looks into, and where their arguments are: a table indexed by
//! CUPTI callback id, built once. A call that is not in the table is only counted, and looked at
//! only when it fails.
//!
//! Arguments are read from CUPTI's parameter structs (`cuLaunchKernel_params_st`, ...), as
//! cudarc generates them from `generated_cuda_meta.h`. Enum fields (capture modes) are read as
//! `u32` through a raw pointer: an out-of-range value passed by the application must not become
//! an invalid Rust enum.

use std::ffi::c_void;
use std::ptr::addr_of;

use cudarc::cupti::sys::{
    self as cs, CUpti_driver_api_trace_cbid as D, CUpti_runtime_api_trace_cbid as R,
};

/// What a call does, as far as captures are concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Anything else.
    Other,
    /// Work on a stream: a launch, copy, set, allocation or free on a stream.
    Work,
    /// `cuEventRecord`: work, and the event now belongs to the stream's capture.
    EventRecord,
    /// `cuStreamWaitEvent`: may join a stream into a capture.
    Wait,
    /// Stream or context synchronization or query.
    Sync,
    /// `cuEventQuery`, `cuEventSynchronize`.
    EventSync,
    Begin,
    End,
    Instantiate,
    /// `cuGraphLaunch`: counted per executable; work too.
    GraphLaunch,
}

/// A call's arguments that matter to the tracer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Args {
    pub stream: Option<u64>,
    pub event: Option<u64>,
    /// `CUstreamCaptureMode` of a begin.
    pub mode: Option<u32>,
    /// The graph argument (instantiate).
    pub graph: Option<u64>,
    /// Where the driver writes the graph (end capture) or the executable (instantiate).
    pub out_handle: *mut u64,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            stream: None,
            event: None,
            mode: None,
            graph: None,
            out_handle: std::ptr::null_mut(),
        }
    }
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
pub(crate) const LEGACY: u64 = 0x1;
pub(crate) const PER_THREAD: u64 = 0x2;

/// How to read a call's arguments from CUPTI's `functionParams`.
pub(crate) type Reader = fn(*const c_void) -> Args;

#[derive(Clone, Copy)]
pub(crate) struct Spec {
    pub kind: Kind,
    /// A `_ptsz`/`_ptds` variant: a NULL stream means the per-thread stream.
    pub per_thread: bool,
    /// None: the call has no argument the tracer reads (a synchronous copy: legacy stream).
    pub read: Option<Reader>,
}

impl Spec {
    const OTHER: Spec = Spec {
        kind: Kind::Other,
        per_thread: false,
        read: None,
    };

    /// The stream a call works on, with NULL resolved to the legacy or per-thread stream.
    pub(crate) fn stream(&self, args: &Args) -> Option<u64> {
        match (self.kind, self.read, args.stream) {
            (_, Some(_), Some(0)) | (Kind::Work, None, None) => {
                Some(if self.per_thread { PER_THREAD } else { 0 })
            }
            (_, _, s) => s,
        }
    }
}

/// Whether a stream handle is the legacy stream (never capturing, never queried: asking the
/// legacy stream while a blocking stream captures would itself invalidate that capture).
pub(crate) fn is_legacy(stream: u64) -> bool {
    stream == 0 || stream == LEGACY
}

// Each reader below is only ever called with the `functionParams` CUPTI passes for its own
// callback id (see `table_entry`), which points to that call's `<name>_params_st`.
macro_rules! reader {
    ($ty:ident { $($field:ident => $arg:ident),* }) => {{
        fn read(p: *const c_void) -> Args {
            let p = p.cast::<cs::$ty>();
            let mut a = Args::default();
            // SAFETY: CUPTI passes, for this callback id, a valid pointer to this parameter
            // struct for the duration of the callback; fields are read by value, enum fields as
            // u32 through a raw pointer (no invalid enum value is ever created).
            unsafe {
                $( reader!(@set a, p, $field, $arg); )*
            }
            a
        }
        read as Reader
    }};
    (@set $a:ident, $p:ident, $field:ident, stream) => { $a.stream = Some((*$p).$field as u64) };
    (@set $a:ident, $p:ident, $field:ident, event) => { $a.event = Some((*$p).$field as u64) };
    (@set $a:ident, $p:ident, $field:ident, graph) => { $a.graph = Some((*$p).$field as u64) };
    (@set $a:ident, $p:ident, $field:ident, out) => { $a.out_handle = (*$p).$field.cast::<u64>() };
    (@set $a:ident, $p:ident, $field:ident, mode) => {
        $a.mode = Some(addr_of!((*$p).$field).cast::<u32>().read())
    };
    (@set $a:ident, $p:ident, $field:ident, config_stream) => {
        if !(*$p).$field.is_null() {
            $a.stream = Some((*(*$p).$field).hStream as u64)
        }
    };
}

/// The table for the driver domain.
pub(crate) fn driver_table() -> Vec<Spec> {
    let mut t = vec![Spec::OTHER; D::CUPTI_DRIVER_TRACE_CBID_SIZE as usize];
    let mut set = |id: D, kind: Kind, per_thread: bool, read: Option<Reader>| {
        if let Some(s) = t.get_mut(id as usize) {
            *s = Spec {
                kind,
                per_thread,
                read,
            };
        }
    };
    macro_rules! both {
        ($kind:expr, $name:ident, $ptsz:ident, $ty:ident, $pty:ident { $($f:ident => $a:ident),* }) => {
            set(D::$name, $kind, false, Some(reader!($ty { $($f => $a),* })));
            set(D::$ptsz, $kind, true, Some(reader!($pty { $($f => $a),* })));
        };
    }
    use Kind::*;
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        cuLaunchKernel_params_st, cuLaunchKernel_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        cuLaunchKernelEx_params_st, cuLaunchKernelEx_ptsz_params_st { config => config_stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
        cuLaunchCooperativeKernel_params_st, cuLaunchCooperativeKernel_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz,
        cuLaunchHostFunc_params_st, cuLaunchHostFunc_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
        cuMemcpyAsync_params_st, cuMemcpyAsync_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
        cuMemcpyHtoDAsync_v2_params_st, cuMemcpyHtoDAsync_v2_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
        cuMemcpyDtoHAsync_v2_params_st, cuMemcpyDtoHAsync_v2_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
        cuMemcpyDtoDAsync_v2_params_st, cuMemcpyDtoDAsync_v2_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz,
        cuMemcpy2DAsync_v2_params_st, cuMemcpy2DAsync_v2_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz,
        cuMemcpy3DAsync_v2_params_st, cuMemcpy3DAsync_v2_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz,
        cuMemcpyPeerAsync_params_st, cuMemcpyPeerAsync_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
        cuMemsetD8Async_params_st, cuMemsetD8Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
        cuMemsetD16Async_params_st, cuMemsetD16Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
        cuMemsetD32Async_params_st, cuMemsetD32Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz,
        cuMemsetD2D8Async_params_st, cuMemsetD2D8Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz,
        cuMemsetD2D16Async_params_st, cuMemsetD2D16Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz,
        cuMemsetD2D32Async_params_st, cuMemsetD2D32Async_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
        cuMemAllocAsync_params_st, cuMemAllocAsync_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
        cuMemFreeAsync_params_st, cuMemFreeAsync_ptsz_params_st { hStream => stream });
    both!(Work, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
        cuMemAllocFromPoolAsync_params_st, cuMemAllocFromPoolAsync_ptsz_params_st { hStream => stream });
    both!(EventRecord, CUPTI_DRIVER_TRACE_CBID_cuEventRecord, CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz,
        cuEventRecord_params_st, cuEventRecord_ptsz_params_st { hEvent => event, hStream => stream });
    both!(EventRecord, CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags, CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz,
        cuEventRecordWithFlags_params_st, cuEventRecordWithFlags_ptsz_params_st { hEvent => event, hStream => stream });
    both!(Wait, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz,
        cuStreamWaitEvent_params_st, cuStreamWaitEvent_ptsz_params_st { hStream => stream, hEvent => event });
    both!(Sync, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
        cuStreamSynchronize_params_st, cuStreamSynchronize_ptsz_params_st { hStream => stream });
    both!(Sync, CUPTI_DRIVER_TRACE_CBID_cuStreamQuery, CUPTI_DRIVER_TRACE_CBID_cuStreamQuery_ptsz,
        cuStreamQuery_params_st, cuStreamQuery_ptsz_params_st { hStream => stream });
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        GraphLaunch,
        false,
        Some(reader!(cuGraphLaunch_params_st { hGraph => graph, hStream => stream })),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
        GraphLaunch,
        true,
        Some(reader!(cuGraphLaunch_ptsz_params_st { hGraphExec => graph, hStream => stream })),
    );
    both!(Begin, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
        cuStreamBeginCapture_params_st, cuStreamBeginCapture_ptsz_params_st { hStream => stream });
    both!(Begin, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
        cuStreamBeginCapture_v2_params_st, cuStreamBeginCapture_v2_ptsz_params_st { hStream => stream, mode => mode });
    both!(Begin, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph, CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
        cuStreamBeginCaptureToGraph_params_st, cuStreamBeginCaptureToGraph_ptsz_params_st { hStream => stream, mode => mode });
    both!(End, CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture, CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture_ptsz,
        cuStreamEndCapture_params_st, cuStreamEndCapture_ptsz_params_st { hStream => stream, phGraph => out });
    both!(Instantiate, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz,
        cuGraphInstantiateWithParams_params_st, cuGraphInstantiateWithParams_ptsz_params_st { phGraphExec => out, hGraph => graph });
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
        Instantiate,
        false,
        Some(
            reader!(cuGraphInstantiateWithFlags_params_st { phGraphExec => out, hGraph => graph }),
        ),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate,
        Instantiate,
        false,
        Some(reader!(cuGraphInstantiate_params_st { phGraphExec => out, hGraph => graph })),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
        Instantiate,
        false,
        Some(reader!(cuGraphInstantiate_v2_params_st { phGraphExec => out, hGraph => graph })),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuEventQuery,
        EventSync,
        false,
        Some(reader!(cuEventQuery_params_st { hEvent => event })),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
        EventSync,
        false,
        Some(reader!(cuEventSynchronize_params_st { hEvent => event })),
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
        Sync,
        false,
        None,
    );
    set(
        D::CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
        Sync,
        false,
        None,
    );
    // Synchronous copies and sets: the legacy stream, or the per-thread stream for _ptds.
    for id in [
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2,
    ] {
        set(id, Work, false, None);
    }
    for id in [
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds,
    ] {
        set(id, Work, true, None);
    }
    t
}

/// The runtime domain: used only for begin, end and instantiate when the runtime call made no
/// driver call CUPTI reported (the driver table does the work otherwise).
pub(crate) fn runtime_table() -> Vec<Spec> {
    let mut t = vec![Spec::OTHER; R::CUPTI_RUNTIME_TRACE_CBID_SIZE as usize];
    let mut set = |id: R, kind: Kind, per_thread: bool, read: Reader| {
        if let Some(s) = t.get_mut(id as usize) {
            *s = Spec {
                kind,
                per_thread,
                read: Some(read),
            };
        }
    };
    use Kind::*;
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000,
        Begin,
        false,
        reader!(cudaStreamBeginCapture_v10000_params_st { stream => stream, mode => mode }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_ptsz_v10000,
        Begin,
        true,
        reader!(cudaStreamBeginCapture_ptsz_v10000_params_st { stream => stream, mode => mode }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_v12030,
        Begin,
        false,
        reader!(cudaStreamBeginCaptureToGraph_v12030_params_st { stream => stream, mode => mode }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCaptureToGraph_ptsz_v12030,
        Begin,
        true,
        reader!(cudaStreamBeginCaptureToGraph_ptsz_v12030_params_st { stream => stream, mode => mode }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000,
        End,
        false,
        reader!(cudaStreamEndCapture_v10000_params_st { stream => stream, pGraph => out }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_ptsz_v10000,
        End,
        true,
        reader!(cudaStreamEndCapture_ptsz_v10000_params_st { stream => stream, pGraph => out }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000,
        Instantiate,
        false,
        reader!(cudaGraphInstantiate_v12000_params_st { pGraphExec => out, graph => graph }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040,
        Instantiate,
        false,
        reader!(cudaGraphInstantiateWithFlags_v11040_params_st { pGraphExec => out, graph => graph }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000,
        Instantiate,
        false,
        reader!(cudaGraphInstantiateWithParams_v12000_params_st { pGraphExec => out, graph => graph }),
    );
    set(
        R::CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000,
        Instantiate,
        true,
        reader!(cudaGraphInstantiateWithParams_ptsz_v12000_params_st { pGraphExec => out, graph => graph }),
    );
    t
}

/// `CUgraphNodeType` names.
pub(crate) fn node_kind(raw: u32) -> &'static str {
    match raw {
        0 => "kernel",
        1 => "memcpy",
        2 => "memset",
        3 => "host",
        4 => "graph",
        5 => "empty",
        6 => "wait_event",
        7 => "event_record",
        8 => "ext_semas_signal",
        9 => "ext_semas_wait",
        10 => "mem_alloc",
        11 => "mem_free",
        12 => "batch_mem_op",
        13 => "conditional",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_find_the_stream() {
        let t = driver_table();
        let spec = t[D::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel as usize];
        assert_eq!(spec.kind, Kind::Work);
        // SAFETY: an all-zero cuLaunchKernel_params_st is valid (pointers and integers).
        let mut p: cs::cuLaunchKernel_params_st = unsafe { std::mem::zeroed() };
        p.hStream = 0x1234 as _;
        let args = (spec.read.unwrap())((&p as *const cs::cuLaunchKernel_params_st).cast());
        assert_eq!(spec.stream(&args), Some(0x1234));
        p.hStream = std::ptr::null_mut();
        let args = (spec.read.unwrap())((&p as *const cs::cuLaunchKernel_params_st).cast());
        assert_eq!(spec.stream(&args), Some(0), "NULL is the legacy stream");
        let ptsz = t[D::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz as usize];
        assert_eq!(ptsz.stream(&args), Some(PER_THREAD));
        let sync_copy = t[D::CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2 as usize];
        assert_eq!(sync_copy.stream(&Args::default()), Some(0));
    }

    #[test]
    fn begin_reads_the_mode_as_an_integer() {
        let t = driver_table();
        let spec = t[D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2 as usize];
        assert_eq!(spec.kind, Kind::Begin);
        #[repr(C)]
        struct Raw {
            stream: usize,
            mode: u32,
        }
        let raw = Raw {
            stream: 0x99,
            mode: 7,
        };
        let args = (spec.read.unwrap())((&raw as *const Raw).cast());
        assert_eq!(args.mode, Some(7));
        assert_eq!(args.stream, Some(0x99));
    }
}
