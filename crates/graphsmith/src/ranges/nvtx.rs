//! NVTX ranges without an NVTX library, the way the header-only NVTX3 does it.
//!
//! cudarc's `nvtx` module links `libnvToolsExt.so`, the NVTX2 library that CUDA 12.9 deprecated
//! and CUDA 13 no longer ships (our H200 with CUDA 13.0 has none), and it panics when the library
//! is missing. NVTX3 needs no library: on the first NVTX call it reads `NVTX_INJECTION64_PATH`
//! (which Nsight Systems and Nsight Compute set), `dlopen`s that tool, calls its
//! `InitializeInjectionNvtx2` with a `GetExportTable` function, and the tool writes its own
//! implementations into our function-pointer slots. Without the variable nothing is loaded and
//! every range costs one atomic load. This file implements that protocol (NVTX load sequence 1,
//! `nvtxDetail/nvtxInit.h` and `nvtxImpl.h` of NVIDIA/NVTX) for the calls graphsmith makes:
//! `nvtxRangePushA` and `nvtxRangePop`. Set `GRAPHSMITH_NVTX=0` to keep graphsmith from loading
//! any tool.

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Once, OnceLock};

/// `NvtxGetExportTableFunc_t`.
pub(crate) type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;
/// `NvtxInitializeInjectionNvtxFunc_t`.
pub(crate) type InitInjection = unsafe extern "C" fn(GetExportTable) -> c_int;
type PushA = unsafe extern "C" fn(*const c_char) -> c_int;
type Pop = unsafe extern "C" fn() -> c_int;

/// `NVTX_CB_MODULE_*` ids 1..=6 (CORE, CUDA, OPENCL, CUDART, CORE2, SYNC) and each module's
/// `NVTX_CBID_*_SIZE`. Every module gets a table, as NVTX3 gives one, so a tool asking for any of
/// them is served; graphsmith only calls CORE's RangePushA (9) and RangePop (11).
const MODULE_SIZES: [usize; 7] = [0, 16, 9, 15, 7, 16, 7];
const MODULE_CORE: usize = 1;
const CBID_CORE_RANGE_PUSH_A: usize = 9;
const CBID_CORE_RANGE_POP: usize = 11;
const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const NVTX_VERSION: u32 = 3;

/// The function-pointer slots a tool fills in, by module and callback id.
static SLOTS: [[AtomicPtr<c_void>; 17]; 7] =
    [const { [const { AtomicPtr::new(null_mut()) }; 17] }; 7];

/// Per module: `[0, &slot[1], .., &slot[size-1], 0]`, addresses kept as `usize` so the tables
/// can live in a static. Built once, never moved.
fn tables() -> &'static Vec<Vec<usize>> {
    static TABLES: OnceLock<Vec<Vec<usize>>> = OnceLock::new();
    TABLES.get_or_init(|| {
        MODULE_SIZES
            .iter()
            .enumerate()
            .map(|(module, &size)| {
                let mut t = vec![0usize; size + 1];
                for (cbid, entry) in t.iter_mut().enumerate().take(size).skip(1) {
                    *entry = SLOTS[module][cbid].as_ptr() as usize;
                }
                t
            })
            .collect()
    })
}

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct Callbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_int, *mut *const usize, *mut u32) -> c_int,
}

/// `NvtxExportTableVersionInfo`.
#[repr(C)]
struct VersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: unsafe extern "C" fn(u32),
}

static CALLBACKS: Callbacks = Callbacks {
    struct_size: std::mem::size_of::<Callbacks>(),
    get_module_function_table,
};

static VERSION_INFO: VersionInfo = VersionInfo {
    struct_size: std::mem::size_of::<VersionInfo>(),
    version: NVTX_VERSION,
    reserved0: 0,
    set_injection_nvtx_version,
};

unsafe extern "C" fn get_module_function_table(
    module: c_int,
    out_table: *mut *const usize,
    out_size: *mut u32,
) -> c_int {
    let Some(table) = usize::try_from(module)
        .ok()
        .filter(|&m| (1..MODULE_SIZES.len()).contains(&m))
        .map(|m| &tables()[m])
    else {
        return 0;
    };
    if !out_size.is_null() {
        // SAFETY: the tool passed a writable location (non-null checked).
        unsafe { *out_size = (table.len() - 1) as u32 };
    }
    if !out_table.is_null() {
        // SAFETY: as above; the table is 'static.
        unsafe { *out_table = table.as_ptr() };
    }
    1
}

unsafe extern "C" fn set_injection_nvtx_version(_version: u32) {}

unsafe extern "C" fn get_export_table(id: u32) -> *const c_void {
    match id {
        ETID_CALLBACKS => &CALLBACKS as *const Callbacks as *const c_void,
        ETID_VERSIONINFO => &VERSION_INFO as *const VersionInfo as *const c_void,
        _ => std::ptr::null(),
    }
}

/// Runs the NVTX3 handshake with a tool's init function. On failure every slot is cleared, so
/// graphsmith never calls into a tool that did not initialise.
///
/// # Safety
/// `init` must follow the NVTX injection protocol (write only function pointers of the right
/// types into the slots it is given).
pub(crate) unsafe fn attach(init: InitInjection) -> bool {
    tables();
    // SAFETY: the caller vouches for init; get_export_table serves 'static tables.
    let ok = unsafe { init(get_export_table) } != 0;
    if !ok {
        for module in &SLOTS {
            for slot in module {
                slot.store(null_mut(), Ordering::Release);
            }
        }
    }
    ok
}

