"""The README's commands work as written, for a newcomer on a fresh clone.

Reads README.md's ```bash and ```python blocks in order and checks every command:

- Parsed: every `trmkit ...` line parses with trmkit's own parser (`trmkit.cli.build_parser()`,
  `parse_known_args`; arguments left over only as key=value overrides): no unknown subcommand or
  option. The overrides of `trmkit train CONFIG` and `trmkit plan CONFIG` load with the preset.
- Named files: every path a command names exists in the repository (configs/, examples/,
  benchmarks/, scripts/), or an earlier README command writes it (`--out`, `--into`, `run.dir=`,
  the preset's run.dir that `trmkit train` writes, the Python block's store and run, what a script
  of scripts/ writes: .venv, the demo's data/sudoku-easy), or it is the reader's own (`~/...`) or a
  shared data set (`../shared/...`). The preset's data.path counts as read by train and plan. No
  `trmkit` line comes before `source .venv/bin/activate` (without it: command not found).
- Run, in a scratch folder (tmp_path/repo with links to configs/, examples/, benchmarks/ and
  scripts/: data/ and runs/ are written there, and no ../shared beside it), as written:
  `trmkit --version`, `trmkit hw`, `trmkit plan configs/sudoku-laptop.yaml`, `trmkit data maze`
  (11 x 11 and 30 x 30), `trmkit data pairs` on the generated 6 x 6 file, and the Python block's
  `trmkit.build_data(...)` line; `trmkit data ... --source ../shared/...` (hard Sudoku, e-mail) must
  end in one line naming the missing path, exit code 2, no traceback. Run with `--num` at most
  FEWER: `python benchmarks/pairs_sudoku6.py` and the demo's `trmkit data sudoku` line (the store
  `trmkit plan` reads), generators whose files the commands above read.
- Only parsed and path-checked (minutes of training, a trained run, or the reader's mail): `trmkit
  train`, `trmkit eval`, `trmkit predict`, `trmkit email ...`, `trmkit data email --source ~/...`,
  and the `bash ...` lines (the demo, test and benchmark scripts).

About 20 s on one quiet core, 30 s on a busy one.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from trmkit import procs

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
LINKED = ("configs", "examples", "benchmarks", "scripts")  # what the scratch folder links to
OUTPUT_OPTIONS = {"--out", "--into", "--save"}  # options whose value a command writes
FILE_SUFFIX = re.compile(r"\.(jsonl|json|txt|ya?ml|csv|mbox|gz|eml|py|sh)$")
SHARED = "../shared/"
FEWER = 200  # puzzles a generator run here writes (README `trmkit` lines run with their own counts)
PER_COMMAND_TIMEOUT = 120  # seconds: a safety net; each command run here takes a few seconds


@dataclass
class Command:
    line: int  # README line number, for messages
    text: str  # as written
    argv: list[str]  # a shell line's words, env assignments and comments removed ([] for a Python line)
    kind: str  # the program ("trmkit", "bash", "python", "source", ...), or "python-block" for a Python line
    reads: tuple[str, ...] = ()  # the other paths a Python line names
    writes: tuple[str, ...] = ()  # the store and the run a Python line writes


def commands(text: str) -> list[Command]:
    """The README's commands in order: each line of a ```bash block and of a ```python block."""
    out, fence, pending = [], None, ""
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("```"):
            fence = stripped[3:].strip() if fence is None else None
            continue
        if fence == "python" and stripped:
            writes = re.findall(r'(?:build_data\("\w+", |"run\.dir": )"([^"]+)"', stripped)  # a store, a run
            reads = [p for p in re.findall(r'"([\w.~-]*/[^"]*)"', stripped) if p not in writes]
            out.append(Command(number, stripped, [], "python-block", tuple(reads), tuple(writes)))
        if fence != "bash" or not stripped:
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole, pending = pending + stripped, ""
        argv = shlex.split(whole, comments=True)
        while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):  # MINUTES=120 bash ...
            argv.pop(0)
        if argv:
            out.append(Command(number, whole, argv, argv[0]))
    return out


def script_commands(script: Path) -> list[list[str]]:
    """The `$TRMKIT ...` lines of a shell script the README runs, its plain `NAME=value` assignments filled in
    (lines that use anything else, such as a date stamp, are left out): what the script writes, what it runs."""
    names: dict[str, str] = {}
    out = []
    for line in script.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        plain = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=([\w./-]+)", line)
        if plain:
            names[plain.group(1)] = plain.group(2)
            continue
        if not line.startswith("$TRMKIT "):
            continue
        filled = re.sub(r'"?\$\{?([A-Z_][A-Z0-9_]*)\}?"?', lambda m: names.get(m.group(1), m.group(0)), line)
        if "$" not in filled.split("#")[0]:
            out.append(["trmkit", *shlex.split(filled, comments=True)[1:]])
    return out


def _pathlike(token: str) -> bool:
    return not token.startswith("-") and ("/" in token or bool(FILE_SUFFIX.search(token)))


