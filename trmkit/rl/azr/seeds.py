"""Seed files in the Absolute Zero Reasoner's formats, and reasoning traces in LIMO's, read streaming.

- ``*_seed_io.jsonl``: one JSON object a line, a program ``snippet`` (defining ``f``), an ``input``
  (the call's argument text, e.g. ``'abc', 3``) and the ``output`` it gives (a Python literal
  as text), ``imports`` (import lines), ``original_snippet``, ``composite_functions``; some
  files add ``_input_type`` / ``_output_type``.
- ``*_code_f_seed_io.jsonl``: a ``snippet``, several ``inputs`` and ``outputs`` (as above), a
  natural-language ``message`` (for induction) and ``imports``.
- LIMO traces: ``question``, ``solution``, ``answer``; a JSON list, one JSON object, or JSONL.

A broken line is a ConfigError naming the file, the line and the key, with what the line should
hold; a caller that passes ``skips=Skips()`` gets the broken lines counted and listed instead.
Every program here is untrusted: run it only in the sandbox (``trmkit.rl.azr.tasks``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from trmkit.config import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class IoSeed:
    """One line of a ``*_seed_io.jsonl`` file: f(input) == output."""

    snippet: str                    # the program, defining f
    input: str                      # the call's argument text
    output: str                     # the result, a Python literal as text
    imports: tuple[str, ...]        # import lines the snippet needs
    original_snippet: str = ""      # the program before AZR composed it with others
    composite_functions: tuple = ()  # the programs it was composed with
    input_type: str = ""            # ``_input_type``, where the file has it
    output_type: str = ""           # ``_output_type``, ditto
    where: str = ""                 # "file:line"


@dataclass(frozen=True)
class CodeFSeed:
    """One line of a ``*_code_f_seed_io.jsonl`` file: f, several input/output pairs, a message."""

    snippet: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str
    imports: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class LimoTrace:
    """One reasoning trace in LIMO's format."""

    question: str
    solution: str
    answer: str
    where: str = ""


@dataclass
class Skips:
    """Broken lines a reader skipped because the caller asked it to: how many and where."""

    count: int = 0
    where: list[str] = field(default_factory=list)  # "file:line: reason", the first 100

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.where) < 100:
            self.where.append(message)


class _Broken(Exception):
    """A record that is not what its format says; the message names the key."""


IO_FORMAT = "an AZR seed_io line: {\"snippet\": str, \"input\": str, \"output\": str, \"imports\": [str], ...}"
CODE_F_FORMAT = ("an AZR code_f line: {\"snippet\": str, \"inputs\": [str], \"outputs\": [str], "
                 "\"message\": str, \"imports\": [str]}")
LIMO_FORMAT = "a LIMO trace: {\"question\": str, \"solution\": str, \"answer\": str}"


def _text(record: dict, key: str, default: str | None = None) -> str:
    if key not in record:
        if default is not None:
            return default
        raise _Broken(f"key {key!r} is missing")
    value = record[key]
    if not isinstance(value, str):
        raise _Broken(f"key {key!r} must be a string, got {type(value).__name__}")
    return value


