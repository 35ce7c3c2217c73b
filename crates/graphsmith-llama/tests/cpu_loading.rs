//! CPU tests: config parsing, safetensors loading (good and each bad input), request checks,
//! bucket dispatch and padding, the tokenizer path. Errors are compared on their full text.

mod common;

use std::path::Path;

use common::{hf_tensors, tiny_model, write_file, write_file_typed, TINY_CONFIG};
use graphsmith_llama::{
    bucket_for, check_request, load_weights, parse_ids, random_weights, row_inputs, Codec, Config,
    DecoderOptions, Gemm, RopeScaling, Tolerance, BUCKETS,
};
use safetensors::Dtype;

#[test]
fn good_config_parses() {
    let c = Config::from_json(TINY_CONFIG, "config.json", "tiny").unwrap();
    assert_eq!(c, Config::named("tiny").unwrap());
    assert_eq!(
        (c.head_dim, c.qkv_dim(), c.q_dim(), c.kv_dim()),
        (16, 128, 64, 32)
    );
}

#[test]
fn named_configs_match_the_shared_shapes() {
    let small = Config::named("small").unwrap();
    assert_eq!(
        (
            small.num_hidden_layers,
            small.hidden_size,
            small.num_attention_heads,
            small.num_key_value_heads,
            small.intermediate_size,
            small.vocab_size,
            small.head_dim
        ),
        (30, 576, 9, 3, 1536, 49152, 64)
    );
    let b1 = Config::named("1b").unwrap();
    assert_eq!(
        (
            b1.num_hidden_layers,
            b1.hidden_size,
            b1.num_attention_heads,
            b1.num_key_value_heads,
            b1.intermediate_size,
            b1.vocab_size,
            b1.head_dim
        ),
        (16, 2048, 32, 8, 8192, 128256, 64)
    );
    assert!(matches!(b1.rope_scaling, RopeScaling::Llama3 { .. }));
    // Llama-3.2-1B: 1.236e9 parameters in bf16, lm_head tied.
    assert_eq!(b1.weight_bytes(), 2 * 1_235_814_400);
    assert_eq!(
        Config::named("7b").unwrap_err().to_string(),
        "config built-in 7b: field `name`: unknown config (want tiny, small or 1b)"
    );
}

#[test]
fn llama3_rope_scaling_matches_hf() {
    // Values from transformers' _compute_llama3_parameters for Llama-3.2-1B (head_dim 64).
    let inv = Config::named("1b").unwrap().inv_freq();
    assert_eq!(inv.len(), 32);
    assert!((inv[0] - 1.0).abs() < 1e-6);
    // High frequencies unchanged; the lowest divided by the factor 32.
    let base = |i: usize| 1.0 / 500000f32.powf(2.0 * i as f32 / 64.0);
    assert!((inv[5] - base(5)).abs() / base(5) < 1e-5);
    assert!((inv[31] - base(31) / 32.0).abs() / (base(31) / 32.0) < 1e-5);
}

#[test]
fn single_file_loads_and_fuses() {
    let dir = tempfile::tempdir().unwrap();
    let (config, w) = tiny_model(dir.path());
    let mut calls = 0;
    let got = load_weights(dir.path(), &config, |_, _| calls += 1).unwrap();
    assert_eq!(calls, 2 + 9 * config.num_hidden_layers);
    assert_eq!(got.embed, w.embed);
    assert!(got.lm_head.is_none());
    for (a, b) in got.layers.iter().zip(&w.layers) {
        assert_eq!(a.qkv, b.qkv);
        assert_eq!(a.gate_up, b.gate_up);
        assert_eq!(
            (&a.o, &a.down, &a.input_norm, &a.post_norm),
            (&b.o, &b.down, &b.input_norm, &b.post_norm)
        );
    }
}

#[test]
fn sharded_checkpoint_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (config, w) = tiny_model(dir.path());
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let all = hf_tensors(&config, &w);
    let (mut a, mut b) = (
        std::collections::BTreeMap::new(),
        std::collections::BTreeMap::new(),
    );
    let mut map = serde_json::Map::new();
    for (i, (name, t)) in all.into_iter().enumerate() {
        let file = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        map.insert(name.clone(), file.into());
        if i % 2 == 0 {
            a.insert(name, t);
        } else {
            b.insert(name, t);
        }
    }
    write_file(&dir.path().join("model-00001-of-00002.safetensors"), &a);
    write_file(&dir.path().join("model-00002-of-00002.safetensors"), &b);
    let index = serde_json::json!({"metadata": {}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let got = load_weights(dir.path(), &config, |_, _| {}).unwrap();
    assert_eq!(got.layers[1].qkv, w.layers[1].qkv);
    assert_eq!(got.final_norm, w.final_norm);

    // A shard named in the index but absent.
    std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
    let err = load_error(dir.path(), &config);
    let path = dir.path().join("model-00002-of-00002.safetensors");
    assert_eq!(
        err,
        format!(
            "cannot read {}: No such file or directory (os error 2)",
            path.display()
        )
    );
}

fn load_error(dir: &Path, config: &Config) -> String {
    load_weights(dir, config, |_, _| {})
        .err()
        .expect("loading must fail")
        .to_string()
}

#[test]
fn missing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::named("tiny").unwrap();
    let path = dir.path().join("model.safetensors");
    assert_eq!(
        load_error(dir.path(), &config),
        format!(
            "cannot read {}: No such file or directory (os error 2)",
            path.display()
        )
    );
}

