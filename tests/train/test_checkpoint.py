"""Tests for trmkit.train.checkpoint/: round trip, atomicity, rotation, corruption, config, RNG."""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import os
import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as st_save

from tests import SAFETY_TIMEOUT
from trmkit import procs
from trmkit import files
from trmkit.train import checkpoint as ck
from trmkit.train.checkpoint import format as fmt
from trmkit.train.checkpoint.identity import canonical_json
from trmkit.train.checkpoint import (
    CheckpointError,
    CorruptCheckpointError,
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


def _every_dtype() -> dict[str, torch.Tensor]:
    """Each dtype trmkit saves, plus the awkward cases: scalar, empty, views of shared storage."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(5, 6, generator=g)
    return {
        "f32": base, "bf16": base.to(torch.bfloat16), "i64": (base * 1e6).to(torch.int64),
        "i32": (base * 1e3).to(torch.int32), "bool": base > 0,
        "u8": torch.randint(0, 256, (5, 6), dtype=torch.uint8, generator=g),
        "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3, dtype=torch.int32),
        "transposed": base.t(), "row": base[2],
        "big": torch.randn(300_000, generator=g),  # 1.2 MB: hashing on load takes several reads
    }


def test_streamed_file_is_standard_safetensors(tmp_path: Path) -> None:
    tensors = _every_dtype()
    path = save_checkpoint(tmp_path, 4, tensors, {}, log=lambda m: None)
    file = path / "tensors.safetensors"
    _assert_same(load_file(file), tensors)
    with safe_open(file, framework="pt") as f:
        assert f.metadata() == {"format": "trmkit-checkpoint", "step": "4"}
    raw = file.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert n % 8 == 0 and raw[8 + n - 1:8 + n] in (b" ", b"}")
    header = json.loads(raw[8:8 + n])
    for name, info in header.items():  # every tensor starts aligned to its element size
        if name != "__metadata__":
            assert (8 + n + info["data_offsets"][0]) % tensors[name].element_size() == 0, name
    _assert_same(load_checkpoint(path).tensors, tensors)


@pytest.mark.parametrize("block", [64, 1 << 20])  # 64: many blocks, a short last one, rows over a block
def test_tensors_not_in_place_are_written_block_by_block(tmp_path: Path, monkeypatch, block: int) -> None:
    monkeypatch.setattr(fmt, "BLOCK", block)
    base = torch.arange(7 * 6 * 5, dtype=torch.float32).reshape(7, 6, 5)
    tensors = {
        "permuted": base.permute(2, 0, 1), "column": base[:, 0, 0], "every_other": base[::2],
        "bf16_t": base[0].t().to(torch.bfloat16), "bool_t": (base[0] > 10).t(),
        "expanded": torch.arange(3.0).reshape(3, 1).expand(3, 4),
    }
    assert not any(t.is_contiguous() for t in tensors.values())
    path = save_checkpoint(tmp_path, 1, tensors, {}, log=lambda m: None)
    _assert_same(load_file(path / "tensors.safetensors"), tensors)
    _assert_same(load_checkpoint(path).tensors, tensors)


def _replace_tensors_file(path: Path, data: bytes) -> None:
    """Put ``data`` in as the tensors file with matching size and hashes in meta.json."""
    (path / "tensors.safetensors").write_bytes(data)
    meta = json.loads((path / "meta.json").read_text())
    meta.update(tensors_bytes=len(data), tensors_sha256=hashlib.sha256(data).hexdigest())
    del meta["meta_sha256"]
    meta["meta_sha256"] = hashlib.sha256(canonical_json(meta).encode()).hexdigest()
    (path / "meta.json").write_text(json.dumps(meta))


def test_checkpoint_written_by_the_safetensors_library_still_loads(tmp_path: Path) -> None:
    tensors = {k: v.contiguous().clone() for k, v in _every_dtype().items()}  # the library wants these
    path = save_checkpoint(tmp_path, 1, tensors, {}, log=lambda m: None)
    _replace_tensors_file(path, st_save(tensors, metadata={"format": "trmkit-checkpoint", "step": "1"}))
    _assert_same(load_checkpoint(path).tensors, tensors)


@pytest.mark.parametrize("where", ["length", "header", "middle", "last"])
def test_any_flipped_byte_is_detected(tmp_path: Path, where: str) -> None:
    path = save_checkpoint(tmp_path, 1, _every_dtype(), {}, log=lambda m: None)
    file = path / "tensors.safetensors"
    data = bytearray(file.read_bytes())
    index = {"length": 0, "header": 20, "middle": len(data) // 2, "last": len(data) - 1}[where]
    data[index] ^= 0x10
    file.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        load_checkpoint(path)


def _st_bytes(header: dict | bytes, data: bytes) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text + data


F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("bad, words", [
    (_st_bytes({"x": F32_2}, bytes(4)), "file has 4"),
    (_st_bytes({"x": F32_2 | {"dtype": "C128"}}, bytes(8)), "unsupported"),
    (_st_bytes({"x": F32_2 | {"shape": [3]}}, bytes(8)), "expected to start at 0"),
    (_st_bytes({"x": F32_2 | {"shape": [-2]}}, bytes(8)), "bad shape"),
    (_st_bytes({"x": F32_2, "y": F32_2 | {"data_offsets": [12, 20]}}, bytes(20)), "expected to start at 8"),
    (_st_bytes(b"{nope", b""), "Expecting"),
    (b"\xff" * 8 + b"{}", "does not fit"),
    (b"\x01\x00", "shorter than"),
])
def test_malformed_file_with_matching_checksum_is_rejected(tmp_path: Path, bad: bytes, words: str) -> None:
    path = save_checkpoint(tmp_path, 1, _tensors(), {}, log=lambda m: None)
    _replace_tensors_file(path, bad)
    with pytest.raises(CorruptCheckpointError, match="not a valid safetensors file") as info:
        load_checkpoint(path)
    assert words in str(info.value)


def test_unsupported_dtype_is_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'z'.*complex64"):
        save_checkpoint(tmp_path, 1, {"z": torch.zeros(2, dtype=torch.complex64)}, {}, log=lambda m: None)
    assert list_checkpoints(tmp_path) == []


# Runs in a fresh interpreter so that VmHWM (the kernel's peak RSS) reflects only
# this state; writing "5" to clear_refs resets VmHWM to the current RSS.
_PEAK_PROBE = r"""
import re, sys
from pathlib import Path
import torch
from trmkit.train.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint

def status(key):
    return int(re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024

run_dir, op = sys.argv[1:3]
if op == "save":  # 8 x 25 MiB; every other one transposed, so the writer must copy it
    tensors = {}
    for i in range(8):
        t = torch.empty(2560, 2560).normal_()
        tensors[f"t{i}"] = t.t() if i % 2 else t
try:
    Path("/proc/self/clear_refs").write_text("5")
except OSError:
    pass  # then VmHWM may start above VmRSS: the increase is overstated, never understated
before = status("VmRSS")
if op == "save":
    save_checkpoint(run_dir, 1, tensors, {}, log=lambda m: None)
else:
    tensors = load_checkpoint(list_checkpoints(run_dir)[-1]).tensors
print(sum(t.numel() * t.element_size() for t in tensors.values()), status("VmHWM") - before)
"""


def _peak_increase(run_dir: Path, op: str) -> tuple[int, int]:
    """(state bytes, peak RSS increase during the call) from a fresh interpreter."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    out = procs.run([sys.executable, "-c", _PEAK_PROBE, str(run_dir), op], capture_output=True,
                    text=True, env=env, cwd=repo, timeout=SAFETY_TIMEOUT)
    assert out.returncode == 0, out.stderr
    state, increase = map(int, out.stdout.split())
    return state, increase


@pytest.mark.skipif(not Path("/proc/self/status").exists(),
                    reason="peak RSS is read from VmHWM in /proc/self/status, which only Linux has")
def test_save_and_load_add_little_resident_memory(tmp_path: Path) -> None:
    """A 200 MiB state: saving must not hold a second copy (the old writer peaked at +2x),
    loading must hold the result and little else (the old reader peaked at +2x)."""
    state, save_increase = _peak_increase(tmp_path, "save")
    assert state == 200 * 2**20
    assert save_increase < 0.25 * state, f"save raised peak RSS by {save_increase / 2**20:.0f} MiB"
    state, load_increase = _peak_increase(tmp_path, "load")
    assert load_increase - state < 0.25 * state, f"load raised peak RSS by {load_increase / 2**20:.0f} MiB"


def test_load_latest_without_checkpoints_returns_none(tmp_path: Path) -> None:
    assert load_latest(tmp_path) is None


@pytest.mark.parametrize("failing_call", [0, 1])  # 0: tensors file, 1: meta.json
def test_disk_full_mid_save_keeps_previous(tmp_path: Path, monkeypatch, failing_call: int) -> None:
    _save(tmp_path, 1)
    _save(tmp_path, 2)
    real_write = files.write_chunks
    calls = []

    def write_then_fill_disk(f, chunks) -> str:
        calls.append(f.name)
        if len(calls) - 1 == failing_call:
            data = b"".join(bytes(c) for c in chunks)
            real_write(f, [data[: len(data) // 2]])  # half the bytes land, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", f.name)
        return real_write(f, chunks)

    monkeypatch.setattr(files, "write_chunks", write_then_fill_disk)
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

    def full(f, chunks) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_chunks", full)
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


def test_rotation_keeps_the_callers_best_step_over_a_higher_later_value(tmp_path: Path) -> None:
    # train.best_margin=se keeps step 1 as the best while later evaluations score a little higher
    for step, acc in {1: 0.90, 2: 0.91, 3: 0.92, 4: 0.89}.items():
        _save(tmp_path, step, acc, keep_last=2, best_metric="acc", best_step=1)
    assert _steps(tmp_path) == [1, 3, 4]
    assert json.loads((tmp_path / "checkpoints" / "best.json").read_text())["step"] == 1
    _save(tmp_path, 5, 0.5, keep_last=1, best_metric="acc", best_step=2)  # its checkpoint is gone: by the metric
    assert json.loads((tmp_path / "checkpoints" / "best.json").read_text())["step"] == 3


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


def test_package_does_not_import_model_data_or_cli() -> None:
    modules = sorted(Path(ck.__file__).parent.glob("*.py"))
    assert len(modules) >= 5
    names = []
    for module in modules:
        tree = ast.parse(module.read_text())
        names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    banned = ("trmkit.model", "trmkit.data", "trmkit.cli")
    assert not [m for m in names if m.startswith(banned)]


def test_a_key_added_to_the_config_later_matches_an_old_checkpoint_only_at_its_default():
    from trmkit.config import Config
    from trmkit.train.checkpoint import diff_configs, with_new_defaults

    now = Config().to_dict()
    old = {k: dict(v) for k, v in now.items()}
    del old["model"]["puzzle_emb_dim"]  # written before model.puzzle_emb_dim existed
    assert diff_configs(with_new_defaults(old, now), now) == []
    now["model"]["puzzle_emb_dim"] = 64
    assert diff_configs(with_new_defaults(old, now), now) == ["model.puzzle_emb_dim: checkpoint <missing>, config 64"]


def test_a_key_added_to_a_registered_section_later_matches_an_old_checkpoint_at_its_default(tmp_path):
    """An application's section is filled from the class the resuming config holds (config.section_types)."""
    from dataclasses import dataclass

    from trmkit import config as config_mod
    from trmkit.train.checkpoint import diff_configs, load_latest, with_new_defaults

    @dataclass
    class Toy:
        width: int = 3
        added: float = 0.5  # a field added after the checkpoint was written

    cfg = config_mod.with_section(config_mod.Config(), "toy", Toy())
    now, sections = cfg.to_dict(), config_mod.section_types(cfg)
    assert sections == {"toy": Toy}
    old = {k: dict(v) for k, v in now.items()}
    del old["toy"]["added"]
    assert diff_configs(with_new_defaults(old, now), now) == ["toy.added: checkpoint <missing>, config 0.5"]
    assert diff_configs(with_new_defaults(old, now, sections), now) == []
    del old["toy"]  # a section the checkpoint's config did not have at all, held at its defaults
    assert diff_configs(with_new_defaults(old, now, sections), now) == []
    changed = config_mod.with_section(cfg, "toy", Toy(added=0.25)).to_dict()
    assert diff_configs(with_new_defaults(old, changed, sections), changed) == [  # only the key not at its default
        "toy.added: checkpoint <missing>, config 0.25"]
    save_checkpoint(tmp_path, 1, {"w": torch.zeros(2)}, {"config": old})  # and so a resume's check
    assert load_latest(tmp_path, now, sections=sections).step == 1
    with pytest.raises(ck.CheckpointError, match="toy.added: checkpoint <missing>, config 0.5"):
        load_latest(tmp_path, now)
