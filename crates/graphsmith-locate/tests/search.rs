//! The search's order and its messages, on temporary directories laid out like NVIDIA's wheels
//! and a CUDA toolkit.

use std::path::{Path, PathBuf};

use graphsmith_locate::{library_in, Candidate, Found, Library, Search};

const NCCL: Library = Library {
    soname: "libnccl.so.2",
    prefix: "libnccl.so.2",
    env_var: "GRAPHSMITH_NCCL",
    wheel_dirs: &["nvidia/nccl/lib", "nvidia/cu13/lib"],
    toolkit_dirs: &["lib64"],
    install: "`pip install nvidia-nccl-cu13`",
};

/// A library whose files have other names than its soname's start, in two toolkit folders.
const CUPTI: Library = Library {
    soname: "libcupti.so.13",
    prefix: "libcupti.so",
    toolkit_dirs: &["extras/CUPTI/lib64", "lib64"],
    ..NCCL
};

fn touch(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, b"not really a library").unwrap();
}

fn search(root: &Path) -> Search {
    Search {
        python_paths: vec![root.join("py/empty-site"), root.join("py/site-packages")],
        cuda_roots: vec![root.join("cuda")],
        loader_dirs: vec![root.join("ld")],
        ld_cache: vec![
            ("libc.so.6".into(), root.join("cache/libc.so.6")),
            (
                "libnccl.so.2.27.7".into(),
                root.join("cache/libnccl.so.2.27.7"),
            ),
            ("libnccl.so.2".into(), root.join("cache/libnccl.so.2")),
        ],
        by_name: true,
        ..Search::default()
    }
}

#[test]
fn wheels_come_before_the_toolkit_the_loader_path_and_the_cache() {
    let t = tempfile::tempdir().unwrap();
    let wheel = t
        .path()
        .join("py/site-packages/nvidia/nccl/lib/libnccl.so.2");
    let toolkit = t.path().join("cuda/lib64/libnccl.so.2");
    let ld = t.path().join("ld/libnccl.so.2.27.7");
    for f in [&wheel, &toolkit, &ld] {
        touch(f);
    }
    let s = search(t.path());
    assert_eq!(
        s.candidates(&NCCL),
        vec![
            Candidate::Path(wheel.clone()),
            Candidate::Path(toolkit),
            Candidate::Path(ld),
            Candidate::Path(t.path().join("cache/libnccl.so.2")),
            Candidate::Path(t.path().join("cache/libnccl.so.2.27.7")),
            Candidate::Name("libnccl.so.2"),
        ]
    );
    assert_eq!(s.locate(&NCCL), Ok(Found { path: wheel }));
}

#[test]
fn the_soname_wins_in_a_directory_else_the_longest_matching_name() {
    let t = tempfile::tempdir().unwrap();
    // (directory, its files, the one picked)
    let cases = [
        (
            "a",
            &["libcupti.so", "libcupti.so.13.0.85", "libcupti.so.13"][..],
            Some("libcupti.so.13"),
        ),
        (
            "b",
            &["libcupti.so", "libcupti.so.12.8.90", "libcuptiextra.txt"][..],
            Some("libcupti.so.12.8.90"),
        ),
        ("missing", &[][..], None),
    ];
    for (dir, files, picked) in cases {
        for f in files {
            touch(&t.path().join(dir).join(f));
        }
        assert_eq!(
            library_in(&CUPTI, &t.path().join(dir)),
            picked.map(|p| t.path().join(dir).join(p)),
            "{dir}"
        );
    }
}

#[test]
fn each_toolkit_root_is_searched_in_the_library_s_folders_in_order() {
    let t = tempfile::tempdir().unwrap();
    let extras = t.path().join("cuda/extras/CUPTI/lib64/libcupti.so.13");
    let lib64 = t.path().join("cuda/lib64/libcupti.so.13");
    touch(&extras);
    touch(&lib64);
    let s = Search {
        cuda_roots: vec![t.path().join("cuda")],
        ..Search::default()
    };
    assert_eq!(
        s.candidates(&CUPTI),
        vec![Candidate::Path(extras), Candidate::Path(lib64)]
    );
}

#[test]
fn an_explicit_path_is_the_only_place_tried_a_file_or_a_directory() {
    let t = tempfile::tempdir().unwrap();
    touch(&t.path().join("lib/libnccl.so.2.27.7"));
    touch(
        &t.path()
            .join("py/site-packages/nvidia/nccl/lib/libnccl.so.2"),
    );
    let only = |explicit: &str| {
        Search {
            explicit: Some(t.path().join(explicit)),
            ..search(t.path())
        }
        .candidates(&NCCL)
    };
    assert_eq!(
        only("lib"),
        vec![Candidate::Path(t.path().join("lib/libnccl.so.2.27.7"))]
    );
    assert_eq!(
        only("nope.so"),
        vec![Candidate::Path(t.path().join("nope.so"))]
    );
    let missing = Search {
        explicit: Some(t.path().join("nope.so")),
        ..Search::default()
    };
    let err = missing.locate(&NCCL).unwrap_err();
    assert_eq!(
        err.looked,
        vec![format!(
            "{} (from GRAPHSMITH_NCCL)",
            t.path().join("nope.so").display()
        )]
    );
}

/// The message with the temporary directory written as `<tmp>`.
fn shown(text: &str, tmp: &Path) -> String {
    text.replace(&tmp.display().to_string(), "<tmp>")
}

#[test]
fn not_found_names_every_place_looked_and_the_fix() {
    let t = tempfile::tempdir().unwrap();
    let s = Search {
        by_name: false,
        ld_cache: Vec::new(),
        ..search(t.path())
    };
    let err = s.locate(&NCCL).unwrap_err();
    assert_eq!(
        shown(&err.to_string(), t.path()),
        "libnccl.so.2 was not found: set GRAPHSMITH_NCCL to the library file (or the directory \
         holding it), or `pip install nvidia-nccl-cu13`. Looked in: \
         <tmp>/py/empty-site/nvidia/nccl/lib, <tmp>/py/empty-site/nvidia/cu13/lib, \
         <tmp>/py/site-packages/nvidia/nccl/lib, <tmp>/py/site-packages/nvidia/cu13/lib, \
         <tmp>/cuda/lib64, <tmp>/ld, the ld.so cache (ldconfig -p)"
    );
    let with_name = search(t.path()).locate(&NCCL).unwrap_err();
    assert_eq!(
        with_name.looked.last().unwrap(),
        "libnccl.so.2 by name on the loader's path (LD_LIBRARY_PATH, ld.so cache)"
    );
}

#[test]
fn a_directory_named_twice_is_searched_once() {
    let t = tempfile::tempdir().unwrap();
    let s = Search {
        python_paths: vec![t.path().join("site"), t.path().join("site")],
        cuda_roots: vec![t.path().join("cuda")],
        loader_dirs: vec![t.path().join("cuda/lib64")],
        ..Search::default()
    };
    let dirs: Vec<PathBuf> = s.dirs(&NCCL);
    assert_eq!(
        dirs,
        vec![
            t.path().join("site/nvidia/nccl/lib"),
            t.path().join("site/nvidia/cu13/lib"),
            t.path().join("cuda/lib64"),
        ]
    );
}
