//! The injection library loaded by a stand-in for CUDA and NVTX (programs/fake_host.c, built
//! with the system C compiler), through `graphsmith trace` itself: the library loads, attaches
//! to NVTX, says why it cannot attach to CUPTI (there is no CUDA here), and the command's exit
//! code, crash and output pass through.
//!
//! These tests never pass without running: a missing injection library or C compiler fails
//! them with a message saying how to provide it. `cargo test` builds the library beside the
//! test binary; a test binary copied elsewhere (as `scripts/gpu-build.sh` stages it) finds it
//! through `GRAPHSMITH_TRACE_LIB`, which `scripts/gpu-run.sh` sets. The C compiler is `$CC`,
//! else `cc`.
//!
//! With `--hazards`, a stand-in for libcuda and CUPTI (programs/fake_cuda.c) plays the driver:
//! the library subscribes to it, sees a graph instantiated, reads that graph back through the
//! stand-in's driver functions (with cuda.h's layouts), ignores the callbacks of its own calls,
//! and records the hazard planted in it.
//!
//! The same stand-in, driven from a Python script through `ctypes`, begins two pretend captures
//! (the GIL released, then held): each begin records the script's Python stack. That test needs
//! `python3` (or `$PYTHON`) and fails, saying so, without it. A third script plays PyTorch for
//! `--hazards` and `--freed`: a stand-in `torch` module whose `cuda.memory_snapshot()` splits
//! the planted buffer into blocks, and a pretend allocation, instantiation, free and launch.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use graphsmith_trace::cli::{run, TraceArgs};

/// The injection library: `$GRAPHSMITH_TRACE_LIB`, else the cdylib cargo builds beside the test
/// binary (`target/<profile>/deps/`). Fails the test, saying how to provide it, when it is not
/// there.
fn lib() -> PathBuf {
    let path = match std::env::var_os("GRAPHSMITH_TRACE_LIB").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .expect("the test binary's own path")
            .with_file_name("libgraphsmith_trace.so"),
    };
    assert!(
        path.is_file(),
        "the injection library {} is missing: build it with `cargo build -p graphsmith-trace` \
         (`cargo test` builds it beside the test binary), or set GRAPHSMITH_TRACE_LIB to the \
         path of libgraphsmith_trace.so (scripts/gpu-run.sh sets it to gpu-bin/libgraphsmith_trace.so)",
        path.display()
    );
    path
}

