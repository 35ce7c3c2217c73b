//! The one search for NVIDIA's shared libraries (libcublas, libcupti, libnccl, libnvrtc), used by
//! the decoder, the tracer, the collectives and the decoder's build script.
//!
//! A [`Library`] names its soname, its override variable, the folders NVIDIA's Python wheels
//! install it in and the folders of a CUDA toolkit that hold it. A [`Search`] says where to look,
//! in this order:
//!
//! 1. the override variable (a file, or a directory holding the library): when set, the only
//!    place tried;
//! 2. the wheel folders under every `sys.path` entry of a Python interpreter (`site-packages`);
//! 3. the toolkit folders under `$CUDA_HOME`, `$CUDA_PATH`, `$CUDA_ROOT`, `/usr/local/cuda` and
//!    `/usr/local/cuda-*` (newest version first);
//! 4. the loader's path: the directories of `LD_LIBRARY_PATH`, then the ld.so cache
//!    (`ldconfig -p`), and, when asked, the soname by name for the loader itself.
//!
//! The search is data (filled from the environment by [`Search::from_env`]), so its order and
//! its messages are tested with temporary directories. Nothing here loads a library.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

mod env;

pub use env::{cuda_roots, ld_cache, python_sys_path};

/// An NVIDIA library and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Library {
    /// The soname the loader asks for (`libnccl.so.2`); a directory's file of exactly this name
    /// is preferred.
    pub soname: &'static str,
    /// The start of every file name that is this library (`libnccl.so.2` also matches
    /// `libnccl.so.2.27.7`); of several, the longest name is taken.
    pub prefix: &'static str,
    /// The variable that overrides the search (`GRAPHSMITH_NCCL`).
    pub env_var: &'static str,
    /// Folders under a Python `sys.path` entry where NVIDIA's wheels put it (`nvidia/nccl/lib`).
    pub wheel_dirs: &'static [&'static str],
    /// Folders under a CUDA toolkit's root that hold it (`lib64`).
    pub toolkit_dirs: &'static [&'static str],
    /// How to install it, for the message when it is not found (`pip install nvidia-nccl-cu13`).
    pub install: &'static str,
}

/// Where a library may be, in the order to try.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Candidate {
    /// A file (found on disk, or the override, which may not exist).
    Path(PathBuf),
    /// The soname, for the loader to resolve on its own path.
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

/// A library file that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
}

/// Nothing was found: the library, every place looked, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotFound {
    pub soname: &'static str,
    pub env_var: &'static str,
    pub install: &'static str,
    /// Every place looked, in order.
    pub looked: Vec<String>,
}

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} was not found: set {} to the library file (or the directory holding it), or {}. \
             Looked in: {}",
            self.soname,
            self.env_var,
            self.install,
            self.looked.join(", ")
        )
    }
}

impl std::error::Error for NotFound {}

/// What a search looks at, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Search {
    /// The override variable's value: when set, the only place tried.
    pub explicit: Option<PathBuf>,
    /// A Python interpreter's `sys.path` entries (NVIDIA's wheels live under them).
    pub python_paths: Vec<PathBuf>,
    /// CUDA toolkit roots, each searched in the library's toolkit folders.
    pub cuda_roots: Vec<PathBuf>,
    /// The directories of `LD_LIBRARY_PATH`.
    pub loader_dirs: Vec<PathBuf>,
    /// The ld.so cache: (file name, path) of each library it knows.
    pub ld_cache: Vec<(String, PathBuf)>,
    /// Whether to end with the soname by name, for the loader to resolve.
    pub by_name: bool,
}

