"""Every file name of a run directory, and the one way to load a run's weights.

A run directory (`run.dir`) holds:

    config.yaml          the resolved config (YAML -> overrides -> store -> planner)
    plan.json            the planner's choices, each with its reason
    data_meta.json       the training store's task, vocabulary and shape (eval checks a store against it)
    metrics.jsonl        one line per logged step and evaluation
    summary.json         the run's summary, written last
    weights.safetensors  the evaluation weights (EMA when on), written at the end
    checkpoints/         step-XXXXXXXX/{tensors.safetensors, meta.json}, best.json (train/checkpoint/)
    report/              `trmkit report`: report.md and PNG plots
    tensorboard/         TensorBoard event files (when tensorboard is installed)
    classification.json, classification-val.json, calibration.json   a classifier's answers and calibration
    submission.json      an ARC run's answers in the ARC Prize format
    eval_steps.json      `trmkit eval --steps K,K,...`: metrics against test-time supervision steps, per store

Nothing else in trmkit spells these names: it imports them from here. The module sits at
the bottom of the house (beside config and files) so that the monitor, the tasks, the
trainer and the applications can all name the same files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from trmkit.config import ConfigError
from trmkit.names import current_names

if TYPE_CHECKING:  # torch is imported where weights are loaded: naming a file must not load torch
    import torch

CONFIG = "config.yaml"
PLAN = "plan.json"
DATA_META = "data_meta.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
WEIGHTS = "weights.safetensors"
CHECKPOINTS = "checkpoints"
REPORT = "report"
REPORT_MD = "report.md"
TENSORBOARD = "tensorboard"  # event files, when the tensorboard package is installed
CLASSIFICATION = "classification.json"  # a classifier's test answers (tasks/classify/scorer.py)
CLASSIFICATION_VAL = "classification-val.json"  # the same on the validation split (calibration is fitted on it)
CALIBRATION = "calibration.json"  # the temperature fitted on validation answers
SUBMISSION = "submission.json"  # an ARC run's answers
EVAL_STEPS = "eval_steps.json"  # `trmkit eval --steps 8,16,...`: accuracy against supervision steps, per store

# inside checkpoints/
CHECKPOINT_TENSORS = "tensors.safetensors"
CHECKPOINT_META = "meta.json"
BEST = "best.json"

MARKERS = (SUMMARY, CONFIG, METRICS)  # any of them makes a folder a run directory (`trmkit runs`)


def path(run_dir: str | os.PathLike[str], name: str) -> Path:
    """RUN_DIR/name for one of this module's names."""
    return Path(run_dir) / name


def is_run_dir(folder: str | os.PathLike[str]) -> bool:
    return any((Path(folder) / name).is_file() for name in MARKERS)


def task_of(run_dir: str | os.PathLike[str]) -> str | None:
    """The task a run was trained on (data_meta.json's "task": "sudoku", "email", "selfplay-code", ...);
    None for a folder without a readable data_meta.json (not a run, or one from before the file)."""
    try:
        task = json.loads(path(run_dir, DATA_META).read_text(encoding="utf-8")).get("task")
    except (OSError, ValueError, AttributeError):
        return None
    return task if isinstance(task, str) else None


def check_task(run_dir: str | os.PathLike[str], expected: str, instead: str) -> None:
    """Nothing where the run was trained on the task `expected` (or predates data_meta.json); else a ConfigError
    "RUN is a pairs run, not `instead`"."""
    task = task_of(run_dir)
    if task is not None and task != expected:
        raise ConfigError(f"{run_dir} is a {task} run, not {instead}")


class DamagedWeightsError(ConfigError):
    """A weights file that exists but does not read as safetensors (cut short, overwritten)."""

    def __init__(self, file: Path, reason: str, fix: str):
        super().__init__(f"{file} is damaged ({reason}); {fix}")
        self.path, self.reason = file, reason


DAMAGED_WEIGHTS = ("they are written at the end of `trmkit train`: train the run again, or evaluate one of its "
                   "checkpoints (`trmkit eval RUN --checkpoint STEP`)")


def weights_file(source: str | os.PathLike[str]) -> Path:
    """The weights of a run directory, or `source` itself when it is a .safetensors file."""
    source = Path(source)
    return source if source.suffix == ".safetensors" else source / WEIGHTS


def load_weights(model: "torch.nn.Module", source: str | os.PathLike[str], device: "str | torch.device" = "cpu",
                 what: str = "train this run to the end first (`trmkit train`)") -> Path:
    """Load a run's evaluation weights (or a .safetensors file) into `model`; the file read.

    Missing or unexpected keys are an error that names them: a file written for another model
    shape never loads half-way."""
    file = weights_file(source)
    if not file.is_file():
        raise ConfigError(f"{file} not found: {what}")
    tensors = read_weights(file, device)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise ConfigError(f"{file} does not fit this model: missing {sorted(missing)[:5]}, "
                         f"unexpected {sorted(unexpected)[:5]} (was it written for another config?)")
    return file


def read_weights(file: Path, device: "str | torch.device" = "cpu") -> dict[str, "torch.Tensor"]:
    """The tensors of a weights file under their current names; DamagedWeightsError where it is not safetensors."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(file), device=str(device))
    except SafetensorError as err:  # cut short, overwritten by something else: not safetensors
        raise DamagedWeightsError(file, _reason(err), DAMAGED_WEIGHTS) from err
    return current_names(tensors)  # written before a rename: current names


def _reason(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else 'unreadable'}"
