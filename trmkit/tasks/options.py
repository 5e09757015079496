"""A task's `trmkit data NAME` options as one typed dataclass, read from Python and from the command line.

A task declares its builder's options as a frozen dataclass that extends `BuildOptions` (the options
every builder takes: --out, --force, --test-fraction, --seed), each field made with `option(...)`:
its type, default and help text are the whole declaration. The CLI turns the fields into flags
(`--min-guesses` for `min_guesses`; `flag=` names another, e.g. `--from`), Python passes keywords
(`trmkit.build_data("sudoku", "data/x", num=300)`); both arrive at `read_options`, which checks every
name and value and returns the dataclass the builder receives.

Field types: str, int, float, bool (a switch), Path, `X | None` (default None), and `tuple[str, ...]`
(an option given several times; one value is a one-item tuple).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, TypeVar

from trmkit.config import ConfigError

SCALARS: tuple[type, ...] = (str, int, float, bool, Path)


def option(default: object = dataclasses.MISSING, help: str = "", *, flag: str | None = None,  # noqa: A002
           choices: tuple[str, ...] = (), metavar: str | None = None) -> Any:
    """One builder option: its default (none: required), --help text, and optionally another flag name,
    the values it takes, and the name --help shows for its value."""
    return field(default=default, metadata={"help": help, "flag": flag, "choices": choices, "metavar": metavar})


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    """The options of every `trmkit data NAME`; a task's own options extend it."""

    out: Path = option(help="dataset directory to create (train/ and test/)")
    force: bool = option(False, "replace the store already at --out (runs trained on it then refuse to resume or "
                                "evaluate on it); a folder that is not a store is never replaced")
    test_fraction: float = option(0.1, "share held out for test; 1 puts everything in test (a store for "
                                       "`trmkit eval` only)")
    seed: int = option(0, "seed of the split and of any random draw of the builder")


OptionsT = TypeVar("OptionsT", bound=BuildOptions)


@dataclass(frozen=True)
class OptionSpec:
    """One field of an options dataclass, as the CLI and `read_options` see it."""

    name: str  # the keyword, e.g. min_guesses
    flag: str  # the command-line flag, e.g. --min-guesses
    kind: type  # one of SCALARS: the type of each value
    many: bool  # tuple[str, ...]: the option may be given several times
    optional: bool  # None is a value (X | None)
    required: bool  # no default
    default: object
    help: str
    choices: tuple[str, ...]
    metavar: str | None


def specs(options: type[BuildOptions]) -> list[OptionSpec]:
    """Every option of an options dataclass, in declaration order (the common ones first)."""
    hints = typing.get_type_hints(options)
    out = []
    for f in dataclasses.fields(options):
        kind, many, optional = _kind(hints[f.name], options, f.name)
        meta, required = f.metadata, f.default is dataclasses.MISSING
        out.append(OptionSpec(
            name=f.name, flag=meta.get("flag") or "--" + f.name.replace("_", "-"), kind=kind, many=many,
            optional=optional or many, required=required, default=None if required else f.default,
            help=meta.get("help", ""), choices=tuple(meta.get("choices", ())), metavar=meta.get("metavar")))
    return out


def _kind(hint: object, options: type, name: str) -> tuple[type, bool, bool]:
    """(value type, many, optional) of a field's annotation; an annotation outside SCALARS is a bug of the task."""
    args = typing.get_args(hint)
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and args[1:] == (Ellipsis,) and args[0] in SCALARS:
        return args[0], True, optional
    if hint in SCALARS:
        return typing.cast(type, hint), False, optional
    raise TypeError(f"{options.__name__}.{name}: {hint!r} is not an option type (use one of "
                    f"{', '.join(t.__name__ for t in SCALARS)}, X | None or tuple[str, ...])")


def read_options(options: type[OptionsT], values: Mapping[str, object], where: str) -> OptionsT:
    """The options dataclass from keyword values (Python's or the parsed flags): unknown names, missing required
    options and values of the wrong type are a ConfigError that names them; `where` says whose options they are."""
    known = {s.name: s for s in specs(options)}
    for name in values:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise ConfigError(f"{where}: unknown option {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; the options are {', '.join(known)}")
    missing = [s.name for s in known.values() if s.required and values.get(s.name) is None]
    if missing:
        raise ConfigError(f"{where}: give {', '.join(missing)} ({known[missing[0]].help})")
    given = {name: convert(known[name], value, where) for name, value in values.items()}
    return options(**given)


def convert(spec: OptionSpec, value: object, where: str) -> object:
    """One option's value as its field's type: numbers given as text are read, text given as a number or a path is
    spelled out; one value of an option given several times is a one-item tuple."""
    if value is None and spec.optional:
        return None
    if spec.many:
        items = value if isinstance(value, (list, tuple)) else [value]
        return tuple(_scalar(spec, item, where) for item in items)
    return _scalar(spec, value, where)


def _scalar(spec: OptionSpec, value: object, where: str) -> object:
    try:
        if spec.kind is bool:
            if not isinstance(value, bool):
                raise TypeError
            out: object = value
        elif spec.kind in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float, str)) or (
                    spec.kind is int and isinstance(value, float)):
                raise TypeError
            out = spec.kind(value)
        else:
            if not isinstance(value, (str, int, float, Path)) or isinstance(value, bool):
                raise TypeError
            out = spec.kind(value) if spec.kind is Path else str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {spec.name}={value!r} is not {_a(spec.kind)}"
                          + (" (True or False)" if spec.kind is bool else "")) from None
    if spec.choices and out not in spec.choices:
        raise ConfigError(f"{where}: {spec.name}={value!r} is not one of {', '.join(spec.choices)}")
    return out


def _a(kind: type) -> str:
    return {str: "text", int: "an integer", float: "a number", bool: "a switch", Path: "a path"}[kind]