static INIT: Once = Once::new();

fn init() {
    INIT.call_once(|| {
        if std::env::var_os("GRAPHSMITH_NVTX").is_some_and(|v| v == "0") {
            return;
        }
        #[cfg(unix)]
        if let Some(path) = std::env::var_os("NVTX_INJECTION64_PATH") {
            load(&path);
        }
    });
}

#[cfg(unix)]
fn load(path: &std::ffi::OsStr) {
    use std::os::unix::ffi::OsStrExt;
    extern "C" {
        fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    const RTLD_LAZY: c_int = 1;
    let Ok(path) = CString::new(path.as_bytes()) else {
        return;
    };
    // SAFETY: path is NUL-terminated; loading the library a profiler named in
    // NVTX_INJECTION64_PATH is exactly what every NVTX3 client does. The handle is kept for
    // the life of the process (NVTX3 never unloads a tool that initialised).
    let handle = unsafe { dlopen(path.as_ptr(), RTLD_LAZY) };
    if handle.is_null() {
        return;
    }
    // SAFETY: handle is live; the name is NUL-terminated.
    let sym = unsafe { dlsym(handle, c"InitializeInjectionNvtx2".as_ptr()) };
    if sym.is_null() {
        return;
    }
    // SAFETY: NVTX tools export InitializeInjectionNvtx2 with the InitInjection signature.
    let init: InitInjection = unsafe { std::mem::transmute::<*mut c_void, InitInjection>(sym) };
    // SAFETY: the symbol is the tool's NVTX entry point.
    unsafe { attach(init) };
}

/// `nvtxRangePushA(name)` when a tool is attached; otherwise nothing.
pub(crate) fn push(name: &str) {
    init();
    let f = SLOTS[MODULE_CORE][CBID_CORE_RANGE_PUSH_A].load(Ordering::Acquire);
    if f.is_null() {
        return;
    }
    let name = CString::new(name.replace('\0', " ")).unwrap_or_default();
    // SAFETY: a non-null slot was written by a tool that initialised through `attach`, with its
    // nvtxRangePushA implementation; name is NUL-terminated and lives across the call.
    unsafe { std::mem::transmute::<*mut c_void, PushA>(f)(name.as_ptr()) };
}

/// `nvtxRangePop()` when a tool is attached; otherwise nothing.
pub(crate) fn pop() {
    let f = SLOTS[MODULE_CORE][CBID_CORE_RANGE_POP].load(Ordering::Acquire);
    if f.is_null() {
        return;
    }
    // SAFETY: as in push: the tool's nvtxRangePop implementation.
    unsafe { std::mem::transmute::<*mut c_void, Pop>(f)() };
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    static EVENTS: Mutex<Vec<(ThreadId, String)>> = Mutex::new(Vec::new());

    unsafe extern "C" fn test_push(name: *const c_char) -> c_int {
        // SAFETY: graphsmith passes a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
        let me = std::thread::current().id();
        EVENTS.lock().unwrap().push((me, format!("push {name}")));
        0
    }

    unsafe extern "C" fn test_pop() -> c_int {
        let me = std::thread::current().id();
        EVENTS.lock().unwrap().push((me, "pop".into()));
        0
    }

    /// A tool as Nsight would be: asks for the CORE table through the export table and fills
    /// RangePushA and RangePop.
    unsafe extern "C" fn test_tool(get: GetExportTable) -> c_int {
        // SAFETY: the protocol: id 1 is the callbacks table.
        let callbacks = unsafe { &*(get(ETID_CALLBACKS) as *const Callbacks) };
        // SAFETY: id 3 is the version info.
        let version = unsafe { &*(get(ETID_VERSIONINFO) as *const VersionInfo) };
        assert_eq!(version.version, 3);
        let (mut table, mut size) = (std::ptr::null(), 0u32);
        // SAFETY: valid out pointers.
        let ok = unsafe { (callbacks.get_module_function_table)(1, &mut table, &mut size) };
        assert_eq!((ok, size), (1, 16));
        // SAFETY: entries 1..size are addresses of slots; the tool writes function pointers.
        unsafe {
            let slot = |i: usize| *table.add(i) as *mut *mut c_void;
            *slot(CBID_CORE_RANGE_PUSH_A) = test_push as *mut c_void;
            *slot(CBID_CORE_RANGE_POP) = test_pop as *mut c_void;
            assert_eq!(*table.add(16), 0, "the table ends with a null entry");
        }
        // Unknown modules are refused, as NVTX3 refuses them.
        // SAFETY: valid out pointers.
        assert_eq!(
            unsafe { (callbacks.get_module_function_table)(7, &mut table, &mut size) },
            0
        );
        1
    }

    #[test]
    fn ranges_reach_an_attached_nvtx_tool_in_order() {
        init();
        // SAFETY: test_tool follows the protocol.
        assert!(unsafe { attach(test_tool) });
        {
            let _outer = crate::range("layer-3");
            let _inner = crate::range("attention\0x");
        }
        let me = std::thread::current().id();
        let mine: Vec<String> = EVENTS
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == me)
            .map(|(_, e)| e.clone())
            .collect();
        assert_eq!(
            mine,
            ["push layer-3", "push attention x", "pop", "pop"].map(String::from)
        );
    }
}