def _config(path: Path, overrides: list[str]):
    """(the config a preset and its overrides give, None) or (None, why not)."""
    from trmkit import config as config_mod

    try:
        return config_mod.load(path, overrides), None
    except config_mod.ConfigError as err:
        return None, str(err)


def parse(argv: list[str]):
    """trmkit's own parser on argv[1:]: (namespace, None) or (None, why it does not parse)."""
    from trmkit.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args, extra = build_parser().parse_known_args(argv[1:])
    except SystemExit as stop:
        if stop.code == 0 and argv[1:] == ["--version"]:
            return object(), None
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {stop.code}"
    bad = [e for e in extra if "=" not in e or e.startswith("-")]
    if bad:
        return None, f"unrecognized arguments: {' '.join(bad)}"
    return args, None


def problems(text: str, repo: Path = REPO) -> list[str]:
    """Every way the README's commands would fail a newcomer before running them (empty: none)."""
    found: list[str] = []
    written: set[str] = set()
    activated = False
    for cmd in commands(text):
        where = f"README.md:{cmd.line}: {cmd.text}"
        if cmd.kind == "source" and cmd.argv[1:] == [".venv/bin/activate"]:
            activated = True
        if cmd.kind == "trmkit" and not activated:
            found.append(f"{where}: `trmkit` before `source .venv/bin/activate` (command not found in a new shell)")
            activated = True  # said once
        if cmd.kind == "trmkit":
            args, why = parse(cmd.argv)
            if why:
                found.append(f"{where}: does not parse: {why}")
        outputs, inputs = set(cmd.writes), list(cmd.reads)
        for i, token in enumerate(cmd.argv[1:]):
            previous = cmd.argv[i]
            key, eq, value = token.partition("=")
            if eq and key == "run.dir":
                outputs.add(value)
            elif eq and re.fullmatch(r"[a-z]+\.[a-z_]+", key):
                if key.endswith("path") and _pathlike(value):
                    inputs.append(value)
            elif previous in OUTPUT_OPTIONS:
                outputs.add(token)
            elif _pathlike(token):
                inputs.append(token)
        if cmd.kind == "bash":
            inputs = inputs[:1]  # the script; what follows is the script's own business
        if cmd.kind == "bash" and cmd.argv[1:2] and cmd.argv[1].startswith("scripts/"):
            outputs.add(".venv")  # every script there sets up .venv (scripts/setup.sh)
            if (repo / cmd.argv[1]).is_file():
                for line in script_commands(repo / cmd.argv[1]):
                    outputs |= {b for a, b in zip(line, line[1:]) if a in OUTPUT_OPTIONS}
                    outputs |= {t.partition("=")[2] for t in line if t.startswith("run.dir=")}
        if cmd.kind == "source":
            inputs = [cmd.argv[1]] if len(cmd.argv) > 1 else []
        if cmd.kind == "trmkit" and cmd.argv[1:2] in (["train"], ["plan"]) and cmd.argv[2:3] \
                and not cmd.argv[2].startswith("-"):
            overrides = [t for t in cmd.argv[3:] if "=" in t and not t.startswith("-")]
            cfg, why = _config(repo / cmd.argv[2], overrides)
            if why:
                found.append(f"{where}: {why}")
                cfg = _config(repo / cmd.argv[2], [])[0]  # its run.dir is still written by the command as meant
            if cfg is not None:
                if not any(o.startswith("data.path=") for o in overrides):
                    inputs.append(cfg.data.path)  # the preset's store: train and plan read it
                if cmd.argv[1] == "train" and not any(o.startswith("run.dir=") for o in overrides):
                    outputs.add(cfg.run.dir)  # the preset's run
        for path in inputs:
            if path.startswith(("~", SHARED)):
                continue  # the reader's own files; the shared data sets (absent: a clear error, tested below)
            made = any(path == w or path.startswith(w + "/") for w in written)
            if not made and not (repo / path).exists():
                found.append(f"{where}: names {path}, which is not in the repository and no earlier command "
                             "in the README writes it")
        written |= {o.rstrip("/") for o in outputs}
    return found


def test_the_readme_names_no_missing_file_and_every_trmkit_command_parses():
    assert problems(README.read_text(encoding="utf-8")) == []


def test_the_check_finds_what_a_newcomer_would_trip_on():
    readme = """
```bash
bash scripts/demo.sh
trmkit data pairs --source data/sudoku6.jsonl --out data/pairs-s6 --blank 0
trmkit train configs/pairs-laptop.yaml data.path=data/pairs-s6 --minuets 8
trmkit predict runs/pairs-laptop new-puzzles.jsonl
trmkit predikt runs/pairs-laptop examples/sudoku6-puzzles.jsonl
trmkit train configs/pairs-laptop.yaml train.max_stepz=3
```

```python
trmkit.classify_mail("runs/email/bundle", "~/Mail/inbox.mbox")
```
"""
    found = "\n".join(problems(readme))
    assert "before `source .venv/bin/activate`" in found
    assert "names data/sudoku6.jsonl" in found  # read, never written
    assert "--minuets" in found
    assert "names new-puzzles.jsonl" in found
    assert "predikt" in found
    assert "max_stepz" in found
    assert "names runs/email/bundle" in found
    assert "names runs/pairs-laptop," not in found  # the preset's run.dir, written by train
    assert "names ~/Mail" not in found and "names .venv" not in found


