//! The few NCCL functions graphsmith-nccl calls, loaded from libnccl at run time with
//! `libloading` (nothing links against NCCL, so the crate builds and its CPU tests run without
//! it).
//!
//! Why not cudarc's `nccl` feature: cudarc 0.19's dynamic loader asks for `libnccl.so` and
//! `libnccl.so.<CUDA major>` (and older CUDA majors), never NCCL's own soname `libnccl.so.2`
//! (the only name NVIDIA's wheels ship), and it panics when the library or a symbol is missing.
//! Declaring the nine functions here keeps the search ours (`library.rs`) and every failure an
//! error. The declarations follow `nccl.h` (NCCL 2.x); the enum values below are NCCL's ABI and
//! have not changed since NCCL 2.0 (bf16 since 2.10).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{LibraryMissing, NcclError};
use crate::library::{search_from_env, Candidate, Search, NCCL};

/// `ncclComm_t`: an opaque pointer.
pub type RawComm = *mut c_void;

/// `ncclUniqueId`, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawUniqueId {
    pub internal: [u8; 128],
}

/// `ncclSuccess`.
pub const SUCCESS: c_int = 0;
/// `ncclInProgress` (non-blocking communicators only; graphsmith-nccl makes blocking ones).
pub const IN_PROGRESS: c_int = 7;

type GetUniqueId = unsafe extern "C" fn(*mut RawUniqueId) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut RawComm, c_int, RawUniqueId, c_int) -> c_int;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> c_int;
type AllGather =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, *mut c_void) -> c_int;
type CommDestroy = unsafe extern "C" fn(RawComm) -> c_int;
type CommGetAsyncError = unsafe extern "C" fn(RawComm, *mut c_int) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The loaded library and its functions (the `Library` is kept so they stay mapped).
pub struct Nccl {
    pub path: String,
    pub get_unique_id: GetUniqueId,
    pub comm_init_rank: CommInitRank,
    pub all_reduce: AllReduce,
    pub all_gather: AllGather,
    /// `ncclReduceScatter` has `ncclAllReduce`'s signature (its count is the per-rank count).
    pub reduce_scatter: AllReduce,
    pub comm_destroy: CommDestroy,
    pub comm_get_async_error: CommGetAsyncError,
    get_error_string: GetErrorString,
    get_version: GetVersion,
    _lib: Library,
}

static LOADED: OnceLock<Result<Nccl, LibraryMissing>> = OnceLock::new();

impl Nccl {
    /// Loads libnccl once per process, searching as `library.rs` describes.
    pub fn get() -> Result<&'static Nccl, NcclError> {
        LOADED
            .get_or_init(|| Nccl::load(&search_from_env()))
            .as_ref()
            .map_err(|e| NcclError::Library(e.clone()))
    }

    /// Loads the first candidate of `search` that opens and has every function.
    pub fn load(search: &Search) -> Result<Nccl, LibraryMissing> {
        let mut tried = Vec::new();
        for candidate in search.candidates(&NCCL) {
            let (name, shown) = match &candidate {
                Candidate::Path(p) => (p.as_os_str().to_owned(), p.display().to_string()),
                Candidate::Name(n) => ((*n).into(), (*n).to_string()),
            };
            if let Candidate::Path(p) = &candidate {
                if !p.exists() {
                    tried.push(format!("{shown}: no such file"));
                    continue;
                }
            }
            // SAFETY: loading a shared library runs its initialisers; libnccl's only set up
            // its own state. The handle is kept in `Nccl` for as long as its functions are.
            let lib = match unsafe { Library::new(&name) } {
                Ok(lib) => lib,
                Err(e) => {
                    tried.push(format!("{shown}: {e}"));
                    continue;
                }
            };
            match Nccl::bind(lib, shown.clone()) {
                Ok(n) => return Ok(n),
                Err(e) => tried.push(format!("{shown}: {e}")),
            }
        }
        Err(LibraryMissing {
            looked: search.looked(&NCCL),
            tried,
        })
    }

    fn bind(lib: Library, path: String) -> Result<Nccl, String> {
        /// Looks `name` up as a function of type `F`.
        ///
        /// # Safety
        /// `F` must be the function's C signature in `nccl.h`.
        unsafe fn sym<F: Copy>(lib: &Library, name: &str) -> Result<F, String> {
            // SAFETY: the caller names the symbol's true type.
            unsafe { lib.get::<F>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("it has no {name} ({e}); is it NCCL 2.x?"))
        }
        // SAFETY: each type above is the signature `nccl.h` declares for the name.
        unsafe {
            Ok(Nccl {
                get_unique_id: sym(&lib, "ncclGetUniqueId")?,
                comm_init_rank: sym(&lib, "ncclCommInitRank")?,
                all_reduce: sym(&lib, "ncclAllReduce")?,
                all_gather: sym(&lib, "ncclAllGather")?,
                reduce_scatter: sym(&lib, "ncclReduceScatter")?,
                comm_destroy: sym(&lib, "ncclCommDestroy")?,
                comm_get_async_error: sym(&lib, "ncclCommGetAsyncError")?,
                get_error_string: sym(&lib, "ncclGetErrorString")?,
                get_version: sym(&lib, "ncclGetVersion")?,
                path,
                _lib: lib,
            })
        }
    }

    /// NCCL's version code (e.g. 22707 for 2.27.7), when it tells.
    pub fn version(&self) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: ncclGetVersion writes one int through a valid pointer.
        let r = unsafe { (self.get_version)(&mut v) };
        (r == SUCCESS).then_some(v)
    }

    /// NCCL's description of a result code, with the code's name.
    pub fn describe(&self, code: c_int) -> String {
        // SAFETY: ncclGetErrorString returns a pointer to a static C string (or null).
        let text = unsafe { (self.get_error_string)(code) };
        let text = if text.is_null() {
            "no description".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, static (see above).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        format!("{} ({code}): {text}", result_name(code))
    }
}

/// The name of an `ncclResult_t` value.
pub fn result_name(code: c_int) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        _ => "unknown ncclResult_t",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_a_library_and_a_missing_one_are_both_reported() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("site/nvidia/nccl/lib");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnccl.so.2"), b"not an ELF file").unwrap();
        let search = Search {
            python_paths: vec![t.path().join("site")],
            ..Search::default()
        };
        let Err(err) = Nccl::load(&search) else {
            panic!("a text file loaded as libnccl")
        };
        let text = err.to_string();
        assert!(
            text.starts_with("libnccl.so.2 was not found or could not be loaded"),
            "{text}"
        );
        assert!(
            text.contains(&dir.join("libnccl.so.2").display().to_string()),
            "{text}"
        );
        assert!(
            text.contains(&t.path().join("site/nvidia/cu13/lib").display().to_string()),
            "{text}"
        );

        let explicit = Search {
            explicit: Some(t.path().join("missing/libnccl.so.2")),
            ..Search::default()
        };
        let text = Nccl::load(&explicit).err().unwrap().to_string();
        assert!(
            text.contains("missing/libnccl.so.2: no such file"),
            "{text}"
        );
        assert!(text.contains("(from GRAPHSMITH_NCCL)"), "{text}");
    }

    #[test]
    fn result_names() {
        assert_eq!(result_name(5), "ncclInvalidUsage");
        assert_eq!(result_name(99), "unknown ncclResult_t");
    }
}
