"""A causal LM as the self-play policy (rl.policy=lm) on the one trainer: seeding and a self-play round run
end to end through `trmkit rl seed|train` with the sandbox, resume is exact, checkpoints hold only the adapters,
and a bad base is a one-line error naming its key or file."""

import json
from pathlib import Path

import pytest
import torch

from trmkit import config as config_mod
from trmkit import hardware
from trmkit.config import ConfigError
from trmkit.rl import commands
from trmkit.rl.config import APPS, RLConfig
from trmkit.train import checkpoint
from trmkit.train.run import run

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "selfplay-lm-tiny.yaml"
SMALL = ["rl.model_shape=tiny", "rl.lora_rank=4", "rl.checkpoint_layers=all", "rl.max_prompt_tokens=96",
         "rl.max_response_tokens=12", "rl.tasks_per_type=2", "rl.attempts=2", "rl.proposer_share=1.0",
         "rl.critiques_per_type=1", "rl.eval_per_type=2", "rl.heldout_per_type=20", "rl.buffer_size=8",
         "train.batch_size=6", "train.max_minutes=0", "train.eval_every=0", "train.checkpoint_minutes=0",
         "run.threads=1", "run.dtype=float32", "rl.micro_batch=4", "train.log_every=1",
         "train.warmup_steps=0"]


def lm_config(tmp_path: Path, name: str, *extra: str) -> config_mod.Config:
    return config_mod.load(CONFIG, SMALL + [f"run.dir={tmp_path / name}", *extra], APPS)


def train(kind: str, cfg: config_mod.Config, tmp_path: Path, resume: bool = False, init: Path | None = None
          ) -> dict:
    """`trmkit rl seed|train` as the CLI runs it (`--init RUN`: the StartFrom hook)."""
    objective, cfg = commands.make_objective(kind, cfg, log=lambda m: None)
    hooks = commands.StartFrom(init, objective) if init else commands.Hooks()
    try:
        return run(cfg, hardware.probe(), objective=objective, cache_dir=tmp_path / "cache", resume=resume,
                   hooks=hooks, log=lambda m: None)
    finally:
        objective.close()


def adapters(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "weights.safetensors"))


def step_metrics(run_dir: Path, step: int) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if r.get("step") == step and "train/loss" in r)


def test_seed_then_selfplay_through_the_trainer_and_the_adapters_carry_over(tmp_path, capsys):
    seed = lm_config(tmp_path, "seed", "train.max_steps=2")
    result = train("seed", seed, tmp_path)
    assert result["steps"] == 2 and "solve_rate" in result and result["samples"] > 0
    weights = adapters(tmp_path / "seed")
    assert weights and all("lora_" in k for k in weights)  # only the adapters: no frozen base weight
    assert all("lora_B" not in k or v.abs().sum() > 0 for k, v in weights.items())  # seeding moved them
    args = commands.argparse.Namespace(run_dir=str(tmp_path / "seed"), json=True, step=None, seed_files=None,
                                       cache_dir=tmp_path / "cache")
    assert commands.run_eval(args) == 0  # `trmkit rl eval` of an LM run: every held-out task, per kind
    said = capsys.readouterr()
    scored = json.loads(said.out)
    assert "plan: " not in said.err and "micro_batch=" not in said.err  # the plan's lines only with --verbose
    assert scored["samples/builtin/deduction"] == 20 and 0 <= scored["solve_rate/deduction"] <= 1
    cfg = lm_config(tmp_path, "rl", "train.max_steps=1")
    result = train("train", cfg, tmp_path, init=tmp_path / "seed")
    assert result["steps"] == 1
    after = adapters(tmp_path / "rl")  # one self-play step at rl.lr=1e-4 from the seed's adapters, not from B = 0
    assert max(float(v.abs().max()) for k, v in weights.items() if "lora_B" in k) > 1e-3
    assert max(float((after[k] - weights[k]).abs().max()) for k in weights) < 5e-4
    other = lm_config(tmp_path, "rl2", "train.max_steps=1", "run.seed=3")  # another random base
    with pytest.raises(ConfigError, match=r"--init .* was trained on rl.model_shape=tiny \(random weights, seed 0"):
        train("train", other, tmp_path, init=tmp_path / "seed")
    metrics = step_metrics(tmp_path / "rl", 1)
    for key in ("peak/rollout_gb", "peak/round_gb", "peak/update_gb", "reward/solve/deduction"):
        assert metrics[key] >= 0, key


def test_resume_with_adapters_is_exact(tmp_path):
    straight = lm_config(tmp_path, "a", "train.max_steps=2")
    train("train", straight, tmp_path)
    half = lm_config(tmp_path, "b", "train.max_steps=1", "train.checkpoint_every=1")
    train("train", half, tmp_path)
    resumed = lm_config(tmp_path, "b", "train.max_steps=2", "train.checkpoint_every=1")
    train("train", resumed, tmp_path, resume=True)
    a, b = adapters(tmp_path / "a"), adapters(tmp_path / "b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    last = [step_metrics(tmp_path / d, 2) for d in ("a", "b")]
    for key in ("train/loss", "reward/solve/deduction", "update/tokens_updated"):
        assert last[0][key] == last[1][key], key


def test_a_checkpoint_holds_only_the_adapters_and_refuses_another_base(tmp_path):
    cfg = lm_config(tmp_path, "c", "train.max_steps=1", "train.checkpoint_every=1")
    train("seed", cfg, tmp_path)
    ckpt = checkpoint.load_checkpoint(checkpoint.list_checkpoints(tmp_path / "c")[-1])
    model = {k: v for k, v in ckpt.tensors.items() if k.startswith("model.")}
    assert model and all("lora_" in k for k in model)
    assert sum(v.numel() for v in model.values()) < 0.25 * 279_616  # the tiny base has 279,616 parameters
    other = lm_config(tmp_path, "c", "train.max_steps=2", "run.seed=1")  # the random base of another seed
    with pytest.raises(ConfigError, match="rl.model_shape=tiny"):
        train("seed", other, tmp_path, resume=True)


def test_a_bad_base_is_a_one_line_error_naming_the_key_or_file(tmp_path):
    with pytest.raises(ConfigError, match="rl.model_shape: unknown model shape 'tinyy'; did you mean 'tiny'"):
        commands.make_objective("seed", lm_config(tmp_path, "d", "rl.model_shape=tinyy"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"rl.model_path: .* has no weights: no \*.safetensors") as err:
        commands.make_objective("seed", lm_config(tmp_path, "e", f"rl.model_path={folder}", "rl.model_shape="))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="exactly one of rl.model_path"):
        RLConfig(policy="lm")
    with pytest.raises(ConfigError, match="rl.checkpoint_layers"):
        RLConfig(checkpoint_layers="first")
    with pytest.raises(ConfigError, match="rl.policy='gpt'"):
        RLConfig(policy="gpt")


def test_bench_rl_times_an_lm_policy_s_rounds_through_the_trainer(tmp_path):
    from trmkit.rl.bench import format_lines, run_rl_bench

    r = run_rl_bench(lm_config(tmp_path, "bench"), hardware.probe(), steps=1, warmup=0, log=lambda m: None,
                     cache_dir=tmp_path / "cache")
    assert r["rollout_tokens_per_s"] > 0 and r["update_tokens_per_s"] > 0 and r["cache_hit_rate"] is None
    assert r["samples_per_round"] > 0 and not any("cache hit rate" in line for line in format_lines(r))
