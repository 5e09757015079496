"""The classify shape on the one trainer: class head, balanced loss weights, validation split for the
best checkpoint and early stopping, calibration files, exact resume with a tokenizer-sized vocabulary.
A synthetic store keeps it fast: the class is which of three keyword tokens the sequence holds."""

import json

import numpy as np
import pytest
import torch

from trmkit import cli
from trmkit.config import ConfigError, ModelConfig
from trmkit.data.store import SplitArrays, write_store
from trmkit.model.losses import act_loss
from trmkit.model.trm import TRM

V, L, CLASSES = 300, 12, ("alpha", "beta", "gamma")  # V > 256: int32 inputs, as a tokenizer's
KEYWORDS = (3, 4, 5)
CONFIG = """
run: {seed: 0, threads: 1, compile: "off", dtype: float32}
model: {mixer: attention, hidden_size: 32, num_heads: 2, L_layers: 1, H_cycles: 2, L_cycles: 1,
        halt_max_steps: 2, puzzle_emb_len: 0}
train: {batch_size: 32, max_steps: 160, lr: 3.0e-3, warmup_steps: 5, eval_every: 20, log_every: 20,
        checkpoint_minutes: 0, ema_decay: 0.0, weight_decay: 0.01, best_metric: macro_f1,
        class_weighting: balanced, restore_best: true, early_stop_evals: 3}
"""


def _split(rng, n, share=(0.6, 0.3, 0.1)):
    y = rng.choice(3, size=n, p=share)
    x = rng.integers(10, V, size=(n, L))
    x[np.arange(n), rng.integers(0, L, size=n)] = np.asarray(KEYWORDS)[y]
    labels = np.full((n, L), len(CLASSES))  # ignore_label_id = number of classes
    labels[:, 0] = y
    return SplitArrays(inputs=x, labels=labels, puzzle_identifiers=np.zeros(n, np.int64),
                       puzzle_indices=np.arange(n + 1), group_indices=np.arange(n + 1))


def build_store(path, n=400, seed=0):
    rng = np.random.default_rng(seed)
    splits = {"train": _split(rng, n), "val": _split(rng, n // 4), "test": _split(rng, n // 4)}
    write_store(path, splits, {"task": "email", "vocab": [f"t{i}" for i in range(V)], "pad_id": 0,
                               "ignore_label_id": len(CLASSES), "blank_id": None, "num_puzzle_identifiers": 1,
                               "classes": list(CLASSES), "source": "synthetic", "build": {}})
    return path


def test_the_class_head_reads_one_label_and_the_loss_weights_apply():
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                      mixer="attention", puzzle_emb_len=0, vocab_size=V, seq_len=L, num_puzzle_ids=1, num_classes=3)
    model = TRM(cfg)
    assert not hasattr(model, "lm_head")
    carry = model.initial_carry(4)
    x = torch.randint(0, V, (4, L), dtype=torch.int32)
    _, _, logits, q = model(carry.z_H, carry.z_L, x, torch.zeros(4, dtype=torch.int64))
    assert logits.shape == (4, 1, 3) and q.shape == (4,)
    labels = torch.full((4, L), -100)
    labels[:, 0] = torch.tensor([0, 1, 2, 2])
    plain, stats = act_loss(logits, labels, q, 0.0)
    assert int(stats["valid"].sum()) == 4  # only position 0 is scored
    weighted, _ = act_loss(logits, labels, q, 0.0, torch.tensor([1.0, 1.0, 3.0]))
    per = act_loss(logits, labels, q, 0.0)[1]["token_loss"]
    assert torch.allclose(weighted, per[:2].sum() + 3 * per[2:].sum())
    assert not torch.allclose(weighted, plain)
    with pytest.raises(ConfigError, match="at least 2 classes"):
        ModelConfig(num_classes=1)


def test_a_classifier_learns_with_validation_best_and_calibration(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = build_store(tmp_path / "d")
    (tmp_path / "c.yaml").write_text(CONFIG)
    run = tmp_path / "run"
    assert cli.main(["train", str(tmp_path / "c.yaml"), f"run.dir={run}", f"data.path={data}"]) == 0
    out = capsys.readouterr().out
    assert "class_weighting=balanced -> loss weights alpha" in out
    assert "val @ step 20" in out  # periodic evaluations read the validation split, not test
    summary = json.loads((run / "summary.json").read_text())
    assert summary["macro_f1"] > 0.8, summary["macro_f1"]  # chance is ~0.33; the rare class counts as much
    assert summary["f1/gamma"] > 0.6
    test = json.loads((run / "classification.json").read_text())
    val = json.loads((run / "classification-val.json").read_text())
    assert test["split"] == "test" and len(test["labels"]) == 100 and val["split"] == "val"
    cal = json.loads((run / "calibration.json").read_text())
    assert cal["fitted_on"] == "val" and cal["temperature"] > 0 and cal["ece_after"] is not None
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("val/macro_f1" in m and "val/se/macro_f1" in m for m in metrics)  # train.best_margin=se reads it
    if summary["steps"] < 160:
        assert "early stop: macro_f1 has not improved" in out
    assert "restore_best: weights of step" in out or summary["steps"] in {20 * k for k in range(1, 9)}


def test_classifier_resume_is_exact(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = build_store(tmp_path / "d", n=128)
    (tmp_path / "c.yaml").write_text(CONFIG)
    common = [f"data.path={data}", "train.eval_every=0", "train.restore_best=false", "train.early_stop_evals=0"]
    assert cli.main(["train", str(tmp_path / "c.yaml"), f"run.dir={tmp_path / 'a'}", "train.max_steps=6", *common]) == 0
    assert cli.main(["train", str(tmp_path / "c.yaml"), f"run.dir={tmp_path / 'b'}", "train.max_steps=3",
                     "train.checkpoint_every=3", *common]) == 0
    assert cli.main(["train", "--resume", str(tmp_path / "b"), "train.max_steps=6"]) == 0
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / name / "weights.safetensors")) for name in ("a", "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_trainer_builds_the_tasks_parts_and_calls_its_before_training_hook(tmp_path, monkeypatch):
    """Task.before_training runs once the model and the training split exist (the e-mail task fits its bag's
    linear model there, into the model's bag part); a store whose last positions a part reads is refused
    without the task's parts, by name."""
    from trmkit import config as config_mod
    from trmkit import hardware
    from trmkit.email.parts import bag_part
    from trmkit.email.task import TASK as EMAIL
    from trmkit.train.session import prepare

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    data = build_store(tmp_path / "d", n=64)
    meta_path = data / "train" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "bag_positions": 4}))  # a former name
    (tmp_path / "c.yaml").write_text(CONFIG)
    cfg = config_mod.load(tmp_path / "c.yaml", [f"run.dir={tmp_path / 'run'}", f"data.path={data}",
                                                "model.bag_linear=true"])  # a former name too
    seen = []

    def hook(model, train, class_weights, log):
        seen.append((model.cfg.part_positions, bag_part(model).positions, len(train), class_weights.tolist()))
        bag_part(model).linear_bias.fill_(1.0)

    s = prepare(cfg, hardware.probe(), log=lambda m: None, before_training=hook, parts=EMAIL.model_parts)
    assert seen and seen[0][:3] == (4, 4, 64) and min(seen[0][3][:len(CLASSES)]) > 0  # balanced weights
    assert float(bag_part(s.model).linear_bias.sum()) == len(CLASSES)
    with pytest.raises(ConfigError, match="model.part_positions=4: the store's last positions are read by its "
                                          "task's model part, and the parts given read 0"):
        prepare(cfg, hardware.probe(), log=lambda m: None, before_training=hook)
