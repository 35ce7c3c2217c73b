//! The injection library loaded by a stand-in for CUDA and NVTX (programs/fake_host.c, built
//! with the system C compiler), through `graphsmith trace` itself: the library loads, attaches
//! to NVTX, says why it cannot attach to CUPTI (there is no CUDA here), and the command's exit
//! code, crash and output pass through. Skipped when no C compiler is found.
//!
//! With `--hazards`, a stand-in for libcuda and CUPTI (programs/fake_cuda.c) plays the driver:
//! the library subscribes to it, sees a graph instantiated, reads that graph back through the
//! stand-in's driver functions (with cuda.h's layouts), ignores the callbacks of its own calls,
//! and records the hazard planted in it.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use graphsmith_trace::cli::{run, TraceArgs};

fn lib() -> PathBuf {
    // The test binary is target/<profile>/deps/<name>-<hash>; the cdylib is built beside it.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libgraphsmith_trace.so")
}

fn fake_host(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("fake_host.c");
    std::fs::write(&src, include_str!("programs/fake_host.c")).ok()?;
    let exe = dir.join("fake_host");
    let ok = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .status()
        .ok()?
        .success();
    ok.then_some(exe)
}

/// Builds the stand-in for libcuda and CUPTI, named and sonamed as the driver.
fn fake_cuda(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("fake_cuda.c");
    std::fs::write(&src, include_str!("programs/fake_cuda.c")).ok()?;
    let lib = dir.join("libcuda.so.1");
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .ok()?
        .success();
    ok.then_some(lib)
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
    let json = dir.join(format!("{name}.json"));
    let args = TraceArgs {
        json: Some(json.clone()),
        strict: false,
        hazards,
        events: Some(dir.join(format!("{name}.jsonl"))),
        lib: Some(lib()),
        cupti: Some(cupti),
        command: command.iter().map(Into::into).collect(),
    };
    let code = run(args);
    let report = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (code, report)
}

#[test]
fn the_library_loads_attaches_to_nvtx_and_reports_cupti_missing() {
    let dir = std::env::temp_dir().join(format!("graphsmith-trace-fake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if !lib().is_file() {
        // cargo builds the cdylib beside the test binary; a copied test binary has none.
        eprintln!("skipped: no {} beside the test binary", lib().display());
        return;
    }
    let Some(host) = fake_host(&dir) else {
        eprintln!("skipped: no C compiler (cc)");
        return;
    };
    let host = host.to_str().unwrap();

    let (code, report) = trace(&dir, "exit5", &[host, "ok", "5"]);
    assert_eq!(
        code,
        ExitCode::from(5),
        "the command's exit code passes through"
    );
    let p = &report["processes"][0];
    assert_eq!(p["attached"]["state"], "no", "{report:#}");
    assert_eq!(p["attached"]["reason"], "CuptiMissing", "{report:#}");
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
    if !lib().is_file() {
        eprintln!("skipped: no {} beside the test binary", lib().display());
        return;
    }
    let (Some(host), Some(cuda)) = (fake_host(&dir), fake_cuda(&dir)) else {
        eprintln!("skipped: no C compiler (cc)");
        return;
    };
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
