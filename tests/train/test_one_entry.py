"""One way into training: `train_step` has one caller (the loop's `run_step`), the loop's `train` one
(train/run.py's `run`), every caller of `run` hands it the measurement cache, and hooks on the loop
start, watch, stop and evaluate a run.
"""

import ast
import json
from pathlib import Path

import pytest

from trmkit import config as config_mod
from trmkit import hardware, rundir
from trmkit.config import ConfigError
from trmkit.tasks.sudoku.build import build_sudoku
from trmkit.train.hooks import Hooks
from trmkit.train.run import run

PACKAGE = Path(__file__).resolve().parents[2] / "trmkit"
CONFIG = """
run: {seed: 3, threads: 1, dtype: float32, compile: "off", grad_checkpointing: "off"}
model: {hidden_size: 16, num_heads: 2, L_layers: 1, H_cycles: 1, L_cycles: 1, halt_max_steps: 2, puzzle_emb_len: 2}
train: {batch_size: 8, max_steps: 4, lr: 3e-3, warmup_steps: 1, ema_decay: 0.9, checkpoint_every: 0,
        checkpoint_minutes: 0, log_every: 1, micro_batch: 8}
"""


def _calls(tree: ast.AST):
    """(enclosing function name, call node) for every call in a module."""
    def walk(node, where):
        for child in ast.iter_child_nodes(node):
            inside = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                yield where, child
            yield from walk(child, inside)
    yield from walk(tree, "<module>")


def _names_for(tree: ast.AST, module: str, name: str) -> tuple[set[str], set[str]]:
    """How a module spells `module.name`: (local names of the function, local names of its module)."""
    direct, modules = set(), set()
    parent, _, leaf = module.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            direct |= {a.asname or a.name for a in node.names if a.name == name}
        elif isinstance(node, ast.ImportFrom) and node.module == parent:
            modules |= {a.asname or a.name for a in node.names if a.name == leaf}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == module and a.asname}
    return direct, modules


def callers(module: str, name: str) -> list[tuple[str, str]]:
    """(file relative to trmkit/, enclosing function) of every call of module.name in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        here = path.relative_to(PACKAGE).as_posix()
        direct, modules = _names_for(tree, module, name)
        if here == module.removeprefix("trmkit.").replace(".", "/") + ".py":
            direct.add(name)  # the module's own calls of its function
        for where, call in _calls(tree):
            f = call.func
            if (isinstance(f, ast.Name) and f.id in direct) or (
                    isinstance(f, ast.Attribute) and f.attr == name and isinstance(f.value, ast.Name)
                    and f.value.id in modules):
                found.append((here, where))
    return found


def test_train_step_has_one_caller_the_loop():
    assert callers("trmkit.train.step", "train_step") == [("train/loop.py", "run_step")]


def test_the_loop_has_one_caller_the_entry_point():
    assert callers("trmkit.train.loop", "train") == [("train/run.py", "run")]


def test_learn_and_the_bench_take_no_step_of_their_own():
    """The curve is hooks on the loop; the bench times the loop's own step (run_step), not train_step; the
    self-play bench's rounds are the loop's steps (hooks), never an objective's step called beside it."""
    for module, name in (("trmkit.train.step", "train_step"), ("trmkit.train.loop", "train")):
        assert not [c for c in callers(module, name) if c[0] == "learn.py" or c[0].startswith("bench/")]
    assert [c[0] for c in callers("trmkit.train.run", "run")].count("learn.py") == 1
    assert {c[0] for c in callers("trmkit.train.loop", "run_step")} == {"train/loop.py", "bench/session.py"}
    steps = [path.relative_to(PACKAGE).as_posix() for path in sorted(PACKAGE.rglob("*.py"))
             if ".step(s.model" in path.read_text(encoding="utf-8") or "objective.step(" in path.read_text(
                 encoding="utf-8")]
    assert steps == ["train/loop.py"]


