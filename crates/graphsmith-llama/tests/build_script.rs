//! The build script's pieces that run without NVRTC: its SHA-256 (the source hash the committed
//! PTX records, which `kernels/build_ptx.py` writes with Python's hashlib), and the PTX it
//! embeds: built from the current `kernels/llama_kernels.cu`.

#[path = "../build/sha256.rs"]
mod sha256;

#[test]
fn sha256_matches_the_standard_test_vectors() {
    assert_eq!(
        sha256::hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        sha256::hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    // Two blocks (56 bytes: the length no longer fits the first block).
    assert_eq!(
        sha256::hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
    );
    assert_eq!(
        sha256::hex(&[b'a'; 1_000_000]),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
    );
}

#[test]
fn the_embedded_ptx_names_its_source_hash_first() {
    let ptx = graphsmith_llama::kernels::LLAMA_PTX;
    let first = ptx.lines().next().unwrap_or_default();
    let hash = first
        .strip_prefix("// llama_kernels.cu sha256 ")
        .unwrap_or_else(|| panic!("the embedded PTX starts with {first:?}"));
    // Compiled here or taken from the committed copy, it was built from this very source.
    let source = include_bytes!("../../../kernels/llama_kernels.cu");
    assert_eq!(hash, sha256::hex(source));
    assert!(ptx.contains("\n.version 9.0\n.target sm_90\n"));
}
