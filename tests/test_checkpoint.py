"""Tests for trmkit.train.checkpoint: round trip, atomicity, rotation, corruption, config, RNG."""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from trmkit.train import checkpoint as ck
from trmkit.train.checkpoint import (
    CheckpointError,
    config_hash,
    diff_configs,
    list_checkpoints,
    load_checkpoint,
    load_latest,
    restore_rng,
    rng_state,
    save_checkpoint,
)

CONFIG = {
    "model": {"hidden_size": 512, "layers": 2, "act": {"halt_max_steps": 16}},
    "train": {"max_steps": 100, "lr": 1e-3},
    "run": {"name": "a", "dir": "/tmp/a"},
}


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "model.w": torch.randn(4, 3, generator=g),
        "ema.w": torch.randn(4, 3, generator=g).to(torch.bfloat16),
        "opt.step": torch.tensor([seed], dtype=torch.int64),
        "carry.halted": torch.tensor([True, False, True]),
        "rng.bytes": torch.randint(0, 256, (7,), dtype=torch.uint8, generator=g),
    }


def _save(run: Path, step: int, acc: float | None = None, **kw) -> Path:
    metrics = {"loss": 1.0 / (step + 1)} | ({} if acc is None else {"acc": acc})
    meta = {"metrics": metrics, "config": CONFIG}
    return save_checkpoint(run, step, _tensors(step), meta, log=lambda m: None, **kw)


def _steps(run: Path) -> list[int]:
    return [int(p.name.split("-")[1]) for p in list_checkpoints(run)]


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert torch.equal(a[k], b[k]), k


def test_round_trip_tensors_and_meta(tmp_path: Path) -> None:
    tensors = _tensors(7)
    meta = {"metrics": {"acc": 0.5}, "config": CONFIG, "data": {"epoch": 2, "index": 17}}
    path = save_checkpoint(tmp_path, 123, tensors, meta, log=lambda m: None)
    assert path == tmp_path / "checkpoints" / "step-00000123"
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "tensors.safetensors"]

    loaded = load_latest(tmp_path, log=lambda m: None)
    assert loaded is not None and loaded.step == 123 and loaded.path == path
    _assert_same(loaded.tensors, tensors)
    assert loaded.metrics == {"acc": 0.5}
    assert loaded.config == CONFIG
    assert loaded.meta["data"] == {"epoch": 2, "index": 17}
    assert loaded.meta["config_hash"] == config_hash(CONFIG)
    assert loaded.meta["trmkit_version"]
    blob = (path / "tensors.safetensors").read_bytes()
    assert loaded.meta["tensors_sha256"] == hashlib.sha256(blob).hexdigest()


def test_loading_never_unpickles(tmp_path: Path, monkeypatch) -> None:
    save_checkpoint(tmp_path, 1, _tensors(), {"config": CONFIG}, log=lambda m: None)

    def refuse(*args, **kwargs):
        raise AssertionError("checkpoint loading must not unpickle")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    loaded = load_latest(tmp_path, log=lambda m: None)
    assert loaded is not None
    _assert_same(loaded.tensors, _tensors())


