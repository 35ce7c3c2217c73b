//! Preparing and running the traced command: where the injection library and libcupti are, the
//! environment the command gets, and waiting for it (Ctrl-C goes to the command; the report is
//! still printed).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The injection library's file name.
pub const LIB_NAME: &str = "libgraphsmith_trace.so";

/// What `graphsmith trace` will do.
#[derive(Clone, Debug, Default)]
pub(crate) struct Plan {
    /// Variables set for the command (none when it runs untraced).
    pub env: Vec<(String, OsString)>,
    /// The event log, when traced.
    pub events: Option<PathBuf>,
    /// Remove the event log afterwards (it is a temporary file).
    pub temporary: bool,
    pub notes: Vec<String>,
    /// Where libcupti was looked for, when the search found none.
    pub cupti_looked: Vec<String>,
}

/// The injection library: --lib, $GRAPHSMITH_TRACE_LIB, beside the binary, in deps/ (cargo's
/// layout), or ../lib.
pub(crate) fn find_lib(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else if let Some(p) = std::env::var_os("GRAPHSMITH_TRACE_LIB").filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    } else if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(LIB_NAME));
        candidates.push(dir.join("deps").join(LIB_NAME));
        candidates.push(dir.join("../lib").join(LIB_NAME));
    }
    for c in &candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
    }
    Err(format!(
        "{LIB_NAME} not found (looked at {}); build it with `cargo build -p graphsmith-trace` or give --lib",
        candidates
            .iter()
            .map(|c| c.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// libcupti as the workspace's one search for NVIDIA's libraries knows it.
pub(crate) const CUPTI: graphsmith_locate::Library = graphsmith_locate::Library {
    soname: "libcupti.so.13",
    prefix: "libcupti.so",
    env_var: "GRAPHSMITH_CUPTI",
    wheel_dirs: &[
        "nvidia/cu13/lib",
        "nvidia/cuda_cupti/lib",
        "nvidia/cu12/lib",
    ],
    toolkit_dirs: &["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"],
    install: "`pip install nvidia-cuda-cupti` into the traced Python",
};

/// The interpreter of the command when it is a Python (its wheels may hold libcupti).
fn python_of(command: &[OsString]) -> Option<&OsStr> {
    let first = command.first()?;
    Path::new(first)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("python"))
        .then_some(first.as_os_str())
}

/// A libcupti to offer the tracer, for processes that have not loaded one themselves: NVIDIA's
/// wheels on the command's Python path (when it is a Python), the CUDA toolkit, the loader's
/// path (graphsmith-locate's search). The error lists every place looked.
pub(crate) fn find_cupti(command: &[OsString]) -> Result<PathBuf, graphsmith_locate::NotFound> {
    graphsmith_locate::Search::with_python(&CUPTI, python_of(command))
        .locate(&CUPTI)
        .map(|f| f.path)
}

fn temp_log() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "graphsmith-trace-{}-{nanos}.jsonl",
        std::process::id()
    ))
}

/// What `graphsmith trace` asks for (from its arguments).
pub(crate) struct Request<'a> {
    /// The injection library given with --lib.
    pub lib: Option<&'a Path>,
    /// The event log given with --events (else a temporary file).
    pub events: Option<&'a Path>,
    /// The libcupti given with --cupti.
    pub cupti: Option<&'a Path>,
    /// Whether to check instantiated graphs for hazards (--hazards).
    pub hazards: bool,
    /// Whether to report launches of graphs whose memory was freed (--freed).
    pub freed: bool,
    /// Whether to record what each graph costs (--graphs).
    pub graphs: bool,
    /// The command and its arguments.
    pub command: &'a [OsString],
}

/// Decides the environment of the command.
pub(crate) fn plan(args: &Request) -> Plan {
    let mut plan = Plan::default();
    let lib = match find_lib(args.lib) {
        Ok(l) => l,
        Err(e) => {
            plan.notes.push(format!("{e}; the command runs untraced"));
            return plan;
        }
    };
    if let Some(other) = std::env::var_os("CUDA_INJECTION64_PATH").filter(|v| !v.is_empty()) {
        if Path::new(&other) != lib {
            plan.notes.push(format!(
                "CUDA_INJECTION64_PATH is already set ({}): another tool injects into CUDA; the command runs untraced",
                Path::new(&other).display()
            ));
            return plan;
        }
    }
    let events = args.events.map_or_else(temp_log, Path::to_path_buf);
    if let Err(e) = std::fs::write(&events, "") {
        plan.notes.push(format!(
            "cannot create the event log {}: {e}; the command runs untraced",
            events.display()
        ));
        return plan;
    }
    plan.temporary = args.events.is_none();
    plan.env
        .push(("CUDA_INJECTION64_PATH".into(), lib.clone().into()));
    match std::env::var_os("NVTX_INJECTION64_PATH").filter(|v| !v.is_empty()) {
        Some(other) if Path::new(&other) != lib => plan.notes.push(format!(
            "NVTX_INJECTION64_PATH is already set ({}): NVTX ranges are not recorded",
            Path::new(&other).display()
        )),
        _ => plan.env.push(("NVTX_INJECTION64_PATH".into(), lib.into())),
    }
    plan.env
        .push((crate::event::OUT_VAR.into(), events.clone().into()));
    // Set either way, so that a value left in the environment never asks for the check.
    plan.env.push((
        crate::event::HAZARDS_VAR.into(),
        if args.hazards { "1" } else { "0" }.into(),
    ));
    plan.env.push((
        crate::event::FREED_VAR.into(),
        if args.freed { "1" } else { "0" }.into(),
    ));
    plan.env.push((
        crate::event::GRAPHS_VAR.into(),
        if args.graphs { "1" } else { "0" }.into(),
    ));
    let cupti = match args
        .cupti
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("GRAPHSMITH_CUPTI").map(PathBuf::from))
    {
        Some(c) => Some(c),
        None => match find_cupti(args.command) {
            Ok(c) => Some(c),
            Err(e) => {
                plan.cupti_looked = e.looked;
                None
            }
        },
    };
    if let Some(c) = cupti {
        plan.env.push(("GRAPHSMITH_CUPTI".into(), c.into()));
    }
    plan.events = Some(events);
    plan
}

/// How the command ended.
pub(crate) struct Status {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// Runs the command with inherited stdio. While it runs, SIGINT and SIGQUIT are ignored here
/// (the terminal delivers them to the command too), so the report is printed after a Ctrl-C.
pub(crate) fn run(mut cmd: Command) -> std::io::Result<Status> {
    use std::os::unix::process::ExitStatusExt;
    let mut child = cmd.spawn()?;
    // SAFETY: setting a signal disposition to SIG_IGN and back has no memory-safety
    // preconditions; the child was spawned before, with the default dispositions.
    let old = unsafe {
        (
            libc::signal(libc::SIGINT, libc::SIG_IGN),
            libc::signal(libc::SIGQUIT, libc::SIG_IGN),
        )
    };
    let status = child.wait();
    // SAFETY: restores the dispositions saved above.
    unsafe {
        libc::signal(libc::SIGINT, old.0);
        libc::signal(libc::SIGQUIT, old.1);
    }
    let status = status?;
    Ok(Status {
        code: status.code(),
        signal: status.signal(),
    })
}

/// Removes a temporary event log.
pub(crate) fn cleanup(plan: &Plan) {
    if let (true, Some(p)) = (plan.temporary, &plan.events) {
        let _ = std::fs::remove_file(p);
    }
}
