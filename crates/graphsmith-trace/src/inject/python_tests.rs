//! The Python stack reader, in a process without Python and in a process that embeds CPython
//! (a child of the test binary, so that the first test's process never loads libpython).
//!
//! The embedded case calls back into Rust from Python through `ctypes`: a `CFUNCTYPE` call
//! releases the GIL around the callback (as PyTorch does around its CUDA calls), a
//! `PYFUNCTYPE` call keeps it, so both ways of reading are run.

use std::ffi::{c_int, CString};
use std::process::Command;
use std::sync::Mutex;

use super::*;

/// Set in the child: the libpython to load.
const CHILD_VAR: &str = "GRAPHSMITH_TEST_LIBPYTHON";

#[test]
fn a_process_without_python_reads_no_frames() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return;
    }
    assert_eq!(capture(&CALLS), Err(PyMissing::NotPython));
    // Asked again: the answer is cached, nothing crashes.
    assert_eq!(capture(&CALLS), Err(PyMissing::NotPython));
}

/// The shared libpython of the `python3` on PATH and its prefix, when it has one.
fn libpython() -> Option<(String, String)> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig, sys, os; \
             print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', \
             sysconfig.get_config_var('LDLIBRARY') or '')); print(sys.base_prefix)",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut lines = text.lines();
    let (lib, prefix) = (lines.next()?.to_string(), lines.next()?.to_string());
    (lib.ends_with(".so") || lib.contains(".so.")).then_some(())?;
    std::path::Path::new(&lib).exists().then_some((lib, prefix))
}

#[test]
fn an_embedded_interpreter_gives_its_frames_with_and_without_the_gil() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return;
    }
    let Some((lib, prefix)) = libpython() else {
        eprintln!("skipped: no python3 with a shared libpython on PATH");
        return;
    };
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["inject::python::tests::child", "--exact", "--nocapture"])
        .env(CHILD_VAR, &lib)
        .env("PYTHONHOME", &prefix)
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("child: both stacks read"), "{text}");
}

/// What the callback read, one entry per call from Python, with whether it held the GIL.
type Seen = (bool, Result<Vec<PyFrame>, PyMissing>);
static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

extern "C" fn from_python() -> c_int {
    // SAFETY: may be called without the GIL.
    let holds = api().is_ok_and(|a| unsafe { (a.gil_check)() } == 1);
    let got = capture(&CALLS);
    SEEN.lock().unwrap().push((holds, got));
    0
}

/// The script Python runs. Its functions are compiled as if from a user's file and from
/// torch's, to check the origins too.
fn script(callback: usize) -> String {
    format!(
        r#"
import ctypes
released = ctypes.CFUNCTYPE(ctypes.c_int)({callback})
held = ctypes.PYFUNCTYPE(ctypes.c_int)({callback})
torch_src = "def op(f):\n    return f()\n"
user_src = "def step(f):\n    return torch_op(f)\n\nclass Model:\n    def run(self, f):\n        return step(f)\n"
torch_ns = {{}}
exec(compile(torch_src, "/venv/lib/python3.11/site-packages/torch/ops.py", "exec"), torch_ns)
user_ns = {{"torch_op": torch_ns["op"]}}
exec(compile(user_src, "/home/me/train.py", "exec"), user_ns)
user_ns["Model"]().run(released)
user_ns["Model"]().run(held)
"#
    )
}

#[test]
fn child() {
    let Some(lib) = std::env::var_os(CHILD_VAR) else {
        return;
    };
    let lib = CString::new(lib.into_encoded_bytes()).unwrap();
    // SAFETY: loads the libpython named by the parent; its symbols become global, as in a
    // python executable linked with it.
    let handle = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!handle.is_null(), "dlopen {lib:?}");
    // SAFETY: CPython's Py_InitializeEx(int) and PyRun_SimpleString(const char*).
    let (init, run) = unsafe {
        let init = libc::dlsym(handle, c"Py_InitializeEx".as_ptr());
        let run = libc::dlsym(handle, c"PyRun_SimpleString".as_ptr());
        assert!(!init.is_null() && !run.is_null());
        (
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int)>(init),
            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char) -> c_int>(run),
        )
    };
    let src = CString::new(script(from_python as *const () as usize)).unwrap();
    // SAFETY: initialises the interpreter once on this thread, which then holds the GIL, and
    // runs the script.
    let rc = unsafe {
        init(0);
        run(src.as_ptr())
    };
    assert_eq!(rc, 0, "the script ran");
    let seen = SEEN.lock().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    // ctypes released the GIL around the first call (read by the helper), kept it around the
    // second (read on the calling thread).
    assert_eq!((seen[0].0, seen[1].0), (false, true));
    for (_, got) in seen.iter() {
        let frames = got.as_ref().expect("frames read");
        let names: Vec<(&str, u32, &str, Origin)> = frames
            .iter()
            .map(|f| {
                // co_qualname (3.11 and later) is `Model.run`, co_name `run`.
                let function = f.function.rsplit('.').next().unwrap_or_default();
                (f.file.as_str(), f.line, function, f.origin)
            })
            .collect();
        assert_eq!(
            names[..3],
            [
                (
                    "/venv/lib/python3.11/site-packages/torch/ops.py",
                    2,
                    "op",
                    Origin::Torch
                ),
                ("/home/me/train.py", 2, "step", Origin::User),
                ("/home/me/train.py", 6, "run", Origin::User),
            ],
            "{names:?}"
        );
        assert_eq!(frames[3].function, "<module>");
        assert_eq!(frames[3].file, "<string>");
    }
    println!("child: both stacks read");
}
