//! Build script of graphsmith-llama: the decoder's PTX (`kernels/llama_kernels.cu`) into
//! `OUT_DIR/llama_kernels.ptx`, which `src/kernels/ptx.rs` embeds.
//!
//! With an NVRTC of version 13.0 (found by graphsmith-locate: `$NVRTC_LIB`, NVIDIA's
//! `nvidia-cuda-nvrtc` wheel, the CUDA toolkit, the loader's path) the `.cu` is compiled here
//! with `kernels/build_ptx.py`'s options and checks. Another NVRTC version is skipped with a
//! warning: NVRTC 13.x for x > 0 writes a newer PTX ISA than a CUDA 13.0 driver loads.
//!
//! Without one, the committed `kernels/llama_kernels.ptx` is used when the source hash on its
//! first line is the `.cu`'s; otherwise the build fails, saying how to get NVRTC 13.0.

mod nvrtc;
mod sha256;

use std::path::{Path, PathBuf};

use graphsmith_locate::{Candidate, Library, Search};

/// NVRTC as the workspace's one search knows it.
const NVRTC: Library = Library {
    soname: "libnvrtc.so.13",
    prefix: "libnvrtc.so",
    env_var: "NVRTC_LIB",
    wheel_dirs: &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"],
    toolkit_dirs: &["lib64", "targets/x86_64-linux/lib"],
    install: "install NVIDIA's `nvidia-cuda-nvrtc==13.0.*` wheel",
};

/// How to get NVRTC 13.0 from PyPI.
const FETCH: &str =
    "get NVRTC 13.0 from PyPI: `pip download --no-deps --only-binary=:all: -d nvrtc \
                     \"nvidia-cuda-nvrtc==13.0.*\" && unzip -o -q nvrtc/*.whl -d nvrtc && export \
                     NVRTC_LIB=$PWD/nvrtc/nvidia/cu13/lib/libnvrtc.so.13`";

/// The NVRTC version whose PTX (ISA 9.0) CUDA 13.0 drivers load.
const VERSION: (i32, i32) = (13, 0);

/// `kernels/build_ptx.py`'s options.
const OPTIONS: &[&str] = &["--gpu-architecture=compute_90", "-std=c++17"];

/// The kernels that must be `.entry`s of the PTX: `kernels/build_ptx.py`'s `LLAMA["extern_c"]`.
fn entries() -> Vec<String> {
    let mut out: Vec<String> = [
        "ll_embed",
        "ll_rmsnorm",
        "ll_swiglu",
        "ll_argmax",
        "ll_advance",
    ]
    .map(String::from)
    .to_vec();
    for e in [1, 2, 4, 8] {
        for g in ["", "_g4"] {
            out.push(format!("ll_attention_{e}{g}"));
        }
    }
    for e in [1, 2, 4] {
        out.push(format!("ll_attention_{e}_c8"));
    }
    // The prefill's kernels.
    out.extend(["ll_prefill_rope", "ll_gather_rows"].map(String::from));
    for e in [1, 2, 4, 8] {
        for g in ["", "_g4"] {
            out.push(format!("ll_prefill_attention_{e}{g}"));
        }
    }
    out.extend(["ll_prefill_flash_64", "ll_prefill_flash_128"].map(String::from));
    for v in [
        "norm",
        "norm_swiglu",
        "res",
        "swiglu_res",
        "norm_f32",
        "head",
    ] {
        for r in [1, 2, 4, 8] {
            out.push(format!("ll_gemv_{v}_{r}"));
        }
    }
    out
}

/// The first line of the PTX: the source's name and SHA-256 (as `kernels/build_ptx.py` writes).
fn header(source: &[u8]) -> String {
    format!("// llama_kernels.cu sha256 {}\n", sha256::hex(source))
}

/// The checks `kernels/build_ptx.py` makes: every kernel an `.entry`, the target `sm_90`.
fn check(ptx: &str) -> Result<(), String> {
    let found: Vec<&str> = ptx
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            if !(l.starts_with(".visible .entry ") || l.starts_with(".entry ")) {
                return None;
            }
            let rest = l.split_once(".entry ")?.1;
            Some(rest.split('(').next().unwrap_or(rest).trim())
        })
        .collect();
    let missing: Vec<String> = entries()
        .into_iter()
        .filter(|k| !found.contains(&k.as_str()))
        .collect();
    if !missing.is_empty() {
        return Err(format!("the PTX lacks .entry for: {}", missing.join(", ")));
    }
    if !ptx.contains(".target sm_90") {
        return Err("the PTX has no '.target sm_90' line".to_string());
    }
    Ok(())
}

