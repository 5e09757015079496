"""The generic core carries no application's furniture: the model, data and train sections hold only fields on a
reviewed list, each with the reason more than one task (or every run) uses it, and config.py, model/, train/,
data/ and plan/ import no task or application package. A task's own knobs go in its own section, registered
in trmkit/registry.py's SECTIONS (the maze generator's: trmkit/tasks/maze/config.py; the e-mail model part's:
trmkit/email/config.py), and its model pieces are parts (model/parts.py)."""

import ast
import dataclasses
from pathlib import Path

from tests.model.test_parts import APP_FIELD
from trmkit.config import DataConfig, ModelConfig, TrainConfig

PACKAGE = Path(__file__).resolve().parents[1] / "trmkit"

MODEL_FIELDS = {
    "hidden_size": "the width of every model",
    "num_heads": "the attention mixer's heads (any task)",
    "L_layers": "the depth of every model's network",
    "H_cycles": "the recursion of every model (T)",
    "L_cycles": "the recursion of every model (n)",
    "halt_max_steps": "the supervision steps of every model (N_sup)",
    "halt_exploration_prob": "every model's ACT halting",
    "mixer": "every model's sequence mixer",
    "expansion": "every model's SwiGLU width",
    "mlp_width": "the same width, set explicitly",
    "conv_dense": "the conv mixer of any grid store",
    "grid_height": "the conv mixer's grid, from any grid store's meta.json",
    "grid_width": "the same grid",
    "puzzle_emb_len": "the puzzle prefix of every store with puzzle ids",
    "puzzle_emb_dim": "the same prefix",
    "rms_norm_eps": "every model's norm",
    "rope_theta": "the attention mixer's positions",
    "halt_loss_weight": "every model's loss",
    "vocab_size": "every store's meta.json",
    "seq_len": "every store's meta.json",
    "num_puzzle_ids": "every store's meta.json",
    "num_classes": "any classify store's meta.json (the class head)",
    "loss": "every model's answer distribution",
    "part_positions": "any store's meta.json: its last positions, read by the task's model part, not the mixer",
    "answer_vocab": "any grid store's meta.json: a token head over the vocabulary's first ids",
    "trace_answers": "data.trace's answer ids (any generator that declares trace tokens); read by its task's part",
}

DATA_FIELDS = {
    "path": "every store-backed run reads a store",
    "eval_limit": "any task's held-out split can be capped",
    "stream": "store, curriculum (any rated store) or generate (any task with a sampler)",
    "curriculum_samples": "the easy-to-hard ramp of the generated stream and of the rating curriculum",
    "trace": "per-step labels of any generator that declares trace_tokens (data/generated.py's Sampler)",
}

TRAIN_FIELDS = {
    "batch_size": "the optimizer step of every run",
    "max_steps": "the schedule of every run",
    "max_minutes": "a wall-clock budget for every run",
    "fit_to_time": "max_steps fitted to that budget, for every run",
    "optimizer": "every run's optimizer",
    "lr": "every run's learning rate",
    "lr_min_ratio": "every run's cosine schedule",
    "warmup_steps": "every run's warm-up",
    "weight_decay": "every run's optimizer",
    "beta1": "every run's optimizer",
    "beta2": "every run's optimizer",
    "puzzle_emb_lr": "the puzzle embedding of every store with puzzle ids (sudoku, maze, ARC, pairs)",
    "puzzle_emb_weight_decay": "the same embedding",
    "ema_decay": "the evaluated weights of every run",
    "ema_warmup": "the same EMA",
    "eval_every": "every run's evaluations",
    "log_every": "every run's metric lines",
    "micro_batch": "the planner's split of any batch",
    "checkpoint_every": "every run's checkpoints",
    "checkpoint_minutes": "every run's checkpoints",
    "keep_checkpoints": "every run's checkpoint rotation",
    "best_metric": "any task's metric names the best checkpoint",
    "best_margin": "the same choice, for any metric",
    "class_weighting": "the loss of any task's labels (classifiers and grids)",
    "class_weights": "the same, by label name in any vocabulary",
    "mask_given": "the given-cell mask: cells of the tokens a store's meta.json names (any grid task may)",
    "restore_best": "every run with a validation split",
    "early_stop_evals": "every run with evaluations",
    "progressive_loss": "the ACT carry of every model",
    "depth_curriculum": "the recursion depth of every model",
    "init_from": "any run's start from another run's weights (e-mail pretraining, RL seeding)",
    "stagger_start": "the ACT slots of every model whose samples nothing halts before N_sup (adapt sets it)",
}

GENERIC = [PACKAGE / "config.py", *(PACKAGE / part for part in ("model", "train", "data", "plan"))]
APPLICATIONS = ("trmkit.tasks", "trmkit.email", "trmkit.rl", "trmkit.registry", "trmkit.api", "trmkit.cli")


def test_the_model_data_and_train_sections_hold_only_reviewed_generic_fields():
    assert [f.name for f in dataclasses.fields(ModelConfig)] == list(MODEL_FIELDS)
    assert [f.name for f in dataclasses.fields(DataConfig)] == list(DATA_FIELDS)
    assert [f.name for f in dataclasses.fields(TrainConfig)] == list(TRAIN_FIELDS)
    assert all(reason.strip() for reason in (*MODEL_FIELDS.values(), *DATA_FIELDS.values(), *TRAIN_FIELDS.values()))
    # an application's names (APP_FIELD): the e-mail bag's none (its own section, `email:`); the trace's answer
    # ids are data.trace's, a generic field, and only the maze task's part reads them (model/ never does)
    assert [name for name in MODEL_FIELDS if APP_FIELD.match(name)] == ["trace_answers"]


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy and type-checking imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_the_generic_core_imports_no_task_or_application():
    files = [f for root in GENERIC for f in ([root] if root.is_file() else sorted(root.rglob("*.py")))]
    assert len(files) > 40
    found = [f"{f.relative_to(PACKAGE.parent)}: {m}" for f in files for m in sorted(imported(f))
             if m.startswith(APPLICATIONS)]
    assert not found, "\n".join(found)
