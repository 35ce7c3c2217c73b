//! The tracer as the NVTX injection library: `graphsmith trace` sets `NVTX_INJECTION64_PATH` to
//! this library, every NVTX instance in the process (each library built with the header-only
//! NVTX3 has its own, e.g. `torch._C._nvtx` in PyTorch) loads it on its first NVTX call and calls
//! [`InitializeInjectionNvtx2`], and the tracer fills that instance's function table with its own
//! range push/pop handlers. Each thread's range stack is kept here, readable from any thread, so
//! a failing call can be shown with its own ranges and those of the capturing thread.
//!
//! The protocol (export table ids, module ids, slot numbers) is NVTX3's `nvtxTypes.h`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::nvtx::sys::{nvtxDomainHandle_t, nvtxEventAttributes_t, nvtxStringHandle_t, wchar_t};

use super::lock::lock;
use super::thread;
use crate::event::{Event, NvtxInit};

/// Longest range text kept, in characters; deepest stack kept.
const MAX_TEXT: usize = 256;
const MAX_DEPTH: usize = 128;

#[derive(Clone, Debug)]
struct Entry {
    /// The domain handle (0: the global domain).
    domain: usize,
    text: String,
}

type Stack = Arc<Mutex<Vec<Entry>>>;

fn threads() -> &'static Mutex<HashMap<u32, Stack>> {
    static T: OnceLock<Mutex<HashMap<u32, Stack>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

thread_local! {
    static MINE: RefCell<Option<Stack>> = const { RefCell::new(None) };
}

/// This thread's stack, registered on first use.
fn my_stack() -> Option<Stack> {
    MINE.try_with(|m| {
        let mut m = m.try_borrow_mut().ok()?;
        let s = m.get_or_insert_with(|| {
            let s: Stack = Arc::default();
            lock(threads()).insert(thread::tid(), s.clone());
            s
        });
        Some(s.clone())
    })
    .ok()
    .flatten()
}

fn domain_name(domain: usize) -> Option<String> {
    if domain == 0 {
        return None;
    }
    // SAFETY: a non-null domain handle given to an instance attached to the tracer was created
    // by `domain_create` below: a leaked, never freed `Box<String>`.
    Some(unsafe { &*(domain as *const String) }.clone())
}

fn show(e: &Entry) -> String {
    match domain_name(e.domain) {
        Some(d) => format!("[{d}] {}", e.text),
        None => e.text.clone(),
    }
}

/// Pushes a range on this thread's stack; returns the 0-based depth, as `nvtxRangePush` does.
pub(crate) fn push(domain: usize, text: String) -> c_int {
    let Some(s) = my_stack() else { return -1 };
    let mut s = lock(&s);
    if s.len() < MAX_DEPTH {
        s.push(Entry { domain, text });
    }
    s.len() as c_int - 1
}

/// Pops this thread's innermost range of a domain; returns its depth, or -1 when none is open.
pub(crate) fn pop(domain: usize) -> c_int {
    let Some(s) = my_stack() else { return -1 };
    let mut s = lock(&s);
    match s.iter().rposition(|e| e.domain == domain) {
        Some(i) => {
            s.remove(i);
            i as c_int
        }
        None => -1,
    }
}

/// This thread's ranges, outermost first.
pub(crate) fn current_ranges() -> Vec<String> {
    my_stack()
        .map(|s| lock(&s).iter().map(show).collect())
        .unwrap_or_default()
}

/// Another thread's ranges.
pub(crate) fn ranges_of(tid: u32) -> Vec<String> {
    let s = lock(threads()).get(&tid).cloned();
    s.map(|s| lock(&s).iter().map(show).collect())
        .unwrap_or_default()
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: NVTX's ASCII arguments are NUL-terminated strings owned by the caller for the
    // duration of the call; the text is copied out.
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    s.chars().take(MAX_TEXT).collect()
}

fn wide(p: *const wchar_t) -> String {
    let mut out = String::new();
    if p.is_null() {
        return out;
    }
    for i in 0..MAX_TEXT {
        // SAFETY: NVTX's wide arguments are NUL-terminated wchar_t strings; reading stops at the
        // terminator (or at MAX_TEXT characters, before it).
        let c = unsafe { *p.add(i) };
        if c == 0 {
            break;
        }
        out.push(char::from_u32(c as u32).unwrap_or('?'));
    }
    out
}

/// The message of an event attribute structure (ASCII, wide or registered).
fn message(attr: *const nvtxEventAttributes_t) -> String {
    if attr.is_null() {
        return String::new();
    }
    // SAFETY: a non-null attribute pointer from NVTX points to an nvtxEventAttributes_t the
    // caller filled; `size` says how much of it is there, checked before reading the message.
    let a = unsafe { &*attr };
    let needed =
        std::mem::offset_of!(nvtxEventAttributes_t, message) + std::mem::size_of::<usize>();
    if (a.size as usize) < needed {
        return String::new();
    }
    // SAFETY: messageType says which union member the caller set; registered handles are
    // created by `register_string` below (leaked CStrings).
    unsafe {
        match a.messageType {
            1 => text(a.message.ascii),
            2 => wide(a.message.unicode),
            3 => text(a.message.registered as *const c_char),
            _ => String::new(),
        }
    }
}

