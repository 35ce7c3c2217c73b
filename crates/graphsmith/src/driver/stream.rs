//! Driver calls on streams, events and stream capture.

use cudarc::driver::sys;

use super::{check, Failure};

/// Creates a stream with `flags` (`cuStreamCreate`).
///
/// # Safety
/// A context must be current.
pub(crate) unsafe fn stream_create(flags: u32) -> Result<sys::CUstream, Failure> {
    let mut raw = std::ptr::null_mut();
    // SAFETY: a context is current (contract); raw is a local.
    check(
        unsafe { sys::cuStreamCreate(&mut raw, flags) },
        "cuStreamCreate",
    )?;
    Ok(raw)
}

/// Destroys a stream (`cuStreamDestroy`); work already queued still runs.
///
/// # Safety
/// `stream` must come from [`stream_create`] and be destroyed once.
pub(crate) unsafe fn stream_destroy(stream: sys::CUstream) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuStreamDestroy_v2(stream) },
        "cuStreamDestroy",
    )
}

/// Whether the stream may be waited for or queried now: not capturing, and (for the legacy
/// stream) no other stream captures in a way that forbids touching it (`cuStreamIsCapturing`
/// succeeds with `NONE`).
///
/// # Safety
/// `stream` must be live (or the legacy stream).
pub(crate) unsafe fn stream_idle_for_capture(stream: sys::CUstream) -> bool {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: stream is live (contract); status is a local.
    let rc = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    rc == sys::CUresult::CUDA_SUCCESS
        && status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
}

/// Waits for everything submitted to the stream (`cuStreamSynchronize`).
///
/// # Safety
/// `stream` must be live.
pub(crate) unsafe fn stream_synchronize(stream: sys::CUstream) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    )
}

/// Whether the stream has finished all its work (`cuStreamQuery`; `NOT_READY` is `false`).
///
/// # Safety
/// `stream` must be live.
pub(crate) unsafe fn stream_done(stream: sys::CUstream) -> Result<bool, Failure> {
    // SAFETY: forwarded contract.
    match unsafe { sys::cuStreamQuery(stream) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => check(other, "cuStreamQuery").map(|()| false),
    }
}

/// Makes `stream` wait for `event` (`cuStreamWaitEvent`).
///
/// # Safety
/// Both must be live and of one context.
pub(crate) unsafe fn stream_wait_event(
    stream: sys::CUstream,
    event: sys::CUevent,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuStreamWaitEvent(stream, event, 0) },
        "cuStreamWaitEvent",
    )
}

/// Launches `func` on `stream` with one argument pointer per parameter: `cuLaunchKernel`, or
/// with `programmatic`, `cuLaunchKernelEx` with the programmatic stream serialization attribute
/// (the launch may start before the stream's previous kernel finishes; the kernel waits for it
/// with `griddepcontrol.wait`).
///
/// # Safety
/// `func` must be live; `params` must hold one pointer per parameter of `func`, each to a
/// value of that parameter's size, alive for the call; `stream` must be live.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_kernel(
    func: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut std::ffi::c_void],
    programmatic: bool,
) -> Result<(), Failure> {
    if programmatic {
        // SAFETY: forwarded contract.
        return unsafe {
            launch_kernel_programmatic(func, grid, block, shared_mem_bytes, stream, params)
        };
    }
    // SAFETY: forwarded contract; no `extra` buffer.
    check(
        unsafe {
            sys::cuLaunchKernel(
                func,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        },
        "cuLaunchKernel",
    )
}

/// `cuLaunchKernelEx` with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` = 1.
///
/// # Safety
/// As [`launch_kernel`].
unsafe fn launch_kernel_programmatic(
    func: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: sys::CUstream,
    params: &mut [*mut std::ffi::c_void],
) -> Result<(), Failure> {
    // SAFETY: CUlaunchAttribute is plain data (an id and a union of integers): all zero is a
    // valid value, then the id and the one union member the id selects are set.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    let config = sys::CUlaunchConfig {
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared_mem_bytes,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: forwarded contract; `config` and the one attribute it points to are locals alive
    // for the call; no `extra` buffer.
    check(
        unsafe { sys::cuLaunchKernelEx(&config, func, params.as_mut_ptr(), std::ptr::null_mut()) },
        "cuLaunchKernelEx",
    )
}

/// Begins capturing `stream` (`cuStreamBeginCapture`).
///
/// # Safety
/// `stream` must be live.
pub(crate) unsafe fn begin_capture(
    stream: sys::CUstream,
    mode: sys::CUstreamCaptureMode,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuStreamBeginCapture_v2(stream, mode) },
        "cuStreamBeginCapture",
    )
}

/// Ends `stream`'s capture (`cuStreamEndCapture`): the graph, or the failure and any graph the
/// driver returned with it (the caller owns and must destroy it).
///
/// # Safety
/// `stream` must be live.
pub(crate) unsafe fn end_capture(stream: sys::CUstream) -> (Result<(), Failure>, sys::CUgraph) {
    let mut raw = std::ptr::null_mut();
    // SAFETY: forwarded contract; raw is a local.
    let rc = unsafe { sys::cuStreamEndCapture(stream, &mut raw) };
    (check(rc, "cuStreamEndCapture"), raw)
}

/// The driver's capture status of a stream.
pub(crate) enum CaptureStatus {
    None,
    /// Capturing into the capture with this id.
    Active(u64),
    Invalidated,
}

