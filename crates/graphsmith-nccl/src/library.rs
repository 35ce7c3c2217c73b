//! Where libnccl is: `$GRAPHSMITH_NCCL` (a file, or a directory holding it) when set, and only
//! there; else the `nvidia/nccl/lib` directory NVIDIA's Python wheels (`nvidia-nccl-cu12`,
//! `nvidia-nccl-cu13`) install under each `sys.path` entry of the Python interpreter
//! (`$GRAPHSMITH_PYTHON`, else `python3`), then `lib64` of `$CUDA_HOME`, `$CUDA_PATH` and
//! `$CUDA_ROOT`, `/usr/local/cuda/lib64` and `/usr/local/cuda/targets/x86_64-linux/lib`, and
//! last the loader's own search (`LD_LIBRARY_PATH`, the ld.so cache) for `libnccl.so.2` by name.
//!
//! The search is data ([`Search`], filled by [`Search::from_env`]), so its order is tested with
//! temporary directories; loading is in `ffi.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// NCCL's soname (the library NVIDIA's wheels and the toolkit ship; NCCL 2.x).
pub const SONAME: &str = "libnccl.so.2";

/// Where a libnccl may be, in the order to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A file found on disk.
    Path(PathBuf),
    /// A name for the loader to resolve (its own search path).
    Name(&'static str),
}

impl std::fmt::Display for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Candidate::Path(p) => write!(f, "{}", p.display()),
            Candidate::Name(n) => write!(f, "{n} by name on the loader's path"),
        }
    }
}

/// What the search looks at.
#[derive(Clone, Debug, Default)]
pub struct Search {
    /// `$GRAPHSMITH_NCCL`: when set, the only place tried.
    pub explicit: Option<PathBuf>,
    /// The Python interpreter's `sys.path` entries (NVIDIA's wheels live under them).
    pub python_paths: Vec<PathBuf>,
    /// CUDA toolkit roots (`$CUDA_HOME`, ...), each searched in `lib64`.
    pub cuda_roots: Vec<PathBuf>,
    /// Further directories (the default toolkit location).
    pub system_dirs: Vec<PathBuf>,
    /// Whether to end with the loader's own search by name.
    pub loader: bool,
}