fn guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

extern "C" fn range_push_a(msg: *const c_char) -> c_int {
    guard(-1, || push(0, text(msg)))
}
extern "C" fn range_push_w(msg: *const wchar_t) -> c_int {
    guard(-1, || push(0, wide(msg)))
}
extern "C" fn range_push_ex(attr: *const nvtxEventAttributes_t) -> c_int {
    guard(-1, || push(0, message(attr)))
}
extern "C" fn range_pop() -> c_int {
    guard(-1, || pop(0))
}
extern "C" fn domain_range_push_ex(
    d: nvtxDomainHandle_t,
    attr: *const nvtxEventAttributes_t,
) -> c_int {
    guard(-1, || push(d as usize, message(attr)))
}
extern "C" fn domain_range_pop(d: nvtxDomainHandle_t) -> c_int {
    guard(-1, || pop(d as usize))
}
extern "C" fn name_os_thread_a(tid: u32, name: *const c_char) {
    guard((), || {
        thread::set_given_name(tid, text(name));
    })
}
extern "C" fn name_os_thread_w(tid: u32, name: *const wchar_t) {
    guard((), || {
        thread::set_given_name(tid, wide(name));
    })
}
fn register_string(s: String) -> nvtxStringHandle_t {
    let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
    // Leaked on purpose: NVTX string handles live as long as the process.
    c.into_raw() as nvtxStringHandle_t
}
extern "C" fn register_string_a(_d: nvtxDomainHandle_t, s: *const c_char) -> nvtxStringHandle_t {
    guard(std::ptr::null_mut(), || register_string(text(s)))
}
extern "C" fn register_string_w(_d: nvtxDomainHandle_t, s: *const wchar_t) -> nvtxStringHandle_t {
    guard(std::ptr::null_mut(), || register_string(wide(s)))
}
fn domain_create(name: String) -> nvtxDomainHandle_t {
    // Leaked on purpose: a destroyed domain's handle may still sit in a stack entry.
    Box::into_raw(Box::new(name)) as nvtxDomainHandle_t
}
extern "C" fn domain_create_a(name: *const c_char) -> nvtxDomainHandle_t {
    guard(std::ptr::null_mut(), || domain_create(text(name)))
}
extern "C" fn domain_create_w(name: *const wchar_t) -> nvtxDomainHandle_t {
    guard(std::ptr::null_mut(), || domain_create(wide(name)))
}

type Slot = *mut Option<unsafe extern "C" fn()>;
type GetModuleFunctionTable = unsafe extern "C" fn(u32, *mut *mut Slot, *mut u32) -> c_int;
type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;

#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: Option<GetModuleFunctionTable>,
}

#[repr(C)]
struct ExportTableVersionInfo {
    struct_size: usize,
    version: u32,
    reserved0: u32,
    set_injection_nvtx_version: Option<unsafe extern "C" fn(u32)>,
}

const ETID_CALLBACKS: u32 = 1;
const ETID_VERSIONINFO: u32 = 3;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

/// Fills one module's slots. `Err` when the instance has no such module.
///
/// # Safety
/// `get` must be the `GetModuleFunctionTable` of a live NVTX instance.
unsafe fn fill(
    get: GetModuleFunctionTable,
    module: u32,
    slots: &[(usize, Erased)],
) -> Result<(), ()> {
    let mut table: *mut Slot = std::ptr::null_mut();
    let mut size: u32 = 0;
    // SAFETY: the caller passes a live NVTX instance's function; it writes the table pointer
    // and its size (entries are 1..size) into the two locals.
    if unsafe { get(module, &mut table, &mut size) } == 0 || table.is_null() {
        return Err(());
    }
    for &(index, f) in slots {
        if index >= size as usize {
            continue;
        }
        // SAFETY: index < size, so table[index] is inside the instance's table; each entry is
        // null or points to that instance's function pointer for the slot, which NVTX lets the
        // injection overwrite during initialisation.
        unsafe {
            let slot = *table.add(index);
            if !slot.is_null() {
                *slot = Some(f);
            }
        }
    }
    Ok(())
}

type Erased = unsafe extern "C" fn();
type Table = Vec<(usize, Erased)>;

/// Erases a handler's signature for NVTX's table, as NVTX's own table does.
macro_rules! erase {
    ($f:ident: $ty:ty) => {{
        // SAFETY: only the signature is erased; NVTX casts the slot back to the signature it
        // declares for it in nvtxTypes.h, which is `$ty` (checked by the `as` coercion).
        unsafe { std::mem::transmute::<$ty, Erased>($f as $ty) }
    }};
}