fn var(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

impl Search {
    /// The search this process's environment describes for `lib`, with the wheels of
    /// `$GRAPHSMITH_PYTHON` (else `python3`); runs the interpreter and `ldconfig -p` once each.
    pub fn from_env(lib: &Library) -> Search {
        let python = var("GRAPHSMITH_PYTHON").unwrap_or_else(|| "python3".into());
        Search::with_python(lib, Some(&python))
    }

    /// As [`Search::from_env`], with the wheels of `python` (none when `None`).
    pub fn with_python(lib: &Library, python: Option<&OsStr>) -> Search {
        if let Some(p) = var(lib.env_var) {
            return Search {
                explicit: Some(PathBuf::from(p)),
                ..Search::default()
            };
        }
        Search {
            explicit: None,
            python_paths: python.map(python_sys_path).unwrap_or_default(),
            cuda_roots: cuda_roots(Path::new("/usr/local")),
            loader_dirs: var("LD_LIBRARY_PATH")
                .map(|v| std::env::split_paths(&v).collect())
                .unwrap_or_default(),
            ld_cache: ld_cache(),
            by_name: false,
        }
    }

    /// Every directory searched for `lib`, in order, each once.
    pub fn dirs(&self, lib: &Library) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        let wheels = self
            .python_paths
            .iter()
            .flat_map(|p| lib.wheel_dirs.iter().map(move |w| p.join(w)));
        let toolkits = self
            .cuda_roots
            .iter()
            .flat_map(|r| lib.toolkit_dirs.iter().map(move |t| r.join(t)));
        for d in wheels
            .chain(toolkits)
            .chain(self.loader_dirs.iter().cloned())
        {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        dirs
    }

    /// Every place looked for `lib`, for the message when nothing is found or loads.
    pub fn looked(&self, lib: &Library) -> Vec<String> {
        if let Some(p) = &self.explicit {
            return vec![format!("{} (from {})", p.display(), lib.env_var)];
        }
        let mut out: Vec<String> = self
            .dirs(lib)
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        out.push("the ld.so cache (ldconfig -p)".to_string());
        if self.by_name {
            out.push(format!(
                "{} by name on the loader's path (LD_LIBRARY_PATH, ld.so cache)",
                lib.soname
            ));
        }
        out
    }

    /// The files to try for `lib`, in order: the override alone (which may not exist), else
    /// every one found on disk, then the ld.so cache's, then the soname by name when asked.
    pub fn candidates(&self, lib: &Library) -> Vec<Candidate> {
        if let Some(p) = &self.explicit {
            let file = if p.is_dir() {
                library_in(lib, p).unwrap_or_else(|| p.join(lib.soname))
            } else {
                p.clone()
            };
            return vec![Candidate::Path(file)];
        }
        let mut out: Vec<Candidate> = Vec::new();
        let mut push = |c: Candidate| {
            if !out.contains(&c) {
                out.push(c);
            }
        };
        for d in self.dirs(lib) {
            if let Some(f) = library_in(lib, &d) {
                push(Candidate::Path(f));
            }
        }
        let mut cached: Vec<&(String, PathBuf)> = self
            .ld_cache
            .iter()
            .filter(|(name, _)| name.starts_with(lib.prefix))
            .collect();
        // The soname itself first, as the loader would pick it.
        cached.sort_by_key(|(name, _)| name != lib.soname);
        for (_, path) in cached {
            push(Candidate::Path(path.clone()));
        }
        if self.by_name {
            push(Candidate::Name(lib.soname));
        }
        out
    }

    /// The first file of [`Search::candidates`] that exists.
    pub fn locate(&self, lib: &Library) -> Result<Found, NotFound> {
        self.candidates(lib)
            .into_iter()
            .find_map(|c| match c {
                Candidate::Path(p) if p.is_file() => Some(Found { path: p }),
                _ => None,
            })
            .ok_or_else(|| NotFound {
                soname: lib.soname,
                env_var: lib.env_var,
                install: lib.install,
                looked: self.looked(lib),
            })
    }
}

/// `lib` as this process's environment finds it (see [`Search::from_env`]).
pub fn locate(lib: &Library) -> Result<Found, NotFound> {
    Search::from_env(lib).locate(lib)
}

/// The file of `lib` in `dir`: the soname itself, else the longest file name starting with the
/// library's prefix (a fully versioned file a wheel or package may hold without its link).
pub fn library_in(lib: &Library, dir: &Path) -> Option<PathBuf> {
    let exact = dir.join(lib.soname);
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
                    .is_some_and(|n| n.starts_with(lib.prefix))
        })
        .collect();
    found.sort_by(|a, b| {
        (b.as_os_str().len(), a.as_os_str()).cmp(&(a.as_os_str().len(), b.as_os_str()))
    });
    found.into_iter().next()
}