def test_every_way_in_plans_from_the_measurement_cache():
    """The API and CLI, RL and its bench, e-mail pretraining and the learning curve all come through `run`,
    each with the planner's measurement cache (none measures afresh what the others have measured)."""
    found = callers("trmkit.train.run", "run")
    assert {f for f, _ in found} == {"api.py", "rl/commands.py", "rl/bench.py", "email/pretrain_command.py",
                                     "learn.py", "adapt/command.py"}
    for path in {f for f, _ in found}:
        tree = ast.parse((PACKAGE / path).read_text(encoding="utf-8"))
        direct, _ = _names_for(tree, "trmkit.train.run", "run")
        for _, call in _calls(tree):
            if isinstance(call.func, ast.Name) and call.func.id in direct:
                assert "cache_dir" in {k.arg for k in call.keywords}, path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry")
    build_sudoku("generate", root / "data", num_generate=16, givens="40-45", test_fraction=0.25,
                 aug=1, seed=5, log=lambda m: None)
    return root


def config(store: Path, run_dir: Path, *extra: str):
    (store / "cfg.yaml").write_text(CONFIG)
    return config_mod.load(store / "cfg.yaml", [f"data.path={store / 'data'}", f"run.dir={run_dir}", *extra])


class Recorder(Hooks):
    def __init__(self, stop_at: int | None = None, owns_end: bool = False, evaluation: dict | None = None):
        self.stop_at, self.owns_end, self.own = stop_at, owns_end, evaluation
        self.said: list[str] = []

    def on_start(self, s):
        self.said.append(f"start {s.state.step}")

    def on_step(self, s, metrics):
        assert "train/lr" in metrics and "perf/seconds_per_step" in metrics
        self.said.append(f"step {s.state.step}")

    def should_stop(self, s):
        return self.stop_at is not None and s.state.step >= self.stop_at

    def evaluation(self, s):
        return self.own

    def after_training(self, s, result):
        self.said.append(f"after {result['steps']}")


def test_hooks_see_each_step_and_may_stop_the_run_before_max_steps(store, tmp_path):
    hooks = Recorder(stop_at=2)
    result = run(config(store, tmp_path / "r"), hardware.probe(), hooks=hooks, log=lambda m: None)
    assert hooks.said == ["start 0", "step 1", "step 2", "after 2"]
    summary = json.loads(rundir.path(tmp_path / "r", rundir.SUMMARY).read_text())
    assert result["steps"] == summary["steps"] == 2 and "cell_accuracy" in summary  # the loop's end evaluated


def test_hooks_that_own_the_end_run_past_max_steps_and_their_evaluation_is_the_summary_s(store, tmp_path):
    hooks = Recorder(stop_at=6, owns_end=True, evaluation={"cell_accuracy": 0.5, "samples": 4})
    said = []
    result = run(config(store, tmp_path / "r"), hardware.probe(), hooks=hooks, log=said.append)
    assert hooks.said[-2:] == ["step 6", "after 6"] and result["steps"] == 6  # train.max_steps=4
    assert result["cell_accuracy"] == 0.5 and not any(line.startswith("eval @") for line in said)


def test_without_hooks_a_run_is_a_plain_training_and_its_run_dir_is_claimed(store, tmp_path):
    cfg = config(store, tmp_path / "r", "train.max_steps=2")
    with pytest.raises(ConfigError, match="--resume .*no checkpoint"):
        run(cfg, hardware.probe(), log=lambda m: None, resume=True)
    assert run(cfg, hardware.probe(), log=lambda m: None)["steps"] == 2
    with pytest.raises(ConfigError, match="already holds a run"):
        run(cfg, hardware.probe(), log=lambda m: None)


def test_no_benchmark_takes_a_step_of_its_own():
    """The benchmarks time the loop's own step (`run_step`), never `train_step` or an objective's `step`
    called beside the loop, so what they time is what training runs."""
    root = PACKAGE.parent / "benchmarks"
    found = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for where, call in _calls(tree):
            f = call.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == "train_step" or (name == "step" and isinstance(f, ast.Attribute)
                                        and isinstance(f.value, ast.Name) and f.value.id == "objective"):
                found.append((path.name, where))
    assert found == []
