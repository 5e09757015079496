"""The task seam stays typed and single: every hook of `Task` has a precise type and every registered task's
hooks are annotated; shared shapes (LearnSet) and names (Run, Plan) are defined once; `trmkit.build_data`
reads a task's options as keywords, with no argv, and refuses an unknown one by name."""

import argparse
import ast
import collections.abc
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest
import torch

import trmkit
from trmkit import registry
from trmkit.api import add_data_arguments, data_options
from trmkit.config import ConfigError
from trmkit.data.store import open_store
from trmkit.tasks import base
from trmkit.tasks.maze import MazeOptions
from trmkit.tasks.options import read_options

PACKAGE = Path(trmkit.__file__).resolve().parent
HOOKS = ("build", "scorer", "learn_set", "plots", "sampler", "variants", "before_training", "model_parts", "checker")
QUIET = lambda m: None  # noqa: E731


def vague(hint: object) -> list[str]:
    """What is imprecise in a type: Any anywhere, a Callable of any arguments, a protocol member unannotated."""
    if hint is typing.Any:
        return ["Any"]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is collections.abc.Callable and args and args[0] is Ellipsis:
        return [f"{hint} takes any arguments"]
    flat = [a for arg in args for a in (arg if isinstance(arg, list) else [arg])]  # Callable[[A, B], R]
    found = [problem for arg in flat for problem in vague(arg)]
    if isinstance(hint, type) and getattr(hint, "_is_protocol", False):
        found += protocol_problems(hint)
    return found


def protocol_problems(protocol: type) -> list[str]:
    problems = []
    for name, member in vars(protocol).items():
        function = member.fget if isinstance(member, property) else member
        if name.startswith("_") and name != "__call__" or not callable(function):
            continue
        hints = typing.get_type_hints(function, localns={"torch": torch})
        params = [p for p in inspect.signature(function).parameters if p != "self"]
        problems += [f"{protocol.__name__}.{name}: {p} has no type" for p in params + ["return"] if p not in hints]
        problems += [f"{protocol.__name__}.{name}: {p}" for h in hints.values() for p in vague(h)]
    return problems


def test_the_checker_catches_a_vague_type():
    assert vague(typing.Callable[..., typing.Any]) and vague(typing.Optional[typing.Callable[[int], typing.Any]])
    assert vague(typing.Callable[[typing.Any], int])
    assert not vague(typing.Optional[typing.Callable[[int], str]])


def test_every_hook_of_a_task_has_a_precise_type():
    from trmkit.model.parts import PartsFactory  # named for types only in tasks/base.py (torch loads late)

    hints = typing.get_type_hints(base.Task, localns={"PartsFactory": PartsFactory})
    assert set(HOOKS) <= set(hints)
    problems = {name: vague(hints[name]) for name in HOOKS}
    assert not any(problems.values()), problems
    assert len(dataclasses.fields(base.Task)) <= 15  # small: parts 13th, sections 14th, checker 15th


@pytest.mark.parametrize("name", sorted(registry.TASKS))
def test_every_registered_task_annotates_its_hooks(name):
    task = registry.TASKS[name]
    assert issubclass(task.options, base.BuildOptions)
    for hook in HOOKS:
        value = getattr(task, hook)
        if value is None or hook == "learn_set":
            continue
        function = value.__init__ if isinstance(value, type) else value
        signature = inspect.signature(function)
        params = [p for p in signature.parameters.values() if p.name != "self"]
        missing = [p.name for p in params if p.annotation is inspect.Parameter.empty]
        assert not missing, f"{name}.{hook} ({value.__qualname__}): {missing} not annotated"
        assert not any("Any" in str(p.annotation) for p in params), f"{name}.{hook}: {signature}"
        assert signature.return_annotation is not inspect.Signature.empty, f"{name}.{hook}: no return type"


def test_learn_sets_follow_the_one_shape():
    for name in ("sudoku", "maze"):
        spec = registry.TASKS[name].learn_set
        for member in ("default_dir", "train_groups", "test_groups", "build_args", "describe", "build"):
            assert hasattr(spec, member), f"{name}'s learn set has no {member}"


def class_names() -> collections.Counter:
    return collections.Counter(node.name for path in PACKAGE.rglob("*.py")
                               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef))


def test_shared_shapes_and_public_names_are_each_defined_once():
    names = class_names()
    assert names["LearnSet"] == 1 and "class LearnSet(Protocol)" in (PACKAGE / "tasks/base.py").read_text()
    assert names["Run"] == 1 and "class Run:" in (PACKAGE / "api.py").read_text()  # trmkit.Run
    assert names["Plan"] == 1 and "class Plan:" in (PACKAGE / "plan/objects.py").read_text()  # the planner's


def test_the_email_tasks_are_declared_by_one_constructor():
    calls = [path.name for path in (PACKAGE / "email").rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Task"]
    assert calls == ["task.py"]  # inside email_task, which both e-mail tasks call
    email, mlm = registry.get("email"), registry.get("email-mlm")
    assert email.shape == "classify" and email.before_training is not None and mlm.shape == "grid"
    assert mlm.scorer is mlm.plots is mlm.before_training is None


def test_build_data_refuses_an_unknown_option_naming_it_and_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown option 'colour'; the options are out, force, .*givens"):
        trmkit.build_data("sudoku", tmp_path / "x", colour="red")
    with pytest.raises(ConfigError, match=r"'givnes' \(did you mean 'givens'\?\)"):
        trmkit.build_data("sudoku", tmp_path / "x", givnes="30")
    with pytest.raises(ConfigError, match=r"num='many' is not an integer"):
        trmkit.build_data("sudoku", tmp_path / "x", num="many")
    with pytest.raises(ConfigError, match=r"format='xml' is not one of auto, jsonl, trm-reference"):
        trmkit.build_data("pairs", tmp_path / "x", source="a.jsonl", format="xml")
    with pytest.raises(ConfigError, match=r"build_data\('pairs'\).*give source"):
        trmkit.build_data("pairs", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_build_data_calls_the_builder_without_an_argv(tmp_path, monkeypatch):
    def no_argv(*args, **kwargs):
        raise AssertionError("build_data parsed an argv")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", no_argv)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", no_argv)
    out = trmkit.build_data("sudoku", tmp_path / "s", log=QUIET, source="generate", num="6", givens=40, aug=1,
                            test_fraction=0.5, force=True)
    build = open_store(out)["train"].meta.build
    assert build["num_generate"] == 6 and build["aug"] == 1 and build["givens"] == [40, 40]


def test_the_command_line_and_python_make_the_same_options(tmp_path):
    parser = argparse.ArgumentParser()
    add_data_arguments(parser, registry.get("maze"))
    args = parser.parse_args(["--out", str(tmp_path), "--size", "7", "--no-unique-path", "--loops", "0.2"])
    cli = data_options(registry.get("maze"), args)
    py = read_options(MazeOptions, {"out": str(tmp_path), "size": 7, "unique_path": False, "loops": 0.2}, "test")
    assert cli == py and cli.unique_path is False and cli.min_path is None and cli.out == tmp_path
    parser = argparse.ArgumentParser()
    add_data_arguments(parser, registry.get("sudoku"))
    args = parser.parse_args(["--out", "x", "--source", "a.txt", "--source", "generate", "--allow-multiple"])
    options = data_options(registry.get("sudoku"), args)
    assert options.source == ("a.txt", "generate") and options.allow_multiple is True
    mlm = argparse.ArgumentParser()
    add_data_arguments(mlm, registry.get("email-mlm"))
    assert data_options(registry.get("email-mlm"), mlm.parse_args(["--out", "x", "--from", "s"])).source == "s"
