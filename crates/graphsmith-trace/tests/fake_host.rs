//! The injection library loaded by a stand-in for CUDA and NVTX (programs/fake_host.c, built
//! with the system C compiler), through `graphsmith trace` itself: the library loads, attaches
//! to NVTX, says why it cannot attach to CUPTI (there is no CUDA here), and the command's exit
//! code, crash and output pass through. Skipped when no C compiler is found.

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

fn trace(dir: &Path, name: &str, command: &[&str]) -> (ExitCode, serde_json::Value) {
    let json = dir.join(format!("{name}.json"));
    let args = TraceArgs {
        json: Some(json.clone()),
        strict: false,
        events: Some(dir.join(format!("{name}.jsonl"))),
        lib: Some(lib()),
        cupti: Some(PathBuf::from("/nonexistent/libcupti.so")),
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