def _texts(record: dict, key: str, required: bool = True) -> tuple[str, ...]:
    if key not in record and not required:
        return ()
    if key not in record:
        raise _Broken(f"key {key!r} is missing")
    value = record[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Broken(f"key {key!r} must be a list of strings")
    return tuple(value)


def io_seed(record: dict, where: str = "") -> IoSeed:
    """An IoSeed from one decoded line (_Broken naming the key if it is not one)."""
    return IoSeed(snippet=_text(record, "snippet"), input=_text(record, "input"),
                  output=_text(record, "output"), imports=_texts(record, "imports", required=False),
                  original_snippet=_text(record, "original_snippet", ""),
                  composite_functions=tuple(record.get("composite_functions") or ()),
                  input_type=_text(record, "_input_type", ""), output_type=_text(record, "_output_type", ""),
                  where=where)


def code_f_seed(record: dict, where: str = "") -> CodeFSeed:
    """A CodeFSeed from one decoded line; inputs and outputs must pair up."""
    inputs, outputs = _texts(record, "inputs"), _texts(record, "outputs")
    if len(inputs) != len(outputs) or not inputs:
        raise _Broken(f"keys 'inputs' and 'outputs' must be non-empty lists of equal length "
                      f"(got {len(inputs)} and {len(outputs)})")
    return CodeFSeed(snippet=_text(record, "snippet"), inputs=inputs, outputs=outputs,
                     message=_text(record, "message"), imports=_texts(record, "imports", required=False),
                     where=where)


def limo_trace(record: Any, where: str = "") -> LimoTrace:
    """A LimoTrace from one decoded record (an ``answer`` that is a number is kept as its text)."""
    if not isinstance(record, dict):
        raise _Broken(f"a trace must be a JSON object, got {type(record).__name__}")
    answer = record.get("answer")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        record = {**record, "answer": str(answer)}
    return LimoTrace(_text(record, "question"), _text(record, "solution"), _text(record, "answer"), where)


def _jsonl(path: Path, make: Callable[[Any, str], T], form: str, skips: Skips | None) -> Iterator[T]:
    """One record per non-blank line, decoded as it is read."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the seed file ({e.strerror}); check the path") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise _Broken(f"the line is a JSON {type(record).__name__}, not an object")
                yield make(record, where)
            except (ValueError, _Broken) as e:
                reason = f"not JSON ({e})" if isinstance(e, json.JSONDecodeError) else str(e)
                message = f"{where}: {reason}; each line must be {form}"
                if skips is None:
                    raise ConfigError(message + " (fix or delete the line, or read with skips=Skips())") from None
                skips.add(message)


def read_io_seeds(path: str | Path, skips: Skips | None = None) -> Iterator[IoSeed]:
    """The programs of an AZR ``*_seed_io.jsonl`` file, one at a time, e.g.
    ``next(read_io_seeds("azr_7b_seed_io.jsonl")).input == '"Hello world"'``."""
    return _jsonl(Path(path), io_seed, IO_FORMAT, skips)


def read_code_f_seeds(path: str | Path, skips: Skips | None = None) -> Iterator[CodeFSeed]:
    """The programs of an AZR ``*_code_f_seed_io.jsonl`` file, one at a time."""
    return _jsonl(Path(path), code_f_seed, CODE_F_FORMAT, skips)


def read_limo(path: str | Path, skips: Skips | None = None) -> Iterator[LimoTrace]:
    """LIMO traces from a JSON list, a single JSON object, or JSONL (streamed)."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as f:
            head = f.read(4096).lstrip()
            f.seek(0)
            first_line = f.readline()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the traces ({e.strerror}); check the path") from None
    if head.startswith("[") or (head.startswith("{") and not _is_json(first_line)):
        return _whole(path, skips)
    return _jsonl(path, limo_trace, LIMO_FORMAT, skips)


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def _whole(path: Path, skips: Skips | None) -> Iterator[LimoTrace]:
    """A JSON list of traces (or one trace); a broken item is named by its index."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: not JSON ({e.msg}); the file must be a JSON list "
                          f"of traces, one trace, or JSONL, each {LIMO_FORMAT}") from None
    items = data if isinstance(data, list) else [data]
    for index, item in enumerate(items):
        where = f"{path}[{index}]"
        try:
            yield limo_trace(item, where)
        except _Broken as e:
            message = f"{where}: {e}; each item must be {LIMO_FORMAT}"
            if skips is None:
                raise ConfigError(message + " (fix the item, or read with skips=Skips())") from None
            skips.add(message)


def program_source(snippet: str, imports: tuple[str, ...]) -> str:
    """The program as it runs: the import lines it lacks, then the snippet (AZR keeps the import
    lines apart as well as in the snippet)."""
    missing = [line.strip() for line in imports if line.strip() and line.strip() not in snippet]
    return "\n".join(missing + [snippet]) if missing else snippet