def test_leftover_temp_dir_from_killed_save_is_ignored_then_removed(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    stale = tmp_path / "checkpoints" / ".tmp-step-00000002-abc"
    stale.mkdir()
    (stale / "tensors.safetensors").write_bytes(b"half")
    assert _steps(tmp_path) == [1]
    assert load_latest(tmp_path, log=lambda m: None).step == 1
    _save(tmp_path, 2)
    assert not stale.exists() and _steps(tmp_path) == [1, 2]


def test_shared_noncontiguous_and_grad_tensors_are_saved(tmp_path: Path) -> None:
    base = torch.randn(4, 4, requires_grad=True)
    tensors = {"w": base, "w_t": base.t(), "row": base[1], "tied": base}
    save_checkpoint(tmp_path, 1, tensors, {}, log=lambda m: None)
    loaded = load_checkpoint(list_checkpoints(tmp_path)[0])
    for k, v in tensors.items():
        assert torch.equal(loaded.tensors[k], v.detach()), k


def test_load_latest_without_checkpoints_returns_none(tmp_path: Path) -> None:
    assert load_latest(tmp_path) is None


@pytest.mark.parametrize("failing_call", [0, 1])  # 0: tensors file, 1: meta.json
def test_disk_full_mid_save_keeps_previous(tmp_path: Path, monkeypatch, failing_call: int) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    real_write = ck._write_file
    calls = []

    def write_then_fill_disk(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) - 1 == failing_call:
            real_write(path, data[: len(data) // 2])  # half the bytes land, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real_write(path, data)

    monkeypatch.setattr(ck, "_write_file", write_then_fill_disk)
    with pytest.raises(CheckpointError) as info:
        _save(tmp_path, 3)
    message = str(info.value)
    assert "disk is full" in message and "step 3" in message
    assert str(tmp_path / "checkpoints") in message and "MiB" in message
    assert "free space" in message

    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step-00000001", "step-00000002"]
    monkeypatch.undo()
    loaded = load_latest(tmp_path, log=lambda m: None)
    assert loaded is not None and loaded.step == 2
    _assert_same(loaded.tensors, _tensors(2))


def test_disk_full_when_replacing_same_step_keeps_old(tmp_path: Path, monkeypatch) -> None:
    _save(tmp_path, 5)

    def full(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ck, "_write_file", full)
    with pytest.raises(CheckpointError, match="disk is full"):
        _save(tmp_path, 5)
    monkeypatch.undo()
    assert load_checkpoint(list_checkpoints(tmp_path)[0]).step == 5


def test_rotation_keeps_last_k_plus_best(tmp_path: Path) -> None:
    accs = {1: 0.1, 2: 0.9, 3: 0.3, 4: 0.4, 5: 0.5, 6: 0.2}
    for step, acc in accs.items():
        _save(tmp_path, step, acc, keep_last=2, best_metric="acc")
    assert _steps(tmp_path) == [2, 5, 6]
    best = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert best["step"] == 2 and best["value"] == 0.9 and best["metric"] == "acc"
    assert ck.best_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step-00000002"


def test_rotation_min_mode_and_new_best(tmp_path: Path) -> None:
    for step, value in [(1, 3.0), (2, 1.0), (3, 2.0), (4, 0.5)]:  # lower is better here
        _save(tmp_path, step, value, keep_last=1, best_metric="acc", best_mode="min")
    assert _steps(tmp_path) == [4]  # the newest is also the best
    _save(tmp_path, 5, None, keep_last=1, best_metric="acc", best_mode="min")  # no metric this time
    assert _steps(tmp_path) == [4, 5]


def test_resaving_steps_replaces_and_sets_aside_newer(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        _save(tmp_path, step)
    path = save_checkpoint(tmp_path, 2, {"x": torch.ones(2)}, {}, log=lambda m: None)
    assert _steps(tmp_path) == [1, 2]
    assert torch.equal(load_checkpoint(path).tensors["x"], torch.ones(2))
    assert (tmp_path / "checkpoints" / "abandoned-step-00000003").is_dir()


def _corrupt_truncate(path: Path) -> None:
    f = path / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:-40])


def _corrupt_flip(path: Path) -> None:
    f = path / "tensors.safetensors"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0x01
    f.write_bytes(bytes(data))


def _corrupt_meta_value(path: Path) -> None:
    f = path / "meta.json"
    f.write_text(f.read_text().replace('"step": 2', '"step": 2, "extra": 1'))


def _corrupt_meta_garbage(path: Path) -> None:
    f = path / "meta.json"
    f.write_bytes(f.read_bytes()[:30])


def _remove_tensors(path: Path) -> None:
    (path / "tensors.safetensors").unlink()


@pytest.mark.parametrize("damage, file, words", [
    (_corrupt_truncate, "tensors.safetensors", "truncated"),
    (_corrupt_flip, "tensors.safetensors", "checksum mismatch"),
    (_corrupt_meta_value, "meta.json", "meta_sha256"),
    (_corrupt_meta_garbage, "meta.json", "not valid JSON"),
    (_remove_tensors, "tensors.safetensors", "missing"),
])
def test_damaged_newest_is_reported_and_previous_loaded(tmp_path: Path, damage, file, words) -> None:
    _save(tmp_path, 1)
    newest = _save(tmp_path, 2)
    damage(newest)
    messages: list[str] = []
    loaded = load_latest(tmp_path, log=messages.append)
    assert loaded is not None and loaded.step == 1
    _assert_same(loaded.tensors, _tensors(1))
    assert len(messages) == 1
    assert "step-00000002" in messages[0] and file in messages[0] and words in messages[0]


def test_all_damaged_raises(tmp_path: Path) -> None:
    for step in (1, 2):
        _corrupt_flip(_save(tmp_path, step))
    with pytest.raises(CheckpointError, match="all 2 checkpoints"):
        load_latest(tmp_path, log=lambda m: None)


def test_config_mismatch_names_keys(tmp_path: Path) -> None:
    _save(tmp_path, 1)
    expected = json.loads(json.dumps(CONFIG))
    expected["model"]["hidden_size"] = 256
    expected["model"]["act"]["halt_max_steps"] = 8
    expected["model"]["dropout"] = 0.1
    expected["train"]["max_steps"] = 500
    expected["run"]["name"] = "b"
    ignore = ("train.max_steps", "run")
    with pytest.raises(CheckpointError) as info:
        load_latest(tmp_path, expected_config=expected, ignore=ignore, log=lambda m: None)
    message = str(info.value)
    assert "model.hidden_size: checkpoint 512, config 256" in message
    assert "model.act.halt_max_steps: checkpoint 16, config 8" in message
    assert "model.dropout: checkpoint <missing>, config 0.1" in message
    assert "train.max_steps" not in message and "run.name" not in message

    same_but_ignored = json.loads(json.dumps(CONFIG)) | {"run": {"name": "c"}}
    loaded = load_latest(tmp_path, expected_config=same_but_ignored, ignore=ignore, log=lambda m: None)
    assert loaded is not None and loaded.step == 1


def test_diff_configs_and_hash() -> None:
    a = {"run": {"x": 1}, "runner": {"x": 1}, "t": (1, 2)}
    b = {"run": {"x": 2}, "runner": {"x": 2}, "t": [1, 2]}
    assert diff_configs(a, b, ignore=("run",)) == ["runner.x: checkpoint 1, config 2"]
    assert config_hash({"a": 1, "b": {"c": 2}}) == config_hash({"b": {"c": 2}, "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})
    assert len(config_hash(CONFIG)) == 12


def _draw(gen: torch.Generator) -> tuple:
    return (
        [random.random() for _ in range(3)], random.gauss(0, 1),
        np.random.rand(3).tolist(), float(np.random.randn()),
        torch.rand(3).tolist(), torch.rand(2, generator=gen).tolist(),
    )


def test_rng_state_round_trip_restores_sequences(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    gen = torch.Generator().manual_seed(4)
    random.gauss(0, 1)  # leave a cached Gaussian in both Python and NumPy
    np.random.randn()
    state, rng_tensors = rng_state({"sampler": gen})
    expected = _draw(gen)
    save_checkpoint(tmp_path, 1, _tensors() | rng_tensors, {"rng": state}, log=lambda m: None)

    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    gen.manual_seed(99)
    loaded = load_latest(tmp_path, log=lambda m: None)
    assert loaded is not None
    restore_rng(loaded.meta["rng"], loaded.tensors, {"sampler": gen})
    assert _draw(gen) == expected


def test_module_does_not_import_model_data_or_cli() -> None:
    tree = ast.parse(Path(ck.__file__).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    banned = ("trmkit.model", "trmkit.data", "trmkit.cli")
    assert not [m for m in names if m.startswith(banned)]
