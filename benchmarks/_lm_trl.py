"""The rival arm of benchmarks/rl_lm_memory.py: one step of TRL's GRPOTrainer on the same random shape.

Same shape, frozen weights' dtype, rows, prompts (the solve role's AZR prompts, cut to --prompt-len tokens) and
response length; PEFT LoRA (r 16, all projections) and gradient checkpointing, beta = the efficient arm's KL weight
(so a reference pass runs, as the adapters-off model), `group` generations per prompt, max_steps=1. Rewards are
synthetic (standard normal), as in the other arms. The tokenizer is a local PreTrainedTokenizerFast over a
byte-level `tokenizers` model: the 256 bytes at ids 3..258 and pad/bos/eos at 0/1/2, the same ids as
trmkit's ByteTokenizer, all inside the shape's vocabulary; nothing is downloaded.

Departure: TRL's step updates one role's batch (the solver's rows); the trmkit arms update all three roles'.
`tokens_updated` says how many response tokens each arm's update covered.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time

import torch

from _capped import progress
from _lm_round import BETA, LORA_RANK, LR, TEMPERATURE, load_tasks


def byte_tokenizer():
    """A PreTrainedTokenizerFast with the ByteTokenizer's ids: pad 0, bos 1, eos 2, byte b -> 3 + b."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins of the bytes
    byte_to_char = {b: c for b, c in zip(range(256), sorted(alphabet, key=lambda ch: _byte_of(ch)))}
    vocab = {"<pad>": 0, "<bos>": 1, "<eos>": 2, **{byte_to_char[b]: 3 + b for b in range(256)}}
    inner = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=None))
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    inner.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    tok.padding_side = "left"
    return tok


def _byte_of(ch: str) -> int:
    """GPT-2's byte-to-unicode map inverted: printable bytes stand for themselves, the rest sit at 256 + n."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    code = ord(ch)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def prompts(args: argparse.Namespace, tok) -> list[str]:
    """The solve role's prompts (AZR seed tasks), each cut to its last --prompt-len tokens."""
    from trmkit.rl.azr.tasks import prompt

    tasks, rng = load_tasks(args.seed_dir), random.Random(0)
    kinds = [("deduction", "abduction", "induction")[i % 3] for i in range(args.batch // args.group)]
    out = []
    for kind in kinds:
        ids = tok.encode(prompt(rng.choice(tasks[kind])), add_special_tokens=False)[-(args.prompt_len - 1):]
        out.append(tok.decode(ids))
    return out


def run_trl(args: argparse.Namespace) -> dict:
    """One GRPOTrainer step under a PeakMeter: peak RSS, seconds, tokens updated."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig, GRPOTrainer

    from trmkit.hardware.memory import PeakMeter
    from trmkit.rl.lm.load import load_policy
    from trmkit.rl.lm.lora import ALL_PROJECTIONS

    meter = PeakMeter().start()
    t0 = time.perf_counter()
    progress("build")
    with meter.phase("build"):
        model, _ = load_policy(model_shape=args.shape, dtype=args.dtype)
        tok = byte_tokenizer()
        data = Dataset.from_dict({"prompt": prompts(args, tok)})
    gen = torch.Generator().manual_seed(1)
    seen = []

    def synthetic_reward(completions, **_):
        seen.extend(completions)
        return torch.randn(len(completions), generator=gen).tolist()

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, max_steps=1, per_device_train_batch_size=args.batch, num_generations=args.group,
            max_completion_length=args.response_len, temperature=TEMPERATURE, beta=BETA, learning_rate=LR,
            gradient_checkpointing=True, bf16=args.dtype == "bfloat16", use_cpu=True, report_to="none",
            save_strategy="no", logging_steps=1, dataloader_num_workers=0, disable_dropout=True, seed=0)
        trainer = GRPOTrainer(model=model, reward_funcs=synthetic_reward, args=config, train_dataset=data,
                              processing_class=tok, peft_config=LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK,
                                                                           target_modules=list(ALL_PROJECTIONS),
                                                                           task_type="CAUSAL_LM"))
        t1 = time.perf_counter()
        progress("train")
        with meter.phase("train"):
            trainer.train()
    t2 = time.perf_counter()
    report = meter.report()
    meter.stop()
    step_log = next((h for h in trainer.state.log_history if "completions/mean_length" in h), {})
    return {"arm": "trl_grpo", "fitted": True, "peak_rss_gb": report["process"]["peak_gb"],
            "seconds": round(t2 - t1, 1), "build_seconds": round(t1 - t0, 1),
            "tokens_updated": round(step_log.get("completions/mean_length", 0.0) * len(seen)),
            "tokens_updated_note": "TRL's logged completions/mean_length x rows", "rows": len(seen),
            "dtype": args.dtype, "phase_peak_gb": {k: v["peak_gb"] for k, v in report.items() if k != "process"},
            "trainable_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
            "trl": __import__("trl").__version__, "threads": torch.get_num_threads(),
            "step_log": {k: v for k, v in step_log.items() if isinstance(v, (int, float))}}
