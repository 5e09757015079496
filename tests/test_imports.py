"""Imports point one way (STYLE.md): config -> hardware, model, data, monitor -> plan -> train
-> tasks -> applications (bench, learn, report) -> cli. model and data never import each other;
nothing imports cli; the trainer, planner and guard never import a task (tasks sit above them)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "trmkit"

LAYER = {
    "trmkit": 0, "trmkit.config": 0,
    "trmkit.hardware": 1, "trmkit.memory": 1, "trmkit.model": 1, "trmkit.data": 1, "trmkit.monitor": 1,
    "trmkit.plan": 2,
    "trmkit.train": 3,
    "trmkit.tasks": 3.5,
    "trmkit.bench": 4, "trmkit.learn": 4, "trmkit.report": 4, "trmkit.email": 4, "trmkit.rl": 4,
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


def test_imports_point_one_way():
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        my_group, my_layer = layer_of(me)
        for other in imports_of(path):
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


def test_tasks_use_only_data_helpers_and_the_trainer_never_imports_a_task():
    for path in sorted((PACKAGE / "tasks").glob("*.py")):
        for other in imports_of(path):
            assert layer_of(other)[0] in ("trmkit", "trmkit.config", "trmkit.data", "trmkit.tasks"), \
                f"{module_name(path)} imports {other}: a task builds on data helpers, not on the trainer"
