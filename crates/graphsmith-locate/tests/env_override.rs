//! The override variable, read from the environment (its own test binary: it sets variables).

use graphsmith_locate::{locate, Candidate, Library, Search};

const FAKE: Library = Library {
    soname: "libgraphsmith-locate-fake.so.1",
    prefix: "libgraphsmith-locate-fake.so",
    env_var: "GRAPHSMITH_LOCATE_FAKE",
    wheel_dirs: &["nvidia/fake/lib"],
    toolkit_dirs: &["lib64"],
    install: "nothing to install",
};

#[test]
fn the_override_variable_is_the_only_place_and_an_empty_one_is_unset() {
    let t = tempfile::tempdir().unwrap();
    let lib = t.path().join("libgraphsmith-locate-fake.so.1");
    std::fs::write(&lib, b"not really a library").unwrap();

    std::env::set_var(FAKE.env_var, t.path());
    let s = Search::from_env(&FAKE);
    assert_eq!(s.explicit.as_deref(), Some(t.path()));
    assert_eq!(s.candidates(&FAKE), vec![Candidate::Path(lib.clone())]);
    assert_eq!(locate(&FAKE).unwrap().path, lib);

    std::env::set_var(FAKE.env_var, t.path().join("missing.so"));
    let err = locate(&FAKE).unwrap_err();
    assert_eq!(
        err.looked,
        vec![format!(
            "{} (from GRAPHSMITH_LOCATE_FAKE)",
            t.path().join("missing.so").display()
        )]
    );

    std::env::set_var(FAKE.env_var, "");
    let s = Search::with_python(&FAKE, None);
    assert_eq!(s.explicit, None);
    assert!(s.python_paths.is_empty());
    assert!(s.cuda_roots.iter().any(|r| r.ends_with("cuda")));
    let err = s.locate(&FAKE).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("libgraphsmith-locate-fake.so.1 was not found: set GRAPHSMITH_LOCATE_FAKE"));
}
