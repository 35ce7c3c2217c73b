#!/usr/bin/env python3
"""The seven public Llama-architecture shapes, at full depth: the one place they live.

    python3 bench/llama/shapes.py            # name, layers, weight bytes of each (stdlib only)

Each is its published config.json's values (`num_hidden_layers` included) in the field names
transformers 5 reads (`rope_parameters`). `make_model.py --config NAME` builds one at full
depth with random weights; `matrix.py` takes them at 2 layers; `run.sh shapes` measures them
all (`shapes_report.py` renders the result). `ORDER` lists them smallest first.
"""

import json
import sys

_LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

SHAPES = {
    "smollm2-135m": dict(num_hidden_layers=30, hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
    "smollm2-360m": dict(num_hidden_layers=32, hidden_size=960, intermediate_size=2560, num_attention_heads=15,
                         num_key_value_heads=5, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0}),
    "smollm2-1.7b": dict(num_hidden_layers=24, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                         num_key_value_heads=32, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 130000.0}),
    "llama-3.2-1b": dict(num_hidden_layers=16, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072, rms_norm_eps=1e-5,
                         rope_parameters=dict(_LLAMA3_ROPE, factor=32.0)),
    "llama-3.2-3b": dict(num_hidden_layers=28, hidden_size=3072, intermediate_size=8192, num_attention_heads=24,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=True,
                         max_position_embeddings=131072, rms_norm_eps=1e-5,
                         rope_parameters=dict(_LLAMA3_ROPE, factor=32.0)),
    "llama-3.1-8b": dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                         max_position_embeddings=131072, rms_norm_eps=1e-5,
                         rope_parameters=dict(_LLAMA3_ROPE, factor=8.0)),
    "llama-2-7b": dict(num_hidden_layers=32, hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
                       num_key_value_heads=32, vocab_size=32000, tie_word_embeddings=False,
                       max_position_embeddings=4096, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def weight_bytes(cfg):
    """bf16 bytes of every weight (the LM head counted once when tied): graphsmith-llama's
    `Config::weight_bytes`."""
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * head_dim(cfg)
    kv = cfg["num_key_value_heads"] * head_dim(cfg)
    per_layer = (q + 2 * kv) * h + h * q + 3 * h * f + 2 * h
    head = 0 if cfg.get("tie_word_embeddings") else v * h
    return 2 * (v * h + cfg["num_hidden_layers"] * per_layer + h + head)


def kv_bytes(cfg, tokens, batch):
    """bf16 bytes of K and V a decode step reads: 2 x layers x KV heads x head_dim x 2 bytes x
    tokens in the cache x batch."""
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim(cfg) * 2 * tokens * batch


ORDER = sorted(SHAPES, key=lambda name: weight_bytes(SHAPES[name]))


def self_test():
    assert ORDER == ["smollm2-135m", "smollm2-360m", "llama-3.2-1b", "smollm2-1.7b", "llama-3.2-3b",
                     "llama-2-7b", "llama-3.1-8b"], ORDER
    gb = {n: weight_bytes(c) / 1e9 for n, c in SHAPES.items()}
    # Parameter counts of the published models, times 2 bytes.
    for name, want in [("smollm2-135m", 0.269), ("smollm2-360m", 0.724), ("smollm2-1.7b", 3.423),
                       ("llama-3.2-1b", 2.471), ("llama-3.2-3b", 6.425), ("llama-3.1-8b", 16.061),
                       ("llama-2-7b", 13.477)]:
        assert abs(gb[name] - want) < 0.002, (name, gb[name])
    assert kv_bytes(SHAPES["llama-3.1-8b"], 100, 64) == 2 * 32 * 8 * 128 * 2 * 100 * 64
    print("shapes self-test: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if "--self-test" in sys.argv[1:]:
        sys.exit(self_test())
    for name in ORDER:
        cfg = SHAPES[name]
        print(json.dumps({"shape": name, "layers": cfg["num_hidden_layers"], "weight_bytes": weight_bytes(cfg)}))
