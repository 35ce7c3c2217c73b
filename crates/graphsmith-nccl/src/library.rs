//! Where libnccl is, through the workspace's one search for NVIDIA's libraries
//! (graphsmith-locate): `$GRAPHSMITH_NCCL` (a file, or a directory holding it) when set, and only
//! there; else the `nvidia/nccl/lib` and `nvidia/cu13/lib` directories NVIDIA's Python wheels
//! (`nvidia-nccl-cu12`, `nvidia-nccl-cu13`) install under each `sys.path` entry of the Python
//! interpreter (`$GRAPHSMITH_PYTHON`, else `python3`), then `lib64` and
//! `targets/x86_64-linux/lib` of `$CUDA_HOME`, `$CUDA_PATH`, `$CUDA_ROOT` and `/usr/local/cuda*`,
//! the directories of `LD_LIBRARY_PATH` and the ld.so cache, and last the loader's own search for
//! `libnccl.so.2` by name.
//!
//! Loading is in `ffi.rs`.

pub use graphsmith_locate::{Candidate, Library, Search};

/// NCCL's soname (the library NVIDIA's wheels and the toolkit ship; NCCL 2.x).
pub const SONAME: &str = "libnccl.so.2";

/// libnccl as the search knows it.
pub const NCCL: Library = Library {
    soname: SONAME,
    // Also the fully versioned file (`libnccl.so.2.27.7`) a wheel or package may hold alone.
    prefix: "libnccl.so.2",
    env_var: "GRAPHSMITH_NCCL",
    wheel_dirs: &["nvidia/nccl/lib", "nvidia/cu13/lib"],
    toolkit_dirs: &["lib64", "targets/x86_64-linux/lib"],
    install: "`pip install nvidia-nccl-cu13` (or -cu12) into the Python that graphsmith-nccl \
              asks for its paths (GRAPHSMITH_PYTHON, else python3), or add the directory \
              holding it to LD_LIBRARY_PATH",
};

/// The search this process's environment describes (runs the Python interpreter and
/// `ldconfig -p` once each), ending with the loader's search by name.
pub fn search_from_env() -> Search {
    Search {
        by_name: true,
        ..Search::from_env(&NCCL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_wheels_come_first_and_the_loader_s_search_by_name_last() {
        let s = Search {
            python_paths: vec!["/site".into()],
            cuda_roots: vec!["/cuda".into()],
            by_name: true,
            ..Search::default()
        };
        let dirs = s.dirs(&NCCL);
        assert_eq!(
            dirs,
            [
                "/site/nvidia/nccl/lib",
                "/site/nvidia/cu13/lib",
                "/cuda/lib64",
                "/cuda/targets/x86_64-linux/lib"
            ]
            .map(Path::new)
        );
        assert_eq!(
            s.looked(&NCCL).last().unwrap(),
            "libnccl.so.2 by name on the loader's path (LD_LIBRARY_PATH, ld.so cache)"
        );
        assert_eq!(s.candidates(&NCCL), vec![Candidate::Name(SONAME)]);
    }
}
