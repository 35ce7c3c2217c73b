//! NVRTC, loaded at build time from a file the workspace's search found: its version, and one
//! compilation to PTX (the calls and their order are those of `kernels/build_ptx.py`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

type Program = *mut c_void;

/// A loaded libnvrtc.
pub struct Nvrtc {
    lib: Library,
    /// (major, minor), from `nvrtcVersion`.
    pub version: (i32, i32),
}

/// Looks `name` up in `lib` as a function of type `F`.
///
/// # Safety
/// `F` must be the function's C signature in `nvrtc.h`.
unsafe fn sym<F: Copy>(lib: &Library, name: &str) -> Result<F, String> {
    // SAFETY: the caller names the symbol's true type.
    unsafe { lib.get::<F>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("it has no {name} ({e}); is it libnvrtc?"))
}

impl Nvrtc {
    /// Opens `path`, after the `libnvrtc-builtins` beside it (libnvrtc opens those by soname
    /// while compiling, and a wheel's folder is not on the loader's path).
    pub fn open(path: &Path) -> Result<Nvrtc, String> {
        if let Some(dir) = path.parent() {
            let mut builtins: Vec<_> = std::fs::read_dir(dir)
                .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
                .unwrap_or_default();
            builtins.retain(|p: &std::path::PathBuf| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvrtc-builtins.so"))
            });
            builtins.sort();
            for b in builtins {
                // SAFETY: loading NVIDIA's builtins library runs only its initialisers; it stays
                // loaded for the build script's life (forgotten).
                if let Ok(lib) = unsafe { Library::open(Some(&b), RTLD_NOW | RTLD_GLOBAL) } {
                    std::mem::forget(lib);
                }
            }
        }
        // SAFETY: as above, for libnvrtc itself; it is kept in `Nvrtc` while its functions are
        // called.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW) }
            .map_err(|e| format!("cannot load it: {e}"))?;
        // SAFETY: nvrtcVersion(int* major, int* minor) in nvrtc.h.
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int =
            unsafe { sym(&lib, "nvrtcVersion")? };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out pointers.
        if unsafe { version_fn(&mut major, &mut minor) } != 0 {
            return Err("nvrtcVersion failed".to_string());
        }
        Ok(Nvrtc {
            lib,
            version: (major, minor),
        })
    }

    fn error(&self, call: &str, rc: c_int) -> String {
        // SAFETY: nvrtcGetErrorString(nvrtcResult) returns a static C string in nvrtc.h.
        let text = unsafe {
            sym::<unsafe extern "C" fn(c_int) -> *const c_char>(&self.lib, "nvrtcGetErrorString")
        }
        .ok()
        // SAFETY: any result code is accepted.
        .map(|f| unsafe { f(rc) })
        .filter(|p| !p.is_null())
        // SAFETY: non-null, NUL-terminated, static.
        .map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        .unwrap_or_else(|| "no description".to_string());
        format!("{call} failed: {text} ({rc})")
    }

    /// Compiles `source` (named `name`) with `options`: the PTX and NVRTC's log (its warnings),
    /// or the error with the log.
    pub fn compile(
        &self,
        source: &[u8],
        name: &str,
        options: &[&str],
    ) -> Result<(String, String), String> {
        type Create = unsafe extern "C" fn(
            *mut Program,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type Compile = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
        type Size = unsafe extern "C" fn(Program, *mut usize) -> c_int;
        type Get = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Program) -> c_int;
        // SAFETY: each type above is the signature nvrtc.h declares for the name.
        let (create, compile, log_size, log, ptx_size, ptx, destroy) = unsafe {
            (
                sym::<Create>(&self.lib, "nvrtcCreateProgram")?,
                sym::<Compile>(&self.lib, "nvrtcCompileProgram")?,
                sym::<Size>(&self.lib, "nvrtcGetProgramLogSize")?,
                sym::<Get>(&self.lib, "nvrtcGetProgramLog")?,
                sym::<Size>(&self.lib, "nvrtcGetPTXSize")?,
                sym::<Get>(&self.lib, "nvrtcGetPTX")?,
                sym::<Destroy>(&self.lib, "nvrtcDestroyProgram")?,
            )
        };
        let src = CString::new(source).map_err(|_| format!("{name} holds a NUL byte"))?;
        let cname = CString::new(name).map_err(|_| format!("{name}: a NUL byte in the name"))?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(*o).expect("an option without NUL bytes"))
            .collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: prog is a valid out pointer; src and cname are NUL-terminated and outlive the
        // program; no headers.
        let rc = unsafe {
            create(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(self.error("nvrtcCreateProgram", rc));
        }
        // Reads a NUL-terminated text of the size `size_fn` reports with `get_fn`.
        let read = |size_fn: Size, get_fn: Get, what: &str| -> Result<String, String> {
            let mut size = 0usize;
            // SAFETY: prog is live; size is a valid out pointer.
            let rc = unsafe { size_fn(prog, &mut size) };
            if rc != 0 {
                return Err(self.error(&format!("{what} size"), rc));
            }
            let mut buf = vec![0u8; size.max(1)];
            // SAFETY: buf holds the `size` bytes NVRTC writes (its text and the NUL).
            let rc = unsafe { get_fn(prog, buf.as_mut_ptr().cast()) };
            if rc != 0 {
                return Err(self.error(what, rc));
            }
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            buf.truncate(end);
            String::from_utf8(buf).map_err(|e| format!("{what}: not UTF-8 ({e})"))
        };
        // SAFETY: prog is live; the options are NUL-terminated and outlive the call.
        let rc = unsafe { compile(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let result = if rc != 0 {
            let text = read(log_size, log, "nvrtcGetProgramLog").unwrap_or_default();
            Err(format!(
                "{}; NVRTC's log ({}):\n{text}",
                self.error("nvrtcCompileProgram", rc),
                options.join(" ")
            ))
        } else {
            read(ptx_size, ptx, "nvrtcGetPTX")
                .and_then(|ptx| Ok((ptx, read(log_size, log, "nvrtcGetProgramLog")?)))
        };
        // SAFETY: prog came from nvrtcCreateProgram and is destroyed once.
        unsafe { destroy(&mut prog) };
        result
    }
}
