//! Device time of graph launches for `--graphs`: CUPTI's activity API with
//! `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`, one record per graph launch with its start and end on the
//! device (not one per node). Each record carries the correlation id of the `cuGraphLaunch`
//! that made it, which the callback saw at the launch's entry ([`launched`]); records whose
//! launch was not seen are matched by CUPTI's id of the executable when they can be.
//!
//! Buffers are allocated with `malloc` when CUPTI asks ([`buffer_requested`]) and freed when it
//! hands them back full ([`buffer_completed`], on CUPTI's own thread, or inside
//! `cuptiActivityFlushAll` at exit, [`finish`]). No lock is held while CUPTI is called.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys::{
    CUpti_ActivityGraphTrace, CUpti_BuffersCallbackCompleteFunc, CUpti_BuffersCallbackRequestFunc,
};

use super::api::{Cupti, Status};
use super::lock::lock;
use crate::graphs::event::DeviceTimes;

/// `CUPTI_ACTIVITY_KIND_GRAPH_TRACE`.
const GRAPH_TRACE: u32 = 51;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`: flush buffers even when not full.
const FLUSH_FORCED: u32 = 1;
/// Bytes per activity buffer (a graph trace record is 56 bytes).
const BUFFER_BYTES: usize = 2 << 20;
/// Launches awaiting their record at most; past it, records go unmatched.
const MAX_PENDING: usize = 1 << 20;

type RegisterCallbacks = unsafe extern "C" fn(
    CUpti_BuffersCallbackRequestFunc,
    CUpti_BuffersCallbackCompleteFunc,
) -> Status;
type Enable = unsafe extern "C" fn(u32) -> Status;
type GetNextRecord = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> Status;
type FlushAll = unsafe extern "C" fn(u32) -> Status;
type NumDropped = unsafe extern "C" fn(*mut std::ffi::c_void, u32, *mut usize) -> Status;
type GraphExecId = unsafe extern "C" fn(u64, *mut u32) -> Status;

struct Api {
    get_next: GetNextRecord,
    flush_all: FlushAll,
    dropped: Option<NumDropped>,
    exec_id: Option<GraphExecId>,
}

/// The activity functions once the graph trace is enabled, or why it is not.
static API: OnceLock<Result<Api, String>> = OnceLock::new();
static ON: AtomicBool = AtomicBool::new(false);
/// correlation id -> (executable, the seq of its instantiation).
static PENDING: OnceLock<Mutex<HashMap<u32, (u64, u64)>>> = OnceLock::new();
/// CUPTI's executable id -> (executable, seq of its instantiation).
static EXEC_IDS: OnceLock<Mutex<HashMap<u32, (u64, u64)>>> = OnceLock::new();
static TIMES: OnceLock<Mutex<HashMap<(u64, u64), DeviceTimes>>> = OnceLock::new();
static RECORDS: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static UNMATCHED: AtomicU64 = AtomicU64::new(0);

fn map<K, V>(m: &'static OnceLock<Mutex<HashMap<K, V>>>) -> &'static Mutex<HashMap<K, V>> {
    m.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A lock taken at exit: waits up to about 200 ms for a thread that holds it (CUPTI's own, while
/// it hands a buffer back), and gives up rather than hang on one that died holding it.
pub(crate) fn lock_at_exit<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    for _ in 0..200 {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
        }
    }
    None
}

/// Whether the graph trace runs.
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Registers the buffer callbacks and enables the graph trace. On failure, the reason is kept
/// for the report and launches are counted without device time.
pub(crate) fn start(cupti: &Cupti) {
    let api = API.get_or_init(|| {
        let register: RegisterCallbacks = cupti.symbol("cuptiActivityRegisterCallbacks")?;
        let enable: Enable = cupti.symbol("cuptiActivityEnable")?;
        let api = Api {
            get_next: cupti.symbol("cuptiActivityGetNextRecord")?,
            flush_all: cupti.symbol("cuptiActivityFlushAll")?,
            dropped: cupti.symbol("cuptiActivityGetNumDroppedRecords").ok(),
            exec_id: cupti.symbol("cuptiGetGraphExecId").ok(),
        };
        // SAFETY: both callbacks have the C signatures cupti.h declares for
        // CUpti_BuffersCallbackRequestFunc and CUpti_BuffersCallbackCompleteFunc, never
        // unwind (catch_unwind), and live as long as the library, which stays loaded.
        let r = unsafe { register(Some(buffer_requested), Some(buffer_completed)) };
        if r != 0 {
            return Err(format!(
                "cuptiActivityRegisterCallbacks: {}",
                cupti.describe(r)
            ));
        }
        // SAFETY: enabling an activity kind by its cupti.h value; no pointer involved.
        let r = unsafe { enable(GRAPH_TRACE) };
        if r != 0 {
            return Err(format!(
                "cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE): {}",
                cupti.describe(r)
            ));
        }
        Ok(api)
    });
    ON.store(api.is_ok(), Ordering::Relaxed);
}

/// A graph launch entered (its correlation id, executable and instantiation).
pub(crate) fn launched(correlation: u32, exec: u64, instantiated: u64) {
    let mut m = lock(map(&PENDING));
    if m.len() < MAX_PENDING {
        m.insert(correlation, (exec, instantiated));
    }
}

/// A graph launch failed: no record will come.
pub(crate) fn failed(correlation: u32) {
    if on() {
        lock(map(&PENDING)).remove(&correlation);
    }
}

/// A new executable: remembered by CUPTI's id for it, for records whose launch was not seen.
pub(crate) fn instantiated(exec: u64, seq: u64) {
    let Some(Ok(api)) = API.get().filter(|_| on()) else {
        return;
    };
    let Some(get) = api.exec_id else { return };
    let mut id = 0u32;
    // SAFETY: exec was just instantiated by the call whose exit this is; id is a local.
    if unsafe { get(exec, &mut id) } == 0 {
        lock(map(&EXEC_IDS)).insert(id, (exec, seq));
    }
}

extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = std::panic::catch_unwind(|| {
        if buffer.is_null() || size.is_null() {
            return;
        }
        // SAFETY: malloc returns memory aligned for any fundamental type (16 bytes), more than
        // the 8 CUPTI needs, or NULL.
        let p = unsafe { libc::malloc(BUFFER_BYTES) }.cast::<u8>();
        // SAFETY: CUPTI passes valid pointers to its out-parameters; a NULL buffer with size 0
        // tells it that no buffer is available (it drops records and counts them).
        unsafe {
            *buffer = p;
            *size = if p.is_null() { 0 } else { BUFFER_BYTES };
            if !max_records.is_null() {
                *max_records = 0;
            }
        }
    });
}

extern "C" fn buffer_completed(
    context: cudarc::driver::sys::CUcontext,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(api)) = API.get() {
            read_records(api, buffer, valid);
            if let Some(dropped) = api.dropped {
                let mut n = 0usize;
                // SAFETY: context and stream are the ones CUPTI passed with this buffer; n is
                // a local.
                if unsafe { dropped(context.cast(), stream, &mut n) } == 0 {
                    DROPPED.fetch_add(n as u64, Ordering::Relaxed);
                }
            }
        }
    });
    if !buffer.is_null() {
        // SAFETY: every buffer CUPTI hands back was allocated with malloc in buffer_requested,
        // and CUPTI hands each back once.
        unsafe { libc::free(buffer.cast()) };
    }
}

fn read_records(api: &Api, buffer: *mut u8, valid: usize) {
    if buffer.is_null() || valid == 0 {
        return;
    }
    let mut record: *mut u8 = std::ptr::null_mut();
    loop {
        // SAFETY: buffer holds `valid` bytes of records CUPTI wrote; record is the previous
        // record (NULL at first), as cuptiActivityGetNextRecord expects.
        if unsafe { (api.get_next)(buffer, valid, &mut record) } != 0 || record.is_null() {
            break;
        }
        // SAFETY: every record starts with its 32-bit kind.
        let kind = unsafe { record.cast::<u32>().read_unaligned() };
        if kind != GRAPH_TRACE {
            continue;
        }
        // SAFETY: a record of kind GRAPH_TRACE is a CUpti_ActivityGraphTrace2, whose leading
        // fields (kind, correlationId, start, end, deviceId, graphId) are those of
        // CUpti_ActivityGraphTrace read here.
        let r = unsafe { record.cast::<CUpti_ActivityGraphTrace>().read_unaligned() };
        RECORDS.fetch_add(1, Ordering::Relaxed);
        let launch = lock(map(&PENDING)).remove(&r.correlationId);
        let owner = launch.or_else(|| lock(map(&EXEC_IDS)).get(&r.graphId).copied());
        let Some(key) = owner else {
            UNMATCHED.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        if r.start == 0 && r.end == 0 {
            continue;
        }
        lock(map(&TIMES))
            .entry(key)
            .or_default()
            .add(r.end.saturating_sub(r.start));
    }
}

/// What the graph trace measured.
#[derive(Default)]
pub(crate) struct Measured {
    pub times: HashMap<(u64, u64), DeviceTimes>,
    pub off: Option<String>,
    pub records: u64,
    pub dropped: u64,
    pub unmatched: u64,
}

/// At exit: flushes CUPTI's buffers (their records arrive through [`buffer_completed`]) and
/// returns the device times per executable.
pub(crate) fn finish() -> Measured {
    let api = match API.get() {
        None => {
            return Measured {
                off: Some("the tracer did not start CUPTI's activity API".into()),
                ..Measured::default()
            }
        }
        Some(Err(why)) => {
            return Measured {
                off: Some(why.clone()),
                ..Measured::default()
            }
        }
        Some(Ok(api)) => api,
    };
    // SAFETY: flushing every activity buffer; CUPTI calls buffer_completed for each, on this
    // thread, before returning. No lock of this module is held here.
    let r = unsafe { (api.flush_all)(FLUSH_FORCED) };
    let times = TIMES
        .get()
        .and_then(|m| lock_at_exit(m).map(|t| t.clone()))
        .unwrap_or_default();
    Measured {
        times,
        off: (r != 0).then(|| format!("cuptiActivityFlushAll failed (CUPTI error {r})")),
        records: RECORDS.load(Ordering::Relaxed),
        dropped: DROPPED.load(Ordering::Relaxed),
        unmatched: UNMATCHED.load(Ordering::Relaxed),
    }
}
