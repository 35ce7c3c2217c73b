//! Native backtraces at failing calls and escapes: captured only there (never on the fast path),
//! at most [`MAX_BACKTRACES`] per process, symbolised in the process with the `backtrace` crate
//! (C++ names demangled), the frames of the tracer, CUPTI and the driver dropped from the top.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::Frame;

pub(crate) const MAX_BACKTRACES: u64 = 64;
const MAX_FRAMES: usize = 48;

static TAKEN: AtomicU64 = AtomicU64::new(0);
pub(crate) static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// The shared object holding an address (`dladdr`), file name only, and the nearest exported
/// symbol.
fn module_of(ip: *mut c_void) -> (String, Option<String>) {
    // SAFETY: Dl_info is plain data; dladdr fills it or returns 0.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables for the address.
    if unsafe { libc::dladdr(ip, &mut info) } == 0 {
        return (String::new(), None);
    }
    let module = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
        let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
        path.rsplit('/').next().unwrap_or_default().to_string()
    };
    let sym = (!info.dli_sname.is_null()).then(|| {
        // SAFETY: dli_sname is a NUL-terminated symbol name owned by the loader.
        let s = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
        demangle(&s)
    });
    (module, sym)
}

fn demangle(s: &str) -> String {
    backtrace::SymbolName::new(s.as_bytes()).to_string()
}

fn is_plumbing(module: &str) -> bool {
    module.starts_with("libgraphsmith_trace")
        || module.starts_with("libcupti")
        || module.starts_with("libcuda.so")
}

/// The calling thread's stack, innermost first, from the caller of the CUDA API on; `None` past
/// the per-process budget.
pub(crate) fn capture() -> Option<Vec<Frame>> {
    if TAKEN.fetch_add(1, Ordering::Relaxed) >= MAX_BACKTRACES {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    Some(resolve(&raw()))
}

/// The calling thread's stack as instruction pointers, unresolved (cheap: symbols are looked
/// up only by [`resolve`], when the stack is shown).
pub(crate) fn raw() -> Vec<backtrace::Frame> {
    let mut raw: Vec<backtrace::Frame> = Vec::new();
    backtrace::trace(|f| {
        raw.push(f.clone());
        raw.len() < MAX_FRAMES + 32
    });
    raw
}

/// Symbolises a stack [`raw`] took, the tracer's, CUPTI's and the driver's frames dropped from
/// the top.
pub(crate) fn resolve(raw: &[backtrace::Frame]) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut skipping = true;
    for f in raw {
        let (module, exported) = module_of(f.ip());
        if skipping && (is_plumbing(&module) || module.is_empty()) {
            continue;
        }
        skipping = false;
        let mut resolved = Vec::new();
        backtrace::resolve_frame(f, |s| {
            resolved.push(Frame {
                symbol: s.name().map(|n| n.to_string()).unwrap_or_default(),
                module: module.clone(),
                file: s.filename().map(|p| p.display().to_string()),
                line: s.lineno(),
            });
        });
        if resolved.iter().all(|r| r.symbol.is_empty()) {
            resolved = vec![Frame {
                symbol: exported.unwrap_or_default(),
                module: module.clone(),
                file: None,
                line: None,
            }];
        }
        frames.extend(resolved);
        if frames.len() >= MAX_FRAMES {
            frames.truncate(MAX_FRAMES);
            break;
        }
    }
    frames
}