/// The PTX from the first NVRTC 13.0 the search finds, and that NVRTC's path; `Err` lists what
/// was skipped and why.
fn compile(source: &[u8]) -> Result<(String, PathBuf), Vec<String>> {
    let search = Search::from_env(&NVRTC);
    let mut skipped = Vec::new();
    for candidate in search.candidates(&NVRTC) {
        let Candidate::Path(path) = candidate else {
            continue;
        };
        if !path.is_file() {
            skipped.push(format!("{}: no such file", path.display()));
            continue;
        }
        let nvrtc = match nvrtc::Nvrtc::open(&path) {
            Ok(n) => n,
            Err(e) => {
                println!("cargo:warning=skipping NVRTC at {}: {e}", path.display());
                skipped.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        if nvrtc.version != VERSION {
            let (major, minor) = nvrtc.version;
            println!(
                "cargo:warning=skipping NVRTC {major}.{minor} at {}: the decoder's PTX is built \
                 with NVRTC 13.0 only (PTX ISA 9.0; NVRTC 13.5 writes ISA 9.5, which CUDA 13.0 \
                 drivers cannot load); set NVRTC_LIB to an NVRTC 13.0",
                path.display()
            );
            skipped.push(format!(
                "{}: NVRTC {major}.{minor}, not 13.0",
                path.display()
            ));
            continue;
        }
        let (ptx, log) = nvrtc
            .compile(source, "llama_kernels.cu", OPTIONS)
            .and_then(|(ptx, log)| check(&ptx).map(|()| (ptx, log)))
            .unwrap_or_else(|e| {
                fail(&format!(
                    "compiling kernels/llama_kernels.cu with NVRTC 13.0 ({}): {e}",
                    path.display()
                ))
            });
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            println!("cargo:warning=NVRTC: {line}");
        }
        return Ok((ptx, path));
    }
    if skipped.is_empty() {
        skipped.push(match search.locate(&NVRTC) {
            Err(e) => e.to_string(),
            Ok(found) => format!("{}: not tried", found.path.display()),
        });
    }
    Err(skipped)
}

fn fail(message: &str) -> ! {
    eprintln!("error: graphsmith-llama's build script: {message}");
    std::process::exit(1);
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let kernels = manifest.join("../../kernels");
    let cu_path = kernels.join("llama_kernels.cu");
    let committed_path = kernels.join("llama_kernels.ptx");
    println!("cargo:rerun-if-changed={}", cu_path.display());
    println!("cargo:rerun-if-changed={}", committed_path.display());
    println!("cargo:rerun-if-changed=build");
    for var in [
        "NVRTC_LIB",
        "GRAPHSMITH_PYTHON",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "LD_LIBRARY_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let source = std::fs::read(&cu_path)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", cu_path.display())));
    let header = header(&source);
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    let (ptx, how) = match compile(&source) {
        Ok((ptx, nvrtc)) => (
            format!("{header}{ptx}"),
            format!("compiled with NVRTC 13.0 at {}\n", nvrtc.display()),
        ),
        Err(skipped) => match committed(&committed_path, &header) {
            Ok(ptx) => (
                ptx,
                format!(
                    "the committed {} (no NVRTC 13.0: {})\n",
                    committed_path.display(),
                    skipped.join("; ")
                ),
            ),
            Err(why) => fail(&format!(
                "{why}, and no NVRTC 13.0 was found to compile it. To build, {FETCH}, then \
                 build again (the committed PTX is refreshed only at a release; \
                 kernels/README.md says how). The search for NVRTC: {}",
                skipped.join("; ")
            )),
        },
    };
    // Where the embedded PTX came from, for a person checking a build.
    for (name, text) in [("llama_kernels.ptx", ptx), ("llama_kernels.how", how)] {
        let dest = out.join(name);
        std::fs::write(&dest, text)
            .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", dest.display())));
    }
}

/// The committed PTX when its first line is `header` (it was built from this very source).
fn committed(path: &Path, header: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the committed {}: {e}", path.display()))?;
    let first = text.lines().next().unwrap_or_default();
    if first == header.trim_end() {
        return Ok(text);
    }
    Err(format!(
        "kernels/llama_kernels.cu has changed since the committed kernels/llama_kernels.ptx was \
         built (the .cu's first line would be `{}`, the PTX's is `{first}`)",
        header.trim_end()
    ))
}
