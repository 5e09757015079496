"""An analytic memory model of one TR-RPG round of a transformer LM policy, term by term, for the planner.

A round has two phases whose peaks do not overlap: the rollout (generation with a KV cache) and the update
(log-probs with gradients, backward, optimizer step). Each term is bytes, named as the switches it answers to:

- weights: every parameter in the weights' dtype; `reference_copy`: the same again when the reference is a
  separate copy (with LoRA the reference is the adapters-off base: 0).
- trainable / grads / adam: the trained parameters (LoRA: r (in + out) per projection, kept in float32, as peft
  upcasts adapters; a full fine-tune trains the weights themselves), their gradients, Adam's two moments.
- kv_cache: 2 (k and v) x layers x B x (P + R) x kv_heads x head_dim x dtype bytes, during generation.
- activations: what backward keeps per decoder layer per token: about 10 D + 4 I values (the layer's input, the
  two norms' outputs, q, k, v, the attention output, the MLP's gate, up, silu(gate) and their product), in the
  weights' dtype; a checkpointed layer keeps only its input (D values) and the one being recomputed holds a full
  layer's worth. An estimate, checked against the peak RSS that benchmarks/rl_lm_probe.py measures; the
  measured peak matches it only with glibc returning freed blocks (`hardware.allocator.return_freed_memory`):
  glibc's default keeps freed activation buffers in the heap and the resident set grows well past what is live.
- logits: one float32 (rows x tokens x vocab) tensor when the whole batch's logits are built (the naive path
  computes them over all P + R positions); chunk x vocab x 4 bytes when the lm_head runs in chunks of response
  tokens. The peak holds LOGIT_COPIES such tensors (logits, the softmax's saved output, its gradient).
- attention: one layer's float32 attention scores, rows x heads x T x T x 4 bytes: the fused attention with a
  padding mask materialises them for the layer it runs (forward and backward), one layer at a time. Negligible at a
  few hundred tokens, it is the quadratic term of long rows (measured: 16 rows of 2,048 tokens of the `small` shape
  peaked 1.5 GiB above the other terms; one layer's scores are 1.07 GiB); the rollout's prefill holds the prompts'.
- logits_native: the lm_head's output in the weights' dtype before its float32 cast (0 for float32 weights).
- runtime: the interpreter, torch and transformers before any model (RUNTIME_BYTES).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trmkit.rl.lm.shapes import has_qkv_bias, head_dim

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ACT_D, ACT_I = 10, 4  # values per token per decoder layer kept for backward: ACT_D x D + ACT_I x I
LOGIT_COPIES = 3  # logits, log_softmax's saved output, the gradient flowing back through it
RUNTIME_BYTES = 400 << 20  # python + torch + transformers + peft imported, a tiny model (measured: 0.37-0.38 GiB)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class RoundShape:
    """The sizes of one round's micro-batch."""

    rows: int  # B: sequences in the micro-batch
    prompt_len: int  # P: prompt columns (left-padded)
    response_len: int  # R: generated columns, the tokens scored and updated


@dataclass(frozen=True)
class MemorySwitches:
    """The memory plan's switches, as the planner sets them."""

    dtype: str = "bfloat16"  # the weights' dtype (float32, bfloat16)
    lora_rank: int | None = 16  # LoRA's r; None: full fine-tune (every weight trained, with Adam)
    lora_targets: tuple[str, ...] = PROJECTIONS  # the projections with adapters
    checkpointed_layers: int = -1  # how many decoder layers run under checkpointing; -1: all of them
    chunk_tokens: int | None = 1024  # lm_head chunk in response tokens; None: whole-batch logits
    reference_copy: bool = False  # the reference is a separate copy of the weights (the naive path)


@dataclass
class MemoryEstimate:
    """Bytes per term and phase; `peak` is the larger phase plus the runtime."""

    terms: dict[str, int] = field(default_factory=dict)  # each term, bytes
    rollout: int = 0  # weights + reference + trainable state + KV cache
    update: int = 0  # weights + reference + trainable state + activations + LOGIT_COPIES x logits

    @property
    def peak(self) -> int:
        return max(self.rollout, self.update) + self.terms.get("runtime", 0)


def projection_shapes(shape: dict) -> dict[str, tuple[int, int]]:
    """(in, out) features of each projection of one decoder layer."""
    d, i, hd = shape["hidden_size"], shape["intermediate_size"], head_dim(shape)
    q, kv = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, i), "up_proj": (d, i), "down_proj": (i, d)}


def param_count(shape: dict) -> int:
    """Every parameter of the shape: embeddings (+ an untied head), layers, norms; Qwen2.5-0.5B -> 494,032,768."""
    d, vocab = shape["hidden_size"], shape["vocab_size"]
    layer = sum(n_in * n_out for n_in, n_out in projection_shapes(shape).values()) + 2 * d
    if has_qkv_bias(shape):
        layer += sum(projection_shapes(shape)[p][1] for p in ("q_proj", "k_proj", "v_proj"))
    head = 0 if shape["tie_word_embeddings"] else vocab * d
    return vocab * d + head + shape["num_hidden_layers"] * layer + d