#[test]
fn truncated_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = tiny_model(dir.path());
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    assert_eq!(
        load_error(dir.path(), &config),
        format!("checkpoint {}: file: not a valid safetensors file (truncated?): MetadataIncompleteBuffer", path.display())
    );
}

#[test]
fn missing_wrong_dtype_and_wrong_shape_tensors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (config, w) = tiny_model(dir.path());
    let path = dir.path().join("model.safetensors");
    let shown = path.display().to_string();

    let mut t = hf_tensors(&config, &w);
    t.remove("model.layers.1.mlp.up_proj.weight");
    write_file(&path, &t);
    assert_eq!(
        load_error(dir.path(), &config),
        format!("checkpoint {shown}: tensor 'model.layers.1.mlp.up_proj.weight': missing")
    );

    let mut typed: Vec<_> = hf_tensors(&config, &w)
        .into_iter()
        .map(|(n, (b, s))| (n, Dtype::BF16, b, s))
        .collect();
    for t in &mut typed {
        if t.0 == "model.norm.weight" {
            t.1 = Dtype::I16;
        }
    }
    write_file_typed(&path, typed);
    assert_eq!(
        load_error(dir.path(), &config),
        format!("checkpoint {shown}: tensor 'model.norm.weight': dtype I16, want BF16, F16 or F32")
    );

    let mut t = hf_tensors(&config, &w);
    let (bytes, _) = t["model.layers.0.self_attn.k_proj.weight"].clone();
    t.insert(
        "model.layers.0.self_attn.k_proj.weight".into(),
        (bytes, vec![64, 32]),
    );
    write_file(&path, &t);
    assert_eq!(load_error(dir.path(), &config), format!("checkpoint {shown}: tensor 'model.layers.0.self_attn.k_proj.weight': shape [64, 32], the config wants [32, 64]"));

    // Untied config without lm_head.weight.
    let untied = Config {
        tie_word_embeddings: false,
        ..config.clone()
    };
    write_file(&path, &hf_tensors(&config, &w));
    assert_eq!(
        load_error(dir.path(), &untied),
        format!(
            "checkpoint {shown}: tensor 'lm_head.weight': missing (tie_word_embeddings is false)"
        )
    );
}

#[test]
fn f32_weights_are_converted_and_untied_head_loads() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        tie_word_embeddings: false,
        ..Config::named("tiny").unwrap()
    };
    let w = random_weights(&config, 3);
    let typed: Vec<_> = hf_tensors(&config, &w)
        .into_iter()
        .map(|(n, (b, s))| {
            let f: Vec<u8> = b
                .chunks_exact(2)
                .flat_map(|c| {
                    half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))
                        .to_f32()
                        .to_le_bytes()
                })
                .collect();
            (n, Dtype::F32, f, s)
        })
        .collect();
    write_file_typed(&dir.path().join("model.safetensors"), typed);
    let got = load_weights(dir.path(), &config, |_, _| {}).unwrap();
    assert_eq!(got.lm_head.as_ref(), w.lm_head.as_ref());
    assert_eq!(got.layers[0].down, w.layers[0].down);
}

#[test]
fn requests_are_checked_before_the_device() {
    let c = Config::named("tiny").unwrap();
    assert_eq!(check_request(&c, 10, 20, 1).unwrap(), 31);
    assert_eq!(
        check_request(&c, 10, 20, 0).unwrap_err().to_string(),
        "bad input: a batch of zero sequences"
    );
    assert_eq!(
        check_request(&c, 0, 20, 1).unwrap_err().to_string(),
        "bad input: an empty prompt"
    );
    assert_eq!(
        check_request(&c, 2000, 100, 1).unwrap_err().to_string(),
        "bad input: a prompt of 2000 tokens plus 100 new tokens is longer than the context of 2048 (max_position_embeddings)"
    );
}

#[test]
fn bucket_dispatch_and_padding() {
    assert_eq!(BUCKETS, [1, 2, 4, 8, 16, 32, 64]);
    let want = [
        (1, Some(1)),
        (2, Some(2)),
        (3, Some(4)),
        (5, Some(8)),
        (8, Some(8)),
        (9, Some(16)),
        (33, Some(64)),
        (64, Some(64)),
        (65, None),
        (0, None),
    ];
    for (batch, bucket) in want {
        assert_eq!(bucket_for(batch), bucket, "batch {batch}");
    }
    // Three rows in a bucket of 4 (capacity 8): the rest is padding (position -1, token 0).
    let (toks, pos) = row_inputs(&[(5, 0), (7, 3), (0, -1)], 8, 512, 16).unwrap();
    assert_eq!(toks, [5, 7, 0, 0, 0, 0, 0, 0]);
    assert_eq!(pos, [0, 3, -1, -1, -1, -1, -1, -1]);
    assert_eq!(
        row_inputs(&[(512, 0)], 8, 512, 16).unwrap_err().to_string(),
        "bad input: token id 512 of row 0 is outside the vocabulary of 512"
    );
    assert_eq!(
        row_inputs(&[(1, 16)], 8, 512, 16).unwrap_err().to_string(),
        "bad input: position 16 of row 0 is outside the context of 16 positions"
    );
    assert_eq!(
        row_inputs(&[(1, 0); 9], 8, 512, 16)
            .unwrap_err()
            .to_string(),
        "bad input: 9 rows, the decoder holds 8"
    );
}

