"""The house keeps its shape (STYLE.md, docs/architecture.md).

Imports point one way: config, files -> rundir -> hardware, model, data, monitor -> plan -> train
-> tasks -> applications (bench, learn, report, email, rl, predict) -> registry -> api -> cli. model and data never
import each other; nothing imports cli; the trainer, planner and guard never import a task.
Rooms stay small (a module <= 500 lines, a function <= 50), every file name of a run directory is
spelled only in rundir.py, and only files.py renames a file into place."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trmkit"

LAYER = {
    "trmkit.version": -1,  # a leaf: the package's version, read by the front door and by checkpoints
    "trmkit.names": -0.5,  # former key names: below the config, which reads configs through it
    "trmkit": 0, "trmkit.config": 0, "trmkit.files": 0, "trmkit.procs": 0,
    "trmkit.rundir": 0.5,
    "trmkit.hardware": 1, "trmkit.model": 1, "trmkit.data": 1, "trmkit.monitor": 1,
    "trmkit.plan": 2,
    "trmkit.train": 3,
    "trmkit.tasks": 3.5,
    "trmkit.bench": 4, "trmkit.learn": 4, "trmkit.report": 4, "trmkit.email": 4, "trmkit.rl": 4,
    "trmkit.adapt": 4,
    "trmkit.predict": 4,
    "trmkit.rl.lm": 3.9, "trmkit.rl.loss": 3.8,  # the LM policy's parts, below the rest of rl; the loss they use
    "trmkit.rl.rewards": 3.8,  # rewards and baselines (standard library only): adapt's TR-RPG arm uses them too
    "trmkit.registry": 4.5, "trmkit.api": 4.7, "trmkit.errors": 4.8,
    "trmkit.cli": 5, "trmkit.__main__": 6,
}
SIBLINGS_APART = [("trmkit.model", "trmkit.data")]


def layer_of(module: str) -> tuple[str, int]:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYER and (n > 1 or module == "trmkit"):
            return key, LAYER[key]
    raise AssertionError(f"{module} has no layer: add it to LAYER in tests/test_imports.py")


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trmkit"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names
                         if (PACKAGE.parent / node.module.replace(".", "/") / f"{a.name}.py").exists())
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("trmkit"))
    return found


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


# The package's front door: `trmkit.train(...)` loads trmkit.api on first use (PEP 562 __getattr__),
# so `import trmkit` does no work and trmkit.api stays a layer above everything it calls.
LAZY_FRONT = {"trmkit": {"trmkit.api"}}


def test_imports_point_one_way():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        my_group, my_layer = layer_of(me)
        for other in imports_of(path) - LAZY_FRONT.get(me, set()):
            group, layer = layer_of(other)
            if group == my_group or other == "trmkit":
                continue
            if layer > my_layer or (layer == my_layer and group != my_group):
                problems.append(f"{me} imports {other}")
            if {my_group, group} in [set(p) for p in SIBLINGS_APART]:
                problems.append(f"{me} imports {other}")
    assert not problems, "imports against the direction of STYLE.md:\n" + "\n".join(problems)


def test_the_checker_would_catch_a_backward_import(tmp_path):
    fake = tmp_path / "x.py"
    fake.write_text("from trmkit.cli import main\nfrom trmkit.train.loop import train\n")
    assert {"trmkit.cli", "trmkit.train.loop"} <= imports_of(fake)
    assert layer_of("trmkit.cli")[1] > layer_of("trmkit.model.trm")[1]


# What a task may name beyond the data helpers: the trainer's Scorer seam, the model's Part seam and the losses
# a part folds under (a maze trace's AnswerFold).
TASK_SEAMS = ("trmkit.train.scorer", "trmkit.model.parts", "trmkit.model.losses")


def test_tasks_use_only_data_helpers_and_the_trainer_never_imports_a_task():
    for path in sorted((PACKAGE / "tasks").rglob("*.py")):  # tasks/sudoku/, tasks/arc/ included
        for other in imports_of(path):
            assert layer_of(other)[0] in ("trmkit", "trmkit.config", "trmkit.files", "trmkit.rundir", "trmkit.data",
                                          "trmkit.tasks") or other in TASK_SEAMS, \
                f"{module_name(path)} imports {other}: a task builds on data helpers (and names the trainer's " \
                "Scorer seam, train/scorer.py, and the model's Part seam, model/parts.py), not on the trainer"


def test_rooms_stay_small():
    too_big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 500:
            too_big.append(f"{module_name(path)}: {len(text.splitlines())} lines (at most 500)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > 50:
                    too_big.append(f"{module_name(path)}.{node.name}: {length} lines (at most 50)")
    assert not too_big, "\n".join(too_big)


# Not run directories, with file names of their own that happen to be the same: an e-mail bundle
# (its calibration.json) and a data store (its meta.json).
RUNDIR_NAME_ALLOWED = {"trmkit/rundir.py", "trmkit/email/bundle.py", "trmkit/data/store.py"}


def test_run_directory_file_names_are_spelled_only_in_rundir():
    from trmkit import rundir

    names = {v for k, v in vars(rundir).items() if k.isupper() and isinstance(v, str) and "." in v}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel in RUNDIR_NAME_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names and not isinstance(node.value, bool):
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "use the names in trmkit/rundir.py:\n" + "\n".join(found)


# Renames that do not write a file: a checkpoint moved aside or renamed before deletion.
RENAME_ALLOWED = {"trmkit/files.py": None, "trmkit/train/checkpoint/store.py": 2}


def test_only_files_py_writes_a_file_into_place():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and n.func.attr in ("replace", "rename", "fsync")
                 and (isinstance(n.func.value, ast.Name) and n.func.value.id == "os"
                      or n.func.attr == "replace" and len(n.args) == 1 and not n.keywords
                      and isinstance(n.func.value, ast.Name) and n.func.value.id in ("tmp", "path", "out"))]
        if rel in RENAME_ALLOWED and (RENAME_ALLOWED[rel] is None or len(calls) <= RENAME_ALLOWED[rel]):
            continue
        found += [f"{rel}:{c.lineno}" for c in calls]
    assert not found, "write through trmkit.files (atomic_write, write_json, atomic_open, commit_dir):\n" + \
        "\n".join(found)
