//! Reading the places to search from this machine: a Python interpreter's `sys.path`, the CUDA
//! toolkit roots, the ld.so cache.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `sys.path` of the interpreter `python` (empty when it does not run).
pub fn python_sys_path(python: &OsStr) -> Vec<PathBuf> {
    let Ok(out) = Command::new(python)
        .args([
            "-c",
            "import sys; print('\\n'.join(p for p in sys.path if p))",
        ])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The CUDA toolkit roots: `$CUDA_HOME`, `$CUDA_PATH`, `$CUDA_ROOT` (those set), then
/// `<base>/cuda`, then `<base>/cuda-*` with the newest version first (`cuda-13.0` before
/// `cuda-12.8`), each once.
pub fn cuda_roots(base: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .collect();
    roots.push(base.join("cuda"));
    let mut versioned: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(base)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    let version = name.strip_prefix("cuda-")?;
                    let key = version
                        .split('.')
                        .map(|n| n.parse::<u64>().unwrap_or(0))
                        .collect();
                    Some((key, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    versioned.sort_by(|a, b| b.cmp(a));
    roots.extend(versioned.into_iter().map(|(_, p)| p));
    let mut unique = Vec::new();
    for r in roots {
        if !unique.contains(&r) {
            unique.push(r);
        }
    }
    unique
}

/// The ld.so cache as `ldconfig -p` prints it: (file name, path) of each library (empty when
/// `ldconfig` does not run).
pub fn ld_cache() -> Vec<(String, PathBuf)> {
    let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|cmd| Command::new(cmd).arg("-p").output().ok());
    let Some(out) = out else {
        return Vec::new();
    };
    parse_ld_cache(&String::from_utf8_lossy(&out.stdout))
}

/// Lines like `\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2`.
pub(crate) fn parse_ld_cache(text: &str) -> Vec<(String, PathBuf)> {
    text.lines()
        .filter_map(|l| {
            let (left, path) = l.split_once("=>")?;
            let name = left.split_whitespace().next()?;
            Some((name.to_string(), PathBuf::from(path.trim())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ld_cache_lines_are_read_and_its_header_skipped() {
        let text = "1234 libs found in cache `/etc/ld.so.cache'\n\
                    \tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n\
                    \tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n";
        assert_eq!(
            parse_ld_cache(text),
            vec![
                (
                    "libnccl.so.2".to_string(),
                    PathBuf::from("/usr/lib/x86_64-linux-gnu/libnccl.so.2")
                ),
                (
                    "libc.so.6".to_string(),
                    PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
                ),
            ]
        );
    }

    #[test]
    fn versioned_toolkits_come_newest_first_after_the_plain_one() {
        let t = tempfile::tempdir().unwrap();
        for d in ["cuda-12.8", "cuda-13.0", "cuda-12.10", "cudnn", "cuda"] {
            std::fs::create_dir(t.path().join(d)).unwrap();
        }
        let roots = cuda_roots(t.path());
        // $CUDA_HOME and friends may be set where the test runs: only the tail is ours.
        let ours: Vec<_> = roots
            .iter()
            .filter(|r| r.starts_with(t.path()))
            .map(|r| r.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(ours, ["cuda", "cuda-13.0", "cuda-12.10", "cuda-12.8"]);
    }
}
