"""The analytic memory model of an LM round: each term, and the micro-batch it lets the planner pick."""

import json

import pytest

from trmkit.rl.lm.memory import (LOGIT_COPIES, MemorySwitches, RoundShape, estimate, kv_cache_bytes, logits_bytes,
                                 lora_count, param_count, pick_micro_batch)
from trmkit.rl.lm.shapes import SHAPES

QWEN = SHAPES["qwen2.5-0.5b"]
GiB = 1 << 30


def test_whole_batch_logits_against_a_chunk_for_qwen_at_8_by_512():
    # 8 rows x 512 tokens x 151,936 ids x 4 bytes = 2,489,319,424 bytes (2.32 GiB) for one float32 tensor;
    # a chunk of 1,024 tokens: 1,024 x 151,936 x 4 = 622,329,856 bytes (0.58 GiB), whatever the batch
    assert logits_bytes(8, 512, QWEN["vocab_size"], None) == 8 * 512 * 151_936 * 4 == 2_489_319_424
    assert logits_bytes(8, 512, QWEN["vocab_size"], 1024) == 1024 * 151_936 * 4 == 622_329_856
    assert logits_bytes(1, 100, QWEN["vocab_size"], 1024) == 100 * 151_936 * 4  # a chunk no larger than the batch
    naive = estimate(QWEN, RoundShape(8, 256, 256), MemorySwitches(dtype="float32", chunk_tokens=None))
    efficient = estimate(QWEN, RoundShape(8, 256, 256), MemorySwitches(dtype="float32", chunk_tokens=1024))
    assert naive.terms["logits"] == 2_489_319_424  # the naive path's logits cover all P + R positions
    assert efficient.terms["logits"] == 622_329_856
    assert naive.update - efficient.update == LOGIT_COPIES * (2_489_319_424 - 622_329_856)


def test_parameter_and_lora_counts_of_the_real_shapes():
    assert param_count(QWEN) == 494_032_768
    assert param_count(SHAPES["qwen2.5-1.5b"]) == 1_543_714_304
    assert param_count(SHAPES["llama-3.2-1b"]) == 1_235_814_400
    assert lora_count(QWEN, 16) == 8_798_208  # r 16 on all seven projections, as peft reports for Qwen2.5-0.5B
    assert lora_count(QWEN, 16, ("q_proj", "v_proj")) == 24 * 16 * (896 + 896 + 896 + 128)


def test_each_switch_removes_its_own_term():
    round_ = RoundShape(8, 256, 256)
    naive = estimate(QWEN, round_, MemorySwitches(dtype="float32", lora_rank=None, checkpointed_layers=0,
                                                  chunk_tokens=None, reference_copy=True))
    lora = estimate(QWEN, round_, MemorySwitches(dtype="float32", lora_rank=16, checkpointed_layers=0,
                                                 chunk_tokens=None, reference_copy=False))
    assert naive.terms["reference_copy"] == naive.terms["weights"] == 494_032_768 * 4
    assert naive.terms["adam"] == 2 * naive.terms["weights"] and lora.terms["adam"] == 8 * 8_798_208
    ckpt = estimate(QWEN, round_, MemorySwitches(dtype="float32", checkpointed_layers=-1, chunk_tokens=None))
    assert ckpt.terms["activations"] < lora.terms["activations"] / 8
    assert kv_cache_bytes(QWEN, 8, 512, "bfloat16") == 2 * 24 * 8 * 512 * 2 * 64 * 2  # 0.1 GiB: GQA's 2 kv heads
    assert lora.rollout < lora.update and naive.peak > 4 * estimate(QWEN, round_, MemorySwitches()).peak


def test_the_planner_picks_the_largest_micro_batch_inside_the_budget():
    round_ = RoundShape(8, 256, 256)
    rows, est, reason = pick_micro_batch(QWEN, round_, MemorySwitches(), budget=10 * GiB)
    assert rows == 8 and est.peak <= 10 * GiB and reason.startswith("micro_batch=8 (budget 10.0 GiB")
    peaks = [estimate(QWEN, RoundShape(b, 256, 256), MemorySwitches(checkpointed_layers=0)).peak for b in (3, 4)]
    budget = (peaks[0] + peaks[1]) // 2
    rows, est, _ = pick_micro_batch(QWEN, round_, MemorySwitches(checkpointed_layers=0), budget)
    assert rows == 3 and est.peak == peaks[0]
    rows, _, reason = pick_micro_batch(QWEN, round_, MemorySwitches(dtype="float32"), budget=1 * GiB)
    assert rows == 0 and "largest term: weights" in reason


@pytest.mark.parametrize("name", list(SHAPES))
def test_every_term_is_positive_for_every_shape(name):
    est = estimate(SHAPES[name], RoundShape(2, 64, 64), MemorySwitches())
    assert all(v > 0 for k, v in est.terms.items() if k != "reference_copy")


def test_the_memory_table_shows_each_switch_saving_and_the_measured_peaks_beside(tmp_path):
    from trmkit.rl.lm.memory_table import table

    measured = tmp_path / "round.json"
    measured.write_text(json.dumps({"arms": {"naive": {"fitted": False, "peak_rss_gb": 11.2},
                                             "efficient": {"fitted": True, "peak_rss_gb": 2.14}}}))
    lines, rows = table("qwen2.5-0.5b", 8, 256, 32, measured=[measured])
    assert list(rows) == ["naive", "lora", "checkpoint", "chunked", "bf16", "efficient"]
    naive = rows["naive"]
    assert naive["saved"] == 0 and naive["reference_copy"] == naive["weights"] > 0
    for name, term in (("lora", "adam"), ("checkpoint", "activations"), ("chunked", "logits"), ("bf16", "weights")):
        assert rows[name][term] < naive[term] and 0 < rows[name]["saved"] < rows["efficient"]["saved"], name
    assert rows["lora"]["reference_copy"] == 0  # the reference is the adapters-off base
    assert rows["efficient"]["peak"] < naive["peak"] / 4
    assert rows["naive"]["measured"] == "did not fit" and rows["efficient"]["measured"] == "2.14"
    assert "lora" not in [k for k, v in rows.items() if "measured" in v]
    measured.write_text("[]")
    with pytest.raises(ValueError, match="round.json: not a JSON written by benchmarks/rl_lm_memory.py"):
        table("tiny", 2, 8, 8, measured=[measured])


def test_one_layer_s_attention_scores_are_the_quadratic_term_of_long_rows():
    from trmkit.rl.lm.memory import attention_bytes

    small = SHAPES["small"]
    short, long_ = (estimate(small, RoundShape(16, p, r), MemorySwitches(dtype="float32", lora_rank=None,
                                                                           checkpointed_layers=0))
                    for p, r in ((256, 128), (1664, 384)))
    assert attention_bytes(small, 16, 2048) == 16 * small["num_attention_heads"] * 2048 * 2048 * 4  # 1.07 GiB
    assert long_.terms["attention"] == 16 * short.terms["attention"] * 2048**2 // (16 * 384**2)
    # 16 rows x 2,048 tokens of `small`, full fine-tune in float32, no checkpointing: measured 4.76 GiB peak RSS
    # (2026-12-05, Xeon); without the scores the model said 3.21
    assert 4.0 * GiB < long_.peak < 5.2 * GiB