/// Compiles `source` (written into `dir` as `name.c`) with `$CC` (else `cc`) into `out`, with
/// `flags` before the output. Fails the test, saying what is missing, when it cannot.
fn compile(dir: &Path, name: &str, source: &str, flags: &[&str], out: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap_or_else(|e| panic!("cannot write {}: {e}", src.display()));
    let exe = dir.join(out);
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let output = Command::new(&cc)
        .args(flags)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "no C compiler: running `{cc}` failed ({e}); these tests build small C stand-ins \
                 for CUDA and NVTX. Install one (e.g. `apt-get install gcc`) or set CC to its path"
            )
        });
    assert!(
        output.status.success(),
        "`{cc}` could not build {} ({}):\n{}",
        src.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

/// Builds the stand-in for CUDA's and NVTX's loading of the library.
fn fake_host(dir: &Path) -> PathBuf {
    compile(
        dir,
        "fake_host",
        include_str!("programs/fake_host.c"),
        &[],
        "fake_host",
    )
}

/// Builds the stand-in for libcuda and CUPTI, named and sonamed as the driver.
fn fake_cuda(dir: &Path) -> PathBuf {
    compile(
        dir,
        "fake_cuda",
        include_str!("programs/fake_cuda.c"),
        &["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"],
        "libcuda.so.1",
    )
}

fn trace(dir: &Path, name: &str, command: &[&str]) -> (ExitCode, serde_json::Value) {
    trace_with(
        dir,
        name,
        command,
        false,
        PathBuf::from("/nonexistent/libcupti.so"),
    )
}

fn trace_with(
    dir: &Path,
    name: &str,
    command: &[&str],
    hazards: bool,
    cupti: PathBuf,
) -> (ExitCode, serde_json::Value) {
    trace_full(dir, name, command, (hazards, false), cupti)
}

/// [`trace_with`] with `--hazards` and `--freed` as given.
fn trace_full(
    dir: &Path,
    name: &str,
    command: &[&str],
    (hazards, freed): (bool, bool),
    cupti: PathBuf,
) -> (ExitCode, serde_json::Value) {
    let json = dir.join(format!("{name}.json"));
    let args = TraceArgs {
        json: Some(json.clone()),
        strict: false,
        hazards,
        launches_out: None,
        freed,
        graphs: name.starts_with("graphs"),
        plot: None,
        events: Some(dir.join(format!("{name}.jsonl"))),
        lib: Some(lib()),
        cupti: Some(cupti),
        command: command.iter().map(Into::into).collect(),
    };
    let code = run(args);
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (code, report)
}

/// Whether a CUPTI loads from the library path, as the injection library's last resort does.
fn cupti_on_library_path() -> bool {
    ["libcupti.so.13", "libcupti.so"].iter().any(|name| {
        // SAFETY: loading CUPTI runs no initialiser that needs a CUDA context; it is unloaded
        // at once.
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

#[test]
fn the_library_loads_attaches_to_nvtx_and_reports_cupti_missing() {
    let dir = std::env::temp_dir().join(format!("graphsmith-trace-fake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = fake_host(&dir);
    let host = host.to_str().unwrap();

    let (code, report) = trace(&dir, "exit5", &[host, "ok", "5"]);
    assert_eq!(
        code,
        ExitCode::from(5),
        "the command's exit code passes through"
    );
    let p = &report["processes"][0];
    // The CUPTI named to the library does not exist. The library then tries the library path:
    // on a machine with CUDA's CUPTI there (a machine with an NVIDIA GPU) it attaches through that one, else it
    // reports CUPTI missing. Both outcomes are checked, whichever this machine gives.
    if cupti_on_library_path() {
        assert_eq!(p["attached"]["state"], "yes", "{report:#}");
        let origin = p["attached"]["cupti"].as_str().unwrap_or_default();
        assert!(origin.ends_with("on the library path"), "{report:#}");
    } else {
        assert_eq!(p["attached"]["state"], "no", "{report:#}");
        assert_eq!(p["attached"]["reason"], "CuptiMissing", "{report:#}");
    }
    assert_eq!(p["nvtx_instances"], 1, "{report:#}");
    assert_eq!(p["exited_normally"], true, "{report:#}");

    let (code, report) = trace(&dir, "crash", &[host, "crash"]);
    assert_eq!(code, ExitCode::from(128 + 11));
    assert_eq!(report["exit"]["signal"], 11);
    assert_eq!(
        report["processes"][0]["exited_normally"], false,
        "{report:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hazards_are_read_back_through_the_driver_at_instantiation() {
    let dir =
        std::env::temp_dir().join(format!("graphsmith-trace-fake-cuda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (host, cuda) = (fake_host(&dir), fake_cuda(&dir));
    let cbid = cudarc::cupti::sys::CUpti_driver_api_trace_cbid::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags as u32;
    let cbid = cbid.to_string();
    let command = [
        host.to_str().unwrap(),
        "graph",
        cuda.to_str().unwrap(),
        &cbid,
    ];

    let (code, report) = trace_with(&dir, "hazards", &command, true, cuda.clone());
    assert_eq!(code, ExitCode::from(0));
    assert_eq!(report["hazards_requested"], true);
    let p = &report["processes"][0];
    assert_eq!(p["attached"]["state"], "yes", "{report:#}");
    assert_eq!(
        p["other_failures"],
        serde_json::json!([]),
        "the callbacks of the tracer's own driver calls are ignored: {report:#}"
    );
    let g = &p["graphs"][0];
    assert_eq!(g["instantiate"]["graph"], 0x9000);
    assert_eq!(g["instantiate"]["exec"], 0xe000);
    assert_eq!(
        g["instantiate"]["nodes"],
        serde_json::json!({"kernel": 3, "memcpy": 1, "memset": 1})
    );
    let c = &g["hazards"];
    assert_eq!(c["state"], "checked", "{report:#}");
    assert_eq!(
        (
            &c["nodes"],
            &c["edges"],
            &c["kernels"],
            &c["kernels_unread"]
        ),
        (
            &serde_json::json!(5),
            &serde_json::json!(5),
            &serde_json::json!(3),
            &serde_json::json!(0)
        ),
        "{c:#}"
    );
    assert_eq!(
        c["accesses"], 6,
        "a pointer per kernel, the set, both sides of the copy"
    );
    assert_eq!(c["total"], 1, "{c:#}");
    let h = &c["hazards"][0];
    assert_eq!(h["first"]["node"], 1);
    assert_eq!(h["first"]["kernel"], "inc(float*, int)");
    assert_eq!(h["second"]["node"], 2);
    assert_eq!(
        h["second"]["kernel"], "scale(float*, int)",
        "read from `extra` through cuKernelGetFunction"
    );
    assert_eq!(h["buffer"], 0x7f00_0000_0000_u64);
    assert_eq!(h["buffer_bytes"], 262_144);
    assert_eq!(h["fix"], serde_json::json!([1, 2]));

    let (_, report) = trace_with(&dir, "no-hazards", &command, false, cuda.clone());
    let g = &report["processes"][0]["graphs"][0];
    assert_eq!(
        g["hazards"],
        serde_json::Value::Null,
        "not asked: not read back"
    );
    assert_eq!(g["instantiate"]["nodes"]["kernel"], 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The script of the Python frames test: loads the stand-in driver and the injection library as
/// CUDA would, then begins a pretend capture through `ctypes`, once with the GIL released
/// (`CDLL`, as PyTorch releases it around its CUDA calls) and once with it held (`PyDLL`).
const PY_SCRIPT: &str = r#"import ctypes, os, sys
cuda = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
held = ctypes.PyDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
def released_gil(cbid):
    return cuda.fake_begin(cbid)  # line 6
def held_gil(cbid):
    return held.fake_begin(cbid)  # line 8
class Trainer:
    def step(self, cbid):
        released_gil(cbid)
        held_gil(cbid)
Trainer().step(int(sys.argv[2]))
"#;

#[test]
fn a_python_process_gets_the_python_stack_at_capture_begin() {
    let dir = std::env::temp_dir().join(format!("graphsmith-trace-fake-py-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cuda = fake_cuda(&dir);
    let script = dir.join("train.py");
    std::fs::write(&script, PY_SCRIPT).unwrap();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    assert!(
        Command::new(&python).arg("--version").output().is_ok(),
        "this test runs a Python script: `{python}` (set PYTHON to another) did not start"
    );
    let cbid = cudarc::cupti::sys::CUpti_driver_api_trace_cbid::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2 as u32;
    let cbid = cbid.to_string();
    let command = [
        python.as_str(),
        script.to_str().unwrap(),
        cuda.to_str().unwrap(),
        &cbid,
    ];
    let (code, report) = trace_with(&dir, "python", &command, false, cuda.clone());
    assert_eq!(code, ExitCode::from(0), "{report:#}");
    let p = &report["processes"][0];
    assert_eq!(p["attached"]["state"], "yes", "{report:#}");
    let captures = p["captures"].as_array().expect("captures");
    assert_eq!(captures.len(), 2, "{report:#}");
    let file = script.to_str().unwrap();
    for (c, (line, function)) in captures.iter().zip([(6, "released_gil"), (8, "held_gil")]) {
        let stack = &c["begin"]["python"];
        assert_eq!(stack[0]["file"], file, "{c:#}");
        assert_eq!(stack[0]["line"], line, "{c:#}");
        assert_eq!(stack[0]["function"], function, "{c:#}");
        assert_eq!(stack[0]["origin"], "user", "{c:#}");
        let step = stack[1]["function"].as_str().unwrap_or_default();
        assert!(
            step.ends_with("step"),
            "Trainer.step (3.11+) or step: {c:#}"
        );
        assert_eq!(stack[2]["function"], "<module>", "{c:#}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A folder for a test driven by a Python script: the stand-in for libcuda and CUPTI built in
/// it, the script written into it as `file`, and the Python to run it (`$PYTHON`, else
/// `python3`; the test fails, saying so, when it does not start).
fn python_case(name: &str, file: &str, script: &str) -> (PathBuf, PathBuf, PathBuf, String) {
    let dir = std::env::temp_dir().join(format!(
        "graphsmith-trace-fake-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let cuda = fake_cuda(&dir);
    let path = dir.join(file);
    std::fs::write(&path, script).unwrap();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    assert!(
        Command::new(&python).arg("--version").output().is_ok(),
        "this test runs a Python script: `{python}` (set PYTHON to another) did not start"
    );
    (dir, cuda, path, python)
}

/// The script of the allocator and freed-memory test: a stand-in `torch` (in `sys.modules`, so
/// the tracer finds it) whose snapshot splits the planted buffer into two blocks; the weight is
/// allocated with the GIL released, the graph instantiated, the weight freed with the GIL held,
/// and the graph launched.
const TORCH_SCRIPT: &str = r#"import ctypes, os, sys, types
cuda = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
held = ctypes.PyDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
BUF = 0x7f0000000000
SNAPSHOT = [{"address": BUF, "device": 0, "segment_pool_id": (0, 0), "total_size": 262144,
             "blocks": [{"size": 131072, "state": "active_allocated"},
                        {"size": 131072, "state": "inactive"}]}]
torch = types.ModuleType("torch")
torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, memory_snapshot=lambda: SNAPSHOT)
sys.modules["torch"] = torch
ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
alloc, free, instantiate, launch = (int(a) for a in sys.argv[2:6])
def load_weight():
    cuda.fake_alloc(alloc, ctypes.c_uint64(BUF), ctypes.c_size_t(262144))  # line 14
def unload():
    held.fake_free(free, ctypes.c_uint64(BUF))  # line 16
def decode():
    cuda.fake_launch(launch, ctypes.c_uint64(0xe000))  # line 18
load_weight()
cuda.fake_instantiate(instantiate)
unload()
decode()
decode()
"#;

#[test]
fn pytorch_blocks_bound_the_check_and_a_launch_on_freed_memory_is_reported() {
    use cudarc::cupti::sys::CUpti_driver_api_trace_cbid as D;
    let (dir, cuda, script, python) = python_case("torch", "serve.py", TORCH_SCRIPT);
    let cbids = [
        D::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    ]
    .map(|c| (c as u32).to_string());
    let mut command = vec![
        python.as_str(),
        script.to_str().unwrap(),
        cuda.to_str().unwrap(),
    ];
    command.extend(cbids.iter().map(String::as_str));
    let (code, report) = trace_full(&dir, "torch", &command, (true, true), cuda.clone());
    assert_eq!(code, ExitCode::from(0), "{report:#}");
    let p = &report["processes"][0];
    assert_eq!(p["attached"]["state"], "yes", "{report:#}");

    let c = &p["graphs"][0]["hazards"];
    assert_eq!(c["state"], "checked", "{report:#}");
    assert_eq!(c["bounds"]["kind"], "allocator_blocks", "{c:#}");
    assert_eq!(
        (&c["bounds"]["blocks"], &c["bounds"]["segments"]),
        (&2.into(), &1.into())
    );
    assert_eq!(c["total"], 1, "{c:#}");
    assert_eq!(
        c["hazards"][0]["region"], "block 0x7f0000000000+131072 (segment 0x7f0000000000)",
        "{c:#}"
    );

    let freed = p["freed"].as_array().expect("freed");
    let mut nodes: Vec<u64> = freed.iter().map(|f| f["node"].as_u64().unwrap()).collect();
    nodes.sort();
    assert_eq!(
        nodes,
        [0, 1, 2, 3, 4],
        "each node once, at the first launch: {report:#}"
    );
    let file = script.to_str().unwrap();
    for f in freed {
        assert_eq!((&f["exec"], &f["graph"]), (&0xe000.into(), &0x9000.into()));
        assert_eq!(
            (&f["freed_base"], &f["freed_bytes"]),
            (&0x7f00_0000_0000_u64.into(), &262_144.into())
        );
        for (site, line, function, call) in [
            ("allocated", 14, "load_weight", "cuMemAlloc_v2"),
            ("freed", 16, "unload", "cuMemFree_v2"),
            ("launch", 18, "decode", "cuGraphLaunch"),
        ] {
            let s = &f[site];
            assert_eq!(s["call"], call, "{f:#}");
            assert_eq!(s["python"][0]["file"], file, "{f:#}");
            assert_eq!(
                (&s["python"][0]["line"], &s["python"][0]["function"]),
                (&line.into(), &function.into()),
                "{f:#}"
            );
        }
    }
    let kernel = freed.iter().find(|f| f["node"] == 1).unwrap();
    assert_eq!(
        (&kernel["start"], &kernel["len"]),
        (&0x7f00_0000_0000_u64.into(), &131_072.into()),
        "the block bounds the pointer"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn graph_costs_are_recorded_through_the_driver_callbacks() {
    use cudarc::cupti::sys::CUpti_driver_api_trace_cbid as D;
    let dir = std::env::temp_dir().join(format!("graphsmith-trace-graphs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (host, cuda) = (fake_host(&dir), fake_cuda(&dir));
    let cbids = [
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphUpload,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    ]
    .map(|c| (c as u32).to_string())
    .join(",");
    let command = [
        host.to_str().unwrap(),
        "graphs",
        cuda.to_str().unwrap(),
        &cbids,
    ];
    let (code, report) = trace_with(&dir, "graphs", &command, false, cuda.clone());
    assert_eq!(code, ExitCode::from(0));
    let p = &report["processes"][0];
    assert_eq!(p["attached"]["state"], "yes", "{report:#}");
    assert_eq!(p["captures"][0]["outcome"], "captured", "{report:#}");
    let costs = &report["graph_costs"]["processes"][0];
    let g = &costs["graphs"][0];
    assert_eq!(
        g["made"],
        serde_json::json!({"by": "capture", "capture": 1, "ended": true}),
        "{costs:#}"
    );
    assert!(g["capture_ns"].as_u64().unwrap() > 0, "{g:#}");
    assert!(
        g["tracer_ns"].as_u64().unwrap() > 0,
        "the begin's backtrace is the tracer's time, left out: {g:#}"
    );
    assert_eq!(
        (&g["began_at"]["function"], &g["began_at"]["python"]),
        (&serde_json::json!("main"), &serde_json::json!(false)),
        "the first frame outside the C runtime and CUDA: {g:#}"
    );
    assert!(g["instantiations"][0]["ns"].is_u64(), "{g:#}");
    assert_eq!(g["instantiations"][0]["exec"], 0xe000);
    assert_eq!(g["instantiations"][0]["uploads"], 1);
    assert_eq!(g["node_total"], 5);
    assert_eq!(g["memory"]["allocations"], 1, "{g:#}");
    assert_eq!(g["memory"]["allocated_bytes"], 1 << 20);
    assert_eq!(g["replays"], 3, "{costs:#}");
    let off = costs["device_time_off"].as_str().unwrap_or_default();
    assert!(
        off.contains("cuptiActivityRegisterCallbacks"),
        "the stand-in has no activity API, and the report says so: {costs:#}"
    );
    assert!(
        dir.join("graphs.svg").is_file(),
        "the plot is written beside the JSON report"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The script of the races-across-graphs test: two executables of the stand-in's graph
/// (both write BUF and OTHER), launched on two streams, with (`fixed`) or without a record on
/// the first stream and a wait on the second between the launches.
const RACES_SCRIPT: &str = r#"import ctypes, os, sys
cuda = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(os.environ["CUDA_INJECTION64_PATH"]).InitializeInjection()
instantiate, launch, record, wait = (int(a) for a in sys.argv[2:6])
A, B, EV = ctypes.c_uint64(0xa000), ctypes.c_uint64(0xb000), ctypes.c_uint64(0xe7e7)
cuda.fake_launch_on(launch, ctypes.c_uint64(0xe100), A)  # not instantiated yet: not checked
cuda.fake_instantiate_as(instantiate, ctypes.c_uint64(0xe100))  # line 7
cuda.fake_instantiate_as(instantiate, ctypes.c_uint64(0xe200))  # line 8
cuda.fake_launch_on(launch, ctypes.c_uint64(0xe100), A)
if sys.argv[6] == "fixed":
    cuda.fake_record(record, EV, A)
    cuda.fake_wait(wait, B, EV)
cuda.fake_launch_on(launch, ctypes.c_uint64(0xe200), B)  # line 13
"#;

#[test]
fn races_across_graphs_are_found_from_the_driver_callbacks_and_written_for_the_doctor() {
    use cudarc::cupti::sys::CUpti_driver_api_trace_cbid as D;
    let (dir, cuda, script, python) = python_case("races", "two_streams.py", RACES_SCRIPT);
    let cbids = [
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
        D::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        D::CUPTI_DRIVER_TRACE_CBID_cuEventRecord,
        D::CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
    ]
    .map(|c| (c as u32).to_string());
    let file = script.to_str().unwrap();
    for (case, races) in [("racy", 2), ("fixed", 0)] {
        let json = dir.join(format!("races-{case}.json"));
        let sequence = dir.join(format!("races-{case}.launches.json"));
        let mut command = vec![python.clone(), file.to_string(), cuda.display().to_string()];
        command.extend(cbids.iter().cloned());
        command.push(case.to_string());
        let args = TraceArgs {
            json: Some(json.clone()),
            strict: false,
            hazards: true,
            launches_out: Some(sequence.clone()),
            freed: false,
            graphs: false,
            plot: None,
            events: Some(dir.join(format!("races-{case}.jsonl"))),
            lib: Some(lib()),
            cupti: Some(cuda.clone()),
            command: command.iter().map(Into::into).collect(),
        };
        assert_eq!(run(args), ExitCode::from(0), "{case}");
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let p = &report["launch_races"]["processes"][0];
        assert_eq!(p["complete"], true, "{case}: {report:#}");
        let r = &p["report"];
        assert_eq!(
            (&r["launches"], &r["graphs"]),
            (&2.into(), &2.into()),
            "{r:#}"
        );
        assert_eq!(
            r["notes"][0],
            "1 launches of executables that were not read back (instantiated before the \
             tracer attached, read-back failed, or updated with cuGraphExecUpdate) were not \
             checked",
            "{r:#}"
        );
        let found = r["races"].as_array().expect("races");
        assert_eq!(found.len(), races, "{case}: {r:#}");
        for race in found {
            let mut buffers = vec![race["buffer"].as_u64().unwrap()];
            buffers.retain(|b| [0x7f00_0000_0000, 0x7f00_1000_0000].contains(b));
            assert_eq!(buffers.len(), 1, "BUF or OTHER: {race:#}");
            for (side, line) in [("first", 7), ("second", 8)] {
                assert_eq!(
                    race[side]["graph_label"],
                    format!("graph 0x9000 (instantiated at {file}:{line} in <module>)"),
                    "{race:#}"
                );
            }
            assert_eq!(
                race["second"]["launch_line"],
                format!("{file}:13 in <module>"),
                "{race:#}"
            );
        }
        // The file `graphsmith doctor --launches` reads: the same races.
        let seq = graphsmith_analysis::launch_order::LaunchSequence::from_json(
            &std::fs::read_to_string(&sequence).unwrap(),
        )
        .unwrap();
        let doctor = graphsmith_analysis::launch_order::check(&seq);
        assert_eq!(doctor.races.len(), races, "{case}: {}", doctor.text());
        assert_eq!(seq.graphs.len(), 2);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