def _scratch(tmp_path: Path) -> Path:
    """A folder that looks like the repository to a command: its inputs linked, its outputs its own.
    `../shared` (the shared data sets) does not exist beside it."""
    work = tmp_path / "repo"
    work.mkdir()
    for name in LINKED:
        (work / name).symlink_to(REPO / name, target_is_directory=True)
    return work


def _expect(argv: list[str]) -> str | None:
    """How a trmkit command is run here: "ok" (exit 0), "missing-shared" (exit 2, one line), None (parse only)."""
    if argv[1:] == ["--version"] or argv[1:2] in (["hw"], ["plan"]):
        return "ok"
    if argv[1:2] == ["data"]:
        source = argv[argv.index("--source") + 1] if "--source" in argv else "generate"
        if source.startswith("~"):
            return None  # the reader's own mail
        return "missing-shared" if source.startswith(SHARED) else "ok"
    return None  # train, eval, predict, email, rl: minutes, or a trained run


def _to_run(cmd: Command) -> list[tuple[list[str], str]]:
    """(argv, expectation) for what runs of a README command: itself, or for `bash scripts/X.sh` the data it
    builds (the store scripts/demo.sh leaves behind is the one `trmkit plan configs/sudoku-laptop.yaml` reads)."""
    if cmd.kind == "python-block" and re.match(r"\w+ = trmkit\.build_data\(", cmd.text):
        return [([sys.executable, "-c", f"import trmkit\n{cmd.text}"], "ok")]
    if cmd.kind == "python":
        return [([sys.executable, *_fewer(cmd.argv[1:])], "ok")]
    if cmd.kind == "trmkit":
        expect = _expect(cmd.argv)
        return [([sys.executable, "-m", "trmkit", *cmd.argv[1:]], expect)] if expect else []
    if cmd.kind == "bash" and cmd.argv[1:2] and cmd.argv[1].startswith("scripts/"):
        lines = [line for line in script_commands(REPO / cmd.argv[1]) if line[1:2] == ["data"]]
        return [([sys.executable, "-m", "trmkit", *_fewer(line[1:])], "ok") for line in lines if _expect(line) == "ok"]
    return []


def _fewer(argv: list[str]) -> list[str]:
    """`--num N` at most FEWER: a data generator that is not itself a README `trmkit` line (the Python one, the
    demo's) writes the same kind of file in a few seconds; what reads it runs as written."""
    return [str(min(int(t), FEWER)) if i and argv[i - 1] == "--num" and t.isdigit() else t for i, t in enumerate(argv)]


def test_the_readme_commands_that_take_seconds_run_as_written(tmp_path):
    work = _scratch(tmp_path)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    ran, failed = [], []
    for cmd in commands(README.read_text(encoding="utf-8")):
        for argv, expect in _to_run(cmd):
            proc = procs.run(argv, timeout=PER_COMMAND_TIMEOUT, cwd=work, env=env, capture_output=True, text=True)
            ran.append(cmd.text)
            said = (proc.stdout + proc.stderr).strip()
            where = f"README.md:{cmd.line}: {cmd.text}" + (f" ({' '.join(argv[3:])})" if cmd.kind == "bash" else "")
            if expect == "ok" and proc.returncode != 0:
                failed.append(f"{where}: exit {proc.returncode}:\n{said[-2000:]}")
            elif expect == "missing-shared":
                source = argv[argv.index("--source") + 1]
                last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
                if proc.returncode != 2 or "Traceback" in proc.stderr or source not in last:
                    failed.append(f"{where}: with {SHARED} absent it should end in one line naming {source} "
                                  f"(exit 2), got exit {proc.returncode}:\n{said[-2000:]}")
    assert not failed, "\n\n".join(failed)
    # the README's first steps are among them (a rewrite that drops one should drop it here too)
    for first in ("trmkit --version", "trmkit hw", "trmkit plan", "trmkit data maze", "trmkit data pairs"):
        assert any(t.startswith(first) for t in ran), first
    assert any("build_data" in t for t in ran)
    assert (work / "data" / "easy").is_dir() and (work / "data" / "pairs-s6").is_dir()


def test_the_demo_answers_the_example_puzzles_with_the_run_it_trained():
    script = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8")
    lines = [line.strip() for line in script.splitlines()]
    train = next(i for i, line in enumerate(lines) if "train configs/" in line and 'run.dir="$RUN"' in line)
    evaluate = next(i for i, line in enumerate(lines) if line.endswith('eval "$RUN"'))
    predict = next(i for i, line in enumerate(lines) if 'predict "$RUN" examples/sudoku-puzzles.txt' in line)
    assert train < evaluate < predict
    assert (REPO / "examples" / "sudoku-puzzles.txt").is_file()