#[test]
fn tokenizer_path_text_in_text_out() {
    let dir = tempfile::tempdir().unwrap();
    // Without tokenizer.json: ids in, ids out.
    let ids = Codec::for_model(dir.path()).unwrap();
    assert!(!ids.has_tokenizer());
    assert_eq!(ids.encode("1, 2 3").unwrap(), [1, 2, 3]);
    assert_eq!(ids.decode(&[4, 5]).unwrap(), "4 5");
    assert_eq!(parse_ids("1 x").unwrap_err().to_string(), "bad input: prompt token \"x\" is not an id (without tokenizer.json, prompts are token ids)");

    // A tiny WordLevel tokenizer with a whitespace pre-tokenizer.
    let tok = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": false},
        "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "hello": 1, "graph": 2, "world": 3}, "unk_token": "<unk>"}
    });
    std::fs::write(dir.path().join("tokenizer.json"), tok.to_string()).unwrap();
    let codec = Codec::for_model(dir.path()).unwrap();
    assert!(codec.has_tokenizer());
    assert_eq!(codec.encode("hello graph world").unwrap(), [1, 2, 3]);
    assert_eq!(codec.encode("hello mars").unwrap(), [1, 0]);
    assert_eq!(codec.decode(&[3, 1]).unwrap(), "world hello");

    std::fs::write(dir.path().join("tokenizer.json"), "{not json").unwrap();
    let err = Codec::for_model(dir.path()).err().unwrap().to_string();
    assert!(
        err.starts_with(&format!(
            "tokenizer {}: ",
            dir.path().join("tokenizer.json").display()
        )),
        "{err}"
    );
}

fn write_reference(path: &Path, vocab: usize, prompt: &[i32], new: usize, tokens_extra: i32) {
    let mut tokens: Vec<i32> = prompt.to_vec();
    tokens.extend((0..new as i32 + tokens_extra).map(|i| i % 512));
    let tb: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    let pb: Vec<u8> = (prompt.len() as i32).to_le_bytes().to_vec();
    let lb: Vec<u8> = vec![0u8; new * vocab * 4];
    write_file_typed(
        path,
        vec![
            (
                "tokens.0".into(),
                Dtype::I32,
                tb.clone(),
                vec![tokens.len()],
            ),
            ("prompt_len.0".into(), Dtype::I32, pb, vec![1]),
            ("logits.0".into(), Dtype::F32, lb, vec![new, vocab]),
        ],
    );
}

#[test]
fn check_refuses_bad_references_before_touching_the_device() {
    use graphsmith_llama::Mode;
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let reference = dir.path().join("ref.safetensors");
    let no_device = || -> graphsmith_llama::Result<graphsmith::Context> {
        panic!("bad input must be found before the device is used")
    };
    let run = |r: &Path| {
        graphsmith_llama::check(
            no_device,
            dir.path(),
            r,
            Mode::Graphs,
            None,
            Tolerance::default(),
            DecoderOptions::default(),
            graphsmith_llama::PrefillMode::default(),
            false,
        )
        .expect_err("must fail")
        .to_string()
    };
    write_reference(&reference, 100, &[1, 2, 3], 4, 0);
    let shown = reference.display();
    assert_eq!(
        run(&reference),
        format!("checkpoint {shown}: sequence 0: logits shape [4, 100], want [N, 512]")
    );
    write_reference(&reference, 512, &[1, 2, 3], 4, 1);
    assert_eq!(
        run(&reference),
        format!("checkpoint {shown}: sequence 0: 8 tokens for a prompt of 3 and 4 new tokens")
    );
    write_reference(&reference, 512, &[1, 2, 600], 4, 0);
    assert_eq!(
        run(&reference),
        format!("checkpoint {shown}: sequence 0: token id 600 outside the vocabulary of 512")
    );
    let missing = dir.path().join("nothing.safetensors");
    assert_eq!(
        run(&missing),
        format!(
            "cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    let err = graphsmith_llama::check(
        no_device,
        dir.path(),
        &missing,
        Mode::Eager,
        None,
        Tolerance::Absolute(0.0625),
        DecoderOptions {
            gemm: Gemm::Cublas,
            ..DecoderOptions::default()
        },
        graphsmith_llama::PrefillMode::Steps,
        false,
    )
    .err()
    .unwrap();
    assert!(err.is_bad_input());
}