/// The CORE module's slots (NVTX_CBID_CORE_*) and the CORE2 module's (NVTX_CBID_CORE2_*).
fn handlers() -> (Table, Table) {
    type Attr = *const nvtxEventAttributes_t;
    type Domain = nvtxDomainHandle_t;
    let core = vec![
        (8, erase!(range_push_ex: extern "C" fn(Attr) -> c_int)),
        (
            9,
            erase!(range_push_a: extern "C" fn(*const c_char) -> c_int),
        ),
        (
            10,
            erase!(range_push_w: extern "C" fn(*const wchar_t) -> c_int),
        ),
        (11, erase!(range_pop: extern "C" fn() -> c_int)),
        (
            14,
            erase!(name_os_thread_a: extern "C" fn(u32, *const c_char)),
        ),
        (
            15,
            erase!(name_os_thread_w: extern "C" fn(u32, *const wchar_t)),
        ),
    ];
    let core2 = vec![
        (
            4,
            erase!(domain_range_push_ex: extern "C" fn(Domain, Attr) -> c_int),
        ),
        (5, erase!(domain_range_pop: extern "C" fn(Domain) -> c_int)),
        (
            10,
            erase!(register_string_a: extern "C" fn(Domain, *const c_char) -> nvtxStringHandle_t),
        ),
        (
            11,
            erase!(register_string_w: extern "C" fn(Domain, *const wchar_t) -> nvtxStringHandle_t),
        ),
        (
            12,
            erase!(domain_create_a: extern "C" fn(*const c_char) -> Domain),
        ),
        (
            13,
            erase!(domain_create_w: extern "C" fn(*const wchar_t) -> Domain),
        ),
    ];
    (core, core2)
}

static INSTANCES: AtomicU32 = AtomicU32::new(0);

/// NVTX's injection entry point: attaches one NVTX instance. Returns 1 (attached) or 0.
///
/// # Safety
/// Called by NVTX's loader with its instance's `nvtxGetExportTable`.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(
    get_export_table: Option<GetExportTable>,
) -> c_int {
    guard(0, || {
        super::quiet_panics();
        let Some(get) = get_export_table else {
            return 0;
        };
        // SAFETY: NVTX's nvtxGetExportTable returns a pointer to a static table of the type the
        // id names (ETID_CALLBACKS: NvtxExportTableCallbacks), or null.
        let callbacks = unsafe { get(ETID_CALLBACKS) }.cast::<ExportTableCallbacks>();
        if callbacks.is_null() {
            return 0;
        }
        // SAFETY: non-null, static in the NVTX instance; struct_size is checked before the
        // function pointer is read.
        let callbacks = unsafe { &*callbacks };
        if callbacks.struct_size < std::mem::size_of::<ExportTableCallbacks>() {
            return 0;
        }
        let Some(get_module) = callbacks.get_module_function_table else {
            return 0;
        };
        let (core, core2) = handlers();
        // SAFETY: get_module is this live instance's GetModuleFunctionTable.
        if unsafe { fill(get_module, MODULE_CORE, &core) }.is_err() {
            return 0;
        }
        // SAFETY: as above; an instance without the CORE2 module still gets the core ranges.
        let _ = unsafe { fill(get_module, MODULE_CORE2, &core2) };
        // SAFETY: ETID_VERSIONINFO names an NvtxExportTableVersionInfo, or null.
        let info = unsafe { get(ETID_VERSIONINFO) }.cast::<ExportTableVersionInfo>();
        let version = if info.is_null() {
            None
        } else {
            // SAFETY: non-null, static in the instance; struct_size checked before use.
            let info = unsafe { &*info };
            (info.struct_size >= std::mem::size_of::<ExportTableVersionInfo>()).then(|| {
                if let Some(set) = info.set_injection_nvtx_version {
                    // SAFETY: NVTX asks tools to report the NVTX version they were built for.
                    unsafe { set(2) };
                }
                info.version
            })
        };
        let instances = INSTANCES.fetch_add(1, Ordering::Relaxed) + 1;
        super::emit(|pid| {
            Event::Nvtx(NvtxInit {
                pid,
                instances,
                version,
            })
        });
        1
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_nest_per_domain_and_are_seen_from_other_threads() {
        std::thread::spawn(|| {
            assert_eq!(push(0, "outer".into()), 0);
            let d = domain_create("lib".into()) as usize;
            assert_eq!(push(d, "inner".into()), 1);
            assert_eq!(push(0, "leaf".into()), 2);
            assert_eq!(current_ranges(), ["outer", "[lib] inner", "leaf"]);
            let me = thread::tid();
            let seen = std::thread::spawn(move || ranges_of(me)).join().unwrap();
            assert_eq!(seen, ["outer", "[lib] inner", "leaf"]);
            assert_eq!(pop(d), 1);
            assert_eq!(current_ranges(), ["outer", "leaf"]);
            assert_eq!(pop(0), 1);
            assert_eq!(pop(0), 0);
            assert_eq!(pop(0), -1);
        })
        .join()
        .unwrap();
    }
}