/// `sys.path` of `python` (empty when there is no such interpreter).
fn python_sys_path(python: &str) -> Vec<PathBuf> {
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

fn var(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

impl Search {
    /// The search this process's environment describes (runs the Python interpreter once).
    pub fn from_env() -> Search {
        if let Some(p) = var("GRAPHSMITH_NCCL") {
            return Search {
                explicit: Some(PathBuf::from(p)),
                ..Search::default()
            };
        }
        let python = var("GRAPHSMITH_PYTHON")
            .and_then(|p| p.into_string().ok())
            .unwrap_or_else(|| "python3".to_string());
        Search {
            explicit: None,
            python_paths: python_sys_path(&python),
            cuda_roots: ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
                .iter()
                .filter_map(|v| var(v).map(PathBuf::from))
                .collect(),
            system_dirs: vec![
                "/usr/local/cuda/lib64".into(),
                "/usr/local/cuda/targets/x86_64-linux/lib".into(),
            ],
            loader: true,
        }
    }

    /// Every directory searched, in order (not the explicit path, nor the loader's search).
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs = Vec::new();
        for p in &self.python_paths {
            let nvidia = p.join("nvidia");
            dirs.push(nvidia.join("nccl/lib"));
            dirs.push(nvidia.join("cu13/lib"));
        }
        dirs.extend(self.cuda_roots.iter().map(|r| r.join("lib64")));
        dirs.extend(self.system_dirs.iter().cloned());
        dirs
    }

    /// Every place looked, for the error when nothing loads.
    pub fn looked(&self) -> Vec<String> {
        if let Some(p) = &self.explicit {
            return vec![format!("{} (from GRAPHSMITH_NCCL)", p.display())];
        }
        let mut out: Vec<String> = self
            .dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        if self.loader {
            out.push(format!(
                "{SONAME} by name on the loader's path (LD_LIBRARY_PATH, ld.so cache)"
            ));
        }
        out
    }

    /// The libraries to try, in order: what exists on disk, then the loader's search.
    pub fn candidates(&self) -> Vec<Candidate> {
        if let Some(p) = &self.explicit {
            let file = if p.is_dir() {
                nccl_in(p).unwrap_or_else(|| p.join(SONAME))
            } else {
                p.clone()
            };
            return vec![Candidate::Path(file)];
        }
        let mut out: Vec<Candidate> = self
            .dirs()
            .iter()
            .filter_map(|d| nccl_in(d))
            .map(Candidate::Path)
            .collect();
        if self.loader {
            out.push(Candidate::Name(SONAME));
        }
        out
    }
}

/// The libnccl in `dir`: `libnccl.so.2` itself, else the longest `libnccl.so.2.*` name (the
/// fully versioned file a wheel or package may hold without the link).
pub fn nccl_in(dir: &Path) -> Option<PathBuf> {
    let exact = dir.join(SONAME);
    if exact.is_file() {
        return Some(exact);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnccl.so.2."))
        })
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    found.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"not really a library").unwrap();
    }

    fn search(python: &Path, cuda: &Path) -> Search {
        Search {
            explicit: None,
            python_paths: vec![python.join("empty-site"), python.join("site-packages")],
            cuda_roots: vec![cuda.to_path_buf()],
            system_dirs: vec![cuda.join("nowhere")],
            loader: true,
        }
    }

    #[test]
    fn the_wheel_comes_before_the_toolkit_and_the_loader() {
        let t = tempfile::tempdir().unwrap();
        let wheel = t
            .path()
            .join("py/site-packages/nvidia/nccl/lib/libnccl.so.2");
        let toolkit = t.path().join("cuda/lib64/libnccl.so.2");
        touch(&wheel);
        touch(&toolkit);
        let s = search(&t.path().join("py"), &t.path().join("cuda"));
        assert_eq!(
            s.candidates(),
            vec![
                Candidate::Path(wheel),
                Candidate::Path(toolkit),
                Candidate::Name(SONAME)
            ]
        );
    }

    #[test]
    fn a_fully_versioned_file_is_found_without_its_link() {
        let t = tempfile::tempdir().unwrap();
        let lib = t.path().join("libnccl.so.2.27.7");
        touch(&lib);
        touch(&t.path().join("libnccl-net.so"));
        assert_eq!(nccl_in(t.path()), Some(lib));
    }

    #[test]
    fn nothing_on_disk_leaves_the_loader_and_lists_every_place() {
        let t = tempfile::tempdir().unwrap();
        let s = search(&t.path().join("py"), &t.path().join("cuda"));
        assert_eq!(s.candidates(), vec![Candidate::Name(SONAME)]);
        let looked = s.looked();
        let py = t.path().join("py");
        assert_eq!(
            looked,
            vec![
                py.join("empty-site/nvidia/nccl/lib").display().to_string(),
                py.join("empty-site/nvidia/cu13/lib").display().to_string(),
                py.join("site-packages/nvidia/nccl/lib")
                    .display()
                    .to_string(),
                py.join("site-packages/nvidia/cu13/lib")
                    .display()
                    .to_string(),
                t.path().join("cuda/lib64").display().to_string(),
                t.path().join("cuda/nowhere").display().to_string(),
                "libnccl.so.2 by name on the loader's path (LD_LIBRARY_PATH, ld.so cache)".into(),
            ]
        );
    }

    #[test]
    fn an_explicit_path_is_the_only_place_tried() {
        let t = tempfile::tempdir().unwrap();
        touch(&t.path().join("lib/libnccl.so.2"));
        let dir = Search {
            explicit: Some(t.path().join("lib")),
            loader: true,
            ..Search::default()
        };
        assert_eq!(
            dir.candidates(),
            vec![Candidate::Path(t.path().join("lib/libnccl.so.2"))]
        );
        let missing = Search {
            explicit: Some(t.path().join("nope.so")),
            ..Search::default()
        };
        assert_eq!(
            missing.candidates(),
            vec![Candidate::Path(t.path().join("nope.so"))]
        );
        assert_eq!(
            missing.looked(),
            vec![format!(
                "{} (from GRAPHSMITH_NCCL)",
                t.path().join("nope.so").display()
            )]
        );
    }
}