/// A stream's capture status and id (`cuStreamGetCaptureInfo`).
///
/// # Safety
/// `stream` must be live (or the legacy stream).
pub(crate) unsafe fn capture_status(stream: sys::CUstream) -> Result<CaptureStatus, Failure> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    use std::ptr::null_mut;
    // SAFETY: stream is live (contract); status and id are locals, the other outputs are
    // optional and null.
    check(
        unsafe {
            sys::cuStreamGetCaptureInfo_v3(
                stream,
                &mut status,
                &mut id,
                null_mut(),
                null_mut(),
                null_mut(),
                null_mut(),
            )
        },
        "cuStreamGetCaptureInfo",
    )?;
    use sys::CUstreamCaptureStatus as S;
    Ok(match status {
        S::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active(id),
        S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        _ => CaptureStatus::None,
    })
}

/// The node the last operation on a capturing stream became: its one dependency, when the
/// stream captures and depends on exactly one node (`cuStreamGetCaptureInfo`, asking only for
/// what is needed, since it runs once per captured operation).
///
/// # Safety
/// `stream` must be live.
pub(crate) unsafe fn captured_node(stream: sys::CUstream) -> Option<sys::CUgraphNode> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut deps: *const sys::CUgraphNode = std::ptr::null();
    let mut count = 0usize;
    use std::ptr::null_mut;
    // SAFETY: stream is live (contract); status, deps and count are locals, the other outputs
    // are optional and null. The array is read at once.
    let rc = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream,
            &mut status,
            null_mut(),
            null_mut(),
            &mut deps,
            null_mut(),
            &mut count,
        )
    };
    let active = status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if rc != sys::CUresult::CUDA_SUCCESS || !active || count != 1 || deps.is_null() {
        return None;
    }
    // SAFETY: the driver returned one valid node handle at deps.
    Some(unsafe { *deps })
}

/// Creates an event (`cuEventCreate`); `timing` keeps timestamps.
///
/// # Safety
/// A context must be current.
pub(crate) unsafe fn event_create(timing: bool) -> Result<sys::CUevent, Failure> {
    let flags = if timing {
        sys::CUevent_flags::CU_EVENT_DEFAULT
    } else {
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
    };
    let mut raw = std::ptr::null_mut();
    // SAFETY: a context is current (contract); raw is a local.
    check(
        unsafe { sys::cuEventCreate(&mut raw, flags as u32) },
        "cuEventCreate",
    )?;
    Ok(raw)
}

/// Destroys an event (`cuEventDestroy`).
///
/// # Safety
/// `event` must come from [`event_create`] and be destroyed once.
pub(crate) unsafe fn event_destroy(event: sys::CUevent) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(unsafe { sys::cuEventDestroy_v2(event) }, "cuEventDestroy")
}

/// Records `event` on `stream` (`cuEventRecord`).
///
/// # Safety
/// Both must be live and of one context.
pub(crate) unsafe fn event_record(
    event: sys::CUevent,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuEventRecord(event, stream) },
        "cuEventRecord",
    )
}

/// Waits for `event` (`cuEventSynchronize`).
///
/// # Safety
/// `event` must be live.
pub(crate) unsafe fn event_synchronize(event: sys::CUevent) -> Result<(), Failure> {
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuEventSynchronize(event) },
        "cuEventSynchronize",
    )
}

/// Whether `event` has completed (`cuEventQuery`; `NOT_READY` is `false`).
///
/// # Safety
/// `event` must be live.
pub(crate) unsafe fn event_done(event: sys::CUevent) -> Result<bool, Failure> {
    // SAFETY: forwarded contract.
    match unsafe { sys::cuEventQuery(event) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        rc => check(rc, "cuEventQuery").map(|()| false),
    }
}

/// Milliseconds between two completed timing events (`cuEventElapsedTime`).
///
/// # Safety
/// Both must be live.
pub(crate) unsafe fn event_elapsed_ms(
    start: sys::CUevent,
    end: sys::CUevent,
) -> Result<f32, Failure> {
    let mut ms = 0.0f32;
    // SAFETY: forwarded contract; ms is a local.
    check(
        unsafe { sys::cuEventElapsedTime_v2(&mut ms, start, end) },
        "cuEventElapsedTime",
    )?;
    Ok(ms)
}

/// Records `event` on `stream` as a node of the stream's running capture
/// (`cuEventRecordWithFlags` with `CU_EVENT_RECORD_EXTERNAL`): the captured graph gets an
/// event record node, which records the event at every launch.
///
/// # Safety
/// Both must be live and of one context.
pub(crate) unsafe fn event_record_external(
    event: sys::CUevent,
    stream: sys::CUstream,
) -> Result<(), Failure> {
    let flags = sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32;
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuEventRecordWithFlags(event, stream, flags) },
        "cuEventRecordWithFlags",
    )
}

/// Makes `stream`'s running capture wait for `event` as a node (`cuStreamWaitEvent` with
/// `CU_EVENT_WAIT_EXTERNAL`): the captured graph gets an event wait node, which waits for the
/// event's latest record at every launch.
///
/// # Safety
/// Both must be live and of one context.
pub(crate) unsafe fn stream_wait_event_external(
    stream: sys::CUstream,
    event: sys::CUevent,
) -> Result<(), Failure> {
    let flags = sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32;
    // SAFETY: forwarded contract.
    check(
        unsafe { sys::cuStreamWaitEvent(stream, event, flags) },
        "cuStreamWaitEvent",
    )
}
