"""Named architecture shapes for random-weight policies: plain dicts written in code.

Each real shape copies the public `config.json` of its model; only the architecture keys are kept (no weights,
no tokenizer: a random shape uses `ByteTokenizer`, and the special-token ids are set by the loader).
Where each came from (the values agree across these quotations):

- qwen2.5-0.5b: Qwen/Qwen2.5-0.5B config.json as quoted in public repositories (e.g. rwth-i6/i6_experiments
  `qwen2_configs.py`, a "# Qwen/Qwen2.5-0.5B / model config" page); 494,032,768 parameters with tied embeddings.
- qwen2.5-1.5b: Qwen/Qwen2.5-1.5B config.json (hidden 1536, intermediate 8960, 28 layers, 12 / 2 heads, vocabulary
  151,936, rope theta 1e6, tied embeddings), as in the Qwen2.5-Coder-1.5B model card quoted by
  ZHUI/paddlenlp_model_readme ("1.54B parameters, tied word embeddings, 28 layers, 12 for Q and 2 for KV");
  1,543,714,304 parameters.
- llama-3.2-1b: meta-llama/Llama-3.2-1B config.json as quoted by kevinstephano/thunder_model_blocks
  `hf_llama/llama_config.py` (llama3 rope scaling, factor 32, theta 500,000, tied embeddings); 1,235,814,400
  parameters.
- tiny: Qwen2-style, 279,616 parameters, for tests; its vocabulary holds the byte tokenizer's 259 ids.
- small: Qwen2-style, 3,281,152 parameters, the demo's choice on a free machine (configs/selfplay-lm-tiny.yaml
  uses tiny: on shared cores small learns the answer formats too slowly for 10 minutes); same vocabulary as tiny.

`max_position_embeddings` is capped at 32,768 for every shape (it only sizes the rotary cache's nominal range;
no round here comes near it).
"""

from __future__ import annotations

import difflib

from trmkit.config import ConfigError

QWEN25_COMMON = {
    "model_type": "qwen2", "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
    "vocab_size": 151_936, "tie_word_embeddings": True, "max_position_embeddings": 32_768,
    "use_sliding_window": False, "attention_dropout": 0.0,
}

SHAPES: dict[str, dict] = {
    "qwen2.5-0.5b": {**QWEN25_COMMON, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2},
    "qwen2.5-1.5b": {**QWEN25_COMMON, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2},
    "llama-3.2-1b": {
        "model_type": "llama", "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500_000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "vocab_size": 128_256, "tie_word_embeddings": True, "max_position_embeddings": 32_768,
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 64, "attention_bias": False, "mlp_bias": False,
    },
    "tiny": {**QWEN25_COMMON, "vocab_size": 512, "max_position_embeddings": 2048, "hidden_size": 64,
             "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2},
    "small": {**QWEN25_COMMON, "vocab_size": 512, "max_position_embeddings": 2048, "hidden_size": 256,
              "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2},
}


def shape_config(name: str, key: str = "rl.model_shape") -> dict:
    """The architecture dict of a named shape (a copy), or a ConfigError naming the closest known shape."""
    if name in SHAPES:
        return dict(SHAPES[name])
    close = difflib.get_close_matches(name, list(SHAPES), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise ConfigError(f"{key}: unknown model shape {name!r}; {hint}known shapes: {', '.join(SHAPES)}")


def head_dim(shape: dict) -> int:
    """Per-head width: the explicit `head_dim` where the architecture sets one, else hidden / heads."""
    return int(shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"])


def has_qkv_bias(shape: dict) -> bool:
    """Qwen2 has biases on q, k and v (not o); Llama has none unless `attention_bias`."""
    return shape["model_type"] == "qwen2" or bool(shape.get("attention_bias"))
