//! CPU tests of the failure catalogue: docs/failures.md is generated from it and must not drift
//! (`GRAPHSMITH_BLESS=1` rewrites the file), every entry is reproduced by a GPU test that
//! exists, and `explain` finds entries by number, driver name, runtime name or id.

use graphsmith::catalogue::{self, ENTRIES};

/// docs/failures.md as it was when the test was built, so that the test binary checks it
/// wherever it runs (a machine with an NVIDIA GPU gets test binaries without the source tree).
const DOC: &str = include_str!("../../../docs/failures.md");
/// Where `GRAPHSMITH_BLESS` rewrites it.
const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/failures.md");
const GPU_TESTS: &str = include_str!("gpu_capture_failures.rs");

#[test]
fn docs_failures_md_is_generated_from_the_catalogue() {
    let want = catalogue::markdown();
    let got = DOC;
    if std::env::var_os("GRAPHSMITH_BLESS").is_some() && got != want {
        std::fs::write(DOC_PATH, &want)
            .unwrap_or_else(|e| panic!("GRAPHSMITH_BLESS: cannot rewrite {DOC_PATH}: {e}"));
        panic!("rewrote docs/failures.md; run the test again without GRAPHSMITH_BLESS to check it");
    }
    assert!(
        got == want,
        "docs/failures.md differs from catalogue::markdown(); regenerate with \
         GRAPHSMITH_BLESS=1 cargo test -p graphsmith --test catalogue_doc, then run it again"
    );
    for e in ENTRIES {
        assert!(got.contains(&format!("## {}", e.id)), "{} missing", e.id);
    }
}

#[test]
fn the_catalogue_has_at_least_twelve_failure_modes_each_with_a_gpu_test() {
    let failures = ENTRIES.iter().filter(|e| e.family.is_some()).count();
    assert!(failures >= 12, "only {failures} failure modes");
    let mut ids: Vec<&str> = ENTRIES.iter().map(|e| e.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), ENTRIES.len(), "duplicate ids");
    for e in ENTRIES {
        for test in e.test.split(", ") {
            let name = test
                .strip_prefix("gpu_capture_failures::")
                .unwrap_or_else(|| panic!("{}: test '{test}' not in gpu_capture_failures", e.id));
            assert!(
                GPU_TESTS.contains(&format!("fn {name}()")),
                "{}: no GPU test fn {name}",
                e.id
            );
        }
        assert!(!e.fix.is_empty() && !e.trigger.is_empty() && !e.seen.is_empty());
    }
}

#[test]
fn explain_finds_a_code_by_number_driver_name_runtime_name_and_id() {
    let ids = |q: &str| -> Vec<&str> {
        catalogue::explain(q)
            .unwrap_or_else(|e| panic!("{q}: {e}"))
            .entries
            .iter()
            .map(|e| e.id)
            .collect()
    };
    let by_number = ids("900");
    assert!(by_number.contains(&"sync-in-capture"), "{by_number:?}");
    assert_eq!(ids("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), by_number);
    assert_eq!(ids("cudaErrorStreamCaptureUnsupported"), by_number);
    assert_eq!(ids("cudaerrorstreamcaptureunsupported"), by_number);
    assert_eq!(ids(" 904 "), ["unjoined-fork"]);
    assert_eq!(ids("unjoined-fork"), ["unjoined-fork"]);
    for code in catalogue::codes() {
        assert!(!ids(&code.number.to_string()).is_empty());
    }
    let text = catalogue::explain("907").unwrap().to_string();
    assert!(
        text.starts_with(
            "CUDA_ERROR_CAPTURED_EVENT (907), cudaErrorCapturedEvent: 1 catalogue entry\n\n[captured-event-wait]"
        ),
        "{text}"
    );
}

#[test]
fn explain_says_clearly_what_it_does_not_know() {
    for q in ["", "12345", "CUDA_ERROR_OUT_OF_MEMORY", "banana"] {
        let err = catalogue::explain(q).unwrap_err();
        assert!(
            err.contains("catalogue") || err.contains("give a CUDA error code"),
            "{q}: {err}"
        );
    }
}