def lora_count(shape: dict, rank: int, targets: tuple[str, ...] = PROJECTIONS) -> int:
    """LoRA's trained parameters: r (in + out) per targeted projection per layer."""
    per_layer = sum(rank * (n_in + n_out) for name, (n_in, n_out) in projection_shapes(shape).items()
                    if name in targets)
    return shape["num_hidden_layers"] * per_layer


def logits_bytes(rows: int, tokens: int, vocab: int, chunk_tokens: int | None) -> int:
    """One float32 logits tensor: rows x tokens x vocab x 4 whole; min(chunk, rows x tokens) x vocab x 4 chunked."""
    if chunk_tokens is None:
        return rows * tokens * vocab * 4
    return min(chunk_tokens, rows * tokens) * vocab * 4


def kv_cache_bytes(shape: dict, rows: int, tokens: int, dtype: str) -> int:
    """k and v of every layer for rows x tokens positions."""
    per_token = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * head_dim(shape)
    return rows * tokens * per_token * DTYPE_BYTES[dtype]


def activation_bytes(shape: dict, rows: int, tokens: int, dtype: str, checkpointed: int) -> int:
    """What backward keeps of the decoder layers: full layers, checkpointed inputs, one layer recomputed."""
    layers = shape["num_hidden_layers"]
    n_ckpt = layers if checkpointed < 0 else min(checkpointed, layers)
    d, i = shape["hidden_size"], shape["intermediate_size"]
    full_layer = rows * tokens * (ACT_D * d + ACT_I * i) * DTYPE_BYTES[dtype]
    layer_input = rows * tokens * d * DTYPE_BYTES[dtype]
    recompute = full_layer if n_ckpt else 0
    return (layers - n_ckpt) * full_layer + n_ckpt * layer_input + recompute


def attention_bytes(shape: dict, rows: int, tokens: int) -> int:
    """One layer's float32 attention scores: rows x heads x tokens x tokens."""
    return rows * shape["num_attention_heads"] * tokens * tokens * 4


def trainable_terms(shape: dict, switches: MemorySwitches) -> dict[str, int]:
    """trainable (LoRA's own parameters; 0 for a full fine-tune, whose are the weights), grads, adam."""
    if switches.lora_rank is None:
        n, size = param_count(shape), DTYPE_BYTES[switches.dtype]
        return {"trainable": 0, "grads": n * size, "adam": 2 * n * size}
    n = lora_count(shape, switches.lora_rank, switches.lora_targets)
    return {"trainable": 4 * n, "grads": 4 * n, "adam": 8 * n}


def estimate(shape: dict, round_: RoundShape, switches: MemorySwitches) -> MemoryEstimate:
    """Every term of one round at this micro-batch, and the two phases' totals."""
    size = DTYPE_BYTES[switches.dtype]
    tokens = round_.prompt_len + round_.response_len
    weights = param_count(shape) * size
    scored = tokens if switches.chunk_tokens is None else round_.response_len
    terms = {
        "runtime": RUNTIME_BYTES,
        "weights": weights,
        "reference_copy": weights if switches.reference_copy else 0,
        **trainable_terms(shape, switches),
        "kv_cache": kv_cache_bytes(shape, round_.rows, tokens, switches.dtype),
        "activations": activation_bytes(shape, round_.rows, tokens, switches.dtype, switches.checkpointed_layers),
        "logits": logits_bytes(round_.rows, scored, shape["vocab_size"], switches.chunk_tokens),
        "attention": attention_bytes(shape, round_.rows, tokens),
    }
    # the lm_head's own output before the float32 cast, where the weights are not float32
    terms["logits_native"] = 0 if size == 4 else terms["logits"] // 4 * size
    resident = terms["weights"] + terms["reference_copy"] + terms["trainable"] + terms["adam"]
    rollout = resident + terms["kv_cache"] + attention_bytes(shape, round_.rows, round_.prompt_len)  # the prefill
    update = (resident + terms["grads"] + terms["activations"] + LOGIT_COPIES * terms["logits"]
              + terms["logits_native"] + terms["attention"])
    return MemoryEstimate(terms=terms, rollout=rollout, update=update)


def pick_micro_batch(shape: dict, round_: RoundShape, switches: MemorySwitches, budget: int
                     ) -> tuple[int, MemoryEstimate, str]:
    """The largest micro-batch (<= round_.rows) whose estimated peak fits `budget`, its estimate and the reason.

    0 rows means even one sequence does not fit; the reason names the largest term."""
    for rows in range(round_.rows, 0, -1):
        est = estimate(shape, RoundShape(rows, round_.prompt_len, round_.response_len), switches)
        if est.peak <= budget:
            return rows, est, (f"micro_batch={rows} (budget {budget / 2**30:.1f} GiB, "
                               f"estimated peak {est.peak / 2**30:.2f} GiB)")
    est = estimate(shape, RoundShape(1, round_.prompt_len, round_.response_len), switches)
    largest = max(est.terms, key=est.terms.get)
    return 0, est, (f"one sequence needs {est.peak / 2**30:.2f} GiB > budget {budget / 2**30:.1f} GiB "
                    f"(largest term: {largest}, {est.terms[largest] / 2**30:.2f} GiB)")
